/*
 * The command line on a PostgreSQL database (SPEC 8.1, 8.4): `wqrun
 * migrate`, and `add`, `status`, `runners` and the operator commands
 * (pause, remove, cancel, retry, ...) with a postgres:// URL. They need no
 * runner: each opens its own connection (blocking: a command
 * line has no loop), creates the schema when it finds none, and refuses a
 * foreign or newer one exactly as a runner does.
 */
#include "store/pg/pg_cli.h"

#include "store/cli_ops.h"

#include "engine/common.h"
#include "store/pg/pg_item.h"
#include "store/pg/pg_schema.h"
#include "store/pg/pgconn.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int usage(FILE *err, const char *line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int usage(FILE *err, const char *line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("wqrun: ", err);
    vfprintf(err, fmt, ap);
    fputc('\n', err);
    fputs(line, err);
    va_end(ap);
    return 2;
}

/* Connects (10 s at most); NULL after printing why (host and libpq's reason, no password). */
static PGconn *open_db(const char *cmd, const char *url, FILE *err)
{
    const char *keys[] = {"dbname", "connect_timeout", "application_name", NULL};
    const char *vals[] = {url, "10", "wqrun", NULL};
    PGconn *pg = PQconnectdbParams(keys, vals, 1);
    if (pg && PQstatus(pg) == CONNECTION_OK)
        return pg;
    char msg[400];
    wq_pg_msg(msg, sizeof msg, pg ? PQerrorMessage(pg) : "out of memory");
    fprintf(err, "wqrun: %s: cannot connect to PostgreSQL at %s: %s\n", cmd,
            wq_pg_describe(pg, "(unparsable URL)"), msg);
    PQfinish(pg);
    return NULL;
}

/* Connects and makes sure the schema is there; NULL after printing why. */
PGconn *wq_pg_cli_connect(const char *cmd, const char *url, const char *schema, FILE *err)
{
    PGconn *pg = open_db(cmd, url, err);
    if (!pg)
        return NULL;
    char e[512], done[200];
    int ready = wq_pg_schema_ready(pg, schema, e, sizeof e);
    if (ready == 0 && wq_pg_migrate(pg, schema, done, sizeof done, e, sizeof e) == 0)
        ready = 1;
    if (ready != 1) {
        fprintf(err, "wqrun: %s: PostgreSQL at %s: %s\n", cmd, wq_pg_describe(pg, NULL), e);
        PQfinish(pg);
        return NULL;
    }
    return pg;
}

static const char migrate_usage[] = "usage: wqrun migrate --db URL [--pg-schema NAME]\n";

int wq_pg_cli_migrate(int argc, char **argv, FILE *out, FILE *err)
{
    const char *db = getenv("WQRUN_DB"), *schema = "wqrun";
    for (int i = 0; i < argc; i++) {
        int r;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(migrate_usage, out);
            return 0;
        }
        if ((r = wq_cli_option(argc, argv, &i, "--db", &db)) ||
            (r = wq_cli_option(argc, argv, &i, "--pg-schema", &schema))) {
            if (r < 0)
                return usage(err, migrate_usage, "migrate: option %s needs a value", argv[i]);
            continue;
        }
        return usage(err, migrate_usage, "migrate: unexpected argument '%s'", argv[i]);
    }
    if (!db || !*db)
        return usage(err, migrate_usage, "migrate: %s", "--db URL is required");
    if (strncmp(db, "postgres://", 11) != 0 && strncmp(db, "postgresql://", 13) != 0)
        return usage(err, migrate_usage,
                     "migrate: --db needs a postgres:// URL (a SQLite file is migrated by the "
                     "runner when it opens it)");
    PGconn *pg = open_db("migrate", db, err);
    if (!pg)
        return 1;
    char e[512], done[200];
    int r = wq_pg_migrate(pg, schema, done, sizeof done, e, sizeof e);
    if (r < 0)
        fprintf(err, "wqrun: migrate: PostgreSQL at %s: %s\n", wq_pg_describe(pg, NULL), e);
    else
        fprintf(out, "%s\n", done);
    PQfinish(pg);
    return r < 0 ? 1 : 0;
}

