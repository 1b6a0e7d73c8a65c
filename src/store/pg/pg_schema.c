/*
 * The PostgreSQL schema of wqrun (SPEC 8.1): its migrations and functions,
 * written in sql/ (migrations/vN.sql, functions/NN-*.sql; embedded at build
 * time), applied here, and the statements the runner prepares.
 *
 * One row per (queue, key) holds the whole pending state (POSTGRES.md 5),
 * so dedup, exclusivity, the follow-up rule and earliest-wins delays all
 * serialize on that row's lock:
 *   running   handed to a handler on runner `runner` with fencing `token`;
 *   run_at    when a pending (not running) row may be claimed: the add's
 *             time for a queued item, the ready time for a delayed one;
 *   delay_at  a delayed add pending beside a queued or running item;
 *   dirty     re-added while running: runs once more after it finishes;
 *   crashes   runs in a row that ended with their runner's death.
 * The views `items` and `failures` show it with SPEC section 4's columns.
 * Claims use a partial index that holds exactly the pending rows; every
 * other statement finds its row by primary key. There is deliberately no
 * index on `runner`: it would cost every claim an index insert, and a
 * planner misled by statistics taken while nothing ran picked it for the
 * outcomes' key lookups (measured: 300 us instead of 10 per row); only the
 * reaper, when a runner died, scans for a runner's rows.
 */
#include "store/pg/pg_schema.h"

#include "store/pg/pg_sql.h"
#include "store/pg/pgconn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The claims of a queue without limits: CLAIM_PICK is a CTE NAME of up to $2 due, unlocked
 * items of queue $1 matching WHERE, in ORDER (locked); CLAIM_LEVELS one of up to $2 due,
 * unlocked items of the priorities (levels) matching LCOND, each read from FLOOR on, highest
 * first (pg.c's floor: below it a long transaction may have left the entries of items
 * claimed since, and no pending item is there); CLAIM_MARK hands the first $2 of the CTEs'
 * UNION (duplicates go) to runner $3 and returns them. Due by the statement's time: a ready
 * time is the clock of its add, which may be later than this transaction's start. */
#define CLAIM_DUE                                                                                  \
    "run_at <= statement_timestamp() AND NOT running\n"                                            \
    "    AND NOT EXISTS (SELECT 1 FROM @S.queues p WHERE p.name = $1 AND p.paused)"
#define CLAIM_PICK(name, where, order)                                                             \
    name " AS MATERIALIZED (SELECT ctid, priority, run_at, seq FROM @S.jobs\n"                     \
         "  WHERE queue = $1 AND " where " AND " CLAIM_DUE "\n"                                    \
         "  ORDER BY " order " LIMIT $2 FOR UPDATE SKIP LOCKED)"
/* the floor, unless items went back to their old places since it was found (queues.resets) */
#define CLAIM_FLOOR(at, resets)                                                                    \
    "CASE WHEN (SELECT r.resets FROM @S.queues r WHERE r.name = $1) = " resets "::bigint\n"        \
    "  THEN to_timestamp(" at "::float8) ELSE '-infinity' END"
#define CLAIM_LEVELS(name, lcond, floor)                                                           \
    name " AS MATERIALIZED (SELECT x.* FROM (SELECT l.priority FROM @S.levels l\n"                 \
         "    WHERE l.queue = $1 AND " lcond " ORDER BY l.priority DESC) l\n"                      \
         "  CROSS JOIN LATERAL (SELECT ctid, priority, run_at, seq FROM @S.jobs\n"                 \
         "    WHERE queue = $1 AND priority = l.priority AND run_at >= " floor "\n"                \
         "      AND NOT held AND " CLAIM_DUE "\n"                                                  \
         "    ORDER BY run_at, seq LIMIT $2 FOR UPDATE SKIP LOCKED) x LIMIT $2)"
