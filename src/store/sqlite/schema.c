/*
 * The state file's format: recognizing our files (application_id), the
 * schema version (user_version) and one migration per version. A file that
 * is not ours is inspected read-only and never written: garbage, another
 * application's database, a newer version or a damaged state file (PRAGMA
 * quick_check) is refused before anything, even the switch to WAL, touches
 * it.
 */
#include "store/sqlite/store_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fmt(char *err, size_t errlen, int code, const char *f, ...)
    __attribute__((format(printf, 4, 5)));

static int fmt(char *err, size_t errlen, int code, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    if (err && errlen)
        vsnprintf(err, errlen, f, ap);
    va_end(ap);
    return code;
}

/* Version 0 -> 1: the whole schema. Tables are the user interface: see docs/state-file.md. */
static const char schema_v1[] =
    "CREATE TABLE meta(\n"
    "  name TEXT PRIMARY KEY,\n"
    "  value\n"
    ") WITHOUT ROWID;\n"
    "CREATE TABLE queues(\n"
    "  name TEXT PRIMARY KEY,\n"
    "  seen_at REAL\n"
    ") WITHOUT ROWID;\n"
    "CREATE TABLE items(               -- one row per key with anything pending\n"
    "  queue TEXT NOT NULL,\n"
    "  key TEXT NOT NULL,\n"
    "  payload TEXT,                  -- JSON text, or NULL\n"
    "  state TEXT NOT NULL,           -- 'queued', 'processing' or 'waiting'\n"
    "  ready_at REAL,                 -- Unix time of a pending delayed add, else NULL\n"
    "  priority INTEGER NOT NULL DEFAULT 0,\n"
    "  seq INTEGER NOT NULL DEFAULT 0, -- FIFO order within a priority\n"
    "  added_at REAL,                 -- Unix time the key was last queued\n"
    "  updated_at REAL,               -- Unix time of the last write\n"
    "  PRIMARY KEY (queue, key)\n"
    ") WITHOUT ROWID;\n"
    "CREATE TABLE failures(\n"
    "  queue TEXT NOT NULL,\n"
    "  key TEXT NOT NULL,\n"
    "  requeues INTEGER NOT NULL,     -- the queue's failure count for the key\n"
    "  last_error TEXT,\n"
    "  updated_at REAL,\n"
    "  PRIMARY KEY (queue, key)\n"
    ") WITHOUT ROWID;\n"
    "CREATE TABLE dead(\n"
    "  queue TEXT NOT NULL,\n"
    "  key TEXT NOT NULL,\n"
    "  payload TEXT,\n"
    "  error TEXT,\n"
    "  attempts INTEGER NOT NULL,     -- failed runs\n"
    "  failed_at REAL,\n"
    "  PRIMARY KEY (queue, key)\n"
    ") WITHOUT ROWID;\n"
    "CREATE TABLE inbox(               -- any process may insert; the runner moves rows to queues\n"
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,\n"
    "  queue TEXT NOT NULL,\n"
    "  key TEXT NOT NULL,\n"
    "  payload TEXT,                  -- JSON text; other text arrives as a JSON string\n"
    "  after REAL,                    -- delay in seconds from created_at; NULL: none\n"
    "  created_at REAL DEFAULT " WQ_SQL_NOW "\n"
    ");\n"
    "CREATE VIEW pending AS\n"
    "SELECT i.queue AS queue, i.key AS key, i.state AS state, i.priority AS priority,\n"
    "  i.payload AS payload,\n"
    "  round(i.ready_at - " WQ_SQL_NOW ", 3) AS ready_in,\n"
    "  datetime(i.ready_at, 'unixepoch') AS ready_at,\n"
    "  round(" WQ_SQL_NOW " - i.added_at, 3) AS age,\n"
    "  coalesce(f.requeues, 0) AS requeues, f.last_error AS last_error\n"
    "FROM items AS i LEFT JOIN failures AS f ON f.queue = i.queue AND f.key = i.key\n"
    "ORDER BY i.queue, i.state = 'waiting' AND i.ready_at IS NOT NULL, i.priority DESC, i.seq;\n"
    "INSERT INTO meta(name, value) VALUES ('created_at', " WQ_SQL_NOW ");\n";

