/*
 * `wqrun add` and `wqrun status`: the state file's command-line side. Both
 * work while a runner owns the file (they never take its lock): add only
 * inserts an inbox row, status only reads. Both refuse a file that is not
 * a wqrun state file, exactly as the runner does, and neither migrates an
 * older one: the runner does, under its lock, so a runner of the older
 * version still working on the file is never given a newer one. The inbox
 * is the same in every version; status reads what the file's version has.
 */
#include "store/sqlite/cli.h"

#include "store/cli_ops.h"

#include "store/sqlite/store_int.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char add_usage[] = "usage: wqrun add --db PATH QUEUE KEY [PAYLOAD] [--after SECONDS] "
                                "[--priority N] [--group GROUP] [--unique|--no-unique] "
                                "[--wait [--timeout SECONDS]]\n";
static const char status_usage[] = "usage: wqrun status --db PATH\n";

static int usage(FILE *err, const char *usage_line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int usage(FILE *err, const char *usage_line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("wqrun: ", err);
    vfprintf(err, fmt, ap);
    fputc('\n', err);
    fputs(usage_line, err);
    va_end(ap);
    return 2;
}

/* Whether a looks like a negative number (a positional, not an option). */
static int negative_number(const char *a)
{
    return a[0] == '-' && ((a[1] >= '0' && a[1] <= '9') || a[1] == '.');
}

/* Whether the file has seen queue (a runner defined it, or it holds its items or dead letters);
 * 1 when it cannot tell (no warning then). */
static int queue_known(sqlite3 *conn, const char *queue)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(conn, WQ_SQL_QUEUE_KNOWN, -1, &st, NULL) != SQLITE_OK)
        return 1;
    sqlite3_bind_text(st, 1, queue, -1, SQLITE_STATIC);
    int known = sqlite3_step(st) != SQLITE_ROW || sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return known;
}

/* Whether the file says queue keeps no history (queues.history = 0, written by its runner from
 * version 8 on): then no run of it can be waited for. */
static int keeps_no_history(sqlite3 *conn, const char *queue)
{
    sqlite3_stmt *st;
    int none = 0;
    if (sqlite3_prepare_v2(conn, "SELECT history = 0 FROM queues WHERE name = ?1", -1, &st, NULL) ==
        SQLITE_OK) {
        sqlite3_bind_text(st, 1, queue, -1, SQLITE_STATIC);
        none = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) == 1;
        sqlite3_finalize(st);
    }
    return none;
}

