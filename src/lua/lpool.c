/*
 * wq.pool, the Lua half: checks argv and opts, hands the processes to the
 * host's pool module (host/pool.c), and waits in the calling task. A call
 * is a wq.PoolCall userdata holding the pool's call record, so that a task
 * collected or interrupted while it waits (a cancel, a handler timeout)
 * gives its call up: the process running it is killed and replaced. The
 * result is built in the continuation, inside the task.
 *
 * As a queue's handler a pool is a C function over pool:call's machinery
 * (wq_lpool_handler): the request carries the payload's JSON text as the
 * queue holds it, and the reply maps to what a Lua handler returns, so the
 * worker loop (lworker.c) applies its outcomes unchanged.
 */
#include "lua/lpool.h"

#include "host/pool.h"
#include "lua/lexec.h"
#include "lua/ljson.h"
#include "lua/lwq.h"
#include "lua/sched.h"

#include <json-c/json.h>
#include <lauxlib.h>
#include <limits.h>
#include <string.h>

#define POOL_MT "wq.Pool"
#define CALL_MT "wq.PoolCall"
#define POOL_SIZE_MAX 1024

typedef struct lpool {
    wq_pool *p; /* NULL once collected */
} lpool;

typedef struct lcall {
    wq_pool_call c;
} lcall;

static lpool *check_pool(lua_State *L, const char *fn)
{
    lpool *lp = wq_checkself(L, POOL_MT, "pool", "pool", fn);
    if (!lp->p) /* its __gc was called by hand */
        luaL_error(L, "pool:%s: the pool is gone", fn);
    return lp;
}

/* ---- calls ---- */

static void on_done(wq_pool_call *c)
{
    wq_task_wake(c->ud, 0);
}

static void call_cancel(wq_task *t)
{
    lcall *lc = t->wait;
    if (lc)
        wq_pool_abandon(&lc->c);
}

static int call_gc(lua_State *L)
{
    lcall *lc = luaL_testudata(L, 1, CALL_MT);
    if (!lc)
        return 0;
    wq_pool_abandon(&lc->c);
    if (lc->c.reply) {
        json_object_put(lc->c.reply);
        lc->c.reply = NULL;
    }
    return 0;
}

/*
 * Starts the call whose request line is at the stack top, on the pool at
 * index 1, and waits with continuation k. Returns k's results, or nil and
 * the message when it fails at once.
 */
static int start_call(lua_State *L, wq_task *t, wq_pool_check_fn check, const char *queue,
                      const char *key, size_t keylen, lua_KFunction k)
{
    lpool *lp = lua_touserdata(L, 1);
    int req = lua_gettop(L);
    lcall *lc = lua_newuserdatauv(L, sizeof *lc, 1);
    memset(lc, 0, sizeof *lc);
    luaL_setmetatable(L, CALL_MT);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1); /* the pool outlives its calls */
    wq_pool_call *c = &lc->c;
    c->req = lua_tolstring(L, req, &c->reqlen); /* on this task's stack while it waits */
    c->fn = on_done;
    c->ud = t;
    c->check = check;
    c->queue = queue;
    c->key = key;
    c->keylen = keylen;
    if (wq_pool_call_start(lp->p, c) < 0) {
        lua_pushnil(L);
        lua_pushstring(L, c->err);
        return 2;
    }
    t->wait = lc;
    return wq_task_wait(L, t, call_cancel, (lua_KContext)lc, k);
}

static int call_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    wq_task_check_interrupt(L, wq_task_of(L));
    wq_pool_call *c = &((lcall *)ctx)->c;
    if (!c->ok) {
        lua_pushnil(L);
        lua_pushstring(L, c->err);
        return 2;
    }
    wq_ljson_push(L, c->reply); /* a raise leaves the reply to call_gc */
    json_object_put(c->reply);
    c->reply = NULL;
    return 1;
}

