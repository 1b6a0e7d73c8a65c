/*
 * The runner's side of the state file: exclusive ownership, the pending set
 * and group commit. The loop tells the store which keys changed (touch);
 * nothing is written until flush, which reads each touched key's current
 * state back from its engine queue and writes it in one transaction. A key
 * touched many times in a window costs one row write, and a key that came
 * and went within a window costs nothing when the file never had its row
 * (a Bloom filter remembers which keys may have one).
 */
#include "store/store_int.h"

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

#ifndef WQ_VERSION
#define WQ_VERSION "dev"
#endif

#define BLOOM_BITS (1u << 23) /* 1 MiB; rebuilt from the engine when half full */
#define SHRINK_ABOVE 65536    /* pending arrays larger than this are freed after a flush */
#define INDEX_MIN 1024        /* initial size of the pending set's index */

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

static int64_t mono_ns(void)
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

static char *dup_bytes(const char *p, size_t len)
{
    char *c = wq_malloc(len + 1);
    if (c) {
        if (len)
            memcpy(c, p, len);
        c[len] = 0;
    }
    return c;
}

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
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

/* Steps a statement that returns no rows and resets it. SQLite result code. */
static int run(sqlite3_stmt *st)
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

static void bloom_pos(const wq_store_queue *sq, const char *key, size_t len, uint32_t pos[3])
{
    uint64_t h = wq_hash(key, len) ^ ((uint64_t)(sq->idx + 1) * 0x9e3779b97f4a7c15ULL);
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 32;
    uint32_t a = (uint32_t)h, b = (uint32_t)(h >> 32) | 1;
    for (uint32_t i = 0; i < 3; i++)
        pos[i] = (a + i * b) & (BLOOM_BITS - 1);
}

void wq_store_bloom_add(wq_store_queue *sq, const char *key, size_t len)
{
    wq_store *s = sq->s;
    uint32_t pos[3];
    bloom_pos(sq, key, len, pos);
    for (int i = 0; i < 3; i++) {
        uint64_t bit = 1ULL << (pos[i] & 63);
        if (!(s->bloom[pos[i] >> 6] & bit)) {
            s->bloom[pos[i] >> 6] |= bit;
            s->bloom_set++;
        }
    }
}

static int bloom_test(const wq_store_queue *sq, const char *key, size_t len)
{
    uint32_t pos[3];
    bloom_pos(sq, key, len, pos);
    for (int i = 0; i < 3; i++)
        if (!(sq->s->bloom[pos[i] >> 6] & (1ULL << (pos[i] & 63))))
            return 0;
    return 1;
}

static int bloom_visit(void *ud, const wq_item_info *info)
{
    wq_store_bloom_add(ud, info->key, info->keylen);
    return 0;
}

/*
 * After a successful flush every attached queue's engine records are
 * exactly its rows in the file, so a crowded filter can be rebuilt from them.
 */
