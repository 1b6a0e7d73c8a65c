/*
 * The PostgreSQL backend's control (see pg.c): liveness (the heartbeat,
 * reaping dead runners, registering again, the tick and the connections'
 * hooks), the pauses, cancels and queue definitions that other runners,
 * the command line or SQL make, and the outbox of statements that must
 * get through (schedules).
 */
#include "store/pg/pg_int.h"

#include "engine/common.h"
#include "engine/log.h"
#include "store/pg/pg_schema.h"
#include "store/pg/pgconn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- liveness: heartbeat, reaping, reconnects ---- */

static void reap_result(void *ud, PGresult *res)
{
    pgb *b = ud;
    if (res && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
        long n = atol(PQgetvalue(res, 0, 0)), m = atol(PQgetvalue(res, 0, 1));
        const char *who = PQgetvalue(res, 0, 2);
        char more[48] = "";
        if (n > 10)
            snprintf(more, sizeof more, " and %ld more", n - 10);
        if (n > 0 || m > 0)
            wq_pgb_logf(b, WQ_LOG_WARN, "dead runner %s: took over %ld item(s)%s%s%s", who, n,
                        n ? ": " : "", PQgetvalue(res, 0, 3), more);
        if (m > 0) { /* dead letters, logged at their level (docs/deploy.md) */
            char dmore[48] = "";
            if (m > 10)
                snprintf(dmore, sizeof dmore, " and %ld more", m - 10);
            wq_pgb_logf(b, WQ_LOG_ERROR,
                        "dead-lettered %ld item(s) whose runner died while running them 5 times "
                        "in a row (%s): %s%s",
                        m, who, PQgetvalue(res, 0, 4), dmore);
        }
        if (n > 0) {
            b->st.takeovers += (uint64_t)n;
            for (pgq *q = b->queues; q; q = q->next) {
                q->more = 1;
                q->hint = 0; /* their items went back to where they were in the queue */
            }
            wq_pgb_kick(b);
        }
    }
}

static void lose_all(pgb *b, const char *why)
{
    if (b->lost_claims)
        return;
    b->lost_claims = 1;
    wq_pgb_logf(b, WQ_LOG_WARN,
                "%s: running handlers are cancelled (their items run elsewhere now)", why);
    for (pgq *q = b->queues; q; q = q->next)
        wq_pgb_lose_claims(q, "lease lost");
}

static void heartbeat_result(void *ud, PGresult *res)
{
    pgb *b = ud;
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK)
        return;
    if (PQntuples(res) == 1) {
        b->last_heartbeat = wq_pgb_real_ns();
        if (b->lost_claims) {
            /* Back within reach but our handlers were cancelled (cut off past the lease) and
             * nobody declared us dead: give their items back ourselves. */
            char *sql = wq_pg_sql(wq_pgconn_pg(b->c), b->schema,
                                  "SELECT @S.release(ARRAY[$1::bigint], false)");
            const char *v[1] = {b->runner_id_s};
            if (sql && wq_pgconn_send(b->c, NULL, sql, 1, v, NULL, NULL) == 0 &&
                wq_pgconn_sync(b->c, NULL, NULL) == 0)
                b->lost_claims = 0;
            free(sql);
            for (pgq *q = b->queues; q; q = q->next)
                q->more = 1;
        }
        return;
    }
    /* Our row is gone: declared dead (silent past the lease). Our claims run elsewhere. */
    lose_all(b, "this runner was declared dead by the others (no heartbeat within --lease)");
    b->registered = 0;
}

static void relock_result(void *ud, PGresult *res)
{
    pgb *b = ud;
    if (res && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
        PQgetvalue(res, 0, 0)[0] == 't')
        return;
    wq_pgb_logf(b, WQ_LOG_ERROR, "could not take this runner's lock again after reconnecting");
}