/* The history's last row id (0: none), before an add that --wait waits for. */
static int64_t last_run(sqlite3 *conn)
{
    sqlite3_stmt *st;
    int64_t id = 0;
    if (sqlite3_prepare_v2(conn, "SELECT coalesce(max(id), 0) FROM history", -1, &st, NULL) ==
        SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            id = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    return id;
}

/*
 * `wqrun add --wait`: the first run of the key that ends after row `since` of the history (the
 * runner writes it in the commit of the outcome), read when the file changes (PRAGMA
 * data_version: a look costs no read of the tables while nothing was committed). Prints the
 * result of a done run; the exit status of wq_cli_wait_end.
 */
static int wait_end(sqlite3 *conn, const char *db, const char *queue, const char *key,
                    int64_t since, double timeout, FILE *out, FILE *err)
{
    sqlite3_stmt *ver = NULL, *st = NULL;
    if (sqlite3_prepare_v2(conn, "PRAGMA data_version", -1, &ver, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(conn,
                           "SELECT state, result, error, attempts FROM history"
                           " WHERE id > ?1 AND queue = ?2 AND key = ?3 ORDER BY id LIMIT 1",
                           -1, &st, NULL) != SQLITE_OK) {
        fprintf(err, "wqrun: add: cannot read %s: %s\n", db, sqlite3_errmsg(conn));
        sqlite3_finalize(ver);
        return 1;
    }
    sqlite3_bind_int64(st, 1, since);
    sqlite3_bind_text(st, 2, queue, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, key, -1, SQLITE_STATIC);
    double start = wq_cli_now();
    int64_t seen = -1;
    int status = -1;
    while (status < 0) {
        int64_t v = sqlite3_step(ver) == SQLITE_ROW ? sqlite3_column_int64(ver, 0) : -2;
        sqlite3_reset(ver);
        if (v != seen) { /* committed since the last look */
            seen = v;
            int rc = sqlite3_step(st);
            if (rc == SQLITE_ROW) {
                wq_cli_end end = {(const char *)sqlite3_column_text(st, 0),
                                  (const char *)sqlite3_column_text(st, 1),
                                  (const char *)sqlite3_column_text(st, 2),
                                  sqlite3_column_int64(st, 3)};
                status = wq_cli_wait_end(queue, key, &end, out, err);
            } else if (rc != SQLITE_DONE && rc != SQLITE_BUSY) {
                fprintf(err, "wqrun: add: cannot read %s: %s\n", db, sqlite3_errmsg(conn));
                status = 1;
            }
            sqlite3_reset(st);
        }
        if (status < 0 && timeout >= 0 && wq_cli_now() - start >= timeout)
            status = wq_cli_wait_timeout_end(queue, key, timeout, err);
        if (status < 0)
            usleep(5000);
    }
    sqlite3_finalize(st);
    sqlite3_finalize(ver);
    return status;
}

int wq_store_cli_add_io(int argc, char **argv, FILE *out, FILE *err)
{
    const char *db = NULL, *after_s = NULL, *prio_s = NULL, *group = NULL, *timeout_s = NULL,
               *pos[3];
    int npos = 0, opts_done = 0, unique = 0, wait = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!opts_done && a[0] == '-' && a[1] && !negative_number(a)) {
            if (strcmp(a, "--") == 0) {
                opts_done = 1;
                continue;
            }
            if (strcmp(a, "--unique") == 0 || strcmp(a, "--no-unique") == 0) {
                unique = a[2] == 'u' ? 1 : -1; /* -1: not unique, whatever the queue says */
                continue;
            }
            if (strcmp(a, "--wait") == 0) {
                wait = 1;
                continue;
            }
            if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
                fputs(add_usage, out);
                return 0;
            }
            int m = wq_cli_option(argc, argv, &i, "--db", &db);
            if (m == 0)
                m = wq_cli_option(argc, argv, &i, "--timeout", &timeout_s);
            if (m == 0)
                m = wq_cli_option(argc, argv, &i, "--after", &after_s);
            if (m == 0)
                m = wq_cli_option(argc, argv, &i, "--priority", &prio_s);
            if (m == 0)
                m = wq_cli_option(argc, argv, &i, "--group", &group);
            if (m < 0)
                return usage(err, add_usage, "add: option %s needs a value", a);
            if (m == 0)
                return usage(err, add_usage, "add: unknown option %s", a);
            continue;
        }
        if (npos == 3)
            return usage(err, add_usage, "add: unexpected argument '%s'", a);
        pos[npos++] = a;
    }
    if (!db)
        return usage(err, add_usage, "add: %s", "--db PATH is required");
    if (!*db)
        return usage(err, add_usage, "add: %s", "--db needs a path");
    if (npos < 2)
        return usage(err, add_usage, "add: %s",
                     npos ? "KEY is missing" : "QUEUE and KEY are missing");
    if (!wq_schema_valid_queue(pos[0], strlen(pos[0])))
        return usage(err, add_usage, "add: bad queue name '%s' (1-64 characters of [A-Za-z0-9_.-])",
                     pos[0]);
    if (group && strlen(group) > WQ_GROUP_MAX)
        return usage(err, add_usage, "add: --group is longer than %d bytes", WQ_GROUP_MAX);
    double after = 0;
    if (after_s) {
        char *end;
        errno = 0;
        after = strtod(after_s, &end);
        if (end == after_s || *end || errno == ERANGE || !isfinite(after))
            return usage(err, add_usage, "add: --after needs a number of seconds, not '%s'",
                         after_s);
    }
    int32_t prio = 0;
    if (prio_s && wq_cli_priority(prio_s, &prio, err, add_usage) < 0)
        return 2;
    double timeout = -1;
    if (timeout_s && wq_cli_wait_timeout(timeout_s, wait, &timeout, err, add_usage) < 0)
        return 2;

    char msg[1024];
    sqlite3 *conn = NULL;
    if (wq_schema_check(db, msg, sizeof msg) < 0 ||
        wq_schema_open_rw(db, 0, &conn, msg, sizeof msg) < 0) {
        fprintf(err, "wqrun: add: %s\n", msg);
        return 1;
    }
    /* An older file is not migrated here (see the top): its inbox lacks the newer columns. */
    int version = wq_schema_version(conn);
    const struct {
        int used;
        const char *option;
        int version;
    } needs[] = {{unique != 0, unique > 0 ? "--unique" : "--no-unique", 4},
                 {prio_s != NULL, "--priority", 3},
                 {group != NULL, "--group", 2},
                 {wait, "--wait", 6}};
    for (size_t i = 0; i < sizeof needs / sizeof *needs; i++) {
        if (!needs[i].used || version >= needs[i].version)
            continue;
        fprintf(err,
                "wqrun: add: %s needs a state file of version %d; %s is of version %d (a runner "
                "of this wqrun migrates it when it opens it)\n",
                needs[i].option, needs[i].version, db, version);
        sqlite3_close(conn);
        return 1;
    }
    if (wait && version >= 8 && keeps_no_history(conn, pos[0])) {
        fprintf(err,
                "wqrun: add: --wait: queue '%s' keeps no history (its script sets history = 0), "
                "so the end of a run cannot be read from %s; nothing was added\n",
                pos[0], db);
        sqlite3_close(conn);
        return 2;
    }
    /* PAYLOAD is kept as written when it is JSON, else stored as a JSON string. Without a group,
     * a priority or --unique, the row every version's inbox has room for. */
    char sql[512];
    snprintf(sql, sizeof sql,
             "INSERT INTO inbox(queue, key, payload, after%s%s%s) VALUES (?1, ?2,"
             " CASE WHEN ?3 IS NULL THEN NULL WHEN json_valid(?3) THEN ?3 ELSE json_quote(?3) END,"
             " ?4%s%s%s)",
             group ? ", grp" : "", prio_s ? ", priority" : "", unique ? ", unique_add" : "",
             group ? ", ?5" : "", prio_s ? ", ?6" : "",
             unique > 0 ? ", 1"
             : unique   ? ", 0"
                        : "");
    sqlite3_stmt *st;
    int64_t since = wait ? last_run(conn) : 0; /* the end waited for is a run after this one */
    int rc = sqlite3_prepare_v2(conn, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(st, 1, pos[0], -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, pos[1], -1, SQLITE_STATIC);
        if (npos > 2)
            sqlite3_bind_text(st, 3, pos[2], -1, SQLITE_STATIC);
        else
            sqlite3_bind_null(st, 3);
        if (after_s)
            sqlite3_bind_double(st, 4, after);
        else
            sqlite3_bind_null(st, 4);
        if (group)
            sqlite3_bind_text(st, 5, group, -1, SQLITE_STATIC);
        if (prio_s)
            sqlite3_bind_int(st, 6, prio);
        rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
        sqlite3_finalize(st);
    }
    int status = 0;
    if (rc != SQLITE_OK) {
        fprintf(err, "wqrun: add: cannot write the inbox of %s: %s\n", db, sqlite3_errmsg(conn));
        status = 1;
    } else if (!queue_known(conn, pos[0])) {
        wq_cli_warn_unknown_queue(err, pos[0], db);
    }
    if (status == 0 && wait)
        status = wait_end(conn, db, pos[0], pos[1], since, timeout, out, err);
    if (sqlite3_close(conn) != SQLITE_OK && status == 0) {
        fprintf(err, "wqrun: add: cannot close %s\n", db);
        status = 1;
    }
    return status;
}

