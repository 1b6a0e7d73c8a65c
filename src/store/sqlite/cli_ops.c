/*
 * `wqrun pause|resume|remove|cancel|retry|purge-dead|items|show|dead` (SPEC 7.5):
 * operating a queue from the command line, with or without a runner.
 *
 * Ownership is the state file's lock, as for a runner. When no runner
 * holds it, the command takes it, applies the change with SQL in one
 * transaction and lets go (a runner starting in that instant is refused
 * as by any other owner). When a runner holds it, the command writes a
 * row into the commands table and waits up to 5 s for the runner's
 * outcome (commands.c); if the runner goes away meanwhile, the command
 * takes the lock and applies its row itself, unless the runner committed
 * it first: either way the change is made once. `items`, `show` and
 * `dead` only read: the file, which a runner keeps current within its
 * group-commit window (an acknowledged add is in it).
 */
#include "store/sqlite/cli.h"

#include "store/cli_ops.h"

#include "engine/common.h"
#include "store/sqlite/store_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define WAIT_MS 5000 /* how long a command waits for a runner's outcome */
#define POLL_MS 20

/* ---- SQL helpers ---- */

static int exec(sqlite3 *db, const char *sql)
{
    return sqlite3_exec(db, sql, NULL, NULL, NULL);
}

/* Prepares sql and binds ?1 = queue, ?2 = key (when given). NULL on error. */
static sqlite3_stmt *prep(sqlite3 *db, const char *sql, const wq_cli_args *a)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return NULL;
    if (sqlite3_bind_parameter_count(st) >= 1)
        sqlite3_bind_text(st, 1, a->queue, -1, SQLITE_STATIC);
    if (sqlite3_bind_parameter_count(st) >= 2 && a->key)
        sqlite3_bind_text(st, 2, a->key, -1, SQLITE_STATIC);
    return st;
}

/* Runs sql (queue, key bound) and returns its first column as an integer, or -1 on error. */
static int64_t one_int(sqlite3 *db, const char *sql, const wq_cli_args *a)
{
    sqlite3_stmt *st = prep(db, sql, a);
    if (!st)
        return -1;
    int rc = sqlite3_step(st);
    int64_t v = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : rc == SQLITE_DONE ? 0 : -1;
    sqlite3_finalize(st);
    return v;
}

/* Runs a statement that returns no rows; the number of rows it changed, or -1. */
static int64_t change(sqlite3 *db, const char *sql, const wq_cli_args *a)
{
    sqlite3_stmt *st = prep(db, sql, a);
    if (!st)
        return -1;
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? sqlite3_changes64(db) : -1;
}

static const char queue_known_sql[] = WQ_SQL_QUEUE_KNOWN;

/*
 * Applies the command to a file nobody else owns (the caller holds the
 * lock), inside the caller's transaction. 1 done, 0 refused, -1 SQLite
 * failed; msg says what happened.
 */