static void reregister_result(void *ud, PGresult *res)
{
    pgb *b = ud;
    b->reregistering = 0;
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
        return; /* the next tick tries again */
    b->runner_id = atoll(PQgetvalue(res, 0, 0));
    snprintf(b->runner_id_s, sizeof b->runner_id_s, "%lld", (long long)b->runner_id);
    b->registered = 1;
    b->lost_claims = 0;
    b->last_heartbeat = wq_pgb_real_ns();
    b->control_again = 1; /* the paused queues, at once */
    wq_pgb_logf(b, WQ_LOG_INFO, "registered again as runner %lld", (long long)b->runner_id);
    for (pgq *q = b->queues; q; q = q->next) {
        q->waiting_db = -1;
        q->more = 1;
    }
    wq_pgb_kick(b);
}

/* Declared dead earlier: come back as a new runner. */
static void reregister(pgb *b)
{
    char *sql = wq_pg_sql(wq_pgconn_pg(b->c), b->schema,
                          "WITH r AS (INSERT INTO @S.runners (name, host, pid, lease, version) "
                          "VALUES ($1, $2, $3, $4, $5) RETURNING id) "
                          "SELECT id, pg_try_advisory_lock($6, id::integer) FROM r");
    char pid[24], lease[32], cls[24];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    snprintf(lease, sizeof lease, "%.3f", b->lease);
    snprintf(cls, sizeof cls, "%d", WQ_PG_LOCK_CLASS);
    const char *v[6] = {b->runner_name, b->host, pid, lease, WQ_VERSION, cls};
    if (sql && wq_pgconn_send(b->c, NULL, sql, 6, v, reregister_result, b) == 0 &&
        wq_pgconn_sync(b->c, NULL, NULL) == 0)
        b->reregistering = 1;
    free(sql);
}

/* ---- operating: pauses and cancels from any runner, the CLI or SQL (SPEC 8.2) ---- */

static pgq *queue_named(pgb *b, const char *name)
{
    for (pgq *q = b->queues; q; q = q->next)
        if (strcmp(q->name, name) == 0)
            return q;
    return NULL;
}

/* Follows another runner's definition of q's options (the last one started wins). */
static void redefine(pgq *q, const wq_queue_def *def, const char *by)
{
    q->def = *def;
    if (q->q && q->hooks.redefined)
        q->hooks.redefined(q->hooks.ud, def, by);
}

static void queues_result(void *ud, PGresult *res)
{
    pgb *b = ud;
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK)
        return;
    for (pgq *q = b->queues; q; q = q->next) {
        int p = 0;
        for (int i = 0; i < PQntuples(res); i++) {
            if (strcmp(PQgetvalue(res, i, 0), q->name) != 0)
                continue;
            p = PQgetvalue(res, i, 1)[0] == 't';
            q->limited = PQgetvalue(res, i, 5)[0] == 't';
            /* Another runner started after this one's definition was stored. */
            wq_queue_def d = q->def;
            d.max_retries = atoll(PQgetvalue(res, i, 2));
            d.keep_done = atof(PQgetvalue(res, i, 3));
            if (q->has_def && q->def_sent == 2 && !PQgetisnull(res, i, 2) &&
                (d.max_retries != q->def.max_retries || d.keep_done != q->def.keep_done))
                redefine(q, &d, PQgetvalue(res, i, 4));
        }
        if (p == q->paused)
            continue;
        q->paused = p;
        if (q->q && q->hooks.paused)
            q->hooks.paused(q->hooks.ud, p);
        if (!p)
            q->more = 1;
    }
}

static void define_result(void *ud, PGresult *res)
{
    pgq *q = ud;
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        q->def_sent = 0; /* again after a reconnect */
        return;
    }
    q->def_sent = 2; /* answers read after this one see it (or a later runner's) */
    const char *by = PQgetisnull(res, 0, 2) ? "?" : PQgetvalue(res, 0, 2);
    if (!PQgetisnull(res, 0, 0) && atoll(PQgetvalue(res, 0, 0)) != q->def.max_retries)
        wq_pgb_logf(
            q->b, WQ_LOG_WARN,
            "warning: queue '%s': max_retries is %lld in this runner's script and was %s as "
            "runner '%s' defined it; the last runner started wins: %lld for every runner now",
            q->name, (long long)q->def.max_retries, PQgetvalue(res, 0, 0), by,
            (long long)q->def.max_retries);
    if (!PQgetisnull(res, 0, 1) && atof(PQgetvalue(res, 0, 1)) != q->def.keep_done)
        wq_pgb_logf(
            q->b, WQ_LOG_WARN,
            "warning: queue '%s': keep_done is %g s in this runner's script and was %s s as "
            "runner '%s' defined it; the last runner started wins: %g s for every runner now",
            q->name, q->def.keep_done, PQgetvalue(res, 0, 1), by, q->def.keep_done);
}