int wq_store_cli_add(int argc, char **argv)
{
    return wq_store_cli_add_io(argc, argv, stdout, stderr);
}

/* ---- trigger ---- */

static const char trigger_usage[] = "usage: wqrun trigger --db PATH QUEUE SCHEDULE\n";

int wq_store_cli_trigger_io(int argc, char **argv, FILE *out, FILE *err)
{
    const char *db = NULL, *pos[2];
    int npos = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(trigger_usage, out);
            return 0;
        }
        int m = wq_cli_option(argc, argv, &i, "--db", &db);
        if (m < 0)
            return usage(err, trigger_usage, "trigger: option %s needs a value", a);
        if (m > 0)
            continue;
        if (a[0] == '-' && a[1])
            return usage(err, trigger_usage, "trigger: unknown option %s", a);
        if (npos == 2)
            return usage(err, trigger_usage, "trigger: unexpected argument '%s'", a);
        pos[npos++] = a;
    }
    if (!db || !*db)
        return usage(err, trigger_usage, "trigger: %s", "--db PATH is required");
    if (npos < 2)
        return usage(err, trigger_usage, "trigger: %s",
                     npos ? "SCHEDULE is missing" : "QUEUE and SCHEDULE are missing");
    char msg[1024];
    sqlite3 *conn = NULL;
    if (wq_schema_check(db, msg, sizeof msg) < 0 ||
        wq_schema_open_rw(db, 0, &conn, msg, sizeof msg) < 0) {
        fprintf(err, "wqrun: trigger: %s\n", msg);
        return 1;
    }
    /* The schedule's add as an inbox row: the runner (or the next start) applies it as any
     * add, through dedup; the schedule's next time is not touched. */
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(conn,
                                "INSERT INTO inbox(queue, key, payload, after)"
                                " SELECT queue, key, payload, NULL FROM schedules"
                                " WHERE queue = ?1 AND name = ?2 RETURNING key",
                                -1, &st, NULL);
    int status = 1;
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(st, 1, pos[0], -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, pos[1], -1, SQLITE_STATIC);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            char shown[WQ_SHOWN_KEY];
            wq_show_key(shown, (const char *)sqlite3_column_text(st, 0),
                        (size_t)sqlite3_column_bytes(st, 0));
            fprintf(out, "queued '%s' of schedule '%s' (queue '%s') in the inbox of %s\n", shown,
                    pos[1], pos[0], db);
            status = 0;
        } else if (rc == SQLITE_DONE) {
            fprintf(err, "wqrun: trigger: no schedule '%s' of queue '%s' in %s\n", pos[1], pos[0],
                    db);
        }
        if (sqlite3_finalize(st) != SQLITE_OK)
            status = 1;
    }
    if (status && rc != SQLITE_ROW && rc != SQLITE_DONE)
        fprintf(err, "wqrun: trigger: cannot write the inbox of %s: %s\n", db,
                sqlite3_errmsg(conn));
    if (sqlite3_close(conn) != SQLITE_OK && status == 0) {
        fprintf(err, "wqrun: trigger: cannot close %s\n", db);
        status = 1;
    }
    return status;
}

