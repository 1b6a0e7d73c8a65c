/*
 * A job's life as events (SPEC 11): added, started, progress, retrying, done,
 * dead, cancelled, removed, paused, resumed. The queues tell the host what
 * happens (wq_events_emit); listeners hear it: the HTTP event streams
 * (GET /events, http_events.c) subscribe to a queue or all, and waiters for
 * one key's end (GET item ?wait=, q:wait) are told once it finishes. With
 * nobody listening an emit costs one test (wq_events_wanted), so the hot
 * paths build nothing for it.
 */
#ifndef WQ_EVENTS_H
#define WQ_EVENTS_H

#include "host/host.h"

#include <event2/buffer.h>

typedef enum wq_life_type {
    WQ_LIFE_ADDED,
    WQ_LIFE_STARTED,
    WQ_LIFE_PROGRESS,
    WQ_LIFE_RETRYING,
    WQ_LIFE_DONE,
    WQ_LIFE_DEAD,
    WQ_LIFE_CANCELLED,
    WQ_LIFE_REMOVED,
    WQ_LIFE_PAUSED,
    WQ_LIFE_RESUMED,
    WQ_LIFE_NTYPES
} wq_life_type;

/* One event (strings borrowed for the call). */
typedef struct wq_life {
    wq_life_type type;
    const char *queue;
    const char *key; /* NULL: a queue's event (paused, resumed) */
    size_t keylen;
    int64_t attempt;  /* the run it concerns, 0: none (added, removed, a queue's) */
    const char *data; /* JSON text: progress's value, a done run's result; NULL: none */
    size_t datalen;
    const char *error;  /* retrying, dead, cancelled: the run's error; NULL: none */
    double retry_in;    /* retrying: seconds until the next run */
    double at;          /* Unix seconds */
    double added_at;    /* an end (done, dead, cancelled, removed): when it was added, 0: unknown */
    double started_at;  /* an end: its last run's start, 0: it never ran */
    const char *runner; /* NULL: this runner */
    uint64_t seq;       /* set by wq_events_emit: tells one emit's event from the next */
} wq_life;

/* The name of the type as the stream shows it ("added", ...). */
const char *wq_life_name(wq_life_type t);
/* Whether t ends a key's life (done, dead, cancelled, removed). */
int wq_life_ends(wq_life_type t);

typedef struct wq_events wq_events;

/* Whether anyone listens for queue events (the emitters test this first). */
static inline int wq_events_wanted(const wq_host *h)
{
    return h->listeners > 0 || h->relaying;
}

/* Whether anyone listens for events of queue: a stream of every queue or of it, a wait for one
 * of its keys, another runner (relaying). Its answer holds while h->events_gen stays (callers
 * keep it per queue). */
int wq_events_wanted_for(wq_host *h, const char *queue);

/* Tells the listeners (at wq_events_wanted only; e->at and runner filled in when 0/NULL). An
 * event of this runner's (runner NULL) also goes to the runners of a shared database that
 * listen. */
void wq_events_emit(wq_host *h, const wq_life *e);

/* e as one JSON object (no newline): {"event", "queue", "key", "attempt", "runner", "at", ...};
 * max > 0: a progress or result that would make it longer than max bytes is left out (and
 * "truncated": true said). 0, or -1 on OOM. */
int wq_life_json(struct evbuffer *b, const wq_life *e, size_t max);

/* The backend's relay hooks (wq_backend_opts.relayed, .relay; ud: the host). */
void wq_events_relayed(void *ud, const char *json, size_t n);
void wq_events_relay(void *ud, int on);

/* A stream's subscription: fn(ud, e) for every event of queue (NULL: all queues). */
typedef struct wq_events_sub wq_events_sub;
wq_events_sub *wq_events_subscribe(wq_host *h, const char *queue,
                                   void (*fn)(void *ud, const wq_life *e), void *ud);
void wq_events_unsubscribe(wq_host *h, wq_events_sub *s);

/* A wait for the end of one key: fn(ud, e) once, with the event that ended it (the wait is
 * gone by then); cancelled with wq_events_unwait before that. NULL on OOM. */
typedef struct wq_events_wait wq_events_wait;
wq_events_wait *wq_events_wait_key(wq_host *h, const char *queue, const char *key, size_t len,
                                   void (*fn)(void *ud, const wq_life *e), void *ud);
void wq_events_unwait(wq_host *h, wq_events_wait *w);

/* This runner's name in events ("HOST:PID" or --runner-name). */
const char *wq_events_runner(wq_host *h);

/* Frees what the events keep (at the host's end; the listeners are gone by then). */
void wq_events_free(wq_host *h);

#endif