/* Stores q's definition (at attach, and after a reconnect if it did not get through). */
void wq_pgb_send_define(pgb *b, pgq *q)
{
    if (!q->has_def || q->def_sent || !b->registered || !wq_pgconn_up(b->c))
        return;
    char mr[24], kd[40], gc[24], gr[40], gb[40], qr[40], qb[40], hs[40];
    const wq_queue_def *d = &q->def;
    snprintf(mr, sizeof mr, "%lld", (long long)d->max_retries);
    snprintf(kd, sizeof kd, "%.17g", d->keep_done);
    snprintf(gc, sizeof gc, "%lld", (long long)d->group_concurrency);
    snprintf(gr, sizeof gr, "%.17g", d->group_rate);
    snprintf(gb, sizeof gb, "%.17g", d->group_burst);
    snprintf(qr, sizeof qr, "%.17g", d->rate);
    snprintf(qb, sizeof qb, "%.17g", d->burst);
    snprintf(hs, sizeof hs, "%.17g", d->history);
    const char *v[11] = {
        q->name, mr, kd, b->runner_name, gc, gr, gb, qr, qb, d->unique ? "true" : "false", hs};
    if (wq_pgconn_send(b->c, wq_pg_stmts[PGS_DEFINE].name, NULL, 11, v, define_result, q) == 0 &&
        wq_pgconn_sync(b->c, NULL, NULL) == 0)
        q->def_sent = 1;
}

static void signals_result(void *ud, PGresult *res)
{
    pgb *b = ud;
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK)
        return;
    for (int i = 0; i < PQntuples(res); i++) {
        pgq *q = queue_named(b, PQgetvalue(res, i, 0));
        const char *key = PQgetvalue(res, i, 1);
        size_t len = (size_t)PQgetlength(res, i, 1);
        uint32_t slot;
        claim *c = q && q->q ? wq_pgb_slot_of(q, key, len, &slot) : NULL;
        /* A cancel of an earlier claim of the key (it ended meanwhile) is stale. */
        if (c && c->token == atoll(PQgetvalue(res, i, 2)) && q->hooks.cancel) {
            c->cancelled = 1; /* a flow node's outcome without a result is a cancel */
            q->hooks.cancel(q->hooks.ud, key, len);
        }
    }
}

static void control_synced(void *ud, int ok)
{
    (void)ok;
    pgb *b = ud;
    b->control_flight = 0;
    if (b->control_again)
        wq_pgb_kick(b);
}

/* Reads the paused queues and this runner's cancels (with the heartbeat, and when notified). */
void wq_pgb_send_control(pgb *b)
{
    if (b->control_flight) {
        b->control_again = 1;
        return;
    }
    const char *v[1] = {b->runner_id_s};
    if (wq_pgconn_send(b->c, wq_pg_stmts[PGS_QUEUES].name, NULL, 0, NULL, queues_result, b) < 0 ||
        wq_pgconn_send(b->c, wq_pg_stmts[PGS_SIGNALS].name, NULL, 1, v, signals_result, b) < 0 ||
        wq_pgconn_sync(b->c, control_synced, b) < 0)
        return;
    b->control_flight = 1;
}

static void prune_result(void *ud, PGresult *res)
{
    pgb *b = ud;
    b->prune_more = res && PQresultStatus(res) == PGRES_COMMAND_OK &&
                    atol(PQcmdTuples(res)) >= 1000; /* a full batch: more may be due */
}

static void prune_synced(void *ud, int ok)
{
    (void)ok;
    ((pgb *)ud)->prune_flight = 0;
}