static int apply_direct(sqlite3 *db, const char *path, const wq_cli_args *a, char *msg, size_t len)
{
    char key[WQ_SHOWN_KEY] = "";
    if (a->key)
        wq_show_key(key, a->key, strlen(a->key));
    int64_t known = one_int(db, queue_known_sql, a);
    if (known < 0)
        return -1;
    if (!known) {
        snprintf(msg, len, "no queue '%s' in %s", a->queue, path);
        return 0;
    }
    static const char requeue_sql[] =
        "INSERT INTO items(queue, key, payload, state, ready_at, priority, seq, added_at,"
        " updated_at, enqueued_at)"
        " SELECT queue, key, payload, 'queued', NULL, 0,"
        "  (SELECT coalesce(max(seq), 0) FROM items) + row_number() OVER (ORDER BY failed_at, key),"
        "  " WQ_SQL_NOW ", " WQ_SQL_NOW ", " WQ_SQL_NOW
        " FROM dead WHERE queue = ?1 AND (?2 IS NULL OR key = ?2) ORDER BY failed_at, key"
        " ON CONFLICT (queue, key) DO UPDATE SET payload = excluded.payload, state = 'queued',"
        "  seq = iif(items.state = 'waiting', excluded.seq, items.seq),"
        "  added_at = iif(items.state = 'waiting', excluded.added_at, items.added_at),"
        "  updated_at = excluded.updated_at";
    int64_t n;
    switch (a->op) {
    case WQ_CLI_PAUSE:
    case WQ_CLI_RESUME: {
        int pause = a->op == WQ_CLI_PAUSE;
        int64_t was = one_int(db, "SELECT coalesce(max(paused), 0) FROM queues WHERE name = ?1", a);
        if (was < 0 ||
            change(db,
                   pause ? "INSERT INTO queues(name, seen_at, paused) VALUES (?1, NULL, 1)"
                           " ON CONFLICT (name) DO UPDATE SET paused = 1"
                         : "UPDATE queues SET paused = 0 WHERE name = ?1",
                   a) < 0)
            return -1;
        if ((was != 0) == pause)
            snprintf(msg, len, "queue '%s' was %s already", a->queue, pause ? "paused" : "running");
        else
            snprintf(msg, len, "%s queue '%s'", pause ? "paused" : "resumed", a->queue);
        return 1;
    }
    case WQ_CLI_REMOVE:
        n = change(db, "DELETE FROM items WHERE queue = ?1 AND key = ?2", a);
        if (n < 0 || change(db, "DELETE FROM failures WHERE queue = ?1 AND key = ?2", a) < 0)
            return -1;
        if (n == 0) {
            snprintf(msg, len, "no queued or delayed item '%s' in queue '%s'", key, a->queue);
            return 0;
        }
        snprintf(msg, len, "removed '%s' from queue '%s'", key, a->queue);
        return 1;
    case WQ_CLI_CANCEL:
        n = one_int(db, "SELECT count(*) FROM items WHERE queue = ?1 AND key = ?2", a);
        if (n < 0)
            return -1;
        if (n)
            snprintf(msg, len, "'%s' is not processing in queue '%s' (no runner holds %s)", key,
                     a->queue, path);
        else
            snprintf(msg, len, "no item '%s' in queue '%s'", key, a->queue);
        return 0;
    case WQ_CLI_RETRY:
    case WQ_CLI_RETRY_ALL:
        if (change(db, requeue_sql, a) < 0 ||
            change(db,
                   "DELETE FROM failures WHERE queue = ?1 AND key IN"
                   " (SELECT key FROM dead WHERE queue = ?1 AND (?2 IS NULL OR key = ?2))",
                   a) < 0 ||
            (n = change(db, "DELETE FROM dead WHERE queue = ?1 AND (?2 IS NULL OR key = ?2)", a)) <
                0)
            return -1;
        if (a->op == WQ_CLI_RETRY_ALL) {
            snprintf(msg, len, "re-queued %lld dead letter%s of queue '%s'", (long long)n,
                     n == 1 ? "" : "s", a->queue);
            return 1;
        }
        if (n == 0) {
            snprintf(msg, len, "no dead letter '%s' in queue '%s'", key, a->queue);
            return 0;
        }
        snprintf(msg, len, "re-queued dead letter '%s' of queue '%s'", key, a->queue);
        return 1;
    case WQ_CLI_PURGE:
        n = change(db, "DELETE FROM dead WHERE queue = ?1", a);
        if (n < 0)
            return -1;
        snprintf(msg, len, "purged %lld dead letter%s of queue '%s'", (long long)n,
                 n == 1 ? "" : "s", a->queue);
        return 1;
    default: return -1;
    }
}

/* Takes the lock on fd, applies the command (and marks row id, when > 0) in one transaction,
 * lets the lock go. 1 done, 0 refused, -1 failed (message in msg). */
