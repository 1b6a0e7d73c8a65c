/*
 * The `wq` module table and its runtime functions: spawn, sleep, now,
 * time, after, every, requeue, exit, json (exec lives in lexec.c, queues
 * in lqueue.c, limiters in llimiter.c, wq.log and q:dead() in lua/wq.lua).
 * Also the argument checks and JSON payload helpers every binding shares
 * (the codec is ljson.c).
 */
#include "lua/lwq.h"

#include "lua/lflow.h"

#include "engine/log.h"
#include "host/timer.h"
#include "lua/embedded.h"
#include "lua/lcrypto.h"
#include "lua/lexec.h"
#include "lua/lpool.h"
#include "lua/lhttp.h"
#include "lua/lidle.h"
#include "lua/ljson.h"
#include "lua/llimiter.h"
#include "lua/lqueue.h"
#include "lua/lworker.h"
#include "lua/sched.h"

#include <lauxlib.h>
#include <lualib.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int luaopen_cjson(lua_State *L); /* from liblua5.4-cjson */

/* Registry key of the internals table lua/wq.lua fills. */
static char internals_key;

int wq_lua_internal(lua_State *L, const char *name)
{
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &internals_key) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_pushnil(L);
        return LUA_TNIL;
    }
    int t = lua_getfield(L, -1, name);
    lua_remove(L, -2);
    return t;
}

/* ---- shared helpers ---- */

int wq_argerror(lua_State *L, const char *fn, const char *arg, const char *msg)
{
    return luaL_error(L, "%s: bad argument '%s' (%s)", fn, arg, msg);
}

int wq_argexpected(lua_State *L, int idx, const char *fn, const char *arg, const char *what)
{
    idx = lua_absindex(L, idx);
    if (lua_type(L, idx) == LUA_TNUMBER) { /* a number of the wrong kind or range: show it */
        if (lua_isinteger(L, idx))
            lua_pushfstring(L, "%I", (LUAI_UACINT)lua_tointeger(L, idx));
        else
            lua_pushfstring(L, "%f", (LUAI_UACNUMBER)lua_tonumber(L, idx));
        return luaL_error(L, "%s: bad argument '%s' (%s expected, got %s)", fn, arg, what,
                          lua_tostring(L, -1));
    }
    size_t len;
    const char *s = lua_type(L, idx) == LUA_TSTRING ? lua_tolstring(L, idx, &len) : NULL;
    if (s && len <= 40 && strlen(s) == len) /* a short string shows itself: "got 'UTC'" */
        return luaL_error(L, "%s: bad argument '%s' (%s expected, got '%s')", fn, arg, what, s);
    return luaL_error(L, "%s: bad argument '%s' (%s expected, got %s)", fn, arg, what,
                      luaL_typename(L, idx));
}

void *wq_checkself(lua_State *L, const char *tname, const char *obj, const char *what,
                   const char *fn)
{
    void *p = luaL_testudata(L, 1, tname);
    if (!p)
        luaL_error(L, "%s:%s: bad argument 'self' (%s expected, got %s; call it as %s:%s(...))",
                   obj, fn, what, luaL_typename(L, 1), obj, fn);
    return p;
}

double wq_checkfinite(lua_State *L, int idx, const char *fn, const char *arg, int nonneg)
{
    if (lua_type(L, idx) != LUA_TNUMBER)
        wq_argerror(L, fn, arg,
                    lua_pushfstring(L, "number expected, got %s", luaL_typename(L, idx)));
    double d = lua_tonumber(L, idx);
    if (!isfinite(d))
        wq_argerror(L, fn, arg, "must be finite");
    if (nonneg && d < 0)
        wq_argerror(L, fn, arg, "must be >= 0");
    return d;
}

double wq_checkduration(lua_State *L, int idx, const char *fn, const char *arg, int nonneg)
{
    double d = wq_checkfinite(L, idx, fn, arg, nonneg);
    if (d > WQ_MAX_SECONDS)
        wq_argerror(L, fn, arg, "must be at most 9.2e9 seconds");
    return d;
}