static void no_notice(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

static const char add_usage[] =
    "usage: wqrun add --db URL QUEUE KEY [PAYLOAD] [--after SECONDS] "
    "[--priority N] [--group GROUP] [--unique|--no-unique] [--wait [--timeout SECONDS]] "
    "[--pg-schema NAME]\n";

int wq_pg_cli_add(int argc, char **argv, FILE *out, FILE *err)
{
    const char *db = getenv("WQRUN_DB"), *schema = "wqrun", *after = NULL, *prio = NULL,
               *group = NULL, *timeout_s = NULL, *pos[3];
    int npos = 0, opts_done = 0, unique = 0, wait = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!opts_done && a[0] == '-' && a[1] && !(a[1] >= '0' && a[1] <= '9')) {
            int r;
            if (strcmp(a, "--") == 0) {
                opts_done = 1;
                continue;
            }
            if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
                fputs(add_usage, out);
                return 0;
            }
            if (strcmp(a, "--unique") == 0 || strcmp(a, "--no-unique") == 0) {
                unique = a[2] == 'u' ? 1 : -1; /* neither: the queue's definition decides */
                continue;
            }
            if (strcmp(a, "--wait") == 0) {
                wait = 1;
                continue;
            }
            if ((r = wq_cli_option(argc, argv, &i, "--db", &db)) ||
                (r = wq_cli_option(argc, argv, &i, "--timeout", &timeout_s)) ||
                (r = wq_cli_option(argc, argv, &i, "--pg-schema", &schema)) ||
                (r = wq_cli_option(argc, argv, &i, "--after", &after)) ||
                (r = wq_cli_option(argc, argv, &i, "--priority", &prio)) ||
                (r = wq_cli_option(argc, argv, &i, "--group", &group))) {
                if (r < 0)
                    return usage(err, add_usage, "add: option %s needs a value", a);
                continue;
            }
            return usage(err, add_usage, "add: unknown option %s", a);
        }
        if (npos == 3)
            return usage(err, add_usage, "add: unexpected argument '%s'", a);
        pos[npos++] = a;
    }
    if (npos < 2)
        return usage(err, add_usage, "add: %s", "QUEUE and KEY are required");
    if (after) {
        char *end;
        double s = strtod(after, &end);
        if (!*after || *end || !isfinite(s))
            return usage(err, add_usage, "add: --after needs a number of seconds, not '%s'", after);
    }
    int32_t p;
    if (prio && wq_cli_priority(prio, &p, err, add_usage) < 0)
        return 2;
    double timeout = -1;
    if (timeout_s && wq_cli_wait_timeout(timeout_s, wait, &timeout, err, add_usage) < 0)
        return 2;
    PGconn *pg = wq_pg_cli_connect("add", db, schema, err);
    if (!pg)
        return 1;
    char mark[32] = "0";
    if (wait && wq_pg_cli_wait_begin(pg, schema, pos[0], mark, sizeof mark) < 0) {
        char msg[600];
        wq_pg_msg(msg, sizeof msg, PQerrorMessage(pg));
        fprintf(err, "wqrun: add: cannot listen for the end: %s\n", msg);
        PQfinish(pg);
        return 1;
    }
    PQsetNoticeProcessor(pg, no_notice, NULL); /* its own warning below says it better */
    /* Asked before the add, which makes the queue known by its row. */
    char *kq = wq_pg_sql(pg, schema, "SELECT @S.known_queue($1)");
    PGresult *kr = kq ? PQexecParams(pg, kq, 1, NULL, pos, NULL, NULL, 0) : NULL;
    free(kq);
    int unknown = kr && PQresultStatus(kr) == PGRES_TUPLES_OK && PQntuples(kr) == 1 &&
                  PQgetvalue(kr, 0, 0)[0] == 'f';
    PQclear(kr);
    /* PAYLOAD is JSON text, or a plain string when it is not valid JSON (SPEC 4). */
    const char *sql[2] = {"SELECT @S.add($1, $2, $3::jsonb, $4::float8, $5::integer, $6,"
                          " unique_add => $7::boolean)",
                          "SELECT @S.add($1, $2, to_jsonb($3::text), $4::float8, $5::integer, "
                          "$6, unique_add => $7::boolean)"};
    const char *v[7] = {pos[0],
                        pos[1],
                        npos > 2 ? pos[2] : NULL,
                        after,
                        prio,
                        group,
                        unique ? (unique > 0 ? "true" : "false") : NULL};
    int rc = 1;
    for (int k = 0; k < 2; k++) {
        char *q = wq_pg_sql(pg, schema, sql[k]);
        PGresult *r = q ? PQexecParams(pg, q, 7, NULL, v, NULL, NULL, 0) : NULL;
        free(q);
        if (r && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
            if (!wait) /* with --wait, the result is the answer */
                fprintf(out, "%s\n", PQgetvalue(r, 0, 0));
            if (unknown)
                wq_cli_warn_unknown_queue(err, pos[0], wq_pg_describe(pg, NULL));
            rc = 0;
            PQclear(r);
            if (wait)
                rc = wq_pg_cli_wait_end(pg, schema, pos[0], pos[1], mark, timeout, out, err);
            break;
        }
        const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
        if (k == 0 && state && strcmp(state, "22P02") == 0 && npos > 2) {
            PQclear(r); /* not JSON: a plain string */
            continue;
        }
        char msg[600];
        wq_pg_msg(msg, sizeof msg, r ? PQresultErrorMessage(r) : PQerrorMessage(pg));
        fprintf(err, "wqrun: add: %s\n", msg);
        PQclear(r);
        break;
    }
    PQfinish(pg);
    return rc;
}

