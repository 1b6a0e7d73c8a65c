/*
 * wq.queue: the Lua face of an engine queue. Methods map one to one to
 * client-go's (add, get, done, ...); the observer wakes waiting tasks and
 * feeds the state file; the host reaches the queue only through the
 * wq_queue_ops at the bottom. The handler workers live in lworker.c.
 */
#include "lua/lqueue.h"
#include "lua/lremote.h"

#include "host/flows.h"
#include "lua/lflow.h"
#include "lua/lidle.h"

#include "host/timer.h"
#include "lua/lcron.h"
#include "lua/lfailures.h"
#include "lua/lgroup.h"
#include "lua/ljson.h"
#include "lua/llimiter.h"
#include "lua/lpool.h"
#include "lua/lqops.h"
#include "lua/lprogress.h"
#include "lua/lwait.h"
#include "lua/lworker.h"
#include "lua/lwq.h"
#include "store/backend.h"

#include <lauxlib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEEP_MAX 1024 /* key strings kept per queue (see "key strings" below) */

/* The wq.Queue metatable: self is checked by comparing pointers, no registry lookup. */
static const void *queue_mt;

static int bad_self(lua_State *L, const char *fn)
{
    return luaL_error(L, "q:%s: bad argument 'self' (queue expected, got %s; call it as q:%s(...))",
                      fn, luaL_typename(L, 1), fn);
}

/*
 * self of method fn: a wq.Queue (a q.fn(...) call instead of q:fn(...) is
 * the usual slip). Queues live as long as the Lua state (the registry holds
 * them), so an address once found to be a queue stays one: the last one
 * checked skips the metatable test.
 */
lqueue *lqueue_check(lua_State *L, const char *fn)
{
    static lqueue *last;
    lqueue *lq = lua_touserdata(L, 1);
    if (lq != last || !lq) {
        if (!lq || !lua_getmetatable(L, 1))
            bad_self(L, fn);
        if (lua_topointer(L, -1) != queue_mt)
            bad_self(L, fn);
        lua_pop(L, 1);
        last = lq;
    }
    if (!lq->q)
        luaL_error(L, "q:%s: queue is closed", fn);
    return lq;
}

int lqueue_raise(lua_State *L, const char *fn, int err)
{
    if (err == WQ_E2BIG)
        return wq_argerror(L, fn, "key", "key or payload too large");
    return luaL_error(L, "%s: %s", fn, wq_strerror(err));
}

static const wq_queue_ops lqueue_ops;
static void lqueue_stop(lqueue *lq);
static void prune_done(wq_host *h, void *data, uint64_t id);
static void arm_prune(lqueue *lq, double seconds);

/* ---- observer: wakes waiters and feeds the store ---- */

static void wake_all(wq_waitlist *w)
{
    wq_task *t;
    while ((t = wq_waitlist_pop(w)))
        wq_task_wake(t, 0);
}

static void observe(void *ud, wq_queue *q, wq_event ev, const char *key, size_t len)
{
    lqueue *lq = ud;
    switch (ev) {
    case WQ_EV_QUEUED:
    case WQ_EV_READY: {
        wq_task *t = wq_waitlist_pop(&lq->getters);
        if (t)
            wq_task_wake(t, 0);
        else if (lq->remote)
            lremote_ready(lq);
        break;
    }
    case WQ_EV_GONE: {
        uint32_t id = wq_queue_event_id(q);
        if (id < lq->nslots) {
            if (lq->slots[id].key) {
                lq->nkept--;
                if (lq->ndropped < KEEP_MAX) /* at most nkept of them */
                    lq->dropped[lq->ndropped++] = id;
            }
            lq->slots[id] = (lslot){NULL, 0};
        }
        break;
    }
    case WQ_EV_IDLE: wake_all(&lq->drainers); break;
    case WQ_EV_SHUTDOWN:
        wake_all(&lq->getters);
        wake_all(&lq->drainers);
        if (lq->remote)
            lremote_ready(lq);
        break;
    default: break;
    }
    if (lq->bq && key)
        wq_bq_touch(lq->bq, ev, key, len);
}

/* ---- a backend that claims (PostgreSQL): the engine holds what this runner claimed ---- */

static int grow_slots(lqueue *lq, uint32_t id);

/* Items wanted now: tasks waiting in get (handler workers or the script's own) less what
 * the engine already holds for them. */
static size_t bq_demand(void *ud)
{
    lqueue *lq = ud;
    if (lq->stopping || !lq->q || wq_queue_shutting_down(lq->q) || wq_queue_paused(lq->q))
        return 0;
    size_t waiting = lremote_demand(lq);
    for (wq_task *t = lq->getters.head; t; t = t->wnext)
        waiting++;
    size_t have = wq_queue_len(lq->q);
    return waiting > have ? waiting - have : 0;
}

static int bq_claimed(void *ud, const wq_claimed *c)
{
    lqueue *lq = ud;
    if (!lq->q)
        return WQ_ESHUTDOWN;
    wq_add_opts o = {.payload = c->payload,
                     .paylen = c->paylen,
                     .set_payload = c->payload != NULL,
                     .set_priority = 1,
                     .priority = c->priority,
                     .group = c->grp,
                     .grouplen = c->grplen};
    if (c->flow && lflow_claimed(lq, c) < 0)
        return WQ_ENOMEM;
    int r = wq_queue_add(lq->q, c->key, c->keylen, &o);
    if (r < 0) {
        lflow_released(lq, c->key, c->keylen);
        return r;
    }
    uint32_t id = wq_queue_last_id(lq->q);
    if (grow_slots(lq, id) == 0)
        lq->slots[id].enqueued = c->enqueued_at;
    /* The failure count travels with the item: job.attempt, retries and max_retries count
     * across runners. Kept at 0 too, so that a success is told from a plain done. */
    if (lfail_set(lq, c->key, c->keylen, c->requeues, NULL) < 0 ||
        wq_limiter_set_requeues(lq->limiter, c->key, c->keylen, c->requeues) < 0) {
        lfail_clear(lq, c->key, c->keylen);
        wq_queue_remove(lq->q, c->key, c->keylen);
        return WQ_ENOMEM;
    }
    return 0;
}

static void bq_released(void *ud, const char *key, size_t len)
{
    lqueue *lq = ud;
    lflow_released(lq, key, len);
    if (!lq->failures)
        return;
    lfail_clear(lq, key, len);
    wq_limiter_forget(lq->limiter, key, len);
}

/* Lease lost: every handler of the queue stops at its next yield (its item runs elsewhere). */
static void bq_lost(void *ud, const char *why)
{
    lqueue *lq = ud;
    lremote_committed(lq, NULL, 0, 0); /* reports waiting for their commit: not stored */
    lremote_lost(lq);
    for (wq_task *t = wq_sched_of(lq->L)->all; t; t = t->anext)
        if (t->kind == TASK_WORKER && t->queue == lq && t->job_key && !t->cancelled) {
            t->cancelled = 1;
            wq_task_interrupt(t, why);
        }
}

static void bq_changed(void *ud)
{
    wq_host_settle(((lqueue *)ud)->host);
}

static void bq_paused(void *ud, int paused)
{
    lqops_pause_local(ud, paused);
}

static void bq_redefined(void *ud, const wq_queue_def *def, const char *by)
{
    lqueue *lq = ud;
    if (def->max_retries >= 0 && def->max_retries != lq->max_retries) {
        wq_host_logl(lq->host, WQ_LOG_WARN,
                     "wqrun: warning: queue '%s': max_retries is %lld as runner '%s' defined it "
                     "since (the last runner started wins); it was %lld here",
                     lq->name, (long long)def->max_retries, by, (long long)lq->max_retries);
        lq->max_retries = def->max_retries;
    }
    if (def->keep_done >= 0 && def->keep_done != lq->keep_done) {
        wq_host_logl(lq->host, WQ_LOG_WARN,
                     "wqrun: warning: queue '%s': keep_done is %g s as runner '%s' defined it "
                     "since (the last runner started wins); it was %g s here",
                     lq->name, def->keep_done, by, lq->keep_done);
        lq->keep_done = def->keep_done; /* the database keeps the memories */
    }
}

static void bq_added(void *ud, const char *key, size_t len)
{
    lqueue *lq = ud;
    if (lqueue_told(lq))
        lworker_event(lq, WQ_LIFE_ADDED, key, len, 0, NULL, 0, NULL, 0);
}

static void bq_committed(void *ud, const char *key, size_t len)
{
    lremote_committed(ud, key, len, 1);
}

static void bq_cancel(void *ud, const char *key, size_t len)
{
    lqueue *lq = ud;
    if (lqops_cancel(lq, key, len) != WQ_EBUSY) /* a handler's or a remote worker's run */
        return;
    wq_item_info info; /* claimed and not started yet: it goes without running */
    if (wq_queue_lookup(lq->q, key, len, &info) == 1 && !(info.state & WQ_ST_PROCESSING))
        lqops_remove(lq, key, len);
}