/*
 * Version 1 -> 2 (SPEC section 7): the job runner's memory, paused queues
 * and the operators' commands table (7.5). Rows of a
 * version-1 file get added_at as their enqueued_at: version 1 did not
 * record the first add, and added_at (when the key was last queued; for a
 * delayed row, when the delay was set) is the closest it kept, never
 * earlier than the real first add. A new file runs both steps in one
 * transaction, so it is never seen at version 1 and has exactly the schema
 * of a migrated one.
 */
static const char v1_to_v2[] =
    "ALTER TABLE items ADD COLUMN enqueued_at REAL; -- Unix time the pending item was first added\n"
    "ALTER TABLE items ADD COLUMN grp TEXT;          -- its group, or NULL\n"
    "ALTER TABLE inbox ADD COLUMN grp TEXT;          -- the item's group, or NULL\n"
    "UPDATE items SET enqueued_at = added_at;\n"
    "CREATE TABLE done(                -- keys whose handler succeeded, remembered for keep_done\n"
    "  queue TEXT NOT NULL,\n"
    "  key TEXT NOT NULL,\n"
    "  finished_at REAL NOT NULL,     -- Unix time the handler succeeded\n"
    "  result TEXT,                   -- what the handler returned (JSON text), or NULL\n"
    "  PRIMARY KEY (queue, key)\n"
    ") WITHOUT ROWID;\n"
    "CREATE TABLE schedules(           -- q:schedule(name, spec, opts)\n"
    "  queue TEXT NOT NULL,\n"
    "  name TEXT NOT NULL,\n"
    "  spec TEXT NOT NULL,            -- cron expression, @daily, @every 5m ...\n"
    "  key TEXT NOT NULL,             -- the key each run adds\n"
    "  payload TEXT,                  -- JSON text, or NULL\n"
    "  next_at REAL,                  -- Unix time of the next run\n"
    "  last_at REAL,                  -- Unix time of the last run, NULL before the first\n"
    "  tz TEXT NOT NULL DEFAULT 'utc', -- 'utc' or 'local'\n"
    "  catch_up TEXT NOT NULL DEFAULT 'once', -- after downtime: 'once' or 'skip'\n"
    "  updated_at REAL,               -- Unix time of the last write\n"
    "  PRIMARY KEY (queue, name)\n"
    ") WITHOUT ROWID;\n"
    "DROP VIEW pending;\n"
    "CREATE VIEW pending AS\n"
    "SELECT i.queue AS queue, i.key AS key, i.state AS state, i.priority AS priority,\n"
    "  i.payload AS payload,\n"
    "  round(i.ready_at - " WQ_SQL_NOW ", 3) AS ready_in,\n"
    "  datetime(i.ready_at, 'unixepoch') AS ready_at,\n"
    "  round(" WQ_SQL_NOW " - i.added_at, 3) AS age,\n"
    "  coalesce(f.requeues, 0) AS requeues, f.last_error AS last_error,\n"
    "  i.grp AS grp, datetime(i.enqueued_at, 'unixepoch') AS enqueued_at\n"
    "FROM items AS i LEFT JOIN failures AS f ON f.queue = i.queue AND f.key = i.key\n"
    "ORDER BY i.queue, i.state = 'waiting' AND i.ready_at IS NOT NULL, i.priority DESC, i.seq;\n"
    "ALTER TABLE queues ADD COLUMN paused INTEGER NOT NULL DEFAULT 0; -- 1: hands nothing out\n"
    "CREATE TABLE commands(            -- operator commands (wqrun pause, remove, ...) for the "
    "runner\n"
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,\n"
    "  queue TEXT NOT NULL,\n"
    "  op TEXT NOT NULL,              -- pause resume remove cancel retry retry_all purge_dead\n"
    "  key TEXT,                      -- remove, cancel, retry: the key\n"
    "  state TEXT NOT NULL DEFAULT 'new', -- 'new'; 'done' or 'failed' once applied\n"
    "  result TEXT,                   -- what it did, or why it failed\n"
    "  created_at REAL DEFAULT " WQ_SQL_NOW ",\n"
    "  done_at REAL                   -- Unix time it was applied\n"
    ");\n";