#define CLAIM_MARK(ctes)                                                                           \
    "UPDATE @S.jobs j SET running = true, runner = $3, token = nextval('@S.token'),\n"             \
    "  claimed_at = now(), delay_at = CASE WHEN j.delay_at <= now() THEN NULL ELSE j.delay_at "    \
    "END\n"                                                                                        \
    "WHERE j.ctid = ANY (ARRAY(SELECT u.ctid FROM (" ctes ") u\n"                                  \
    "    ORDER BY u.priority DESC, u.run_at, u.seq LIMIT $2))\n"                                   \
    "  AND EXISTS (SELECT 1 FROM @S.runners WHERE id = $3)\n"                                      \
    "RETURNING j.key, j.payload, j.priority, j.token, j.requeues,\n"                               \
    "  extract(epoch FROM j.enqueued_at), j.grp, extract(epoch FROM j.run_at), j.seq,\n"           \
    "  CASE WHEN j.node IS NOT NULL THEN @S.node_flow(j.node) END,\n"                              \
    "  CASE WHEN j.node IS NOT NULL THEN @S.node_deps(j.node) END"
#define CLAIM_ORDER "priority DESC, run_at, seq"
/* From the floor ($4 ready time, valid while queues.resets is $5): c, every priority; h, items
 * left held by limits that are gone (the small index of held items). */
static const char claim_sql[] =
    "WITH " CLAIM_LEVELS("c", "true", CLAIM_FLOOR("$4", "$5")) ",\n" CLAIM_PICK(
        "h", "held", CLAIM_ORDER) "\n" CLAIM_MARK("SELECT * FROM c UNION SELECT * FROM h");
/* From the hint: a, the higher priorities from the floor ($7, valid while queues.resets is
 * $8); c, this one from the hint on; f, only when those two fall short, every priority from
 * the floor (lower priorities, items behind the hint). */
#define CLAIM_FROM_A CLAIM_LEVELS("a", "l.priority > $4", CLAIM_FLOOR("$7", "$8"))
#define CLAIM_FROM_C                                                                               \
    CLAIM_PICK("c", "priority = $4 AND (run_at, seq) >= (to_timestamp($5), $6) AND NOT held",      \
               "run_at, seq")
#define CLAIM_FROM_F                                                                               \
    CLAIM_LEVELS("f", "(SELECT count(*) FROM a) + (SELECT count(*) FROM c) < $2",                  \
                 CLAIM_FLOOR("$7", "$8"))
#define CLAIM_FROM_UNION "SELECT * FROM a UNION SELECT * FROM c UNION SELECT * FROM f"
static const char claim_from_sql[] =
    "WITH " CLAIM_FROM_A ",\n" CLAIM_FROM_C ",\n" CLAIM_FROM_F "\n" CLAIM_MARK(CLAIM_FROM_UNION);

