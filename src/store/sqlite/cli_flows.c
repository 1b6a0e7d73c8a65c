/*
 * `wqrun add-flow|flows|flow show|flow cancel` on a state file (SPEC 9).
 *
 * The runner keeps the flows: a flow is added and cancelled through it
 * (the commands table, as `wqrun remove` is), so that its flow set and the
 * file never disagree. Without a runner, a cancel is applied here with SQL
 * (every unfinished node dead, the pending items of the flow's nodes gone);
 * an added flow is kept in the commands table for the next runner, which
 * checks and adds it when it starts (its outcome is written into that row
 * and logged). Listing and showing read the file.
 */
#include "store/cli_flows.h"

#include "store/sqlite/cli.h"
#include "store/sqlite/store_int.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define TEXT(st, i) ((const char *)sqlite3_column_text((st), (i)))

/* ---- add-flow ---- */

/* The document with an id (made when it has none) in *doc, and the id: 0, or 1 after saying
 * what is wrong. */
static int with_id(sqlite3 *db, wq_cli_flow_args *a, char *id, size_t idsize, FILE *err)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db,
                           "SELECT json_valid(?1), json_type(?1), json_type(?1, '$.id'),"
                           " json_extract(?1, '$.id')",
                           -1, &st, NULL) != SQLITE_OK) {
        fprintf(err, "wqrun: add-flow: %s\n", sqlite3_errmsg(db));
        return 1;
    }
    sqlite3_bind_text64(st, 1, a->doc, a->doclen, SQLITE_STATIC, SQLITE_UTF8);
    int ok = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) == 1 && TEXT(st, 1) &&
             strcmp(TEXT(st, 1), "object") == 0;
    const char *type = ok ? TEXT(st, 2) : NULL;
    int has = type && strcmp(type, "null") != 0;
    if (ok && has && strcmp(type, "text") != 0) {
        fprintf(err, "wqrun: add-flow: flow: id: a string of 1 to 200 bytes expected\n");
        sqlite3_finalize(st);
        return 1;
    }
    if (has)
        snprintf(id, idsize, "%s", TEXT(st, 3));
    sqlite3_finalize(st);
    if (!ok) {
        fprintf(err, "wqrun: add-flow: the document is not a JSON object {\"id\", \"keep\", "
                     "\"nodes\"}\n");
        return 1;
    }
    if (has)
        return 0;
    unsigned char b[8];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
        fprintf(err, "wqrun: add-flow: no randomness for a flow id\n");
        return 1;
    }
    snprintf(id, idsize, "f-%02x%02x%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3], b[4], b[5],
             b[6], b[7]);
    if (sqlite3_prepare_v2(db, "SELECT json_set(?1, '$.id', ?2)", -1, &st, NULL) != SQLITE_OK)
        return 1;
    sqlite3_bind_text64(st, 1, a->doc, a->doclen, SQLITE_STATIC, SQLITE_UTF8);
    sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC);
    int r = 1;
    if (sqlite3_step(st) == SQLITE_ROW) {
        size_t n = (size_t)sqlite3_column_bytes(st, 0);
        char *doc = malloc(n + 1);
        if (doc) {
            memcpy(doc, TEXT(st, 0), n + 1);
            free(a->doc);
            a->doc = doc;
            a->doclen = n;
            r = 0;
        }
    }
    sqlite3_finalize(st);
    return r;
}

static int keep_for_runner(sqlite3 *db, const char *path, int64_t id, void *ud, char *msg,
                           size_t len)
{
    const wq_cli_change *c = ud;
    if (id == 0) {
        sqlite3_stmt *st;
        if (sqlite3_prepare_v2(db,
                               "INSERT INTO commands(queue, op, key) VALUES ('', 'add_flow', ?1)",
                               -1, &st, NULL) != SQLITE_OK)
            return -1;
        sqlite3_bind_text64(st, 1, c->key, c->keylen, SQLITE_STATIC, SQLITE_UTF8);
        int rc = sqlite3_step(st);
        sqlite3_finalize(st);
        if (rc != SQLITE_DONE)
            return -1;
    }
    snprintf(msg, len,
             "no runner holds %s: the flow is kept in its commands table; the next runner checks "
             "and adds it when it starts",
             path);
    return 2;
}

