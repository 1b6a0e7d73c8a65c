/*
 * wq.exec, the Lua half: checks argv and opts, hands the child to the
 * host's process module (host/proc.c) and waits. The result table is
 * built in the continuation, inside the task (so inside lua_resume's
 * protection), never from the loop's callback.
 */
#include "lua/lexec.h"

#include "host/proc.h"
#include "lua/lwq.h"
#include "lua/sched.h"

#include <errno.h>
#include <limits.h>
#include <lauxlib.h>
#include <string.h>

extern char **environ;

/*
 * The call's state while the task waits: the child's record (freed by the
 * continuation or the collector), and what a retry of the spawn needs (the
 * strings spec points to stay on the task's stack while it waits).
 */
typedef struct box {
    wq_proc *p;
    wq_proc_spec spec;
    int64_t first_try; /* host clock */
    int64_t backoff;   /* ns before the next try */
} box;

/* Whether a spawn error is the machine being short of something for now. */
static int transient(int err)
{
    return err == EMFILE || err == ENFILE || err == EAGAIN || err == ENOMEM;
}

static int box_gc(lua_State *L)
{
    box *b = lua_touserdata(L, 1);
    if (b->p) {
        wq_proc_abandon(b->p);
        b->p = NULL;
    }
    return 0;
}

static void on_finished(void *ud, wq_proc *p)
{
    (void)p;
    wq_task *t = ud;
    wq_task_wake(t, 0);
}

static void exec_cancel(wq_task *t)
{
    box *b = t->wait;
    if (b && b->p) {
        wq_proc_abandon(b->p);
        b->p = NULL;
    }
}

static int exec_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    wq_task_check_interrupt(L, wq_task_of(L));
    box *b = (box *)ctx;
    const wq_proc_result *r = wq_proc_output(b->p);
    lua_createtable(L, 0, 5);
    if (r->exited) {
        lua_pushinteger(L, r->status);
        lua_setfield(L, -2, "status");
    } else if (r->signal) {
        lua_pushinteger(L, r->signal);
        lua_setfield(L, -2, "signal");
    }
    lua_pushlstring(L, r->out, r->outlen);
    lua_setfield(L, -2, "stdout");
    lua_pushlstring(L, r->err, r->errlen);
    lua_setfield(L, -2, "stderr");
    lua_pushboolean(L, r->timed_out);
    lua_setfield(L, -2, "timeout");
    wq_proc_free(b->p);
    b->p = NULL;
    return 1;
}

/*
 * argv as the NULL-terminated array posix_spawn takes. Its strings are
 * anchored in a table pushed below the array (a number is converted there,
 * never in the caller's table), so each stays alive until the spawn, and
 * across the waits of a retry, whatever the caller does with argv meanwhile.
 */
char **wq_lua_check_argv(lua_State *L, int idx, const char *fn)
{
    if (!lua_istable(L, idx))
        wq_argerror(L, fn, "argv",
                    lua_pushfstring(L, "table expected, got %s", luaL_typename(L, idx)));
    /* Raw length: a __len metamethod must not size the array we fill. */
    lua_Integer n = (lua_Integer)lua_rawlen(L, idx);
    if (n < 1)
        wq_argerror(L, fn, "argv", "must name a program");
    lua_createtable(L, n < INT_MAX ? (int)n : 0, 0);
    int anchors = lua_gettop(L);
    char **argv = lua_newuserdatauv(L, (size_t)(n + 1) * sizeof *argv, 0);
    for (lua_Integer i = 1; i <= n; i++) {
        int t = lua_rawgeti(L, idx, i);
        if (t != LUA_TSTRING && t != LUA_TNUMBER)
            wq_argerror(
                L, fn, "argv",
                lua_pushfstring(L, "element %I: string expected, got %s", i, luaL_typename(L, -1)));
        size_t len;
        const char *s = lua_tolstring(L, -1, &len); /* converts the copy on the stack */
        if (memchr(s, '\0', len))
            wq_argerror(L, fn, "argv", lua_pushfstring(L, "element %I contains a NUL byte", i));
        argv[i - 1] = (char *)s;
        lua_rawseti(L, anchors, i);
    }
    argv[n] = NULL;
    return argv;
}

/* A string of opts.env: names are not empty and have no '=', neither has a NUL byte. */
static void check_env_string(lua_State *L, int idx, int name, const char *fn)
{
    size_t len;
    const char *s = lua_tolstring(L, idx, &len);
    if (memchr(s, '\0', len))
        wq_argerror(L, fn, "env",
                    name ? "a name contains a NUL byte"
                         : lua_pushfstring(L, "the value of '%s' contains a NUL byte",
                                           lua_tostring(L, idx - 1)));
    if (name && len == 0)
        wq_argerror(L, fn, "env", "a name is empty");
    if (name && memchr(s, '=', len))
        wq_argerror(L, fn, "env", lua_pushfstring(L, "the name '%s' contains '='", s));
}

