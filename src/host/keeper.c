/*
 * The process keeper. wq.exec children run in process groups of their own
 * (proc.c) and are reparented to init when the runner dies, so nothing in
 * the runner can clean up after a SIGKILL. A parent-death signal would not
 * do either: it reaches the direct child only, not what that child started
 * (`sh -c 'sleep 100 & wait'`). The keeper is a sibling of those children
 * that learns each group over a pipe; the kernel closes the pipe when the
 * runner ends, however it ends, and the keeper then kills every group it
 * knows with SIGKILL. A process group stays alive (and its number taken)
 * while any member lives, so the keeper keeps a group until the runner has
 * killed it or found it empty, or until it sees it empty itself (it looks
 * once a second).
 *
 * The keeper is forked at start-up, before threads, the state file, the
 * database connections and the HTTP socket exist, and closes every
 * descriptor but its end of the pipe; it runs in a process group of its
 * own (a kill of the runner's group or a Ctrl-C leaves it to do its work)
 * and ignores the usual stop signals: it ends when its runner ends, and
 * only then. It also ends if its parent is no longer the runner (orphaned
 * while something else still held the pipe).
 */
#define _GNU_SOURCE /* pipe2, close_range */
#include "host/keeper.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct wq_keeper {
    pid_t pid;
    int fd;     /* the pipe's write end; -1 once the keeper is gone */
    int reaped; /* its status has been collected */
};

/* How often the keeper looks for groups that emptied without the runner noticing. */
#define PRUNE_MS 1000
/* How long the runner waits for the keeper at exit. */
#define STOP_WAIT_MS 2000

/* ---- the keeper's side ---------------------------------------------------------------- */

typedef struct groups {
    pid_t *g;
    size_t n, cap;
} groups;

static void add_group(groups *s, pid_t g)
{
    if (s->n == s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 64;
        pid_t *ng = realloc(s->g, ncap * sizeof *ng);
        if (!ng) {
            /* Nothing better to do than say so: the runner goes on either way. */
            static const char msg[] = "wqrun-keeper: out of memory: a wq.exec process group will "
                                      "not be killed if wqrun dies\n";
            if (write(2, msg, sizeof msg - 1) < 0) {
                /* stderr is gone too */
            }
            return;
        }
        s->g = ng;
        s->cap = ncap;
    }
    s->g[s->n++] = g;
}

static void drop_at(groups *s, size_t i)
{
    s->g[i] = s->g[--s->n];
}

static void forget_group(groups *s, pid_t g)
{
    /* From the end: the groups the runner forgets are mostly its latest. */
    for (size_t i = s->n; i-- > 0;)
        if (s->g[i] == g) {
            drop_at(s, i);
            return;
        }
}

/* Drops the groups that have no member left (their numbers may be reused). */
static void prune(groups *s)
{
    for (size_t i = s->n; i-- > 0;)
        if (kill(-s->g[i], 0) < 0 && errno == ESRCH)
            drop_at(s, i);
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void on_wake(int sig)
{
    (void)sig; /* only interrupts poll(): the loop then checks its parent */
}

/* Leaves fd 3 (the pipe) and stderr; stdin and stdout become /dev/null. */
static void close_inherited(int fd)
{
    if (fd != 3) {
        dup2(fd, 3);
        close(fd);
    }
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
    }
    if (close_range(4, ~0U, 0) < 0) {
        struct rlimit rl;
        int max =
            getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536 ? (int)rl.rlim_cur : 65536;
        for (int i = 4; i < max; i++)
            close(i);
    }
}

static void set_signals(void)
{
    static const int ignored[] = {SIGINT,  SIGTERM, SIGQUIT, SIGPIPE, SIGUSR1,
                                  SIGUSR2, SIGALRM, SIGTSTP, SIGTTIN, SIGTTOU};
    for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++)
        signal(ignored[i], SIG_IGN);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_wake;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGHUP, &sa, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

