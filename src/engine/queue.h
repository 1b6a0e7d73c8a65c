/*
 * The work queue: client-go's workqueue (Add/Get/Done/Len/ShutDown/
 * ShutDownWithDrain), its delaying section (AddAfter) and controller-runtime
 * style priorities, as a single-threaded structure driven by its caller.
 *
 * Every key has one record while anything is pending for it: dirty (queued,
 * or re-added while processing), processing, or waiting (a delayed add).
 * The record carries the key's payload and priority and is dropped when
 * nothing is pending any more. Nothing blocks: get() answers WQ_EEMPTY and
 * the observer tells the caller when to try again.
 */
#ifndef WQ_QUEUE_H
#define WQ_QUEUE_H

#include "engine/clock.h"
#include "engine/common.h"
#include "engine/group.h"
#include "engine/metrics.h"

typedef struct wq_queue wq_queue;

/* Limits on what a record can hold. */
#define WQ_KEY_MAX ((1u << 27) - 1)
#define WQ_PAYLOAD_MAX UINT32_MAX

/* State bits of a record, as reported by wq_queue_lookup. */
enum {
    WQ_ST_DIRTY = 1,      /* needs processing (counted in depth) */
    WQ_ST_PROCESSING = 2, /* handed out, not done */
    WQ_ST_QUEUED = 4,     /* in the ready store, will be handed out by get */
    WQ_ST_WAITING = 8,    /* a delayed add is pending (ready_at) */
};

/* What the observer hears. Key events name the key; the others pass NULL, 0. */
typedef enum wq_event {
    WQ_EV_QUEUED,     /* key entered the ready store: a get can take it */
    WQ_EV_DIRTY,      /* key re-added while processing: runs again after done */
    WQ_EV_PROCESSING, /* key handed out by get */
    WQ_EV_WAITING,    /* a delayed add for key is pending, or moved earlier */
    WQ_EV_UPDATED,    /* key's payload or priority changed, nothing else */
    WQ_EV_GONE,       /* nothing is pending for key any more */
    WQ_EV_IDLE,       /* the processing set became empty */
    WQ_EV_SHUTDOWN,   /* shutdown began */
    WQ_EV_READY       /* a limit let go: one more get can hand something out */
} wq_event;

/*
 * Called synchronously after each state change, with the queue consistent.
 * It must not call back into the queue for key events (read-only calls
 * such as wq_queue_lookup are fine).
 */
typedef void (*wq_observer_fn)(void *ud, wq_queue *q, wq_event ev, const char *key, size_t keylen);

/* Optional parts of an add: a payload and a priority (absent: keep current). */
typedef struct wq_add_opts {
    const char *payload; /* bytes, copied */
    size_t paylen;
    int set_payload; /* nonzero: replace the payload with the bytes above */
    int set_priority;
    int32_t priority;  /* higher is handed out first; default 0 */
    const char *group; /* the key's group when the add creates its record; NULL: none */
    size_t grouplen;   /* at most WQ_GROUP_MAX */
} wq_add_opts;

/* A record as seen from outside. Pointers are valid until the next call that changes key. */
typedef struct wq_item_info {
    uint32_t id; /* the record's id: stable while the key has a record, reused after */
    const char *key;
    size_t keylen;
    const char *payload; /* NULL when the key has no payload */
    size_t paylen;
    int32_t priority;
    unsigned state;     /* WQ_ST_* bits */
    int64_t ready_at;   /* absolute ns of the pending delayed add (WQ_ST_WAITING) */
    int64_t added_at;   /* when the key last became dirty (WQ_ST_DIRTY) */
    int64_t started_at; /* when it was handed out (WQ_ST_PROCESSING), else 0 */
    const char *group;  /* the key's group, NULL for none */
    size_t grouplen;
} wq_item_info;