static void hprune_result(void *ud, PGresult *res)
{
    pgb *b = ud;
    b->hprune_more = res && PQresultStatus(res) == PGRES_COMMAND_OK &&
                     atol(PQcmdTuples(res)) >= 1000; /* a full slice: more may be due */
}

static void hprune_synced(void *ud, int ok)
{
    (void)ok;
    ((pgb *)ud)->hprune_flight = 0;
}

/* ---- the outbox (schedules) ---- */

void wq_pgb_pstmt_free(pstmt *p)
{
    free(p->sql);
    for (int i = 0; i < p->n; i++)
        free(p->params[i]);
}

/* Queues sql (with @S) and its n text parameters (NULL: SQL NULL); 0 or WQ_ENOMEM. */
int wq_pgb_outbox_put(pgb *b, const char *what, const char *sql, int n, const char *const *v)
{
    if (b->nout == b->outcap) {
        size_t ncap = b->outcap ? b->outcap * 2 : 16;
        pstmt *np = realloc(b->outbox, ncap * sizeof *np);
        if (!np)
            return WQ_ENOMEM;
        b->outbox = np;
        b->outcap = ncap;
    }
    pstmt *p = &b->outbox[b->nout];
    memset(p, 0, sizeof *p);
    p->what = what;
    p->n = n;
    p->sql = strdup(sql); /* @S is expanded when it is sent: the connection may be down now */
    int oom = !p->sql;
    for (int i = 0; i < n; i++)
        if (v[i] && !(p->params[i] = strdup(v[i])))
            oom = 1;
    if (oom) {
        wq_pgb_pstmt_free(p);
        return WQ_ENOMEM;
    }
    b->nout++;
    wq_pgb_kick(b);
    return 0;
}

/* The answers come in the order sent: the i-th is outbox[i]'s (an index: the array may grow
 * meanwhile). */
void wq_pgb_outbox_result(void *ud, PGresult *res)
{
    pgb *b = ud;
    if (b->outbox_seen >= b->nout)
        return;
    pstmt *p = &b->outbox[b->outbox_seen++];
    if (res && PQresultStatus(res) == PGRES_FATAL_ERROR && !wq_pg_transient(res)) {
        char msg[400];
        wq_pg_msg(msg, sizeof msg, PQresultErrorMessage(res));
        wq_pgb_logf(b, WQ_LOG_ERROR, "%s: the database refused it: %s", p->what, msg);
        p->failed = 1;
    } else if (res && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
               strncmp(PQgetvalue(res, 0, 0), "caught up", 9) == 0) {
        wq_pgb_logf(b, WQ_LOG_INFO, "%s '%s' of %s: %s (a time missed while no runner ran it)",
                    p->what, p->params[1] ? p->params[1] : "?", p->params[0] ? p->params[0] : "?",
                    PQgetvalue(res, 0, 0));
    }
}

/* One statement's transaction ended (they are answered in the order sent): once all of the
 * flight are, the ones committed or refused are dropped; the others (a lost connection, a
 * deadlock's victim) go again, first and in order. */
void wq_pgb_outbox_synced(void *ud, int ok)
{
    pgb *b = ud;
    size_t n = (size_t)b->outbox_flight;
    if (b->outbox_synced < n && (ok || b->outbox[b->outbox_synced].failed))
        b->outbox[b->outbox_synced].done = 1;
    if (++b->outbox_synced < n)
        return;
    b->outbox_flight = 0;
    size_t keep = 0;
    for (size_t i = 0; i < b->nout; i++)
        if (i < n && b->outbox[i].done)
            wq_pgb_pstmt_free(&b->outbox[i]);
        else
            b->outbox[keep++] = b->outbox[i];
    b->nout = keep;
    if (b->nout)
        wq_pgb_kick(b);
}

/* ---- the tick, and the connections' hooks ---- */

