/*
 * Group limits from Lua (see lgroup.h). A limit table reads
 * {concurrency = n, rate = per_second, burst = b}: every field optional,
 * burst defaulting to one second's worth of the rate (at least 1).
 */
#include "lua/lgroup.h"

#include "lua/lqueue.h"
#include "lua/lwq.h"

#include "engine/common.h"

#include <lauxlib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

const char *lgroup_checkname(lua_State *L, int idx, const char *fn, const char *arg, size_t *len)
{
    if (lua_type(L, idx) != LUA_TSTRING)
        wq_argerror(L, fn, arg,
                    lua_pushfstring(L, "string expected, got %s", luaL_typename(L, idx)));
    const char *g = lua_tolstring(L, idx, len);
    if (*len > WQ_GROUP_MAX)
        wq_argerror(L, fn, arg, lua_pushfstring(L, "longer than %d bytes", WQ_GROUP_MAX));
    return g;
}

/* A positive finite number at idx, for fn's argument arg. */
static double checkrate(lua_State *L, int idx, const char *fn, const char *arg)
{
    if (lua_type(L, idx) != LUA_TNUMBER)
        wq_argerror(L, fn, arg,
                    lua_pushfstring(L, "number expected, got %s", luaL_typename(L, idx)));
    double v = lua_tonumber(L, idx);
    if (!(v > 0) || !isfinite(v) || v > 1e9)
        wq_argexpected(L, idx, fn, arg, "number > 0 (and at most 1e9)");
    return v;
}

/* Reads the limit table at idx (fn's argument arg) into *lim. */
static void checklimit(lua_State *L, int idx, const char *fn, const char *arg, wq_limit *lim)
{
    idx = lua_absindex(L, idx);
    if (!lua_istable(L, idx))
        wq_argerror(L, fn, arg,
                    lua_pushfstring(L, "table expected, got %s", luaL_typename(L, idx)));
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
        if (strcmp(k, "concurrency") && strcmp(k, "rate") && strcmp(k, "burst"))
            wq_argerror(L, fn, arg,
                        lua_pushfstring(L, "unknown field '%s' (concurrency, rate, burst)",
                                        luaL_tolstring(L, -1, NULL)));
    }
    memset(lim, 0, sizeof *lim);
    char name[64];
    if (lua_getfield(L, idx, "concurrency") != LUA_TNIL) {
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1 || lua_tointeger(L, -1) > UINT32_MAX)
            wq_argexpected(L, -1, fn, arg, "concurrency: integer >= 1");
        lim->concurrency = (uint32_t)lua_tointeger(L, -1);
    }
    lua_pop(L, 1);
    if (lua_getfield(L, idx, "rate") != LUA_TNIL) {
        snprintf(name, sizeof name, "%s.rate", arg);
        lim->rate = checkrate(L, -1, fn, name);
    }
    lua_pop(L, 1);
    if (lua_getfield(L, idx, "burst") != LUA_TNIL) {
        snprintf(name, sizeof name, "%s.burst", arg);
        if (lim->rate == 0)
            wq_argerror(L, fn, arg, "burst needs a rate");
        lim->burst = checkrate(L, -1, fn, name);
        if (lim->burst < 1)
            wq_argerror(L, fn, name, "at least 1 expected");
    }
    lua_pop(L, 1);
    if (lim->rate > 0 && lim->burst == 0)
        lim->burst = lim->rate < 1 ? 1 : floor(lim->rate);
}

void lgroup_read_options(lua_State *L, int opts, lgroup_opts *out)
{
    opts = lua_absindex(L, opts);
    memset(out, 0, sizeof *out);
    int t = lua_getfield(L, opts, "group_of");
    if (t != LUA_TNIL && t != LUA_TFUNCTION)
        wq_argerror(L, "queue", "group_of",
                    lua_pushfstring(L, "function expected, got %s", luaL_typename(L, -1)));
    out->has_group_of = t == LUA_TFUNCTION;
    lua_pop(L, 1);
    if (lua_getfield(L, opts, "group_limit") != LUA_TNIL) {
        checklimit(L, -1, "queue", "group_limit", &out->limit);
        out->has_limit = 1;
    }
    lua_pop(L, 1);
    if (lua_getfield(L, opts, "rate") != LUA_TNIL) { /* {per_second [, burst]} */
        int r = lua_absindex(L, -1);
        if (!lua_istable(L, r))
            wq_argerror(L, "queue", "rate",
                        lua_pushfstring(L, "table {per_second, burst} expected, got %s",
                                        luaL_typename(L, r)));
        lua_geti(L, r, 1);
        out->rate = checkrate(L, -1, "queue", "rate[1] (per_second)");
        lua_geti(L, r, 2);
        out->burst = lua_isnil(L, -1) ? (out->rate < 1 ? 1 : floor(out->rate))
                                      : checkrate(L, -1, "queue", "rate[2] (burst)");
        if (out->burst < 1)
            wq_argerror(L, "queue", "rate[2] (burst)", "at least 1 expected");
        lua_pop(L, 2);
        out->has_rate = 1;
    }
    lua_pop(L, 1);
}

void lgroup_apply_options(lua_State *L, lqueue *lq, int opts, const lgroup_opts *o)
{
    if (o->has_group_of) {
        lua_getfield(L, opts, "group_of");
        lq->group_of_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    }
    if (o->has_limit && wq_queue_set_group_default(lq->q, &o->limit) < 0)
        luaL_error(L, "queue: out of memory");
    if (o->has_rate && wq_queue_set_rate(lq->q, o->rate, o->burst) < 0)
        luaL_error(L, "queue: bad rate");
}

