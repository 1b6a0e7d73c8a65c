/*
 * The progress line: one line at the bottom of a terminal, redrawn in place
 * ("\r" + text + "\033[K") from the host's 50 ms tick, at most 10 times a
 * second, truncated to the terminal's width so it never wraps. Anything
 * else written to the terminal must erase it first: the host's log and
 * error paths call wq_progress_clear, and while the line is enabled the
 * script's print and io.write are wrapped to do the same (stdout usually is
 * the same terminal). The next tick draws it again. At exit it is erased
 * for good and replaced by a one-line summary.
 *
 * Counts per queue: done (handler queues: successful runs; queues without
 * a handler: q:done calls), queued (q:len), running (processing), waiting
 * (delayed adds), retrying (keys whose failure count is > 0, i.e. between
 * a failed run and success or dead-lettering), dead (dead letters).
 */
#include "host/progress.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define MIN_INTERVAL (WQ_NS_PER_S / 10) /* at most 10 redraws a second */
#define RATE_WINDOW WQ_NS_PER_S         /* the rate shown is over about a second */

typedef struct progress {
    int64_t start;     /* real clock at start */
    int64_t last_draw; /* real clock of the last redraw */
    int shown;         /* the line is on the screen now */
    int drawn;         /* it was on the screen at least once */
    int64_t mark_t;    /* rate window: start time and done count */
    uint64_t mark_done;
    double rate; /* jobs/s over the last window, < 0 before the first one */
    char line[1024];
    char last[1024]; /* what is on the screen, to skip identical redraws */
} progress;

typedef struct totals {
    uint64_t done, queued, running, waiting, retrying, dead;
} totals;

static void count(const wq_hqueue *hq, totals *t)
{
    wq_qstats st;
    hq->ops->stats(hq->q, &st);
    /* A handler queue's jobs are done when they succeeded; otherwise done() counts. */
    t->done = st.workers ? st.succeeded : st.done;
    t->queued = st.queued;
    t->running = st.processing;
    t->waiting = st.waiting;
    t->retrying = st.retrying;
    t->dead = st.dead;
}

static void sum(wq_host *h, totals *all)
{
    memset(all, 0, sizeof *all);
    for (int i = 0; i < h->nqueues; i++) {
        totals t;
        count(&h->queues[i], &t);
        all->done += t.done;
        all->queued += t.queued;
        all->running += t.running;
        all->waiting += t.waiting;
        all->retrying += t.retrying;
        all->dead += t.dead;
    }
}

static int term_width(void)
{
    struct winsize ws;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    return 80;
}

/* Elapsed time as 4.2s, 3m07s or 2h05m. */
static void fmt_elapsed(char *buf, size_t n, double s)
{
    if (s < 60)
        snprintf(buf, n, "%.1fs", s);
    else if (s < 3600)
        snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
    else
        snprintf(buf, n, "%dh%02dm", (int)s / 3600, (int)s % 3600 / 60);
}

static void fmt_rate(char *buf, size_t n, double r)
{
    if (r >= 100)
        snprintf(buf, n, "%.0f/s", r);
    else
        snprintf(buf, n, "%.1f/s", r);
}

