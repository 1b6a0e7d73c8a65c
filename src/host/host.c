#define _GNU_SOURCE /* pipe2 */
/*
 * The host's lifecycle: builds the loop, decides when the process is done
 * (idle rule, wq.exit, errors, signals), commits the state file in groups
 * and tears everything down. It also owns the clock: monotonic time, or
 * with --virtual-time a counter that jumps to the next deadline whenever
 * no task can run and no child is running.
 */
#include "host/host.h"
#include "host/flows.h"
#include "host/commands.h"

#include "host/http.h"
#include "host/httpc.h"
#include "host/service.h"
#include "host/inbox.h"
#include "host/keeper.h"
#include "host/monotime.h"
#include "host/pool.h"
#include "host/proc.h"
#include "host/events.h"
#include "host/progress.h"
#include "host/timer.h"
#include "store/backend.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int64_t mono_ns(void)
{
    return wq_monotime_now();
}

int64_t wq_real_now(void)
{
    return mono_ns();
}

static double unix_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int64_t host_clock(void *ud)
{
    wq_host *h = ud;
    return h->opts.virtual_time ? h->vnow : mono_ns();
}

int64_t wq_host_now(const wq_host *h)
{
    return h->opts.virtual_time ? h->vnow : mono_ns();
}

double wq_host_unix(const wq_host *h, int64_t mono)
{
    return h->start_unix + (double)(mono - h->start_mono) / 1e9;
}

void wq_host_exit(wq_host *h, int code)
{
    if (h->exiting)
        return;
    h->exiting = 1;
    h->exit_code = code;
    event_base_loopbreak(h->base);
}

static void logv(wq_host *h, wq_log_level lv, const wq_log_field *fields, size_t nfields,
                 const char *fmt, va_list ap) __attribute__((format(printf, 5, 0)));
static void logv(wq_host *h, wq_log_level lv, const wq_log_field *fields, size_t nfields,
                 const char *fmt, va_list ap)
{
    (void)h;
    if (!wq_log_enabled(lv))
        return;
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    wq_log_write(lv, fields, nfields, msg);
}

void wq_host_log(wq_host *h, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    logv(h, WQ_LOG_INFO, NULL, 0, fmt, ap);
    va_end(ap);
}

void wq_host_logl(wq_host *h, wq_log_level lv, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    logv(h, lv, NULL, 0, fmt, ap);
    va_end(ap);
}

void wq_host_logf(wq_host *h, wq_log_level lv, const wq_log_field *fields, size_t nfields,
                  const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    logv(h, lv, fields, nfields, fmt, ap);
    va_end(ap);
}

/* The log's clock and its hook (engine/log.h): this host's wall clock (virtual
 * time included), and the progress line cleared before each line. */
static double log_clock(void *ud)
{
    wq_host *h = ud;
    return wq_host_unix(h, wq_host_now(h));
}

static void log_before(void *ud)
{
    wq_progress_clear(ud);
}

#define FIELD(f)                                                                                   \
    {                                                                                              \
#f, offsetof(wq_qstats, f)                                                                 \
    }
const wq_qstat_field wq_qstat_fields[] = {
    FIELD(depth),    FIELD(queued),    FIELD(processing), FIELD(waiting), FIELD(adds),
    FIELD(done),     FIELD(retries),   FIELD(failures),   FIELD(dead),    FIELD(succeeded),
    FIELD(requeued), FIELD(timeouts),  FIELD(retrying),   FIELD(workers), FIELD(cancelled),
    FIELD(groups),   FIELD(throttled), {NULL, 0}};
#undef FIELD

int wq_host_add_queue(wq_host *h, const wq_queue_ops *ops, void *q, const char *name, int persist)
{
    if (h->nqueues == h->queues_cap) {
        int ncap = h->queues_cap ? h->queues_cap * 2 : 8;
        wq_hqueue *nq = realloc(h->queues, (size_t)ncap * sizeof *nq);
        if (!nq)
            return -1;
        h->queues = nq;
        h->queues_cap = ncap;
    }
    wq_hqueue *hq = &h->queues[h->nqueues++];
    memset(hq, 0, sizeof *hq);
    hq->ops = ops;
    hq->q = q;
    hq->name = name;
    hq->persist = persist;
    return 0;
}

