/*
 * The Lua queue object (wq.Queue): an engine queue, its methods, and the
 * face it shows the host (wq_queue_ops). The handler workers' policy is
 * lworker.c.
 */
#ifndef WQ_LQUEUE_H
#define WQ_LQUEUE_H

#include "engine/keymap.h"
#include "engine/queue.h"
#include "engine/ratelimit.h"
#include "lua/sched.h"
#include "store/backend.h"

typedef struct lqueue {
    wq_host *host;
    lua_State *L; /* the main thread (for the host's calls, outside any task) */
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
    wq_keymap *failures;    /* the queue's failure count per key (lfailures.c) */
    size_t nfail_zero;      /* of them, keys kept at 0 (claimed from a shared database) */
    wq_keymap *last_errors; /* the message of each key's last failed run (lfailures.c) */
    int dead_ref;           /* registry: table key -> dead letter */
    uint64_t ndone, nfailures, ndead, ntimeouts, nsuccess, nrequeued, ncancelled;
    int stopping;         /* graceful stop: workers take no new items */
    wq_waitlist getters;  /* tasks waiting in get */
    wq_waitlist drainers; /* tasks waiting in shutdown_with_drain */
    wq_bqueue *bq;        /* its persistence, NULL without one (no --db, persist = false) */
    int keys_ref;         /* registry: record id + 1 -> the key's Lua string */
    struct lslot *slots;  /* per engine record id, see lqueue.c */
    uint32_t nslots;
    uint32_t nkept;         /* slots with a kept key string */
    uint32_t dropped[1024]; /* ids whose kept string the key table still holds (KEEP_MAX) */
    uint32_t ndropped;
    int job_arg;         /* the handler takes a third argument (the job table) */
    int raw_payload;     /* the handler (a pool's, lpool.c) takes the payload's JSON text and the
                            attempt: (key, text or nil, attempt) */
    int on_dead_ref;     /* registry: on_dead hook, LUA_NOREF without one */
    double keep_done;    /* seconds a finished key is remembered, 0: not at all */
    int unique;          /* the unique option: adds are unique unless they say unique = false */
    double history;      /* the history option: seconds a finished run is kept, 0: none */
    wq_keymap *done_mem; /* finished keys -> their memory (see done_entry in lqueue.c) */
    uint64_t prune_timer;
    size_t prune_pos;           /* where the next prune batch starts in done_mem */
    int done_lost;              /* the file may hold done rows no memory knows of: sweep it */
    struct lcron *crons;        /* its schedules (lcron.c) */
    int group_of_ref;           /* registry: the group_of option, LUA_NOREF without one */
    struct add_wait *add_waits; /* adds a backend has not answered yet (lqueue.c) */
    wq_keymap *progress;        /* running keys -> their progress (lprogress.c), NULL: none yet */
    uint64_t told_gen;          /* host->events_gen when told was asked last (lqueue_told) */
    int told;                   /* whether anyone listens for its events, as of told_gen */
    wq_keymap *flow_claims;     /* claimed items of flows' nodes -> their flow, deps (lflow.c) */
    struct lremote *remote;     /* items leased to remote workers (lremote.c), NULL: none yet */
    struct {
        int kind; /* LFLOW_DONE, LFLOW_DEAD, 0: nothing stashed */
        char *text;
        size_t len;
    } flow_stash; /* the outcome of the node's item being finished (lflow.c) */
} lqueue;

/* What the binding keeps per engine record id. */
typedef struct lslot {
    const char *key; /* the kept Lua string's bytes, NULL when not kept */
    double enqueued; /* wall clock when the record was made (job.enqueued_at) */
} lslot;

/*
 * Registers the queue type and wq.queue in the table at the top of L; puts
 * the method table and the C half of q:dead() in the internals table.
 */
void wq_lua_open_queue(lua_State *L, int internals);
/* The queue's name. */
const char *wq_lqueue_name(const lqueue *lq);
/* Detaches lq from the state file and frees its engine queue (before lua_close). */
void lqueue_close(lqueue *lq);

/* Raises the Lua error for engine error err in fn ("fn: bad argument 'key' (...)", ...). */
int lqueue_raise(lua_State *L, const char *fn, int err);
/*
 * Pushes the key and the raw payload text (or nil) of a record just handed
 * out by wq_queue_get.
 */
void lqueue_push_taken(lua_State *L, lqueue *lq, const wq_item_info *info);
/* Replaces the raw payload text on top of the stack with its decoded value. */
void lqueue_decode_top(lua_State *L);
/* self of a queue method: the wq.Queue at index 1 (raises a named error otherwise). */
lqueue *lqueue_check(lua_State *L, const char *fn);
/*
 * An operator action (SPEC 7.5) on a backend that applies them itself (PostgreSQL): the
 * calling task waits for the answer and continues in k with (result, text) on the stack (see
 * wq_bop_fn), so this does not return. Returns 0 when the runtime applies the action itself
 * (SQLite, a queue without a backend). Raises when the caller cannot wait.
 */
int lqueue_op(lua_State *L, lqueue *lq, const char *fn, const wq_bop *op, lua_KContext ctx,
              lua_KFunction k);
/* In a continuation of lqueue_op, with (result, text) on the stack: raises the error of a
 * failed action (or an interrupted wait) naming q:fn; else returns the result. */
lua_Integer lqueue_check_answer(lua_State *L, const char *fn);
/* Pushes the value of the answer's JSON text (raises naming q:fn if it is not JSON). */
void lqueue_push_answer(lua_State *L, const char *fn);
/* Cancels a task's wait in get (its wait data is the queue). */
void lqueue_get_cancel(wq_task *t);
/* Wall-clock Unix time the pending item of record id was first added. */
double lqueue_enqueued_at(const lqueue *lq, uint32_t id);
/* Notes the record an engine add just made or found (call after every add that returned >= 0). */
void lqueue_note_add(lqueue *lq);
/*
 * Completed-job memory (SPEC 7.2, keep_done): remembers that key succeeded
 * now, with its result (JSON text, may be NULL); no-op when keep_done is 0.
 */
void lqueue_remember_done(lqueue *lq, const char *key, size_t len, const char *result, size_t rlen);
/* Whether key is remembered as done within keep_done: 1 with its time (Unix seconds) and result
 * (JSON text, NULL: none; valid while it is remembered), else 0. */
int lqueue_done_lookup(const lqueue *lq, const char *key, size_t len, double *at,
                       const char **result, size_t *rlen);
/* The same at a given time; persist: also write it to the state file (not when restoring). */
void lqueue_remember_done_at(lqueue *lq, const char *key, size_t len, double at, const char *result,
                             size_t rlen, int persist);

#endif
