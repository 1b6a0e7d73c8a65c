/*
 * The runner's side of the state file: opening it with exclusive ownership
 * (an flock on the database file, held until close), the per-queue
 * handles, and the Bloom filter of keys whose items row may exist, which
 * lets the group commit (commit.c) skip deleting rows that were never
 * written. Once the file cannot be trusted (SQLite finds it damaged, or the
 * path names another file or none) the store breaks: it never writes to
 * the file again, not even the checkpoint at close.
 */
#include "store/sqlite/store_int.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef WQ_VERSION
#define WQ_VERSION "dev"
#endif

static wq_store *open_stores; /* this process's open stores, to refuse a second open */

/* ---- small helpers ---- */

int wq_store_fail(wq_store *s, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->errmsg, sizeof s->errmsg, fmt, ap);
    va_end(ap);
    return code;
}

int wq_store_break(wq_store *s, int code, const char *fmt, ...)
{
    if (!s->broken) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->broken_msg, sizeof s->broken_msg, fmt, ap);
        va_end(ap);
        s->broken = code;
        /* Closing would otherwise copy the WAL into the file, and delete a -wal file that may now
         * belong to another database at the path; nor may the checkpointer copy any more. */
        sqlite3_db_config(s->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int *)NULL);
        wq_ckpt_stop(s);
    }
    return wq_store_broken(s);
}

int wq_store_broken(wq_store *s)
{
    if (s->broken)
        snprintf(s->errmsg, sizeof s->errmsg, "%s", s->broken_msg);
    return s->broken;
}

int wq_store_sqlite_fail(wq_store *s, int rc, const char *what)
{
    if (wq_schema_damaged(rc))
        return wq_store_break(s, WQ_EFORMAT,
                              "state file %s is damaged (%s, trying to %s); nothing more is "
                              "written to it",
                              s->path, sqlite3_errmsg(s->db), what);
    return wq_store_fail(s, WQ_EIO, "cannot %s (state file %s): %s", what, s->path,
                         sqlite3_errmsg(s->db));
}

static int fail_buf(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail_buf(char *err, size_t errlen, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen)
        vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return code;
}

double wq_store_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int64_t wq_store_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * WQ_NS_PER_S + ts.tv_nsec;
}

/* The default timebase: the real clocks as they were at open. */
static double tb_default_unix(void *ud, int64_t mono)
{
    const wq_store *s = ud;
    return s->tb_unix0 + (double)(mono - s->tb_mono0) / 1e9;
}

static int64_t tb_default_mono(void *ud, double unix_s)
{
    const wq_store *s = ud;
    double ns = (unix_s - s->tb_unix0) * 1e9 + (double)s->tb_mono0;
    if (!(ns < 9e18))
        return WQ_NEVER - 1;
    if (ns < -9e18)
        return INT64_MIN / 2;
    return (int64_t)ns;
}

char *wq_store_dup(const char *p, size_t len)
{
    char *c = wq_malloc(len + 1);
    if (c) {
        if (len)
            memcpy(c, p, len);
        c[len] = 0;
    }
    return c;
}

int wq_store_grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    void *p = wq_realloc(*arr, n * elem);
    if (!p)
        return -1;
    *arr = p;
    *cap = n;
    return 0;
}

int wq_store_prepare(wq_store *s, sqlite3_stmt **st, const char *sql)
{
    if (*st)
        return 0;
    if (sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL) != SQLITE_OK)
        return wq_store_fail(s, WQ_EIO, "cannot prepare a statement on %s: %s", s->path,
                             sqlite3_errmsg(s->db));
    return 0;
}

int wq_store_data_version(wq_store *s, int64_t *version, const char *what)
{
    if (wq_store_prepare(s, &s->st[ST_DATA_VERSION], "PRAGMA data_version") < 0)
        return WQ_EIO;
    sqlite3_stmt *dv = s->st[ST_DATA_VERSION];
    int rc = sqlite3_step(dv);
    *version = rc == SQLITE_ROW ? sqlite3_column_int64(dv, 0) : 0;
    sqlite3_reset(dv);
    return rc == SQLITE_ROW ? 0 : wq_store_sqlite_fail(s, rc, what);
}