/* An add the backend answers later: the task waiting for it, or NULL once abandoned. */
typedef struct add_wait {
    wq_task *t;
    lqueue *lq;
    struct add_wait *next, *prev; /* the queue's adds under way */
} add_wait;

static void add_wait_unlink(add_wait *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else if (w->lq)
        w->lq->add_waits = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->next = w->prev = NULL;
}

static void add_answered(void *ud, int result, const char *what)
{
    add_wait *w = ud;
    wq_task *t = w->t;
    add_wait_unlink(w);
    free(w);
    if (!t)
        return; /* the task went away meanwhile */
    t->wait = NULL;
    t->cancel = NULL;
    if (!lua_checkstack(t->co, 2)) { /* cannot tell it: it raises out of memory instead */
        wq_task_interrupt(t, "add: out of memory");
        return;
    }
    lua_pushinteger(t->co, result);
    lua_pushstring(t->co, what ? what : "");
    wq_task_wake(t, 2);
}

static void add_wait_cancel(wq_task *t)
{
    add_wait *w = t->wait;
    if (w)
        w->t = NULL;
}

int lqueue_op(lua_State *L, lqueue *lq, const char *fn, const wq_bop *op, lua_KContext ctx,
              lua_KFunction k)
{
    if (!lq->bq || wq_bq_op(lq->bq, op, NULL, NULL) == WQ_BACKEND_LOCAL)
        return 0;
    wq_task *t = wq_task_of(L);
    if (!t || !lua_isyieldable(L))
        return luaL_error(L,
                          "q:%s: cannot wait for the database here (call it from a task, a "
                          "handler or the main chunk)",
                          fn);
    add_wait *w = calloc(1, sizeof *w);
    if (!w)
        return luaL_error(L, "q:%s: out of memory", fn);
    int r = wq_bq_op(lq->bq, op, add_answered, w);
    if (r < 0) {
        free(w);
        if (r == WQ_EIO)
            return luaL_error(L, "q:%s: database unavailable", fn);
        if (r == WQ_EINVAL) /* an argument the database cannot take, named */
            return luaL_error(L, "q:%s: %s", fn, wq_backend_errmsg(lq->host->backend));
        lua_pushinteger(L, r); /* answered at once (a key the database cannot hold) */
        lua_pushliteral(L, "");
        return k(L, LUA_OK, ctx);
    }
    w->t = t;
    w->lq = lq;
    w->next = lq->add_waits;
    if (w->next)
        w->next->prev = w;
    lq->add_waits = w;
    t->wait = w;
    return wq_task_wait(L, t, add_wait_cancel, ctx, k);
}

/* After an add the backend decided: true (queued, follow-up, delayed or deduplicated),
 * false (skipped), or the error. */
static int add_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    wq_task_check_interrupt(L, wq_task_of(L));
    int result = (int)lua_tointeger(L, -2);
    const char *what = lua_tostring(L, -1);
    if (result < 0)
        return luaL_error(L, "%s: %s", (const char *)ctx,
                          what && *what ? what : wq_strerror(result));
    if (wq_add_reason(result)) {
        lua_pushboolean(L, 0);
        lua_pushstring(L, wq_add_reason(result));
        return 2;
    }
    lua_pushboolean(L, result == 1 || result == 0);
    return 1;
}

/* ---- key strings ----
 *
 * A key handed out by get is, when it can be, the Lua string an add
 * received rather than a new copy of the engine's bytes: a copy is a hash
 * and a probe of Lua's string table per item. Strings are kept in a table
 * indexed by the engine's record id (slots[id].key says which are
 * current); the observer forgets an id when its record goes, and the next
 * add clears its entry. At most KEEP_MAX are kept per queue: a kept string
 * stays alive until its key is done, and for keys made on the fly
 * ("user-" .. i) a million kept strings make Lua's heap and string table
 * big enough that every new string costs more (measured: 680 -> 1300 ns
 * per job). Deep queues therefore hand out copies past the first KEEP_MAX;
 * a working set of a few hundred keys (the common case: depth 1, a
 * controller's keys, dedup) is all kept.
 */
/* Makes room for record id in the slots; 0, or -1 on OOM. */
static int grow_slots(lqueue *lq, uint32_t id)
{
    if (id < lq->nslots)
        return 0;
    uint32_t ncap = lq->nslots ? lq->nslots : 64;
    while (ncap <= id)
        ncap *= 2;
    lslot *n = realloc(lq->slots, (size_t)ncap * sizeof *n);
    if (!n)
        return -1;
    memset(n + lq->nslots, 0, (size_t)(ncap - lq->nslots) * sizeof *n);
    lq->slots = n;
    lq->nslots = ncap;
    return 0;
}

/* Keeps the string at idx (absolute) as the key of record id. */
static void anchor_key(lua_State *L, lqueue *lq, uint32_t id, int idx)
{
    if (lq->nkept >= KEEP_MAX && lq->ndropped == 0)
        return; /* not kept: get makes a copy */
    if (grow_slots(lq, id) < 0)
        return;
    lua_rawgeti(L, LUA_REGISTRYINDEX, lq->keys_ref);
    /* Entries of records that went: let the collector have those strings. */
    while (lq->ndropped > 0) {
        uint32_t d = lq->dropped[--lq->ndropped];
        int overwritten = d == id && lq->nkept < KEEP_MAX; /* by this call, below */
        if (!overwritten && (d >= lq->nslots || !lq->slots[d].key)) {
            lua_pushnil(L);
            lua_rawseti(L, -2, (lua_Integer)d + 1);
        }
    }
    if (lq->nkept < KEEP_MAX) {
        lua_pushvalue(L, idx);
        lua_rawseti(L, -2, (lua_Integer)id + 1);
        lq->slots[id].key = lua_tostring(L, idx);
        lq->nkept++;
    }
    lua_pop(L, 1);
}

void lqueue_note_add(lqueue *lq)
{
    int64_t at;
    if (wq_queue_last_created(lq->q, &at)) {
        uint32_t id = wq_queue_last_id(lq->q);
        if (grow_slots(lq, id) == 0)
            lq->slots[id].enqueued = wq_host_unix(lq->host, at);
    }
}

double lqueue_enqueued_at(const lqueue *lq, uint32_t id)
{
    double at = id < lq->nslots ? lq->slots[id].enqueued : 0;
    return at > 0 ? at : wq_host_unix(lq->host, wq_host_now(lq->host));
}

/* The state file asks for an items row's enqueued_at when it writes it. */
static void item_meta(void *ud, const wq_item_info *info, wq_item_meta *out)
{
    const lqueue *lq = ud;
    if (info->id < lq->nslots)
        out->enqueued_at = lq->slots[info->id].enqueued;
    out->grp = info->group;
    out->grplen = info->grouplen;
}

/* After an add of the key at idx that returned >= 0. */
static void keep_added(lua_State *L, lqueue *lq, int idx)
{
    lqueue_note_add(lq);
    uint32_t id = wq_queue_last_id(lq->q);
    if (id >= lq->nslots || !lq->slots[id].key)
        anchor_key(L, lq, id, idx);
}

/* Pushes the key of record id (info), kept or copied. */
static void push_key(lua_State *L, lqueue *lq, const wq_item_info *info)
{
    uint32_t id = info->id;
    if (id < lq->nslots && lq->slots[id].key) {
        lua_rawgeti(L, LUA_REGISTRYINDEX, lq->keys_ref);
        lua_rawgeti(L, -1, (lua_Integer)id + 1);
        lua_replace(L, -2);
        return;
    }
    lua_pushlstring(L, info->key, info->keylen);
}

void lqueue_push_taken(lua_State *L, lqueue *lq, const wq_item_info *info)
{
    push_key(L, lq, info);
    if (!info->payload) {
        lua_pushnil(L);
        return;
    }
    size_t klen;
    const char *k = lua_tolstring(L, -1, &klen);
    wq_item_info cur;
    if (info->payload && wq_queue_lookup(lq->q, k, klen, &cur) == 1 && cur.payload)
        lua_pushlstring(L, cur.payload, cur.paylen);
    else
        lua_pushnil(L);
}

/* Replaces the raw payload text on top of the stack with its decoded value. */
void lqueue_decode_top(lua_State *L)
{
    if (lua_isnil(L, -1))
        return;
    size_t n;
    const char *raw = lua_tolstring(L, -1, &n);
    wq_push_payload(L, raw, n);
    lua_replace(L, -2);
}

void lqueue_get_cancel(wq_task *t)
{
    lqueue *lq = t->wait;
    wq_waitlist_remove(&lq->getters, t);
}

/* ---- construction ---- */