/* ---- status ---- */

/* A duration for humans: 4.2s, 42s, 5m12s, 3h04m, 2d03h. */
static void duration(double s, char *buf, size_t len)
{
    if (s < 0)
        s = 0;
    if (s < 10)
        snprintf(buf, len, "%.1fs", s);
    else if (s < 60)
        snprintf(buf, len, "%.0fs", s);
    else if (s < 3600)
        snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else if (s < 86400)
        snprintf(buf, len, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
    else if (s < 1e9)
        snprintf(buf, len, "%dd%02dh", (int)(s / 86400), (int)fmod(s / 3600, 24));
    else
        snprintf(buf, len, "never");
}

enum {
    C_QUEUE,
    C_QUEUED,
    C_PROCESSING,
    C_WAITING,
    C_DEAD,
    C_FAILING,
    C_INBOX,
    C_DONE,
    C_OLDEST,
    C_NEXT,
    NCOLS
};

static const char *const col_names[NCOLS] = {"QUEUE",  "QUEUED",    "PROCESSING", "WAITING",
                                             "DEAD",   "FAILING",   "INBOX",      "DONE",
                                             "OLDEST", "NEXT READY"};

struct row {
    char cell[NCOLS][80];
};

/* %s: the version-2 tables among the names, the done counts and whether the queue is paused
 * (none in a version-1 file). */
static const char status_sql[] =
    "WITH names(queue) AS (SELECT name FROM queues UNION SELECT queue FROM items"
    "  UNION SELECT queue FROM dead UNION SELECT queue FROM failures"
    "  UNION SELECT queue FROM inbox%s),"
    " it AS (SELECT queue, sum(state = 'queued') AS q, sum(state = 'processing') AS p,"
    "  sum(state = 'waiting') AS w, min(iif(state <> 'waiting', added_at, NULL)) AS oldest,"
    "  min(ready_at) AS next FROM items GROUP BY queue),"
    " de AS (SELECT queue, count(*) AS n FROM dead GROUP BY queue),"
    " fa AS (SELECT queue, count(*) AS n FROM failures GROUP BY queue),"
    " ib AS (SELECT queue, count(*) AS n FROM inbox GROUP BY queue),"
    " dn AS (%s)"
    " SELECT names.queue, coalesce(it.q, 0), coalesce(it.p, 0), coalesce(it.w, 0),"
    "  coalesce(de.n, 0), coalesce(fa.n, 0), coalesce(ib.n, 0), it.oldest, it.next,"
    "  EXISTS (SELECT 1 FROM queues WHERE name = names.queue), " WQ_SQL_NOW ","
    "  coalesce(dn.n, 0), %s"
    " FROM names LEFT JOIN it USING (queue) LEFT JOIN de USING (queue)"
    "  LEFT JOIN fa USING (queue) LEFT JOIN ib USING (queue) LEFT JOIN dn USING (queue)"
    " ORDER BY names.queue";

/* Whether a runner holds the file's lock right now (a probe that lets go at once). */
static int runner_active(const char *path)
{
    if (wq_store_open_here(path))
        return 1; /* this process: probing would drop its SQLite locks on close */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int busy = flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK;
    close(fd);
    return busy;
}

/* A Unix time as "YYYY-MM-DD HH:MM:SS" in UTC, or in local time with the zone's abbreviation. */
static void format_time(double t, int local, char *buf, size_t len)
{
    time_t tt = (time_t)floor(t);
    struct tm tm;
    if (!(t > 0 && t < 1e11) || !(local ? localtime_r(&tt, &tm) : gmtime_r(&tt, &tm)) ||
        strftime(buf, len, local ? "%Y-%m-%d %H:%M:%S %Z" : "%Y-%m-%d %H:%M:%S", &tm) == 0)
        snprintf(buf, len, "-");
}

enum { S_QUEUE, S_NAME, S_SPEC, S_TZ, S_NEXT_UTC, S_NEXT_LOCAL, S_LAST, NSCOLS };

static const char *const sched_names[NSCOLS] = {
    "QUEUE", "NAME", "SPEC", "TZ", "NEXT RUN (UTC)", "NEXT RUN (LOCAL)", "LAST RUN (UTC)"};

/* The schedules of a version-2 file, one line each; nothing when there are none. 0 or 1. */
static int print_schedules(sqlite3 *db, const char *path, FILE *out, FILE *err)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db,
                           "SELECT queue, name, spec, tz, next_at, last_at FROM schedules"
                           " ORDER BY queue, name",
                           -1, &st, NULL) != SQLITE_OK) {
        fprintf(err, "wqrun: status: cannot read %s: %s\n", path, sqlite3_errmsg(db));
        return 1;
    }
    struct srow {
        char cell[NSCOLS][128];
    } *rows = NULL;
    size_t nrows = 0, cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (nrows == cap) {
            size_t n = cap ? cap * 2 : 8;
            struct srow *p = realloc(rows, n * sizeof *p);
            if (!p)
                break;
            rows = p;
            cap = n;
        }
        struct srow *r = &rows[nrows++];
        for (int c = 0; c < 4; c++) {
            const unsigned char *t = sqlite3_column_text(st, c);
            snprintf(r->cell[c], sizeof r->cell[c], "%s", t ? (const char *)t : "-");
        }
        if (sqlite3_column_type(st, 4) == SQLITE_NULL) {
            snprintf(r->cell[S_NEXT_UTC], sizeof r->cell[0], "-");
            snprintf(r->cell[S_NEXT_LOCAL], sizeof r->cell[0], "-");
        } else {
            double next = sqlite3_column_double(st, 4);
            format_time(next, 0, r->cell[S_NEXT_UTC], sizeof r->cell[0]);
            format_time(next, 1, r->cell[S_NEXT_LOCAL], sizeof r->cell[0]);
        }
        if (sqlite3_column_type(st, 5) == SQLITE_NULL)
            snprintf(r->cell[S_LAST], sizeof r->cell[0], "never");
        else
            format_time(sqlite3_column_double(st, 5), 0, r->cell[S_LAST], sizeof r->cell[0]);
    }
    int failed = rc != SQLITE_DONE && rc != SQLITE_ROW;
    if (failed)
        fprintf(err, "wqrun: status: cannot read %s: %s\n", path, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    if (!failed && nrows) {
        size_t width[NSCOLS];
        for (int c = 0; c < NSCOLS; c++) {
            width[c] = strlen(sched_names[c]);
            for (size_t i = 0; i < nrows; i++)
                if (strlen(rows[i].cell[c]) > width[c])
                    width[c] = strlen(rows[i].cell[c]);
        }
        fprintf(out, "\nschedules:\n");
        for (size_t i = 0; i <= nrows; i++) {
            for (int c = 0; c < NSCOLS; c++) {
                const char *v = i == 0 ? sched_names[c] : rows[i - 1].cell[c];
                if (c + 1 < NSCOLS)
                    fprintf(out, "%-*s  ", (int)width[c], v);
                else
                    fprintf(out, "%s\n", v);
            }
        }
    }
    free(rows);
    return failed;
}

