/*
 * Process pools: each slot runs one long-lived child started as wq.exec's
 * are (proc.c: no shell, a process group of its own, told to the keeper so
 * that none outlives the runner). A call is one request line written to a
 * free process's stdin and one reply line read from its stdout; the reply
 * is parsed here (json-c), so a process that answers with anything else is
 * replaced before it takes another call. Calls wait in FIFO order.
 *
 * A slot's process ends in one of two ways. It dies on its own (reaped on
 * SIGCHLD; or its stdout ends, or it stops reading its stdin, and it has
 * not exited a second later: then it is killed), or we kill it (bad reply,
 * timeout, an abandoned call, close). Either way its group is killed too,
 * its call fails saying why, and a fresh process is started: at once, or,
 * once processes keep dying before answering anything, after a backoff
 * (100 ms doubling to 10 s) during which calls fail at once when no
 * process is left. Killed processes not yet reaped wait in `graves`.
 *
 * stderr is read line by line and logged with the pool, the pid and the
 * queue and key of the job the process runs.
 */
#define _GNU_SOURCE
#include "host/pool.h"

#include "engine/common.h"
#include "host/json.h"
#include "host/proc.h"
#include "host/timer.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define GRACE_NS (1000 * 1000000LL)      /* an ended stdout before the exit is reaped */
#define BACKOFF_MIN_NS (100 * 1000000LL) /* restart delays once processes keep dying */
#define BACKOFF_MAX_NS (10000 * 1000000LL)
#define SHOWN_BYTES 60 /* of a bad reply line, in messages */

enum { P_DOWN, P_IDLE, P_BUSY };
enum { C_NONE, C_WAITING, C_RUNNING };

typedef struct pproc {
    wq_pool *pool;
    pid_t pid;
    int state;
    int kept;   /* the keeper knows its group */
    int exited; /* reaped: wstatus is valid */
    int wstatus;
    int fd[3];
    struct event
        *ev[3]; /* stdin (write, added while a request is partly written), stdout, stderr */
    wq_pool_call *call;
    size_t woff;                     /* bytes of the call's request written */
    char *rbuf;                      /* stdout: the reply line being read */
    size_t rlen, rcap, scan;         /* bytes held, allocated, searched for '\n' */
    char ebuf[WQ_POOL_ERR_LINE_MAX]; /* stderr: the line being read */
    size_t elen;
    uint64_t timer;         /* the call's timeout */
    uint64_t grace_timer;   /* its output ended: kill it if it does not exit */
    uint64_t restart_timer; /* P_DOWN: when the next process starts */
    int fails;              /* processes in a row that died before answering a call */
    uint64_t served;        /* calls this process answered */
} pproc;

struct wq_pool {
    wq_host *h;
    char **argv, **env; /* NULL-terminated copies */
    char *cwd;
    char name[64];
    int size;
    int64_t timeout_ns;
    pproc *procs;
    wq_pool_call *whead, *wtail; /* waiting calls, FIFO */
    size_t nwaiting;
    int closed;
    char last_error[200]; /* why the latest process went down */
    pid_t *graves;        /* killed, not yet reaped */
    size_t ngraves, gcap;
    uint64_t calls, failed, started;
    wq_pool *next; /* the host's list */
};

static void dispatch(wq_pool *p);
static void down(pproc *pp, const char *why, int own);

/* ---- copies of the spec ---- */

static void free_strv(char **v)
{
    if (!v)
        return;
    for (char **s = v; *s; s++)
        free(*s);
    free(v);
}

static char **copy_strv(char *const *v)
{
    size_t n = 0;
    while (v[n])
        n++;
    char **c = calloc(n + 1, sizeof *c);
    if (!c)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (!(c[i] = strdup(v[i]))) {
            free_strv(c);
            return NULL;
        }
    return c;
}

/* ---- the host's list ---- */

static void link_pool(wq_pool *p)
{
    p->next = p->h->pools;
    p->h->pools = p;
}

static void unlink_pool(wq_pool *p)
{
    wq_pool **q = (wq_pool **)&p->h->pools;
    while (*q && *q != p)
        q = &(*q)->next;
    if (*q)
        *q = p->next;
}