static int valid_name(const char *s, size_t n)
{
    if (n < 1 || n > 64)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

static void restore_item(void *ud, const wq_restored *r)
{
    lworker_restore *ctx = ud;
    lqueue *lq = ctx->lq;
    wq_add_opts o = {.payload = r->payload,
                     .paylen = r->paylen,
                     .set_payload = r->payload != NULL,
                     .set_priority = 1,
                     .priority = r->priority,
                     .group = r->grp,
                     .grouplen = r->grplen};
    int rc;
    if (r->queued) {
        rc = wq_queue_add(lq->q, r->key, r->keylen, &o);
        if (rc == WQ_ENOMEM)
            ctx->nomem = 1;
        else if (rc >= 0)
            lqueue_note_add(lq);
    }
    if (r->waiting) {
        rc = wq_queue_add_at(lq->q, r->key, r->keylen, r->ready_at_mono, &o);
        if (rc == WQ_ENOMEM)
            ctx->nomem = 1;
        else if (rc >= 0)
            lqueue_note_add(lq);
    }
    /* The time it was first added, from the file (kept across restarts). */
    wq_item_info info;
    if (r->enqueued_at > 0 && wq_queue_lookup(lq->q, r->key, r->keylen, &info) == 1 &&
        grow_slots(lq, info.id) == 0)
        lq->slots[info.id].enqueued = r->enqueued_at;
}

static void restore_done(void *ud, const char *key, size_t len, double finished_at,
                         const char *result, size_t rlen)
{
    lqueue *lq = ((lworker_restore *)ud)->lq;
    lqueue_remember_done_at(lq, key, len, finished_at, result, rlen, 0);
}

static void restore_schedule(void *ud, const wq_schedule_row *row)
{
    lcron_restore(((lworker_restore *)ud)->lq, row);
}

static const char *const queue_opts[] = {
    "handler",   "workers",  "limiter",     "max_retries", "timeout", "persist", "on_dead",
    "keep_done", "group_of", "group_limit", "rate",        "unique",  "history", NULL};

static int queue_new(lua_State *L)
{
    size_t nlen;
    if (lua_type(L, 1) != LUA_TSTRING) /* before lua_tolstring, which converts numbers */
        wq_argerror(L, "queue", "name",
                    lua_pushfstring(L, "string expected, got %s", luaL_typename(L, 1)));
    const char *name = lua_tolstring(L, 1, &nlen);
    if (!valid_name(name, nlen))
        wq_argerror(L, "queue", "name", "1-64 characters of [A-Za-z0-9_.-]");
    if (!lua_isnoneornil(L, 2) && !lua_istable(L, 2))
        wq_argerror(L, "queue", "opts",
                    lua_pushfstring(L, "table expected, got %s", luaL_typename(L, 2)));
    lua_settop(L, 2);
    if (lua_isnil(L, 2)) {
        lua_newtable(L);
        lua_replace(L, 2);
    }
    wq_checkopts(L, 2, "queue", queue_opts);
    wq_host *h = wq_host_of(L);
    if (wq_host_find_queue(h, name))
        wq_argerror(L, "queue", "name", lua_pushfstring(L, "queue '%s' already exists", name));

    int handler = lua_getfield(L, 2, "handler"); /* 3 */
    /* A process pool runs the jobs: a C function over it (lpool.c), one worker per process. */
    int pool_size = handler == LUA_TUSERDATA ? wq_lpool_handler(L, 3, name) : 0;
    if (pool_size > 0)
        handler = LUA_TFUNCTION;
    if (handler != LUA_TNIL && handler != LUA_TFUNCTION)
        wq_argerror(L, "queue", "handler",
                    lua_pushfstring(L, "function or pool expected, got %s", luaL_typename(L, 3)));
    lua_Integer workers = pool_size > 0 ? pool_size : 1;
    if (lua_getfield(L, 2, "workers") != LUA_TNIL) { /* 4 */
        if (!lua_isinteger(L, 4) || lua_tointeger(L, 4) <= 0 || lua_tointeger(L, 4) > 100000)
            wq_argexpected(L, 4, "queue", "workers", "integer > 0");
        workers = lua_tointeger(L, 4);
    }
    lua_Integer max_retries = 5;
    int has_max_retries = lua_getfield(L, 2, "max_retries") != LUA_TNIL; /* 5 */
    if (has_max_retries) {
        if (!lua_isinteger(L, 5) || lua_tointeger(L, 5) < 0)
            wq_argexpected(L, 5, "queue", "max_retries", "integer >= 0");
        max_retries = lua_tointeger(L, 5);
    }
    double timeout = 0;
    if (lua_getfield(L, 2, "timeout") != LUA_TNIL) /* 6 */
        timeout = wq_checkduration(L, 6, "queue", "timeout", 1);
    int persist = 1;
    if (lua_getfield(L, 2, "persist") != LUA_TNIL) { /* 7 */
        if (!lua_isboolean(L, 7))
            wq_argexpected(L, 7, "queue", "persist", "boolean");
        persist = lua_toboolean(L, 7);
    }
    wq_limiter *limiter;
    if (lua_getfield(L, 2, "limiter") != LUA_TNIL) { /* 8 */
        limiter = wq_lua_checklimiter(L, 8, "queue", "limiter");
    } else {
        lua_pop(L, 1);
        limiter = wq_lua_push_default_limiter(L); /* 8 */
    }
    double keep_done = 0;
    if (lua_getfield(L, 2, "keep_done") != LUA_TNIL)
        keep_done = wq_checkduration(L, -1, "queue", "keep_done", 1);
    lua_pop(L, 1);
    double history = 86400; /* a day, as the peers keep finished jobs */
    if (lua_getfield(L, 2, "history") != LUA_TNIL)
        history = wq_checkduration(L, -1, "queue", "history", 1);
    lua_pop(L, 1);
    int unique = 0;
    if (lua_getfield(L, 2, "unique") != LUA_TNIL) {
        if (!lua_isboolean(L, -1))
            wq_argerror(L, "queue", "unique",
                        lua_pushfstring(L, "boolean expected, got %s", luaL_typename(L, -1)));
        unique = lua_toboolean(L, -1);
    }
    lua_pop(L, 1);
    int on_dead = lua_getfield(L, 2, "on_dead"); /* 9 */
    if (on_dead != LUA_TNIL && on_dead != LUA_TFUNCTION)
        wq_argerror(L, "queue", "on_dead",
                    lua_pushfstring(L, "function expected, got %s", luaL_typename(L, 9)));
    lgroup_opts gopts;
    lgroup_read_options(L, 2, &gopts);
    /* A handler declaring a third parameter (or ...) gets the job table. */
    int job_arg = 0;
    if (handler == LUA_TFUNCTION && !pool_size) {
        lua_Debug ar;
        lua_pushvalue(L, 3);
        if (lua_getinfo(L, ">u", &ar))
            job_arg = ar.nparams >= 3 || ar.isvararg;
    }

    lqueue *lq = lua_newuserdatauv(L, sizeof *lq, 0); /* 10 */
    memset(lq, 0, sizeof *lq);
    lq->handler_ref = lq->limiter_ref = lq->dead_ref = lq->keys_ref = lq->ref = LUA_NOREF;
    lq->on_dead_ref = lq->group_of_ref = LUA_NOREF;
    lq->job_arg = job_arg;
    lq->raw_payload = pool_size > 0;
    lq->keep_done = keep_done;
    lq->unique = unique;
    lq->history = history;
    luaL_setmetatable(L, "wq.Queue");
    lq->host = h;
    lq->L = wq_sched_of(L)->L;
    memcpy(lq->name, name, nlen + 1);
    lq->workers = handler == LUA_TFUNCTION ? (int)workers : 0;
    lq->max_retries = max_retries;
    lq->timeout_ns = wq_seconds_to_ns(timeout);
    lq->persist = persist;
    lq->limiter = limiter;
    /* The Lua allocations first (they raise): then nothing of ours leaks. */
    lua_pushvalue(L, 10);
    lq->ref = luaL_ref(L, LUA_REGISTRYINDEX);
    if (on_dead == LUA_TFUNCTION) {
        lua_pushvalue(L, 9);
        lq->on_dead_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    }
    lua_pushvalue(L, 8);
    lq->limiter_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_newtable(L);
    lq->dead_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_newtable(L);
    lq->keys_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    if (handler == LUA_TFUNCTION) {
        lua_pushvalue(L, 3);
        lq->handler_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    }
    lq->q = wq_queue_new(&h->clock);
    int nofail = lfail_open(lq) < 0;
    /* Completed-job memory lives here, unless a shared database keeps it for every runner. */
    int local_done = keep_done > 0 && !(h->backend && persist && wq_backend_shared(h->backend));
    lq->done_mem = local_done ? wq_keymap_new() : NULL;
    if (!lq->q || nofail || (local_done && !lq->done_mem) ||
        wq_host_add_queue(h, &lqueue_ops, lq, lq->name, h->backend && persist) < 0) {
        wq_queue_free(lq->q);
        lfail_close(lq);
        wq_keymap_free(lq->done_mem);
        lq->q = NULL;
        lq->done_mem = NULL;
        return luaL_error(L, "queue: out of memory");
    }
    wq_queue_set_observer(lq->q, observe, lq);
    /* Limits a shared database enforces for every runner (its claims count them) are not
     * applied again here; group_of still names the groups of this runner's adds. */
    int shared = h->backend && persist && wq_backend_shared(h->backend);
    lgroup_opts local = gopts;
    if (shared)
        local.has_limit = local.has_rate = 0;
    lgroup_apply_options(L, lq, 2, &local); /* before restoring: restored items obey them */
    if (h->backend && persist) {
        wq_bqueue_hooks hooks = {.demand = bq_demand,
                                 .claimed = bq_claimed,
                                 .released = bq_released,
                                 .lost = bq_lost,
                                 .changed = bq_changed,
                                 .paused = bq_paused,
                                 .cancel = bq_cancel,
                                 .committed = bq_committed,
                                 .redefined = bq_redefined,
                                 .added = bq_added,
                                 .ud = lq};
        lq->bq = wq_bq_attach(h->backend, name, lq->q, &hooks);
        if (!lq->bq)
            return luaL_error(L, "queue: %s", wq_backend_errmsg(h->backend));
        /* Shared options (SPEC 8.2): a queue with a handler, or with max_retries given,
         * defines them; one without either (a producer's) takes what the others defined. */
        if (handler == LUA_TFUNCTION || has_max_retries || keep_done > 0 || gopts.has_limit ||
            gopts.has_rate || unique) {
            wq_queue_def def = {.max_retries = max_retries,
                                .keep_done = keep_done,
                                .unique = unique,
                                .history = history};
            if (gopts.has_limit) {
                def.group_concurrency = gopts.limit.concurrency;
                def.group_rate = gopts.limit.rate;
                def.group_burst = gopts.limit.burst;
            }
            if (gopts.has_rate) {
                def.rate = gopts.rate;
                def.burst = gopts.burst;
            }
            wq_bq_define(lq->bq, &def);
        }
        wq_bq_set_meta(lq->bq, item_meta, lq);
        lworker_restore ctx = {L, lq, 0};
        int r = wq_bq_restore(lq->bq, restore_item, lworker_restore_failure, lworker_restore_dead,
                              &ctx);
        if (r < 0)
            return luaL_error(L, "queue: cannot restore '%s': %s", name,
                              wq_backend_errmsg(h->backend));
        /* Going on without what could not be restored would lose it for
         * this run (the file still holds it). */
        if (ctx.nomem)
            return luaL_error(L, "queue: cannot restore '%s': out of memory", name);
        if (lq->done_mem && wq_bq_restore_done(lq->bq, restore_done, &ctx) < 0)
            return luaL_error(L, "queue: cannot restore '%s': %s", name,
                              wq_backend_errmsg(h->backend));
        if (wq_bq_restore_schedules(lq->bq, restore_schedule, &ctx) < 0)
            return luaL_error(L, "queue: cannot restore '%s': %s", name,
                              wq_backend_errmsg(h->backend));
        if (lqops_restore(lq) < 0)
            return luaL_error(L, "queue: cannot restore '%s': %s", name,
                              wq_backend_errmsg(h->backend));
    }
    if (h->stopping)
        lqueue_stop(lq);
    lworker_start(L, lq);
    if (lq->done_mem) {
        arm_prune(lq, keep_done < 30 ? keep_done : 30);
    }
    lua_settop(L, 10);
    return 1;
}

/* ---- methods ---- */

/* ---- completed-job memory (keep_done) ---- */

typedef struct done_entry {
    double finished_at; /* wall clock */
    size_t rlen;
    int has_result;
    char result[]; /* JSON text */
} done_entry;

/*
 * A memory is the value of its key in done_mem. Most jobs return no
 * result: their value is the bits of finished_at itself (a positive normal
 * double is at least 2^52 as bits, above any user-space pointer), so they
 * cost no allocation, and a prune turn reads their time without a pointer
 * to chase. A memory with a result points to a done_entry.
 */
#define DONE_INLINE_MIN (UINT64_C(1) << 52)

static int done_inline(uint64_t v)
{
    return v >= DONE_INLINE_MIN;
}

static double done_at(uint64_t v)
{
    if (!done_inline(v))
        return ((const done_entry *)(uintptr_t)v)->finished_at;
    double t;
    memcpy(&t, &v, sizeof t);
    return t;
}

static void done_free(uint64_t v)
{
    if (!done_inline(v))
        free((done_entry *)(uintptr_t)v);
}

/* The memory of key (its value in done_mem), or NULL. */
static const uint64_t *done_get(const lqueue *lq, const char *key, size_t len)
{
    return lq->done_mem ? wq_keymap_get(lq->done_mem, key, len) : NULL;
}

/*
 * A memory could not be kept (out of memory): the key may run again, which
 * is allowed, but the file may now hold a done row no memory knows of, so
 * the end of the prune pass has the store sweep the file.
 */
static void lost_done(lqueue *lq)
{
    lq->done_lost = 1;
}

/* Drops key's memory, leaving its row (if any) to the store's sweep. */
static void done_drop(lqueue *lq, const char *key, size_t len)
{
    const uint64_t *v = done_get(lq, key, len);
    if (!v)
        return;
    uint64_t old = *v;
    wq_keymap_del(lq->done_mem, key, len);
    done_free(old);
}

static void done_forget(lqueue *lq, const char *key, size_t len)
{
    const uint64_t *v = done_get(lq, key, len);
    if (!v)
        return;
    uint64_t old = *v;
    if (lq->bq)
        wq_bq_done_del(lq->bq, key, len);
    wq_keymap_del(lq->done_mem, key, len);
    done_free(old);
}

void lqueue_remember_done(lqueue *lq, const char *key, size_t len, const char *result, size_t rlen)
{
    lqueue_remember_done_at(lq, key, len, wq_host_unix(lq->host, wq_host_now(lq->host)), result,
                            rlen, 1);
}

void lqueue_remember_done_at(lqueue *lq, const char *key, size_t len, double at, const char *result,
                             size_t rlen, int persist)
{
    if (persist && lq->bq && lq->keep_done > 0)
        wq_bq_done_put(lq->bq, key, len, at, result, rlen);
    if (!lq->done_mem)
        return; /* none here: the database remembers (or keep_done is off) */
    uint64_t nv;
    if (!result && isnormal(at) && at > 0) {
        memcpy(&nv, &at, sizeof nv);
    } else {
        done_entry *e = malloc(sizeof *e + (result ? rlen : 0));
        if (e && (uintptr_t)e >= DONE_INLINE_MIN) { /* cannot happen in user space */
            free(e);
            e = NULL;
        }
        if (!e) {
            lost_done(lq);
            return;
        }
        e->finished_at = at;
        e->has_result = result != NULL;
        e->rlen = result ? rlen : 0;
        if (result)
            memcpy(e->result, result, rlen);
        nv = (uint64_t)(uintptr_t)e;
    }
    int created;
    uint64_t *v = wq_keymap_put(lq->done_mem, key, len, &created);
    if (!v) {
        done_free(nv);
        lost_done(lq);
        return;
    }
    if (!created)
        done_free(*v);
    *v = nv;
}

/* Whether key finished within keep_done and nothing is pending for it. */
static int done_skips(lqueue *lq, const char *key, size_t len)
{
    const uint64_t *v = done_get(lq, key, len);
    if (!v)
        return 0;
    if (wq_host_unix(lq->host, wq_host_now(lq->host)) - done_at(*v) > lq->keep_done) {
        done_forget(lq, key, len);
        return 0;
    }
    wq_item_info info;
    return wq_queue_lookup(lq->q, key, len, &info) == 0;
}

/*
 * Before any add (Lua, HTTP, inbox): whether keep_done skips it. A forced
 * add forgets the memory instead. After shutdown the add is refused anyway.
 */
static int done_gate(lqueue *lq, const char *key, size_t len, int force)
{
    if (!lq->done_mem || wq_queue_shutting_down(lq->q))
        return 0;
    if (force) {
        done_forget(lq, key, len);
        return 0;
    }
    return done_skips(lq, key, len);
}

/* Arms the next prune turn in seconds (a weak timer: it keeps nothing alive). */
static void arm_prune(lqueue *lq, double seconds)
{
    wq_host *h = lq->host;
    lq->prune_timer = wq_timer_start_weak(h, wq_add_sat(wq_host_now(h), wq_seconds_to_ns(seconds)),
                                          prune_done, lq);
}

#define PRUNE_BATCH 2000  /* expired memories dropped per turn */
#define PRUNE_VISIT 20000 /* memories looked at per turn (each may be a cache miss) */
#define PRUNE_SLOTS 65536 /* map slots walked per turn (2 MiB; once pruned, most are empty) */

/*
 * Drops memories older than keep_done (a host timer: a pass over them all
 * every keep_done seconds, 30 at most, in turns 10 ms apart).
 *
 * Their rows are not deleted key by key: the memories are walked in hash
 * order, so a turn's 2,000 deletes would touch about as many pages of the
 * done table, scattered over the file, which every commit and checkpoint
 * then writes (with --db, pauses of 30-130 ms). Once a pass has dropped
 * anything, the store sweeps the table in key order instead, deleting the
 * expired rows among a slice of neighbours per commit
 * (wq_bq_done_prune). Until the sweep reaches it, an expired row stays
 * in the file without a memory, which is harmless: it is expired (read back
 * at a restart, it is dropped again).
 */
static void prune_done(wq_host *h, void *data, uint64_t id)
{
    (void)id;
    lqueue *lq = data;
    lq->prune_timer = 0;
    if (!lq->done_mem)
        return;
    double cutoff = wq_host_unix(h, wq_host_now(h)) - lq->keep_done;
    /* The expired keys first (deleting while walking would move entries). */
    char *keys = NULL;
    size_t used = 0, cap = 0, pos = lq->prune_pos, len;
    const char *key;
    uint64_t v;
    /* At most PRUNE_BATCH dropped, PRUNE_VISIT looked at and PRUNE_SLOTS
     * walked per turn, so a million memories never hold the loop for long;
     * a pass over them all goes on in the next turns, 10 ms apart. */
    size_t found = 0, seen = 0, start = pos;
    int more = 0;
    while (found < PRUNE_BATCH && seen < PRUNE_VISIT && pos - start < PRUNE_SLOTS &&
           (more = wq_keymap_next_upto(lq->done_mem, &pos, PRUNE_SLOTS - (pos - start), &key, &len,
                                       &v)) != 0) {
        if (more < 0)
            break; /* PRUNE_SLOTS walked */
        seen++;
        if (done_at(v) >= cutoff)
            continue;
        found++;
        if (used + sizeof len + len > cap) {
            size_t ncap = cap ? cap * 2 : 4096;
            while (ncap < used + sizeof len + len)
                ncap *= 2;
            char *n = realloc(keys, ncap);
            if (!n)
                break; /* the rest waits for the next round */
            keys = n;
            cap = ncap;
        }
        memcpy(keys + used, &len, sizeof len);
        memcpy(keys + used + sizeof len, key, len);
        used += sizeof len + len;
    }
    for (size_t at = 0; at < used;) {
        memcpy(&len, keys + at, sizeof len);
        done_drop(lq, keys + at + sizeof len, len);
        at += sizeof len + len;
    }
    free(keys);
    if (found)
        lq->done_lost = 1; /* their rows are now in the file without a memory */
    if (!more && lq->done_lost && lq->bq) {
        lq->done_lost = 0;
        wq_bq_done_prune(lq->bq, cutoff);
    }
    /* The next batch goes on from here (a walk from the start each time
     * would read the emptied front of the table again and again). */
    lq->prune_pos = more ? pos : 0;
    arm_prune(lq, more ? 0.01 : lq->keep_done < 30 ? lq->keep_done : 30);
}

static const char *const add_opts[] = {"priority", "group", "force", "unique", NULL};

/*
 * A unique add of key: WQ_ADD_PROCESSING or WQ_ADD_PENDING (queued, waiting,
 * or due to run again) when it is left as it is, 0 when it goes ahead. The
 * engine decides for itself; a shared database decides in wqrun.add().
 * unique: what the add said (1, -1, or 0 for nothing), resolved by the_unique first.
 */
static int unique_skip(lqueue *lq, int unique, const char *key, size_t len)
{
    wq_item_info info;
    if (unique <= 0 || wq_backend_shared(lq->host->backend) ||
        !wq_queue_lookup(lq->q, key, len, &info))
        return 0;
    if (info.state & WQ_ST_PROCESSING)
        return WQ_ADD_PROCESSING;
    if (info.state & (WQ_ST_DIRTY | WQ_ST_QUEUED | WQ_ST_WAITING))
        return WQ_ADD_PENDING;
    return 0;
}

/* What an add that said unique (1 yes, -1 no, 0 nothing) is: the queue's option decides the
 * last. */
static int the_unique(const lqueue *lq, int unique)
{
    return unique ? unique : lq->unique ? 1 : 0;
}

/* Reads the optional payload (at idx) and opts table (at idx + 1) of an add. */
static void read_add_args(lua_State *L, int idx, const char *fn, wq_add_opts *o, int *force,
                          int *unique)
{
    memset(o, 0, sizeof *o);
    *force = 0;
    *unique = 0; /* as the queue says */
    int top = lua_gettop(L);
    if (top >= idx + 1 && !lua_isnil(L, idx + 1)) {
        if (!lua_istable(L, idx + 1))
            wq_argerror(L, fn, "opts",
                        lua_pushfstring(L, "table expected, got %s", luaL_typename(L, idx + 1)));
        wq_checkopts(L, idx + 1, fn, add_opts);
        if (lua_getfield(L, idx + 1, "force") != LUA_TNIL) {
            if (!lua_isboolean(L, -1))
                wq_argexpected(L, -1, fn, "force", "boolean");
            *force = lua_toboolean(L, -1);
        }
        lua_pop(L, 1);
        if (lua_getfield(L, idx + 1, "unique") != LUA_TNIL) {
            if (!lua_isboolean(L, -1))
                wq_argexpected(L, -1, fn, "unique", "boolean");
            *unique = lua_toboolean(L, -1) ? 1 : -1;
        }
        lua_pop(L, 1);
        int t = lua_getfield(L, idx + 1, "priority");
        if (t != LUA_TNIL) {
            if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < INT32_MIN ||
                lua_tointeger(L, -1) > INT32_MAX)
                wq_argexpected(L, -1, fn, "priority", "32-bit integer");
            o->set_priority = 1;
            o->priority = (int32_t)lua_tointeger(L, -1);
        }
        lua_pop(L, 1);
        if (lua_getfield(L, idx + 1, "group") != LUA_TNIL) /* stays: it holds the name */
            o->group = lgroup_checkname(L, -1, fn, "group", &o->grouplen);
        else
            lua_pop(L, 1);
    }
    wq_encode_payload(L, idx, fn); /* pushed: JSON text or nil */
    if (!lua_isnil(L, -1)) {
        o->payload = lua_tolstring(L, -1, &o->paylen);
        o->set_payload = 1;
    }
}