int64_t wq_seconds_to_ns(double s)
{
    if (!(s > 0))
        return 0;
    if (s > WQ_MAX_SECONDS)
        return WQ_NEVER;
    int64_t ns = (int64_t)(s * 1e9);
    return ns > 0 ? ns : 1; /* below a nanosecond is 1 ns, never "none" */
}

const char *wq_checkkeyarg(lua_State *L, int idx, const char *fn, const char *arg, size_t *len)
{
    int t = lua_type(L, idx);
    if (t != LUA_TSTRING && t != LUA_TNUMBER)
        wq_argerror(L, fn, arg,
                    lua_pushfstring(L, "string expected, got %s", luaL_typename(L, idx)));
    /* nan's text is "nan" or "-nan" by platform; inf is no key anybody means. */
    if (t == LUA_TNUMBER && !lua_isinteger(L, idx) && !isfinite(lua_tonumber(L, idx)))
        wq_argerror(L, fn, arg, "a number key must be finite");
    const char *k = lua_tolstring(L, idx, len);
    if (*len > WQ_KEY_MAX)
        wq_argerror(L, fn, arg, "too long");
    return k;
}

const char *wq_checkkey(lua_State *L, int idx, const char *fn, size_t *len)
{
    return wq_checkkeyarg(L, idx, fn, "key", len);
}

void wq_checkopts(lua_State *L, int idx, const char *fn, const char *const names[])
{
    idx = lua_absindex(L, idx);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        int known = 0;
        if (lua_type(L, -1) == LUA_TSTRING)
            for (int i = 0; names[i] && !known; i++)
                known = strcmp(lua_tostring(L, -1), names[i]) == 0;
        if (!known)
            wq_argerror(L, fn, "opts",
                        lua_pushfstring(L, "unknown option '%s'", luaL_tolstring(L, -1, NULL)));
    }
}

void wq_encode_payload(lua_State *L, int idx, const char *fn)
{
    idx = lua_absindex(L, idx);
    int t = lua_type(L, idx);
    if (t == LUA_TNIL || t == LUA_TNONE) {
        lua_pushnil(L);
        return;
    }
    if (t != LUA_TSTRING && t != LUA_TTABLE)
        wq_argerror(L, fn, "payload", lua_pushfstring(L, "%s not allowed", luaL_typename(L, idx)));
    int status = wq_ljson_encode(L, idx);
    if (status == LUA_ERRMEM)
        lua_error(L);
    if (status != LUA_OK) /* "function not allowed", "tables nested too deeply ..." */
        wq_argerror(L, fn, "payload", lua_tostring(L, -1));
}

void wq_push_payload(lua_State *L, const char *json, size_t len)
{
    if (!json || (len == 4 && memcmp(json, "null", 4) == 0)) {
        lua_pushnil(L);
        return;
    }
    int status = wq_ljson_decode(L, json, len);
    if (status == LUA_ERRMEM)
        lua_error(L);
    if (status != LUA_OK) {
        /* Not JSON (e.g. fed by hand into the state file): hand over the text. */
        lua_pop(L, 1);
        lua_pushlstring(L, json, len);
    }
}

/* ---- runtime functions ---- */

static int wq_spawn(lua_State *L)
{
    if (lua_type(L, 1) != LUA_TFUNCTION)
        wq_argerror(L, "spawn", "fn",
                    lua_pushfstring(L, "function expected, got %s", luaL_typename(L, 1)));
    int n = lua_gettop(L);
    wq_task *t = wq_task_spawn(L, n - 1, TASK_SPAWN);
    lua_createtable(L, 0, 1);
    lua_pushinteger(L, t->id);
    lua_setfield(L, -2, "id");
    return 1;
}

