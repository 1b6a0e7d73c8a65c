/*
 * `wqrun history --db URL QUEUE [--limit N] [--before ID] [--json] [--pg-schema NAME]`: the
 * queue's finished runs (table history, SPEC 11) in a PostgreSQL database, newest first, a
 * page at a time, printed as the state file's command prints them (cli_history.c). No runner
 * is needed.
 */
#include "store/pg/pg_cli.h"

#include "engine/common.h"
#include "store/cli_ops.h"
#include "store/pg/pg_schema.h"
#include "store/pg/pgconn.h"

#include <stdlib.h>
#include <string.h>

static const char history_usage[] = "usage: wqrun history --db PATH|URL QUEUE [--limit N] "
                                    "[--before ID] [--json] [--pg-schema NAME]\n";

static int usage(FILE *err, const char *msg, const char *arg)
{
    fprintf(err, "wqrun: history: %s%s%s\n%s", msg, arg ? " " : "", arg ? arg : "", history_usage);
    return 2;
}

static int positive(const char *s, long long *out)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || v <= 0)
        return -1;
    *out = v;
    return 0;
}

/* The columns: id, key, state, finished (UTC text), attempts, took (seconds or NULL), the
 * error or result, the run as a JSON object (its fields in the state file's order). */
static const char history_sql[] =
    "SELECT id, key, state, to_char(finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'),"
    " attempts, extract(epoch FROM finished_at - started_at)::float8,"
    " coalesce(error, result::text), json_build_object('id', id, 'key', key, 'state', state,"
    " 'added_at', extract(epoch FROM added_at)::float8,"
    " 'started_at', extract(epoch FROM started_at)::float8,"
    " 'finished_at', extract(epoch FROM finished_at)::float8, 'attempts', attempts,"
    " 'runner', runner, 'result', result, 'error', error)::text"
    " FROM @S.history WHERE queue = $1 AND ($2::bigint = 0 OR id < $2::bigint)"
    " ORDER BY id DESC LIMIT $3::bigint";

int wq_pg_cli_history(int argc, char **argv, FILE *out, FILE *err)
{
    const char *db = getenv("WQRUN_DB"), *schema = "wqrun", *queue = NULL, *limit_s = NULL,
               *before_s = NULL;
    int json = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(history_usage, out);
            return 0;
        }
        if (strcmp(a, "--json") == 0) {
            json = 1;
            continue;
        }
        int m = wq_cli_option(argc, argv, &i, "--db", &db);
        if (m == 0)
            m = wq_cli_option(argc, argv, &i, "--pg-schema", &schema);
        if (m == 0)
            m = wq_cli_option(argc, argv, &i, "--limit", &limit_s);
        if (m == 0)
            m = wq_cli_option(argc, argv, &i, "--before", &before_s);
        if (m < 0)
            return usage(err, "option needs a value:", a);
        if (m > 0)
            continue;
        if (a[0] == '-' && a[1])
            return usage(err, "unknown option", a);
        if (queue)
            return usage(err, "unexpected argument", a);
        queue = a;
    }
    if (!db || !*db)
        return usage(err, "--db URL is required", NULL);
    if (!queue)
        return usage(err, "QUEUE is missing", NULL);
    long long limit = 50, before = 0;
    if (limit_s && positive(limit_s, &limit) < 0)
        return usage(err, "--limit needs a number > 0, not", limit_s);
    if (before_s && positive(before_s, &before) < 0)
        return usage(err, "--before needs a row id > 0, not", before_s);
    PGconn *pg = wq_pg_cli_connect("history", db, schema, err);
    if (!pg)
        return 1;
    char b[24], l[24];
    snprintf(b, sizeof b, "%lld", before);
    snprintf(l, sizeof l, "%lld", limit + 1); /* one more: whether there is a next page */
    const char *v[3] = {queue, b, l};
    char *sql = wq_pg_sql(pg, schema, history_sql);
    PGresult *r = sql ? PQexecParams(pg, sql, 3, NULL, v, NULL, NULL, 0) : NULL;
    free(sql);
    int rc = 0;
    if (!r || PQresultStatus(r) != PGRES_TUPLES_OK) {
        char msg[600];
        wq_pg_msg(msg, sizeof msg, r ? PQresultErrorMessage(r) : PQerrorMessage(pg));
        fprintf(err, "wqrun: history: %s\n", msg);
        rc = 1;
    } else {
        int rows = PQntuples(r);
        long long last = 0;
        if (json)
            fputs("[", out);
        else
            fprintf(out, "%-8s  %-24s  %-9s  %-19s  %8s  %8s  %s\n", "ID", "KEY", "STATE",
                    "FINISHED (UTC)", "ATTEMPTS", "TOOK", "ERROR OR RESULT");
        int n = 0;
        for (; n < rows; n++) {
            if (n == limit) {
                if (!json)
                    fprintf(out, "... more: --before %lld\n", last);
                break;
            }
            last = atoll(PQgetvalue(r, n, 0));
            if (json) {
                fprintf(out, "%s\n%s", n ? "," : "", PQgetvalue(r, n, 7));
                continue;
            }
            char key[WQ_SHOWN_KEY], line[121], took[32] = "-";
            wq_show_key(key, PQgetvalue(r, n, 1), (size_t)PQgetlength(r, n, 1));
            wq_show_line(line, sizeof line, PQgetisnull(r, n, 6) ? "" : PQgetvalue(r, n, 6));
            if (!PQgetisnull(r, n, 5))
                snprintf(took, sizeof took, "%.3fs", atof(PQgetvalue(r, n, 5)));
            fprintf(out, "%-8lld  %-24s  %-9s  %-19s  %8lld  %8s  %s\n", last, key,
                    PQgetvalue(r, n, 2), PQgetvalue(r, n, 3), atoll(PQgetvalue(r, n, 4)), took,
                    line[0] ? line : "-");
        }
        if (json)
            fputs(n ? "\n]\n" : "]\n", out);
    }
    PQclear(r);
    PQfinish(pg);
    return rc;
}