/* ---- cancel (no runner: here) ---- */

static int cancel_here(sqlite3 *db, const char *path, int64_t id, void *ud, char *msg, size_t len)
{
    (void)path;
    (void)id;
    const char *fid = ud;
    static const char *const sql[] = {
        /* the pending items of its unfinished nodes go */
        "DELETE FROM items WHERE (queue, key) IN (SELECT queue, key FROM flow_nodes"
        " WHERE flow = ?1 AND state = 'pending')",
        "DELETE FROM failures WHERE (queue, key) IN (SELECT queue, key FROM flow_nodes"
        " WHERE flow = ?1 AND state = 'pending')",
        "UPDATE flow_nodes SET state = 'dead', error = 'flow cancelled', finished_at = " WQ_SQL_NOW
        " WHERE flow = ?1 AND state IN ('blocked', 'pending')",
        /* nothing is unfinished: every count is 0 */
        "UPDATE flow_nodes SET waits = 0 WHERE flow = ?1",
        "UPDATE flows SET cancelled = 1, unfinished = 0, finished_at = "
        "coalesce(finished_at, " WQ_SQL_NOW ") WHERE id = ?1"};
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db,
                           "SELECT count(*) FILTER (WHERE n.state IN ('blocked', 'pending')),"
                           " (SELECT count(*) FROM flows WHERE id = ?1) FROM flow_nodes n"
                           " WHERE n.flow = ?1",
                           -1, &st, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_text(st, 1, fid, -1, SQLITE_STATIC);
    int n = 0, exists = 0;
    if (sqlite3_step(st) == SQLITE_ROW) {
        n = sqlite3_column_int(st, 0);
        exists = sqlite3_column_int(st, 1);
    }
    sqlite3_finalize(st);
    if (!exists) {
        snprintf(msg, len, "no flow '%s'", fid);
        return 0;
    }
    for (size_t i = 0; i < sizeof sql / sizeof *sql; i++) {
        if (sqlite3_prepare_v2(db, sql[i], -1, &st, NULL) != SQLITE_OK)
            return -1;
        sqlite3_bind_text(st, 1, fid, -1, SQLITE_STATIC);
        int rc = sqlite3_step(st);
        sqlite3_finalize(st);
        if (rc != SQLITE_DONE)
            return -1;
    }
    snprintf(msg, len, "cancelled flow '%s': %d unfinished node%s", fid, n, n == 1 ? "" : "s");
    return 1;
}

/* ---- listing ---- */

static const char flows_sql[] =
    "SELECT f.id, datetime(f.created_at, 'unixepoch'), datetime(f.finished_at, 'unixepoch'),"
    " count(n.id), count(*) FILTER (WHERE n.state = 'blocked'),"
    " count(*) FILTER (WHERE n.state = 'pending'), count(*) FILTER (WHERE n.state = 'done'),"
    " count(*) FILTER (WHERE n.state = 'dead'), f.cancelled,"
    " json_object('id', f.id, 'created_at', f.created_at, 'finished_at', f.finished_at,"
    "  'keep', f.keep, 'cancelled', json(CASE f.cancelled WHEN 0 THEN 'false' ELSE 'true' END),"
    "  'nodes', count(n.id), 'blocked', count(*) FILTER (WHERE n.state = 'blocked'),"
    "  'pending', count(*) FILTER (WHERE n.state = 'pending'),"
    "  'done', count(*) FILTER (WHERE n.state = 'done'),"
    "  'dead', count(*) FILTER (WHERE n.state = 'dead'))"
    " FROM flows f LEFT JOIN flow_nodes n ON n.flow = f.id"
    " WHERE ?1 IS NULL OR (?1 = 'running') = (f.finished_at IS NULL)"
    " GROUP BY f.id ORDER BY f.created_at DESC, f.id LIMIT ?2";