enum { ADD_NOW, ADD_AFTER, ADD_LIMITED };

/*
 * An add of a key whose flow node waits for its dependencies (the runner's own flow set): the
 * node stays blocked, taking the payload and a higher priority. 1 when it was such a key.
 */
static int flow_blocked(lqueue *lq, const char *key, size_t len, const wq_add_opts *o)
{
    if (!lq->host->flows)
        return 0;
    wq_fnode *n = wq_host_flow_blocked(lq->host, lq->name, key, len);
    if (!n)
        return 0;
    wq_flows_update(lq->host->flows, n, o->set_payload ? o->payload : NULL,
                    o->set_payload ? o->paylen : 0, o->set_priority, o->priority);
    return 1;
}

/* put's answer when the backend decides the add itself (not supported yet). */
#define ADD_NOT_LOCAL (-1000)

/*
 * The one way an add (Lua, HTTP, inbox, schedules) reaches the queue: its
 * backend first, which on SQLite (or without one) says WQ_BACKEND_LOCAL,
 * then the engine's add (after: add_after by delay ns), as before.
 */
static int put(lqueue *lq, const char *key, size_t len, const wq_add_opts *o, int after,
               int64_t delay, int force, int unique, wq_badd_fn fn, void *ud, int no_wait)
{
    if (lq->bq && wq_backend_shared(lq->host->backend)) { /* SQLite: the engine decides */
        wq_badd a = {.key = key,
                     .keylen = len,
                     .payload = o->set_payload ? o->payload : NULL,
                     .paylen = o->set_payload ? o->paylen : 0,
                     .after = after ? (double)delay / 1e9 : 0,
                     .has_priority = o->set_priority,
                     .priority = o->priority,
                     .grp = o->group,
                     .grplen = o->grouplen,
                     .force = force,
                     .unique = unique,
                     .no_wait = no_wait};
        int r = wq_bq_add(lq->bq, &a, fn, ud);
        if (r != WQ_BACKEND_LOCAL)
            return r < 0 ? r : ADD_NOT_LOCAL; /* the backend answers through fn */
    }
    int r =
        after ? wq_queue_add_after(lq->q, key, len, delay, o) : wq_queue_add(lq->q, key, len, o);
    if (r == 1 && lqueue_told(lq))
        lworker_event(lq, WQ_LIFE_ADDED, key, len, 0, NULL, 0, NULL, 0);
    return r;
}

