/*
 * wq.exec: runs a program without a shell while the loop goes on. The
 * child gets pipes for stdin, stdout and stderr, watched by libevent, and
 * its own process group so a timeout can kill everything it started.
 * SIGCHLD (a libevent signal event) reaps children. The task resumes with
 * {status=, signal=, stdout=, stderr=, timeout=} once the child has exited
 * and both output pipes are closed (or right away after a kill).
 */
#define _GNU_SOURCE /* pipe2, posix_spawn_file_actions_addchdir_np */
#include "host/host.h"
#include "lua/lwq.h"

#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

typedef struct obuf {
    char *data;
    size_t len, cap;
} obuf;

typedef struct xproc {
    wq_host *h;
    wq_task *task; /* NULL once the task stopped waiting */
    pid_t pid;
    struct event *ev[3]; /* stdin (write), stdout, stderr */
    int fd[3];
    obuf out[2];
    char *in;
    size_t inlen, inoff;
    int exited, wstatus, killed, timed_out;
    uint64_t timer;
    struct xproc *next;
} xproc;

static void close_pipe(xproc *x, int i)
{
    if (x->ev[i]) {
        event_free(x->ev[i]);
        x->ev[i] = NULL;
    }
    if (x->fd[i] >= 0) {
        close(x->fd[i]);
        x->fd[i] = -1;
    }
}

static void unlink_proc(xproc *x)
{
    xproc **p = (xproc **)&x->h->execs;
    while (*p && *p != x)
        p = &(*p)->next;
    if (*p)
        *p = x->next;
}

static void free_proc(xproc *x)
{
    for (int i = 0; i < 3; i++)
        close_pipe(x, i);
    wq_timer_stop(x->h, x->timer);
    free(x->out[0].data);
    free(x->out[1].data);
    free(x->in);
    free(x);
}

static void read_some(xproc *x, int i);

/* Finishes when the child is reaped and its output is complete (or it was killed). */
static void maybe_complete(xproc *x)
{
    if (!x->exited)
        return;
    if (x->killed) { /* descendants may hold the pipes open: take what is there */
        for (int i = 1; i < 3; i++)
            if (x->fd[i] >= 0) {
                read_some(x, i);
                close_pipe(x, i);
            }
    }
    if (x->fd[1] >= 0 || x->fd[2] >= 0)
        return;
    unlink_proc(x);
    /* Counted until here, not just until the reap: a grandchild may still
     * hold the output pipes, and the process must not look idle (nor the
     * virtual clock jump) while the exec is unfinished. */
    x->h->children--;
    wq_task *t = x->task;
    if (t) {
        lua_State *co = t->co;
        lua_createtable(co, 0, 5);
        if (WIFEXITED(x->wstatus)) {
            lua_pushinteger(co, WEXITSTATUS(x->wstatus));
            lua_setfield(co, -2, "status");
        } else if (WIFSIGNALED(x->wstatus)) {
            lua_pushinteger(co, WTERMSIG(x->wstatus));
            lua_setfield(co, -2, "signal");
        }
        lua_pushlstring(co, x->out[0].data ? x->out[0].data : "", x->out[0].len);
        lua_setfield(co, -2, "stdout");
        lua_pushlstring(co, x->out[1].data ? x->out[1].data : "", x->out[1].len);
        lua_setfield(co, -2, "stderr");
        lua_pushboolean(co, x->timed_out);
        lua_setfield(co, -2, "timeout");
        t->wait = NULL;
        wq_task_wake(t, 1);
    }
    free_proc(x);
}

