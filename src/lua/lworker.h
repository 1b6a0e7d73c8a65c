/*
 * Handler workers and the job-runner policy: outcomes, retries through
 * the limiter, dead letters, handler timeouts, failure counts.
 */
#ifndef WQ_LWORKER_H
#define WQ_LWORKER_H

#include "host/events.h"
#include "lua/lqueue.h"

/* What the restore callbacks need. */
typedef struct lworker_restore {
    lua_State *L;
    lqueue *lq;
    int nomem; /* something could not be restored for want of memory */
} lworker_restore;

/* Spawns lq's worker pool (raises on out-of-memory). */
void lworker_start(lua_State *L, lqueue *lq);
/* The queue's failure count for key. */
int64_t lworker_failures(lqueue *lq, const char *key, size_t len);
/* Clears key's failure count and the limiter's history. */
void lworker_forget(lqueue *lq, const char *key, size_t len);
/*
 * Cancels the handler run of key: it raises "cancelled" when it next runs
 * (a wait it is in ends now, killing a wq.exec child); then the key is
 * done, neither retried nor dead-lettered. 0, WQ_ENOENT (nothing pending),
 * WQ_EBUSY (pending, but no handler worker runs it).
 */
int lworker_cancel(lqueue *lq, const char *key, size_t len);
/* Pushes the queue's dead-letter table (key -> entry). */
void lworker_push_dead(lua_State *L, lqueue *lq);
/* wq_bq_restore callbacks (ud: an lworker_restore); they never raise. */
void lworker_restore_failure(void *ud, const char *key, size_t len, int64_t requeues,
                             const char *last_error);
void lworker_restore_dead(void *ud, const wq_dead_row *d);
/* A finished run of key: a row of the queue's history (kept by its backend; none without one or
 * with history = 0) and its event (done, dead, cancelled, removed) for whoever listens.
 * added/started: Unix seconds, 0 unknown / never ran. */
void lworker_history(lqueue *lq, const char *key, size_t len, wq_hist_state state, double added,
                     double started, int64_t attempts, const char *result, size_t rlen,
                     const char *error);

/* Whether anyone listens for lq's events (a stream, a waiter, another runner): two tests while
 * nothing changed who listens. */
static inline int lqueue_told(lqueue *lq)
{
    wq_host *h = lq->host;
    if (h->listeners <= 0 && !h->relaying)
        return 0;
    if (lq->told_gen != h->events_gen) {
        lq->told = wq_events_wanted_for(h, lq->name);
        lq->told_gen = h->events_gen;
    }
    return lq->told;
}

/*
 * The end of a run a handler worker did not make (a remote worker's, lremote.c), as a handler's
 * ends: done with its result (JSON text, NULL: none); failed (retried through the limiter, or
 * dead-lettered when permanent or out of retries; retry_in ns, < 0: the limiter's); cancelled;
 * or handed back (pending again, no failure counted: a lease that ran out). They may raise
 * (out of memory): call them protected.
 */
void lworker_end_done(lua_State *L, lqueue *lq, const char *key, size_t klen, const char *r,
                      size_t rlen);
void lworker_end_failed(lua_State *L, lqueue *lq, const char *key, size_t klen, const char *err,
                        int permanent, int64_t retry_in);
void lworker_end_cancelled(lua_State *L, lqueue *lq, const char *key, size_t klen);
void lworker_end_handed_back(lua_State *L, lqueue *lq, const char *key, size_t klen);

/* An event of key's life other than its end, for whoever listens (call at wq_events_wanted). */
void lworker_event(lqueue *lq, wq_life_type type, const char *key, size_t len, int64_t attempt,
                   const char *data, size_t dlen, const char *error, double retry_in);

#endif