const wq_hqueue *wq_host_find_queue(const wq_host *h, const char *name)
{
    for (int i = 0; i < h->nqueues; i++)
        if (strcmp(h->queues[i].name, name) == 0)
            return &h->queues[i];
    return NULL;
}

static int runnable(const wq_host *h)
{
    return h->hooks.runnable && h->hooks.runnable(h->hooks.ud);
}

/* Child processes and HTTP transfers: work that progresses in real time, on its own. */
static int outside_work(const wq_host *h)
{
    return h->children + wq_httpc_active(h);
}

/* Nothing can make progress any more (SPEC section 2). */
static int idle(wq_host *h)
{
    if (runnable(h) || outside_work(h) || h->http || h->opts.serve)
        return 0;
    for (int i = 0; i < h->nqueues; i++)
        if (h->queues[i].ops->busy(h->queues[i].q))
            return 0;
    return 1;
}

/* Items handed out and not done, by handler workers or by the script's own
 * get/done loops (a graceful stop waits for both). */
static int any_processing(wq_host *h)
{
    for (int i = 0; i < h->nqueues; i++)
        if (h->queues[i].ops->processing(h->queues[i].q))
            return 1;
    return 0;
}

#define RUN_BUSY_MS 20 /* busy_timeout of a commit while running */

/* ---- acknowledged means durable ---- */

/* How long a request waits for the commit of what it acknowledges while
 * another connection holds the state file's write lock: then it gets 503. */
#define ACK_WAIT_NS (5 * WQ_NS_PER_S)

typedef struct durable_waiter {
    wq_durable_fn fn;
    void *ud;
    int64_t since; /* real ns it began waiting */
} durable_waiter;

static void set_ack_error(wq_host *h, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->ack_error, sizeof h->ack_error, fmt, ap);
    va_end(ap);
}

const char *wq_host_ack_error(const wq_host *h)
{
    return h->ack_error[0] ? h->ack_error : "not stored: the state file cannot be written";
}

int wq_host_when_durable(wq_host *h, wq_durable_fn fn, void *ud)
{
    if (!h->backend || !wq_backend_dirty(h->backend) || h->store_failed) {
        fn(ud, !h->store_failed);
        return 0;
    }
    if (h->loop_over) { /* the last commit was made: nothing will write this */
        set_ack_error(h, "not stored: the runner is stopping");
        fn(ud, 0);
        return 0;
    }
    if (h->nwaiters == h->waiters_cap) {
        int ncap = h->waiters_cap ? h->waiters_cap * 2 : 16;
        durable_waiter *n = realloc(h->waiters, (size_t)ncap * sizeof *n);
        if (!n)
            return -1;
        h->waiters = n;
        h->waiters_cap = ncap;
    }
    durable_waiter *w = h->waiters;
    w[h->nwaiters++] = (durable_waiter){fn, ud, wq_real_now()};
    return 0;
}

/* Tells every waiter whether what it waited for is committed (when not,
 * wq_host_ack_error says why). */
static void release_waiters(wq_host *h, int ok)
{
    /* A callback may register again (a new request): take the list first. */
    while (h->nwaiters) {
        int n = h->nwaiters;
        durable_waiter *w = h->waiters;
        h->waiters = NULL;
        h->nwaiters = h->waiters_cap = 0;
        for (int i = 0; i < n; i++)
            w[i].fn(w[i].ud, ok);
        free(w);
    }
}

/* The state file stays locked: whoever has waited ACK_WAIT_NS for the
 * commit is told it is not stored (yet: the changes stay pending and are
 * written once the lock is free, so the 503 means "not acknowledged"). */