/* ---- the FIFO of waiting calls ---- */

static void push_waiting(wq_pool *p, wq_pool_call *c)
{
    c->state = C_WAITING;
    c->next = NULL;
    c->prev = p->wtail;
    if (p->wtail)
        p->wtail->next = c;
    else
        p->whead = c;
    p->wtail = c;
    p->nwaiting++;
}

static void remove_waiting(wq_pool *p, wq_pool_call *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        p->whead = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        p->wtail = c->prev;
    c->next = c->prev = NULL;
    c->state = C_NONE;
    p->nwaiting--;
}

/* Ends c: calls its fn (when call_back) with the outcome set. */
static void finish(wq_pool *p, wq_pool_call *c, int ok, json_object *reply, const char *why,
                   int call_back)
{
    c->state = C_NONE;
    c->proc = NULL;
    c->ok = ok;
    c->reply = reply;
    if (ok) {
        c->err[0] = 0;
        p->calls++;
    } else {
        snprintf(c->err, sizeof c->err, "%s", why);
        p->failed++;
    }
    if (call_back)
        c->fn(c);
}

/* Fails every waiting call with why. */
static void fail_waiting(wq_pool *p, const char *why, int call_back)
{
    while (p->whead) {
        wq_pool_call *c = p->whead;
        remove_waiting(p, c);
        finish(p, c, 0, NULL, why, call_back);
    }
}

/* ---- stderr ---- */

static void log_err_line(pproc *pp, const char *line, size_t len)
{
    wq_pool *p = pp->pool;
    wq_pool_call *c = pp->call;
    wq_log_field f[4] = {WQ_LOG_STR("pool", p->name), WQ_LOG_NUM("pid", pp->pid)};
    size_t nf = 2;
    if (c && c->queue) {
        char shown[WQ_SHOWN_KEY];
        wq_show_key(shown, c->key, c->keylen);
        f[nf++] = WQ_LOG_STR("queue", c->queue);
        f[nf++] = WQ_LOG_BYTES("key", c->key, c->keylen);
        wq_host_logf(p->h, WQ_LOG_INFO, f, nf, "%s[%d] %s '%s': %.*s", p->name, (int)pp->pid,
                     c->queue, shown, (int)len, line);
    } else {
        wq_host_logf(p->h, WQ_LOG_INFO, f, nf, "%s[%d]: %.*s", p->name, (int)pp->pid, (int)len,
                     line);
    }
}

/* Logs the complete lines of ebuf (all of it when flush), keeps the rest. */
static void log_err_lines(pproc *pp, int flush)
{
    size_t start = 0;
    for (;;) {
        char *nl = memchr(pp->ebuf + start, '\n', pp->elen - start);
        if (!nl)
            break;
        size_t len = (size_t)(nl - (pp->ebuf + start));
        if (len && pp->ebuf[start + len - 1] == '\r')
            len--;
        log_err_line(pp, pp->ebuf + start, len);
        start = (size_t)(nl - pp->ebuf) + 1;
    }
    if (start < pp->elen && (flush || (start == 0 && pp->elen == sizeof pp->ebuf))) {
        log_err_line(pp, pp->ebuf + start, pp->elen - start); /* a part of a long line */
        start = pp->elen;
    }
    memmove(pp->ebuf, pp->ebuf + start, pp->elen - start);
    pp->elen -= start;
}

static void close_fd(pproc *pp, int i)
{
    if (pp->ev[i]) {
        event_free(pp->ev[i]);
        pp->ev[i] = NULL;
    }
    if (pp->fd[i] >= 0) {
        close(pp->fd[i]);
        pp->fd[i] = -1;
    }
}

