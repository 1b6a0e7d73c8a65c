/*
 * `wqrun add-flow|flows|flow show|flow cancel --db URL` (SPEC 9): the
 * database's flow functions (sql/functions/70-flows.sql) called once each,
 * their JSON answer printed as it is (--json) or as the text layout both
 * backends share (store/cli_flows.c).
 */
#include "store/cli_flows.h"
#include "store/pg/pg_cli.h"

#include "store/pg/pgconn.h"
#include "store/pg/pg_schema.h"

#include <stdlib.h>
#include <string.h>

/* Runs sql (with @S) on the params; the result, or NULL after saying why. */
static PGresult *run(PGconn *pg, const wq_cli_flow_args *a, const char *sql, int n,
                     const char *const *params, FILE *err)
{
    char *q = wq_pg_sql(pg, a->pg_schema, sql);
    PGresult *res = q ? PQexecParams(pg, q, n, NULL, params, NULL, NULL, 0) : NULL;
    free(q);
    if (res && PQresultStatus(res) == PGRES_TUPLES_OK)
        return res;
    char msg[600];
    const char *primary = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    wq_pg_msg(msg, sizeof msg,
              primary ? primary
              : res   ? PQresultErrorMessage(res)
                      : "out of memory");
    fprintf(err, "wqrun: %s: %s\n", a->cmd, msg);
    PQclear(res);
    return NULL;
}

static const char *col(PGresult *res, int row, int c)
{
    return PQgetisnull(res, row, c) ? NULL : PQgetvalue(res, row, c);
}

/* The columns of one flow summary x (jsonb) as the text layout prints them. */
#define SUMMARY_COLS                                                                               \
    "x->>'id', to_char(to_timestamp((x->>'created_at')::float8) AT TIME ZONE 'UTC',"               \
    " 'YYYY-MM-DD HH24:MI:SS'), to_char(to_timestamp((x->>'finished_at')::float8) AT TIME ZONE"    \
    " 'UTC', 'YYYY-MM-DD HH24:MI:SS'), CASE jsonb_typeof(x->'nodes') WHEN 'array' THEN"            \
    " jsonb_array_length(x->'nodes')::text ELSE x->>'nodes' END, x->>'blocked', x->>'pending',"    \
    " x->>'done',"                                                                                 \
    " x->>'dead', (x->>'cancelled')::boolean::integer"

static void print_summary(PGresult *res, int i, FILE *out)
{
    wq_cli_flow_row r = {col(res, i, 0), col(res, i, 1), col(res, i, 2),
                         col(res, i, 3), col(res, i, 4), col(res, i, 5),
                         col(res, i, 6), col(res, i, 7), atoi(PQgetvalue(res, i, 8))};
    wq_cli_flows_row(out, &r);
}

static int list(PGconn *pg, const wq_cli_flow_args *a, FILE *out, FILE *err)
{
    char lim[24];
    snprintf(lim, sizeof lim, "%ld", a->limit);
    const char *p[2] = {a->state, lim};
    PGresult *res = run(pg, a,
                        a->json ? "SELECT @S.flow_list($1, $2::integer)::text"
                                : "SELECT " SUMMARY_COLS
                                  " FROM jsonb_array_elements(@S.flow_list($1, $2::integer)) x",
                        2, p, err);
    if (!res)
        return 1;
    if (a->json) {
        fprintf(out, "%s\n", PQgetvalue(res, 0, 0));
    } else {
        wq_cli_flows_head(out);
        for (int i = 0; i < PQntuples(res); i++)
            print_summary(res, i, out);
    }
    PQclear(res);
    return 0;
}

static int show(PGconn *pg, const wq_cli_flow_args *a, FILE *out, FILE *err)
{
    const char *p[1] = {a->id};
    PGresult *res = run(pg, a, "SELECT @S.flow_show($1)::text", 1, p, err);
    if (!res)
        return 1;
    if (PQgetisnull(res, 0, 0)) {
        PQclear(res);
        fprintf(err, "wqrun: flow show: no flow '%s' in %s\n", a->id, a->db);
        return 1;
    }
    if (a->json) {
        fprintf(out, "%s\n", PQgetvalue(res, 0, 0));
        PQclear(res);
        return 0;
    }
    PQclear(res);
    res = run(pg, a, "SELECT " SUMMARY_COLS " FROM (SELECT @S.flow_show($1) AS x) s", 1, p, err);
    if (!res)
        return 1;
    wq_cli_flows_head(out);
    print_summary(res, 0, out);
    PQclear(res);
    fputc('\n', out);
    res = run(pg, a,
              "SELECT n->>'queue', n->>'key', n->>'state', CASE WHEN n->>'state' = 'blocked'"
              " THEN n->>'waits' END, n->>'attempt', n->>'error', n->'result',"
              " (SELECT string_agg((d->>'queue') || '/' || (d->>'key'), ', ' ORDER BY o)"
              "  FROM jsonb_array_elements(n->'after') WITH ORDINALITY AS e(d, o))"
              " FROM jsonb_array_elements(@S.flow_show($1)->'nodes') n",
              1, p, err);
    if (!res)
        return 1;
    wq_cli_nodes_head(out);
    for (int i = 0; i < PQntuples(res); i++) {
        wq_cli_node_row r = {col(res, i, 0), col(res, i, 1), col(res, i, 2), col(res, i, 3),
                             col(res, i, 4), col(res, i, 5), col(res, i, 6), col(res, i, 7)};
        wq_cli_nodes_row(out, &r);
    }
    PQclear(res);
    return 0;
}

int wq_pg_cli_flows(const char *cmd, int argc, char **argv, FILE *out, FILE *err)
{
    wq_cli_flow_args a;
    int done = 0;
    int r = wq_cli_flow_parse(cmd, argc, argv, &a, out, err, &done);
    if (r || done) {
        wq_cli_flow_args_free(&a);
        return r;
    }
    PGconn *pg = wq_pg_cli_connect(a.cmd, a.db, a.pg_schema, err);
    if (!pg) {
        wq_cli_flow_args_free(&a);
        return 1;
    }
    if (a.op == WQ_CLI_FLOWS) {
        r = list(pg, &a, out, err);
    } else if (a.op == WQ_CLI_FLOW_SHOW) {
        r = show(pg, &a, out, err);
    } else if (a.op == WQ_CLI_FLOW_CANCEL) {
        const char *p[1] = {a.id};
        PGresult *res = run(pg, &a, "SELECT @S.cancel_flow($1)", 1, p, err);
        r = 1;
        if (res && PQgetisnull(res, 0, 0)) {
            fprintf(err, "wqrun: flow cancel: no flow '%s' in %s\n", a.id, a.db);
        } else if (res) {
            int n = atoi(PQgetvalue(res, 0, 0));
            fprintf(out, "cancelled flow '%s': %d unfinished node%s\n", a.id, n, n == 1 ? "" : "s");
            r = 0;
        }
        PQclear(res);
    } else {
        char *doc = malloc(a.doclen + 1);
        if (doc) {
            memcpy(doc, a.doc, a.doclen);
            doc[a.doclen] = '\0';
        }
        const char *p[1] = {doc};
        PGresult *res = doc ? run(pg, &a, "SELECT @S.add_flow($1::jsonb)", 1, p, err) : NULL;
        r = res ? 0 : 1;
        if (res)
            fprintf(out, "added flow %s\n", PQgetvalue(res, 0, 0));
        PQclear(res);
        free(doc);
    }
    PQfinish(pg);
    wq_cli_flow_args_free(&a);
    return r;
}