static void expire_waiters(wq_host *h, int64_t now)
{
    int n = 0;
    while (n < h->nwaiters && now - h->waiters[n].since >= ACK_WAIT_NS)
        n++; /* the oldest come first */
    if (!n)
        return;
    durable_waiter *late = malloc((size_t)n * sizeof *late);
    if (!late)
        return; /* the next attempt tries again */
    memcpy(late, h->waiters, (size_t)n * sizeof *late);
    h->nwaiters -= n;
    memmove(h->waiters, h->waiters + n, (size_t)h->nwaiters * sizeof *late);
    set_ack_error(h,
                  "not acknowledged: the state file stayed locked by another connection for %g s "
                  "(an open write transaction in a sqlite3 session?); the item may still be "
                  "stored once the lock is released",
                  (double)ACK_WAIT_NS / 1e9);
    for (int i = 0; i < n; i++)
        late[i].fn(late[i].ud, 0);
    free(late);
}

/*
 * The state file cannot be written any more (a commit failed, or the file
 * was deleted or replaced): logs why, and answers whoever waits with 503.
 */
static void store_failed(wq_host *h)
{
    const char *why = wq_backend_errmsg(h->backend);
    wq_log(WQ_LOG_ERROR, "wqrun: %s; stopping", why);
    h->store_failed = 1;
    set_ack_error(h, "not stored: %s", why);
    release_waiters(h, 0);
}

/*
 * Commits pending state changes: 0 done (or nothing to do), 1 the file is
 * locked by another connection (the changes stay pending and the next
 * attempt backs off), -1 the state file cannot be written.
 */
static int flush_store(wq_host *h, int wait_ms)
{
    if (!h->backend || h->store_failed || !wq_backend_dirty(h->backend)) {
        release_waiters(h, !h->store_failed);
        return 0;
    }
    h->last_flush = wq_real_now();
    /* While running, wait briefly for a lock held by someone else (a user's
     * sqlite3 session): the loop must go on; the changes stay pending. */
    wq_backend_set_busy_timeout(h->backend, wait_ms);
    int r = wq_backend_flush(h->backend);
    wq_backend_set_busy_timeout(h->backend, WQ_BACKEND_BUSY_MS);
    if (r == WQ_EBUSY) {
        if (!h->busy_since) {
            h->busy_since = h->last_flush;
            wq_host_logl(h, WQ_LOG_WARN, "wqrun: %s; retrying", wq_backend_errmsg(h->backend));
        }
        /* 10 ms, doubling up to 200 ms: the loop goes on meanwhile. */
        h->flush_backoff = h->flush_backoff ? h->flush_backoff * 2 : 10 * 1000 * 1000;
        if (h->flush_backoff > 200 * 1000 * 1000)
            h->flush_backoff = 200 * 1000 * 1000;
        expire_waiters(h, wq_real_now());
        return 1;
    }
    if (r < 0) {
        /* The failed transaction rolled back: what was committed stays. */
        store_failed(h);
        return -1;
    }
    release_waiters(h, 1);
    if (h->busy_since) {
        wq_host_log(h, "wqrun: state file writable again after %.1f s; pending changes written",
                    (double)(h->last_flush - h->busy_since) / 1e9);
        h->busy_since = 0;
        h->flush_backoff = 0;
    }
    return 0;
}

/*
 * After store_failed: adds are refused from now on (503) and the process
 * exits 1. A file deleted or replaced under us stops as SIGTERM does
 * (running handlers finish within --grace); a failed commit (disk full, I/O
 * error, damage) ends the loop at once.
 */
static void stop_after_failure(wq_host *h)
{
    if (wq_backend_gone(h->backend))
        wq_host_stop(h, "the state file is gone");
    else
        wq_host_exit(h, 1);
}

static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    wq_host *h = arg;
    h->flush_now = 0;
    if (flush_store(h, RUN_BUSY_MS) < 0)
        stop_after_failure(h);
    wq_host_settle(h);
}

/*
 * Group commit: changes collect for at most FLUSH_WINDOW before one
 * transaction writes them all, busy or not; a crash loses at most that
 * window of the script's own adds.
 */
#define FLUSH_WINDOW_NS (5 * 1000 * 1000)