/* A new queue reading time from clock (borrowed; must outlive it). NULL on OOM. */
wq_queue *wq_queue_new(const wq_clock *clock);
/* Frees the queue and every record. NULL is fine. */
void wq_queue_free(wq_queue *q);
/* Installs the observer (NULL to remove). */
void wq_queue_set_observer(wq_queue *q, wq_observer_fn fn, void *ud);

/*
 * Add: marks key dirty and queues it unless it is processing. A key's
 * group is the one named by the add that created its record; it stays
 * while anything is pending for the key. Returns 1 if
 * key became dirty, 0 if it already was (payload replaced, priority raised
 * when given), WQ_ESHUTDOWN (ignored), WQ_ENOMEM or WQ_E2BIG (nothing changed).
 */
int wq_queue_add(wq_queue *q, const char *key, size_t len, const wq_add_opts *opts);
/*
 * Get: hands out the first queued record, by priority then FIFO, whose
 * group is under its limits (when the queue-wide rate allows one). Returns
 * 0 and fills *out, WQ_EEMPTY when nothing can be handed out now (the
 * observer hears WQ_EV_QUEUED or WQ_EV_READY when that changes),
 * WQ_ESHUTDOWN when nothing is queued and the queue is shut down.
 */
int wq_queue_get(wq_queue *q, wq_item_info *out);
/*
 * Done: key finished processing; queues it again if it was re-added.
 * Returns 0, WQ_ENOENT if key was not processing (ignored), or WQ_ENOMEM
 * (key stays processing; try again).
 */
int wq_queue_done(wq_queue *q, const char *key, size_t len);
/*
 * Pause (paused != 0) or resume dispatch (SPEC 7.5): a paused queue takes
 * adds and delayed adds as usual, but get hands nothing out (WQ_EEMPTY, or
 * WQ_ESHUTDOWN once shut down). Resuming wakes nobody: the caller wakes
 * its waiting getters. Returns 1 if the state changed, else 0.
 */
int wq_queue_set_paused(wq_queue *q, int paused);
/* Whether dispatch is paused. */
int wq_queue_paused(const wq_queue *q);
/*
 * Remove: drops key's queued entry and pending delayed add, as if it had
 * never been added (depth goes down; the observer hears WQ_EV_GONE).
 * Returns 0, WQ_ENOENT (nothing pending for key) or WQ_EBUSY (key is
 * processing: nothing changed).
 */
int wq_queue_remove(wq_queue *q, const char *key, size_t len);
/* Len: number of keys in the ready store. */
size_t wq_queue_len(const wq_queue *q);
/* ShutDown: no more adds, delayed adds freeze, a drain in progress is released. */
void wq_queue_shutdown(wq_queue *q);
/* ShutDownWithDrain's first half: shut down and ask to wait for processing. */
void wq_queue_shutdown_drain(wq_queue *q);
/* Whether a drain waiter must keep waiting: drain requested, not released, processing left. */
int wq_queue_draining(const wq_queue *q);
/* ShuttingDown. */
int wq_queue_shutting_down(const wq_queue *q);

/*
 * AddAfter: counts a retry; delay <= 0 adds now; otherwise key waits until
 * now + delay, keeping an earlier pending time. Returns what add returns for
 * delay <= 0; else 1 if the entry was added or moved earlier, 0 if the
 * earlier one was kept; WQ_ESHUTDOWN, WQ_ENOMEM, WQ_E2BIG.
 */
int wq_queue_add_after(wq_queue *q, const char *key, size_t len, int64_t delay_ns,
                       const wq_add_opts *opts);
/* As add_after with an absolute ready time and no retry counted (restore). */
int wq_queue_add_at(wq_queue *q, const char *key, size_t len, int64_t ready_at,
                    const wq_add_opts *opts);
/* Cancels key's pending delayed add. Returns 1 if there was one, else 0. */
int wq_queue_cancel_after(wq_queue *q, const char *key, size_t len);
/*
 * The earliest time something is due: a delayed add (none once shut down)
 * or a token a held-back group or the queue-wide rate waits for; WQ_NEVER.
 */