/* The keeper's whole life; never returns. */
static void keep(int fd, pid_t runner)
{
    prctl(PR_SET_NAME, "wqrun-keeper", 0, 0, 0);
    setpgid(0, 0);
    set_signals();
    /* SIGHUP when the runner goes, in case the pipe outlives it somewhere. */
    prctl(PR_SET_PDEATHSIG, SIGHUP, 0, 0, 0);
    close_inherited(fd);
    fd = 3;
    groups s = {0};
    unsigned char buf[4096];
    size_t have = 0;
    int64_t next_prune = mono_ms() + PRUNE_MS;
    while (getppid() == runner) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int n = poll(&p, 1, PRUNE_MS);
        if (n > 0) {
            ssize_t r = read(fd, buf + have, sizeof buf - have);
            if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN))
                break; /* the runner is gone */
            if (r > 0)
                have += (size_t)r;
            size_t used = 0;
            for (; have - used >= sizeof(int32_t); used += sizeof(int32_t)) {
                int32_t v;
                memcpy(&v, buf + used, sizeof v);
                if (v > 0)
                    add_group(&s, (pid_t)v);
                else if (v < 0)
                    forget_group(&s, (pid_t)-v);
            }
            memmove(buf, buf + used, have - used);
            have -= used;
        }
        if (mono_ms() >= next_prune) {
            prune(&s);
            next_prune = mono_ms() + PRUNE_MS;
        }
    }
    for (size_t i = 0; i < s.n; i++)
        kill(-s.g[i], SIGKILL);
    _exit(0); /* no atexit handlers: they belong to the runner (and the leak checker's report) */
}

/* ---- the runner's side ---------------------------------------------------------------- */

wq_keeper *wq_keeper_start(int *err)
{
    wq_keeper *k = calloc(1, sizeof *k);
    int p[2];
    if (!k) {
        *err = ENOMEM;
        return NULL;
    }
    if (pipe2(p, O_CLOEXEC) < 0) {
        *err = errno;
        free(k);
        return NULL;
    }
    pid_t runner = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        *err = errno;
        close(p[0]);
        close(p[1]);
        free(k);
        return NULL;
    }
    if (pid == 0) {
        close(p[1]); /* else the keeper would hold its own pipe open */
        keep(p[0], runner);
    }
    close(p[0]);
    k->pid = pid;
    k->fd = p[1];
    return k;
}

pid_t wq_keeper_pid(const wq_keeper *k)
{
    return k->pid;
}

static int send_word(wq_keeper *k, int32_t v)
{
    if (k->fd < 0)
        return -1;
    for (;;) {
        ssize_t n = write(k->fd, &v, sizeof v); /* atomic: below PIPE_BUF */
        if (n == (ssize_t)sizeof v)
            return 0;
        if (n < 0 && errno == EINTR)
            continue;
        close(k->fd); /* EPIPE: the keeper has died */
        k->fd = -1;
        return -1;
    }
}

int wq_keeper_watch(wq_keeper *k, pid_t pgid)
{
    return send_word(k, (int32_t)pgid);
}

int wq_keeper_forget(wq_keeper *k, pid_t pgid)
{
    return send_word(k, -(int32_t)pgid);
}

int wq_keeper_reap(wq_keeper *k)
{
    if (k->reaped || waitpid(k->pid, NULL, WNOHANG) != k->pid)
        return 0;
    k->reaped = 1;
    if (k->fd >= 0) {
        close(k->fd);
        k->fd = -1;
    }
    return 1;
}

void wq_keeper_stop(wq_keeper *k)
{
    if (!k)
        return;
    if (k->fd >= 0)
        close(k->fd);
    /* The keeper kills what it knows and exits at once; a stopped keeper
     * must not hold the exit up (it ends when it is continued). */
    for (int ms = 0; !k->reaped && ms < STOP_WAIT_MS; ms++) {
        pid_t r = waitpid(k->pid, NULL, WNOHANG);
        if (r == k->pid || (r < 0 && errno != EINTR))
            break;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    free(k);
}
