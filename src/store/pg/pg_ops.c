/*
 * Operator actions on a PostgreSQL queue (see pg.c): pause, remove,
 * cancel, items, dead letters, group limits, stats ... One statement each,
 * sent once the outcomes this runner had when asked have committed (read
 * your own writes), and answered once its own transaction has.
 */
#include "store/pg/pg_int.h"

#include "engine/common.h"
#include "store/pg/pg_item.h"
#include "store/pg/pg_schema.h"
#include "store/pg/pgconn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void wq_pgb_pop_free(pop *o)
{
    free(o->text);
    free(o->sql);
    for (int i = 0; i < 6; i++)
        free(o->params[i]);
    free(o);
}

/* Whether res is not the one row an action answers: then o carries why (answered -1). */
static int failed(pop *o, PGresult *res)
{
    if (res && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
        return 0;
    char msg[400];
    wq_pg_msg(msg, sizeof msg,
              res ? PQresultErrorMessage(res) : "the connection to the database was lost");
    free(o->text);
    o->text = strdup(msg);
    o->answered = -1;
    return 1;
}

/* The answer of a flow request (see wq_pgb_flow_op's statements). */
static void fop_result(pop *o, PGresult *res)
{
    if (res && PQresultStatus(res) == PGRES_FATAL_ERROR && o->fop == WQ_FOP_ADD + 1) {
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
        if (state && msg && strcmp(state, "22023") == 0) { /* refused: the node named */
            free(o->text);
            o->text = strdup(msg);
            o->answered = o->text ? -2 : -1;
            return;
        }
    }
    if (failed(o, res))
        return;
    o->answered = 1;
    o->result = atoi(PQgetvalue(res, 0, 0));
    if (o->fop == WQ_FOP_CANCEL + 1 && o->result < 0)
        o->result = WQ_ENOENT;
    free(o->text);
    o->text = PQnfields(res) > 1 ? strdup(PQgetvalue(res, 0, 1)) : NULL;
    if (PQnfields(res) > 1 && !o->text) {
        o->text = strdup("out of memory");
        o->answered = -1;
    }
}

static void op_result(void *ud, PGresult *res)
{
    pop *o = ud;
    if (o->fop) {
        fop_result(o, res);
        return;
    }
    if (failed(o, res))
        return;
    const char *v = PQgetvalue(res, 0, 0);
    o->answered = 1;
    switch (o->kind) {
    case WQ_BOP_PAUSE:
    case WQ_BOP_RESUME: o->result = v[0] == 't'; break;
    case WQ_BOP_REMOVE:
        o->result = strcmp(v, "removed") == 0      ? 0
                    : strcmp(v, "processing") == 0 ? WQ_EBUSY
                                                   : WQ_ENOENT;
        break;
    case WQ_BOP_CANCEL:
        o->result = strcmp(v, "cancelling") == 0 ? 0
                    : strcmp(v, "absent") == 0   ? WQ_ENOENT
                                                 : WQ_EBUSY;
        break;
    case WQ_BOP_RETRY_DEAD:
    case WQ_BOP_CANCEL_AFTER:
    case WQ_BOP_FORGET_DONE:
    case WQ_BOP_PURGE_DEAD: o->result = atoi(v); break;
    case WQ_BOP_SET_GROUP_LIMIT: o->result = 0; break;
    case WQ_BOP_GROUP_LIMIT:
    case WQ_BOP_ITEM:
    case WQ_BOP_STATS:
    case WQ_BOP_DONE_INFO:
    case WQ_BOP_ITEMS:
    case WQ_BOP_DEAD:
    case WQ_BOP_SCHEDULES:
    case WQ_BOP_HELD_GROUPS:
    case WQ_BOP_HISTORY:
    case WQ_BOP_LAST_RUN:
        o->result = atoi(v);
        o->text = strdup(PQgetvalue(res, 0, 1));
        if (!o->text) {
            o->text = strdup("out of memory");
            o->answered = -1;
        }
        break;
    }
}

static void op_synced(void *ud, int ok)
{
    pop *o = ud;
    if (o->answered == -2) /* a flow refused: nothing was added */
        o->fn(o->ud, WQ_EINVAL, o->text);
    else if (ok && o->answered == 1)
        o->fn(o->ud, o->result, o->text);
    else
        o->fn(o->ud, WQ_EIO, o->answered == -1 && o->text ? o->text : "database unavailable");
    wq_pgb_pop_free(o);
}

/* Sends o, answered through op_synced; -1 when the connection is down (o untouched). */
static int send_op(pgb *b, pop *o)
{
    if (wq_pgconn_up(b->c) &&
        wq_pgconn_send(b->c, NULL, o->sql, o->nparams, (const char *const *)o->params, op_result,
                       o) == 0 &&
        wq_pgconn_sync(b->c, op_synced, o) == 0)
        return 0;
    return -1;
}

/* The operator actions whose outcome transaction has committed go now, in order. */
void wq_pgb_send_waiting_ops(pgb *b)
{
    while (b->ops_waiting && b->ops_waiting->need <= b->out_done_txn) {
        pop *o = b->ops_waiting;
        b->ops_waiting = o->next;
        if (send_op(b, o) < 0) {
            o->fn(o->ud, WQ_EIO, "database unavailable");
            wq_pgb_pop_free(o);
        }
    }
}

static int queue_op(pgb *b, pop *o);

/* An optional field of the JSON objects the listings build: absent when NULL. */
#define PG_OPT(name, expr)                                                                         \
    " || CASE WHEN " expr " IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('" name "', " expr    \
    ") END"

int wq_pgb_op(wq_bqueue *bq, const wq_bop *op, wq_bop_fn fn, void *ud)
{
    pgq *q = (pgq *)bq;
    pgb *b = q->b;
    static const char *const sql[] = {
        [WQ_BOP_PAUSE] = "SELECT @S.pause($1, true)",
        [WQ_BOP_RESUME] = "SELECT @S.pause($1, false)",
        [WQ_BOP_REMOVE] = "SELECT @S.remove($1, $2)",
        [WQ_BOP_CANCEL] = "SELECT @S.cancel($1, $2)",
        [WQ_BOP_RETRY_DEAD] = "SELECT @S.retry_dead($1, $2)",
        [WQ_BOP_PURGE_DEAD] = "SELECT @S.purge_dead($1)",
        /* In key order as bytes (COLLATE "C"), as the engine lists them. */
        [WQ_BOP_ITEMS] =
            "SELECT count(*), coalesce(jsonb_agg(x.o ORDER BY x.k), '[]')::text FROM ("
            "SELECT key COLLATE \"C\" AS k, jsonb_build_object('key', key, 'state', state,"
            " 'priority', priority, 'attempt', attempt)" PG_OPT("payload", "payload") PG_OPT(
                "group", "grp") PG_OPT("last_error", "last_error") PG_OPT("progress", "progress")
                PG_OPT("runner", "(SELECT r.name FROM @S.runners r WHERE r.id = runner)")
                    PG_OPT("ready_at",
                           "extract(epoch FROM ready_at)") " AS o FROM @S.items WHERE queue = $1 "
                                                           "AND ($2::text IS NULL OR state = $2)"
                                                           " AND ($3::text IS NULL OR key COLLATE "
                                                           "\"C\" > $3)"
                                                           " ORDER BY key COLLATE \"C\" LIMIT "
                                                           "$4::bigint) x",
        [WQ_BOP_DONE_INFO] =
            "SELECT (x.o IS NOT NULL)::int, coalesce(x.o::text, 'null') FROM (SELECT ("
            "SELECT jsonb_build_object('finished_at', extract(epoch FROM d.finished_at))" PG_OPT(
                "result", "d.result") " FROM @S.done d JOIN @S.queues q ON q.name = d.queue"
                                      " WHERE d.queue = $1 AND d.key = $2 AND d.finished_at >"
                                      " now() - make_interval(secs => coalesce(q.keep_done, 0))"
                                      ") AS o) x",
        [WQ_BOP_SET_GROUP_LIMIT] = "SELECT @S.set_group_limit($1, $2, $3::boolean,"
                                   " nullif($4::integer, 0), nullif($5::float8, 0),"
                                   " nullif($6::float8, 0)), 0",
        [WQ_BOP_GROUP_LIMIT] =
            "SELECT coalesce(g.own, false)::int, jsonb_strip_nulls(jsonb_build_object("
            "'concurrency', CASE WHEN g.own THEN g.conc ELSE q.g_conc END,"
            " 'rate', CASE WHEN g.own THEN g.rate ELSE q.g_rate END,"
            " 'burst', CASE WHEN g.own THEN g.burst ELSE q.g_burst END))::text"
            " FROM (SELECT 1) one LEFT JOIN @S.queues q ON q.name = $1"
            " LEFT JOIN @S.groups g ON g.queue = $1 AND g.grp = $2",
        [WQ_BOP_ITEM] = WQ_PG_KEY_JSON,
        [WQ_BOP_FORGET_DONE] = "WITH d AS (DELETE FROM @S.done WHERE queue = $1 AND key = $2"
                               " RETURNING 1) SELECT count(*) FROM d",
        /* q:stats()'s fields that the database holds for every runner (q:len() is queued);
         * queued counts the items group limits hold back, as the engine does. */
        [WQ_BOP_STATS] =
            "SELECT 0, jsonb_build_object("
            "'queued', count(*) FILTER (WHERE NOT running AND run_at <= now()),"
            " 'depth', count(*) FILTER (WHERE NOT running AND run_at <= now() OR running AND "
            "dirty),"
            " 'processing', count(*) FILTER (WHERE running),"
            " 'waiting', count(*) FILTER (WHERE NOT running AND run_at > now()"
            "  OR delay_at IS NOT NULL),"
            " 'throttled', count(*) FILTER (WHERE held),"
            " 'retrying', count(*) FILTER (WHERE requeues > 0),"
            " 'groups', count(DISTINCT grp) FILTER (WHERE NOT running AND run_at <= now()),"
            " 'dead', (SELECT count(*) FROM @S.dead WHERE queue = $1),"
            " 'paused', coalesce((SELECT paused FROM @S.queues WHERE name = $1), false))::text"
            " FROM @S.jobs WHERE queue = $1",
        /* A waiting row is its delayed add: gone with it. Beside a queued or running item the
         * delayed add is delay_at. The two conditions never hold for one row. */
        [WQ_BOP_CANCEL_AFTER] =
            "WITH d AS (DELETE FROM @S.jobs WHERE queue = $1 AND key = $2 AND NOT running"
            " AND run_at > now() RETURNING 1),"
            " u AS (UPDATE @S.jobs SET delay_at = NULL WHERE queue = $1 AND key = $2"
            " AND (running OR run_at <= now()) AND delay_at IS NOT NULL RETURNING 1)"
            " SELECT (SELECT count(*) FROM d) + (SELECT count(*) FROM u)",
        [WQ_BOP_DEAD] =
            "SELECT (SELECT count(*) FROM @S.dead WHERE queue = $1),"
            " coalesce(jsonb_agg(x.o ORDER BY x.failed_at, x.k), '[]')::text FROM ("
            "SELECT failed_at, key COLLATE \"C\" AS k, jsonb_build_object('key', key,"
            " 'attempts', attempts, 'failed_at', extract(epoch FROM failed_at))" PG_OPT(
                "payload", "payload") PG_OPT("error", "error")
                PG_OPT("traceback", "traceback") " AS o FROM @S.dead WHERE queue = $1 ORDER BY "
                                                 "failed_at, key COLLATE \"C\""
                                                 " LIMIT $2::bigint) x",
        [WQ_BOP_SCHEDULES] =
            "SELECT count(*), coalesce(jsonb_agg(x.o ORDER BY x.k), '[]')::text FROM ("
            "SELECT name COLLATE \"C\" AS k, jsonb_build_object('name', name, 'spec', spec,"
            " 'key', coalesce(key, name), 'tz', tz, 'catch_up', catch_up)" PG_OPT(
                "payload", "payload") PG_OPT("next_at", "extract(epoch FROM next_at)")
                PG_OPT("last_at", "extract(epoch FROM last_at)") " AS o FROM @S.schedules"
                                                                 " WHERE queue = $1) x",
        /* Counted from the held items' index; the queued and running counts and the limits
         * only for the groups shown. */
        [WQ_BOP_HELD_GROUPS] =
            "WITH h AS (SELECT grp, count(*) AS held FROM @S.jobs WHERE queue = $1 AND held"
            " GROUP BY grp)"
            " SELECT (SELECT count(*) FROM h),"
            " coalesce(jsonb_agg(x.o ORDER BY x.held DESC, x.k), '[]')::text FROM ("
            "SELECT t.held, t.grp COLLATE \"C\" AS k, jsonb_build_object('group', t.grp,"
            " 'held', t.held, 'queued', t.held + (SELECT count(*) FROM @S.jobs y"
            " WHERE y.queue = $1 AND y.grp = t.grp AND NOT y.running AND NOT y.held"
            " AND y.run_at <= now()), 'running', coalesce(g.running, 0),"
            " 'own', coalesce(g.own, false))" PG_OPT(
                "concurrency", "CASE WHEN g.own THEN g.conc ELSE q.g_conc END")
                PG_OPT("rate", "CASE WHEN g.own THEN g.rate ELSE q.g_rate END") PG_OPT(
                    "burst",
                    "CASE WHEN g.own THEN g.burst ELSE q.g_burst END") " AS o"
                                                                       " FROM (SELECT grp, held "
                                                                       "FROM h ORDER BY held DESC, "
                                                                       "grp COLLATE \"C\""
                                                                       " LIMIT $2::bigint) t LEFT "
                                                                       "JOIN @S.groups g ON "
                                                                       "g.queue = $1 AND g.grp = "
                                                                       "t.grp"
                                                                       " LEFT JOIN @S.queues q ON "
                                                                       "q.name = $1) x",
        /* The history (SPEC 11): newest first, by its primary key (queue, id). */
        [WQ_BOP_HISTORY] =
            "SELECT count(*), coalesce(jsonb_agg(x.o ORDER BY x.id DESC), '[]')::text FROM ("
            "SELECT id, jsonb_build_object('id', id, 'key', key, 'state', state,"
            " 'added_at', extract(epoch FROM added_at)::float8,"
            " 'started_at', extract(epoch FROM started_at)::float8,"
            " 'finished_at', extract(epoch FROM finished_at)::float8, 'attempts', attempts,"
            " 'runner', runner, 'result', result, 'error', error) AS o FROM @S.history"
            " WHERE queue = $1 AND ($2::bigint = 0 OR id < $2::bigint)"
            " ORDER BY id DESC LIMIT $3::bigint) x",
    };
    if (op->kind == WQ_BOP_LAST_RUN)
        return WQ_BACKEND_LOCAL; /* never asked: ITEM answers from the history too */
    if (!fn)
        return 0; /* asked only whether the database applies it: it does */
    if (!b->registered || !wq_pgconn_up(b->c)) {
        wq_pgb_set_err(b, "database unavailable");
        return WQ_EIO;
    }
    if (op->key && !wq_pgb_text_ok(op->key, op->keylen))
        return WQ_ENOENT; /* PostgreSQL holds no such key */
    /* No key holds a NUL: the keys after "a\0b" are those after "a". */
    size_t after_len = op->after_key ? strnlen(op->after_key, op->after_len) : 0;
    if (op->after_key && !wq_pgb_text_ok(op->after_key, after_len)) {
        wq_pgb_set_err(b, "bad argument 'after_key' (not UTF-8: PostgreSQL holds UTF-8 keys only)");
        return WQ_EINVAL;
    }
    pop *o = calloc(1, sizeof *o);
    if (!o)
        return WQ_ENOMEM;
    o->kind = op->kind;
    o->fn = fn;
    o->ud = ud;
    o->sql = wq_pg_sql(wq_pgconn_pg(b->c), b->schema, sql[op->kind]);
    char lim[24];
    snprintf(lim, sizeof lim, "%zu", op->limit ? op->limit : (size_t)1000);
    /* $1 the queue, then: the key; or state, after_key, limit (ITEMS); or limit (DEAD,
     * HELD_GROUPS); or nothing (SCHEDULES) */
    const char *v[6] = {q->name, NULL, NULL, NULL, NULL, NULL};
    size_t len[6] = {strlen(q->name), op->keylen, 0, 0, 0, 0};
    if (op->key)
        v[1] = op->key;
    int n = op->kind == WQ_BOP_PAUSE || op->kind == WQ_BOP_RESUME ||
                    op->kind == WQ_BOP_PURGE_DEAD || op->kind == WQ_BOP_STATS ||
                    op->kind == WQ_BOP_SCHEDULES
                ? 1
                : 2;
    char conc[24] = "0", rate[40] = "0", burst[40] = "0", before[24];
    if (op->kind == WQ_BOP_SET_GROUP_LIMIT) {
        if (op->glimit) {
            snprintf(conc, sizeof conc, "%u", op->glimit->concurrency);
            snprintf(rate, sizeof rate, "%.17g", op->glimit->rate);
            snprintf(burst, sizeof burst, "%.17g", op->glimit->burst);
        }
        const char *w[4] = {op->glimit ? "true" : "false", conc, rate, burst};
        for (int i = 0; i < 4; i++)
            v[2 + i] = w[i], len[2 + i] = strlen(w[i]);
        n = 6;
        q->limited = 1; /* this runner's claims count them at once, the others' when told */
    } else if (op->kind == WQ_BOP_ITEMS) {
        v[1] = op->state, len[1] = op->state ? strlen(op->state) : 0;
        v[2] = op->after_key, len[2] = after_len;
        v[3] = lim, len[3] = strlen(lim);
        n = 4;
    } else if (op->kind == WQ_BOP_HISTORY) {
        snprintf(before, sizeof before, "%lld", (long long)op->before);
        v[1] = before, len[1] = strlen(before);
        v[2] = lim, len[2] = strlen(lim);
        n = 3;
    } else if (op->kind == WQ_BOP_DEAD || op->kind == WQ_BOP_HELD_GROUPS) {
        v[1] = lim, len[1] = strlen(lim);
        n = 2;
    }
    o->nparams = n;
    int oom = !o->sql;
    for (int i = 0; i < n && !oom; i++)
        if (v[i] && !(o->params[i] = wq_pgb_dupn(v[i], len[i])))
            oom = 1;
    if (oom) {
        wq_pgb_pop_free(o);
        return WQ_ENOMEM;
    }
    return queue_op(b, o);
}

/* Sends o once the outcomes this runner had have committed (o is the queue's from here):
 * 0, or WQ_EIO (unreachable: o freed). */
static int queue_op(pgb *b, pop *o)
{
    /* Read your own writes: the outcomes this runner has not written yet (a handler that
     * just finished) are written first. They go with the next outcome transaction, or are
     * in the one under way. */
    int unsent = 0;
    for (pgq *x = b->queues; x; x = x->next)
        if (x->ntouched || (x->nsent && !b->out_flight))
            unsent = 1;
    o->need = unsent ? b->out_txn + 1 : b->out_flight ? b->out_txn : b->out_done_txn;
    if (o->need <= b->out_done_txn && !b->ops_waiting) {
        if (send_op(b, o) == 0)
            return 0;
        wq_pgb_pop_free(o);
        wq_pgb_set_err(b, "database unavailable");
        return WQ_EIO;
    }
    pop **tail = &b->ops_waiting;
    while (*tail)
        tail = &(*tail)->next;
    *tail = o;
    wq_pgb_kick(b);
    return 0;
}

int wq_pgb_flow_op(wq_backend *base, const wq_fop *op, wq_bop_fn fn, void *ud)
{
    pgb *b = (pgb *)base;
    static const char *const sql[] = {
        [WQ_FOP_ADD] = "SELECT 0, @S.add_flow($1::jsonb)",
        [WQ_FOP_LIST] = "SELECT jsonb_array_length(x.l), x.l::text"
                        " FROM (SELECT @S.flow_list($1, $2::integer) AS l) x",
        [WQ_FOP_SHOW] = "SELECT (x.f IS NOT NULL)::int, coalesce(x.f::text, 'null')"
                        " FROM (SELECT @S.flow_show($1) AS f) x",
        [WQ_FOP_CANCEL] = "SELECT coalesce(@S.cancel_flow($1), -1)",
    };
    if (!fn)
        return 0;
    if ((unsigned)op->kind > WQ_FOP_CANCEL)
        return WQ_EINVAL;
    if (!b->registered || !wq_pgconn_up(b->c)) {
        wq_pgb_set_err(b, "database unavailable");
        return WQ_EIO;
    }
    const char *v[2] = {NULL, NULL};
    size_t len[2] = {0, 0};
    int n = 1;
    char lim[24];
    if (op->kind == WQ_FOP_ADD) {
        if (!op->doc || !wq_pgb_text_ok(op->doc, op->doclen)) {
            wq_pgb_set_err(b, "bad flow document (not UTF-8 text)");
            return WQ_EINVAL;
        }
        v[0] = op->doc, len[0] = op->doclen;
    } else if (op->kind == WQ_FOP_LIST) {
        snprintf(lim, sizeof lim, "%zu", op->limit ? op->limit : (size_t)1000);
        v[0] = op->state, len[0] = op->state ? strlen(op->state) : 0;
        v[1] = lim, len[1] = strlen(lim);
        n = 2;
    } else {
        if (!op->id)
            return WQ_EINVAL;
        v[0] = op->id, len[0] = strlen(op->id);
        if (!wq_pgb_text_ok(op->id, len[0]))
            return op->kind == WQ_FOP_CANCEL ? WQ_ENOENT : WQ_EINVAL;
    }
    pop *o = calloc(1, sizeof *o);
    if (!o)
        return WQ_ENOMEM;
    o->fop = (int)op->kind + 1;
    o->fn = fn;
    o->ud = ud;
    o->sql = wq_pg_sql(wq_pgconn_pg(b->c), b->schema, sql[op->kind]);
    o->nparams = n;
    int oom = !o->sql;
    for (int i = 0; i < n && !oom; i++)
        if (v[i] && !(o->params[i] = wq_pgb_dupn(v[i], len[i])))
            oom = 1;
    if (oom) {
        wq_pgb_pop_free(o);
        return WQ_ENOMEM;
    }
    return queue_op(b, o);
}