/* q:add(key [, payload [, opts]]), q:add_after(key, s, ...), q:add_rate_limited(key, ...). */
static int add_common(lua_State *L, int how, const char *fn)
{
    lqueue *lq = lqueue_check(L, fn);
    size_t len;
    const char *key = wq_checkkey(L, 2, fn, &len);
    int64_t delay = 0;
    int rest = 3;
    if (how == ADD_AFTER) {
        delay = wq_seconds_to_ns(wq_checkduration(L, 3, fn, "seconds", 0));
        rest = 4;
    }
    wq_add_opts o;
    int force = 0, unique = 0;
    int top = lua_gettop(L);
    if (top < rest) /* the common case: no payload, no opts */
        memset(&o, 0, sizeof o);
    else
        read_add_args(L, rest, fn, &o, &force, &unique);
    if (!o.group && lq->group_of_ref != LUA_NOREF)
        lgroup_resolve(L, lq, 2, top >= rest ? rest : 0, fn, &o);
    if (flow_blocked(lq, key, len, &o)) { /* a node that waits: it stays so */
        lua_pushboolean(L, 0);
        lua_pushliteral(L, "blocked");
        return 2;
    }
    /* finished within keep_done, or unique and pending or running: left alone, saying why */
    unique = the_unique(lq, unique);
    int skip = done_gate(lq, key, len, force) ? WQ_ADD_DONE : unique_skip(lq, unique, key, len);
    if (skip) {
        lua_pushboolean(L, 0);
        lua_pushstring(L, wq_add_reason(skip));
        return 2;
    }
    if (how == ADD_LIMITED && wq_limiter_when(lq->limiter, key, len, &delay) < 0)
        return luaL_error(L, "%s: out of memory", fn);
    if (lq->bq && wq_queue_shutting_down(lq->q)) { /* ignored after shutdown, as the engine does */
        lua_pushboolean(L, 0);
        return 1;
    }
    /* A backend that decides adds (PostgreSQL) answers once they committed: a task waits for
     * that; code that cannot yield gets true at once (the add is sent with the next cycle). */
    add_wait *w = NULL;
    wq_task *t = lq->bq && wq_backend_shared(lq->host->backend) ? wq_task_of(L) : NULL;
    if (t && lua_isyieldable(L)) {
        w = calloc(1, sizeof *w);
        if (!w)
            return luaL_error(L, "%s: out of memory", fn);
    }
    int r =
        put(lq, key, len, &o, how != ADD_NOW, delay, force, unique, w ? add_answered : NULL, w, 0);
    if (r == ADD_NOT_LOCAL) {
        if (!w) {
            lua_pushboolean(L, 1);
            return 1;
        }
        w->t = t;
        w->lq = lq;
        w->next = lq->add_waits;
        if (w->next)
            w->next->prev = w;
        lq->add_waits = w;
        t->wait = w;
        return wq_task_wait(L, t, add_wait_cancel, (lua_KContext)fn, add_k);
    }
    free(w);
    if (r == WQ_EIO)
        return luaL_error(L, "%s: database unavailable", fn);
    if (r == WQ_EINVAL && lq->bq) /* what the backend cannot store, naming the argument */
        return luaL_error(L, "%s: %s", fn, wq_backend_errmsg(lq->host->backend));
    if (r < 0 && r != WQ_ESHUTDOWN)
        return lqueue_raise(L, fn, r);
    if (r >= 0)
        keep_added(L, lq, 2);
    lua_pushboolean(L, r >= 0);
    return 1;
}