static void read_some(xproc *x, int i)
{
    obuf *b = &x->out[i - 1];
    for (;;) {
        if (b->cap - b->len < 65536) {
            size_t ncap = b->cap ? b->cap * 2 : 65536;
            while (ncap - b->len < 65536)
                ncap *= 2;
            char *nd = realloc(b->data, ncap);
            if (!nd) {
                close_pipe(x, i);
                return;
            }
            b->data = nd;
            b->cap = ncap;
        }
        ssize_t n = read(x->fd[i], b->data + b->len, b->cap - b->len);
        if (n > 0) {
            b->len += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        close_pipe(x, i); /* EOF or error */
        return;
    }
}

static void on_output(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    xproc *x = arg;
    wq_host *h = x->h;
    int i = fd == x->fd[1] ? 1 : 2;
    read_some(x, i);
    maybe_complete(x);
    wq_host_settle(h);
}

static void on_input(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    xproc *x = arg;
    while (x->inoff < x->inlen) {
        ssize_t n = write(x->fd[0], x->in + x->inoff, x->inlen - x->inoff);
        if (n > 0) {
            x->inoff += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        break; /* EPIPE: the child does not read its input */
    }
    close_pipe(x, 0);
}

static void kill_proc(xproc *x)
{
    if (!x->exited && !x->killed) {
        kill(-x->pid, SIGKILL);
        kill(x->pid, SIGKILL);
    }
    x->killed = 1;
}

static void on_timeout(wq_host *h, void *data, uint64_t id)
{
    (void)h;
    (void)id;
    xproc *x = data;
    x->timer = 0;
    x->timed_out = 1;
    kill_proc(x);
}

static void exec_cancel(wq_task *t)
{
    xproc *x = t->wait;
    if (x) {
        x->task = NULL;
        kill_proc(x);
    }
}

/* Reaps our own children only: a waitpid(-1) would also take the status of
 * processes the script started itself (io.popen, os.execute). */
void wq_exec_reap(wq_host *h)
{
    xproc *next;
    for (xproc *x = h->execs; x; x = next) {
        next = x->next;
        int st;
        if (x->exited || waitpid(x->pid, &st, WNOHANG) != x->pid)
            continue;
        x->exited = 1;
        x->wstatus = st;
        if (x->timer) {
            wq_timer_stop(h, x->timer);
            x->timer = 0;
        }
        if (x->fd[0] >= 0)
            close_pipe(x, 0);
        maybe_complete(x); /* may free x, never another record */
    }
}

void wq_exec_kill_all(wq_host *h)
{
    while (h->execs) {
        xproc *x = h->execs;
        h->execs = x->next;
        if (!x->exited) {
            kill_proc(x);
            waitpid(x->pid, NULL, 0);
        }
        free_proc(x);
    }
    h->children = 0;
}

static int exec_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    wq_task_check_interrupt(L, wq_task_of(L));
    return 1;
}

/* Builds a NULL-terminated array of strings; the strings stay on the Lua stack. */
static char **check_argv(lua_State *L, int idx)
{
    if (!lua_istable(L, idx))
        wq_argerror(L, "exec", "argv",
                    lua_pushfstring(L, "table expected, got %s", luaL_typename(L, idx)));
    lua_Integer n = luaL_len(L, idx);
    if (n < 1)
        wq_argerror(L, "exec", "argv", "must name a program");
    char **argv = lua_newuserdatauv(L, (size_t)(n + 1) * sizeof *argv, 0);
    for (lua_Integer i = 1; i <= n; i++) {
        int t = lua_rawgeti(L, idx, i);
        if (t != LUA_TSTRING && t != LUA_TNUMBER)
            wq_argerror(L, "exec", "argv",
                        lua_pushfstring(L, "element %d: string expected, got %s", (int)i,
                                        luaL_typename(L, -1)));
        argv[i - 1] = (char *)lua_tostring(L, -1);
        lua_pop(L, 1); /* the string stays alive in the table */
    }
    argv[n] = NULL;
    return argv;
}

/* The environment for the child: ours plus opts.env (a value of false removes a name). */
static char **build_env(lua_State *L, int idx)
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
            wq_argerror(L, "exec", "env", "keys must be strings");
        if (lua_toboolean(L, -1) == 0) {
            lua_pushvalue(L, -2);
            lua_pushnil(L);
            lua_rawset(L, tab);
        } else {
            if (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TNUMBER)
                wq_argerror(L, "exec", "env", "values must be strings");
            lua_pushvalue(L, -2); /* name, value, name */
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

int wq_exec_lua(lua_State *L)
{
    lua_settop(L, 2);
    char **argv = check_argv(L, 1); /* 3 */
    const char *cwd = NULL, *in = NULL;
    size_t inlen = 0;
    double timeout = 0;
    char **env = environ;
    if (!lua_isnil(L, 2)) {
        if (!lua_istable(L, 2))
            wq_argerror(L, "exec", "opts",
                        lua_pushfstring(L, "table expected, got %s", luaL_typename(L, 2)));
        if (lua_getfield(L, 2, "stdin") != LUA_TNIL) {
            if (lua_type(L, -1) != LUA_TSTRING)
                wq_argerror(L, "exec", "stdin", "string expected");
            in = lua_tolstring(L, -1, &inlen);
        }
        if (lua_getfield(L, 2, "cwd") != LUA_TNIL) {
            if (lua_type(L, -1) != LUA_TSTRING)
                wq_argerror(L, "exec", "cwd", "string expected");
            cwd = lua_tostring(L, -1);
        }
        if (lua_getfield(L, 2, "timeout") != LUA_TNIL)
            timeout = wq_checkduration(L, -1, "exec", "timeout", 1);
        if (lua_getfield(L, 2, "env") != LUA_TNIL) {
            if (!lua_istable(L, -1))
                wq_argerror(L, "exec", "env", "table expected");
            env = build_env(L, lua_gettop(L));
        }
    }
    wq_task *t = wq_task_require(L, "exec");
    wq_host *h = t->host;

    xproc *x = calloc(1, sizeof *x);
    if (!x)
        return luaL_error(L, "exec: out of memory");
    x->h = h;
    x->fd[0] = x->fd[1] = x->fd[2] = -1;
    int child[3] = {-1, -1, -1};
    int err = 0;
    for (int i = 0; i < 3 && !err; i++) {
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0) {
            err = errno;
            break;
        }
        /* stdin: the child reads p[0]; outputs: the child writes p[1]. */
        x->fd[i] = i == 0 ? p[1] : p[0];
        child[i] = i == 0 ? p[0] : p[1];
        fcntl(x->fd[i], F_SETFL, O_NONBLOCK);
    }
    if (in && inlen) {
        x->in = malloc(inlen);
        if (!x->in)
            err = ENOMEM;
        else
            memcpy(x->in, in, inlen);
        x->inlen = inlen;
    }
    /* The pipes' events before the child exists: nothing to undo if one fails. */
    if (!err) {
        x->ev[1] = event_new(h->base, x->fd[1], EV_READ | EV_PERSIST, on_output, x);
        x->ev[2] = event_new(h->base, x->fd[2], EV_READ | EV_PERSIST, on_output, x);
        if (x->inlen)
            x->ev[0] = event_new(h->base, x->fd[0], EV_WRITE | EV_PERSIST, on_input, x);
        if (!x->ev[1] || !x->ev[2] || (x->inlen && !x->ev[0]))
            err = ENOMEM;
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    if (!err) {
        posix_spawn_file_actions_init(&fa);
        for (int i = 0; i < 3; i++)
            posix_spawn_file_actions_adddup2(&fa, child[i], i);
        if (cwd)
            posix_spawn_file_actions_addchdir_np(&fa, cwd);
        posix_spawnattr_init(&at);
        sigset_t none, def;
        sigemptyset(&none);
        sigemptyset(&def);
        sigaddset(&def, SIGPIPE);
        sigaddset(&def, SIGINT);
        sigaddset(&def, SIGTERM);
        sigaddset(&def, SIGCHLD);
        posix_spawnattr_setsigmask(&at, &none);
        posix_spawnattr_setsigdefault(&at, &def);
        posix_spawnattr_setpgroup(&at, 0);
        posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                          POSIX_SPAWN_SETPGROUP);
        err = posix_spawnp(&x->pid, argv[0], &fa, &at, argv, env);
        posix_spawn_file_actions_destroy(&fa);
        posix_spawnattr_destroy(&at);
    }
    for (int i = 0; i < 3; i++)
        if (child[i] >= 0)
            close(child[i]);
    if (err) {
        free_proc(x);
        lua_pushnil(L);
        lua_pushfstring(L, "exec: cannot run '%s': %s", argv[0], strerror(err));
        return 2;
    }
    h->children++;
    x->next = h->execs;
    h->execs = x;
    x->task = t;
    event_add(x->ev[1], NULL);
    event_add(x->ev[2], NULL);
    if (x->inlen)
        event_add(x->ev[0], NULL);
    else
        close_pipe(x, 0);
    if (timeout > 0)
        x->timer =
            wq_timer_start(h, wq_add_sat(wq_host_now(h), wq_seconds_to_ns(timeout)), on_timeout, x);
    t->wait = x;
    return wq_task_wait(L, t, exec_cancel, 0, exec_k);
}