static void schedule_flush(wq_host *h)
{
    if (!h->backend || h->store_failed || !wq_backend_dirty(h->backend) || h->flush_now)
        return;
    /* Someone waits for an acknowledgement: commit once this loop turn has
     * taken in everything that is ready (so concurrent requests share the
     * commit), not after the window. */
    if (h->nwaiters && !h->flush_backoff) {
        h->flush_now = 1;
        evtimer_del(h->flush_ev);
        event_active(h->flush_ev, EV_TIMEOUT, 0);
        return;
    }
    if (evtimer_pending(h->flush_ev, NULL))
        return;
    int64_t window = h->flush_backoff > FLUSH_WINDOW_NS ? h->flush_backoff : FLUSH_WINDOW_NS;
    int64_t wait = h->last_flush + window - wq_real_now();
    if (wait <= 0) {
        int r = flush_store(h, RUN_BUSY_MS);
        if (r < 0)
            stop_after_failure(h);
        if (r != 1)
            return;
        wait = h->flush_backoff; /* locked: try again later, even if nothing else happens */
    }
    struct timeval tv = {(time_t)(wait / WQ_NS_PER_S),
                         (suseconds_t)(wait % WQ_NS_PER_S / 1000 + 1)};
    evtimer_add(h->flush_ev, &tv);
}

/* Arms the timer event d ns from now (real time). */
static void arm_real(wq_host *h, int64_t d)
{
    if (d < 0)
        d = 0;
    struct timeval tv = {(time_t)(d / WQ_NS_PER_S), (suseconds_t)(d % WQ_NS_PER_S / 1000)};
    /* libevent rounds down to microseconds: never fire early. */
    if (d % 1000)
        tv.tv_usec++;
    if (tv.tv_usec >= 1000000) {
        tv.tv_sec++;
        tv.tv_usec -= 1000000;
    }
    evtimer_add(h->timer_ev, &tv);
}

void wq_host_settle(wq_host *h)
{
    if (h->exiting)
        return;
    if (h->hooks.settled)
        h->hooks.settled(h->hooks.ud);
    schedule_flush(h);
    if (h->exiting)
        return;
    /* With tasks ready to run, nothing is idle and virtual time stands
     * still; timers still have to be armed (a task may yield in a loop
     * while another sleeps). */
    int busy = runnable(h);
    if (!busy && h->stopping && !any_processing(h) &&
        !(h->hooks.holding && h->hooks.holding(h->hooks.ud))) {
        wq_host_exit(h, 0);
        return;
    }
    int64_t next = wq_timer_next(h);
    /* Delayed items nobody waits for (a queue without handler or getter)
     * fire when their time comes, but do not keep the process alive. */
    int64_t alive = next == WQ_NEVER ? WQ_NEVER : wq_timer_next_awaited(h);
    if (h->opts.virtual_time) {
        if (alive != WQ_NEVER && (busy ? next <= h->vnow : outside_work(h) == 0)) {
            if (h->armed != WQ_NEVER) {
                evtimer_del(h->timer_ev);
                h->armed = WQ_NEVER;
            }
            if (next > h->vnow)
                h->vnow = next;
            event_active(h->timer_ev, EV_TIMEOUT, 0);
            return;
        }
        /* A child process or a transfer runs in real time: while only they
         * can make progress, the clock follows the real one to the next
         * deadline (so exec and handler timeouts still fire). */
        if (!busy && outside_work(h) && next != WQ_NEVER && next != h->armed) {
            arm_real(h, next - h->vnow);
            h->armed = next;
        }
    } else if (next != h->armed) {
        if (next == WQ_NEVER)
            evtimer_del(h->timer_ev);
        else
            arm_real(h, next - mono_ns());
        h->armed = next;
    }
    if (!busy && alive == WQ_NEVER && idle(h)) {
        /* Rows another process put in the inbox are work too, delayed ones
         * included: look once more, and settle again if they changed anything. */
        if (h->backend && !h->inbox_checked) {
            h->inbox_checked = 1;
            wq_inbox_poll(h);
            wq_commands_poll(h); /* and commands someone is waiting for */
            wq_host_settle(h);
            h->inbox_checked = 0;
            return;
        }
        wq_host_exit(h, 0);
    }
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    wq_host *h = arg;
    /* How late the loop got here: script code that does not yield delays
     * every timer, delayed item and HTTP request. */
    if (!h->opts.virtual_time && h->armed != WQ_NEVER) {
        int64_t lag = mono_ns() - h->armed;
        wq_histogram_observe(&h->loop_lag, lag > 0 ? (double)lag / 1e9 : 0);
    }
    /* Virtual time armed on the real clock (children running): jump to it. */
    if (h->opts.virtual_time && h->armed != WQ_NEVER && h->armed > h->vnow)
        h->vnow = h->armed;
    h->armed = WQ_NEVER;
    wq_timer_run_due(h);
    wq_host_settle(h);
}