/* pool:call(request): the decoded reply line, or nil and why. */
static int pool_call(lua_State *L)
{
    lpool *lp = check_pool(L, "call");
    lua_settop(L, 2);
    if (!lua_istable(L, 2))
        wq_argerror(L, "pool:call", "request",
                    lua_pushfstring(L, "table expected, got %s", luaL_typename(L, 2)));
    int st = wq_ljson_encode(L, 2);
    if (st == LUA_ERRMEM)
        lua_error(L);
    if (st != LUA_OK)
        wq_argerror(L, "pool:call", "request", lua_tostring(L, -1));
    lua_pushliteral(L, "\n");
    lua_concat(L, 2); /* 3: the request line */
    wq_task *t = wq_task_require(L, "pool:call");
    if (!lp->p || wq_pool_closed(lp->p)) {
        lua_pushnil(L);
        lua_pushliteral(L, "pool closed");
        return 2;
    }
    return start_call(L, t, NULL, NULL, NULL, 0, call_k);
}

/* ---- the pool object ---- */

static int pool_close(lua_State *L)
{
    lpool *lp = wq_checkself(L, POOL_MT, "pool", "pool", "close");
    if (lp->p)
        wq_pool_close(lp->p);
    return 0;
}

static int pool_gc(lua_State *L)
{
    lpool *lp = luaL_testudata(L, 1, POOL_MT); /* a __gc called by hand with anything */
    if (!lp)
        return 0;
    wq_pool_free(lp->p);
    lp->p = NULL;
    return 0;
}

static int pool_size(lua_State *L)
{
    lpool *lp = check_pool(L, "size");
    wq_pool_stats st;
    wq_pool_get_stats(lp->p, &st);
    lua_pushinteger(L, st.size);
    return 1;
}

static int pool_stats(lua_State *L)
{
    lpool *lp = check_pool(L, "stats");
    wq_pool_stats st;
    wq_pool_get_stats(lp->p, &st);
    lua_createtable(L, 0, 8);
    lua_pushinteger(L, st.size);
    lua_setfield(L, -2, "size");
    lua_pushinteger(L, st.running);
    lua_setfield(L, -2, "running");
    lua_pushinteger(L, st.busy);
    lua_setfield(L, -2, "busy");
    lua_pushinteger(L, (lua_Integer)st.waiting);
    lua_setfield(L, -2, "waiting");
    lua_pushinteger(L, (lua_Integer)st.calls);
    lua_setfield(L, -2, "calls");
    lua_pushinteger(L, (lua_Integer)st.failed);
    lua_setfield(L, -2, "failed");
    lua_pushinteger(L, (lua_Integer)st.started);
    lua_setfield(L, -2, "started");
    lua_pushboolean(L, wq_pool_closed(lp->p));
    lua_setfield(L, -2, "closed");
    return 1;
}

static int pool_tostring(lua_State *L)
{
    lpool *lp = luaL_checkudata(L, 1, POOL_MT);
    if (!lp->p)
        return luaL_error(L, "pool: collected");
    wq_pool_stats st;
    wq_pool_get_stats(lp->p, &st);
    lua_pushfstring(L, "pool (%s, %d processes)", wq_pool_name(lp->p), st.size);
    return 1;
}

static const char *const pool_opts[] = {"size", "env", "cwd", "timeout", NULL};