static int sleep_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    wq_task_check_interrupt(L, wq_task_of(L));
    return 0;
}

static int wq_sleep(lua_State *L)
{
    double s = wq_checkduration(L, 1, "sleep", "seconds", 0);
    wq_task *t = wq_task_require(L, "sleep");
    wq_host *h = t->host;
    return wq_task_wait_until(L, t, wq_add_sat(wq_host_now(h), wq_seconds_to_ns(s)), "sleep", 0,
                              sleep_k);
}

static int wq_now(lua_State *L)
{
    lua_pushnumber(L, (double)wq_host_now(wq_host_of(L)) / 1e9);
    return 1;
}

static int wq_time(lua_State *L)
{
    wq_host *h = wq_host_of(L);
    lua_pushnumber(L, wq_host_unix(h, wq_host_now(h)));
    return 1;
}

/* ---- timers ---- */

typedef struct ltimer {
    wq_host *host;
    lua_State *L;  /* the main thread */
    uint64_t id;   /* pending timer, 0 when not pending */
    int fn_ref;    /* registry: the callback */
    int self_ref;  /* registry: this userdata while pending */
    int64_t every; /* period, 0 for a one-shot timer */
    int64_t due;
} ltimer;

static void timer_release(lua_State *L, ltimer *tm)
{
    luaL_unref(L, LUA_REGISTRYINDEX, tm->fn_ref);
    luaL_unref(L, LUA_REGISTRYINDEX, tm->self_ref);
    tm->fn_ref = tm->self_ref = LUA_NOREF;
    tm->id = 0;
}

/* Starts the callback's task; protected (a loop callback must not raise). */
static int spawn_callback(lua_State *L)
{
    ltimer *tm = lua_touserdata(L, 1);
    lua_rawgeti(L, LUA_REGISTRYINDEX, tm->fn_ref);
    wq_task_spawn(L, 0, TASK_TIMER);
    return 0;
}

static void timer_fire(wq_host *h, void *data, uint64_t id)
{
    (void)id;
    ltimer *tm = data;
    lua_State *L = tm->L;
    lua_pushcfunction(L, spawn_callback);
    lua_pushlightuserdata(L, tm);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
        wq_host_logl(h, WQ_LOG_WARN, "wqrun: timer callback skipped: %s", lua_tostring(L, -1));
        lua_pop(L, 1);
    }
    if (tm->every) {
        int64_t now = wq_host_now(h);
        tm->due = wq_add_sat(tm->due, tm->every);
        if (tm->due <= now)
            tm->due = wq_add_sat(now, tm->every);
        tm->id = wq_timer_start(h, tm->due, timer_fire, tm);
        if (tm->id)
            return;
        wq_host_logl(h, WQ_LOG_ERROR, "wqrun: periodic timer stopped: out of memory");
    }
    timer_release(L, tm);
}

static int timer_new(lua_State *L, const char *fn, int every)
{
    double s = wq_checkduration(L, 1, fn, every ? "interval" : "seconds", 0);
    if (every && s <= 0)
        wq_argerror(L, fn, "interval", "must be > 0");
    if (lua_type(L, 2) != LUA_TFUNCTION)
        wq_argerror(L, fn, "fn",
                    lua_pushfstring(L, "function expected, got %s", luaL_typename(L, 2)));
    wq_host *h = wq_host_of(L);
    ltimer *tm = lua_newuserdatauv(L, sizeof *tm, 0);
    memset(tm, 0, sizeof *tm);
    tm->fn_ref = tm->self_ref = LUA_NOREF;
    tm->host = h;
    tm->L = wq_sched_of(L)->L;
    tm->every = every ? wq_seconds_to_ns(s) : 0;
    if (every && tm->every == 0)
        tm->every = 1;
    luaL_setmetatable(L, "wq.Timer");
    /* The references before the timer: luaL_ref raises on out-of-memory,
     * and a timer started without them would fire on a collected tm. */
    lua_pushvalue(L, 2);
    tm->fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_pushvalue(L, -1);
    tm->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    tm->due = wq_add_sat(wq_host_now(h), wq_seconds_to_ns(s));
    tm->id = wq_timer_start(h, tm->due, timer_fire, tm);
    if (!tm->id) {
        timer_release(L, tm);
        return luaL_error(L, "%s: out of memory", fn);
    }
    return 1;
}