static void bloom_rebuild(wq_store *s)
{
    memset(s->bloom, 0, BLOOM_BITS / 8);
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

static const char *const stmt_sql[ST_PREPARED_AT_OPEN] = {
    "BEGIN IMMEDIATE",
    "COMMIT",
    "ROLLBACK",
    "INSERT INTO items(queue, key, payload, state, ready_at, priority, seq, added_at, updated_at)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
    " ON CONFLICT (queue, key) DO UPDATE SET payload = excluded.payload,"
    " state = excluded.state, ready_at = excluded.ready_at, priority = excluded.priority,"
    " seq = CASE ?10 WHEN 1 THEN excluded.seq"
    "  WHEN 2 THEN iif(excluded.priority > items.priority, excluded.seq, items.seq)"
    "  ELSE items.seq END,"
    " added_at = iif(?11, excluded.added_at, items.added_at), updated_at = excluded.updated_at",
    "DELETE FROM items WHERE queue = ?1 AND key = ?2",
    "INSERT OR REPLACE INTO failures(queue, key, requeues, last_error, updated_at)"
    " VALUES (?1, ?2, ?3, ?4, ?5)",
    "DELETE FROM failures WHERE queue = ?1 AND key = ?2",
    "INSERT OR REPLACE INTO dead(queue, key, payload, error, attempts, failed_at)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    "DELETE FROM dead WHERE queue = ?1 AND key = ?2",
    "DELETE FROM inbox WHERE id = ?1",
    "INSERT OR REPLACE INTO queues(name, seen_at) VALUES (?1, ?2)",
    "DELETE FROM items WHERE queue = ?1",
};

static int prepare_all(wq_store *s)
{
    for (int i = 0; i < ST_PREPARED_AT_OPEN; i++)
        if (wq_store_prepare(s, &s->st[i], stmt_sql[i]) < 0)
            return -1;
    return 0;
}

static void finalize_all(wq_store *s)
{
    for (int i = 0; i < ST_COUNT; i++) {
        sqlite3_finalize(s->st[i]);
        s->st[i] = NULL;
    }
}

/* Reads one integer from a query; def when there is no row. */
static int64_t query_int(wq_store *s, const char *sql, int64_t def)
{
    sqlite3_stmt *st;
    int64_t v = def;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
        return def;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
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
    int rc = run(st);
    sqlite3_finalize(st);
    return rc;
}

/* Takes the file's exclusive lock on fd; WQ_EBUSY names the owner. */
static int take_lock(const char *path, int fd, char *err, size_t errlen)
{
    if (flock(fd, LOCK_EX | LOCK_NB) == 0)
        return 0;
    if (errno != EWOULDBLOCK)
        return fail_buf(err, errlen, WQ_EIO, "cannot lock state file %s: %s", path,
                        strerror(errno));
    return WQ_EBUSY;
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
    r = wq_schema_open_rw(path, &db, err, errlen);
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
    s->db = db;
    s->lock_fd = fd;
    s->dev = st.st_dev;
    s->ino = st.st_ino;
    s->pid = getpid();
    s->sync = sync;
    s->tb_mono0 = mono_ns();
    s->tb_unix0 = wq_store_wall();
    if (tb)
        s->tb = *tb;
    else
        s->tb = (wq_timebase){tb_default_unix, tb_default_mono, s};
    s->path = dup_bytes(path, strlen(path));
    s->bloom = wq_malloc(BLOOM_BITS / 8);
    if (!s->path || !s->bloom) {
        r = fail_buf(err, errlen, WQ_ENOMEM, "out of memory opening %s", path);
        goto fail;
    }
    memset(s->bloom, 0, BLOOM_BITS / 8);

    char pragmas[256];
    snprintf(pragmas, sizeof pragmas,
             "PRAGMA synchronous = %s; PRAGMA cache_size = -65536;"
             " PRAGMA wal_autocheckpoint = 10000; PRAGMA journal_size_limit = 67108864",
             sync == WQ_SYNC_FULL ? "FULL" : "NORMAL");
    if (exec(s, pragmas) != SQLITE_OK || prepare_all(s) < 0 || write_owner(s) != SQLITE_OK) {
        r = fail_buf(err, errlen, WQ_EIO, "cannot set up state file %s: %s", path,
                     sqlite3_errmsg(db));
        goto fail;
    }
    s->next_seq = query_int(s, "SELECT max(seq) FROM items", 0) + 1;
    s->next_open = open_stores;
    open_stores = s;
    *out = s;
    return 0;
fail:
    finalize_all(s);
    sqlite3_close(s->db);
    close(fd);
    wq_free(s->path);
    wq_free(s->bloom);
    wq_free(s);
    return r;
}

const char *wq_store_errmsg(const wq_store *s)
{
    return s ? s->errmsg : "no state file";
}

const char *wq_store_path(const wq_store *s)
{
    return s ? s->path : NULL;
}

static void free_extra(struct extra *e)
{
    wq_free(e->last_error);
    wq_free(e->dpayload);
    wq_free(e->derror);
    memset(e, 0, sizeof *e);
}

/* Forgets the pending set after a successful flush. */
static void clear_pending(wq_store *s)
{
    for (uint32_t i = 0; i < s->nqueues; i++)
        s->queues[i]->resync = 0;
    for (size_t i = 0; i < s->nextras; i++)
        free_extra(&s->extras[i]);
    if (s->index) {
        if (s->index_mask + 1 > 4 * INDEX_MIN && s->nents < (s->index_mask + 1) / 16) {
            wq_free(s->index); /* a big window is over: start small again */
            s->index = NULL;
            s->index_mask = 0;
        } else {
            memset(s->index, 0, (s->index_mask + 1) * sizeof *s->index);
        }
    }
    s->nents = s->nextras = s->arena_len = 0;
    if (s->capents > SHRINK_ABOVE) {
        wq_free(s->ents);
        wq_free(s->arena);
        s->ents = NULL;
        s->arena = NULL;
        s->capents = s->arena_cap = 0;
    }
    for (size_t i = 0; i < s->nannounce; i++)
        wq_free(s->announce[i]);
    s->nannounce = 0;
    s->ninbox_del = 0;
}

void wq_store_close(wq_store *s)
{
    if (!s)
        return;
    if (wq_store_flush(s) == 0)
        exec(s, "DELETE FROM meta WHERE name LIKE 'owner^_%' ESCAPE '^'");
    for (wq_store **pp = &open_stores; *pp; pp = &(*pp)->next_open) {
        if (*pp == s) {
            *pp = s->next_open;
            break;
        }
    }
    finalize_all(s);
    sqlite3_close(s->db);
    close(s->lock_fd); /* after SQLite let go of the file: closing drops this process's locks */
    for (size_t i = 0; i < s->nextras; i++)
        free_extra(&s->extras[i]);
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
    wq_free(s->inbox_del);
    wq_free(s->bloom);
    wq_free(s->path);
    wq_free(s);
}

/* ---- queues ---- */

static void announce(wq_store *s, const char *name)
{
    for (size_t i = 0; i < s->nannounce; i++)
        if (strcmp(s->announce[i], name) == 0)
            return;
    char *c = dup_bytes(name, strlen(name));
    if (!c || grow((void **)&s->announce, &s->capannounce, s->nannounce + 1, sizeof(char *)) < 0) {
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
            s->queues[i]->q = q;
            return s->queues[i];
        }
    }
    if (grow((void **)&s->queues, &s->capqueues, s->nqueues + 1, sizeof *s->queues) < 0) {
        wq_store_fail(s, WQ_ENOMEM, "out of memory");
        return NULL;
    }
    wq_store_queue *sq = wq_malloc(sizeof *sq);
    if (!sq) {
        wq_store_fail(s, WQ_ENOMEM, "out of memory");
        return NULL;
    }
    memset(sq, 0, sizeof *sq);
    sq->s = s;
    sq->q = q;
    sq->namelen = strlen(name);
    sq->name = dup_bytes(name, sq->namelen);
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
    if (sqlite3_prepare_v2(s->db,
                           "SELECT EXISTS (SELECT 1 FROM items WHERE queue = ?1)"
                           " OR EXISTS (SELECT 1 FROM failures WHERE queue = ?1)",
                           -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, sq->name, (int)sq->namelen, SQLITE_STATIC);
        if (sqlite3_step(st) == SQLITE_ROW)
            sq->complete = sqlite3_column_int(st, 0) == 0;
        sqlite3_finalize(st);
    }
    s->queues[s->nqueues++] = sq;
    wq_store_known_queue(s, name);
    return sq;
}