static const char trigger_usage[] =
    "usage: wqrun trigger --db URL QUEUE SCHEDULE [--pg-schema NAME]\n";

int wq_pg_cli_trigger(int argc, char **argv, FILE *out, FILE *err)
{
    const char *db = getenv("WQRUN_DB"), *schema = "wqrun", *pos[2];
    int npos = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(trigger_usage, out);
            return 0;
        }
        int r;
        if ((r = wq_cli_option(argc, argv, &i, "--db", &db)) ||
            (r = wq_cli_option(argc, argv, &i, "--pg-schema", &schema))) {
            if (r < 0)
                return usage(err, trigger_usage, "trigger: option %s needs a value", a);
            continue;
        }
        if (a[0] == '-' && a[1])
            return usage(err, trigger_usage, "trigger: unknown option %s", a);
        if (npos == 2)
            return usage(err, trigger_usage, "trigger: unexpected argument '%s'", a);
        pos[npos++] = a;
    }
    if (npos < 2)
        return usage(err, trigger_usage, "trigger: %s", "QUEUE and SCHEDULE are required");
    PGconn *pg = wq_pg_cli_connect("trigger", db, schema, err);
    if (!pg)
        return 1;
    /* The schedule's add, as any add (dedup, unique, keep_done); next_at is not touched. */
    char *sql = wq_pg_sql(pg, schema,
                          "SELECT coalesce(s.key, s.name), @S.add(s.queue, coalesce(s.key, s.name),"
                          " s.payload) FROM @S.schedules s WHERE s.queue = $1 AND s.name = $2");
    PGresult *r = sql ? PQexecParams(pg, sql, 2, NULL, pos, NULL, NULL, 0) : NULL;
    free(sql);
    int rc = 1;
    if (r && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
        char shown[WQ_SHOWN_KEY];
        wq_show_key(shown, PQgetvalue(r, 0, 0), (size_t)PQgetlength(r, 0, 0));
        fprintf(out, "%s '%s' of schedule '%s'\n", PQgetvalue(r, 0, 1), shown, pos[1]);
        rc = 0;
    } else if (r && PQresultStatus(r) == PGRES_TUPLES_OK) {
        fprintf(err, "wqrun: trigger: no schedule '%s' of queue '%s' in %s\n", pos[1], pos[0],
                wq_pg_describe(pg, NULL));
    } else {
        char msg[600];
        wq_pg_msg(msg, sizeof msg, r ? PQresultErrorMessage(r) : PQerrorMessage(pg));
        fprintf(err, "wqrun: trigger: %s\n", msg);
    }
    PQclear(r);
    PQfinish(pg);
    return rc;
}