static int list_flows(sqlite3 *db, const wq_cli_flow_args *a, FILE *out, FILE *err)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, flows_sql, -1, &st, NULL) != SQLITE_OK) {
        fprintf(err, "wqrun: flows: cannot read %s: %s\n", a->db, sqlite3_errmsg(db));
        return 1;
    }
    if (a->state)
        sqlite3_bind_text(st, 1, a->state, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, a->limit);
    if (a->json)
        fputs("[", out);
    else
        wq_cli_flows_head(out);
    int rc, n = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (a->json) {
            fprintf(out, "%s%s", n ? "," : "", TEXT(st, 9));
        } else {
            wq_cli_flow_row r = {TEXT(st, 0), TEXT(st, 1), TEXT(st, 2),
                                 TEXT(st, 3), TEXT(st, 4), TEXT(st, 5),
                                 TEXT(st, 6), TEXT(st, 7), sqlite3_column_int(st, 8)};
            wq_cli_flows_row(out, &r);
        }
        n++;
    }
    if (a->json)
        fputs("]\n", out);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        fprintf(err, "wqrun: flows: cannot read %s: %s\n", a->db, sqlite3_errmsg(db));
        return 1;
    }
    return 0;
}

static const char nodes_sql[] =
    "SELECT n.queue, n.key, n.state, CASE WHEN n.state = 'blocked' THEN n.waits END,"
    " CASE WHEN n.state = 'pending' THEN coalesce(f.requeues, 0) + 1 END,"
    " coalesce(n.error, CASE WHEN n.state = 'pending' THEN f.last_error END), n.result,"
    " (SELECT group_concat(d.queue || '/' || d.key, ', ') FROM (SELECT d.queue, d.key"
    "   FROM flow_deps e JOIN flow_nodes d ON d.id = e.dep WHERE e.node = n.id ORDER BY e.ord) d),"
    " json_object('queue', n.queue, 'key', n.key, 'state', n.state,"
    "  'waits', CASE WHEN n.state = 'blocked' THEN n.waits END,"
    "  'attempt', CASE WHEN n.state = 'pending' THEN coalesce(f.requeues, 0) + 1 END,"
    "  'error', coalesce(n.error, CASE WHEN n.state = 'pending' THEN f.last_error END),"
    "  'result', CASE WHEN json_valid(n.result) THEN json(n.result) ELSE n.result END,"
    "  'finished_at', n.finished_at,"
    "  'ignore_dead', json(CASE n.ignore_dead WHEN 0 THEN 'false' ELSE 'true' END),"
    "  'after', (SELECT json_group_array(json_object('queue', d.queue, 'key', d.key))"
    "   FROM (SELECT d.queue, d.key FROM flow_deps e JOIN flow_nodes d ON d.id = e.dep"
    "   WHERE e.node = n.id ORDER BY e.ord) d))"
    " FROM flow_nodes n LEFT JOIN failures f ON f.queue = n.queue AND f.key = n.key"
    " WHERE n.flow = ?1 ORDER BY n.id";