void wq_pgb_on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    pgb *b = arg;
    int64_t now = wq_pgb_real_ns();
    if (!wq_pgconn_up(b->c)) {
        if (b->down_since && now - b->down_since > (int64_t)(b->lease * 1e9))
            lose_all(b, "the database was unreachable for longer than --lease");
        return;
    }
    if (!b->registered) {
        if (!b->reregistering)
            reregister(b);
        return;
    }
    if (now - b->last_heartbeat > (int64_t)(b->lease * 1e9 / 5) ||
        now - b->last_heartbeat > WQ_NS_PER_S) {
        char done[24];
        snprintf(done, sizeof done, "%llu", (unsigned long long)b->st.rows_written);
        const char *v[2] = {b->runner_id_s, done};
        wq_pgconn_send(b->c, wq_pg_stmts[PGS_HEARTBEAT].name, NULL, 2, v, heartbeat_result, b);
        wq_pgconn_sync(b->c, NULL, NULL);
        wq_pgb_send_control(b); /* the fallback for a notification missed (reconnect) */
    }
    wq_pgb_events_tick(b, now);
    if (b->view_wanted && now - b->view_asked > (int64_t)VIEW_IDLE_S * WQ_NS_PER_S)
        b->view_wanted = 0; /* nobody looked for a while: no more passes over jobs */
    if (b->view_wanted && !b->view_flight && now >= b->view_next)
        wq_pgb_send_view(b);
    if (now - b->last_reap > (int64_t)REAP_MS * 1000000) {
        b->last_reap = now;
        char cls[24];
        snprintf(cls, sizeof cls, "%d", WQ_PG_LOCK_CLASS);
        const char *v[1] = {cls};
        wq_pgconn_send(b->c, wq_pg_stmts[PGS_REAP].name, NULL, 1, v, reap_result, b);
        wq_pgconn_sync(b->c, NULL, NULL);
    }
    /* Queues with group limits: held items of groups with room (see wqrun.sweep). */
    if (now - b->last_sweep > (int64_t)PRUNE_MS * 1000000) {
        b->last_sweep = now;
        int any = 0;
        for (pgq *q = b->queues; q; q = q->next) {
            const char *v[1] = {q->name};
            if (q->limited && q->q &&
                wq_pgconn_send(b->c, wq_pg_stmts[PGS_SWEEP].name, NULL, 1, v, NULL, NULL) == 0)
                any = 1;
        }
        if (any)
            wq_pgconn_sync(b->c, NULL, NULL);
    }
    /* Expired completed-job memories: a thousand per short transaction, again at once while
     * there are more, else every PRUNE_MS. */
    if (b->keeps_done && !b->prune_flight &&
        (b->prune_more || now - b->last_prune > (int64_t)PRUNE_MS * 1000000)) {
        b->last_prune = now;
        if (wq_pgconn_send(b->c, wq_pg_stmts[PGS_PRUNE_DONE].name, NULL, 0, NULL, prune_result,
                           b) == 0 &&
            wq_pgconn_sync(b->c, prune_synced, b) == 0)
            b->prune_flight = 1;
    }
    /* The history's rows past their queue's history seconds (SPEC 11): as the memories, a
     * thousand per short transaction (of every runner keeping history: whoever is up). */
    if (b->keeps_history && !b->hprune_flight &&
        (b->hprune_more || now - b->last_hprune > (int64_t)PRUNE_MS * 1000000)) {
        b->last_hprune = now;
        if (wq_pgconn_send(b->c, wq_pg_stmts[PGS_PRUNE_HISTORY].name, NULL, 0, NULL, hprune_result,
                           b) == 0 &&
            wq_pgconn_sync(b->c, hprune_synced, b) == 0)
            b->hprune_flight = 1;
    }
    /* Flows finished longer than their keep ago (SPEC 9): rarely, one statement. */
    if (now - b->last_prune_flows > (int64_t)PRUNE_FLOWS_MS * 1000000) {
        b->last_prune_flows = now;
        wq_pgconn_send(b->c, wq_pg_stmts[PGS_PRUNE_FLOWS].name, NULL, 0, NULL, NULL, NULL);
        wq_pgconn_sync(b->c, NULL, NULL);
    }
    wq_pgb_kick(b); /* the poll fallback */
}