/* Prints a query's rows as aligned text; 0, or -1 after printing the error. */
static int print_rows(PGconn *pg, const char *schema, const char *sql, const char *cmd, FILE *out,
                      FILE *err)
{
    char *q = wq_pg_sql(pg, schema, sql);
    PGresult *r = q ? PQexec(pg, q) : NULL;
    free(q);
    if (!r || PQresultStatus(r) != PGRES_TUPLES_OK) {
        char msg[600];
        wq_pg_msg(msg, sizeof msg, r ? PQresultErrorMessage(r) : PQerrorMessage(pg));
        fprintf(err, "wqrun: %s: %s\n", cmd, msg);
        PQclear(r);
        return -1;
    }
    int nf = PQnfields(r), nt = PQntuples(r);
    int w[32] = {0};
    for (int f = 0; f < nf && f < 32; f++) {
        w[f] = (int)strlen(PQfname(r, f));
        for (int t = 0; t < nt; t++)
            if (PQgetlength(r, t, f) > w[f])
                w[f] = PQgetlength(r, t, f);
    }
    for (int f = 0; f < nf && f < 32; f++)
        fprintf(out, "%-*s%s", w[f], PQfname(r, f), f + 1 < nf ? "  " : "\n");
    for (int t = 0; t < nt; t++)
        for (int f = 0; f < nf && f < 32; f++)
            fprintf(out, "%-*s%s", w[f], PQgetisnull(r, t, f) ? "-" : PQgetvalue(r, t, f),
                    f + 1 < nf ? "  " : "\n");
    PQclear(r);
    return 0;
}

static int simple_cmd(const char *cmd, const char *line, int argc, char **argv, FILE *out,
                      FILE *err, const char **db, const char **schema)
{
    for (int i = 0; i < argc; i++) {
        int r;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(line, out);
            return 0;
        }
        if ((r = wq_cli_option(argc, argv, &i, "--db", db)) ||
            (r = wq_cli_option(argc, argv, &i, "--pg-schema", schema))) {
            if (r < 0)
                return usage(err, line, "%s: option %s needs a value", cmd, argv[i]);
            continue;
        }
        return usage(err, line, "%s: unexpected argument '%s'", cmd, argv[i]);
    }
    if (!*db || !**db)
        return usage(err, line, "%s: %s", cmd, "--db URL is required");
    return -1;
}

static const char runners_usage[] = "usage: wqrun runners --db URL [--pg-schema NAME]\n";

int wq_pg_cli_runners(int argc, char **argv, FILE *out, FILE *err)
{
    const char *db = getenv("WQRUN_DB"), *schema = "wqrun";
    int rc = simple_cmd("runners", runners_usage, argc, argv, out, err, &db, &schema);
    if (rc >= 0)
        return rc;
    if (strncmp(db, "postgres://", 11) != 0 && strncmp(db, "postgresql://", 13) != 0)
        return usage(err, runners_usage,
                     "runners: --db needs a postgres:// URL (a SQLite file has one runner)");
    PGconn *pg = wq_pg_cli_connect("runners", db, schema, err);
    if (!pg)
        return 1;
    rc = print_rows(pg, schema,
                    "SELECT r.id, r.name, r.host, r.pid, "
                    "to_char(r.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') "
                    "AS started, round(extract(epoch FROM now() - r.heartbeat_at)::numeric, 1) "
                    "AS heartbeat_age_s, (SELECT count(*) FROM @S.jobs j WHERE j.running AND "
                    "j.runner = r.id) AS running FROM @S.runners r ORDER BY r.id",
                    "runners", out, err) < 0;
    PQfinish(pg);
    return rc;
}