void wq_store_bind_time(sqlite3_stmt *st, int i, double t)
{
    if (t > 0 && isfinite(t))
        sqlite3_bind_double(st, i, t);
    else
        sqlite3_bind_null(st, i);
}

int wq_store_run(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

static int exec(wq_store *s, const char *sql)
{
    return sqlite3_exec(s->db, sql, NULL, NULL, NULL);
}

/* ---- the Bloom filter of keys that may have an items row ---- */

uint32_t wq_store_key_hash(const wq_store_queue *sq, const char *key, size_t len)
{
    uint64_t h = wq_hash(key, len) + (uint64_t)sq->idx * 0x9e3779b97f4a7c15ULL;
    return (uint32_t)(h ^ (h >> 32));
}

#define BLOOM_BLOCKS (WQ_STORE_BLOOM_BITS / WQ_STORE_BLOOM_BLOCK)
_Static_assert(WQ_STORE_BLOOM_BLOCK == 512 && BLOOM_BLOCKS <= (1u << 24),
               "bloom_pos takes 9 bits per position and the block from the top bits");

/*
 * A blocked Bloom filter: the key's block (one cache line) and its three
 * bits in it, from a remix of its 32-bit hash (the index's slot comes from
 * the hash's low bits; the filter must not correlate with it).
 */
static size_t bloom_pos(uint32_t h, uint32_t pos[3])
{
    uint64_t x = h;
    x ^= x >> 16;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 31;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 29;
    for (int i = 0; i < 3; i++)
        pos[i] = (uint32_t)(x >> (9 * i)) & (WQ_STORE_BLOOM_BLOCK - 1);
    return (size_t)(x >> 40) % BLOOM_BLOCKS * (WQ_STORE_BLOOM_BLOCK / 64);
}

void wq_store_bloom_add(wq_store *s, uint32_t h)
{
    uint32_t pos[3];
    uint64_t *block = s->bloom + bloom_pos(h, pos);
    for (int i = 0; i < 3; i++) {
        uint64_t bit = 1ULL << (pos[i] & 63);
        if (!(block[pos[i] >> 6] & bit)) {
            block[pos[i] >> 6] |= bit;
            s->bloom_set++;
        }
    }
}

int wq_store_bloom_test(const wq_store *s, uint32_t h)
{
    uint32_t pos[3];
    const uint64_t *block = s->bloom + bloom_pos(h, pos);
    for (int i = 0; i < 3; i++)
        if (!(block[pos[i] >> 6] & (1ULL << (pos[i] & 63))))
            return 0;
    return 1;
}

static int bloom_visit(void *ud, const wq_item_info *info)
{
    wq_store_queue *sq = ud;
    wq_store_bloom_add(sq->s, wq_store_key_hash(sq, info->key, info->keylen));
    return 0;
}

void wq_store_bloom_rebuild(wq_store *s)
{
    memset(s->bloom, 0, WQ_STORE_BLOOM_BITS / 8);
    s->bloom_set = 0;
    for (uint32_t i = 0; i < s->nqueues; i++)
        if (s->queues[i]->q)
            wq_queue_foreach(s->queues[i]->q, bloom_visit, s->queues[i]);
}

/* ---- open and close ---- */

static int registry_has(dev_t dev, ino_t ino)
{
    for (wq_store *o = open_stores; o; o = o->next_open)
        if (o->dev == dev && o->ino == ino && o->pid == getpid())
            return 1;
    return 0;
}

int wq_store_open_here(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && registry_has(st.st_dev, st.st_ino);
}

static const char *const stmt_sql[ST_INSERT_ITEMS] = {
    "BEGIN IMMEDIATE",
    "COMMIT",
    "ROLLBACK",
    "INSERT INTO items(queue, key, payload, state, ready_at, priority, seq, added_at, updated_at,"
    " enqueued_at, grp) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
    " ON CONFLICT (queue, key) DO UPDATE SET payload = excluded.payload,"
    " state = excluded.state, ready_at = excluded.ready_at, priority = excluded.priority,"
    " seq = CASE ?12 WHEN 1 THEN excluded.seq"
    "  WHEN 2 THEN iif(excluded.priority > items.priority, excluded.seq, items.seq)"
    "  ELSE items.seq END,"
    " added_at = iif(?13, excluded.added_at, items.added_at), updated_at = excluded.updated_at,"
    " enqueued_at = iif(?14, excluded.enqueued_at, items.enqueued_at),"
    " grp = iif(?15, excluded.grp, items.grp)",
    "DELETE FROM items WHERE queue = ?1 AND key = ?2",
    "INSERT OR REPLACE INTO failures(queue, key, requeues, last_error, updated_at)"
    " VALUES (?1, ?2, ?3, ?4, ?5)",
    "DELETE FROM failures WHERE queue = ?1 AND key = ?2",
    "INSERT OR REPLACE INTO dead(queue, key, payload, error, attempts, failed_at, traceback)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    "DELETE FROM dead WHERE queue = ?1 AND key = ?2",
    "DELETE FROM inbox WHERE id = ?1",
    "INSERT INTO queues(name, seen_at) VALUES (?1, ?2)"
    " ON CONFLICT (name) DO UPDATE SET seen_at = excluded.seen_at",
    "DELETE FROM items WHERE queue = ?1",
    "INSERT OR REPLACE INTO done(queue, key, finished_at, result) VALUES (?1, ?2, ?3, ?4)",
    "DELETE FROM done WHERE queue = ?1 AND key = ?2",
    "SELECT key FROM done WHERE queue = ?1 AND key >= ?2 ORDER BY key LIMIT 1 OFFSET ?3",
    "DELETE FROM done WHERE queue = ?1 AND key >= ?2 AND key < ?3 AND finished_at < ?4",
    "DELETE FROM done WHERE queue = ?1 AND key >= ?2 AND finished_at < ?3",
    "INSERT OR REPLACE INTO schedules(queue, name, spec, key, payload, next_at, last_at, tz,"
    " catch_up, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    "DELETE FROM schedules WHERE queue = ?1 AND name = ?2",
};

static int prepare_all(wq_store *s)
{
    for (int i = 0; i < ST_INSERT_ITEMS; i++)
        if (wq_store_prepare(s, &s->st[i], stmt_sql[i]) < 0)
            return -1;
    return wq_store_prepare_batches(s);
}

static void finalize_all(wq_store *s)
{
    for (int i = 0; i < ST_COUNT; i++) {
        sqlite3_finalize(s->st[i]);
        s->st[i] = NULL;
    }
}

/* Reads one integer from a query into *v (unchanged when NULL or no row). SQLite result code. */
static int query_int(wq_store *s, const char *sql, int64_t *v)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
        *v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* Records who owns the file, for the second runner's message and `wqrun status`. */
static int write_owner(wq_store *s)
{
    char host[256] = "?";
    if (gethostname(host, sizeof host - 1) < 0)
        snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = 0;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db,
                           "INSERT OR REPLACE INTO meta(name, value) VALUES ('owner_pid', ?1),"
                           " ('owner_host', ?2), ('owner_started', ?3), ('owner_version', ?4)",
                           -1, &st, NULL) != SQLITE_OK)
        return SQLITE_ERROR;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)getpid());
    sqlite3_bind_text(st, 2, host, -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 3, wq_store_wall());
    sqlite3_bind_text(st, 4, WQ_VERSION, -1, SQLITE_STATIC);
    int rc = wq_store_run(st);
    sqlite3_finalize(st);
    return rc;
}