const wq_pg_stmt wq_pg_stmts[PGS_COUNT] = {
    /* The rows are found once, by the index holding exactly the pending ones, and updated
     * by their tuple ids (no second lookup). `NOT held` lets the planner use that partial
     * index (without it every claim read and sorted the whole table, dead tuples included:
     * 70 ms for 30,000 rows, and slower as the table bloats); items left held by limits
     * that are gone now are claimed too, through the small index of held items. */
    [PGS_CLAIM] = {"wq_claim", claim_sql},
    /* A claim from where the last one stopped (pg.c's hint): the higher priorities from
     * their head, this priority from the given position on, so that the entries of items
     * claimed before it are not walked again. */
    [PGS_CLAIM_FROM] = {"wq_claim_from", claim_from_sql},
    [PGS_FINISH] =
        {"wq_finish",
         "SELECT * FROM @S.finish($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::integer, $12,\n"
         "  $13::boolean, $14::boolean)"},
    [PGS_ADD_MANY] = {"wq_add_many", "SELECT @S.add_many($1::jsonb)"},
    [PGS_HEARTBEAT] = {"wq_heartbeat", "UPDATE @S.runners SET heartbeat_at = now(), done = $2\n"
                                       "  WHERE id = $1 RETURNING id"},
    /* The database-wide view (dashboards, /metrics): one pass over jobs... */
    [PGS_VIEW_JOBS] = {"wq_view_jobs",
                       "SELECT queue, runner,\n"
                       "  count(*) FILTER (WHERE NOT running AND NOT held AND run_at <= now()),\n"
                       "  count(*) FILTER (WHERE running),\n"
                       "  count(*) FILTER (WHERE NOT running AND run_at > now()),\n"
                       "  count(*) FILTER (WHERE held), count(*) FILTER (WHERE requeues > 0)\n"
                       "FROM @S.jobs GROUP BY queue, runner"},
    /* ...then the small tables */
    [PGS_VIEW_REST] =
        {"wq_view_rest",
         "SELECT 'q', n.name, coalesce(q.paused, false)::int::text,\n"
         "    (SELECT count(*) FROM @S.dead d WHERE d.queue = n.name)::text,\n"
         "    NULL, NULL, NULL, NULL\n"
         "  FROM (SELECT name FROM @S.queues UNION SELECT queue FROM @S.dead) n\n"
         "  LEFT JOIN @S.queues q ON q.name = n.name\n"
         "UNION ALL SELECT 'r', r.id::text, r.name, r.host, r.pid::text,\n"
         "    extract(epoch FROM r.started_at)::text,\n"
         "    extract(epoch FROM now() - r.heartbeat_at)::text, r.done::text\n"
         "  FROM @S.runners r\n"
         "UNION ALL SELECT 'm', coalesce((SELECT n_dead_tup FROM pg_stat_user_tables\n"
         "    WHERE schemaname = $1 AND relname = 'jobs'), 0)::text,\n"
         "  (SELECT value FROM @S.counters WHERE name = 'takeovers')::text,\n"
         "  (SELECT value FROM @S.counters WHERE name = 'crash_dead')::text,\n"
         "  NULL, NULL, NULL, NULL"},
    [PGS_REAP] = {"wq_reap", "SELECT * FROM @S.reap($1)"},
    [PGS_WAITING] = {"wq_waiting",
                     "WITH i AS (INSERT INTO @S.waiting SELECT $1, $2 WHERE $3::boolean\n"
                     "  ON CONFLICT DO NOTHING RETURNING 1),\n"
                     "d AS (DELETE FROM @S.waiting WHERE NOT $3::boolean AND queue = $1 AND "
                     "runner = $2 RETURNING 1)\n"
                     "SELECT (SELECT count(*) FROM i) + (SELECT count(*) FROM d)"},
    /* Sent after every claim that found nothing: index descents only. The next delayed item
     * is the earliest of each priority's first future item in the claim index (the queue's
     * levels; held items are due, so never among them); the queue's rate is looked at only
     * when it has one. Whether the queue has rows at all only when $2 (a run that may end
     * asked, and none of the queue's items runs here: under a long transaction the walk
     * over the key index's dead entries is long). */
    [PGS_NEXT_AT] =
        {"wq_next_at",
         "SELECT CASE WHEN $2::boolean THEN EXISTS (SELECT 1 FROM @S.jobs\n"
         "    WHERE queue = $1) END,\n"
         "  extract(epoch FROM least(\n"
         "    (SELECT min((SELECT j.run_at FROM @S.jobs j WHERE j.queue = $1\n"
         "                   AND NOT j.running AND NOT j.held AND j.priority = l.priority\n"
         "                   AND j.run_at > now() ORDER BY j.run_at LIMIT 1))\n"
         "       FROM @S.levels l WHERE l.queue = $1),\n"
         /* a group its rate holds back, the queue's own rate */
         "    (SELECT min(wake_at) FROM @S.groups WHERE queue = $1 AND wake_at IS NOT "
         "NULL),\n"
         /* (coalesce: NULL AND EXISTS evaluates the EXISTS, a walk from the
          * head of the claim index) */
         "    (SELECT CASE WHEN coalesce(q_rate, 0) > 0 AND EXISTS (SELECT 1 FROM @S.jobs\n"
         "             WHERE queue = $1 AND NOT running AND NOT held AND run_at <= "
         "now())\n"
         "        THEN q_tat - make_interval(secs => (q_burst - 1) / q_rate) END\n"
         "       FROM @S.queues WHERE name = $1)) - now())"},
    /* The floor of a queue without limits (pg.c): first the clock, then this transaction's id
     * (every id after it is given later than that clock), the oldest transaction still
     * running and the queue's resets... */
    [PGS_FLOOR_CLOCK] = {"wq_floor_clock", "SELECT extract(epoch FROM clock_timestamp())"},
    [PGS_FLOOR_XID] = {"wq_floor_xid", "SELECT pg_current_xact_id()::text,\n"
                                       "  pg_snapshot_xmin(pg_current_snapshot())::text,\n"
                                       "  (SELECT resets FROM @S.queues WHERE name = $1)"},
    /* ...then, from the floor $2 on, the earliest ready time of a pending item of each
     * priority, and of the held items (left by limits that are gone). */
    [PGS_FLOOR_MIN] = {"wq_floor_min",
                       "SELECT extract(epoch FROM min((SELECT j.run_at FROM @S.jobs j\n"
                       "    WHERE j.queue = $1 AND j.priority = l.priority\n"
                       "      AND j.run_at >= to_timestamp($2::float8) AND NOT j.running\n"
                       "      AND NOT j.held ORDER BY j.run_at, j.seq LIMIT 1))),\n"
                       "  (SELECT extract(epoch FROM min(h.run_at)) FROM @S.jobs h\n"
                       "    WHERE h.queue = $1 AND h.held)\n"
                       "FROM @S.levels l WHERE l.queue = $1"},
    [PGS_CLAIM_GROUPED] = {"wq_claim_grouped", "SELECT * FROM @S.claim($1, $2::integer, $3)"},
    [PGS_SWEEP] = {"wq_sweep", "SELECT @S.sweep($1)"},
    [PGS_RELOCK] = {"wq_relock", "WITH l AS (SELECT pg_try_advisory_lock($1, $2::integer) AS ok),\n"
                                 "  u AS (UPDATE @S.runners SET locked_at = now()\n"
                                 "    WHERE id = $2::bigint AND (SELECT ok FROM l) RETURNING 1)\n"
                                 "SELECT ok FROM l"},
    [PGS_DEFINE] = {"wq_define",
                    "INSERT INTO @S.queues AS q (name, max_retries, keep_done, defined_by,\n"
                    "    g_conc, g_rate, g_burst, q_rate, q_burst, unique_adds, history)\n"
                    "  VALUES ($1, $2, nullif($3::float8, 0), $4, nullif($5::integer, 0),\n"
                    "    nullif($6::float8, 0), nullif($7::float8, 0), nullif($8::float8, 0),\n"
                    "    nullif($9::float8, 0), nullif($10::boolean, false), $11::float8)\n"
                    "  ON CONFLICT (name) DO UPDATE SET max_retries = EXCLUDED.max_retries,\n"
                    "    keep_done = EXCLUDED.keep_done, defined_by = EXCLUDED.defined_by,\n"
                    "    g_conc = EXCLUDED.g_conc, g_rate = EXCLUDED.g_rate,\n"
                    "    g_burst = EXCLUDED.g_burst, q_rate = EXCLUDED.q_rate,\n"
                    "    q_burst = EXCLUDED.q_burst, unique_adds = EXCLUDED.unique_adds,\n"
                    "    history = EXCLUDED.history,\n"
                    "    updated_at = now()\n"
                    /* the definition before this one: none when no runner made it (a
                     * row that a pause, an add or the CLI made first) */
                    "  RETURNING (SELECT max_retries FROM @S.queues WHERE name = $1\n"
                    "      AND defined_by IS NOT NULL),\n"
                    "    (SELECT coalesce(keep_done, 0) FROM @S.queues WHERE name = $1\n"
                    "      AND defined_by IS NOT NULL),\n"
                    "    (SELECT defined_by FROM @S.queues WHERE name = $1)"},
    [PGS_QUEUES] = {"wq_queues",
                    "SELECT name, paused, max_retries, coalesce(keep_done, 0),\n"
                    "  coalesce(defined_by, ''), (g_conc IS NOT NULL OR g_rate IS NOT NULL\n"
                    "    OR q_rate IS NOT NULL OR EXISTS (SELECT 1 FROM @S.groups g\n"
                    "      WHERE g.queue = name AND g.own)), coalesce(q_rate, 0)\n"
                    "  FROM @S.queues"},
    /* Completed-job memories past their queue's keep_done, a thousand at a time. */
    [PGS_PRUNE_FLOWS] = {"wq_prune_flows", "SELECT @S.prune_flows(1000)"},
    [PGS_PRUNE_DONE] =
        {"wq_prune_done",
         "DELETE FROM @S.done WHERE ctid = ANY (ARRAY(\n"
         "  SELECT d.ctid FROM @S.queues q CROSS JOIN LATERAL (\n"
         "    SELECT d.ctid FROM @S.done d WHERE d.queue = q.name AND d.finished_at\n"
         "      < now() - make_interval(secs => coalesce(q.keep_done, 0)) LIMIT "
         "1000) d\n"
         "  LIMIT 1000))"},
    /* History rows past their queue's history seconds, a thousand at a time: of each queue
     * only its oldest thousand (by id, the order they finished in) are looked at, so a queue
     * whose rows are all young costs one short index walk, never a scan. */
    [PGS_PRUNE_HISTORY] =
        {"wq_prune_history",
         "DELETE FROM @S.history WHERE ctid = ANY (ARRAY(\n"
         "  SELECT h.ctid FROM @S.queues q CROSS JOIN LATERAL (\n"
         "    SELECT x.ctid, x.finished_at FROM @S.history x WHERE x.queue = q.name\n"
         "      ORDER BY x.id LIMIT 1000) h\n"
         "  WHERE h.finished_at < now() - make_interval(secs => q.history) LIMIT 1000))"},
    /* This runner's signals; those of runners long gone go too (the table stays tiny). */
    [PGS_SIGNALS] = {"wq_signals", "WITH s AS (DELETE FROM @S.signals WHERE runner = $1\n"
                                   "    OR created_at < now() - interval '1 minute' RETURNING *)\n"
                                   "SELECT queue, key, token FROM s WHERE runner = $1"},
};