static int own_and_apply(sqlite3 *db, int fd, const char *path, const wq_cli_change *c, int64_t id,
                         char *msg, size_t len)
{
    int r = -1;
    if (exec(db, "BEGIN IMMEDIATE") != SQLITE_OK) {
        snprintf(msg, len, "cannot write %s: %s", path, sqlite3_errmsg(db));
        return -1;
    }
    int64_t fresh = 1;
    if (id > 0) {
        sqlite3_stmt *st;
        fresh = -1;
        if (sqlite3_prepare_v2(db,
                               "SELECT state = 'new', result, state = 'done' FROM commands"
                               " WHERE id = ?1",
                               -1, &st, NULL) == SQLITE_OK) {
            sqlite3_bind_int64(st, 1, id);
            if (sqlite3_step(st) == SQLITE_ROW) {
                fresh = sqlite3_column_int(st, 0);
                if (!fresh) { /* a runner applied it before it went away */
                    const unsigned char *t = sqlite3_column_text(st, 1);
                    snprintf(msg, len, "%s", t ? (const char *)t : "");
                    r = sqlite3_column_int(st, 2);
                }
            } else {
                snprintf(msg, len, "command %lld is no longer in the commands table",
                         (long long)id);
                fresh = 0;
                r = 0;
            }
            sqlite3_finalize(st);
        }
    }
    if (fresh > 0) {
        r = c->apply(db, path, id, c->ud, msg, len);
        if (r >= 0 && r != 2 && id > 0) {
            sqlite3_stmt *st;
            if (sqlite3_prepare_v2(
                    db,
                    "UPDATE commands SET state = ?2, result = ?3, done_at = " WQ_SQL_NOW
                    " WHERE id = ?1",
                    -1, &st, NULL) != SQLITE_OK) {
                r = -1;
            } else {
                sqlite3_bind_int64(st, 1, id);
                sqlite3_bind_text(st, 2, r ? "done" : "failed", -1, SQLITE_STATIC);
                sqlite3_bind_text(st, 3, msg, -1, SQLITE_TRANSIENT);
                if (sqlite3_step(st) != SQLITE_DONE)
                    r = -1;
                sqlite3_finalize(st);
            }
        }
    }
    if (fresh < 0 || r < 0 || exec(db, "COMMIT") != SQLITE_OK) {
        snprintf(msg, len, "cannot write %s: %s", path, sqlite3_errmsg(db));
        exec(db, "ROLLBACK");
        r = -1;
    }
    flock(fd, LOCK_UN);
    return r;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {0, (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Writes the command row for the runner; its id, or -1. */
static int64_t insert_command(sqlite3 *db, const wq_cli_change *c)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "INSERT INTO commands(queue, op, key) VALUES (?1, ?2, ?3)", -1, &st,
                           NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_text(st, 1, c->queue, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, c->op, -1, SQLITE_STATIC);
    if (c->key)
        sqlite3_bind_text64(st, 3, c->key, c->keylen, SQLITE_STATIC, SQLITE_UTF8);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? sqlite3_last_insert_rowid(db) : -1;
}

/* The row's outcome once a runner applied it: 1 done, 0 failed, -1 still new, -2 error. */
static int outcome(sqlite3 *db, int64_t id, char *msg, size_t len)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT state, result FROM commands WHERE id = ?1", -1, &st, NULL) !=
        SQLITE_OK)
        return -2;
    sqlite3_bind_int64(st, 1, id);
    int r = -2;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        const char *state = (const char *)sqlite3_column_text(st, 0);
        const char *text = (const char *)sqlite3_column_text(st, 1);
        if (state && strcmp(state, "new") == 0) {
            r = -1;
        } else {
            r = state && strcmp(state, "done") == 0;
            snprintf(msg, len, "%s", text ? text : (state ? state : "?"));
        }
    } else if (rc == SQLITE_DONE) {
        snprintf(msg, len, "command %lld is no longer in the commands table", (long long)id);
    } else if (rc == SQLITE_BUSY) {
        r = -1; /* try again */
    }
    sqlite3_finalize(st);
    return r;
}