void lgroup_resolve(lua_State *L, lqueue *lq, int keyidx, int payidx, const char *fn,
                    wq_add_opts *o)
{
    lua_rawgeti(L, LUA_REGISTRYINDEX, lq->group_of_ref);
    lua_pushvalue(L, keyidx);
    if (payidx)
        lua_pushvalue(L, payidx);
    else
        lua_pushnil(L);
    lua_call(L, 2, 1); /* an error is the add's error: nothing changed yet */
    if (lua_isnil(L, -1))
        return;
    if (lua_type(L, -1) != LUA_TSTRING)
        luaL_error(L, "%s: group_of must return a string or nil, got %s", fn, luaL_typename(L, -1));
    o->group = lua_tolstring(L, -1, &o->grouplen);
    if (o->grouplen > WQ_GROUP_MAX)
        luaL_error(L, "%s: group_of returned a group longer than %d bytes", fn, WQ_GROUP_MAX);
}

/* What an outside add passes to resolve_ext: pushed there, under the pcall. */
typedef struct ext_add {
    lqueue *lq;
    const char *key, *payload;
    size_t keylen, paylen;
} ext_add;

static int resolve_ext(lua_State *L)
{
    const ext_add *a = lua_touserdata(L, 1);
    lua_pushlstring(L, a->key, a->keylen); /* 2 */
    if (a->payload)
        wq_push_payload(L, a->payload, a->paylen); /* 3 */
    else
        lua_pushnil(L);
    wq_add_opts o = {0};
    lgroup_resolve(L, a->lq, 2, 3, "group_of", &o);
    return 1;
}

int lgroup_resolve_ext(lqueue *lq, const char *key, size_t keylen, const char *payload,
                       size_t paylen, wq_add_opts *o, char *buf, size_t bufsize)
{
    lua_State *L = lq->L;
    int top = lua_gettop(L);
    ext_add a = {lq, key, payload, keylen, paylen};
    lua_pushcfunction(L, resolve_ext); /* neither push allocates */
    lua_pushlightuserdata(L, &a);
    int st = lua_pcall(L, 1, 1, 0);
    int r = 0;
    if (st != LUA_OK) {
        const char *msg = lua_tostring(L, -1);
        snprintf(buf, bufsize, "%s", msg ? msg : "group_of failed");
        r = -1;
    } else if (lua_type(L, -1) == LUA_TSTRING) {
        size_t n;
        const char *g = lua_tolstring(L, -1, &n);
        if (n >= bufsize)
            n = bufsize - 1;
        memcpy(buf, g, n);
        buf[n] = '\0';
        o->group = buf;
        o->grouplen = n;
    }
    lua_settop(L, top);
    return r;
}

/* An answer of the database to a group limit call: raises its error (a group name the
 * database cannot hold is a bad argument). */
static lua_Integer check_answer(lua_State *L, const char *fn)
{
    lua_Integer r = lqueue_check_answer(L, fn);
    if (r < 0)
        wq_argerror(L, fn, "group", "PostgreSQL holds UTF-8 text without NUL bytes only");
    return r;
}

static int set_group_limit_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    check_answer(L, "set_group_limit");
    return 0;
}

/* q:set_group_limit(group, limit | nil) */
static int set_group_limit(lua_State *L)
{
    lqueue *lq = lqueue_check(L, "set_group_limit");
    size_t len;
    const char *g = lgroup_checkname(L, 2, "set_group_limit", "group", &len);
    wq_limit lim;
    if (!lua_isnoneornil(L, 3))
        checklimit(L, 3, "set_group_limit", "limit", &lim);
    /* On a database shared by runners the limit is the database's, for every runner. */
    wq_bop op = {.kind = WQ_BOP_SET_GROUP_LIMIT,
                 .key = g,
                 .keylen = len,
                 .glimit = lua_isnoneornil(L, 3) ? NULL : &lim};
    lqueue_op(L, lq, "set_group_limit", &op, 0, set_group_limit_k);
    int r = wq_queue_set_group_limit(lq->q, g, len, lua_isnoneornil(L, 3) ? NULL : &lim);
    if (r < 0)
        return lqueue_raise(L, "set_group_limit", r);
    return 0;
}

static int group_limit_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    int own = check_answer(L, "group_limit") > 0;
    lqueue_push_answer(L, "group_limit");
    lua_pushboolean(L, own);
    return 2;
}

/* q:group_limit(group) -> {concurrency=, rate=, burst=}, own (true when set for this group) */
static int group_limit(lua_State *L)
{
    lqueue *lq = lqueue_check(L, "group_limit");
    size_t len;
    const char *g = lgroup_checkname(L, 2, "group_limit", "group", &len);
    wq_bop op = {.kind = WQ_BOP_GROUP_LIMIT, .key = g, .keylen = len};
    lqueue_op(L, lq, "group_limit", &op, 0, group_limit_k);
    wq_limit lim;
    int own = wq_queue_group_limit(lq->q, g, len, &lim);
    lua_createtable(L, 0, 3);
    if (lim.concurrency) {
        lua_pushinteger(L, lim.concurrency);
        lua_setfield(L, -2, "concurrency");
    }
    if (lim.rate > 0) {
        lua_pushnumber(L, lim.rate);
        lua_setfield(L, -2, "rate");
        lua_pushnumber(L, lim.burst);
        lua_setfield(L, -2, "burst");
    }
    lua_pushboolean(L, own);
    return 2;
}

const luaL_Reg lgroup_methods[] = {
    {"set_group_limit", set_group_limit}, {"group_limit", group_limit}, {NULL, NULL}};