/* Takes the file's exclusive lock on fd; WQ_EBUSY names the owner. */
static int take_lock(const char *path, int fd, char *err, size_t errlen)
{
    /* `wqrun pause` and friends hold the lock for a few milliseconds when no runner does:
     * a runner starting then waits for them (300 ms at most) instead of failing. */
    for (int tries = 0;; tries++) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
            return 0;
        if (errno != EWOULDBLOCK)
            return fail_buf(err, errlen, WQ_EIO, "cannot lock state file %s: %s", path,
                            strerror(errno));
        if (tries == 30)
            return WQ_EBUSY;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static void busy_message(const char *path, char *err, size_t errlen)
{
    char owner[400] = "";
    sqlite3 *db;
    if (wq_schema_open_ro(path, &db, NULL, 0) == 0) {
        wq_schema_owner(db, owner, sizeof owner);
        sqlite3_close(db);
    }
    fail_buf(err, errlen, WQ_EBUSY,
             "state file %s is in use by another wqrun process (%s); only one runner may use "
             "a state file at a time",
             path, owner[0] ? owner : "pid unknown");
}

int wq_store_open(wq_store **out, const char *path, wq_sync sync, const wq_timebase *tb, char *err,
                  size_t errlen)
{
    *out = NULL;
    if (!path || !*path)
        return fail_buf(err, errlen, WQ_EINVAL, "empty state file path");
    struct stat st;
    int existed = stat(path, &st) == 0;
    if (existed && registry_has(st.st_dev, st.st_ino))
        return fail_buf(err, errlen, WQ_EBUSY,
                        "state file %s is in use by another wqrun process (pid %ld, this one); "
                        "only one runner may use a state file at a time",
                        path, (long)getpid());
    int r = wq_schema_check(path, err, errlen);
    if (r < 0)
        return r;

    /* The lock comes first: nothing below writes unless we own the file. */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return fail_buf(err, errlen, WQ_EIO, "cannot open state file %s for writing: %s", path,
                        strerror(errno));
    r = take_lock(path, fd, err, errlen);
    if (r < 0) {
        close(fd); /* no SQLite connection of ours has this file open: the close drops nothing */
        if (r == WQ_EBUSY)
            busy_message(path, err, errlen);
        return r;
    }
    if (fstat(fd, &st) < 0) {
        r = fail_buf(err, errlen, WQ_EIO, "cannot stat state file %s: %s", path, strerror(errno));
        close(fd);
        return r;
    }

    sqlite3 *db;
    r = wq_schema_open_rw(path, 1, &db, err, errlen);
    if (r < 0) {
        struct stat now;
        if (!existed && fstat(fd, &now) == 0 && now.st_size == 0)
            unlink(path); /* leave no empty file behind */
        close(fd);
        return r;
    }

    wq_store *s = wq_malloc(sizeof *s);
    if (!s) {
        sqlite3_close(db);
        close(fd);
        return fail_buf(err, errlen, WQ_ENOMEM, "out of memory opening %s", path);
    }
    memset(s, 0, sizeof *s);
    s->base.ops = &wq_sqlite_ops;
    s->db = db;
    s->lock_fd = fd;
    s->dev = st.st_dev;
    s->ino = st.st_ino;
    s->pid = getpid();
    s->sync = sync;
    s->tb_mono0 = wq_store_mono_ns();
    s->tb_unix0 = wq_store_wall();
    if (tb)
        s->tb = *tb;
    else
        s->tb = (wq_timebase){tb_default_unix, tb_default_mono, s};
    s->path = wq_store_dup(path, strlen(path));
    s->bloom_mem = wq_malloc(WQ_STORE_BLOOM_BITS / 8 + 64);
    if (!s->path || !s->bloom_mem) {
        r = fail_buf(err, errlen, WQ_ENOMEM, "out of memory opening %s", path);
        goto fail;
    }
    s->bloom = (uint64_t *)(((uintptr_t)s->bloom_mem + 63) & ~(uintptr_t)63);
    memset(s->bloom, 0, WQ_STORE_BLOOM_BITS / 8);

    char pragmas[256];
    snprintf(pragmas, sizeof pragmas,
             "PRAGMA synchronous = %s; PRAGMA cache_size = -65536;"
             " PRAGMA wal_autocheckpoint = 10000; PRAGMA journal_size_limit = 268435456",
             sync == WQ_SYNC_FULL ? "FULL" : "NORMAL");
    if (exec(s, pragmas) != SQLITE_OK || prepare_all(s) < 0) {
        r = fail_buf(err, errlen, WQ_EIO, "cannot set up state file %s: %s", path,
                     sqlite3_errmsg(db));
        goto fail;
    }
    int64_t max_seq = 0;
    int rc = query_int(s, "SELECT max(seq) FROM items", &max_seq);
    if (wq_schema_damaged(rc)) {
        r = fail_buf(err, errlen, WQ_EFORMAT, "state file %s is damaged (%s); %s", path,
                     sqlite3_errmsg(db), WQ_STORE_DAMAGED_HINT);
        goto fail;
    }
    if (rc != SQLITE_OK || write_owner(s) != SQLITE_OK) {
        r = fail_buf(err, errlen, WQ_EIO, "cannot set up state file %s: %s", path,
                     sqlite3_errmsg(db));
        goto fail;
    }
    s->next_seq = max_seq + 1;
    /* SQLite opened path after the lock was taken: make sure both name the same file. */
    if (wq_store_check_path(s) < 0) {
        r = fail_buf(err, errlen, WQ_EIO, "%s", s->errmsg);
        goto fail;
    }
    s->next_open = open_stores;
    open_stores = s;
    wq_ckpt_start(s); /* when it cannot start, the commits checkpoint (wal_autocheckpoint above) */
    *out = s;
    return 0;
fail:
    if (r == WQ_EFORMAT) /* damaged: leave its bytes as they are */
        sqlite3_db_config(s->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int *)NULL);
    finalize_all(s);
    sqlite3_close(s->db);
    close(fd);
    wq_free(s->path);
    wq_free(s->bloom_mem);
    wq_free(s);
    return r;
}