static void on_grace(wq_host *h, void *data, uint64_t id)
{
    (void)data;
    (void)id;
    wq_host_logl(h, WQ_LOG_WARN, "wqrun: grace period over, exiting with handlers still running");
    wq_host_exit(h, 0);
}

/*
 * SIGINT, SIGTERM and SIGHUP (a closed terminal or session; left alone
 * when the process started with it ignored, as under nohup): the handler
 * writes the signal number to a pipe the loop watches, and asks the
 * runtime to preempt script code that is running right now (a handler
 * stuck in a computation), so the loop sees the signal and the graceful
 * stop (or the second signal's immediate exit) still happens.
 */
static int sig_pipe[2] = {-1, -1};
static int hup_caught;
static void (*volatile preempt)(void);
static void (*volatile watch)(void);
static timer_t watch_timer;
static int watch_armed;

/* The watchdog's tick: a POSIX timer's signal, since the loop itself cannot
 * run while script code holds it. */
static void on_watch_raw(int sig)
{
    (void)sig;
    int saved_errno = errno;
    if (watch)
        watch();
    errno = saved_errno;
}

static volatile sig_atomic_t stop_signals, force_exit_sig;

static void on_signal_raw(int sig)
{
    /* The second stop signal normally ends the process through the loop at
     * once; if the loop does not get control within a second (Lua code
     * the preempting hook cannot reach, such as a loop in a coroutine of
     * the script's own), the alarm ends it here. */
    if (sig == SIGALRM && force_exit_sig)
        _exit(128 + force_exit_sig);
    if (sig != SIGALRM && ++stop_signals >= 2 && !force_exit_sig) {
        force_exit_sig = sig;
        alarm(1);
    }
    int saved_errno = errno;
    unsigned char b = (unsigned char)sig;
    if (write(sig_pipe[1], &b, 1) < 0) {
        /* the pipe is full: signals are already pending */
    }
    if (preempt)
        preempt();
    errno = saved_errno;
}

void wq_host_stop(wq_host *h, const char *why)
{
    if (h->stopping || h->exiting)
        return;
    h->stopping = 1;
    wq_host_log(h, "wqrun: %s, finishing running handlers (up to %gs; again to quit now)", why,
                h->opts.grace);
    wq_service_stopping(h, why);
    for (int i = 0; i < h->nqueues; i++)
        h->queues[i].ops->stop(h->queues[i].q);
    if (h->backend) /* stop claiming; claimed items no handler started go back at once */
        wq_backend_stop(h->backend);
    int64_t grace = (int64_t)(h->opts.grace * 1e9);
    h->grace_timer = wq_timer_start(h, wq_add_sat(wq_host_now(h), grace), on_grace, NULL);
    /* A backstop on the real clock: SIGALRM preempts a handler that keeps
     * the loop busy (or a virtual clock that cannot advance). */
    if (grace > 0) {
        struct itimerval it;
        memset(&it, 0, sizeof it);
        it.it_value.tv_sec = (time_t)(grace / 1000000000);
        it.it_value.tv_usec = (suseconds_t)(grace % 1000000000 / 1000);
        if (it.it_value.tv_sec == 0 && it.it_value.tv_usec == 0)
            it.it_value.tv_usec = 1;
        setitimer(ITIMER_REAL, &it, NULL);
    }
    if (h->hooks.stopping)
        h->hooks.stopping(h->hooks.ud);
    wq_host_settle(h);
}

static void stop_signal(wq_host *h, int sig)
{
    if (h->stopping) {
        wq_log(WQ_LOG_WARN, "wqrun: second signal, exiting now");
        h->exiting = 1;
        h->exit_code = 128 + (int)sig;
        event_base_loopbreak(h->base);
        return;
    }
    wq_host_stop(h, sig == SIGINT   ? "SIGINT received"
                    : sig == SIGHUP ? "SIGHUP received"
                                    : "SIGTERM received");
}