/* Version 2 -> 3: an inbox row may carry a priority (`wqrun add --priority N`). */
static const char v2_to_v3[] =
    "ALTER TABLE inbox ADD COLUMN priority INTEGER; -- the item's priority, or NULL: none\n";

/* Version 3 -> 4: an inbox row may ask for a unique add (`wqrun add --unique`). */
static const char v3_to_v4[] =
    "ALTER TABLE inbox ADD COLUMN unique_add INTEGER; -- 1: leave a pending or running key alone\n";

/* Version 4 -> 5: flows (SPEC 9, docs/flows.md). */
static const char v4_to_v5[] =
    "CREATE TABLE flows(               -- one row per flow\n"
    "  id TEXT PRIMARY KEY,\n"
    "  keep REAL NOT NULL,            -- seconds its results stay after finished_at\n"
    "  created_at REAL,\n"
    "  finished_at REAL,              -- Unix time its last node finished; NULL while running\n"
    "  unfinished INTEGER NOT NULL DEFAULT 0, -- nodes neither done nor dead\n"
    "  cancelled INTEGER NOT NULL DEFAULT 0\n"
    ") WITHOUT ROWID;\n"
    "CREATE TABLE flow_nodes(          -- one row per node: an item of a queue in a flow\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  flow TEXT NOT NULL,\n"
    "  queue TEXT NOT NULL,\n"
    "  key TEXT NOT NULL,\n"
    "  state TEXT NOT NULL,           -- 'blocked', 'pending', 'done' or 'dead'\n"
    "  waits INTEGER NOT NULL DEFAULT 0, -- dependencies not finished\n"
    "  ignore_dead INTEGER NOT NULL DEFAULT 0,\n"
    "  payload TEXT,                  -- what its item gets when released (JSON text)\n"
    "  priority INTEGER NOT NULL DEFAULT 0,\n"
    "  grp TEXT,\n"
    "  result TEXT,                   -- a done node's result (JSON text)\n"
    "  error TEXT,                    -- a dead node's error\n"
    "  cause INTEGER,                 -- the node whose death killed it\n"
    "  finished_at REAL,\n"
    "  UNIQUE (flow, queue, key)\n"
    ");\n"
    "CREATE INDEX flow_nodes_key ON flow_nodes(queue, key);\n"
    "CREATE TABLE flow_deps(           -- node waits for dep; ord: its place in node's after\n"
    "  node INTEGER NOT NULL,\n"
    "  ord INTEGER NOT NULL,\n"
    "  dep INTEGER NOT NULL,\n"
    "  PRIMARY KEY (node, ord)\n"
    ") WITHOUT ROWID;\n"
    "CREATE INDEX flow_deps_dep ON flow_deps(dep);\n";

/* Version 5 -> 6: a dead letter keeps its traceback (issue 31); the history of finished runs
 * (SPEC 11). */
static const char v5_to_v6[] =
    "ALTER TABLE dead ADD COLUMN traceback TEXT; -- the last failure's Lua traceback, or NULL\n"
    "CREATE TABLE history(             -- finished runs, kept for the queue's history seconds\n"
    "  id INTEGER PRIMARY KEY,        -- in the order they finished (no other index: an append)\n"
    "  queue TEXT NOT NULL,\n"
    "  key TEXT NOT NULL,\n"
    "  state TEXT NOT NULL,           -- 'done', 'dead', 'cancelled' or 'removed'\n"
    "  added_at REAL,                 -- Unix time the item was first added\n"
    "  started_at REAL,               -- its last run's start; NULL: it never ran\n"
    "  finished_at REAL NOT NULL,\n"
    "  attempts INTEGER NOT NULL,     -- its runs: the failed ones and the last\n"
    "  runner TEXT,                   -- host:pid of the runner\n"
    "  result TEXT,                   -- a done run's result (JSON), NULL: none\n"
    "  error TEXT                     -- a dead run's error\n"
    ");\n";

