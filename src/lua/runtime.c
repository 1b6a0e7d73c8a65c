/*
 * The runtime: the one place where the host's loop, the Lua state and the
 * state file meet. It builds the Lua state (its allocator and panic
 * handler), plugs the scheduler into the host, runs the script's main
 * chunk as the first task and tears everything down in order.
 *
 * Every Lua call made outside a running task is protected: start-up runs
 * in one lua_pcall, the scheduler's passes and timer callbacks in theirs,
 * and the rest of the loop (HTTP, inbox, progress) never touches Lua. The
 * panic handler is a last resort that reports and exits 1.
 */
#include "lua/runtime.h"

#include "engine/common.h"
#include "host/host.h"
#include "host/progress.h"
#include "lua/lidle.h"
#include "lua/lqueue.h"
#include "lua/lwq.h"
#include "lua/sched.h"

#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * WQ_TEST_FAIL_ALLOC=N (tests): the Nth allocation that grows memory,
 * counting the Lua state's and the engine's, fails (and so does Lua's
 * retry of it, see lua_alloc). The sweep test runs a script for many N and
 * checks the process never aborts. WQ_TEST_COUNT_ALLOC=1 prints at exit
 * how many such allocations the run made and whether the failure was
 * injected, so the sweep knows how far to go.
 */
static unsigned long long alloc_count, alloc_fail_at;
static int alloc_counting;

static int fail_now(void)
{
    return alloc_counting && ++alloc_count == alloc_fail_at;
}

/*
 * Lua answers a failed allocation with an emergency collection and one
 * retry of the same request: the retry fails too, or an injected failure
 * would almost never reach the code that has to handle it.
 */
static struct {
    void *ptr;
    size_t osize, nsize;
    int armed;
} retry;

static void *lua_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    (void)ud;
    if (nsize == 0) {
        free(ptr);
        return NULL;
    }
    /* Shrinking never fails (Lua relies on it). */
    if (!ptr || nsize > osize) {
        int again = retry.armed && ptr == retry.ptr && osize == retry.osize && nsize == retry.nsize;
        retry.armed = 0;
        if (again)
            return NULL;
        if (fail_now()) {
            retry.ptr = ptr;
            retry.osize = osize;
            retry.nsize = nsize;
            retry.armed = 1;
            return NULL;
        }
    }
    return realloc(ptr, nsize);
}

static void *engine_alloc(void *ud, void *ptr, size_t size)
{
    (void)ud;
    retry.armed = 0;
    if (size && fail_now())
        return NULL;
    return realloc(ptr, size);
}

static int on_panic(lua_State *L)
{
    const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "(no message)";
    fprintf(stderr, "wqrun: fatal: unprotected Lua error: %s\n", msg);
    fflush(stderr);
    _exit(1);
    return 0;
}

/* Puts the script's directory in front of package.path (nothing of the build machine). */
static void set_paths(lua_State *L, const char *script)
{
    const char *slash = strrchr(script, '/');
    lua_getglobal(L, "package");
    if (slash)
        lua_pushlstring(L, script, (size_t)(slash - script + (slash == script)));
    else
        lua_pushliteral(L, ".");
    const char *dir = lua_tostring(L, -1);
    lua_getfield(L, -2, "path");
    lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;%s", dir, dir, lua_tostring(L, -1));
    lua_setfield(L, -4, "path");
    lua_pop(L, 3);
}

/* print / io.write while the progress line is shown: erase it first (upvalue 1: the original). */
static int clear_then_call(lua_State *L)
{
    wq_progress_clear(wq_host_of(L));
    int n = lua_gettop(L);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, n, LUA_MULTRET);
    return lua_gettop(L);
}

static void wrap(lua_State *L, int table, const char *name)
{
    if (lua_getfield(L, table, name) != LUA_TFUNCTION) {
        lua_pop(L, 1);
        return;
    }
    lua_pushcclosure(L, clear_then_call, 1);
    lua_setfield(L, table, name);
}

typedef struct start_args {
    const char *script;
    int argc;
    char **argv;
} start_args;

