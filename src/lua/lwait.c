/*
 * q:wait(key [, timeout]) in a task (SPEC 11): waits until the run of a
 * pending key ends and returns it as the history shows a run: {key, state =
 * "done" | "dead" | "cancelled" | "removed", attempts, result, error,
 * added_at, started_at, finished_at, runner}. At the timeout, or for a key
 * that is not pending, it returns what q:item(key) says (its state now, or
 * nil). The end's event wakes the task (events.h): no script polls.
 *
 * The wait is registered before the key is looked at, so no end is missed:
 * a key pending in this runner's engine is waited for at once; on a
 * database shared by runners, q:item asks the database whether the key is
 * pending there, and an end told meanwhile is kept (as a table in the
 * registry) for the answer.
 */
#include "lua/lwait.h"

#include "host/events.h"
#include "host/timer.h"
#include "lua/lqueue.h"
#include "lua/lwq.h"

#include <string.h>

/* At stack index 3 while q:wait runs. */
typedef struct waitst {
    lqueue *lq;
    wq_task *t;
    wq_events_wait *w; /* registered, NULL once told or gone */
    double timeout;
    int ended;   /* registry ref of an end told while q:item was out, LUA_NOREF: none */
    int waiting; /* the task waits for the end itself (else for q:item's answer) */
} waitst;

static void push_end(lua_State *L, const wq_life *e)
{
    static const char *const state[] = {[WQ_LIFE_DONE] = "done",
                                        [WQ_LIFE_DEAD] = "dead",
                                        [WQ_LIFE_CANCELLED] = "cancelled",
                                        [WQ_LIFE_REMOVED] = "removed"};
    lua_createtable(L, 0, 10);
    lua_pushlstring(L, e->key, e->keylen);
    lua_setfield(L, -2, "key");
    lua_pushstring(L, state[e->type]);
    lua_setfield(L, -2, "state");
    lua_pushinteger(L, e->attempt);
    lua_setfield(L, -2, "attempts");
    if (e->data) {
        wq_push_payload(L, e->data, e->datalen);
        lua_setfield(L, -2, "result");
    }
    if (e->error) {
        lua_pushstring(L, e->error);
        lua_setfield(L, -2, "error");
    }
    const struct {
        const char *name;
        double t;
    } times[] = {{"added_at", e->added_at}, {"started_at", e->started_at}, {"finished_at", e->at}};
    for (size_t i = 0; i < sizeof times / sizeof times[0]; i++)
        if (times[i].t > 0) {
            lua_pushnumber(L, times[i].t);
            lua_setfield(L, -2, times[i].name);
        }
    lua_pushstring(L, e->runner);
    lua_setfield(L, -2, "runner");
}

static void on_end(void *ud, const wq_life *e)
{
    waitst *st = ud;
    st->w = NULL; /* told once: gone */
    if (st->waiting) {
        wq_task *t = st->t;
        wq_timer_stop(t->host, t->wait_timer);
        t->wait_timer = 0;
        push_end(t->co, e);
        wq_task_wake(t, 1);
    } else { /* the task waits for q:item: kept for its answer */
        lua_State *L = st->lq->L;
        push_end(L, e);
        st->ended = luaL_ref(L, LUA_REGISTRYINDEX);
    }
}

static void on_timeout(wq_host *h, void *data, uint64_t id)
{
    (void)id;
    wq_task *t = data;
    waitst *st = t->wait;
    t->wait_timer = 0;
    wq_events_unwait(h, st->w);
    st->w = NULL;
    lua_pushnil(t->co); /* not ended: the continuation asks q:item */
    wq_task_wake(t, 1);
}

static void wait_cancel(wq_task *t)
{
    waitst *st = t->wait;
    wq_timer_stop(t->host, t->wait_timer);
    t->wait_timer = 0;
    wq_events_unwait(t->host, st->w);
    st->w = NULL;
}

/* The ref'd end, if any, is dropped (the answer is given some other way). */
static void drop_ended(lua_State *L, waitst *st)
{
    if (st->ended != LUA_NOREF)
        luaL_unref(L, LUA_REGISTRYINDEX, st->ended);
    st->ended = LUA_NOREF;
}

static int final_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)L;
    (void)status;
    (void)ctx;
    return 1;
}