static int print_status(sqlite3 *db, const char *path, int active, FILE *out, FILE *err)
{
    int version = wq_schema_version(db);
    int v2 = version >= 2;
    char sql[sizeof status_sql + 512];
    snprintf(sql, sizeof sql, status_sql,
             v2 ? " UNION SELECT queue FROM done UNION SELECT queue FROM schedules" : "",
             v2 ? "SELECT queue, count(*) AS n FROM done GROUP BY queue"
                : "SELECT NULL AS queue, 0 AS n WHERE 0",
             v2 ? "coalesce((SELECT paused FROM queues WHERE name = names.queue), 0)" : "0");
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        fprintf(err, "wqrun: status: cannot read %s: %s\n", path, sqlite3_errmsg(db));
        return 1;
    }
    struct row *rows = NULL;
    size_t nrows = 0, cap = 0;
    int64_t inbox_total = 0, inbox_unknown = 0, totals[6] = {0};
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (nrows == cap) {
            size_t n = cap ? cap * 2 : 16;
            struct row *p = realloc(rows, n * sizeof *p);
            if (!p)
                break;
            rows = p;
            cap = n;
        }
        struct row *r = &rows[nrows++];
        double now = sqlite3_column_double(st, 10);
        int known = sqlite3_column_int(st, 9);
        snprintf(r->cell[C_QUEUE], sizeof r->cell[0], "%s%s", sqlite3_column_text(st, 0),
                 sqlite3_column_int(st, 12) ? " (paused)" : "");
        for (int c = 0; c < 6; c++) {
            int64_t v = sqlite3_column_int64(st, 1 + c);
            totals[c] += v;
            snprintf(r->cell[C_QUEUED + c], sizeof r->cell[0], "%lld%s", (long long)v,
                     c == 5 && v && !known ? "*" : "");
        }
        snprintf(r->cell[C_DONE], sizeof r->cell[0], "%lld", sqlite3_column_int64(st, 11));
        inbox_total += sqlite3_column_int64(st, 6);
        if (!known)
            inbox_unknown += sqlite3_column_int64(st, 6);
        if (sqlite3_column_type(st, 7) == SQLITE_NULL)
            snprintf(r->cell[C_OLDEST], sizeof r->cell[0], "-");
        else
            duration(now - sqlite3_column_double(st, 7), r->cell[C_OLDEST], sizeof r->cell[0]);
        if (sqlite3_column_type(st, 8) == SQLITE_NULL) {
            snprintf(r->cell[C_NEXT], sizeof r->cell[0], "-");
        } else {
            double in = sqlite3_column_double(st, 8) - now;
            char d[40];
            duration(in, d, sizeof d);
            if (in <= 0)
                snprintf(r->cell[C_NEXT], sizeof r->cell[0], "due");
            else
                snprintf(r->cell[C_NEXT], sizeof r->cell[0], "in %s", d);
        }
    }
    int failed = rc != SQLITE_DONE && rc != SQLITE_ROW;
    if (failed)
        fprintf(err, "wqrun: status: cannot read %s: %s\n", path, sqlite3_errmsg(db));
    sqlite3_finalize(st);

    char owner[400];
    wq_schema_owner(db, owner, sizeof owner);
    struct stat sb;
    double bytes = stat(path, &sb) == 0 ? (double)sb.st_size : 0;
    char wal[4200];
    snprintf(wal, sizeof wal, "%s-wal", path);
    double wal_bytes = stat(wal, &sb) == 0 ? (double)sb.st_size : 0;
    fprintf(out, "state file  %s (version %d%s, %.1f MB + %.1f MB WAL)\n", path, version,
            version < WQ_STORE_VERSION ? ", migrated when a runner opens it" : "", bytes / 1e6,
            wal_bytes / 1e6);
    if (active)
        fprintf(out, "runner      running: %s\n", owner[0] ? owner : "pid unknown");
    else
        fprintf(out, "runner      none\n");
    if (!failed) {
        size_t width[NCOLS];
        for (int c = 0; c < NCOLS; c++) {
            width[c] = strlen(col_names[c]);
            for (size_t i = 0; i < nrows; i++)
                if (strlen(rows[i].cell[c]) > width[c])
                    width[c] = strlen(rows[i].cell[c]);
        }
        fputc('\n', out);
        if (nrows == 0) {
            fprintf(out, "no queues yet\n");
        } else {
            for (int c = 0; c < NCOLS; c++)
                fprintf(out,
                        c == 0          ? "%-*s"
                        : c >= C_OLDEST ? "  %-*s"
                                        : "  %*s",
                        (int)width[c], col_names[c]);
            fputc('\n', out);
            for (size_t i = 0; i < nrows; i++) {
                for (int c = 0; c < NCOLS; c++)
                    fprintf(out,
                            c == 0          ? "%-*s"
                            : c >= C_OLDEST ? "  %-*s"
                                            : "  %*s",
                            (int)width[c], rows[i].cell[c]);
                fputc('\n', out);
            }
        }
        fprintf(out,
                "\ntotal: %lld queued, %lld processing, %lld waiting, %lld dead, "
                "%lld inbox rows (%lld for queues no runner has defined)\n",
                (long long)totals[0], (long long)totals[1], (long long)totals[2],
                (long long)totals[3], (long long)inbox_total, (long long)inbox_unknown);
        if (inbox_unknown)
            fprintf(out, "* inbox rows for a queue no runner has defined yet: they wait there\n");
        if (v2 && print_schedules(db, path, out, err))
            failed = 1;
    }
    free(rows);
    return failed ? 1 : 0;
}