static int wq_after(lua_State *L)
{
    return timer_new(L, "after", 0);
}

static int wq_every(lua_State *L)
{
    return timer_new(L, "every", 1);
}

static int timer_cancel(lua_State *L)
{
    ltimer *tm = wq_checkself(L, "wq.Timer", "timer", "timer", "cancel");
    int pending = tm->id != 0;
    if (pending) {
        wq_timer_stop(tm->host, tm->id);
        timer_release(L, tm);
    }
    lua_pushboolean(L, pending);
    return 1;
}

static int timer_pending(lua_State *L)
{
    ltimer *tm = wq_checkself(L, "wq.Timer", "timer", "timer", "pending");
    lua_pushboolean(L, tm->id != 0);
    return 1;
}

/* ---- misc ---- */

/* wq.requeue(seconds [, payload]): a handler outcome; the payload (JSON text) is its user value. */
static int wq_requeue(lua_State *L)
{
    double s = wq_checkduration(L, 1, "requeue", "seconds", 0);
    lua_settop(L, 2);
    wq_encode_payload(L, 2, "requeue"); /* 3: JSON text or nil */
    double *d = lua_newuserdatauv(L, sizeof *d, 1);
    *d = s;
    lua_pushvalue(L, 3);
    lua_setiuservalue(L, -2, 1);
    luaL_setmetatable(L, "wq.Requeue");
    return 1;
}

/* wq.fail(message): a permanent failure, returned or raised; the message is its user value. */
static int wq_fail(lua_State *L)
{
    if (lua_isnoneornil(L, 1))
        lua_pushliteral(L, "failed");
    else
        wq_safe_tostring(L, 1);
    lua_newuserdatauv(L, 0, 1);
    lua_insert(L, -2);
    lua_setiuservalue(L, -2, 1);
    luaL_setmetatable(L, "wq.Fail");
    return 1;
}

/*
 * wq.retry_in(seconds, message): a failure that counts (max_retries still
 * applies) but is retried after the given delay instead of the limiter's
 * (a 429's Retry-After). Returned or raised; the message is its user value.
 */
static int wq_retry_in(lua_State *L)
{
    double s = wq_checkduration(L, 1, "retry_in", "seconds", 1);
    if (lua_isnoneornil(L, 2))
        lua_pushliteral(L, "failed");
    else
        wq_safe_tostring(L, 2);
    double *d = lua_newuserdatauv(L, sizeof *d, 1);
    *d = s;
    lua_insert(L, -2);
    lua_setiuservalue(L, -2, 1);
    luaL_setmetatable(L, "wq.Retry");
    return 1;
}

void wq_push_fail(lua_State *L, const char *msg)
{
    lua_newuserdatauv(L, 0, 1);
    lua_pushstring(L, msg);
    lua_setiuservalue(L, -2, 1);
    luaL_setmetatable(L, "wq.Fail");
}

void wq_push_retry(lua_State *L, double seconds, const char *msg)
{
    double *d = lua_newuserdatauv(L, sizeof *d, 1);
    *d = seconds;
    lua_pushstring(L, msg);
    lua_setiuservalue(L, -2, 1);
    luaL_setmetatable(L, "wq.Retry");
}

/* tostring of a wq.fail or wq.retry_in outcome: its message. */
static int outcome_tostring(lua_State *L)
{
    /* getmetatable(f).__tostring may be called with anything */
    if (!luaL_testudata(L, 1, "wq.Retry"))
        luaL_checkudata(L, 1, "wq.Fail");
    lua_getiuservalue(L, 1, 1);
    return 1;
}