/* Version 6 -> 7: a processing item's latest progress (SPEC 11). */
static const char v6_to_v7[] =
    "ALTER TABLE items ADD COLUMN progress TEXT; -- a processing item's job:progress (JSON)\n";

/* Version 7 -> 8: each queue's history option, as its runner defined it, so that `wqrun add
 * --wait` can refuse at once to wait for a run no history row will tell the end of. */
static const char v7_to_v8[] =
    "ALTER TABLE queues ADD COLUMN history REAL; -- the runner's history option in seconds (0: "
    "none kept), NULL: not told\n";

/* migrations[v] brings a file from version v to v + 1. */
static const char *const migrations[WQ_STORE_VERSION] = {schema_v1, v1_to_v2, v2_to_v3, v3_to_v4,
                                                         v4_to_v5,  v5_to_v6, v6_to_v7, v7_to_v8};

/* Reads application_id, user_version and the number of schema objects. SQLite result code. */
static int read_header(sqlite3 *db, int *app, int *ver, int *nobj)
{
    static const char *const sql[3] = {"PRAGMA application_id", "PRAGMA user_version",
                                       "SELECT count(*) FROM sqlite_master"};
    int *out[3] = {app, ver, nobj};
    for (int i = 0; i < 3; i++) {
        sqlite3_stmt *st;
        int rc = sqlite3_prepare_v2(db, sql[i], -1, &st, NULL);
        if (rc != SQLITE_OK)
            return rc;
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            *out[i] = sqlite3_column_int(st, 0);
            rc = SQLITE_OK;
        }
        sqlite3_finalize(st);
        if (rc != SQLITE_OK)
            return rc;
    }
    return SQLITE_OK;
}

/* Decides whether a file with this header is ours and of a version we know. */
static int classify(const char *path, int app, int ver, int nobj, char *err, size_t errlen)
{
    if ((uint32_t)app == WQ_STORE_APP_ID) {
        if (ver > WQ_STORE_VERSION)
            return fmt(err, errlen, WQ_EFORMAT,
                       "%s is a wqrun state file of version %d, newer than this wqrun "
                       "understands (%d); use a newer wqrun",
                       path, ver, WQ_STORE_VERSION);
        return 0;
    }
    if (app == 0 && ver == 0 && nobj == 0)
        return 0; /* an empty database: we may adopt it */
    return fmt(err, errlen, WQ_EFORMAT,
               "%s is not a wqrun state file (an SQLite database of another application: "
               "application_id %d, user_version %d, %d schema objects); refusing to touch it",
               path, app, ver, nobj);
}

int wq_schema_damaged(int rc)
{
    int prim = rc & 0xff;
    return prim == SQLITE_CORRUPT || prim == SQLITE_NOTADB;
}

/* Whether path starts with SQLite's magic: a failed read is then damage, not garbage. */
static int sqlite_magic(const char *path)
{
    char head[16];
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    return n == sizeof head && memcmp(head, "SQLite format 3", sizeof head) == 0;
}

/* Maps a failed read of a file that exists: garbage and damage are format errors, the rest I/O. */
static int read_error(const char *path, sqlite3 *db, int rc, char *err, size_t errlen)
{
    if (wq_schema_damaged(rc) && sqlite_magic(path))
        return fmt(err, errlen, WQ_EFORMAT, "state file %s is damaged (%s); %s", path,
                   db ? sqlite3_errmsg(db) : sqlite3_errstr(rc), WQ_STORE_DAMAGED_HINT);
    if (wq_schema_damaged(rc))
        return fmt(err, errlen, WQ_EFORMAT,
                   "%s is not a wqrun state file (not an SQLite database); refusing to touch it",
                   path);
    return fmt(err, errlen, WQ_EIO, "cannot read state file %s: %s", path,
               db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
}

/* Files up to this size are read ahead of the check (a bigger one may not fit the page cache). */
#define WARM_MAX ((off_t)1 << 30)

/*
 * Reads the file once, front to back, in big blocks: quick_check (and the
 * restore after it) then find its pages in the page cache instead of
 * reading them one at a time in b-tree order. For a 128 MB file (a million
 * items) not yet cached that is about 0.3 s instead of 2 s.
 */
static void warm(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_size > WARM_MAX) {
        close(fd);
        return;
    }
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    char buf[1 << 16];
    while (read(fd, buf, sizeof buf) > 0)
        ;
    close(fd);
}