/* Reads what stderr holds now; 1 when it has ended. */
static int read_err(pproc *pp)
{
    for (;;) {
        if (pp->fd[2] < 0)
            return 1;
        ssize_t n = read(pp->fd[2], pp->ebuf + pp->elen, sizeof pp->ebuf - pp->elen);
        if (n > 0) {
            pp->elen += (size_t)n;
            log_err_lines(pp, 0);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        log_err_lines(pp, 1);
        close_fd(pp, 2);
        return 1;
    }
}

static void on_err(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    read_err(arg);
}

/* ---- a process goes down ---- */

static void bury(wq_pool *p, pid_t pid)
{
    if (waitpid(pid, NULL, WNOHANG) == pid)
        return;
    if (p->ngraves == p->gcap) {
        size_t ncap = p->gcap ? p->gcap * 2 : 8;
        pid_t *ng = realloc(p->graves, ncap * sizeof *ng);
        if (!ng) { /* SIGKILLed: it is gone within moments */
            waitpid(pid, NULL, 0);
            return;
        }
        p->graves = ng;
        p->gcap = ncap;
    }
    p->graves[p->ngraves++] = pid;
}

/* Takes the call off pp (its timer, its count as running work). */
static wq_pool_call *take_call(pproc *pp)
{
    wq_pool_call *c = pp->call;
    if (!c)
        return NULL;
    pp->call = NULL;
    wq_timer_stop(pp->pool->h, pp->timer);
    pp->timer = 0;
    pp->pool->h->children--;
    return c;
}

/* Closes everything of pp's process (killed, or known dead); its call stays on it. */
static void teardown(pproc *pp)
{
    wq_pool *p = pp->pool;
    wq_host *h = p->h;
    if (!pp->exited)
        wq_proc_kill_group(h, pp->pid, &pp->kept);
    else if (kill(-pp->pid, 0) == 0) /* what it started lives on */
        wq_proc_kill_group(h, pp->pid, &pp->kept);
    else
        wq_proc_unkeep(h, pp->pid, &pp->kept);
    read_err(pp); /* its last words: a traceback, say */
    if (pp->elen)
        log_err_lines(pp, 1);
    for (int i = 0; i < 3; i++)
        close_fd(pp, i);
    if (!pp->exited)
        bury(p, pp->pid);
    wq_timer_stop(h, pp->grace_timer);
    pp->grace_timer = 0;
    pp->rlen = pp->scan = pp->elen = 0;
    pp->served = 0;
    pp->state = P_DOWN;
}

static int start_proc(pproc *pp);

static void on_restart(wq_host *h, void *data, uint64_t id)
{
    (void)h;
    (void)id;
    pproc *pp = data;
    pp->restart_timer = 0;
    if (pp->pool->closed || pp->state != P_DOWN)
        return;
    int err = start_proc(pp);
    if (err) {
        snprintf(pp->pool->last_error, sizeof pp->pool->last_error, "cannot start '%s': %s",
                 pp->pool->argv[0], strerror(err));
        down(pp, NULL, 1);
        return;
    }
    dispatch(pp->pool);
}

static int any_running(const wq_pool *p)
{
    for (int i = 0; i < p->size; i++)
        if (p->procs[i].state != P_DOWN)
            return 1;
    return 0;
}

/*
 * pp's process is gone (teardown done): start the next one, at once or
 * after the backoff. own: it died on its own (or could not start), which
 * counts toward the backoff when it answered nothing.
 */
static void restart(pproc *pp, int own)
{
    wq_pool *p = pp->pool;
    if (own && pp->served == 0)
        pp->fails++;
    else
        pp->fails = 0;
    if (p->closed)
        return;
    if (pp->fails < 2) {
        int err = start_proc(pp);
        if (!err) {
            dispatch(p);
            return;
        }
        snprintf(p->last_error, sizeof p->last_error, "cannot start '%s': %s", p->argv[0],
                 strerror(err));
        pp->fails = pp->fails < 2 ? 2 : pp->fails + 1;
    }
    int64_t delay = BACKOFF_MIN_NS;
    for (int i = 2; i < pp->fails && delay < BACKOFF_MAX_NS; i++)
        delay *= 2;
    if (delay > BACKOFF_MAX_NS)
        delay = BACKOFF_MAX_NS;
    /* Weak: a pool that cannot start keeps no idle runner alive. */
    pp->restart_timer =
        wq_timer_start_weak(p->h, wq_add_sat(wq_host_now(p->h), delay), on_restart, pp);
    if (pp->fails == 2 || pp->fails % 10 == 0)
        wq_host_logl(p->h, WQ_LOG_WARN, "wqrun: pool %s: %s; starting another in %.1f s", p->name,
                     p->last_error, (double)delay / 1e9);
    if (!any_running(p)) {
        char why[sizeof p->last_error + 100];
        snprintf(why, sizeof why, "pool %s: no process running (%s)", p->name, p->last_error);
        fail_waiting(p, why, 1);
    }
}

/*
 * pp's process goes down: killed (own 0) or dead by itself (own 1). Its
 * call, if any, fails with "pool NAME: " why; then a fresh one starts.
 * why NULL: it could not start (p->last_error says why, no call).
 */
static void down(pproc *pp, const char *why, int own)
{
    wq_pool *p = pp->pool;
    if (pp->state != P_DOWN)
        teardown(pp);
    wq_pool_call *c = take_call(pp);
    if (why) {
        snprintf(p->last_error, sizeof p->last_error, "%s", why);
        if (!c)
            wq_host_logl(p->h, WQ_LOG_WARN, "wqrun: pool %s: %s; replaced", p->name, why);
    }
    if (c) {
        char msg[sizeof c->err];
        snprintf(msg, sizeof msg, "pool %s: %s", p->name, why ? why : p->last_error);
        finish(p, c, 0, NULL, msg, 1);
    }
    restart(pp, own);
}

/* Why pp's process ended, from its wait status. */
static void exit_reason(pproc *pp, char *buf, size_t n)
{
    if (WIFEXITED(pp->wstatus))
        snprintf(buf, n, "process %d exited with status %d", (int)pp->pid,
                 WEXITSTATUS(pp->wstatus));
    else if (WIFSIGNALED(pp->wstatus))
        snprintf(buf, n, "process %d was killed by signal %d (%s)", (int)pp->pid,
                 WTERMSIG(pp->wstatus), strsignal(WTERMSIG(pp->wstatus)));
    else
        snprintf(buf, n, "process %d ended", (int)pp->pid);
}

static void on_grace(wq_host *h, void *data, uint64_t id)
{
    (void)h;
    (void)id;
    pproc *pp = data;
    pp->grace_timer = 0;
    char why[100];
    snprintf(why, sizeof why, "process %d closed its stdin or stdout (killed)", (int)pp->pid);
    down(pp, why, 1);
}

/* Its stdout ended, or its stdin is closed: it is dying; give the exit a moment to be reaped. */
static void suspect(pproc *pp)
{
    if (pp->grace_timer || pp->state == P_DOWN)
        return;
    pp->grace_timer = wq_timer_start_weak(
        pp->pool->h, wq_add_sat(wq_host_now(pp->pool->h), GRACE_NS), on_grace, pp);
    if (!pp->grace_timer)
        on_grace(pp->pool->h, pp, 0);
}

/* ---- requests and replies ---- */

/* Writes what the socket takes of the request; the rest when stdin is writable again. */
static void write_some(pproc *pp)
{
    wq_pool_call *c = pp->call;
    while (c && pp->woff < c->reqlen) {
        ssize_t n = write(pp->fd[0], c->req + pp->woff, c->reqlen - pp->woff);
        if (n > 0) {
            pp->woff += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            event_add(pp->ev[0], NULL);
            return;
        }
        event_del(pp->ev[0]); /* EPIPE: it does not read any more */
        suspect(pp);
        return;
    }
    event_del(pp->ev[0]);
}

static void on_in(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    write_some(arg);
}

static void on_timeout(wq_host *h, void *data, uint64_t id)
{
    (void)h;
    (void)id;
    pproc *pp = data;
    pp->timer = 0;
    char why[100];
    snprintf(why, sizeof why, "timed out after %g s (process %d killed)",
             (double)pp->pool->timeout_ns / 1e9, (int)pp->pid);
    down(pp, why, 0);
}

static void assign(pproc *pp, wq_pool_call *c)
{
    wq_pool *p = pp->pool;
    pp->call = c;
    pp->state = P_BUSY;
    pp->woff = 0;
    c->state = C_RUNNING;
    c->proc = pp;
    p->h->children++; /* work in progress: the runner is not idle, virtual time waits */
    if (p->timeout_ns > 0)
        pp->timer =
            wq_timer_start(p->h, wq_add_sat(wq_host_now(p->h), p->timeout_ns), on_timeout, pp);
    write_some(pp);
}

/* Hands waiting calls to idle processes. */
static void dispatch(wq_pool *p)
{
    for (int i = 0; i < p->size && p->whead; i++) {
        pproc *pp = &p->procs[i];
        if (pp->state != P_IDLE)
            continue;
        wq_pool_call *c = p->whead;
        remove_waiting(p, c);
        assign(pp, c);
    }
}

/* "bad reply line (why): "first bytes"" for a message. */
static void bad_line(pproc *pp, const char *what, const char *line, size_t len, char *buf, size_t n)
{
    char shown[4 * SHOWN_BYTES + 8];
    size_t k = 0;
    for (size_t i = 0; i < len && i < SHOWN_BYTES; i++) {
        unsigned char ch = (unsigned char)line[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\') {
            shown[k++] = (char)ch;
        } else if (ch == '"' || ch == '\\') {
            shown[k++] = '\\';
            shown[k++] = (char)ch;
        } else if (ch == '\n') {
            shown[k++] = '\\';
            shown[k++] = 'n';
        } else
            k += (size_t)snprintf(shown + k, sizeof shown - k, "\\x%02x", ch);
    }
    shown[k] = 0;
    snprintf(buf, n, "bad reply line from process %d (%s): \"%s\"%s", (int)pp->pid, what, shown,
             len > SHOWN_BYTES ? "..." : "");
}

/* A complete line of len bytes at rbuf (the newline at rbuf[len]). */
static void on_line(pproc *pp, size_t len)
{
    char why[sizeof((wq_pool_call *)0)->err];
    size_t total = len + 1;
    if (pp->state != P_BUSY) {
        bad_line(pp, "written with no request", pp->rbuf, len, why, sizeof why);
        down(pp, why, 0);
        return;
    }
    if (total < pp->rlen) {
        bad_line(pp, "more than one line for one request", pp->rbuf, pp->rlen, why, sizeof why);
        down(pp, why, 0);
        return;
    }
    size_t n = len && pp->rbuf[len - 1] == '\r' ? len - 1 : len;
    json_object *reply = NULL;
    const char *bad = wq_json_parse(pp->rbuf, n, &reply);
    char what[200];
    if (bad) {
        snprintf(what, sizeof what, "%s%s", n ? "not JSON: " : "empty", n ? bad : "");
    } else if (pp->call->check && (bad = pp->call->check(reply)) != NULL) {
        json_object_put(reply);
        snprintf(what, sizeof what, "%s", bad);
    }
    if (bad) {
        bad_line(pp, what, pp->rbuf, n, why, sizeof why);
        down(pp, why, 0);
        return;
    }
    pp->rlen = pp->scan = 0;
    pp->state = P_IDLE;
    pp->served++;
    pp->fails = 0;
    wq_pool *p = pp->pool;
    wq_pool_call *c = take_call(pp);
    finish(p, c, 1, reply, NULL, 1);
    dispatch(p);
}

/* Reads what stdout holds now and acts on a complete line. */
static void read_out(pproc *pp)
{
    while (pp->state != P_DOWN && pp->fd[1] >= 0) {
        if (pp->rcap - pp->rlen < 4096 && pp->rcap < WQ_POOL_LINE_MAX + 1) {
            size_t ncap = pp->rcap ? pp->rcap * 2 : 16384;
            if (ncap > WQ_POOL_LINE_MAX + 1)
                ncap = WQ_POOL_LINE_MAX + 1;
            char *nb = realloc(pp->rbuf, ncap);
            if (!nb) {
                down(pp, "out of memory for its reply", 0);
                return;
            }
            pp->rbuf = nb;
            pp->rcap = ncap;
        }
        ssize_t n = read(pp->fd[1], pp->rbuf + pp->rlen, pp->rcap - pp->rlen);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) { /* EOF: it is ending */
            close_fd(pp, 1);
            suspect(pp);
            return;
        }
        pp->rlen += (size_t)n;
        char *nl = memchr(pp->rbuf + pp->scan, '\n', pp->rlen - pp->scan);
        if (nl) {
            on_line(pp, (size_t)(nl - pp->rbuf));
            continue;
        }
        pp->scan = pp->rlen;
        if (pp->rlen > WQ_POOL_LINE_MAX) {
            char why[160];
            snprintf(why, sizeof why, "reply line from process %d over %d bytes", (int)pp->pid,
                     WQ_POOL_LINE_MAX);
            down(pp, why, 0);
            return;
        }
    }
}