char *wq_pg_sql(PGconn *pg, const char *schema, const char *sql)
{
    char *ident = PQescapeIdentifier(pg, schema, strlen(schema));
    char *lit = PQescapeLiteral(pg, schema, strlen(schema));
    if (!ident || !lit) {
        PQfreemem(ident);
        PQfreemem(lit);
        return NULL;
    }
    size_t il = strlen(ident), ll = strlen(lit), n = 0, cap = strlen(sql) + 1;
    for (const char *p = sql; (p = strchr(p, '@')); p++)
        cap += il > ll ? il : ll;
    char *out = malloc(cap);
    if (out) {
        for (const char *p = sql; *p; p++) {
            if (p[0] == '@' && p[1] == 'S') {
                memcpy(out + n, ident, il);
                n += il;
                p++;
            } else if (p[0] == '@' && p[1] == 'L') {
                memcpy(out + n, lit, ll);
                n += ll;
                p++;
            } else {
                out[n++] = *p;
            }
        }
        out[n] = '\0';
    }
    PQfreemem(ident);
    PQfreemem(lit);
    return out;
}

static void put_err(char *err, size_t errlen, const char *what, PGconn *pg, PGresult *r)
{
    char m[400];
    wq_pg_msg(m, sizeof m, r ? PQresultErrorMessage(r) : PQerrorMessage(pg));
    snprintf(err, errlen, "%s: %s", what, m);
}