int wq_store_check_path(wq_store *s)
{
    if (!s)
        return 0;
    if (s->broken)
        return wq_store_broken(s);
    /* SQLite's absolute name of the file: what -wal and -shm are named after, whatever the cwd. */
    const char *name = sqlite3_db_filename(s->db, "main");
    if (!name || !*name)
        name = s->path;
    struct stat st;
    const char *why;
    if (stat(name, &st) < 0)
        why = errno == ENOENT ? "no file at that path now" : strerror(errno);
    else if (st.st_dev != s->dev || st.st_ino != s->ino)
        why = "another file is at that path now";
    else
        return 0;
    s->gone = 1;
    return wq_store_break(s, WQ_EIO,
                          "state file %s was deleted or replaced while running (%s); nothing more "
                          "is written to it",
                          s->path, why);
}

int wq_store_gone(const wq_store *s)
{
    return s && s->gone;
}

void wq_store_set_event_base(wq_store *s, struct event_base *base)
{
    s->event_base = base;
}

void wq_store_set_busy_timeout(wq_store *s, int ms)
{
    sqlite3_busy_timeout(s->db, ms);
}

const char *wq_store_errmsg(const wq_store *s)
{
    return s ? s->errmsg : "no state file";
}

const char *wq_store_path(const wq_store *s)
{
    return s ? s->path : NULL;
}