static void on_out(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    pproc *pp = arg;
    wq_host *h = pp->pool->h;
    read_out(pp);
    wq_host_settle(h);
}

/* ---- starting ---- */

static int start_proc(pproc *pp)
{
    wq_pool *p = pp->pool;
    wq_host *h = p->h;
    int child[3];
    int err = wq_proc_pipes(pp->fd, child);
    if (err)
        return err;
    pp->ev[0] = event_new(h->base, pp->fd[0], EV_WRITE | EV_PERSIST, on_in, pp);
    pp->ev[1] = event_new(h->base, pp->fd[1], EV_READ | EV_PERSIST, on_out, pp);
    pp->ev[2] = event_new(h->base, pp->fd[2], EV_READ | EV_PERSIST, on_err, pp);
    wq_proc_spec spec = {p->argv, p->env, p->cwd, NULL, 0, 0};
    if (!pp->ev[0] || !pp->ev[1] || !pp->ev[2])
        err = ENOMEM;
    else
        err = wq_proc_exec(&spec, child, &pp->pid);
    wq_proc_close_fds(child);
    if (err) {
        for (int i = 0; i < 3; i++)
            close_fd(pp, i);
        return err;
    }
    pp->kept = wq_proc_keep(h, pp->pid);
    pp->exited = 0;
    pp->served = 0;
    pp->rlen = pp->scan = pp->elen = 0;
    pp->state = P_IDLE;
    p->started++;
    event_add(pp->ev[1], NULL);
    event_add(pp->ev[2], NULL);
    return 0;
}