void wq_store_detach(wq_store_queue *sq)
{
    if (sq)
        sq->q = NULL;
}

/* ---- the pending set ---- */

static uint32_t key_hash(const wq_store_queue *sq, const char *key, size_t len)
{
    uint64_t h = wq_hash(key, len) + (uint64_t)sq->idx * 0x9e3779b97f4a7c15ULL;
    return (uint32_t)(h ^ (h >> 32));
}

/* The index slot holding (sq, key), or the empty slot where it would go. */
static size_t find_slot(const wq_store *s, const wq_store_queue *sq, const char *key, size_t len,
                        uint32_t h)
{
    size_t i = h & s->index_mask;
    for (;;) {
        uint32_t v = s->index[i];
        if (!v)
            return i;
        const struct pend *p = &s->ents[v - 1];
        if (p->hash == h && p->qidx == sq->idx && p->keylen == len &&
            (len == 0 || memcmp(s->arena + p->key_off, key, len) == 0))
            return i;
        i = (i + 1) & s->index_mask;
    }
}

/* Keeps the index at most half full. 0 or -1 (out of memory, index unchanged). */
static int index_reserve(wq_store *s, size_t n)
{
    size_t cap = s->index ? s->index_mask + 1 : 0;
    if (2 * n <= cap)
        return 0;
    size_t ncap = cap ? cap : INDEX_MIN;
    while (2 * n > ncap)
        ncap *= 2;
    uint32_t *idx = wq_malloc(ncap * sizeof *idx);
    if (!idx)
        return -1;
    memset(idx, 0, ncap * sizeof *idx);
    for (size_t e = 0; e < s->nents; e++) {
        size_t i = s->ents[e].hash & (ncap - 1);
        while (idx[i])
            i = (i + 1) & (ncap - 1);
        idx[i] = (uint32_t)e + 1;
    }
    wq_free(s->index);
    s->index = idx;
    s->index_mask = ncap - 1;
    return 0;
}