void wq_store_close(wq_store *s)
{
    if (!s)
        return;
    if (wq_store_flush(s) == 0 && wq_store_check_path(s) == 0)
        exec(s, "DELETE FROM meta WHERE name LIKE 'owner^_%' ESCAPE '^'");
    wq_ckpt_stop(s); /* closing the connection makes the last checkpoint */
    for (wq_store **pp = &open_stores; *pp; pp = &(*pp)->next_open) {
        if (*pp == s) {
            *pp = s->next_open;
            break;
        }
    }
    finalize_all(s);
    wq_store_flows_free(s);
    wq_store_lookups_free(s);
    wq_store_history_free(s);
    wq_store_progress_free(s);
    sqlite3_close(s->db);
    close(s->lock_fd); /* after SQLite let go of the file: closing drops this process's locks */
    wq_store_clear_pending(s, 0);
    for (uint32_t i = 0; i < s->nqueues; i++) {
        wq_keymap_free(s->queues[i]->fail_set);
        wq_free(s->queues[i]->name);
        wq_free(s->queues[i]);
    }
    for (size_t i = 0; i < s->nannounce; i++)
        wq_free(s->announce[i]);
    wq_free(s->queues);
    wq_free(s->ents);
    wq_free(s->extras);
    wq_free(s->arena);
    wq_free(s->index);
    wq_free(s->announce);
    wq_free(s->sched);
    wq_free(s->inbox_del);
    wq_free(s->cmd_results);
    wq_store_free_inbox_puts(s);
    wq_free(s->bloom_mem);
    wq_free(s->path);
    wq_free(s);
}