static int queue_add(lua_State *L)
{
    return add_common(L, ADD_NOW, "add");
}

static int queue_add_after(lua_State *L)
{
    return add_common(L, ADD_AFTER, "add_after");
}

static int queue_add_rate_limited(lua_State *L)
{
    return add_common(L, ADD_LIMITED, "add_rate_limited");
}

/* After a cancel_after the database applied: whether a delayed add was pending. */
static int cancel_after_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    lua_pushboolean(L, lqueue_check_answer(L, "cancel_after") > 0);
    return 1;
}

static int queue_cancel_after(lua_State *L)
{
    lqueue *lq = lqueue_check(L, "cancel_after");
    size_t len;
    const char *key = wq_checkkey(L, 2, "cancel_after", &len);
    wq_bop op = {.kind = WQ_BOP_CANCEL_AFTER, .key = key, .keylen = len};
    lqueue_op(L, lq, "cancel_after", &op, 0, cancel_after_k);
    lua_pushboolean(L, wq_queue_cancel_after(lq->q, key, len));
    return 1;
}

/* After the database's counts (a backend that shares the queue): its queued items. */
static int len_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    lqueue_check_answer(L, "len");
    lqueue_push_answer(L, "len");
    lua_getfield(L, -1, "queued");
    return 1;
}

/* q:len(): with a backend that shares the queue (PostgreSQL), every runner's queued items. */
static int queue_len(lua_State *L)
{
    lqueue *lq = lqueue_check(L, "len");
    wq_bop op = {.kind = WQ_BOP_STATS};
    lqueue_op(L, lq, "len", &op, 0, len_k);
    lua_pushinteger(L, (lua_Integer)wq_queue_len(lq->q));
    return 1;
}

static int get_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    lqueue *lq = (lqueue *)ctx;
    wq_task *t = wq_task_of(L);
    wq_task_check_interrupt(L, t);
    if (lq->stopping) { /* see queue_get */
        lua_pushnil(L);
        return 1;
    }
    wq_item_info info;
    int r = wq_queue_get(lq->q, &info);
    if (r == 0) {
        lqueue_push_taken(L, lq, &info);
        lqueue_decode_top(L);
        return 2;
    }
    if (r == WQ_ESHUTDOWN) {
        lua_pushnil(L);
        return 1;
    }
    t->wait = lq;
    wq_waitlist_push(&lq->getters, t);
    if (lq->bq)
        wq_bq_want(lq->bq);
    return wq_task_wait(L, t, lqueue_get_cancel, ctx, get_k);
}

static int queue_get(lua_State *L)
{
    lqueue *lq = lqueue_check(L, "get");
    wq_item_info info;
    /* A graceful stop (SIGINT/SIGTERM) hands out nothing more: what is
     * queued stays queued (and in the state file) for the next run. */
    if (lq->stopping) {
        lua_pushnil(L);
        return 1;
    }
    /* Only wait (and so only require a task) when there is nothing to take. */
    int r = wq_queue_get(lq->q, &info);
    if (r == 0) {
        lqueue_push_taken(L, lq, &info);
        lqueue_decode_top(L);
        return 2;
    }
    if (r == WQ_ESHUTDOWN) {
        lua_pushnil(L);
        return 1;
    }
    wq_task *t = wq_task_require(L, "get");
    t->wait = lq;
    wq_waitlist_push(&lq->getters, t);
    if (lq->bq)
        wq_bq_want(lq->bq);
    return wq_task_wait(L, t, lqueue_get_cancel, (lua_KContext)lq, get_k);
}

static int queue_done(lua_State *L)
{
    lqueue *lq = lqueue_check(L, "done");
    size_t len;
    const char *key = wq_checkkey(L, 2, "done", &len);
    int r = wq_queue_done(lq->q, key, len);
    if (r < 0 && r != WQ_ENOENT)
        return lqueue_raise(L, "done", r);
    if (r == 0) {
        lq->ndone++;
        lflow_after_done(lq, key, len); /* a node's item the script's own loop ran */
    }
    lua_pushboolean(L, r == 0);
    return 1;
}

static int queue_shutdown(lua_State *L)
{
    wq_queue_shutdown(lqueue_check(L, "shutdown")->q);
    return 0;
}

static void drain_cancel(wq_task *t)
{
    lqueue *lq = t->wait;
    wq_waitlist_remove(&lq->drainers, t);
}

static int drain_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    lqueue *lq = (lqueue *)ctx;
    wq_task *t = wq_task_of(L);
    wq_task_check_interrupt(L, t);
    if (!wq_queue_draining(lq->q))
        return 0;
    t->wait = lq;
    wq_waitlist_push(&lq->drainers, t);
    return wq_task_wait(L, t, drain_cancel, ctx, drain_k);
}

static int queue_shutdown_with_drain(lua_State *L)
{
    lqueue *lq = lqueue_check(L, "shutdown_with_drain");
    /* If it will have to wait, check that it can before changing anything. */
    if (wq_queue_processing(lq->q) > 0)
        wq_task_require(L, "shutdown_with_drain");
    wq_queue_shutdown_drain(lq->q);
    if (!wq_queue_draining(lq->q))
        return 0;
    return drain_k(L, LUA_OK, (lua_KContext)lq);
}