/* The pending entry of key, or NULL. */
static struct pend *lookup(wq_store_queue *sq, const char *key, size_t len)
{
    wq_store *s = sq->s;
    if (!s->nents)
        return NULL;
    uint32_t v = s->index[find_slot(s, sq, key, len, key_hash(sq, key, len))];
    return v ? &s->ents[v - 1] : NULL;
}

/* The pending entry of key, created if absent; NULL when out of memory. */
static struct pend *entry(wq_store_queue *sq, const char *key, size_t len)
{
    wq_store *s = sq->s;
    uint32_t h = key_hash(sq, key, len);
    if (s->nents) {
        uint32_t v = s->index[find_slot(s, sq, key, len, h)];
        if (v)
            return &s->ents[v - 1];
    }
    if (s->nents >= UINT32_MAX - 1 || index_reserve(s, s->nents + 1) < 0 ||
        grow((void **)&s->ents, &s->capents, s->nents + 1, sizeof *s->ents) < 0 ||
        grow((void **)&s->arena, &s->arena_cap, s->arena_len + len + 1, 1) < 0)
        return NULL;
    struct pend *p = &s->ents[s->nents];
    memset(p, 0, sizeof *p);
    if (len)
        memcpy(s->arena + s->arena_len, key, len);
    p->key_off = s->arena_len;
    p->keylen = (uint32_t)len;
    p->hash = h;
    s->arena_len += len;
    p->qidx = sq->idx;
    p->seq = s->next_seq++;
    p->seq_mode = SEQ_INSERT;
    if (!sq->complete || bloom_test(sq, key, len))
        p->flags |= PE_MIGHT_EXIST;
    s->index[find_slot(s, sq, key, len, h)] = (uint32_t)++s->nents;
    return p;
}

void wq_store_touch(wq_store_queue *sq, wq_event ev, const char *key, size_t len)
{
    if (!sq || sq->restoring || !key || ev == WQ_EV_IDLE || ev == WQ_EV_SHUTDOWN)
        return;
    wq_store *s = sq->s;
    struct pend *p = entry(sq, key, len);
    if (!p) {
        sq->resync = 1; /* rewrite the whole queue from the engine at the next flush */
        return;
    }
    p->flags |= PE_ITEM;
    wq_item_info info;
    switch (ev) {
    case WQ_EV_QUEUED:
        /* Entered the ready store: at the back of its priority level. */
        p->seq = s->next_seq++;
        p->seq_mode = SEQ_FORCE;
        p->flags |= PE_READDED;
        if (sq->q && wq_queue_lookup(sq->q, key, len, &info))
            p->prio_seen = info.priority;
        break;
    case WQ_EV_DIRTY: p->flags |= PE_READDED; break;
    case WQ_EV_UPDATED:
        /* A raised priority moves a queued key to the back of its new level. */
        if (sq->q && wq_queue_lookup(sq->q, key, len, &info) && (info.state & WQ_ST_QUEUED)) {
            if (p->seq_mode == SEQ_INSERT) {
                p->seq_mode = SEQ_IF_RAISED; /* compared with the file's priority */
                p->prio_seen = info.priority;
            } else if (info.priority > p->prio_seen) {
                p->seq = s->next_seq++;
                p->prio_seen = info.priority;
            }
        }
        break;
    default: break;
    }
}

void wq_store_touch_requeued(wq_store_queue *sq, const char *key, size_t len)
{
    struct pend *p = entry(sq, key, len);
    if (!p) {
        sq->resync = 1;
        return;
    }
    p->flags |= PE_ITEM | PE_READDED;
    p->seq = sq->s->next_seq++;
    p->seq_mode = SEQ_FORCE;
}

static struct extra *extra_of(wq_store_queue *sq, const char *key, size_t len)
{
    wq_store *s = sq->s;
    struct pend *p = entry(sq, key, len);
    if (!p)
        return NULL;
    if (p->extra)
        return &s->extras[p->extra - 1];
    if (grow((void **)&s->extras, &s->capextras, s->nextras + 1, sizeof *s->extras) < 0)
        return NULL;
    struct extra *e = &s->extras[s->nextras++];
    memset(e, 0, sizeof *e);
    p->extra = (uint32_t)s->nextras;
    return e;
}