static const char status_usage[] = "usage: wqrun status --db URL [--pg-schema NAME]\n";

int wq_pg_cli_status(int argc, char **argv, FILE *out, FILE *err)
{
    const char *db = getenv("WQRUN_DB"), *schema = "wqrun";
    int rc = simple_cmd("status", status_usage, argc, argv, out, err, &db, &schema);
    if (rc >= 0)
        return rc;
    PGconn *pg = wq_pg_cli_connect("status", db, schema, err);
    if (!pg)
        return 1;
    fprintf(out, "database %s, schema %s\n\n", wq_pg_describe(pg, NULL), schema);
    rc = print_rows(pg, schema,
                    "WITH names AS (SELECT name FROM @S.queues UNION SELECT DISTINCT queue FROM "
                    "@S.jobs UNION SELECT DISTINCT queue FROM @S.dead) "
                    "SELECT n.name AS queue, coalesce((SELECT q.paused FROM @S.queues q WHERE "
                    "q.name = n.name), false) AS paused, "
                    "count(j.key) FILTER (WHERE NOT j.running AND j.run_at <= now()) AS queued, "
                    "count(j.key) FILTER (WHERE j.running) AS processing, "
                    "count(j.key) FILTER (WHERE NOT j.running AND j.run_at > now()) AS waiting, "
                    "count(j.key) FILTER (WHERE j.requeues > 0) AS retrying, "
                    "(SELECT count(*) FROM @S.dead d WHERE d.queue = n.name) AS dead, "
                    "round(extract(epoch FROM now() - min(j.enqueued_at) FILTER (WHERE NOT "
                    "j.running AND j.run_at <= now()))::numeric, 1) AS oldest_queued_s "
                    "FROM names n LEFT JOIN @S.jobs j ON j.queue = n.name GROUP BY n.name "
                    "ORDER BY n.name",
                    "status", out, err) < 0;
    if (!rc) {
        fprintf(out, "\nrunners:\n");
        rc = print_rows(pg, schema,
                        "SELECT r.id, r.name, round(extract(epoch FROM now() - "
                        "r.heartbeat_at)::numeric, 1) AS heartbeat_age_s FROM @S.runners r "
                        "ORDER BY r.id",
                        "status", out, err) < 0;
    }
    PQfinish(pg);
    return rc;
}

/* ---- operator commands (SPEC 7.5, 8.2): the SQL functions, no runner needed ---- */

/* Runs sql (@S expanded) with n text parameters; the result, or NULL after printing why. */
static PGresult *query(PGconn *pg, const char *schema, const char *cmd, const char *sql, int n,
                       const char *const *v, FILE *err)
{
    char *q = wq_pg_sql(pg, schema, sql);
    PGresult *r = q ? PQexecParams(pg, q, n, NULL, v, NULL, NULL, 0) : NULL;
    free(q);
    if (r && PQresultStatus(r) == PGRES_TUPLES_OK)
        return r;
    char msg[600];
    wq_pg_msg(msg, sizeof msg, r ? PQresultErrorMessage(r) : PQerrorMessage(pg));
    fprintf(err, "wqrun: %s: %s\n", cmd, msg);
    PQclear(r);
    return NULL;
}

/* The first column of the first row of query sql, copied into out; 0 or -1 (printed). */
static int query_one(PGconn *pg, const wq_cli_args *a, const char *sql, int n, const char *const *v,
                     char *out, size_t outlen, FILE *err)
{
    PGresult *r = query(pg, a->pg_schema, a->cmd, sql, n, v, err);
    if (!r)
        return -1;
    snprintf(out, outlen, "%s", PQntuples(r) > 0 ? PQgetvalue(r, 0, 0) : "");
    PQclear(r);
    return 0;
}