static int queue_shutting_down(lua_State *L)
{
    lua_pushboolean(L, wq_queue_shutting_down(lqueue_check(L, "shutting_down")->q));
    return 1;
}

static int queue_forget(lua_State *L)
{
    lqueue *lq = lqueue_check(L, "forget");
    size_t len;
    const char *key = wq_checkkey(L, 2, "forget", &len);
    lworker_forget(lq, key, len);
    return 0;
}

static int queue_num_requeues(lua_State *L)
{
    lqueue *lq = lqueue_check(L, "num_requeues");
    size_t len;
    const char *key = wq_checkkey(L, 2, "num_requeues", &len);
    lua_pushinteger(L, wq_limiter_num_requeues(lq->limiter, key, len));
    return 1;
}

static void fill_stats(lqueue *lq, wq_qstats *st)
{
    const wq_metrics *m = wq_queue_metrics(lq->q);
    st->name = lq->name;
    st->depth = m->depth;
    st->queued = wq_queue_len(lq->q);
    st->processing = wq_queue_processing(lq->q);
    st->waiting = wq_queue_waiting(lq->q);
    st->adds = m->adds;
    st->retries = m->retries;
    st->done = lq->ndone;
    st->succeeded = lq->nsuccess;
    st->failures = lq->nfailures;
    st->dead = lq->ndead;
    st->requeued = lq->nrequeued;
    st->timeouts = lq->ntimeouts;
    st->retrying = lfail_keys(lq);
    st->workers = lq->workers;
    st->cancelled = lq->ncancelled;
    st->paused = wq_queue_paused(lq->q);
    st->groups = wq_queue_groups(lq->q);
    st->throttled = wq_queue_throttled(lq->q);
    st->metrics = m;
}

static void setint(lua_State *L, const char *k, uint64_t v)
{
    lua_pushinteger(L, (lua_Integer)v);
    lua_setfield(L, -2, k);
}

/* Pushes q:stats()'s table of this runner's numbers. */
static void push_stats(lua_State *L, lqueue *lq)
{
    wq_qstats st;
    fill_stats(lq, &st);
    lua_createtable(L, 0, 20);
    lua_pushstring(L, st.name);
    lua_setfield(L, -2, "name");
    for (const wq_qstat_field *f = wq_qstat_fields; f->name; f++)
        setint(L, f->name, wq_qstat_value(&st, f));
    lua_pushboolean(L, st.paused);
    lua_setfield(L, -2, "paused");
}

/* After the database's counts: they replace this runner's for what every runner shares; the
 * counters of runs (adds, done, failures, ...) stay this runner's. */
static int stats_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    lqueue_check_answer(L, "stats");
    lqueue_push_answer(L, "stats");
    int db = lua_gettop(L);
    push_stats(L, (lqueue *)ctx);
    lua_pushnil(L);
    while (lua_next(L, db)) {
        lua_pushvalue(L, -2);
        lua_insert(L, -2);
        lua_settable(L, db + 1);
    }
    lua_pushliteral(L, "database");
    lua_setfield(L, db + 1, "scope");
    return 1;
}

static int queue_stats(lua_State *L)
{
    lqueue *lq = lqueue_check(L, "stats");
    wq_bop op = {.kind = WQ_BOP_STATS};
    lqueue_op(L, lq, "stats", &op, (lua_KContext)lq, stats_k);
    push_stats(L, lq);
    return 1;
}

void lqueue_push_answer(lua_State *L, const char *fn)
{
    size_t len;
    const char *text = lua_tolstring(L, -1, &len);
    int st = wq_ljson_decode(L, text ? text : "null", text ? len : 4);
    if (st == LUA_ERRMEM)
        luaL_error(L, "q:%s: out of memory", fn);
    if (st != LUA_OK)
        luaL_error(L, "q:%s: the database answered %s", fn, lua_tostring(L, -1));
}

lua_Integer lqueue_check_answer(lua_State *L, const char *fn)
{
    wq_task_check_interrupt(L, wq_task_of(L));
    lua_Integer r = lua_tointeger(L, -2);
    if (r == WQ_EIO)
        luaL_error(L, "q:%s: %s", fn, lua_tostring(L, -1));
    return r;
}

static int dead_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    lqueue_check_answer(L, "dead");
    lqueue_push_answer(L, "dead");
    return 1;
}

/* The dead letters, unsorted (lua/wq.lua's q:dead() sorts them). */
static int queue_dead_list(lua_State *L)
{
    lqueue *lq = lqueue_check(L, "dead");
    wq_bop op = {.kind = WQ_BOP_DEAD, .limit = 1000000};
    lqueue_op(L, lq, "dead", &op, 0, dead_k);
    lworker_push_dead(L, lq);
    int dead = lua_gettop(L);
    lua_newtable(L);
    int out = dead + 1, n = 0;
    lua_pushnil(L);
    while (lua_next(L, dead)) {
        lua_createtable(L, 0, 6);
        lua_pushvalue(L, -3);
        lua_setfield(L, -2, "key");
        lua_getfield(L, -2, "json");
        size_t jlen;
        const char *json = lua_tolstring(L, -1, &jlen);
        wq_push_payload(L, json, jlen);
        lua_setfield(L, -3, "payload");
        lua_pop(L, 1);
        const char *fields[] = {"error", "attempts", "failed_at", "traceback"};
        for (int i = 0; i < 4; i++) {
            lua_getfield(L, -2, fields[i]);
            lua_setfield(L, -2, fields[i]);
        }
        lua_rawseti(L, out, ++n);
        lua_pop(L, 1);
    }
    return 1;
}

static int retry_dead_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    lua_pushboolean(L, lqueue_check_answer(L, "retry_dead") > 0);
    return 1;
}

static int queue_retry_dead(lua_State *L)
{
    lqueue *lq = lqueue_check(L, "retry_dead");
    size_t len;
    const char *key = wq_checkkey(L, 2, "retry_dead", &len);
    wq_bop op = {.kind = WQ_BOP_RETRY_DEAD, .key = key, .keylen = len};
    lqueue_op(L, lq, "retry_dead", &op, 0, retry_dead_k);
    lua_pushboolean(L, lqops_retry_dead(L, lq, key, len));
    return 1;
}

int lqueue_done_lookup(const lqueue *lq, const char *key, size_t len, double *at,
                       const char **result, size_t *rlen)
{
    const uint64_t *v = done_get(lq, key, len);
    if (!v || wq_host_unix(lq->host, wq_host_now(lq->host)) - done_at(*v) > lq->keep_done)
        return 0;
    *at = done_at(*v);
    const done_entry *e = done_inline(*v) ? NULL : (const done_entry *)(uintptr_t)*v;
    *result = e && e->has_result ? e->result : NULL;
    *rlen = *result ? e->rlen : 0;
    return 1;
}

static int done_info_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    if (lqueue_check_answer(L, "done_info") <= 0) {
        lua_pushnil(L);
        return 1;
    }
    lqueue_push_answer(L, "done_info");
    return 1;
}

static int forget_done_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    lua_pushboolean(L, lqueue_check_answer(L, "forget_done") > 0);
    return 1;
}

/* q:done_info(key) -> {finished_at=, result=} or nil */
static int queue_done_info(lua_State *L)
{
    lqueue *lq = lqueue_check(L, "done_info");
    size_t len;
    const char *key = wq_checkkey(L, 2, "done_info", &len);
    wq_bop op = {.kind = WQ_BOP_DONE_INFO, .key = key, .keylen = len};
    if (lq->keep_done > 0)
        lqueue_op(L, lq, "done_info", &op, 0, done_info_k);
    double at;
    const char *result;
    size_t rlen;
    if (!lqueue_done_lookup(lq, key, len, &at, &result, &rlen)) {
        lua_pushnil(L);
        return 1;
    }
    lua_createtable(L, 0, 2);
    lua_pushnumber(L, at);
    lua_setfield(L, -2, "finished_at");
    if (result) {
        wq_push_payload(L, result, rlen);
        lua_setfield(L, -2, "result");
    }
    return 1;
}

/* q:forget_done(key) -> whether the key was remembered */
static int queue_forget_done(lua_State *L)
{
    lqueue *lq = lqueue_check(L, "forget_done");
    size_t len;
    const char *key = wq_checkkey(L, 2, "forget_done", &len);
    wq_bop op = {.kind = WQ_BOP_FORGET_DONE, .key = key, .keylen = len};
    if (lq->keep_done > 0)
        lqueue_op(L, lq, "forget_done", &op, 0, forget_done_k);
    int had = done_get(lq, key, len) != NULL;
    done_forget(lq, key, len);
    if (!had && lq->bq)
        wq_bq_done_del(lq->bq, key, len); /* a row whose memory expired may not be swept yet */
    lua_pushboolean(L, had);
    return 1;
}