/*
 * Reads every page of the file (PRAGMA quick_check: b-tree structure, cell
 * bounds, the freelist; not index contents, and our WITHOUT ROWID tables
 * have no separate indexes). A damaged b-tree otherwise reads back as fewer
 * rows without any error, and the runner would carry on with part of its
 * state and write that back. O(file size): about 0.13 s for a million items.
 */
static int check_pages(const char *path, sqlite3 *db, char *err, size_t errlen)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db, "PRAGMA quick_check(1)", -1, &st, NULL);
    if (rc != SQLITE_OK)
        return read_error(path, db, rc, err, errlen);
    rc = sqlite3_step(st);
    int r = 0;
    if (rc != SQLITE_ROW) {
        r = read_error(path, db, rc, err, errlen);
    } else {
        const char *res = (const char *)sqlite3_column_text(st, 0);
        if (!res || strcmp(res, "ok") != 0) {
            /* "*** in database main ***\nOn tree page 20 cell 2: ..." on one line */
            static const char prefix[] = "*** in database main ***";
            if (res && strncmp(res, prefix, sizeof prefix - 1) == 0)
                res += sizeof prefix - 1;
            char what[256];
            snprintf(what, sizeof what, "%s", res ? res : "?");
            char *w = what;
            while (*w == '\n' || *w == ' ')
                w++;
            for (char *c = w; *c; c++)
                if (*c == '\n')
                    *c = ' ';
            r = fmt(err, errlen, WQ_EFORMAT,
                    "state file %s is damaged (PRAGMA quick_check: %s); %s", path, w,
                    WQ_STORE_DAMAGED_HINT);
        }
    }
    sqlite3_finalize(st);
    return r;
}