int wq_store_cli_status_io(int argc, char **argv, FILE *out, FILE *err)
{
    const char *db = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(status_usage, out);
            return 0;
        }
        int m = wq_cli_option(argc, argv, &i, "--db", &db);
        if (m < 0)
            return usage(err, status_usage, "status: option %s needs a value", a);
        if (m == 0 && a[0] == '-')
            return usage(err, status_usage, "status: unknown option %s", a);
        if (m == 0)
            return usage(err, status_usage, "status: unexpected argument '%s'", a);
    }
    if (!db || !*db)
        return usage(err, status_usage, "status: %s", "--db PATH is required");
    struct stat sb;
    if (stat(db, &sb) < 0) {
        fprintf(err, "wqrun: status: no state file at %s: %s\n", db, strerror(errno));
        return 1;
    }
    char msg[1024];
    if (wq_schema_check(db, msg, sizeof msg) < 0) {
        fprintf(err, "wqrun: status: %s\n", msg);
        return 1;
    }
    int active = runner_active(db); /* before our own connection: the probe's close drops locks */
    sqlite3 *conn;
    if (wq_schema_open_ro(db, &conn, msg, sizeof msg) < 0) {
        fprintf(err, "wqrun: status: %s\n", msg);
        return 1;
    }
    int status;
    sqlite3_stmt *st;
    int has_schema = 0;
    if (sqlite3_prepare_v2(conn, "PRAGMA application_id", -1, &st, NULL) == SQLITE_OK) {
        has_schema = sqlite3_step(st) == SQLITE_ROW &&
                     (uint32_t)sqlite3_column_int(st, 0) == WQ_STORE_APP_ID;
        sqlite3_finalize(st);
    }
    if (!has_schema) {
        fprintf(out, "state file  %s: empty (no wqrun state yet)\n", db);
        status = 0;
    } else {
        status = print_status(conn, db, active, out, err);
    }
    sqlite3_close(conn);
    return status;
}

int wq_store_cli_status(int argc, char **argv)
{
    return wq_store_cli_status_io(argc, argv, stdout, stderr);
}
