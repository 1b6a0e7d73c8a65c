/*
 * The Lua queue object (wq.Queue) and its handler worker pool.
 */
#ifndef WQ_LQUEUE_H
#define WQ_LQUEUE_H

#include "engine/keymap.h"
#include "engine/queue.h"
#include "engine/ratelimit.h"
#include "host/host.h"

struct wq_store_queue;

typedef struct lqueue {
    wq_host *host;
    wq_queue *q;
    char name[65];
    int ref;         /* registry: the userdata (queues live as long as the host) */
    int handler_ref; /* registry: handler function, LUA_NOREF without one */
    int workers;
    int live_workers;
    int limiter_ref; /* registry: the Lua limiter object */
    wq_limiter *limiter;
    int64_t max_retries;
    int64_t timeout_ns; /* 0: none */
    int persist;
    wq_keymap *failures; /* the queue's failure count per key */
    int dead_ref;        /* registry: table key -> dead letter */
    uint64_t ndone, nfailures, ndead, ntimeouts, nsuccess, nrequeued;
    int stopping;         /* graceful stop: workers take no new items */
    wq_waitlist getters;  /* tasks waiting in get */
    wq_waitlist drainers; /* tasks waiting in shutdown_with_drain */
    struct wq_store_queue *sq;
} lqueue;

/* Adds every delayed key of lq that is due now. */
void lqueue_fire_due(lqueue *lq);
/* Whether lq has a handler and holds queued or processing items. */
int lqueue_busy(const lqueue *lq);
/* Starts a graceful stop: no new hand-out to workers. */
void lqueue_stop(lqueue *lq);
/* Adds from outside Lua (inbox, HTTP): key, JSON payload text or NULL, delay seconds, priority. */
int lqueue_add_external(lqueue *lq, const char *key, size_t keylen, const char *payload,
                        size_t paylen, double after, const int32_t *priority);
/* Finds a queue by name, or NULL. */
lqueue *lqueue_find(wq_host *h, const char *name);
/* Registers the queue type and wq.queue / wq.requeue in the table at the top of L. */
void wq_lua_open_queue(lua_State *L);
/* Registers wq.limiter and wq.backoff in the table at the top of L. */
void wq_lua_open_limiter(lua_State *L);
/* Pushes a new wq.limiter.default() object and returns its limiter. */
wq_limiter *wq_lua_push_default_limiter(lua_State *L);
/* The limiter inside the Lua limiter object at idx (raises if not one). */
wq_limiter *wq_lua_checklimiter(lua_State *L, int idx, const char *fn, const char *arg);

#endif