/* wq.pool(argv [, opts]): the pool, or nil and why when its program cannot be started. */
static int pool_new(lua_State *L)
{
    lua_settop(L, 2);
    char **argv = wq_lua_check_argv(L, 1, "pool"); /* 3, 4 */
    wq_pool_spec spec = {argv, NULL, NULL, 1, 0};
    if (!lua_isnil(L, 2)) {
        if (!lua_istable(L, 2))
            wq_argerror(L, "pool", "opts",
                        lua_pushfstring(L, "table expected, got %s", luaL_typename(L, 2)));
        wq_checkopts(L, 2, "pool", pool_opts);
        if (lua_getfield(L, 2, "size") != LUA_TNIL) {
            if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1 ||
                lua_tointeger(L, -1) > POOL_SIZE_MAX)
                wq_argexpected(L, -1, "pool", "size", "integer 1-1024");
            spec.size = (int)lua_tointeger(L, -1);
        }
        if (lua_getfield(L, 2, "cwd") != LUA_TNIL) {
            size_t len;
            if (lua_type(L, -1) != LUA_TSTRING)
                wq_argexpected(L, -1, "pool", "cwd", "string");
            spec.cwd = lua_tolstring(L, -1, &len);
            if (memchr(spec.cwd, '\0', len))
                wq_argerror(L, "pool", "cwd", "contains a NUL byte");
        }
        if (lua_getfield(L, 2, "timeout") != LUA_TNIL)
            spec.timeout_ns = wq_seconds_to_ns(wq_checkduration(L, -1, "pool", "timeout", 1));
        if (lua_getfield(L, 2, "env") != LUA_TNIL) {
            if (!lua_istable(L, -1))
                wq_argexpected(L, -1, "pool", "env", "table");
            spec.env = wq_lua_build_env(L, lua_gettop(L), "pool");
        }
    }
    lpool *lp = lua_newuserdatauv(L, sizeof *lp, 0);
    lp->p = NULL;
    luaL_setmetatable(L, POOL_MT);
    int err = wq_pool_new(wq_host_of(L), &spec, &lp->p);
    if (err) {
        lua_pushnil(L);
        lua_pushfstring(L, "pool: cannot run '%s': %s", argv[0], strerror(err));
        return 2;
    }
    return 1;
}

/* ---- a pool as a queue's handler ---- */

/* A handler's reply: {"result": ...} or {"error": "...", "retry_in": s, "permanent": true}. */
static const char *handler_check(json_object *o)
{
    if (!o || !json_object_is_type(o, json_type_object))
        return "not an object with \"result\" or \"error\"";
    json_object *v;
    int res = json_object_object_get_ex(o, "result", NULL);
    int err = json_object_object_get_ex(o, "error", NULL);
    if (res == err)
        return res ? "both \"result\" and \"error\"" : "neither \"result\" nor \"error\"";
    if (json_object_object_get_ex(o, "retry_in", &v)) {
        json_type t = json_object_get_type(v);
        if ((t != json_type_int && t != json_type_double) || !(json_object_get_double(v) >= 0) ||
            json_object_get_double(v) > WQ_MAX_SECONDS)
            return "\"retry_in\" is not a number of seconds >= 0";
    }
    if (json_object_object_get_ex(o, "permanent", &v) && !json_object_is_type(v, json_type_boolean))
        return "\"permanent\" is not a boolean";
    return NULL;
}

/* The reply as a Lua handler's results (see wq_lpool_handler). */
static int handler_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    wq_task_check_interrupt(L, wq_task_of(L));
    wq_pool_call *c = &((lcall *)ctx)->c;
    if (!c->ok) { /* the process failed: a failure like error() */
        lua_pushboolean(L, 0);
        lua_pushstring(L, c->err);
        return 2;
    }
    json_object *r = c->reply, *v;
    if (json_object_object_get_ex(r, "result", &v)) {
        int n = 0;
        if (v && !(json_object_is_type(v, json_type_boolean) && !json_object_get_boolean(v))) {
            wq_ljson_push(L, v);
            n = 1;
        }
        json_object_put(c->reply);
        c->reply = NULL;
        return n; /* false and null: a success without a result */
    }
    json_object_object_get_ex(r, "error", &v);
    const char *msg = json_object_is_type(v, json_type_string)
                          ? json_object_get_string(v)
                          : json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);
    lua_pushstring(L, msg && *msg ? msg : "failed");
    msg = lua_tostring(L, -1);
    json_object *perm, *retry;
    int outcome = 1;
    if (json_object_object_get_ex(r, "permanent", &perm) && json_object_get_boolean(perm))
        wq_push_fail(L, msg); /* as wq.fail(msg) */
    else if (json_object_object_get_ex(r, "retry_in", &retry))
        wq_push_retry(L, json_object_get_double(retry), msg); /* as wq.retry_in(s, msg) */
    else
        outcome = 0;
    json_object_put(c->reply);
    c->reply = NULL;
    if (outcome)
        return 1;
    lua_pushboolean(L, 0); /* as error(msg), without a Lua traceback: false, msg */
    lua_insert(L, -2);
    return 2;
}