/* Runs sql (no results wanted); 0 or -1 with err. */
static int exec(PGconn *pg, const char *sql, const char *what, char *err, size_t errlen)
{
    PGresult *r = PQexec(pg, sql);
    int ok = r && (PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK);
    if (!ok)
        put_err(err, errlen, what, pg, r);
    PQclear(r);
    return ok ? 0 : -1;
}

/* The schema's version: >= 1, 0 absent, -1 foreign (err), -2 a query failed (err). */
static int version_of(PGconn *pg, const char *schema, char *err, size_t errlen)
{
    const char *p[1] = {schema};
    PGresult *r = PQexecParams(pg, "SELECT 1 FROM pg_namespace WHERE nspname = $1", 1, NULL, p,
                               NULL, NULL, 0);
    if (!r || PQresultStatus(r) != PGRES_TUPLES_OK) {
        put_err(err, errlen, "cannot read the catalog", pg, r);
        PQclear(r);
        return -2;
    }
    int exists = PQntuples(r) > 0;
    PQclear(r);
    if (!exists)
        return 0;
    r = PQexecParams(pg,
                     "SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                     "WHERE n.nspname = $1 AND c.relname = 'meta' AND c.relkind = 'r'",
                     1, NULL, p, NULL, NULL, 0);
    int has_meta = r && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0;
    PQclear(r);
    int v = -1;
    if (has_meta) {
        char *sql = wq_pg_sql(pg, schema, "SELECT value FROM @S.meta WHERE key = 'schema_version'");
        r = sql ? PQexec(pg, sql) : NULL;
        free(sql);
        if (r && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && !PQgetisnull(r, 0, 0))
            v = atoi(PQgetvalue(r, 0, 0));
        if (!r || PQresultStatus(r) != PGRES_TUPLES_OK) {
            put_err(err, errlen, "cannot read the schema's version", pg, r);
            PQclear(r);
            return -2;
        }
        PQclear(r);
    }
    if (v < 1) {
        snprintf(err, errlen,
                 "schema \"%s\" exists but is not a wqrun schema (no meta row "
                 "'schema_version'); refusing to touch it (choose another with --pg-schema)",
                 schema);
        return -1;
    }
    return v;
}