static void on_signal_pipe(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    wq_host *h = arg;
    unsigned char b;
    while (read((int)fd, &b, 1) == 1) {
        if (b != SIGALRM)
            stop_signal(h, b);
        else if (h->stopping && !h->exiting)
            on_grace(h, NULL, 0);
    }
}

static int install_signals(wq_host *h)
{
    if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
        return -1;
    h->sig_ev = event_new(h->base, sig_pipe[0], EV_READ | EV_PERSIST, on_signal_pipe, h);
    if (!h->sig_ev)
        return -1;
    event_add(h->sig_ev, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal_raw;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    struct sigaction old;
    if (sigaction(SIGHUP, NULL, &old) == 0 && old.sa_handler != SIG_IGN) {
        sigaction(SIGHUP, &sa, NULL);
        hup_caught = 1;
    }
    sigaction(SIGALRM, &sa, NULL);
    sa.sa_handler = on_watch_raw;
    sigaction(SIGRTMIN, &sa, NULL);
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_SIGNAL;
    sev.sigev_signo = SIGRTMIN;
    if (timer_create(CLOCK_MONOTONIC, &sev, &watch_timer) == 0) {
        struct itimerspec its = {{0, WQ_WATCH_MS * 1000000L}, {0, WQ_WATCH_MS * 1000000L}};
        timer_settime(watch_timer, 0, &its, NULL);
        watch_armed = 1;
    }
    return 0;
}

static void remove_signals(wq_host *h)
{
    struct itimerval off;
    memset(&off, 0, sizeof off);
    setitimer(ITIMER_REAL, &off, NULL);
    if (watch_armed)
        timer_delete(watch_timer);
    watch_armed = 0;
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    if (hup_caught)
        signal(SIGHUP, SIG_DFL);
    hup_caught = 0;
    signal(SIGALRM, SIG_DFL);
    signal(SIGRTMIN, SIG_DFL);
    if (h->sig_ev)
        event_free(h->sig_ev);
    for (int i = 0; i < 2; i++)
        if (sig_pipe[i] >= 0)
            close(sig_pipe[i]);
    sig_pipe[0] = sig_pipe[1] = -1;
}

static void on_child(evutil_socket_t sig, short what, void *arg)
{
    (void)sig;
    (void)what;
    wq_host *h = arg;
    wq_proc_reap(h);
    wq_pool_reap(h);
    wq_host_settle(h);
}

/* Once a second: each queue's done counter, for its rate over the last minute. */
static void sample_done(wq_host *h)
{
    int64_t now = wq_real_now();
    if (h->last_sample && now - h->last_sample < WQ_NS_PER_S)
        return;
    h->last_sample = h->last_sample ? h->last_sample + WQ_NS_PER_S : now;
    if (now - h->last_sample > WQ_NS_PER_S) /* a stalled loop: start the count again from now */
        h->last_sample = now;
    for (int i = 0; i < h->nqueues; i++) {
        wq_hqueue *hq = &h->queues[i];
        wq_qstats st;
        hq->ops->stats(hq->q, &st);
        hq->done_hist[hq->hist_at] = st.done;
        hq->hist_at = (hq->hist_at + 1) % (WQ_DONE_HISTORY + 1);
        if (hq->hist_len < WQ_DONE_HISTORY + 1)
            hq->hist_len++;
    }
}

uint64_t wq_host_done_last_minute(const wq_hqueue *hq, int *window)
{
    *window = hq->hist_len - 1;
    if (hq->hist_len < 2)
        return 0;
    int n = WQ_DONE_HISTORY + 1;
    uint64_t latest = hq->done_hist[(hq->hist_at + n - 1) % n];
    uint64_t oldest = hq->done_hist[(hq->hist_at + n - hq->hist_len) % n];
    return latest >= oldest ? latest - oldest : 0;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    wq_host *h = arg;
    wq_monotime_calibrate();
    sample_done(h);
    /* The state file deleted or replaced under us: nothing acknowledged
     * from now on could be kept, so stop (exit 1) instead of going on. */
    if (h->backend && !h->store_failed && wq_backend_check(h->backend) < 0) {
        store_failed(h);
        stop_after_failure(h);
        return;
    }
    wq_inbox_poll(h);
    wq_commands_poll(h);
    wq_progress_draw(h, 0);
    wq_host_settle(h);
}

static double tb_to_unix(void *ud, int64_t mono)
{
    return wq_host_unix(ud, mono);
}

static int64_t tb_to_mono(void *ud, double unix_s)
{
    wq_host *h = ud;
    double d = (unix_s - h->start_unix) * 1e9;
    if (d > 9e18)
        return WQ_NEVER;
    if (d < -9e18)
        return INT64_MIN / 2;
    return h->start_mono + (int64_t)d;
}

void wq_host_set_hooks(wq_host *h, const wq_host_hooks *hooks)
{
    h->hooks = *hooks;
    preempt = hooks->preempt;
    watch = hooks->watch;
}

wq_host *wq_host_new(const wq_host_opts *opts)
{
    wq_host *h = calloc(1, sizeof *h);
    if (!h) {
        fprintf(stderr, "wqrun: out of memory\n");
        return NULL;
    }
    h->opts = *opts;
    /* First: the keeper must not inherit threads, files, sockets or connections. */
    int kerr;
    h->keeper = wq_keeper_start(&kerr);
    if (!h->keeper)
        fprintf(stderr,
                "wqrun: cannot start the process keeper (%s): wq.exec children may outlive "
                "wqrun if it is killed\n",
                strerror(kerr));
    wq_monotime_init();
    h->clock.now = host_clock;
    h->clock.ud = h;
    h->start_mono = mono_ns();
    h->vnow = h->start_mono;
    h->start_unix = unix_now();
    wq_log_set_clock(log_clock, h);
    wq_log_set_before(log_before, h);
    wq_timer_init(h);
    /* Precise timers (timerfd): epoll's millisecond timeouts would make every
     * delay up to 1 ms late. */
    struct event_config *cfg = event_config_new();
    if (cfg) {
        event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
        h->base = event_base_new_with_config(cfg);
        event_config_free(cfg);
    }
    if (!h->base) {
        fprintf(stderr, "wqrun: cannot initialize the event loop\n");
        wq_keeper_stop(h->keeper);
        free(h);
        return NULL;
    }
    signal(SIGPIPE, SIG_IGN);
    /* Descriptors: take what the hard limit allows (HTTP connections,
     * wq.exec pipes and the state file all need some). */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    h->timer_ev = evtimer_new(h->base, on_timer, h);
    h->sigchld_ev = evsignal_new(h->base, SIGCHLD, on_child, h);
    h->tick_ev = event_new(h->base, -1, EV_PERSIST, on_tick, h);
    h->flush_ev = evtimer_new(h->base, on_flush, h);
    if (!h->timer_ev || !h->sigchld_ev || !h->tick_ev || !h->flush_ev || install_signals(h) < 0) {
        fprintf(stderr, "wqrun: cannot set up the event loop and signal handling\n");
        wq_host_free(h);
        return NULL;
    }
    struct timeval tick = {0, 50000};
    evsignal_add(h->sigchld_ev, NULL);
    evtimer_add(h->tick_ev, &tick);
    if (opts->db_path) {
        wq_backend_opts bo = {
            .where = opts->db_path,
            .sync = opts->sync_full ? WQ_SYNC_FULL : WQ_SYNC_NORMAL,
            .pg_schema = opts->pg_schema,
            .runner_name = opts->runner_name,
            .lease = opts->lease,
            .event_base = h->base,
            .tb = {tb_to_unix, tb_to_mono, h},
            .relayed = wq_events_relayed,
            .relay = wq_events_relay,
            .relay_ud = h,
        };
        char err[512];
        if (wq_backend_open(&h->backend, &bo, err, sizeof err) < 0) {
            fprintf(stderr, "wqrun: %s\n", err);
            wq_host_free(h);
            return NULL;
        }
    }
    if (wq_host_flows_open(h) < 0) {
        wq_host_free(h);
        return NULL;
    }
    return h;
}

int wq_host_start(wq_host *h)
{
    if (h->opts.listen && wq_http_start(h, h->opts.listen) < 0)
        return -1;
    wq_progress_start(h);
    wq_service_start(h);
    return 0;
}

static void on_drain_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

/*
 * The loop has ended, but answers given in its last turn (202 after the
 * last commit, 503 after a failed one) are still in the connections'
 * buffers: run the loop a little longer (at most DRAIN_NS) to write them
 * out, with the timers and polls stopped.
 */
#define DRAIN_NS (1 * WQ_NS_PER_S)

static void drain_replies(wq_host *h)
{
    if (h->replies_unsent <= 0)
        return;
    evtimer_del(h->timer_ev);
    evtimer_del(h->flush_ev);
    event_del(h->tick_ev);
    struct event *wake = event_new(h->base, -1, EV_PERSIST, on_drain_tick, NULL);
    if (!wake)
        return;
    struct timeval tv = {0, 10000};
    evtimer_add(wake, &tv);
    int64_t end = wq_real_now() + DRAIN_NS;
    while (h->replies_unsent > 0 && wq_real_now() < end)
        event_base_loop(h->base, EVLOOP_ONCE);
    event_free(wake);
}

int wq_host_run(wq_host *h)
{
    event_base_dispatch(h->base);
    /* No new connections: refused from now on, not reset at exit after the last changes are
     * written (those open get their answers below). */
    wq_http_unlisten(h);
    int status = h->exit_code;
    if (h->backend && !h->store_failed) {
        /* The last changes: wait longer for a lock someone else holds. */
        int r, tries = 0;
        while ((r = flush_store(h, WQ_BACKEND_BUSY_MS)) == 1 && ++tries < 6)
            ;
        if (r == 1) {
            wq_progress_clear(h);
            fprintf(stderr, "wqrun: %s; the last changes were not written\n",
                    wq_backend_errmsg(h->backend));
        }
        if (r != 0 && status == 0)
            status = 1;
        /* An asynchronous backend writes its last outcomes and answers its adds. */
        wq_backend_drain(h->backend, 10000);
    }
    if ((h->store_failed || h->failed) && status == 0)
        status = 1;
    /* A one-shot batch that dead-lettered work fails, as cron and systemd expect. */
    if (status == 0 && h->ndead_run > 0 && !h->opts.serve && !h->exit_chosen)
        status = WQ_EXIT_DEAD;
    /* No commit comes after this one: whoever still waits gets 503. */
    h->loop_over = 1;
    if (!h->store_failed)
        set_ack_error(h, "not stored: %s", h->backend ? wq_backend_errmsg(h->backend) : "stopping");
    release_waiters(h, 0);
    drain_replies(h);
    wq_commands_abandon(h);
    wq_progress_finish(h);
    if (h->hooks.ending && !h->store_failed)
        h->hooks.ending(h->hooks.ud);
    wq_service_stopped(h, status);
    return status;
}

void wq_host_shutdown(wq_host *h)
{
    wq_http_stop(h);
    wq_proc_kill_all(h);
    wq_pool_kill_all(h);
    wq_httpc_shutdown(h);
}

void wq_host_free(wq_host *h)
{
    if (!h)
        return;
    wq_host_shutdown(h);
    wq_service_free(h);
    wq_log_set_clock(NULL, NULL);
    wq_log_set_before(NULL, NULL);
    /* After the children: it kills what is left of their groups. */
    wq_keeper_stop(h->keeper);
    h->keeper = NULL;
    wq_backend_close(h->backend);
    wq_host_flows_close(h); /* after the last commit, which reads it */
    wq_timer_destroy(h);
    wq_events_free(h); /* after the server and the runtime: no listener is left */
    if (h->timer_ev)
        event_free(h->timer_ev);
    remove_signals(h);
    if (h->sigchld_ev)
        event_free(h->sigchld_ev);
    if (h->tick_ev)
        event_free(h->tick_ev);
    if (h->flush_ev)
        event_free(h->flush_ev);
    if (h->base)
        event_base_free(h->base);
    free(h->queues);
    free(h->waiters);
    free(h);
}