void wq_store_failures(wq_store_queue *sq, const char *key, size_t len, int64_t requeues,
                       const char *last_error)
{
    if (!sq)
        return;
    if (requeues <= 0 && sq->complete && !lookup(sq, key, len) &&
        !wq_keymap_get(sq->fail_set, key, len))
        return; /* no row to delete */
    struct extra *e = extra_of(sq, key, len);
    char *msg = NULL;
    if (e && requeues > 0 && last_error && !(msg = dup_bytes(last_error, strlen(last_error))))
        e = NULL;
    if (!e) {
        sq->s->lost_updates++;
        return;
    }
    wq_free(e->last_error);
    e->last_error = msg;
    e->requeues = requeues;
    e->fail_op = requeues > 0 ? OP_SET : OP_DEL;
}

void wq_store_dead(wq_store_queue *sq, const char *key, size_t len, const char *payload,
                   size_t paylen, const char *error, int64_t attempts, double failed_at)
{
    if (!sq)
        return;
    struct extra *e = extra_of(sq, key, len);
    char *pay = NULL, *err = NULL;
    if (e && payload && !(pay = dup_bytes(payload, paylen)))
        e = NULL;
    if (e && error && !(err = dup_bytes(error, strlen(error))))
        e = NULL;
    if (!e) {
        wq_free(pay);
        wq_free(err);
        sq->s->lost_updates++;
        return;
    }
    wq_free(e->dpayload);
    wq_free(e->derror);
    e->dpayload = pay;
    e->dpaylen = paylen;
    e->derror = err;
    e->attempts = attempts;
    e->failed_at = failed_at;
    e->dead_op = OP_SET;
}

void wq_store_undead(wq_store_queue *sq, const char *key, size_t len)
{
    if (!sq)
        return;
    struct extra *e = extra_of(sq, key, len);
    if (!e) {
        sq->s->lost_updates++;
        return;
    }
    wq_free(e->dpayload);
    wq_free(e->derror);
    e->dpayload = e->derror = NULL;
    e->dead_op = OP_DEL;
}

int wq_store_dirty(const wq_store *s)
{
    if (!s)
        return 0;
    if (s->nents || s->ninbox_del || s->nannounce || s->lost_updates)
        return 1;
    for (uint32_t i = 0; i < s->nqueues; i++)
        if (s->queues[i]->resync)
            return 1;
    return 0;
}

/* ---- flush ---- */

static const char *state_name(unsigned st)
{
    if (st & WQ_ST_DIRTY)
        return "queued"; /* also when re-added while processing (SPEC section 4) */
    if (st & WQ_ST_PROCESSING)
        return "processing";
    return "waiting";
}

/* Writes the engine's current record of key (info) as its items row. SQLite result code. */
static int upsert_item(wq_store *s, wq_store_queue *sq, const wq_item_info *info, int64_t seq,
                       int mode, int readded, double now)
{
    sqlite3_stmt *st = s->st[ST_UPSERT_ITEM];
    sqlite3_bind_text(st, 1, sq->name, (int)sq->namelen, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, info->key, (int)info->keylen, SQLITE_TRANSIENT);
    if (info->payload)
        sqlite3_bind_text64(st, 3, info->payload, info->paylen, SQLITE_TRANSIENT, SQLITE_UTF8);
    else
        sqlite3_bind_null(st, 3);
    sqlite3_bind_text(st, 4, state_name(info->state), -1, SQLITE_STATIC);
    if (info->state & WQ_ST_WAITING)
        sqlite3_bind_double(st, 5, s->tb.to_unix(s->tb.ud, info->ready_at));
    else
        sqlite3_bind_null(st, 5);
    sqlite3_bind_int(st, 6, info->priority);
    sqlite3_bind_int64(st, 7, seq);
    sqlite3_bind_double(st, 8,
                        info->state & WQ_ST_DIRTY ? s->tb.to_unix(s->tb.ud, info->added_at) : now);
    sqlite3_bind_double(st, 9, now);
    sqlite3_bind_int(st, 10, mode);
    sqlite3_bind_int(st, 11, readded);
    int rc = run(st);
    if (rc == SQLITE_OK)
        wq_store_bloom_add(sq, info->key, info->keylen);
    return rc;
}