/* Start-up, protected: libraries, the wq module, arg, the main chunk as the first task. */
static int start(lua_State *L)
{
    start_args *a = lua_touserdata(L, 1);
    luaL_openlibs(L);
    wq_lua_open(L);
    set_paths(L, a->script);
    /* The global arg, as the lua interpreter builds it. */
    lua_createtable(L, a->argc, 1);
    lua_pushstring(L, a->script);
    lua_rawseti(L, -2, 0);
    for (int i = 0; i < a->argc; i++) {
        lua_pushstring(L, a->argv[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setglobal(L, "arg");
    if (luaL_loadfile(L, a->script) != LUA_OK)
        return lua_error(L);
    for (int i = 0; i < a->argc; i++)
        lua_pushstring(L, a->argv[i]);
    wq_task_spawn(L, a->argc, TASK_MAIN);
    return 0;
}

/* After the host started: wrap print and io.write if a progress line is shown. */
static int wrap_output(lua_State *L)
{
    lua_pushglobaltable(L);
    wrap(L, lua_gettop(L), "print");
    lua_pop(L, 1);
    if (lua_getglobal(L, "io") == LUA_TTABLE)
        wrap(L, lua_gettop(L), "write");
    lua_pop(L, 1);
    return 0;
}

static int protected(lua_State *L, lua_CFunction fn, void *ud)
{
    lua_pushcfunction(L, fn);
    lua_pushlightuserdata(L, ud);
    if (lua_pcall(L, 1, 0, 0) == LUA_OK)
        return 0;
    fprintf(stderr, "wqrun: %s\n", wq_safe_tostring(L, -1));
    lua_settop(L, 0);
    return -1;
}

static int protected(lua_State *L, lua_CFunction fn, void *ud);

static int hook_runnable(void *ud)
{
    return wq_sched_runnable(ud);
}

/* Starts the wq.on_shutdown hooks as one task (lua/wq.lua runs them in order). */
static int start_shutdown_hooks(lua_State *L)
{
    if (wq_lua_internal(L, "shutdown_hooks") != LUA_TFUNCTION)
        return 0;
    lua_call(L, 0, 1);
    if (lua_type(L, -1) != LUA_TFUNCTION)
        return 0;
    wq_sched_of(L)->hooks_running = 1;
    wq_task_spawn(L, 0, TASK_SPAWN);
    return 0;
}

static void hook_stopping(void *ud)
{
    wq_sched *s = ud;
    lua_State *co = wq_running;
    if (co) { /* wq.shutdown() in a task: errors are that task's */
        lua_pushcfunction(co, start_shutdown_hooks);
        lua_call(co, 0, 0);
        return;
    }
    if (protected(s->L, start_shutdown_hooks, NULL) < 0)
        s->host->failed = 1;
}

static int hook_holding(void *ud)
{
    return ((wq_sched *)ud)->hooks_running;
}

/*
 * A one-shot run on a state file that ran keys again which an earlier run of the file had
 * finished, on a queue without keep_done: said once, with the option that skips them.
 */
static void hook_ending(void *ud)
{
    wq_sched *s = ud;
    wq_host *h = s->host;
    if (h->opts.serve)
        return;
    for (int i = 0; i < h->nqueues; i++) {
        lqueue *lq = h->queues[i].q;
        if (!lq->bq || lq->keep_done > 0 || lq->history <= 0)
            continue;
        int64_t n = wq_bq_reran(lq->bq, h->start_unix);
        if (n > 0)
            wq_host_logl(h, WQ_LOG_INFO,
                         "wqrun: note: queue '%s' ran %lld key(s) again that an earlier run of "
                         "this state file had finished; with keep_done = SECONDS a re-run skips "
                         "the keys finished within that time (docs/state-file.md)",
                         lq->name, (long long)n);
    }
}

static void hook_settled(void *ud)
{
    wq_sched *s = ud;
    if (s->idlers.head)
        lidle_settled(s);
}

int wq_runtime_main(const wq_host_opts *opts, const char *script, int argc, char **argv)
{
    const char *fail = getenv("WQ_TEST_FAIL_ALLOC"), *count = getenv("WQ_TEST_COUNT_ALLOC");
    if (fail && *fail)
        alloc_fail_at = strtoull(fail, NULL, 10);
    int report = count && *count && strcmp(count, "0") != 0;
    alloc_counting = alloc_fail_at || report;
    if (alloc_counting)
        wq_set_allocator(engine_alloc, NULL);
    wq_host *h = wq_host_new(opts);
    if (!h)
        return 1;
    lua_State *L = lua_newstate(lua_alloc, NULL);
    wq_sched *s = calloc(1, sizeof *s);
    if (!L || !s || wq_sched_init(s, h, L) < 0) {
        fprintf(stderr, "wqrun: cannot initialize (out of memory)\n");
        if (L)
            lua_close(L);
        free(s);
        wq_host_free(h);
        return 1;
    }
    lua_atpanic(L, on_panic);
    wq_host_hooks hooks = {
        .runnable = hook_runnable,
        .preempt = wq_sched_preempt,
        .watch = wq_sched_watch,
        .stopping = hook_stopping,
        .holding = hook_holding,
        .settled = hook_settled,
        .ending = hook_ending,
        .ud = s,
    };
    wq_host_set_hooks(h, &hooks);

    int status = 1;
    start_args a = {script, argc, argv};
    if (protected(L, start, &a) == 0 && wq_host_start(h) == 0 &&
        (!h->progress || protected(L, wrap_output, NULL) == 0))
        status = wq_host_run(h);

    wq_host_shutdown(h);
    for (int i = 0; i < h->nqueues; i++)
        lqueue_close(h->queues[i].q);
    lua_close(L);
    wq_sched_destroy(s);
    free(s);
    wq_host_free(h);
    if (report)
        fprintf(stderr, "wqrun: test: %llu allocations, failure %s\n", alloc_count,
                alloc_fail_at && alloc_count >= alloc_fail_at ? "injected" : "not injected");
    return status;
}