int wq_schema_open_ro(const char *path, sqlite3 **out, char *err, size_t errlen)
{
    /*
     * Read-write when allowed, though only reading: a read-only connection
     * to a WAL file leaves empty -wal and -shm files behind, a read-write
     * one removes them when it is the last to close, as the sqlite3 shell does.
     */
    int flags = access(path, W_OK) == 0 ? SQLITE_OPEN_READWRITE : SQLITE_OPEN_READONLY;
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(path, &db, flags, NULL);
    if (rc != SQLITE_OK) {
        int r = fmt(err, errlen, WQ_EIO, "cannot open state file %s: %s", path,
                    db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        sqlite3_close(db);
        *out = NULL;
        return r;
    }
    sqlite3_extended_result_codes(db, 1);
    sqlite3_busy_timeout(db, 5000);
    *out = db;
    return 0;
}

/*
 * Reads a file's header, and checks the pages of a state file, through
 * SQLite without leaving a trace: immutable takes no locks, creates no -wal
 * or -shm file and ignores a -wal file (but may see a torn page while
 * another process writes); otherwise an ordinary read-only connection, in
 * one read transaction.
 */
static int inspect(const char *path, int immutable, char *err, size_t errlen)
{
    char uri[4200];
    size_t n = (size_t)snprintf(uri, sizeof uri, "file:");
    for (const char *c = path; *c && n + 4 < sizeof uri; c++) {
        if (*c == '%' || *c == '?' || *c == '#')
            n += (size_t)snprintf(uri + n, sizeof uri - n, "%%%02X", (unsigned char)*c);
        else
            uri[n++] = *c;
    }
    snprintf(uri + n, sizeof uri - n, "%s", immutable ? "?immutable=1" : "?mode=ro");
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL);
    int r;
    if (rc != SQLITE_OK) {
        r = fmt(err, errlen, WQ_EIO, "cannot open state file %s: %s", path,
                db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    } else {
        sqlite3_extended_result_codes(db, 1);
        sqlite3_busy_timeout(db, 5000);
        int app = 0, ver = 0, nobj = 0;
        rc = immutable ? SQLITE_OK : sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
        if (rc == SQLITE_OK)
            rc = read_header(db, &app, &ver, &nobj);
        if (rc != SQLITE_OK)
            r = read_error(path, db, rc, err, errlen);
        else
            r = classify(path, app, ver, nobj, err, errlen);
        if (r == 0 && (uint32_t)app == WQ_STORE_APP_ID) {
            warm(path);
            r = check_pages(path, db, err, errlen);
        }
    }
    sqlite3_close(db); /* ends the read transaction */
    return r;
}

/* Whether path has a non-empty -wal file next to it (its newest pages may live there). */
static int has_wal(const char *path)
{
    char wal[4200];
    struct stat st;
    snprintf(wal, sizeof wal, "%s-wal", path);
    return stat(wal, &st) == 0 && st.st_size > 0;
}

/* Whether path is no longer as st saw it (written, replaced, or given a -wal file meanwhile). */
static int changed(const char *path, const struct stat *st)
{
    struct stat now;
    return stat(path, &now) < 0 || now.st_dev != st->st_dev || now.st_ino != st->st_ino ||
           now.st_size != st->st_size || now.st_mtim.tv_sec != st->st_mtim.tv_sec ||
           now.st_mtim.tv_nsec != st->st_mtim.tv_nsec || has_wal(path);
}

int wq_schema_check(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) < 0) {
        if (errno == ENOENT)
            return 0;
        return fmt(err, errlen, WQ_EIO, "cannot access state file %s: %s", path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode))
        return fmt(err, errlen, WQ_EFORMAT, "%s is not a wqrun state file (not a regular file)",
                   path);
    int wal = has_wal(path);
    if (st.st_size == 0 && !wal)
        return 0;
    /*
     * Without a -wal file, the file alone is the database: read it as it is,
     * leaving no trace. With one, its newest pages live there: read it
     * properly (the -wal and -shm files exist already). A refusal of a file
     * that changed while it was read may come from a page torn by a live
     * writer: read it again properly.
     */
    int r = inspect(path, !wal, err, errlen);
    if (r < 0 && !wal && changed(path, &st))
        r = inspect(path, 0, err, errlen);
    return r;
}

/* Checks that a missing file can be created, or an existing one written, for a clear message. */
static int check_writable(const char *path, char *err, size_t errlen)
{
    if (access(path, F_OK) == 0) {
        if (access(path, R_OK | W_OK) < 0)
            return fmt(err, errlen, WQ_EIO, "state file %s is not writable: %s", path,
                       strerror(errno));
        return 0;
    }
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    if (access(dir, W_OK | X_OK) < 0)
        return fmt(err, errlen, WQ_EIO, "cannot create state file %s: directory %s: %s", path, dir,
                   strerror(errno));
    return 0;
}

static int exec(sqlite3 *db, const char *sql)
{
    return sqlite3_exec(db, sql, NULL, NULL, NULL);
}

/* Runs the migrations from version ver inside the caller's transaction. */
static int migrate(sqlite3 *db, int ver)
{
    for (int v = ver; v < WQ_STORE_VERSION; v++) {
        int rc = exec(db, migrations[v]);
        if (rc != SQLITE_OK)
            return rc;
    }
    char sql[128];
    snprintf(sql, sizeof sql, "PRAGMA application_id = %d; PRAGMA user_version = %d",
             (int)WQ_STORE_APP_ID, WQ_STORE_VERSION);
    return exec(db, sql);
}