static int show_flow(sqlite3 *db, const wq_cli_flow_args *a, FILE *out, FILE *err)
{
    sqlite3_stmt *st;
    char sql[sizeof flows_sql + 64];
    snprintf(sql, sizeof sql, "%s", flows_sql);
    /* the one flow: the listing's query narrowed to its id */
    char *where = strstr(sql, " WHERE ?1 IS NULL");
    const char *one = " WHERE f.id = ?1 GROUP BY f.id LIMIT ?2";
    memcpy(where, one, strlen(one) + 1);
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        fprintf(err, "wqrun: flow show: cannot read %s: %s\n", a->db, sqlite3_errmsg(db));
        return 1;
    }
    sqlite3_bind_text(st, 1, a->id, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, 1);
    if (sqlite3_step(st) != SQLITE_ROW || !TEXT(st, 0)) {
        sqlite3_finalize(st);
        fprintf(err, "wqrun: flow show: no flow '%s' in %s\n", a->id, a->db);
        return 1;
    }
    if (a->json) { /* the summary without its count of nodes: "nodes" lists them */
        sqlite3_stmt *rm;
        const char *obj = NULL;
        if (sqlite3_prepare_v2(db, "SELECT json_remove(?1, '$.nodes')", -1, &rm, NULL) ==
            SQLITE_OK) {
            sqlite3_bind_text(rm, 1, TEXT(st, 9), -1, SQLITE_TRANSIENT);
            if (sqlite3_step(rm) == SQLITE_ROW)
                obj = TEXT(rm, 0);
            if (obj)
                fprintf(out, "%.*s,\"nodes\":[", (int)strlen(obj) - 1, obj);
            sqlite3_finalize(rm);
        }
        if (!obj) {
            sqlite3_finalize(st);
            fprintf(err, "wqrun: flow show: %s\n", sqlite3_errmsg(db));
            return 1;
        }
    } else {
        wq_cli_flows_head(out);
        wq_cli_flow_row r = {TEXT(st, 0), TEXT(st, 1), TEXT(st, 2),
                             TEXT(st, 3), TEXT(st, 4), TEXT(st, 5),
                             TEXT(st, 6), TEXT(st, 7), sqlite3_column_int(st, 8)};
        wq_cli_flows_row(out, &r);
        fputc('\n', out);
        wq_cli_nodes_head(out);
    }
    sqlite3_finalize(st);
    if (sqlite3_prepare_v2(db, nodes_sql, -1, &st, NULL) != SQLITE_OK) {
        fprintf(err, "wqrun: flow show: cannot read %s: %s\n", a->db, sqlite3_errmsg(db));
        return 1;
    }
    sqlite3_bind_text(st, 1, a->id, -1, SQLITE_STATIC);
    int rc, n = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (a->json) {
            fprintf(out, "%s%s", n ? "," : "", TEXT(st, 8));
        } else {
            wq_cli_node_row r = {TEXT(st, 0), TEXT(st, 1), TEXT(st, 2), TEXT(st, 3),
                                 TEXT(st, 4), TEXT(st, 5), TEXT(st, 6), TEXT(st, 7)};
            wq_cli_nodes_row(out, &r);
        }
        n++;
    }
    sqlite3_finalize(st);
    if (a->json)
        fputs("]}\n", out);
    if (rc != SQLITE_DONE) {
        fprintf(err, "wqrun: flow show: cannot read %s: %s\n", a->db, sqlite3_errmsg(db));
        return 1;
    }
    return 0;
}

int wq_store_cli_flows_io(const char *cmd, int argc, char **argv, FILE *out, FILE *err)
{
    wq_cli_flow_args a;
    int done = 0;
    int r = wq_cli_flow_parse(cmd, argc, argv, &a, out, err, &done);
    if (r || done) {
        wq_cli_flow_args_free(&a);
        return r;
    }
    sqlite3 *db;
    int fd, ours;
    if (wq_store_cli_open(a.cmd, a.db, &db, &fd, &ours, err) != 0) {
        wq_cli_flow_args_free(&a);
        return 1;
    }
    int version = wq_schema_version(db);
    if (!ours || version < 5) {
        fprintf(err,
                "wqrun: %s: %s has no flows yet (%s); a runner of this wqrun makes the file "
                "ready for them when it opens it\n",
                a.cmd, a.db, ours ? "a state file of an older version" : "no wqrun state");
        r = 1;
    } else if (a.op == WQ_CLI_FLOWS) {
        r = list_flows(db, &a, out, err);
    } else if (a.op == WQ_CLI_FLOW_SHOW) {
        r = show_flow(db, &a, out, err);
    } else if (sqlite3_db_readonly(db, "main") == 1) {
        fprintf(err, "wqrun: %s: state file %s is not writable\n", a.cmd, a.db);
        r = 1;
    } else if (a.op == WQ_CLI_FLOW_CANCEL) {
        wq_cli_change c = {a.cmd, "", "cancel_flow", a.id, strlen(a.id), cancel_here, (void *)a.id};
        r = wq_store_cli_change(db, fd, a.db, &c, out, err);
    } else {
        char id[256];
        r = with_id(db, &a, id, sizeof id, err);
        if (r == 0) {
            wq_cli_change c = {a.cmd, "", "add_flow", a.doc, a.doclen, keep_for_runner, NULL};
            c.ud = &c;
            r = wq_store_cli_change(db, fd, a.db, &c, out, err);
        }
    }
    sqlite3_close(db);
    close(fd);
    wq_cli_flow_args_free(&a);
    return r;
}