static void forget_command(sqlite3 *db, int64_t id)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "DELETE FROM commands WHERE id = ?1", -1, &st, NULL) != SQLITE_OK)
        return;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_step(st); /* the outcome was printed: the row is history nobody needs */
    sqlite3_finalize(st);
}

int wq_store_cli_change(sqlite3 *db, int fd, const char *path, const wq_cli_change *c, FILE *out,
                        FILE *err)
{
    char msg[1024] = "";
    int r;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
        r = own_and_apply(db, fd, path, c, 0, msg, sizeof msg);
    } else {
        int64_t id = insert_command(db, c);
        if (id < 0) {
            fprintf(err, "wqrun: %s: cannot write the command into %s: %s\n", c->cmd, path,
                    sqlite3_errmsg(db));
            return 1;
        }
        double deadline = mono_s() + WAIT_MS / 1000.0;
        for (;;) {
            r = outcome(db, id, msg, sizeof msg);
            if (r >= 0) {
                forget_command(db, id);
                break;
            }
            if (r == -2) {
                fprintf(err, "wqrun: %s: cannot read %s: %s\n", c->cmd, path, sqlite3_errmsg(db));
                return 1;
            }
            /* The runner went away before answering: apply it here, unless it did. */
            if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
                r = own_and_apply(db, fd, path, c, id, msg, sizeof msg);
                if (r >= 0)
                    forget_command(db, id);
                break;
            }
            if (mono_s() > deadline) {
                fprintf(err,
                        "wqrun: %s: the runner did not answer within %d s; the command (id %lld "
                        "in the commands table of %s) stays there and is applied when the "
                        "runner gets to it\n",
                        c->cmd, WAIT_MS / 1000, (long long)id, path);
                return 1;
            }
            sleep_ms(POLL_MS);
        }
    }
    if (r < 0) {
        fprintf(err, "wqrun: %s: %s\n", c->cmd, msg);
        return 1;
    }
    if (r == 0) {
        fprintf(err, "wqrun: %s: %s\n", c->cmd, msg);
        return 1;
    }
    fprintf(out, "%s\n", msg);
    return 0;
}

/* A change of an operator command (pause, remove, ...): apply_direct when nobody owns the file. */
static int apply_op(sqlite3 *db, const char *path, int64_t id, void *ud, char *msg, size_t len)
{
    (void)id;
    return apply_direct(db, path, ud, msg, len);
}

static int run_change(sqlite3 *db, int fd, const char *path, const wq_cli_args *a, FILE *out,
                      FILE *err)
{
    wq_cli_change c = {
        a->cmd,   a->queue, wq_cli_op_name(a->op), a->key, a->key ? strlen(a->key) : 0,
        apply_op, (void *)a};
    return wq_store_cli_change(db, fd, path, &c, out, err);
}

/* ---- items ---- */

/* 0 when the file knows the queue, else 1 after saying so. */
static int known_or_say(sqlite3 *db, const char *path, const wq_cli_args *a, FILE *err)
{
    int64_t known = one_int(db, queue_known_sql, a);
    if (known < 0)
        fprintf(err, "wqrun: %s: cannot read %s: %s\n", a->cmd, path, sqlite3_errmsg(db));
    else if (known == 0)
        fprintf(err, "wqrun: %s: no queue '%s' in %s\n", a->cmd, a->queue, path);
    return known <= 0;
}

/* The dead letters (`wqrun dead`) in the columns of an items listing (see wq_cli_item); %s:
 * the traceback column (NULL before version 6). */
static const char dead_sql[] =
    "SELECT key, NULL, NULL, attempts, datetime(failed_at, 'unixepoch'), NULL,"
    " json_object('key', key, 'payload', CASE WHEN payload IS NULL THEN NULL"
    "  WHEN json_valid(payload) THEN json(payload) ELSE payload END,"
    "  'error', error, 'attempts', attempts, 'failed_at', failed_at, 'traceback', %s), error, %s"
    " FROM dead WHERE queue = ?1 AND ?2 IS NULL ORDER BY failed_at, key LIMIT ?3";