/* ---- queues ---- */

static void announce(wq_store *s, const char *name)
{
    for (size_t i = 0; i < s->nannounce; i++)
        if (strcmp(s->announce[i], name) == 0)
            return;
    char *c = wq_store_dup(name, strlen(name));
    if (!c || wq_store_grow((void **)&s->announce, &s->capannounce, s->nannounce + 1,
                            sizeof(char *)) < 0) {
        wq_free(c);
        return; /* the queues table is informational */
    }
    s->announce[s->nannounce++] = c;
}

void wq_store_known_queue(wq_store *s, const char *name)
{
    if (!s || !name)
        return;
    announce(s, name);
    s->inbox_rescan = 1;
}

wq_store_queue *wq_store_attach(wq_store *s, const char *name, wq_queue *q)
{
    for (uint32_t i = 0; i < s->nqueues; i++) {
        if (strcmp(s->queues[i]->name, name) == 0) {
            if (s->queues[i]->q != q)
                wq_store_forget_gone(s->queues[i]);
            s->queues[i]->q = q;
            return s->queues[i];
        }
    }
    if (wq_store_grow((void **)&s->queues, &s->capqueues, s->nqueues + 1, sizeof *s->queues) < 0) {
        wq_store_fail(s, WQ_ENOMEM, "out of memory");
        return NULL;
    }
    wq_store_queue *sq = wq_malloc(sizeof *sq);
    if (!sq) {
        wq_store_fail(s, WQ_ENOMEM, "out of memory");
        return NULL;
    }
    memset(sq, 0, sizeof *sq);
    sq->base.b = &s->base;
    sq->s = s;
    sq->q = q;
    sq->namelen = strlen(name);
    sq->name = wq_store_dup(name, sq->namelen);
    sq->fail_set = wq_keymap_new();
    if (!sq->name || !sq->fail_set) {
        wq_free(sq->name);
        wq_keymap_free(sq->fail_set);
        wq_free(sq);
        wq_store_fail(s, WQ_ENOMEM, "out of memory");
        return NULL;
    }
    sq->idx = s->nqueues;
    /* With no rows in the file, the (empty) filter and fail_set are already exact. */
    sqlite3_stmt *st;
    sq->complete = 0;
    int rc = sqlite3_prepare_v2(s->db,
                                "SELECT EXISTS (SELECT 1 FROM items WHERE queue = ?1)"
                                " OR EXISTS (SELECT 1 FROM failures WHERE queue = ?1)",
                                -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(st, 1, sq->name, (int)sq->namelen, SQLITE_STATIC);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW)
            sq->complete = sqlite3_column_int(st, 0) == 0;
        sqlite3_finalize(st);
    }
    if (wq_schema_damaged(rc))
        wq_store_sqlite_fail(s, rc, "attach a queue"); /* the restore that follows fails */
    s->queues[s->nqueues++] = sq;
    wq_store_known_queue(s, name);
    return sq;
}

void wq_store_detach(wq_store_queue *sq)
{
    if (sq)
        sq->q = NULL;
}

void wq_store_set_meta(wq_store_queue *sq,
                       void (*fn)(void *ud, const wq_item_info *info, wq_item_meta *out), void *ud)
{
    if (!sq)
        return;
    sq->meta_fn = fn;
    sq->meta_ud = ud;
}

void wq_store_get_stats(const wq_store *s, wq_store_stats *st)
{
    if (!s) {
        memset(st, 0, sizeof *st);
        return;
    }
    *st = s->stats;
    st->pending_keys = s->nents;
}