/* wq.shutdown(): the graceful stop a first SIGINT/SIGTERM begins. */
static int wq_shutdown(lua_State *L)
{
    wq_host_stop(wq_host_of(L), "wq.shutdown()");
    return 0;
}

/* The end of the on_shutdown hooks (lua/wq.lua calls it, true if one failed): the host may exit. */
static int hooks_done(lua_State *L)
{
    wq_host *h = wq_host_of(L);
    wq_sched_of(L)->hooks_running = 0;
    if (lua_toboolean(L, 1))
        h->failed = 1;
    wq_host_settle(h);
    return 0;
}

/* The C half of wq.log (lua/wq.lua formats): writes one line. */
/*
 * wq.log's line. Called in a handler, it carries the job: its queue, key and attempt as
 * fields of a JSON line, and as a prefix of a text one ("mail 'user-7' (attempt 2): ...").
 */
static int raw_log(lua_State *L)
{
    const char *msg = luaL_checkstring(L, 1);
    wq_host *h = wq_host_of(L);
    wq_task *t = wq_task_of(L);
    if (!t && wq_running) /* a coroutine of the handler's own: the task being resumed */
        t = wq_task_of(wq_running);
    if (!t || t->kind != TASK_WORKER || !t->job_key) {
        wq_host_log(h, "%s", msg);
        return 0;
    }
    lqueue *lq = t->queue;
    long long attempt = (long long)lworker_failures(lq, t->job_key, t->job_keylen) + 1;
    wq_log_field f[] = {
        WQ_LOG_STR("queue", lq->name),
        WQ_LOG_BYTES("key", t->job_key, t->job_keylen),
        WQ_LOG_NUM("attempt", attempt),
    };
    if (wq_log_json()) {
        wq_host_logf(h, WQ_LOG_INFO, f, 3, "%s", msg);
    } else {
        char shown[WQ_SHOWN_KEY];
        wq_show_key(shown, t->job_key, t->job_keylen);
        wq_host_logf(h, WQ_LOG_INFO, f, 3, "%s '%s' (attempt %lld): %s", lq->name, shown, attempt,
                     msg);
    }
    return 0;
}

/* ---- wq.json: the payload codec, for scripts ---- */

static int json_encode(lua_State *L)
{
    luaL_checkany(L, 1);
    lua_settop(L, 1);
    int status = wq_ljson_encode(L, 1);
    if (status == LUA_ERRMEM)
        return lua_error(L);
    if (status != LUA_OK)
        return wq_argerror(L, "json.encode", "value", lua_tostring(L, -1));
    return 1;
}

/* Text that is not JSON is an outcome, not a misuse: nil and why. */
static int json_decode(lua_State *L)
{
    if (lua_type(L, 1) != LUA_TSTRING)
        return wq_argerror(L, "json.decode", "text",
                           lua_pushfstring(L, "string expected, got %s", luaL_typename(L, 1)));
    size_t len;
    const char *text = lua_tolstring(L, 1, &len);
    return wq_ljson_decode_results(L, text, len);
}

static void open_json(lua_State *L)
{
    lua_createtable(L, 0, 3);
    lua_pushcfunction(L, json_encode);
    lua_setfield(L, -2, "encode");
    lua_pushcfunction(L, json_decode);
    lua_setfield(L, -2, "decode");
    lua_pushlightuserdata(L, NULL); /* the same null as cjson.null */
    lua_setfield(L, -2, "null");
    lua_setfield(L, -2, "json");
}