/* `wqrun items`, and `wqrun dead` (or items --state dead). */
static int list_items(sqlite3 *db, const char *path, const wq_cli_args *a, FILE *out, FILE *err)
{
    int v2 = wq_schema_version(db) >= 2; /* items.grp is new in version 2 */
    int v7 = wq_schema_version(db) >= 7; /* items.progress in version 7 */
    sqlite3_stmt *st;
    char sql[1536];
    if (a->op == WQ_CLI_DEAD) {
        const char *tb = wq_schema_version(db) >= 6 ? "traceback" : "NULL";
        snprintf(sql, sizeof sql, dead_sql, tb, tb);
    } else
        snprintf(sql, sizeof sql,
                 "SELECT i.key, i.state, i.priority, coalesce(f.requeues, 0) + 1,"
                 " datetime(i.ready_at, 'unixepoch'), i.payload,"
                 " json_set(json_object('key', i.key, 'payload', CASE WHEN i.payload IS NULL"
                 "  THEN NULL WHEN json_valid(i.payload) THEN json(i.payload) ELSE i.payload END,"
                 "  'state', i.state, 'priority', i.priority, 'group', %s,"
                 "  'ready_at', i.ready_at, 'attempt', coalesce(f.requeues, 0) + 1,"
                 "  'last_error', f.last_error), CASE WHEN %s IS NOT NULL THEN '$.progress' END,"
                 "  json(%s)), f.last_error, NULL, %s"
                 " FROM items AS i LEFT JOIN failures AS f ON f.queue = i.queue AND f.key = i.key"
                 " WHERE i.queue = ?1 AND (?2 IS NULL OR i.state = ?2)"
                 " ORDER BY i.state = 'waiting' AND i.ready_at IS NOT NULL, i.priority DESC, i.seq,"
                 "  i.ready_at LIMIT ?3",
                 v2 ? "i.grp" : "NULL", v7 ? "i.progress" : "NULL", v7 ? "i.progress" : "NULL",
                 v7 ? "i.progress" : "NULL");
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        fprintf(err, "wqrun: %s: cannot read %s: %s\n", a->cmd, path, sqlite3_errmsg(db));
        return 1;
    }
    sqlite3_bind_text(st, 1, a->queue, -1, SQLITE_STATIC);
    if (a->state)
        sqlite3_bind_text(st, 2, a->state, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, a->limit + 1);
    int rc;
    long n = 0;
    wq_cli_items_head(a, out);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
#define COL(c) ((const char *)sqlite3_column_text(st, c))
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
        if (wq_cli_items_row(a, out, n, &it))
            break;
        n++;
    }
    wq_cli_items_tail(a, out, n);
    int failed = rc != SQLITE_DONE && rc != SQLITE_ROW;
    if (failed)
        fprintf(err, "wqrun: %s: cannot read %s: %s\n", a->cmd, path, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return failed;
}

/* ---- one key ---- */

/* A payload or result column as a JSON value. */
#define JSON_VALUE(c)                                                                              \
    "CASE WHEN " c " IS NULL THEN NULL WHEN json_valid(" c ") THEN json(" c ")"                    \
    " ELSE " c " END"
#define UTC(c) "datetime(" c ", 'unixepoch') || ' UTC'"

/* What the file holds of the key: pending wins, else the later of its done memory and its dead
 * letter (as the runner answers q:item). A file of version 1 has no done memory nor groups. */
/* A flow's node of the key: blocked (rank 0) or its last finished one (rank 2, version 5). */
#define FLOW_UNION                                                                                 \
    "UNION ALL SELECT CASE WHEN n.state = 'blocked' THEN 0 ELSE 2 END, n.state, n.key,"            \
    " n.payload, n.priority, n.grp, NULL, NULL, NULL,"                                             \
    " CASE WHEN n.state = 'done' THEN n.finished_at END, n.result, n.error, NULL,"                 \
    " CASE WHEN n.state = 'dead' THEN n.finished_at END,"                                          \
    " CASE WHEN n.state = 'blocked' THEN n.waits END, n.flow"                                      \
    " FROM (SELECT * FROM flow_nodes WHERE queue = ?1 AND key = ?2"                                \
    " AND state IN ('blocked', 'done', 'dead') ORDER BY state = 'blocked' DESC,"                   \
    " finished_at DESC LIMIT 1) AS n"