/* Returns q:item(key) (which may wait for a backend); q, key at 1, 2. */
static int current(lua_State *L)
{
    lua_getfield(L, 1, "item");
    lua_pushvalue(L, 1);
    lua_pushvalue(L, 2);
    lua_callk(L, 2, 1, 0, final_k);
    return 1;
}

static int wait_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    wq_task_check_interrupt(L, wq_task_of(L));
    if (!lua_isnil(L, -1))
        return 1; /* the end */
    lua_settop(L, 2);
    return current(L); /* the timeout: its state now */
}

/* Waits for the end (the wait is registered). */
static int wait_end(lua_State *L, waitst *st)
{
    wq_task *t = st->t;
    lua_settop(L, 3); /* q, key, st: for q:item after a timeout */
    if (st->timeout > 0) {
        int64_t when = wq_add_sat(wq_host_now(t->host), wq_seconds_to_ns(st->timeout));
        t->wait_timer = wq_timer_start(t->host, when, on_timeout, t);
        if (!t->wait_timer) {
            wq_events_unwait(t->host, st->w);
            st->w = NULL;
            return luaL_error(L, "wait: out of memory");
        }
    }
    st->waiting = 1;
    t->wait = st;
    return wq_task_wait(L, t, wait_cancel, 0, wait_k);
}

/* Whether the q:item() answer at idx is a pending state (the key has not ended). */
static int pending(lua_State *L, int idx)
{
    if (lua_type(L, idx) != LUA_TTABLE)
        return 0;
    lua_getfield(L, idx, "state");
    const char *s = lua_tostring(L, -1);
    int p = s && (strcmp(s, "queued") == 0 || strcmp(s, "processing") == 0 ||
                  strcmp(s, "waiting") == 0 || strcmp(s, "blocked") == 0);
    lua_pop(L, 1);
    return p;
}

/* q:item() answered (at the top) with the wait registered. */
static int item_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    waitst *st = lua_touserdata(L, 3);
    if (st->ended != LUA_NOREF) { /* it ended meanwhile: that is the answer */
        lua_rawgeti(L, LUA_REGISTRYINDEX, st->ended);
        drop_ended(L, st);
        return 1;
    }
    if (!pending(L, -1)) { /* not pending: its state is the answer */
        wq_events_unwait(st->t->host, st->w);
        st->w = NULL;
        return 1;
    }
    return wait_end(L, st);
}

static int st_gc(lua_State *L)
{
    waitst *st = lua_touserdata(L, 1);
    if (st->w) /* the task went while q:item was out */
        wq_events_unwait(st->lq->host, st->w);
    st->w = NULL;
    drop_ended(L, st);
    return 0;
}

static int queue_wait(lua_State *L)
{
    lqueue *lq = lqueue_check(L, "wait");
    size_t len;
    const char *key = wq_checkkey(L, 2, "wait", &len);
    double timeout = -1;
    if (!lua_isnoneornil(L, 3))
        timeout = wq_checkduration(L, 3, "wait", "timeout", 1);
    wq_task *t = wq_task_require(L, "wait");
    lua_settop(L, 2);
    if (timeout == 0)
        return current(L);
    waitst *st = lua_newuserdatauv(L, sizeof *st, 0); /* 3 */
    *st = (waitst){lq, t, NULL, timeout, LUA_NOREF, 0};
    if (luaL_newmetatable(L, "wq.Wait")) {
        lua_pushcfunction(L, st_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, 3);
    /* registered first: no end from now on is missed */
    st->w = wq_events_wait_key(lq->host, lq->name, key, len, on_end, st);
    if (!st->w)
        return luaL_error(L, "wait: out of memory");
    wq_item_info info;
    if (lq->q && wq_queue_lookup(lq->q, key, len, &info) == 1)
        return wait_end(L, st);                           /* pending here */
    if (lq->bq && wq_backend_shared(lq->host->backend)) { /* pending there? */
        lua_getfield(L, 1, "item");
        lua_pushvalue(L, 1);
        lua_pushvalue(L, 2);
        lua_callk(L, 2, 1, 0, item_k);
        return item_k(L, LUA_OK, 0);
    }
    wq_events_unwait(lq->host, st->w);
    st->w = NULL;
    lua_settop(L, 2);
    return current(L);
}

const luaL_Reg lwait_methods[] = {{"wait", queue_wait}, {NULL, NULL}};