/* Runs the embedded Lua files (lua/ in the source tree) with (wq, internals). */
static void run_embedded(lua_State *L, int wq, int internals)
{
    for (const wq_embedded *e = wq_embedded_lua; e->name; e++) {
        lua_pushfstring(L, "=[wq]/%s.lua", e->name);
        if (luaL_loadbufferx(L, e->src, e->len, lua_tostring(L, -1), "t") != LUA_OK)
            lua_error(L);
        lua_remove(L, -2);
        lua_pushvalue(L, wq);
        lua_pushvalue(L, internals);
        lua_call(L, 2, 0);
    }
}

static int exit_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)L;
    (void)status;
    (void)ctx;
    return 0;
}

static int wq_exit(lua_State *L)
{
    lua_Integer code = 0;
    if (lua_isboolean(L, 1))
        code = lua_toboolean(L, 1) ? 0 : 1;
    else if (!lua_isnoneornil(L, 1)) {
        if (!lua_isinteger(L, 1))
            wq_argerror(L, "exit", "code", "integer expected");
        code = lua_tointeger(L, 1);
        if (code < 0 || code > 255)
            wq_argerror(L, "exit", "code", "must be 0..255");
    }
    wq_host *h = wq_host_of(L);
    if (!h->exiting)
        h->exit_chosen = 1;
    wq_host_exit(h, (int)code);
    wq_task *t = wq_task_of(L);
    if (t && lua_isyieldable(L))
        return wq_task_wait(L, t, NULL, 0, exit_k); /* never resumed */
    return 0;
}

static const luaL_Reg wq_funcs[] = {
    {"spawn", wq_spawn},       {"sleep", wq_sleep},       {"now", wq_now},
    {"time", wq_time},         {"after", wq_after},       {"every", wq_every},
    {"exit", wq_exit},         {"requeue", wq_requeue},   {"fail", wq_fail},
    {"shutdown", wq_shutdown}, {"retry_in", wq_retry_in}, {NULL, NULL}};

static const luaL_Reg timer_methods[] = {
    {"cancel", timer_cancel}, {"pending", timer_pending}, {NULL, NULL}};

static int open_wq(lua_State *L)
{
    lua_getglobal(L, "wq");
    return 1;
}

void wq_lua_open(lua_State *L)
{
    /* Scripts may `require "cjson"`; its null (the light userdata NULL) is the
     * JSON null of payloads. Payloads themselves go through ljson.c. */
    luaL_requiref(L, "cjson", luaopen_cjson, 0);
    lua_pop(L, 1);

    luaL_newmetatable(L, "wq.Timer");
    luaL_newlib(L, timer_methods);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
    luaL_newmetatable(L, "wq.Requeue");
    lua_pop(L, 1);
    luaL_newmetatable(L, "wq.Fail");
    lua_pushcfunction(L, outcome_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pop(L, 1);
    luaL_newmetatable(L, "wq.Retry");
    lua_pushcfunction(L, outcome_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pop(L, 1);

    lua_createtable(L, 0, 4); /* internals, for lua/wq.lua */
    int internals = lua_gettop(L);
    lua_pushcfunction(L, raw_log);
    lua_setfield(L, internals, "log");
    lua_pushcfunction(L, hooks_done);
    lua_setfield(L, internals, "hooks_done");
    luaL_newlib(L, wq_funcs);
    int wq = lua_gettop(L);
    luaL_setfuncs(L, lidle_funcs, 0);
    lua_pushliteral(L, WQ_VERSION);
    lua_setfield(L, -2, "version");
    wq_lua_open_queue(L, internals);
    wq_lua_open_flow(L, wq);
    wq_lua_open_limiter(L);
    wq_lua_open_exec(L);
    wq_lua_open_pool(L);
    wq_lua_open_http(L);
    wq_lua_open_crypto(L);
    open_json(L);
    run_embedded(L, wq, internals);
    lua_setglobal(L, "wq");
    lua_rawsetp(L, LUA_REGISTRYINDEX, &internals_key); /* the runtime finds hooks there */

    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
    lua_pushcfunction(L, open_wq);
    lua_setfield(L, -2, "wq");
    lua_pop(L, 1);
}