static int delete_key(sqlite3_stmt *st, wq_store_queue *sq, const char *key, size_t len)
{
    sqlite3_bind_text(st, 1, sq->name, (int)sq->namelen, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, key, (int)len, SQLITE_TRANSIENT);
    return run(st);
}

static int write_item(wq_store *s, wq_store_queue *sq, const struct pend *p, const char *key,
                      double now, uint64_t *rows)
{
    wq_item_info info;
    if (!sq->q)
        return SQLITE_OK; /* detached: its engine queue is gone, the file keeps its rows */
    if (!wq_queue_lookup(sq->q, key, p->keylen, &info)) {
        if (!(p->flags & PE_MIGHT_EXIST)) {
            s->stats.deletes_skipped++; /* came and went within the window */
            return SQLITE_OK;
        }
        ++*rows;
        return delete_key(s->st[ST_DELETE_ITEM], sq, key, p->keylen);
    }
    ++*rows;
    return upsert_item(s, sq, &info, p->seq, p->seq_mode, (p->flags & PE_READDED) != 0, now);
}

struct resync_ctx {
    wq_store *s;
    wq_store_queue *sq;
    double now;
    uint64_t rows;
    int rc;
};

static int resync_visit(void *ud, const wq_item_info *info)
{
    struct resync_ctx *c = ud;
    c->rc = upsert_item(c->s, c->sq, info, c->s->next_seq++, SEQ_FORCE, 1, c->now);
    c->rows++;
    return c->rc != SQLITE_OK;
}

/* Rewrites all of a queue's rows after a touch was lost (order within a priority may change). */
static int resync_queue(wq_store *s, wq_store_queue *sq, double now, uint64_t *rows)
{
    if (!sq->q)
        return SQLITE_OK;
    sqlite3_bind_text(s->st[ST_DELETE_QUEUE_ITEMS], 1, sq->name, (int)sq->namelen, SQLITE_STATIC);
    int rc = run(s->st[ST_DELETE_QUEUE_ITEMS]);
    if (rc != SQLITE_OK)
        return rc;
    struct resync_ctx c = {s, sq, now, 0, SQLITE_OK};
    wq_queue_foreach(sq->q, resync_visit, &c);
    *rows += c.rows;
    return c.rc;
}

static int write_extra(wq_store *s, wq_store_queue *sq, const char *key, size_t len,
                       const struct extra *e, double now, uint64_t *rows)
{
    int rc = SQLITE_OK;
    if (e->fail_op == OP_SET) {
        sqlite3_stmt *st = s->st[ST_UPSERT_FAIL];
        sqlite3_bind_text(st, 1, sq->name, (int)sq->namelen, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, key, (int)len, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 3, e->requeues);
        if (e->last_error)
            sqlite3_bind_text(st, 4, e->last_error, -1, SQLITE_TRANSIENT);
        else
            sqlite3_bind_null(st, 4);
        sqlite3_bind_double(st, 5, now);
        rc = run(st);
        ++*rows;
    } else if (e->fail_op == OP_DEL &&
               (!sq->complete || wq_keymap_get(sq->fail_set, key, len) != NULL)) {
        rc = delete_key(s->st[ST_DELETE_FAIL], sq, key, len);
        ++*rows;
    }
    if (rc != SQLITE_OK)
        return rc;
    if (e->dead_op == OP_SET) {
        sqlite3_stmt *st = s->st[ST_UPSERT_DEAD];
        sqlite3_bind_text(st, 1, sq->name, (int)sq->namelen, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, key, (int)len, SQLITE_TRANSIENT);
        if (e->dpayload)
            sqlite3_bind_text64(st, 3, e->dpayload, e->dpaylen, SQLITE_TRANSIENT, SQLITE_UTF8);
        else
            sqlite3_bind_null(st, 3);
        if (e->derror)
            sqlite3_bind_text(st, 4, e->derror, -1, SQLITE_TRANSIENT);
        else
            sqlite3_bind_null(st, 4);
        sqlite3_bind_int64(st, 5, e->attempts);
        sqlite3_bind_double(st, 6, e->failed_at);
        rc = run(st);
        ++*rows;
    } else if (e->dead_op == OP_DEL) {
        rc = delete_key(s->st[ST_DELETE_DEAD], sq, key, len);
        ++*rows;
    }
    return rc;
}