int64_t wq_queue_next_ready(const wq_queue *q);
/*
 * Adds every delayed key that is due at the clock's now and lets go of
 * groups whose token came. Returns the count of adds or WQ_ENOMEM.
 */
int wq_queue_fire_due(wq_queue *q);

/*
 * Limits (SPEC 7.4). The default limit of every group; the limit of one
 * group (lim NULL: back to the default); the queue-wide rate (0: none).
 * Return 0, WQ_EINVAL (a negative or NaN field), WQ_E2BIG (group name too
 * long) or WQ_ENOMEM, nothing changed on error.
 */
int wq_queue_set_group_default(wq_queue *q, const wq_limit *lim);
int wq_queue_set_group_limit(wq_queue *q, const char *group, size_t len, const wq_limit *lim);
int wq_queue_set_rate(wq_queue *q, double per_second, double burst);
/* The limit group applies (its own or the default); 1 if it has its own, else 0. */
int wq_queue_group_limit(const wq_queue *q, const char *group, size_t len, wq_limit *out);
/* Number of groups with queued records. */
size_t wq_queue_groups(const wq_queue *q);
/* Number of queued records a limit holds back at the clock's now. */
size_t wq_queue_throttled(const wq_queue *q);

/* One group as an operator sees it (GET /queues/NAME/groups); strings belong to the queue. */
typedef struct wq_group_view {
    const char *name;
    size_t namelen;
    uint32_t held;   /* queued records its limits hold back now */
    uint32_t queued; /* queued records (held ones included) */
    uint32_t active; /* handed out, not done */
    wq_limit lim;    /* the limit it applies */
    int own;         /* lim is its own (q:set_group_limit), not the queue's default */
} wq_group_view;

/*
 * Calls fn for the (at most max) groups holding back the most queued
 * records, most first (ties by name). Returns how many groups hold records
 * back, or WQ_ENOMEM.
 */
int64_t wq_queue_most_held_groups(const wq_queue *q, size_t max,
                                  void (*fn)(void *ud, const wq_group_view *g), void *ud);

/* Fills *info for key; returns 1 if key has a record, else 0. */
int wq_queue_lookup(const wq_queue *q, const char *key, size_t len, wq_item_info *info);
/* Number of keys processing. */
size_t wq_queue_processing(const wq_queue *q);
/* Number of pending delayed adds; 0 once shut down (they are dropped, see WORKQUEUE.md). */
size_t wq_queue_waiting(const wq_queue *q);
/* Number of records (keys with anything pending). */
size_t wq_queue_records(const wq_queue *q);
/* The queue's metrics counters and histograms. */
const wq_metrics *wq_queue_metrics(const wq_queue *q);
/* Sum of ages and the oldest age, in seconds, of the processing keys at the clock's now. */
void wq_queue_work_ages(const wq_queue *q, double *unfinished, double *longest);
/*
 * Visits every record (order unspecified); stops early if fn returns nonzero
 * and returns that value. The queue must not change during the walk.
 */
int wq_queue_foreach(const wq_queue *q, int (*fn)(void *ud, const wq_item_info *info), void *ud);
/*
 * Record ids, for callers that keep something per pending key (the Lua
 * binding keeps the key's Lua string): the id of the key of the last add,
 * add_after or add_at that returned >= 0; the id of the key an observer is
 * told about, during the call; and a bound: every id is below it.
 */
uint32_t wq_queue_last_id(const wq_queue *q);
/* Whether that add created the record (1) or found it (0); *at is the clock's reading then. */
int wq_queue_last_created(const wq_queue *q, int64_t *at);
uint32_t wq_queue_event_id(const wq_queue *q);
uint32_t wq_queue_id_bound(const wq_queue *q);
/* Walks the whole structure checking its invariants; 0 if sound, else -1. */
int wq_queue_check(const wq_queue *q);

#endif