int wq_pg_schema_ready(PGconn *pg, const char *schema, char *err, size_t errlen)
{
    int v = version_of(pg, schema, err, errlen);
    if (v < 0)
        return -1;
    if (v > WQ_PG_SCHEMA_VERSION) {
        snprintf(err, errlen,
                 "schema \"%s\" is version %d, newer than this wqrun knows (%d): refusing to use "
                 "it; upgrade wqrun",
                 schema, v, WQ_PG_SCHEMA_VERSION);
        return -1;
    }
    return v == WQ_PG_SCHEMA_VERSION;
}

/* migrations/vN.sql for N = to, or NULL. */
static const wq_pg_sqlfile *migration(int to)
{
    char name[16];
    snprintf(name, sizeof name, "v%d", to);
    for (const wq_pg_sqlfile *m = wq_pg_migrations; m->name; m++)
        if (strcmp(m->name, name) == 0)
            return m;
    return NULL;
}

int wq_pg_migrate(PGconn *pg, const char *schema, char *out, size_t outlen, char *err,
                  size_t errlen)
{
    if (exec(pg, "BEGIN", "cannot begin", err, errlen) < 0)
        return -1;
    /* IF EXISTS drops of what a fresh schema never had say so: not worth a line of output */
    if (exec(pg, "SET LOCAL client_min_messages = warning", "cannot set", err, errlen) < 0)
        goto fail;
    /* Concurrent starts wait here for the first to finish. */
    char lock[96];
    snprintf(lock, sizeof lock, "SELECT pg_advisory_xact_lock(%d, 0)", WQ_PG_LOCK_CLASS + 1);
    if (exec(pg, lock, "cannot take the migration lock", err, errlen) < 0)
        goto fail;
    int v = version_of(pg, schema, err, errlen);
    if (v < 0)
        goto fail;
    if (v > WQ_PG_SCHEMA_VERSION) {
        snprintf(err, errlen,
                 "schema \"%s\" is version %d, newer than this wqrun knows (%d): refusing to use "
                 "it; upgrade wqrun",
                 schema, v, WQ_PG_SCHEMA_VERSION);
        goto fail;
    }
    if (v == WQ_PG_SCHEMA_VERSION) {
        snprintf(out, outlen, "schema \"%s\" is up to date (version %d)", schema, v);
        return exec(pg, "COMMIT", "cannot commit", err, errlen);
    }
    for (int to = v + 1; to <= WQ_PG_SCHEMA_VERSION; to++) {
        const wq_pg_sqlfile *m = migration(to);
        char *sql = m ? wq_pg_sql(pg, schema, m->sql) : NULL;
        if (!sql) {
            snprintf(err, errlen, m ? "out of memory" : "no migration to version %d", to);
            goto fail;
        }
        char what[200];
        snprintf(what, sizeof what, "cannot %s schema \"%s\" (version %d)",
                 to == 1 ? "create" : "upgrade", schema, to);
        int r = exec(pg, sql, what, err, errlen);
        free(sql);
        if (r < 0)
            goto fail;
    }
    /* The functions, as this version defines them: created (or replaced) after every
     * migration, so they always match the binary. A migration drops those whose parameters
     * change. */
    for (const wq_pg_sqlfile *f = wq_pg_functions; f->name; f++) {
        char *sql = wq_pg_sql(pg, schema, f->sql);
        if (!sql) {
            snprintf(err, errlen, "out of memory");
            goto fail;
        }
        char what[200];
        snprintf(what, sizeof what, "cannot create the functions of schema \"%s\" (%s.sql)", schema,
                 f->name);
        int r = exec(pg, sql, what, err, errlen);
        free(sql);
        if (r < 0)
            goto fail;
    }
    if (exec(pg, "COMMIT", "cannot commit the new schema", err, errlen) < 0)
        return -1;
    if (v == 0)
        snprintf(out, outlen, "schema \"%s\" created (version %d)", schema, WQ_PG_SCHEMA_VERSION);
    else
        snprintf(out, outlen, "schema \"%s\" upgraded from version %d to %d", schema, v,
                 WQ_PG_SCHEMA_VERSION);
    return 0;
fail:
    PQclear(PQexec(pg, "ROLLBACK"));
    return -1;
}