/* Else its last finished run (rank 3, version 6): done, dead, cancelled or removed. */
#define HISTORY_UNION                                                                              \
    " UNION ALL SELECT 3, h.state, h.key, NULL, NULL, NULL, NULL, NULL, NULL,"                     \
    " CASE WHEN h.state = 'done' THEN h.finished_at END, h.result, h.error,"                       \
    " CASE WHEN h.state <> 'done' THEN h.attempts END,"                                            \
    " CASE WHEN h.state <> 'done' THEN h.finished_at END, NULL, NULL"                              \
    " FROM (SELECT * FROM history WHERE queue = ?1 AND key = ?2 ORDER BY id DESC LIMIT 1) AS h"

static int show_key(sqlite3 *db, const char *path, const wq_cli_args *a, FILE *out, FILE *err)
{
    static const char flows_only[] = FLOW_UNION, flows_history[] = FLOW_UNION HISTORY_UNION;
    int version = wq_schema_version(db);
    char sql[6144];
    /* pending (rank 0), else the later of a dead letter and a done memory (rank 1), else a
     * flow's node (rank 0 or 2), else the key's last finished run (rank 3) */
    snprintf(
        sql, sizeof sql,
        "SELECT state, key, payload, priority, grp, attempt, last_error, " UTC("ready_at") ", " UTC("finished_at") ", result, error, attempts, " UTC(
            "failed_at") ","
                         " CASE WHEN state = 'blocked' THEN json_object('key', key, 'state', state,"
                         "  'payload', " JSON_VALUE(
                             "payload") ", 'priority', priority, 'group', grp,"
                                        "  'waits', waits, 'flow', flow)"
                                        " WHEN rank = 0 THEN json_object('key', key, 'state', "
                                        "state,"
                                        "  'payload', " JSON_VALUE(
                                            "payload") ", 'priority', priority, 'group', grp,"
                                                       "  'ready_at', ready_at, 'attempt', "
                                                       "attempt, 'last_error', last_error)"
                                                       " WHEN state = 'done' THEN "
                                                       "json_object('key', key, 'state', state,"
                                                       "  'finished_at', finished_at, "
                                                       "'result', " JSON_VALUE(
                                                           "result") ")"
                                                                     " ELSE json_object('key', "
                                                                     "key, 'state', state, "
                                                                     "'payload', " JSON_VALUE(
                                                                         "payload") ","
                                                                                    "  'error', "
                                                                                    "error, "
                                                                                    "'attempts', "
                                                                                    "attempts, "
                                                                                    "'failed_at', "
                                                                                    "failed_at) "
                                                                                    "END, waits, "
                                                                                    "flow"
                                                                                    " FROM (SELECT "
                                                                                    "0 AS rank, "
                                                                                    "i.state, "
                                                                                    "i.key, "
                                                                                    "i.payload, "
                                                                                    "i.priority, "
                                                                                    "%s AS grp,"
                                                                                    "  "
                                                                                    "coalesce(f."
                                                                                    "requeues, 0) "
                                                                                    "+ 1 AS "
                                                                                    "attempt, "
                                                                                    "f.last_error, "
                                                                                    "i.ready_at,"
                                                                                    "  NULL AS "
                                                                                    "finished_at, "
                                                                                    "NULL AS "
                                                                                    "result, NULL "
                                                                                    "AS error, "
                                                                                    "NULL AS "
                                                                                    "attempts,"
                                                                                    "  NULL AS "
                                                                                    "failed_at, "
                                                                                    "NULL AS "
                                                                                    "waits, NULL "
                                                                                    "AS flow"
                                                                                    "  FROM items "
                                                                                    "AS i LEFT "
                                                                                    "JOIN failures "
                                                                                    "AS f ON "
                                                                                    "f.queue = "
                                                                                    "i.queue AND "
                                                                                    "f.key = i.key"
                                                                                    "  WHERE "
                                                                                    "i.queue = ?1 "
                                                                                    "AND i.key = ?2"
                                                                                    " %s"
                                                                                    " UNION ALL "
                                                                                    "SELECT 1, "
                                                                                    "'dead', key, "
                                                                                    "payload, "
                                                                                    "NULL, NULL, "
                                                                                    "NULL, NULL, "
                                                                                    "NULL, NULL, "
                                                                                    "NULL,"
                                                                                    "  error, "
                                                                                    "attempts, "
                                                                                    "failed_at, "
                                                                                    "NULL, NULL "
                                                                                    "FROM dead "
                                                                                    "WHERE queue = "
                                                                                    "?1 AND key = "
                                                                                    "?2"
                                                                                    " %s)"
                                                                                    " ORDER BY "
                                                                                    "rank, "
                                                                                    "coalesce("
                                                                                    "failed_at, "
                                                                                    "finished_at) "
                                                                                    "DESC LIMIT 1",
        version >= 2 ? "i.grp" : "NULL",
        version >= 2 ? "UNION ALL SELECT 1, 'done', key, NULL, NULL, NULL, NULL, NULL, NULL,"
                       " finished_at, result, NULL, NULL, NULL, NULL, NULL FROM done"
                       " WHERE queue = ?1 AND key = ?2"
                     : "",
        version >= 6   ? flows_history
        : version >= 5 ? flows_only
                       : "");
    sqlite3_stmt *st = prep(db, sql, a);
    int rc = st ? sqlite3_step(st) : SQLITE_ERROR;
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        fprintf(err, "wqrun: show: cannot read %s: %s\n", path, sqlite3_errmsg(db));
        sqlite3_finalize(st);
        return 1;
    }