/* The environment for the child: ours plus opts.env (a value of false removes a name). */
char **wq_lua_build_env(lua_State *L, int idx, const char *fn)
{
    lua_newtable(L);
    int tab = lua_gettop(L);
    for (char **e = environ; *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq)
            continue;
        lua_pushlstring(L, *e, (size_t)(eq - *e));
        lua_pushstring(L, *e);
        lua_rawset(L, tab);
    }
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        if (lua_type(L, -2) != LUA_TSTRING)
            wq_argerror(L, fn, "env", "keys must be strings");
        check_env_string(L, lua_gettop(L) - 1, 1, fn);
        if (lua_toboolean(L, -1) == 0) {
            lua_pushvalue(L, -2);
            lua_pushnil(L);
            lua_rawset(L, tab);
        } else {
            if (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TNUMBER)
                wq_argerror(L, fn, "env", "values must be strings");
            check_env_string(L, lua_gettop(L), 0, fn); /* converts a number value in place */
            lua_pushvalue(L, -2);                      /* name, value, name */
            lua_pushfstring(L, "%s=%s", lua_tostring(L, -1), lua_tostring(L, -2));
            lua_rawset(L, tab);
        }
        lua_pop(L, 1);
    }
    int n = 0;
    lua_pushnil(L);
    while (lua_next(L, tab)) {
        n++;
        lua_pop(L, 1);
    }
    char **env = lua_newuserdatauv(L, (size_t)(n + 1) * sizeof *env, 0);
    int i = 0;
    lua_pushnil(L);
    while (lua_next(L, tab)) {
        env[i++] = (char *)lua_tostring(L, -1);
        lua_pop(L, 1);
    }
    env[i] = NULL;
    return env; /* strings anchored by the table below the userdata */
}

static int try_spawn(lua_State *L, wq_task *t, box *b);

static int retry_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    wq_task *t = wq_task_of(L);
    wq_task_check_interrupt(L, t);
    return try_spawn(L, t, (box *)ctx);
}

/*
 * Spawns the child and waits for it. Out of descriptors or processes for
 * now (another part of the process, or the machine, holds them): wait and
 * try again, 20 ms doubling to 1 s, within opts.timeout if there is one,
 * rather than fail the job for a shortage that is not its own.
 */
static int try_spawn(lua_State *L, wq_task *t, box *b)
{
    wq_host *h = t->host;
    int err = wq_proc_spawn(h, &b->spec, on_finished, t, &b->p);
    if (!err) {
        t->wait = b;
        return wq_task_wait(L, t, exec_cancel, (lua_KContext)b, exec_k);
    }
    int64_t now = wq_host_now(h);
    if (transient(err) &&
        (b->spec.timeout_ns == 0 || now - b->first_try + b->backoff < b->spec.timeout_ns)) {
        if (b->backoff == 0) {
            b->first_try = now;
            wq_host_logl(h, WQ_LOG_WARN,
                         "wqrun: exec: cannot start '%s' now (%s); trying again shortly",
                         b->spec.argv[0], strerror(err));
        }
        b->backoff = b->backoff ? b->backoff * 2 : 20 * 1000000LL;
        if (b->backoff > 1000 * 1000000LL)
            b->backoff = 1000 * 1000000LL;
        return wq_task_wait_until(L, t, wq_add_sat(now, b->backoff), "exec", (lua_KContext)b,
                                  retry_k);
    }
    lua_pushnil(L);
    lua_pushfstring(L, "exec: cannot run '%s': %s", b->spec.argv[0], strerror(err));
    return 2;
}

static const char *const exec_opts[] = {"stdin", "cwd", "env", "timeout", NULL};

static int exec_lua(lua_State *L)
{
    lua_settop(L, 2);
    char **argv = wq_lua_check_argv(L, 1, "exec"); /* 3: its strings, 4: argv */
    wq_proc_spec spec = {argv, NULL, NULL, NULL, 0, 0};
    if (!lua_isnil(L, 2)) {
        if (!lua_istable(L, 2))
            wq_argerror(L, "exec", "opts",
                        lua_pushfstring(L, "table expected, got %s", luaL_typename(L, 2)));
        wq_checkopts(L, 2, "exec", exec_opts);
        if (lua_getfield(L, 2, "stdin") != LUA_TNIL) {
            if (lua_type(L, -1) != LUA_TSTRING)
                wq_argexpected(L, -1, "exec", "stdin", "string");
            spec.in = lua_tolstring(L, -1, &spec.inlen);
        }
        if (lua_getfield(L, 2, "cwd") != LUA_TNIL) {
            size_t len;
            if (lua_type(L, -1) != LUA_TSTRING)
                wq_argexpected(L, -1, "exec", "cwd", "string");
            spec.cwd = lua_tolstring(L, -1, &len);
            if (memchr(spec.cwd, '\0', len))
                wq_argerror(L, "exec", "cwd", "contains a NUL byte");
        }
        if (lua_getfield(L, 2, "timeout") != LUA_TNIL)
            spec.timeout_ns = wq_seconds_to_ns(wq_checkduration(L, -1, "exec", "timeout", 1));
        if (lua_getfield(L, 2, "env") != LUA_TNIL) {
            if (!lua_istable(L, -1))
                wq_argexpected(L, -1, "exec", "env", "table");
            spec.env = wq_lua_build_env(L, lua_gettop(L), "exec");
        }
    }
    wq_task *t = wq_task_require(L, "exec");
    box *b = lua_newuserdatauv(L, sizeof *b, 0);
    memset(b, 0, sizeof *b);
    luaL_setmetatable(L, "wq.Exec");
    b->spec = spec;
    return try_spawn(L, t, b);
}

void wq_lua_open_exec(lua_State *L)
{
    luaL_newmetatable(L, "wq.Exec");
    lua_pushcfunction(L, box_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    lua_pushcfunction(L, exec_lua);
    lua_setfield(L, -2, "exec");
}