static int queue_name(lua_State *L)
{
    lua_pushstring(L, lqueue_check(L, "name")->name);
    return 1;
}

static int queue_tostring(lua_State *L)
{
    lqueue *lq = luaL_checkudata(L, 1, "wq.Queue");
    lua_pushfstring(L, "wq.Queue(%s)", lq->name);
    return 1;
}

/* ---- what the host sees (wq_queue_ops) ---- */

static void op_stats(void *q, wq_qstats *st)
{
    fill_stats(q, st);
}

static void op_work_ages(void *q, double *unfinished, double *longest)
{
    wq_queue_work_ages(((lqueue *)q)->q, unfinished, longest);
}

static int64_t op_next_ready(void *q)
{
    return wq_queue_next_ready(((lqueue *)q)->q);
}

static void op_fire_due(void *q)
{
    lqueue *lq = q;
    if (wq_queue_fire_due(lq->q) < 0)
        wq_host_logl(lq->host, WQ_LOG_ERROR, "wqrun: %s: out of memory firing delayed items",
                     lq->name);
}

static int op_busy(void *q)
{
    const lqueue *lq = q;
    /* A paused queue's items wait for a resume: they keep nothing alive. */
    if (lq->add_waits) /* a task waits for a backend to answer its add */
        return 1;
    if (lq->stopping)
        return 0;
    /* Items a backend holds (PostgreSQL rows) keep a runner that has a handler or a waiting get. */
    int held =
        lq->bq && (lq->handler_ref != LUA_NOREF || lq->getters.head) && wq_bq_pending(lq->bq);
    return held || lremote_held(lq) > 0 ||
           (lq->handler_ref != LUA_NOREF && ((wq_queue_len(lq->q) > 0 && !wq_queue_paused(lq->q)) ||
                                             wq_queue_processing(lq->q) > 0));
}

static int op_awaited(void *q)
{
    const lqueue *lq = q;
    return (lq->handler_ref != LUA_NOREF && !lq->stopping) || lq->getters.head != NULL;
}

static size_t op_processing(void *q)
{
    return wq_queue_processing(((lqueue *)q)->q);
}

static void lqueue_stop(lqueue *lq)
{
    lq->stopping = 1;
    wq_queue_shutdown(lq->q);
}

static void op_stop(void *q)
{
    lqueue_stop(q);
}

static int op_has(void *q, const char *key, size_t len)
{
    lqueue *lq = q;
    wq_item_info info;
    return lq->q && wq_queue_lookup(lq->q, key, len, &info) == 1;
}

static int op_add(void *q, const wq_ext_item *it)
{
    lqueue *lq = q;
    wq_add_opts bo = {.payload = it->payload,
                      .paylen = it->paylen,
                      .set_payload = it->payload != NULL,
                      .set_priority = it->has_priority,
                      .priority = it->priority};
    if (flow_blocked(lq, it->key, it->keylen, &bo))
        return WQ_ADD_BLOCKED; /* a node that waits: it stays so */
    if (done_gate(lq, it->key, it->keylen, it->force))
        return WQ_ADD_DONE;
    int unique = the_unique(lq, it->unique);
    int skip = unique_skip(lq, unique, it->key, it->keylen);
    if (skip)
        return skip;
    wq_add_opts o = {.payload = it->payload,
                     .paylen = it->paylen,
                     .set_payload = it->payload != NULL,
                     .set_priority = it->has_priority,
                     .priority = it->priority,
                     .group = it->group,
                     .grouplen = it->grouplen};
    char buf[WQ_GROUP_MAX + 1];
    if (!o.group && lq->group_of_ref != LUA_NOREF &&
        lgroup_resolve_ext(lq, it->key, it->keylen, it->payload, it->paylen, &o, buf, sizeof buf) <
            0) {
        if (it->why)
            snprintf(it->why, it->whysize, "%s", buf);
        return WQ_EINVAL;
    }
    /* A backend that decides adds (PostgreSQL) still takes them while this runner drains: the
     * database keeps the item for the runners that share it (this one claims no more). */
    int r = put(lq, it->key, it->keylen, &o, it->after > 0,
                it->after > 0 ? wq_seconds_to_ns(it->after) : 0, it->force, unique, it->done,
                it->done_ud, 1);
    if (r == ADD_NOT_LOCAL)
        return WQ_EAGAIN; /* it->done tells the outcome once committed */
    if (r == WQ_EINVAL && lq->bq && it->why)
        snprintf(it->why, it->whysize, "%s", wq_backend_errmsg(lq->host->backend));
    if (r == WQ_EIO && it->why)
        snprintf(it->why, it->whysize, "not stored: database unavailable");
    if (r >= 0)
        lqueue_note_add(lq);
    return r;
}

static int64_t op_held_groups(void *q, size_t max, void (*fn)(void *ud, const wq_group_view *g),
                              void *ud)
{
    return wq_queue_most_held_groups(((lqueue *)q)->q, max, fn, ud);
}

static const wq_queue_ops lqueue_ops = {
    .has = op_has,
    .stats = op_stats,
    .work_ages = op_work_ages,
    .next_ready = op_next_ready,
    .fire_due = op_fire_due,
    .busy = op_busy,
    .awaited = op_awaited,
    .processing = op_processing,
    .stop = op_stop,
    .add = op_add,
    .pause = lqops_pause,
    .paused = lqops_paused,
    .remove = lqops_remove,
    .cancel = lqops_cancel,
    .retry_dead = lqops_retry,
    .purge_dead = lqops_purge_dead,
    .items = lqops_items,
    .dead = lqops_dead,
    .item = lqops_item,
    .schedules = lcron_list,
    .history = lqops_history,
    .held_groups = op_held_groups,
    .op = lqops_op,
    .claim = lremote_claim,
    .claim_wait = lremote_claim_wait,
    .claim_unwait = lremote_claim_unwait,
    .report = lremote_report,
};

const char *wq_lqueue_name(const lqueue *lq)
{
    return lq->name;
}

void lqueue_close(lqueue *lq)
{
    for (add_wait *w = lq->add_waits; w; w = w->next) {
        w->t = NULL; /* answered after the Lua state is gone: nobody to tell */
        w->lq = NULL;
    }
    lq->add_waits = NULL;
    lremote_close(lq);
    lprogress_close(lq);
    if (lq->bq)
        wq_bq_detach(lq->bq);
    lq->bq = NULL;
    lflow_close(lq);
    wq_queue_free(lq->q);
    lq->q = NULL;
    lfail_close(lq);
    free(lq->slots);
    lq->slots = NULL;
    lq->nslots = 0;
    if (lq->done_mem) {
        size_t pos = 0;
        const char *key;
        size_t len;
        uint64_t v;
        while (wq_keymap_next(lq->done_mem, &pos, &key, &len, &v))
            done_free(v);
        wq_keymap_free(lq->done_mem);
        lq->done_mem = NULL;
    }
    wq_timer_stop(lq->host, lq->prune_timer);
    lcron_free_all(lq);
}

static const luaL_Reg queue_methods[] = {{"add", queue_add},
                                         {"len", queue_len},
                                         {"get", queue_get},
                                         {"done", queue_done},
                                         {"shutdown", queue_shutdown},
                                         {"shutdown_with_drain", queue_shutdown_with_drain},
                                         {"shutting_down", queue_shutting_down},
                                         {"add_after", queue_add_after},
                                         {"add_rate_limited", queue_add_rate_limited},
                                         {"cancel_after", queue_cancel_after},
                                         {"forget", queue_forget},
                                         {"num_requeues", queue_num_requeues},
                                         {"stats", queue_stats},
                                         {"retry_dead", queue_retry_dead},
                                         {"done_info", queue_done_info},
                                         {"forget_done", queue_forget_done},
                                         {"name", queue_name},
                                         {NULL, NULL}};

void wq_lua_open_queue(lua_State *L, int internals)
{
    internals = lua_absindex(L, internals);
    luaL_newmetatable(L, "wq.Queue");
    queue_mt = lua_topointer(L, -1);
    luaL_newlib(L, queue_methods);
    lua_pushvalue(L, -1);
    lua_setfield(L, internals, "queue_methods"); /* lua/wq.lua adds methods */
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, queue_dead_list);
    lua_setfield(L, internals, "dead_list");
    lua_getfield(L, internals, "queue_methods");
    luaL_setfuncs(L, lcron_methods, 0);
    luaL_setfuncs(L, lgroup_methods, 0);
    luaL_setfuncs(L, lqops_methods, 0);
    luaL_setfuncs(L, lidle_methods, 0);
    luaL_setfuncs(L, lwait_methods, 0);
    lua_pop(L, 1);
    lua_pushcfunction(L, queue_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pop(L, 1);
    lua_pushcfunction(L, queue_new);
    lua_setfield(L, -2, "queue");
}
