/*
 * The PostgreSQL backend's database-wide view (db_view: the dashboard,
 * /metrics): every queue's counts and every runner, read every VIEW_MS
 * while someone looks at it (see pg.c).
 */
#include "store/pg/pg_int.h"

#include "store/pg/pg_schema.h"
#include "store/pg/pgconn.h"

#include <stdlib.h>
#include <string.h>

/* ---- the database-wide view (dashboards, /metrics) ---- */

typedef struct view {
    wq_db_view pub;
    wq_db_queue *queues;
    size_t nq, qcap;
    wq_db_runner *runners;
    size_t nr, rcap;
    char **strs; /* names it owns */
    size_t ns, scap;
    int oom;
} view;

void wq_pgb_view_free(view *v)
{
    if (!v)
        return;
    for (size_t i = 0; i < v->ns; i++)
        free(v->strs[i]);
    free(v->strs);
    free(v->queues);
    free(v->runners);
    free(v);
}

static const char *view_str(view *v, const char *s)
{
    if (v->ns == v->scap) {
        size_t ncap = v->scap ? v->scap * 2 : 32;
        char **n = realloc(v->strs, ncap * sizeof *n);
        if (!n) {
            v->oom = 1;
            return "";
        }
        v->strs = n;
        v->scap = ncap;
    }
    char *d = strdup(s);
    if (!d) {
        v->oom = 1;
        return "";
    }
    return v->strs[v->ns++] = d;
}

static wq_db_queue *view_queue(view *v, const char *name)
{
    for (size_t i = 0; i < v->nq; i++)
        if (strcmp(v->queues[i].name, name) == 0)
            return &v->queues[i];
    if (v->nq == v->qcap) {
        size_t ncap = v->qcap ? v->qcap * 2 : 16;
        wq_db_queue *n = realloc(v->queues, ncap * sizeof *n);
        if (!n) {
            v->oom = 1;
            return NULL;
        }
        v->queues = n;
        v->qcap = ncap;
    }
    wq_db_queue *q = &v->queues[v->nq++];
    memset(q, 0, sizeof *q);
    q->name = view_str(v, name);
    return q;
}

static wq_db_runner *view_runner(view *v, int64_t id)
{
    for (size_t i = 0; i < v->nr; i++)
        if (v->runners[i].id == id)
            return &v->runners[i];
    return NULL;
}

static void view_rest_result(void *ud, PGresult *res)
{
    pgb *b = ud;
    view *v = b->view_next_v;
    if (!v || !res || PQresultStatus(res) != PGRES_TUPLES_OK) {
        if (v)
            v->oom = 1; /* not complete: not shown */
        return;
    }
    for (int i = 0; i < PQntuples(res); i++) {
        const char *kind = PQgetvalue(res, i, 0);
        if (kind[0] == 'q') {
            wq_db_queue *q = view_queue(v, PQgetvalue(res, i, 1));
            if (q) {
                q->paused = atoi(PQgetvalue(res, i, 2));
                q->dead = strtoull(PQgetvalue(res, i, 3), NULL, 10);
            }
        } else if (kind[0] == 'r') {
            if (v->nr == v->rcap) {
                size_t ncap = v->rcap ? v->rcap * 2 : 8;
                wq_db_runner *n = realloc(v->runners, ncap * sizeof *n);
                if (!n) {
                    v->oom = 1;
                    continue;
                }
                v->runners = n;
                v->rcap = ncap;
            }
            wq_db_runner *r = &v->runners[v->nr++];
            memset(r, 0, sizeof *r);
            r->id = atoll(PQgetvalue(res, i, 1));
            r->name = view_str(v, PQgetvalue(res, i, 2));
            r->host = view_str(v, PQgetvalue(res, i, 3));
            r->pid = atoi(PQgetvalue(res, i, 4));
            r->started_at = atof(PQgetvalue(res, i, 5));
            r->heartbeat_age = atof(PQgetvalue(res, i, 6));
            r->done = strtoull(PQgetvalue(res, i, 7), NULL, 10);
            r->self = r->id == b->runner_id;
        } else if (kind[0] == 'm') {
            v->pub.jobs_dead_tuples = atoll(PQgetvalue(res, i, 1));
            v->pub.takeovers = strtoull(PQgetvalue(res, i, 2), NULL, 10);
            v->pub.crash_dead = strtoull(PQgetvalue(res, i, 3), NULL, 10);
        }
    }
}