int wq_schema_open_rw(const char *path, int upgrade, sqlite3 **out, char *err, size_t errlen)
{
    *out = NULL;
    int r = check_writable(path, err, errlen);
    if (r < 0)
        return r;
    sqlite3 *db = NULL;
    /* NOMUTEX: one thread uses the runner's connection, so every call skips SQLite's mutex. */
    int rc = sqlite3_open_v2(
        path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        r = fmt(err, errlen, WQ_EIO, "cannot open state file %s: %s", path,
                db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        sqlite3_close(db);
        return r;
    }
    sqlite3_extended_result_codes(db, 1);
    sqlite3_busy_timeout(db, 5000);
    /* Until the file is known to be ours, closing must not checkpoint someone else's WAL into it.
     */
    sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int *)NULL);
    if (sqlite3_db_readonly(db, "main") == 1) {
        r = fmt(err, errlen, WQ_EIO, "state file %s is not writable", path);
        goto fail;
    }
    int app = 0, ver = 0, nobj = 0;
    rc = read_header(db, &app, &ver, &nobj);
    if (rc != SQLITE_OK) {
        r = read_error(path, db, rc, err, errlen);
        goto fail;
    }
    r = classify(path, app, ver, nobj, err, errlen);
    if (r < 0)
        goto fail;
    if ((uint32_t)app != WQ_STORE_APP_ID || (upgrade && ver < WQ_STORE_VERSION)) {
        /* Create or migrate under the write lock, checking again: another process may race us. */
        rc = exec(db, "BEGIN IMMEDIATE");
        if (rc == SQLITE_OK)
            rc = read_header(db, &app, &ver, &nobj);
        if (rc != SQLITE_OK) {
            r = read_error(path, db, rc, err, errlen);
            exec(db, "ROLLBACK");
            goto fail;
        }
        r = classify(path, app, ver, nobj, err, errlen);
        if (r < 0) {
            exec(db, "ROLLBACK");
            goto fail;
        }
        if ((uint32_t)app != WQ_STORE_APP_ID)
            ver = 0;
        int from = ver;
        if (ver == 0 || (upgrade && ver < WQ_STORE_VERSION))
            rc = migrate(db, ver);
        if (rc == SQLITE_OK)
            rc = exec(db, "COMMIT");
        if (rc != SQLITE_OK) {
            if (from == 0)
                r = fmt(err, errlen, WQ_EIO, "cannot create the schema in %s: %s", path,
                        sqlite3_errmsg(db));
            else
                r = fmt(err, errlen, WQ_EIO,
                        "cannot migrate state file %s from schema version %d to %d: %s; the "
                        "file is left at version %d",
                        path, from, WQ_STORE_VERSION, sqlite3_errmsg(db), from);
            exec(db, "ROLLBACK");
            goto fail;
        }
    }
    /* WAL only now that the file is known to be ours. */
    sqlite3_stmt *st;
    rc = sqlite3_prepare_v2(db, "PRAGMA journal_mode = WAL", -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        const unsigned char *mode = rc == SQLITE_ROW ? sqlite3_column_text(st, 0) : NULL;
        rc = mode && strcmp((const char *)mode, "wal") == 0 ? SQLITE_OK : SQLITE_ERROR;
        sqlite3_finalize(st);
    }
    if (rc != SQLITE_OK) {
        r = fmt(err, errlen, WQ_EIO, "cannot switch state file %s to WAL mode: %s", path,
                sqlite3_errmsg(db));
        goto fail;
    }
    sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 0, (int *)NULL);
    *out = db;
    return 0;
fail:
    sqlite3_close(db);
    return r;
}

int wq_schema_version(sqlite3 *db)
{
    sqlite3_stmt *st;
    int v = -1;
    if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK)
        return -1;
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return v;
}

void wq_schema_owner(sqlite3 *db, char *buf, size_t len)
{
    buf[0] = 0;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db,
                           "SELECT (SELECT value FROM meta WHERE name = 'owner_pid'),"
                           " (SELECT value FROM meta WHERE name = 'owner_host'),"
                           " (SELECT datetime(value, 'unixepoch') FROM meta"
                           "  WHERE name = 'owner_started')",
                           -1, &st, NULL) != SQLITE_OK)
        return;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL) {
        const unsigned char *host = sqlite3_column_text(st, 1);
        const unsigned char *since = sqlite3_column_text(st, 2);
        snprintf(buf, len, "pid %lld on %s, since %s UTC", sqlite3_column_int64(st, 0),
                 host ? (const char *)host : "?", since ? (const char *)since : "?");
    }
    sqlite3_finalize(st);
}

int wq_schema_valid_queue(const char *name, size_t len)
{
    if (len < 1 || len > 64)
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}
