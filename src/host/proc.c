/*
 * Child processes: spawned without a shell (posix_spawnp) in a process
 * group of their own, so a kill reaches everything they started. Pipes
 * for stdin, stdout and stderr are watched by libevent; SIGCHLD (a
 * libevent signal event in host.c) reaps them. A record is finished once
 * the child has exited and both output pipes are closed (or right away
 * after a kill, taking what is there). Each group is also told to the
 * keeper (keeper.c), which kills it if the runner dies, and forgotten
 * there once it is killed or found empty. The pipes, the spawn and the
 * group's kill are shared with the process pools (pool.c).
 */
#define _GNU_SOURCE /* pipe2, posix_spawn_file_actions_addchdir_np */
#include "host/proc.h"

#include "host/keeper.h"
#include "host/timer.h"

#include <errno.h>
#include <fcntl.h>
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

typedef struct wq_proc xproc;

struct wq_proc {
    wq_host *h;
    wq_proc_fn fn; /* NULL once abandoned */
    void *ud;
    pid_t pid;
    struct event *ev[3]; /* stdin (write), stdout, stderr */
    int fd[3];
    obuf out[2];
    char *in;
    size_t inlen, inoff;
    int exited, wstatus, killed, timed_out;
    int kept; /* the keeper knows its group */
    uint64_t timer;
    int finished; /* exited, output complete, callback made */
    wq_proc_result res;
    struct wq_proc *next;
};

/* The keeper died or cannot be told: wq.exec and pools go on without it. */
static void lose_keeper(wq_host *h)
{
    wq_host_log(h,
                "wqrun: the process keeper (pid %d) is gone: child processes may outlive "
                "wqrun if it is killed",
                (int)wq_keeper_pid(h->keeper));
    wq_keeper_stop(h->keeper);
    h->keeper = NULL;
}

int wq_proc_keep(wq_host *h, pid_t pgid)
{
    if (!h->keeper)
        return 0;
    if (wq_keeper_watch(h->keeper, pgid) == 0)
        return 1;
    lose_keeper(h);
    return 0;
}

void wq_proc_unkeep(wq_host *h, pid_t pgid, int *kept)
{
    if (!*kept)
        return;
    *kept = 0;
    if (h->keeper && wq_keeper_forget(h->keeper, pgid) < 0)
        lose_keeper(h);
}

void wq_proc_kill_group(wq_host *h, pid_t pid, int *kept)
{
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    wq_proc_unkeep(h, pid, kept);
}

void wq_proc_reap_keeper(wq_host *h)
{
    if (h->keeper && wq_keeper_reap(h->keeper))
        lose_keeper(h);
}

static void keep_group(xproc *x)
{
    x->kept = wq_proc_keep(x->h, x->pid);
}

/* The group is killed or empty: its number may be reused, the keeper must forget it. */
static void release_group(xproc *x)
{
    wq_proc_unkeep(x->h, x->pid, &x->kept);
}

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
    xproc **p = (xproc **)&x->h->procs;
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
     * virtual clock jump) while the child is unfinished. */
    x->h->children--;
    x->finished = 1;
    if (!x->fn) {
        free_proc(x);
        return;
    }
    wq_proc_result *r = &x->res;
    r->exited = WIFEXITED(x->wstatus);
    r->status = r->exited ? WEXITSTATUS(x->wstatus) : 0;
    r->signal = WIFSIGNALED(x->wstatus) ? WTERMSIG(x->wstatus) : 0;
    r->timed_out = x->timed_out;
    r->out = x->out[0].data ? x->out[0].data : "";
    r->outlen = x->out[0].len;
    r->err = x->out[1].data ? x->out[1].data : "";
    r->errlen = x->out[1].len;
    x->fn(x->ud, x);
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
    if (!x->exited && !x->killed)
        wq_proc_kill_group(x->h, x->pid, &x->kept);
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

/* Reaps our own children only: a waitpid(-1) would also take the status of
 * processes the script started itself (io.popen, os.execute). */
void wq_proc_reap(wq_host *h)
{
    wq_proc_reap_keeper(h);
    xproc *next;
    for (xproc *x = h->procs; x; x = next) {
        next = x->next;
        int st;
        if (x->exited || waitpid(x->pid, &st, WNOHANG) != x->pid)
            continue;
        x->exited = 1;
        x->wstatus = st;
        /* Not empty when a background process the child started lives on:
         * the keeper keeps it, and drops it when it sees it empty. */
        if (kill(-x->pid, 0) < 0 && errno == ESRCH)
            release_group(x);
        if (x->timer) {
            wq_timer_stop(h, x->timer);
            x->timer = 0;
        }
        if (x->fd[0] >= 0)
            close_pipe(x, 0);
        maybe_complete(x); /* may free x, never another record */
    }
}