/* After the commit: the file now has exactly these failures rows. */
static void note_committed(wq_store *s)
{
    for (size_t i = 0; i < s->nents; i++) {
        const struct pend *p = &s->ents[i];
        if (!p->extra)
            continue;
        const struct extra *e = &s->extras[p->extra - 1];
        wq_store_queue *sq = s->queues[p->qidx];
        const char *key = s->arena + p->key_off;
        if (e->fail_op == OP_SET) {
            if (!wq_keymap_put(sq->fail_set, key, p->keylen, NULL))
                sq->complete = 0; /* can no longer tell which rows exist */
        } else if (e->fail_op == OP_DEL) {
            wq_keymap_del(sq->fail_set, key, p->keylen);
        }
    }
}

int wq_store_flush(wq_store *s)
{
    if (!s || !wq_store_dirty(s))
        return 0;
    int64_t t0 = mono_ns();
    double now = wq_store_wall();
    uint64_t rows = 0;
    int rc = run(s->st[ST_BEGIN]);
    if (rc != SQLITE_OK)
        goto failed;
    for (uint32_t i = 0; i < s->nqueues && rc == SQLITE_OK; i++)
        if (s->queues[i]->resync)
            rc = resync_queue(s, s->queues[i], now, &rows);
    for (size_t i = 0; i < s->nents && rc == SQLITE_OK; i++) {
        const struct pend *p = &s->ents[i];
        wq_store_queue *sq = s->queues[p->qidx];
        const char *key = s->arena + p->key_off;
        if ((p->flags & PE_ITEM) && !sq->resync)
            rc = write_item(s, sq, p, key, now, &rows);
        if (rc == SQLITE_OK && p->extra)
            rc = write_extra(s, sq, key, p->keylen, &s->extras[p->extra - 1], now, &rows);
    }
    for (size_t i = 0; i < s->nannounce && rc == SQLITE_OK; i++) {
        sqlite3_bind_text(s->st[ST_QUEUE_SEEN], 1, s->announce[i], -1, SQLITE_STATIC);
        sqlite3_bind_double(s->st[ST_QUEUE_SEEN], 2, now);
        rc = run(s->st[ST_QUEUE_SEEN]);
    }
    for (size_t i = 0; i < s->ninbox_del && rc == SQLITE_OK; i++) {
        sqlite3_bind_int64(s->st[ST_DELETE_INBOX], 1, s->inbox_del[i]);
        rc = run(s->st[ST_DELETE_INBOX]);
        rows++;
    }
    if (rc == SQLITE_OK)
        rc = run(s->st[ST_COMMIT]);
    if (rc != SQLITE_OK)
        goto failed;

    note_committed(s);
    s->stats.inbox_consumed += s->ninbox_del;
    clear_pending(s);
    if (s->bloom_set > BLOOM_BITS / 2)
        bloom_rebuild(s);
    double dt = (double)(mono_ns() - t0) / 1e9;
    s->stats.commits++;
    s->stats.rows_written += rows;
    s->stats.last_commit_rows = rows;
    if (rows > s->stats.max_commit_rows)
        s->stats.max_commit_rows = rows;
    s->stats.last_commit_unix = now;
    s->stats.commit_seconds_sum += dt;
    wq_histogram_observe(&s->stats.commit_latency, dt);
    if (s->lost_updates) {
        uint64_t n = s->lost_updates;
        s->lost_updates = 0;
        return wq_store_fail(s, WQ_ENOMEM,
                             "out of memory: %llu failure-count or dead-letter changes were not "
                             "written to %s",
                             (unsigned long long)n, s->path);
    }
    return 0;

failed:
    /* Keep the pending set: it is rewritten from the engine by the next flush. */
    s->stats.flush_errors++;
    if ((rc & 0xff) == SQLITE_BUSY && sqlite3_get_autocommit(s->db))
        return wq_store_fail(s, WQ_EBUSY,
                             "state file %s stayed locked by another connection (an open write "
                             "transaction in a sqlite3 session?); nothing was written, try again",
                             s->path);
    wq_store_fail(s, WQ_EIO, "cannot write state file %s: %s", s->path, sqlite3_errmsg(s->db));
    if (!sqlite3_get_autocommit(s->db))
        run(s->st[ST_ROLLBACK]);
    return WQ_EIO;
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
