/*
 * An asynchronous libpq connection driven by libevent (see pgconn.h).
 * Results come in the order statements were sent: a FIFO of expected
 * answers (statements and syncs) pairs each with its callback. In pipeline
 * mode libpq ends each statement's results with a NULL and a sync with a
 * PGRES_PIPELINE_SYNC result (no NULL after it).
 */
#include "store/pg/pgconn.h"

#include <event2/event.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct expect {
    int sync; /* a sync point, else a statement */
    wq_pg_result_fn rfn;
    wq_pg_sync_fn sfn;
    void *ud;
    PGresult *res; /* the statement's result, kept until its NULL arrives */
} expect;

struct wq_pgconn {
    struct event_base *base;
    char *conninfo;
    int timeout_s; /* connect_timeout */
    PGconn *pg;
    wq_pgconn_hooks hooks;
    struct event *rev, *wev, *retry_ev;
    int up;
    int connecting; /* PQconnectPoll under way */
    int fd;
    double backoff; /* seconds before the next connection attempt */
    expect *q;      /* ring of expected answers */
    size_t head, count, cap;
    int aborted; /* the current transaction failed: its sync reports 0 */
    int freeing;
    PGresult *handing; /* the result a callback is given, until it takes it (wq_pgconn_keep) */
    long lose_every, lose_n; /* wq_pgconn_lose_at_commit */
};

static void on_read(evutil_socket_t fd, short what, void *arg);
static void on_write(evutil_socket_t fd, short what, void *arg);
static void lost(wq_pgconn *c, const char *why);

const char *wq_pg_describe(PGconn *pg, const char *fallback)
{
    static char buf[512];
    if (!pg)
        return fallback ? fallback : "(unknown)";
    const char *host = PQhost(pg), *port = PQport(pg), *db = PQdb(pg);
    snprintf(buf, sizeof buf, "%s:%s/%s", host && *host ? host : "localhost",
             port && *port ? port : "5432", db ? db : "");
    return buf;
}

int wq_pg_transient(const PGresult *res)
{
    const char *st = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    return st && (strcmp(st, "40P01") == 0 || strcmp(st, "40001") == 0);
}

void wq_pg_msg(char *dst, size_t n, const char *msg)
{
    snprintf(dst, n, "%s", msg && *msg ? msg : "unknown error");
    size_t l = strlen(dst);
    while (l && (dst[l - 1] == '\n' || dst[l - 1] == ' '))
        dst[--l] = '\0';
}

static int push(wq_pgconn *c, expect e)
{
    if (c->count == c->cap) {
        size_t ncap = c->cap ? c->cap * 2 : 64;
        expect *n = malloc(ncap * sizeof *n);
        if (!n)
            return -1;
        for (size_t i = 0; i < c->count; i++)
            n[i] = c->q[(c->head + i) % c->cap];
        free(c->q);
        c->q = n;
        c->head = 0;
        c->cap = ncap;
    }
    c->q[(c->head + c->count) % c->cap] = e;
    c->count++;
    return 0;
}

static expect pop(wq_pgconn *c)
{
    expect e = c->q[c->head];
    c->head = (c->head + 1) % c->cap;
    c->count--;
    return e;
}

static void want_write(wq_pgconn *c)
{
    int r = PQflush(c->pg);
    if (r > 0)
        event_add(c->wev, NULL);
    else if (r < 0)
        lost(c, PQerrorMessage(c->pg));
}