#define COL(c) ((const char *)sqlite3_column_text(st, c))
    wq_cli_key k = {COL(0), COL(1),  COL(2),  COL(3),  COL(4),  COL(5),  COL(6),  COL(7), COL(8),
                    COL(9), COL(10), COL(11), COL(12), COL(13), COL(14), COL(15), NULL,   NULL};
#undef COL
    /* A dead letter's traceback (version 6), in the text and in the JSON object. */
    sqlite3_stmt *tb = NULL;
    if (rc == SQLITE_ROW && k.state && strcmp(k.state, "dead") == 0 && !k.flow && version >= 6 &&
        sqlite3_prepare_v2(db,
                           "SELECT traceback, json_set(?3, '$.traceback', traceback) FROM dead"
                           " WHERE queue = ?1 AND key = ?2",
                           -1, &tb, NULL) == SQLITE_OK) {
        sqlite3_bind_text(tb, 1, a->queue, -1, SQLITE_STATIC);
        sqlite3_bind_text(tb, 2, a->key, -1, SQLITE_STATIC);
        sqlite3_bind_text(tb, 3, k.json, -1, SQLITE_STATIC);
        if (sqlite3_step(tb) == SQLITE_ROW) {
            k.traceback = (const char *)sqlite3_column_text(tb, 0);
            k.json = (const char *)sqlite3_column_text(tb, 1);
        }
    }
    /* A processing item's progress (version 7), in the text and in the JSON object. */
    sqlite3_stmt *pr = NULL;
    if (rc == SQLITE_ROW && k.state && strcmp(k.state, "processing") == 0 && version >= 7 &&
        sqlite3_prepare_v2(db,
                           "SELECT progress, json_set(?3, '$.progress', json(progress)) FROM items"
                           " WHERE queue = ?1 AND key = ?2 AND progress IS NOT NULL",
                           -1, &pr, NULL) == SQLITE_OK) {
        sqlite3_bind_text(pr, 1, a->queue, -1, SQLITE_STATIC);
        sqlite3_bind_text(pr, 2, a->key, -1, SQLITE_STATIC);
        sqlite3_bind_text(pr, 3, k.json, -1, SQLITE_STATIC);
        if (sqlite3_step(pr) == SQLITE_ROW) {
            k.progress = (const char *)sqlite3_column_text(pr, 0);
            k.json = (const char *)sqlite3_column_text(pr, 1);
        }
    }
    int r = wq_cli_show(a, out, err, rc == SQLITE_ROW ? &k : NULL);
    sqlite3_finalize(pr);
    sqlite3_finalize(tb);
    sqlite3_finalize(st);
    return r;
}