int wq_pool_new(wq_host *h, const wq_pool_spec *spec, wq_pool **out)
{
    wq_pool *p = calloc(1, sizeof *p);
    if (!p)
        return ENOMEM;
    p->h = h;
    p->size = spec->size;
    p->timeout_ns = spec->timeout_ns;
    p->argv = copy_strv(spec->argv);
    p->env = spec->env ? copy_strv(spec->env) : NULL;
    p->cwd = spec->cwd ? strdup(spec->cwd) : NULL;
    p->procs = calloc((size_t)spec->size, sizeof *p->procs);
    if (!p->argv || (spec->env && !p->env) || (spec->cwd && !p->cwd) || !p->procs) {
        free_strv(p->argv);
        free_strv(p->env);
        free(p->cwd);
        free(p->procs);
        free(p);
        return ENOMEM;
    }
    snprintf(p->name, sizeof p->name, "%s", p->argv[0]);
    for (int i = 0; i < p->size; i++) {
        pproc *pp = &p->procs[i];
        pp->pool = p;
        pp->fd[0] = pp->fd[1] = pp->fd[2] = -1;
        pp->state = P_DOWN;
    }
    link_pool(p);
    for (int i = 0; i < p->size; i++) {
        int err = start_proc(&p->procs[i]);
        if (err && i == 0) {
            wq_pool_free(p);
            return err;
        }
        if (err) {
            snprintf(p->last_error, sizeof p->last_error, "cannot start '%s': %s", p->argv[0],
                     strerror(err));
            restart(&p->procs[i], 1);
        }
    }
    *out = p;
    return 0;
}