/* Appends the key as a JSON string. */
static void add_key(luaL_Buffer *b, const char *key, size_t len)
{
    size_t i = 0;
    while (i < len && (unsigned char)key[i] >= 0x20 && (unsigned char)key[i] < 0x7f &&
           key[i] != '"' && key[i] != '\\')
        i++;
    if (i == len) { /* printable ASCII: as is */
        luaL_addchar(b, '"');
        luaL_addlstring(b, key, len);
        luaL_addchar(b, '"');
        return;
    }
    json_object *s = json_object_new_string_len(key, (int)len);
    if (!s)
        luaL_error(b->L, "out of memory");
    luaL_addstring(b, json_object_to_json_string_ext(s, JSON_C_TO_STRING_PLAIN |
                                                            JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(s);
}

/* handler(key, payload JSON text or nil, attempt), upvalues: the pool, the request's start. */
static int pool_handler(lua_State *L)
{
    size_t klen, plen = 0, hlen;
    const char *key = lua_tolstring(L, 1, &klen);
    const char *payload = lua_tolstring(L, 2, &plen);
    lua_Integer attempt = lua_tointeger(L, 3);
    wq_task *t = wq_task_require(L, "pool handler");
    lua_settop(L, 3);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_replace(L, 1); /* start_call's pool at 1; the key stays anchored by the worker */
    const char *head = lua_tolstring(L, lua_upvalueindex(2), &hlen);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addlstring(&b, head, hlen);
    add_key(&b, key, klen);
    luaL_addstring(&b, ",\"payload\":");
    if (payload)
        luaL_addlstring(&b, payload, plen);
    else
        luaL_addstring(&b, "null");
    lua_pushfstring(L, ",\"attempt\":%I}\n", (LUAI_UACINT)attempt);
    luaL_addvalue(&b);
    luaL_pushresult(&b);
    lpool *lp = lua_touserdata(L, 1);
    if (!lp->p || wq_pool_closed(lp->p)) {
        lua_pushboolean(L, 0);
        lua_pushliteral(L, "pool closed");
        return 2;
    }
    const char *queue = lua_tostring(L, lua_upvalueindex(3));
    int n = start_call(L, t, handler_check, queue, key, klen, handler_k);
    lua_pushboolean(L, 0); /* failed at once: false, the message */
    lua_replace(L, -3);
    return n;
}

int wq_lpool_handler(lua_State *L, int idx, const char *queue)
{
    lpool *lp = luaL_testudata(L, idx, POOL_MT);
    if (!lp || !lp->p)
        return 0;
    idx = lua_absindex(L, idx);
    wq_pool_stats st;
    wq_pool_get_stats(lp->p, &st);
    lua_pushvalue(L, idx);
    json_object *q = json_object_new_string(queue);
    if (!q)
        luaL_error(L, "queue: out of memory");
    lua_pushfstring(
        L, "{\"queue\":%s,\"key\":", json_object_to_json_string_ext(q, JSON_C_TO_STRING_PLAIN));
    json_object_put(q);
    lua_pushstring(L, queue);
    lua_pushcclosure(L, pool_handler, 3);
    lua_replace(L, idx);
    return st.size;
}

void wq_lua_open_pool(lua_State *L)
{
    static const luaL_Reg methods[] = {{"call", pool_call},
                                       {"close", pool_close},
                                       {"size", pool_size},
                                       {"stats", pool_stats},
                                       {NULL, NULL}};
    luaL_newmetatable(L, POOL_MT);
    luaL_newlib(L, methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, pool_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, pool_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pop(L, 1);
    luaL_newmetatable(L, CALL_MT);
    lua_pushcfunction(L, call_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    lua_pushcfunction(L, pool_new);
    lua_setfield(L, -2, "pool");
}