/* Appends to p->line, keeping it NUL-terminated; returns 0 once full. */
static int append(progress *p, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int append(progress *p, size_t *len, const char *fmt, ...)
{
    if (*len >= sizeof p->line - 1)
        return 0;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(p->line + *len, sizeof p->line - *len, fmt, ap);
    va_end(ap);
    if (n < 0)
        return 0;
    *len += (size_t)n;
    if (*len >= sizeof p->line)
        *len = sizeof p->line - 1;
    return *len < sizeof p->line - 1;
}

static void build_line(wq_host *h, progress *p, int64_t now)
{
    totals all;
    sum(h, &all);
    double elapsed = (double)(now - p->start) / 1e9;
    if (now - p->mark_t >= RATE_WINDOW) {
        p->rate = (double)(all.done - p->mark_done) * 1e9 / (double)(now - p->mark_t);
        p->mark_t = now;
        p->mark_done = all.done;
    }
    double rate = p->rate >= 0 ? p->rate : elapsed > 0 ? (double)all.done / elapsed : 0;
    char el[32], rt[32];
    fmt_elapsed(el, sizeof el, elapsed);
    fmt_rate(rt, sizeof rt, rate);
    size_t len = 0;
    p->line[0] = '\0';
    append(p, &len, "[%s %s]", el, rt);
    for (int i = 0; i < h->nqueues; i++) {
        const wq_hqueue *hq = &h->queues[i];
        totals t;
        count(hq, &t);
        if (!append(p, &len,
                    "%s %s: done %llu  queued %llu  running %llu  waiting %llu  retrying %llu"
                    "  dead %llu",
                    i ? " |" : "", hq->name, (unsigned long long)t.done,
                    (unsigned long long)t.queued, (unsigned long long)t.running,
                    (unsigned long long)t.waiting, (unsigned long long)t.retrying,
                    (unsigned long long)t.dead))
            break;
    }
    /* Queue names are ASCII, so bytes are columns. The last three columns
     * stay free so neither the cursor nor the terminal's echo of ^C reaches
     * the wrap position (a wrapped line could not be erased any more). */
    size_t width = (size_t)term_width();
    if (width > 3 && len > width - 3)
        p->line[width - 3] = '\0';
}

static void put(const char *s)
{
    fputs(s, stderr);
    fflush(stderr);
}

void wq_progress_clear(wq_host *h)
{
    progress *p = h->progress;
    if (!p || !p->shown)
        return;
    put("\r\033[K");
    p->shown = 0;
    p->last[0] = '\0';
}

void wq_progress_draw(wq_host *h, int force)
{
    progress *p = h->progress;
    if (!p || h->nqueues == 0)
        return;
    int64_t now = wq_real_now();
    if (!force && now - p->last_draw < MIN_INTERVAL)
        return;
    p->last_draw = now;
    build_line(h, p, now);
    if (p->shown && strcmp(p->line, p->last) == 0)
        return;
    fflush(stdout); /* whatever the script printed goes above the line */
    fputs("\r", stderr);
    fputs(p->line, stderr);
    put("\033[K");
    memcpy(p->last, p->line, sizeof p->last);
    p->shown = p->drawn = 1;
}

void wq_progress_start(wq_host *h)
{
    if (h->opts.quiet || !isatty(STDERR_FILENO))
        return;
    const char *term = getenv("TERM");
    if (term && strcmp(term, "dumb") == 0)
        return;
    progress *p = calloc(1, sizeof *p);
    if (!p)
        return; /* no progress line: not worth failing for */
    p->start = p->mark_t = p->last_draw = wq_real_now();
    p->rate = -1;
    h->progress = p;
}

void wq_progress_finish(wq_host *h)
{
    progress *p = h->progress;
    if (!p)
        return;
    wq_progress_clear(h);
    h->progress = NULL;
    if (h->nqueues > 0) {
        totals all;
        sum(h, &all);
        double elapsed = (double)(wq_real_now() - p->start) / 1e9;
        char el[32], rt[32], extra[128] = "";
        fmt_elapsed(el, sizeof el, elapsed);
        fmt_rate(rt, sizeof rt, elapsed > 0 ? (double)all.done / elapsed : 0);
        size_t n = 0;
        if (all.running)
            n += (size_t)snprintf(extra + n, sizeof extra - n, ", %llu running",
                                  (unsigned long long)all.running);
        if (all.waiting && n < sizeof extra)
            snprintf(extra + n, sizeof extra - n, ", %llu waiting",
                     (unsigned long long)all.waiting);
        fflush(stdout);
        fprintf(stderr, "wqrun: %llu done, %llu dead, %llu queued%s in %s (%s)\n",
                (unsigned long long)all.done, (unsigned long long)all.dead,
                (unsigned long long)all.queued, extra, el, rt);
        fflush(stderr);
    }
    free(p);
}