/* ---- calls ---- */

int wq_pool_call_start(wq_pool *p, wq_pool_call *c)
{
    c->state = C_NONE;
    c->pool = p;
    c->proc = NULL;
    c->reply = NULL;
    c->ok = 0;
    c->err[0] = 0;
    if (p->closed) {
        finish(p, c, 0, NULL, "pool closed", 0);
        return -1;
    }
    if (!any_running(p)) {
        char why[sizeof c->err];
        snprintf(why, sizeof why, "pool %s: no process running (%s)", p->name, p->last_error);
        finish(p, c, 0, NULL, why, 0);
        return -1;
    }
    push_waiting(p, c);
    dispatch(p);
    return 0;
}

void wq_pool_abandon(wq_pool_call *c)
{
    if (c->state == C_WAITING)
        remove_waiting(c->pool, c);
    if (c->state == C_RUNNING) {
        pproc *pp = c->proc;
        take_call(pp);
        c->state = C_NONE;
        c->proc = NULL;
        down(pp, NULL, 0);
    }
}

void wq_pool_close(wq_pool *p)
{
    if (p->closed)
        return;
    p->closed = 1;
    fail_waiting(p, "pool closed", 1);
    for (int i = 0; i < p->size; i++) {
        pproc *pp = &p->procs[i];
        wq_timer_stop(p->h, pp->restart_timer);
        pp->restart_timer = 0;
        if (pp->state != P_DOWN)
            teardown(pp);
        wq_pool_call *c = take_call(pp);
        if (c)
            finish(p, c, 0, NULL, "pool closed", 1);
    }
}