/* ---- entry ---- */

int wq_store_cli_open(const char *cmd, const char *path, sqlite3 **out, int *fd, int *ours,
                      FILE *err)
{
    struct stat sb;
    if (stat(path, &sb) < 0) {
        fprintf(err, "wqrun: %s: no state file at %s: %s\n", cmd, path, strerror(errno));
        return 1;
    }
    char msg[1024];
    if (wq_schema_check(path, msg, sizeof msg) < 0) {
        fprintf(err, "wqrun: %s: %s\n", cmd, msg);
        return 1;
    }
    if (wq_store_open_here(path)) { /* a process that runs it: only from tests */
        fprintf(err, "wqrun: %s: this process runs %s\n", cmd, path);
        return 1;
    }
    /* The lock's descriptor first, closed last: closing a descriptor of the file drops every
     * POSIX lock this process has on it, SQLite's included. */
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0) {
        fprintf(err, "wqrun: %s: cannot open %s: %s\n", cmd, path, strerror(errno));
        return 1;
    }
    sqlite3 *db;
    if (wq_schema_open_ro(path, &db, msg, sizeof msg) < 0) {
        fprintf(err, "wqrun: %s: %s\n", cmd, msg);
        close(*fd);
        return 1;
    }
    sqlite3_stmt *st;
    *ours = 0;
    if (sqlite3_prepare_v2(db, "PRAGMA application_id", -1, &st, NULL) == SQLITE_OK) {
        *ours = sqlite3_step(st) == SQLITE_ROW &&
                (uint32_t)sqlite3_column_int(st, 0) == WQ_STORE_APP_ID;
        sqlite3_finalize(st);
    }
    *out = db;
    return 0;
}

int wq_store_cli_op_io(const char *cmd, int argc, char **argv, FILE *out, FILE *err)
{
    wq_cli_args a;
    int done = 0;
    int r = wq_cli_parse(cmd, argc, argv, &a, out, err, &done);
    if (r || done)
        return r;
    sqlite3 *db;
    int fd, ours = 0;
    if (wq_store_cli_open(cmd, a.db, &db, &fd, &ours, err) != 0)
        return 1;
    int version = wq_schema_version(db);
    if (!ours) {
        fprintf(err, "wqrun: %s: no queue '%s' in %s (no wqrun state yet)\n", cmd, a.queue, a.db);
        r = 1;
    } else if (a.op == WQ_CLI_ITEMS || a.op == WQ_CLI_SHOW || a.op == WQ_CLI_DEAD) {
        r = known_or_say(db, a.db, &a, err);
        if (r == 0)
            r = a.op == WQ_CLI_SHOW ? show_key(db, a.db, &a, out, err)
                                    : list_items(db, a.db, &a, out, err);
    } else if (version < 2) {
        fprintf(err,
                "wqrun: %s: %s is a state file of version %d; this command needs version 2, "
                "which a runner of this wqrun makes of it when it opens it\n",
                cmd, a.db, version);
        r = 1;
    } else if (sqlite3_db_readonly(db, "main") == 1) {
        fprintf(err, "wqrun: %s: state file %s is not writable\n", cmd, a.db);
        r = 1;
    } else {
        r = run_change(db, fd, a.db, &a, out, err);
    }
    sqlite3_close(db);
    close(fd);
    return r;
}

int wq_store_cli_op(const char *cmd, int argc, char **argv)
{
    return wq_store_cli_op_io(cmd, argc, argv, stdout, stderr);
}