/* Waits up to 5 s for the claim token of key to end; 1 ended, 0 not yet, -1 failed. */
static int wait_cancelled(PGconn *pg, const wq_cli_args *a, const char *token, FILE *err)
{
    const char *v[3] = {a->queue, a->key, token};
    for (int i = 0; i < 250; i++) {
        char running[8];
        if (query_one(pg, a,
                      "SELECT EXISTS (SELECT 1 FROM @S.jobs WHERE queue = $1 AND key = $2 "
                      "AND token = $3::bigint AND running)",
                      3, v, running, sizeof running, err) < 0)
            return -1;
        if (running[0] == 'f')
            return 1;
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* The dead letters (`wqrun dead`) in the columns of an items listing (see wq_cli_item). */
static const char dead_sql[] =
    "SELECT key, NULL, NULL, attempts,"
    " to_char(failed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'), NULL,"
    " jsonb_build_object('key', key, 'payload', payload, 'error', error,"
    "  'attempts', attempts, 'failed_at', extract(epoch FROM failed_at),"
    "  'traceback', traceback)::text, error, traceback"
    " FROM @S.dead WHERE queue = $1 AND $2::text IS NULL ORDER BY failed_at, key COLLATE \"C\""
    " LIMIT $3::bigint";

/* `wqrun items`, and `wqrun dead` (or items --state dead). */
static int list_items(PGconn *pg, const wq_cli_args *a, FILE *out, FILE *err)
{
    char lim[24];
    snprintf(lim, sizeof lim, "%ld", a->limit + 1);
    const char *v[3] = {a->queue, a->state, lim};
    PGresult *r =
        query(pg, a->pg_schema, a->cmd,
              a->op == WQ_CLI_DEAD
                  ? dead_sql
                  : "SELECT key, CASE WHEN rn IS NULL THEN state ELSE state || ' on ' || rn"
                    " END, priority, attempt,"
                    " to_char(ready_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'),"
                    " payload::text, (jsonb_build_object('key', key, 'payload', payload,"
                    "  'state', state, 'priority', priority, 'group', grp,"
                    "  'ready_at', extract(epoch FROM ready_at), 'attempt', attempt,"
                    "  'last_error', last_error, 'runner', rn) || CASE WHEN progress IS NOT NULL"
                    " THEN jsonb_build_object('progress', progress) ELSE '{}' END)::text,"
                    " last_error, NULL, progress::text"
                    " FROM (SELECT i.*, (SELECT r.name FROM @S.runners r"
                    "  WHERE r.id = i.runner) AS rn FROM @S.items i) i"
                    " WHERE queue = $1 AND ($2::text IS NULL OR state = $2)"
                    " ORDER BY state = 'waiting', priority DESC, coalesce(ready_at, "
                    "enqueued_at), key LIMIT $3::bigint",
              3, v, err);
    if (!r)
        return 1;
    long n = PQntuples(r), i;
    wq_cli_items_head(a, out);
    for (i = 0; i < n; i++) {
        int t = (int)i;
#define COL(c) (PQgetisnull(r, t, c) ? NULL : PQgetvalue(r, t, c))
        wq_cli_item it = {COL(0),
                          COL(1),
                          COL(2),
                          COL(3),
                          COL(4),
                          COL(5),
                          COL(6),
                          COL(7),
                          a->op == WQ_CLI_DEAD ? COL(8) : NULL,
                          a->op == WQ_CLI_DEAD ? NULL : COL(9)};
#undef COL
        if (wq_cli_items_row(a, out, i, &it))
            break;
    }
    wq_cli_items_tail(a, out, i);
    PQclear(r);
    return 0;
}

#define UTC(c) "to_char(to_timestamp(" c ") AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC'"

/* What the database knows of the key, as the runners' q:item answers it. */
static int show_key(PGconn *pg, const wq_cli_args *a, FILE *out, FILE *err)
{
    const char *v[2] = {a->queue, a->key};
    PGresult *r = query(
        pg, a->pg_schema, a->cmd,
        "SELECT state, key, payload::text, priority::text, \"group\","
        " CASE WHEN state <> 'blocked' THEN attempt::text END, last_error,"
        " " UTC("ready_at") ", " UTC(
            "finished_at") ", result::text, error, attempts::text,"
                           " " UTC("failed_at") ", (CASE WHEN state = 'blocked' THEN "
                                                "jsonb_build_object('key', key,"
                                                " 'state', state, 'payload', payload, 'priority', "
                                                "priority, 'group', \"group\","
                                                " 'waits', waits, 'flow', flow)"
                                                " WHEN rank = 0 THEN jsonb_build_object('key', "
                                                "key, 'state',"
                                                " state, 'payload', payload, 'priority', priority, "
                                                "'group', \"group\", 'ready_at',"
                                                " ready_at, 'attempt', attempt, 'last_error', "
                                                "last_error) || CASE WHEN progress IS NOT NULL "
                                                "THEN jsonb_build_object('progress', progress) "
                                                "ELSE '{}' END"
                                                " WHEN state = 'done' THEN "
                                                "jsonb_build_object('key', key, 'state', state,"
                                                " 'finished_at', finished_at, 'result', result)"
                                                " ELSE jsonb_build_object('key', key, 'state', "
                                                "state, 'payload', payload, 'error', error,"
                                                " 'attempts', attempts, 'failed_at', failed_at,"
                                                " 'traceback', traceback) "
                                                "END)::text, waits::text, flow, traceback,"
                                                " progress::text"
                                                " FROM " WQ_PG_KEY_ROW,
        2, v, err);
    if (!r)
        return 1;
    int found = PQntuples(r) > 0;
#define COL(c) (!found || PQgetisnull(r, 0, c) ? NULL : PQgetvalue(r, 0, c))
    wq_cli_key k = {COL(0), COL(1),  COL(2),  COL(3),  COL(4),  COL(5),  COL(6),  COL(7),  COL(8),
                    COL(9), COL(10), COL(11), COL(12), COL(13), COL(14), COL(15), COL(16), COL(17)};
#undef COL
    int rc = wq_cli_show(a, out, err, found ? &k : NULL);
    PQclear(r);
    return rc;
}

/* Applies a parsed command; the exit status. */
static int apply_op(PGconn *pg, const wq_cli_args *a, FILE *out, FILE *err)
{
    char known[8], res[64], msg[WQ_SHOWN_KEY + 200], key[WQ_SHOWN_KEY] = "";
    const char *qv[1] = {a->queue};
    if (query_one(pg, a, "SELECT @S.known_queue($1)", 1, qv, known, sizeof known, err) < 0)
        return 1;
    if (known[0] != 't') {
        fprintf(err, "wqrun: %s: no queue '%s' in %s\n", a->cmd, a->queue,
                wq_pg_describe(pg, NULL));
        return 1;
    }
    if (a->op == WQ_CLI_ITEMS || a->op == WQ_CLI_DEAD)
        return list_items(pg, a, out, err);
    if (a->op == WQ_CLI_SHOW)
        return show_key(pg, a, out, err);
    if (a->key)
        wq_show_key(key, a->key, strlen(a->key));
    const char *kv[2] = {a->queue, a->key};
    int ok = 1;
    switch (a->op) {
    case WQ_CLI_PAUSE:
    case WQ_CLI_RESUME: {
        int pause = a->op == WQ_CLI_PAUSE;
        const char *pv[2] = {a->queue, pause ? "true" : "false"};
        if (query_one(pg, a, "SELECT @S.pause($1, $2::boolean)", 2, pv, res, sizeof res, err) < 0)
            return 1;
        if (res[0] == 't')
            snprintf(msg, sizeof msg, "%s queue '%s'", pause ? "paused" : "resumed", a->queue);
        else
            snprintf(msg, sizeof msg, "queue '%s' was %s already", a->queue,
                     pause ? "paused" : "running");
        break;
    }
    case WQ_CLI_REMOVE:
        if (query_one(pg, a, "SELECT @S.remove($1, $2)", 2, kv, res, sizeof res, err) < 0)
            return 1;
        ok = strcmp(res, "removed") == 0;
        if (ok)
            snprintf(msg, sizeof msg, "removed '%s' from queue '%s'", key, a->queue);
        else if (strcmp(res, "processing") == 0)
            snprintf(msg, sizeof msg, "'%s' is processing in queue '%s' (cancel it instead)", key,
                     a->queue);
        else
            snprintf(msg, sizeof msg, "no queued or delayed item '%s' in queue '%s'", key,
                     a->queue);
        break;
    case WQ_CLI_CANCEL: {
        PGresult *r = query(pg, a->pg_schema, a->cmd,
                            "SELECT @S.cancel($1, $2), (SELECT token FROM @S.jobs WHERE queue = "
                            "$1 AND key = $2 AND running)::text",
                            2, kv, err);
        if (!r)
            return 1;
        snprintf(res, sizeof res, "%s", PQgetvalue(r, 0, 0));
        char token[32];
        snprintf(token, sizeof token, "%s", PQgetvalue(r, 0, 1));
        PQclear(r);
        ok = 0;
        if (strcmp(res, "absent") == 0) {
            snprintf(msg, sizeof msg, "no item '%s' in queue '%s'", key, a->queue);
        } else if (strcmp(res, "cancelling") != 0) {
            snprintf(msg, sizeof msg, "'%s' is not processing in queue '%s'", key, a->queue);
        } else {
            int w = wait_cancelled(pg, a, token, err);
            if (w < 0)
                return 1;
            ok = w == 1;
            if (ok)
                snprintf(msg, sizeof msg, "cancelled '%s' in queue '%s'", key, a->queue);
            else
                snprintf(msg, sizeof msg,
                         "the cancel of '%s' in queue '%s' was sent to its runner, which has not "
                         "ended the run within 5 s",
                         key, a->queue);
        }
        break;
    }
    case WQ_CLI_RETRY:
    case WQ_CLI_RETRY_ALL: {
        const char *rv[2] = {a->queue, a->op == WQ_CLI_RETRY ? a->key : NULL};
        if (query_one(pg, a, "SELECT @S.retry_dead($1, $2)", 2, rv, res, sizeof res, err) < 0)
            return 1;
        long n = atol(res);
        if (a->op == WQ_CLI_RETRY_ALL)
            snprintf(msg, sizeof msg, "re-queued %ld dead letter%s of queue '%s'", n,
                     n == 1 ? "" : "s", a->queue);
        else if ((ok = n > 0))
            snprintf(msg, sizeof msg, "re-queued dead letter '%s' of queue '%s'", key, a->queue);
        else
            snprintf(msg, sizeof msg, "no dead letter '%s' in queue '%s'", key, a->queue);
        break;
    }
    case WQ_CLI_PURGE: {
        if (query_one(pg, a, "SELECT @S.purge_dead($1)", 1, qv, res, sizeof res, err) < 0)
            return 1;
        long n = atol(res);
        snprintf(msg, sizeof msg, "purged %ld dead letter%s of queue '%s'", n, n == 1 ? "" : "s",
                 a->queue);
        break;
    }
    default: return 1;
    }
    if (ok)
        fprintf(out, "%s\n", msg);
    else
        fprintf(err, "wqrun: %s: %s\n", a->cmd, msg);
    return ok ? 0 : 1;
}

int wq_pg_cli_op(const char *cmd, int argc, char **argv, FILE *out, FILE *err)
{
    wq_cli_args a;
    int done = 0;
    int r = wq_cli_parse(cmd, argc, argv, &a, out, err, &done);
    if (r || done)
        return r;
    PGconn *pg = wq_pg_cli_connect(cmd, a.db, a.pg_schema, err);
    if (!pg)
        return 1;
    r = apply_op(pg, &a, out, err);
    PQfinish(pg);
    return r;
}