int wq_pool_closed(const wq_pool *p)
{
    return p->closed;
}

/* Kills everything of p and waits for it; nobody is called back. */
static void kill_quietly(wq_pool *p)
{
    p->closed = 1;
    fail_waiting(p, "pool closed", 0);
    for (int i = 0; i < p->size; i++) {
        pproc *pp = &p->procs[i];
        wq_timer_stop(p->h, pp->restart_timer);
        pp->restart_timer = 0;
        wq_pool_call *c = take_call(pp);
        if (c)
            finish(p, c, 0, NULL, "pool closed", 0);
        if (pp->state != P_DOWN)
            teardown(pp);
    }
    for (size_t i = 0; i < p->ngraves; i++)
        waitpid(p->graves[i], NULL, 0); /* SIGKILLed: moments */
    p->ngraves = 0;
}

void wq_pool_free(wq_pool *p)
{
    if (!p)
        return;
    kill_quietly(p);
    unlink_pool(p);
    for (int i = 0; i < p->size; i++)
        free(p->procs[i].rbuf);
    free(p->procs);
    free(p->graves);
    free_strv(p->argv);
    free_strv(p->env);
    free(p->cwd);
    free(p);
}

void wq_pool_get_stats(const wq_pool *p, wq_pool_stats *st)
{
    memset(st, 0, sizeof *st);
    st->size = p->size;
    for (int i = 0; i < p->size; i++) {
        st->running += p->procs[i].state != P_DOWN;
        st->busy += p->procs[i].state == P_BUSY;
    }
    st->waiting = p->nwaiting;
    st->calls = p->calls;
    st->failed = p->failed;
    st->started = p->started;
}

const char *wq_pool_name(const wq_pool *p)
{
    return p->name;
}

/* ---- the host's side ---- */

static void reap_pool(wq_pool *p)
{
    for (size_t i = p->ngraves; i-- > 0;)
        if (waitpid(p->graves[i], NULL, WNOHANG) == p->graves[i])
            p->graves[i] = p->graves[--p->ngraves];
    for (int i = 0; i < p->size; i++) {
        pproc *pp = &p->procs[i];
        int st;
        if (pp->state == P_DOWN || pp->exited || waitpid(pp->pid, &st, WNOHANG) != pp->pid)
            continue;
        pp->exited = 1;
        pp->wstatus = st;
        read_out(pp); /* a reply it wrote before exiting still counts */
        if (pp->state == P_DOWN)
            continue;
        char why[100];
        exit_reason(pp, why, sizeof why);
        down(pp, why, 1);
    }
}

void wq_pool_reap(wq_host *h)
{
    wq_pool *next;
    for (wq_pool *p = h->pools; p; p = next) {
        next = p->next; /* a callback does not free pools: only the collector does */
        reap_pool(p);
    }
}

void wq_pool_kill_all(wq_host *h)
{
    for (wq_pool *p = h->pools; p; p = p->next)
        kill_quietly(p);
}