void wq_proc_kill_all(wq_host *h)
{
    while (h->procs) {
        xproc *x = h->procs;
        h->procs = x->next;
        if (!x->exited) {
            kill_proc(x);
            waitpid(x->pid, NULL, 0);
        }
        if (x->fn) { /* its owner frees it, with what it got so far */
            x->exited = 1;
            x->finished = 1;
            for (int i = 0; i < 3; i++)
                close_pipe(x, i);
        } else {
            free_proc(x);
        }
    }
    h->children = 0;
}

const wq_proc_result *wq_proc_output(const wq_proc *p)
{
    return &p->res;
}

void wq_proc_free(wq_proc *p)
{
    if (p)
        free_proc(p);
}

void wq_proc_abandon(wq_proc *p)
{
    if (p->finished) {
        free_proc(p);
        return;
    }
    p->fn = NULL;
    kill_proc(p);
}

int wq_proc_pipes(int parent[3], int child[3])
{
    parent[0] = parent[1] = parent[2] = child[0] = child[1] = child[2] = -1;
    for (int i = 0; i < 3; i++) {
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0) {
            int err = errno;
            wq_proc_close_fds(parent);
            wq_proc_close_fds(child);
            return err;
        }
        /* stdin: the child reads p[0]; outputs: the child writes p[1]. */
        parent[i] = i == 0 ? p[1] : p[0];
        child[i] = i == 0 ? p[0] : p[1];
        fcntl(parent[i], F_SETFL, O_NONBLOCK);
    }
    return 0;
}

void wq_proc_close_fds(int fd[3])
{
    for (int i = 0; i < 3; i++)
        if (fd[i] >= 0) {
            close(fd[i]);
            fd[i] = -1;
        }
}

int wq_proc_exec(const wq_proc_spec *spec, int child[3], pid_t *pid)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    for (int i = 0; i < 3; i++)
        posix_spawn_file_actions_adddup2(&fa, child[i], i);
    if (spec->cwd)
        posix_spawn_file_actions_addchdir_np(&fa, spec->cwd);
    posix_spawnattr_init(&at);
    sigset_t none, def;
    sigemptyset(&none);
    sigemptyset(&def);
    sigaddset(&def, SIGPIPE);
    sigaddset(&def, SIGINT);
    sigaddset(&def, SIGTERM);
    sigaddset(&def, SIGCHLD);
    sigaddset(&def, SIGALRM);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &def);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETPGROUP);
    int err =
        posix_spawnp(pid, spec->argv[0], &fa, &at, spec->argv, spec->env ? spec->env : environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    wq_proc_close_fds(child);
    return err;
}

int wq_proc_spawn(wq_host *h, const wq_proc_spec *spec, wq_proc_fn fn, void *ud, wq_proc **out)
{
    xproc *x = calloc(1, sizeof *x);
    if (!x)
        return ENOMEM;
    x->h = h;
    int child[3];
    int err = wq_proc_pipes(x->fd, child);
    if (!err && spec->in && spec->inlen) {
        x->in = malloc(spec->inlen);
        if (!x->in)
            err = ENOMEM;
        else
            memcpy(x->in, spec->in, spec->inlen);
        x->inlen = spec->inlen;
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
    if (!err && spec->timeout_ns > 0) {
        x->timer = wq_timer_start(h, wq_add_sat(wq_host_now(h), spec->timeout_ns), on_timeout, x);
        if (!x->timer)
            err = ENOMEM;
    }
    if (!err)
        err = wq_proc_exec(spec, child, &x->pid);
    wq_proc_close_fds(child);
    if (err) {
        free_proc(x);
        return err;
    }
    x->fn = fn;
    x->ud = ud;
    h->children++;
    x->next = h->procs;
    h->procs = x;
    keep_group(x);
    event_add(x->ev[1], NULL);
    event_add(x->ev[2], NULL);
    if (x->inlen)
        event_add(x->ev[0], NULL);
    else
        close_pipe(x, 0);
    *out = x;
    return 0;
}