/* Server notices (a shutdown's WARNING, ...) are not ours to print: the loss is logged once. */
static void quiet_notice(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

static int setup(wq_pgconn *c)
{
    PQsetNoticeProcessor(c->pg, quiet_notice, NULL);
    if (PQsetnonblocking(c->pg, 1) != 0 || PQenterPipelineMode(c->pg) != 1)
        return -1;
    c->fd = PQsocket(c->pg);
    c->rev = event_new(c->base, c->fd, EV_READ | EV_PERSIST, on_read, c);
    c->wev = event_new(c->base, c->fd, EV_WRITE, on_write, c);
    if (!c->rev || !c->wev)
        return -1;
    event_add(c->rev, NULL);
    c->up = 1;
    c->aborted = 0;
    return 0;
}

static void drop_events(wq_pgconn *c)
{
    if (c->rev)
        event_free(c->rev);
    if (c->wev)
        event_free(c->wev);
    c->rev = c->wev = NULL;
}

static void try_connect(evutil_socket_t fd, short what, void *arg);

/* Every pending statement is answered NULL, then the hooks hear of it and a reconnect is armed. */
static void lost(wq_pgconn *c, const char *why)
{
    if (!c->up && !c->connecting)
        return;
    char msg[512];
    wq_pg_msg(msg, sizeof msg, why);
    c->up = 0;
    c->connecting = 0;
    drop_events(c);
    if (c->pg)
        PQfinish(c->pg);
    c->pg = NULL;
    while (c->count) {
        expect e = pop(c);
        if (e.res)
            PQclear(e.res);
        if (e.sync && e.sfn)
            e.sfn(e.ud, 0);
        else if (!e.sync && e.rfn)
            e.rfn(e.ud, NULL);
    }
    if (c->freeing)
        return;
    if (c->hooks.down)
        c->hooks.down(c->hooks.ud, msg);
    struct timeval tv = {(long)c->backoff, (long)((c->backoff - (long)c->backoff) * 1e6)};
    evtimer_add(c->retry_ev, &tv);
    c->backoff = c->backoff * 2 > 2.0 ? 2.0 : c->backoff * 2;
}

static void poll_connect(wq_pgconn *c)
{
    PostgresPollingStatusType st = PQconnectPoll(c->pg);
    drop_events(c);
    if (st == PGRES_POLLING_FAILED) {
        c->connecting = 1;
        lost(c, PQerrorMessage(c->pg));
        return;
    }
    if (st == PGRES_POLLING_OK) {
        c->connecting = 0;
        if (setup(c) < 0) {
            c->connecting = 1;
            lost(c, "cannot enter pipeline mode");
            return;
        }
        c->backoff = 0.1;
        if (c->hooks.up)
            c->hooks.up(c->hooks.ud);
        return;
    }
    c->fd = PQsocket(c->pg);
    short ev = st == PGRES_POLLING_READING ? EV_READ : EV_WRITE;
    c->rev = event_new(c->base, c->fd, ev, ev == EV_READ ? on_read : on_write, c);
    if (!c->rev) {
        c->connecting = 1;
        lost(c, "out of memory");
        return;
    }
    struct timeval tv = {10, 0};
    event_add(c->rev, &tv);
}

static void try_connect(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    wq_pgconn *c = arg;
    /* as the first connection: named wqrun in pg_stat_activity, the same timeout */
    char tmo[32];
    snprintf(tmo, sizeof tmo, "%d", c->timeout_s);
    const char *keys[] = {"dbname", "connect_timeout", "application_name", NULL};
    const char *vals[] = {c->conninfo, tmo, "wqrun", NULL};
    c->pg = PQconnectStartParams(keys, vals, 1);
    c->connecting = 1;
    if (!c->pg || PQstatus(c->pg) == CONNECTION_BAD) {
        lost(c, c->pg ? PQerrorMessage(c->pg) : "out of memory");
        return;
    }
    poll_connect(c);
}

void wq_pgconn_lose_at_commit(wq_pgconn *c, long every)
{
    c->lose_every = every;
}

/* Hands the results that are complete to their callbacks. */
static void drain(wq_pgconn *c)
{
    while (c->up && c->count && !PQisBusy(c->pg)) {
        expect *e = &c->q[c->head];
        PGresult *r = PQgetResult(c->pg);
        if (e->sync) {
            if (!r) /* not there yet */
                break;
            ExecStatusType st = PQresultStatus(r);
            PQclear(r);
            if (st == PGRES_PIPELINE_ABORTED)
                continue; /* an aborted statement's leftovers before the sync */
            int ok = st == PGRES_PIPELINE_SYNC && !c->aborted;
            if (ok && c->lose_every > 0 && ++c->lose_n % c->lose_every == 0) {
                lost(c, "lost at commit (a test's wq_pgconn_lose_at_commit)");
                return;
            }
            expect done = pop(c);
            c->aborted = 0;
            if (done.sfn)
                done.sfn(done.ud, ok);
            continue;
        }
        if (r) {
            ExecStatusType st = PQresultStatus(r);
            if (st == PGRES_FATAL_ERROR || st == PGRES_PIPELINE_ABORTED)
                c->aborted = 1;
            if (e->res) /* only the last result of a statement is kept */
                PQclear(e->res);
            e->res = r;
            continue;
        }
        expect done = pop(c);
        c->handing = done.res;
        if (done.rfn)
            done.rfn(done.ud, done.res);
        if (c->handing)
            PQclear(c->handing);
        c->handing = NULL;
    }
}

PGresult *wq_pgconn_keep(wq_pgconn *c)
{
    PGresult *r = c->handing;
    c->handing = NULL;
    return r;
}

/* While connecting, the socket's readiness (or the timeout) drives PQconnectPoll: 1. */
static int connect_step(wq_pgconn *c, short what)
{
    if (!c->connecting)
        return 0;
    if (what & EV_TIMEOUT)
        lost(c, "timeout while connecting");
    else
        poll_connect(c);
    return 1;
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    wq_pgconn *c = arg;
    if (connect_step(c, what))
        return;
    if (!PQconsumeInput(c->pg)) {
        lost(c, PQerrorMessage(c->pg));
        return;
    }
    drain(c);
    if (!c->up)
        return;
    PGnotify *n;
    while (c->pg && (n = PQnotifies(c->pg))) {
        if (c->hooks.notify)
            c->hooks.notify(c->hooks.ud, n->relname, n->extra);
        PQfreemem(n);
    }
    if (c->pg && PQstatus(c->pg) == CONNECTION_BAD)
        lost(c, PQerrorMessage(c->pg));
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    wq_pgconn *c = arg;
    if (!connect_step(c, what))
        want_write(c);
}

wq_pgconn *wq_pgconn_open(struct event_base *base, const char *conninfo, double timeout_s,
                          const wq_pgconn_hooks *hooks, char *err, size_t errlen)
{
    wq_pgconn *c = calloc(1, sizeof *c);
    if (!c || !(c->conninfo = strdup(conninfo))) {
        free(c);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->base = base;
    c->backoff = 0.1;
    if (hooks)
        c->hooks = *hooks;
    c->retry_ev = evtimer_new(base, try_connect, c);
    c->timeout_s = (int)(timeout_s < 2 ? 2 : timeout_s);
    char tmo[32];
    snprintf(tmo, sizeof tmo, "%d", c->timeout_s);
    const char *keys[] = {"dbname", "connect_timeout", "application_name", NULL};
    const char *vals[] = {conninfo, tmo, "wqrun", NULL};
    c->pg = PQconnectdbParams(keys, vals, 1);
    if (!c->pg || PQstatus(c->pg) != CONNECTION_OK || !c->retry_ev) {
        char msg[400];
        wq_pg_msg(msg, sizeof msg, c->pg ? PQerrorMessage(c->pg) : "out of memory");
        snprintf(err, errlen, "cannot connect to PostgreSQL at %s: %s",
                 wq_pg_describe(c->pg, "(unparsable URL)"), msg);
        c->freeing = 1;
        wq_pgconn_free(c);
        return NULL;
    }
    if (setup(c) < 0) {
        snprintf(err, errlen, "cannot enter pipeline mode on %s", wq_pg_describe(c->pg, NULL));
        c->freeing = 1;
        wq_pgconn_free(c);
        return NULL;
    }
    return c;
}

void wq_pgconn_free(wq_pgconn *c)
{
    if (!c)
        return;
    c->freeing = 1;
    if (c->up || c->connecting)
        lost(c, "closing");
    drop_events(c);
    if (c->retry_ev)
        event_free(c->retry_ev);
    if (c->pg)
        PQfinish(c->pg);
    free(c->q);
    free(c->conninfo);
    free(c);
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

size_t wq_pgconn_wait(wq_pgconn *c, int timeout_ms)
{
    /* On the clock: every answer wakes the poll, and a pipeline may hold many. */
    int64_t end = mono_ms() + timeout_ms, left;
    while (c->up && c->count && (left = end - mono_ms()) > 0) {
        struct pollfd pfd = {c->fd, POLLIN, 0};
        if (PQflush(c->pg) > 0)
            pfd.events |= POLLOUT;
        int r = poll(&pfd, 1, left > 100 ? 100 : (int)left);
        if (r < 0)
            break;
        if (!PQconsumeInput(c->pg)) {
            lost(c, PQerrorMessage(c->pg));
            break;
        }
        drain(c);
    }
    return c->count;
}

int wq_pgconn_up(const wq_pgconn *c)
{
    return c->up;
}

PGconn *wq_pgconn_pg(wq_pgconn *c)
{
    return c->pg;
}

size_t wq_pgconn_pending(const wq_pgconn *c)
{
    return c->count;
}

int wq_pgconn_send(wq_pgconn *c, const char *name, const char *sql, int n,
                   const char *const *values, wq_pg_result_fn fn, void *ud)
{
    if (!c->up)
        return -1;
    int ok = name ? PQsendQueryPrepared(c->pg, name, n, values, NULL, NULL, 0)
                  : PQsendQueryParams(c->pg, sql, n, NULL, values, NULL, NULL, 0);
    if (!ok || push(c, (expect){0, fn, NULL, ud, NULL}) < 0) {
        lost(c, PQerrorMessage(c->pg));
        return -1;
    }
    return 0;
}

int wq_pgconn_prepare(wq_pgconn *c, const char *name, const char *sql, wq_pg_result_fn fn, void *ud)
{
    if (!c->up)
        return -1;
    if (!PQsendPrepare(c->pg, name, sql, 0, NULL) || push(c, (expect){0, fn, NULL, ud, NULL}) < 0) {
        lost(c, PQerrorMessage(c->pg));
        return -1;
    }
    return 0;
}

int wq_pgconn_sync(wq_pgconn *c, wq_pg_sync_fn fn, void *ud)
{
    if (!c->up)
        return -1;
    if (!PQpipelineSync(c->pg) || push(c, (expect){1, NULL, fn, ud, NULL}) < 0) {
        lost(c, PQerrorMessage(c->pg));
        return -1;
    }
    want_write(c);
    return 0;
}
