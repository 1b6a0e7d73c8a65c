/*
 * `wqrun history --db FILE QUEUE [--limit N] [--before ID] [--json]`: the queue's finished
 * runs (table history, SPEC 11), newest first, a page at a time: the next page starts before
 * the last id shown. Reads the file only; no runner is needed.
 */
#include "engine/common.h"
#include "store/cli_ops.h"
#include "store/sqlite/cli.h"
#include "store/sqlite/store_int.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char history_usage[] =
    "usage: wqrun history --db PATH|URL QUEUE [--limit N] [--before ID] [--json]\n";

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

int wq_store_cli_history_io(int argc, char **argv, FILE *out, FILE *err)
{
    const char *db = NULL, *queue = NULL, *limit_s = NULL, *before_s = NULL;
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
        return usage(err, "--db PATH is required", NULL);
    if (!queue)
        return usage(err, "QUEUE is missing", NULL);
    long long limit = 50, before = 0;
    if (limit_s && positive(limit_s, &limit) < 0)
        return usage(err, "--limit needs a number > 0, not", limit_s);
    if (before_s && positive(before_s, &before) < 0)
        return usage(err, "--before needs a row id > 0, not", before_s);
    sqlite3 *conn;
    int fd, ours = 0;
    if (wq_store_cli_open("history", db, &conn, &fd, &ours, err) != 0)
        return 1;
    int r = 0;
    sqlite3_stmt *st = NULL;
    if (!ours || wq_schema_version(conn) < 6) {
        fprintf(err,
                "wqrun: history: %s has no history yet (%s); a runner of this wqrun makes the "
                "file ready for it when it opens it\n",
                db, ours ? "a state file of an older version" : "no wqrun state");
        r = 1;
    } else if (sqlite3_prepare_v2(
                   conn,
                   "SELECT id, key, state, datetime(finished_at, 'unixepoch'), attempts,"
                   " finished_at - started_at, coalesce(error, result), json_object('id', id,"
                   " 'key', key, 'state', state, 'added_at', added_at, 'started_at', started_at,"
                   " 'finished_at', finished_at, 'attempts', attempts, 'runner', runner,"
                   " 'result', json(result), 'error', error)"
                   " FROM history WHERE queue = ?1 AND (?2 = 0 OR id < ?2) ORDER BY id DESC"
                   " LIMIT ?3",
                   -1, &st, NULL) != SQLITE_OK) {
        fprintf(err, "wqrun: history: cannot read %s: %s\n", db, sqlite3_errmsg(conn));
        r = 1;
    } else {
        sqlite3_bind_text(st, 1, queue, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, before);
        sqlite3_bind_int64(st, 3, limit + 1);
        long n = 0;
        long long last = 0;
        int rc;
        if (json)
            fputs("[", out);
        else
            fprintf(out, "%-8s  %-24s  %-9s  %-19s  %8s  %8s  %s\n", "ID", "KEY", "STATE",
                    "FINISHED (UTC)", "ATTEMPTS", "TOOK", "ERROR OR RESULT");
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            if (n == limit) {
                if (!json)
                    fprintf(out, "... more: --before %lld\n", last);
                break;
            }
            last = sqlite3_column_int64(st, 0);
            if (json) {
                fprintf(out, "%s\n%s", n ? "," : "", (const char *)sqlite3_column_text(st, 7));
            } else {
                char key[WQ_SHOWN_KEY], line[121], took[32] = "-";
                wq_show_key(key, (const char *)sqlite3_column_text(st, 1),
                            (size_t)sqlite3_column_bytes(st, 1));
                wq_show_line(line, sizeof line, (const char *)sqlite3_column_text(st, 6));
                if (sqlite3_column_type(st, 5) != SQLITE_NULL)
                    snprintf(took, sizeof took, "%.3fs", sqlite3_column_double(st, 5));
                fprintf(out, "%-8lld  %-24s  %-9s  %-19s  %8lld  %8s  %s\n", last, key,
                        (const char *)sqlite3_column_text(st, 2),
                        (const char *)sqlite3_column_text(st, 3), sqlite3_column_int64(st, 4), took,
                        line[0] ? line : "-");
            }
            n++;
        }
        if (json)
            fputs(n ? "\n]\n" : "]\n", out);
        if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
            fprintf(err, "wqrun: history: cannot read %s: %s\n", db, sqlite3_errmsg(conn));
            r = 1;
        }
    }
    sqlite3_finalize(st);
    sqlite3_close(conn);
    close(fd);
    return r;
}