static void view_jobs_result(void *ud, PGresult *res)
{
    pgb *b = ud;
    view *v = b->view_next_v;
    if (!v || !res || PQresultStatus(res) != PGRES_TUPLES_OK) {
        if (v)
            v->oom = 1;
        return;
    }
    for (int i = 0; i < PQntuples(res); i++) {
        wq_db_queue *q = view_queue(v, PQgetvalue(res, i, 0));
        if (!q)
            continue;
        uint64_t c[5];
        for (int k = 0; k < 5; k++)
            c[k] = strtoull(PQgetvalue(res, i, 2 + k), NULL, 10);
        q->queued += c[0];
        q->processing += c[1];
        q->waiting += c[2];
        q->held += c[3];
        q->retrying += c[4];
        wq_db_runner *r =
            PQgetisnull(res, i, 1) ? NULL : view_runner(v, atoll(PQgetvalue(res, i, 1)));
        if (r)
            r->running += c[1];
    }
}

static void view_synced(void *ud, int ok)
{
    pgb *b = ud;
    view *v = b->view_next_v;
    b->view_next_v = NULL;
    b->view_flight = 0;
    int64_t took = wq_pgb_real_ns() - b->view_sent;
    /* a slow read (a big table) is made less often: at most a tenth of the time */
    int64_t wait = (int64_t)VIEW_MS * 1000000;
    if (took * 10 > wait)
        wait = took * 10;
    b->view_next = wq_pgb_real_ns() + wait;
    if (!ok || !v || v->oom) {
        wq_pgb_view_free(v);
        return;
    }
    v->pub.at = wq_pgb_wall_s();
    v->pub.nqueues = v->nq;
    v->pub.queues = v->queues;
    v->pub.nrunners = v->nr;
    v->pub.runners = v->runners;
    wq_pgb_view_free(b->view);
    b->view = v;
}

void wq_pgb_send_view(pgb *b)
{
    view *v = calloc(1, sizeof *v);
    if (!v)
        return;
    const char *s[1] = {b->schema};
    /* On the outcomes' connection when it is up: the pass over jobs takes a while (seconds
     * under a long transaction elsewhere) and claims must not wait behind it. The small
     * tables first: the runners' rows are there when jobs' counts come. */
    wq_pgconn *vc = b->c2 && wq_pgconn_up(b->c2) ? b->c2 : b->c;
    b->view_next_v = v;
    if (wq_pgconn_send(vc, wq_pg_stmts[PGS_VIEW_REST].name, NULL, 1, s, view_rest_result, b) < 0 ||
        wq_pgconn_send(vc, wq_pg_stmts[PGS_VIEW_JOBS].name, NULL, 0, NULL, view_jobs_result, b) <
            0 ||
        wq_pgconn_sync(vc, view_synced, b) < 0) {
        b->view_next_v = NULL;
        wq_pgb_view_free(v);
        return; /* the loss handler answers what was sent; the next tick tries again */
    }
    b->view_flight = 1;
    b->view_sent = wq_pgb_real_ns();
}

const wq_db_view *wq_pgb_db_view(wq_backend *base)
{
    pgb *b = (pgb *)base;
    b->view_asked = wq_pgb_real_ns();
    if (!b->view_wanted) {
        b->view_wanted = 1; /* from now on, every VIEW_MS */
        b->view_next = 0;
    }
    return b->view ? &b->view->pub : NULL;
}