/* Prepares the statements on conn (and LISTENs on the first connection). */
void wq_pgb_prepare_all(pgb *b, wq_pgconn *conn, int listen)
{
    PGconn *pg = wq_pgconn_pg(conn);
    for (int i = 0; i < PGS_COUNT; i++) {
        char *sql = wq_pg_sql(pg, b->schema, wq_pg_stmts[i].sql);
        if (sql)
            wq_pgconn_prepare(conn, wq_pg_stmts[i].name, sql, NULL, NULL);
        free(sql);
    }
    char *add = wq_pg_sql(pg, b->schema,
                          "SELECT @S.add($1, $2, $3::jsonb, $4, $5, $6, coalesce($7, false), "
                          "coalesce($8, false))");
    if (add)
        wq_pgconn_prepare(conn, "wq_add", add, NULL, NULL);
    free(add);
    char *sql = listen ? wq_pg_sql(pg, b->schema, "LISTEN @S") : NULL;
    if (sql)
        wq_pgconn_send(conn, NULL, sql, 0, NULL, NULL, NULL);
    free(sql);
    wq_pgconn_sync(conn, NULL, NULL);
}

/* The second connection (outcomes) is back: prepare again, and what waited goes. */
void wq_pgb_on_up2(void *ud)
{
    pgb *b = ud;
    wq_pgb_prepare_all(b, b->c2, 0);
    wq_pgb_kick(b);
}

void wq_pgb_on_down2(void *ud, const char *why)
{
    /* outcomes use the first connection meanwhile; its loss is the one warned of */
    wq_pgb_logf(ud, WQ_LOG_INFO, "the outcomes' connection was lost (%s): reconnecting", why);
}

void wq_pgb_on_up(void *ud)
{
    pgb *b = ud;
    wq_pgb_logf(b, WQ_LOG_INFO, "reconnected to PostgreSQL at %s after %.1f s", b->where,
                (double)(wq_pgb_real_ns() - b->down_since) / 1e9);
    b->down_since = 0;
    b->st.reconnects++;
    b->st.connected = 1;
    wq_pgb_prepare_all(b, b->c, 1);
    char cls[24];
    snprintf(cls, sizeof cls, "%d", WQ_PG_LOCK_CLASS);
    const char *v[2] = {cls, b->runner_id_s};
    wq_pgconn_send(b->c, wq_pg_stmts[PGS_RELOCK].name, NULL, 2, v, relock_result, b);
    char done[24];
    snprintf(done, sizeof done, "%llu", (unsigned long long)b->st.rows_written);
    const char *h[2] = {b->runner_id_s, done};
    wq_pgconn_send(b->c, wq_pg_stmts[PGS_HEARTBEAT].name, NULL, 2, h, heartbeat_result, b);
    wq_pgconn_sync(b->c, NULL, NULL);
    b->control_again = 1; /* pauses and cancels notified while it was down */
    for (pgq *q = b->queues; q; q = q->next) {
        q->waiting_db = -1;
        q->more = 1;
        /* Outcomes that were in flight go again. */
        for (uint32_t i = 0; i < q->nclaims; i++)
            if (q->claims[i].used && !q->claims[i].sent)
                wq_pgb_touch_slot(q, i);
    }
    wq_pgb_kick(b);
}

void wq_pgb_on_down(void *ud, const char *why)
{
    pgb *b = ud;
    if (!b->down_since) {
        b->down_since = wq_pgb_real_ns();
        wq_pgb_logf(b, WQ_LOG_WARN, "lost the connection to PostgreSQL at %s (%s); reconnecting",
                    b->where, why);
    }
    b->st.connected = 0;
    wq_pgb_set_err(b, "database unavailable: %s", why);
}

void wq_pgb_on_notify(void *ud, const char *channel, const char *payload)
{
    pgb *b = ud;
    (void)channel;
    if (wq_pgb_events_notified(b, payload))
        return;
    if (payload[0] == '!') { /* '!control': a pause, resume or cancel (no queue name has '!') */
        b->control_again = 1;
        wq_pgb_kick(b);
        return;
    }
    for (pgq *q = b->queues; q; q = q->next)
        if (strcmp(q->name, payload) == 0) {
            q->more = 1;
            q->hint = 0; /* another runner's items may have gone back (takeover) */
        }
    wq_pgb_kick(b);
}
