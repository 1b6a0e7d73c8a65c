/*
 * A running job's progress (SPEC 11): job:progress(value), value a number
 * from 0 to 100 or a small table. The queue keeps the latest value of each
 * running key (a map key -> entry) for its views (q:item, q:items, the
 * HTTP item routes) and tells it on at most once a second per job: to its
 * backend (the state file, the database) and to the event listeners. A
 * value given sooner waits for the rest of that second in a timer; the
 * entry goes when the run ends.
 */
#include "lua/lprogress.h"

#include "engine/common.h"
#include "host/events.h"
#include "host/timer.h"
#include "lua/ljson.h"
#include "lua/lwq.h"
#include "lua/lworker.h"

#include <lauxlib.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EVERY_NS 1000000000LL /* told on at most once a second per job */

typedef struct entry {
    lqueue *lq;
    char *key;
    size_t keylen;
    char *json; /* the latest value */
    size_t len;
    int64_t told_at; /* host ns it was last told on, 0: never */
    uint64_t timer;  /* telling the latest value at the end of its second, 0: none */
    int untold;      /* json is newer than what was told */
    int64_t attempt;
} entry;

static entry *find(lqueue *lq, const char *key, size_t len)
{
    uint64_t *v = lq->progress ? wq_keymap_get(lq->progress, key, len) : NULL;
    return v ? (entry *)(uintptr_t)*v : NULL;
}

static void tell(entry *e)
{
    lqueue *lq = e->lq;
    e->untold = 0;
    e->told_at = wq_host_now(lq->host);
    if (lq->bq)
        wq_bq_progress(lq->bq, e->key, e->keylen, e->json, e->len);
    if (lqueue_told(lq))
        lworker_event(lq, WQ_LIFE_PROGRESS, e->key, e->keylen, e->attempt, e->json, e->len, NULL,
                      0);
}

static void on_timer(wq_host *h, void *data, uint64_t id)
{
    (void)h;
    (void)id;
    entry *e = data;
    e->timer = 0;
    if (e->untold)
        tell(e);
}

static void entry_free(entry *e)
{
    if (e->timer)
        wq_timer_stop(e->lq->host, e->timer);
    free(e->key);
    free(e->json);
    free(e);
}

void lprogress_end(lqueue *lq, const char *key, size_t len)
{
    entry *e = find(lq, key, len);
    if (!e)
        return;
    if (e->told_at && lq->bq) /* a row that stays (run again) shows none */
        wq_bq_progress(lq->bq, key, len, NULL, 0);
    wq_keymap_del(lq->progress, key, len);
    entry_free(e);
}

void lprogress_close(lqueue *lq)
{
    if (!lq->progress)
        return;
    size_t pos = 0;
    const char *k;
    size_t n;
    uint64_t v;
    while (wq_keymap_next(lq->progress, &pos, &k, &n, &v))
        entry_free((entry *)(uintptr_t)v);
    wq_keymap_free(lq->progress);
    lq->progress = NULL;
}

const char *lprogress_get(const lqueue *lq, const char *key, size_t len, size_t *n)
{
    entry *e = find((lqueue *)lq, key, len);
    if (!e)
        return NULL;
    *n = e->len;
    return e->json;
}

/* The value at idx as JSON text on the stack top, raising for one that is not a progress. */
static void check_value(lua_State *L, int idx)
{
    if (lua_type(L, idx) == LUA_TNUMBER) {
        lua_Number x = lua_tonumber(L, idx);
        if (!(x >= 0 && x <= 100))
            wq_argexpected(L, idx, "progress", "value", "a number from 0 to 100 or a table");
    } else if (lua_type(L, idx) != LUA_TTABLE) {
        wq_argexpected(L, idx, "progress", "value", "a number from 0 to 100 or a table");
    }
    int status = wq_ljson_encode(L, idx);
    if (status == LUA_ERRMEM)
        lua_error(L);
    if (status != LUA_OK)
        wq_argerror(L, "progress", "value", lua_tostring(L, -1));
    size_t n;
    lua_tolstring(L, -1, &n);
    if (n > LPROGRESS_MAX) {
        char msg[96];
        snprintf(msg, sizeof msg, "a table of at most %d bytes as JSON expected, got %zu",
                 LPROGRESS_MAX, n);
        wq_argerror(L, "progress", "value", msg);
    }
}

/* job:progress(value): the job table's method (its queue and key say which run). */
static int job_progress(lua_State *L)
{
    if (lua_type(L, 1) != LUA_TTABLE)
        return wq_argexpected(L, 1, "progress", "self", "the job table (call it as job:progress)");
    lua_getfield(L, 1, "queue");
    lqueue *lq = luaL_testudata(L, -1, "wq.Queue");
    lua_getfield(L, 1, "key");
    size_t len;
    const char *key = lua_tolstring(L, -1, &len);
    if (!lq || !key || lua_type(L, -1) != LUA_TSTRING)
        return wq_argexpected(L, 1, "progress", "self", "the job table (call it as job:progress)");
    check_value(L, 2);
    size_t n;
    const char *json = lua_tolstring(L, -1, &n);
    wq_item_info info;
    if (!lq->q || wq_queue_lookup(lq->q, key, len, &info) != 1 || !(info.state & WQ_ST_PROCESSING))
        return luaL_error(L, "progress: the job has ended (the key is not running)");
    entry *e = find(lq, key, len);
    if (!e) {
        if (!lq->progress && !(lq->progress = wq_keymap_new()))
            return luaL_error(L, "progress: out of memory");
        e = calloc(1, sizeof *e);
        uint64_t *slot = e ? wq_keymap_put(lq->progress, key, len, NULL) : NULL;
        if (!slot || !(e->key = malloc(len ? len : 1))) {
            if (slot)
                wq_keymap_del(lq->progress, key, len);
            free(e);
            return luaL_error(L, "progress: out of memory");
        }
        memcpy(e->key, key, len);
        e->keylen = len;
        e->lq = lq;
        *slot = (uint64_t)(uintptr_t)e;
    }
    char *copy = malloc(n + 1);
    if (!copy)
        return luaL_error(L, "progress: out of memory");
    memcpy(copy, json, n + 1);
    free(e->json);
    e->json = copy;
    e->len = n;
    e->untold = 1;
    lua_getfield(L, 1, "attempt");
    e->attempt = lua_tointeger(L, -1);
    int64_t now = wq_host_now(lq->host);
    if (!e->told_at || now - e->told_at >= EVERY_NS) {
        if (e->timer) {
            wq_timer_stop(lq->host, e->timer);
            e->timer = 0;
        }
        tell(e);
    } else if (!e->timer) {
        e->timer = wq_timer_start_weak(lq->host, e->told_at + EVERY_NS, on_timer, e);
    }
    return 0;
}

void lprogress_set_meta(lua_State *L)
{
    static const luaL_Reg methods[] = {{"progress", job_progress}, {NULL, NULL}};
    if (luaL_newmetatable(L, "wq.Job")) {
        luaL_newlib(L, methods);
        lua_setfield(L, -2, "__index");
    }
    lua_setmetatable(L, -2);
}
