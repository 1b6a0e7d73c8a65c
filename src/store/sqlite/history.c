/*
 * The history of finished runs in the state file (SPEC 11, table history):
 * a row per run that ended done, dead, cancelled or removed, appended
 * behind like everything else (in the group commit of the outcome that
 * made it), and pruned in small slices (at most PRUNE_ROWS rows per queue
 * and flush, at most once a second) once older than the queue's history
 * option. The table has no index but its row id, the order the runs
 * finished in: a row is an append at the tree's right edge and a prune a
 * delete at its left edge, which keeps the cost per job small (a secondary
 * index on the key cost 40% of the persisted jobs/s, measured). Readers
 * walk it by id: newest first for a listing, a key's last run by a scan.
 */
#include "store/sqlite/store_int.h"

#include <string.h>
#include <unistd.h>

#define PRUNE_ROWS 1000 /* rows a prune slice deletes at most, per queue */
#define BATCH 32        /* rows per INSERT statement (one statement per row costs 2x) */
#define COLS 10
#define PRUNE_EVERY 1.0 /* seconds between prune slices */

static const char *const state_names[] = {"done", "dead", "cancelled", "removed"};

struct hrow {
    uint32_t qidx;
    uint8_t state;
    char *key, *result, *error; /* owned; result and error may be NULL */
    size_t keylen, rlen;
    double added_at, started_at, finished_at;
    int64_t attempts;
};

struct wq_store_history {
    struct hrow *rows; /* appended since the last commit */
    size_t n, cap;
    double *keep; /* per queue index: its history option (0: none seen) */
    uint32_t nkeep;
    double next_prune;
    char runner[300]; /* "host:pid": who ran them */
    sqlite3_stmt *ins, *ins_batch, *prune;
};

static struct wq_store_history *state(wq_store *s)
{
    if (s->history)
        return s->history;
    struct wq_store_history *h = wq_malloc(sizeof *h);
    if (!h)
        return NULL;
    memset(h, 0, sizeof *h);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    snprintf(h->runner, sizeof h->runner, "%s:%ld", host, (long)getpid());
    s->history = h;
    return h;
}

static char *dup_or_null(const char *p, size_t n, int *oom)
{
    if (!p)
        return NULL;
    char *d = wq_store_dup(p, n);
    if (!d)
        *oom = 1;
    return d;
}

void wq_store_history_put(wq_store_queue *sq, const wq_history_row *r)
{
    if (!sq || r->keep <= 0)
        return;
    wq_store *s = sq->s;
    struct wq_store_history *h = state(s);
    int oom = !h;
    if (h && sq->idx >= h->nkeep) {
        double *k = wq_realloc(h->keep, (sq->idx + 1) * sizeof *k);
        if (k) {
            memset(k + h->nkeep, 0, (sq->idx + 1 - h->nkeep) * sizeof *k);
            h->keep = k;
            h->nkeep = sq->idx + 1;
        } else {
            oom = 1;
        }
    }
    if (!oom && h->n == h->cap &&
        wq_store_grow((void **)&h->rows, &h->cap, h->n + 1, sizeof *h->rows) < 0)
        oom = 1;
    if (oom) {
        s->lost_updates++; /* the flush fails the store: nothing is lost silently */
        return;
    }
    h->keep[sq->idx] = r->keep;
    struct hrow *x = &h->rows[h->n];
    memset(x, 0, sizeof *x);
    x->key = dup_or_null(r->key, r->keylen, &oom);
    x->result = dup_or_null(r->result, r->rlen, &oom);
    x->error = dup_or_null(r->error, r->error ? strlen(r->error) : 0, &oom);
    if (oom) {
        wq_free(x->key);
        wq_free(x->result);
        wq_free(x->error);
        s->lost_updates++;
        return;
    }
    x->qidx = sq->idx;
    x->state = (uint8_t)r->state;
    x->keylen = r->keylen;
    x->rlen = r->rlen;
    x->added_at = r->added_at;
    x->started_at = r->started_at;
    x->finished_at = r->finished_at;
    x->attempts = r->attempts;
    h->n++;
}

int wq_store_history_dirty(const wq_store *s)
{
    return s->history && s->history->n > 0;
}

static int prepare(wq_store *s, sqlite3_stmt **st, const char *sql)
{
    if (*st)
        return SQLITE_OK;
    return sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL);
}

/* Binds row x at parameter offset base (0 for the first row of a statement). */
static void bind_row(struct wq_store_history *h, wq_store *s, sqlite3_stmt *st, int base,
                     const struct hrow *x)
{
    const wq_store_queue *sq = s->queues[x->qidx];
    sqlite3_bind_text(st, base + 1, sq->name, (int)sq->namelen, SQLITE_STATIC);
    sqlite3_bind_text64(st, base + 2, x->key, x->keylen, SQLITE_STATIC, SQLITE_UTF8);
    sqlite3_bind_text(st, base + 3, state_names[x->state], -1, SQLITE_STATIC);
    wq_store_bind_time(st, base + 4, x->added_at);
    wq_store_bind_time(st, base + 5, x->started_at);
    sqlite3_bind_double(st, base + 6, x->finished_at);
    sqlite3_bind_int64(st, base + 7, x->attempts);
    sqlite3_bind_text(st, base + 8, h->runner, -1, SQLITE_STATIC);
    if (x->result)
        sqlite3_bind_text64(st, base + 9, x->result, x->rlen, SQLITE_STATIC, SQLITE_UTF8);
    else
        sqlite3_bind_null(st, base + 9);
    if (x->error)
        sqlite3_bind_text(st, base + 10, x->error, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, base + 10);
}

#define INSERT_HEAD                                                                                \
    "INSERT INTO history(queue, key, state, added_at, started_at, finished_at, attempts, runner,"  \
    " result, error) VALUES "

int wq_store_write_history(wq_store *s, double now, uint64_t *rows)
{
    struct wq_store_history *h = s->history;
    if (!h)
        return SQLITE_OK;
    int rc = SQLITE_OK;
    size_t i = 0;
    if (h->n >= BATCH && !h->ins_batch) {
        char sql[sizeof INSERT_HEAD + BATCH * 24];
        size_t n = (size_t)snprintf(sql, sizeof sql, "%s", INSERT_HEAD);
        for (int r = 0; r < BATCH; r++)
            n += (size_t)snprintf(sql + n, sizeof sql - n, "%s(?,?,?,?,?,?,?,?,?,?)", r ? "," : "");
        rc = prepare(s, &h->ins_batch, sql);
    }
    for (; rc == SQLITE_OK && h->n - i >= BATCH; i += BATCH) {
        for (int r = 0; r < BATCH; r++)
            bind_row(h, s, h->ins_batch, r * COLS, &h->rows[i + (size_t)r]);
        rc = wq_store_run(h->ins_batch);
        *rows += BATCH;
    }
    if (rc == SQLITE_OK && i < h->n)
        rc = prepare(s, &h->ins, INSERT_HEAD "(?,?,?,?,?,?,?,?,?,?)");
    for (; rc == SQLITE_OK && i < h->n; i++) {
        bind_row(h, s, h->ins, 0, &h->rows[i]);
        rc = wq_store_run(h->ins);
        ++*rows;
    }
    if (h->ins)
        sqlite3_clear_bindings(h->ins);
    if (h->ins_batch)
        sqlite3_clear_bindings(h->ins_batch);
    /* A slice of the rows past each queue's window (the oldest first, by its index). */
    if (rc != SQLITE_OK || now < h->next_prune)
        return rc;
    h->next_prune = now + PRUNE_EVERY;
    rc = prepare(s, &h->prune,
                 "DELETE FROM history WHERE id IN (SELECT id FROM history"
                 " WHERE queue = ?1 AND finished_at < ?2 ORDER BY id LIMIT ?3)");
    for (uint32_t q = 0; q < h->nkeep && q < s->nqueues && rc == SQLITE_OK; q++) {
        if (h->keep[q] <= 0)
            continue;
        const wq_store_queue *sq = s->queues[q];
        sqlite3_bind_text(h->prune, 1, sq->name, (int)sq->namelen, SQLITE_STATIC);
        sqlite3_bind_double(h->prune, 2, now - h->keep[q]);
        sqlite3_bind_int(h->prune, 3, PRUNE_ROWS);
        rc = wq_store_run(h->prune);
        *rows += (uint64_t)sqlite3_changes(s->db);
    }
    if (h->prune)
        sqlite3_clear_bindings(h->prune);
    return rc;
}

void wq_store_clear_history(wq_store *s, int committed)
{
    struct wq_store_history *h = s->history;
    if (!h || !committed)
        return; /* not committed: the next flush writes them again */
    for (size_t i = 0; i < h->n; i++) {
        wq_free(h->rows[i].key);
        wq_free(h->rows[i].result);
        wq_free(h->rows[i].error);
    }
    h->n = 0;
}

void wq_store_history_free(wq_store *s)
{
    struct wq_store_history *h = s->history;
    if (!h)
        return;
    wq_store_clear_history(s, 1);
    sqlite3_finalize(h->ins);
    sqlite3_finalize(h->ins_batch);
    sqlite3_finalize(h->prune);
    wq_free(h->rows);
    wq_free(h->keep);
    wq_free(h);
    s->history = NULL;
}

int wq_store_history_uncommitted(wq_store_queue *sq, const char *key, size_t len,
                                 wq_history_view *v)
{
    struct wq_store_history *h = sq->s->history;
    for (size_t i = h ? h->n : 0; i-- > 0;) {
        const struct hrow *x = &h->rows[i];
        if (x->qidx != sq->idx || x->keylen != len || memcmp(x->key, key, len) != 0)
            continue;
        memset(v, 0, sizeof *v);
        v->key = x->key;
        v->keylen = x->keylen;
        v->state = state_names[x->state];
        v->added_at = x->added_at;
        v->started_at = x->started_at;
        v->finished_at = x->finished_at;
        v->attempts = x->attempts;
        v->runner = h->runner;
        v->result = x->result;
        v->rlen = x->rlen;
        v->error = x->error;
        return 1;
    }
    return 0;
}

/* The one integer sql answers for the queue (?1) and the time since (?2), or -1. */
static int64_t queue_count(wq_store_queue *sq, const char *sql, double since)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(sq->s->db, sql, -1, &st, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_text(st, 1, sq->name, (int)sq->namelen, SQLITE_STATIC);
    sqlite3_bind_double(st, 2, since);
    int64_t n = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    return n;
}

int64_t wq_store_history_reran(wq_store_queue *sq, double since)
{
    /* A first run of the file (nothing finished before it) ends at once: the oldest rows come
     * first in id order, so this stops at the first earlier one. */
    int64_t before = queue_count(sq,
                                 "SELECT EXISTS (SELECT 1 FROM history WHERE queue = ?1"
                                 " AND state = 'done' AND finished_at < ?2)",
                                 since);
    if (before <= 0)
        return before;
    /* one pass over the table (no index on the key), grouped */
    return queue_count(sq,
                       "SELECT count(*) FROM (SELECT key FROM history"
                       " WHERE queue = ?1 AND state = 'done' GROUP BY key"
                       " HAVING min(finished_at) < ?2 AND max(finished_at) >= ?2)",
                       since);
}

int wq_store_history_list(wq_store_queue *sq, int64_t before, size_t limit,
                          void (*fn)(void *ud, const wq_history_view *v), void *ud)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(sq->s->db,
                           "SELECT id, key, state, added_at, started_at, finished_at, attempts,"
                           " runner, result, error FROM history"
                           " WHERE queue = ?1 AND (?2 = 0 OR id < ?2) ORDER BY id DESC LIMIT ?3",
                           -1, &st, NULL) != SQLITE_OK)
        return WQ_EIO;
    sqlite3_bind_text(st, 1, sq->name, (int)sq->namelen, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, before);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)limit);
    int n = 0, rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *key = (const char *)sqlite3_column_text(st, 1);
        const char *result = (const char *)sqlite3_column_text(st, 8);
        wq_history_view v = {.id = sqlite3_column_int64(st, 0),
                             .key = key ? key : "",
                             .keylen = (size_t)sqlite3_column_bytes(st, 1),
                             .state = (const char *)sqlite3_column_text(st, 2),
                             .added_at = sqlite3_column_double(st, 3),
                             .started_at = sqlite3_column_double(st, 4),
                             .finished_at = sqlite3_column_double(st, 5),
                             .attempts = sqlite3_column_int64(st, 6),
                             .runner = (const char *)sqlite3_column_text(st, 7),
                             .result = result,
                             .rlen = result ? (size_t)sqlite3_column_bytes(st, 8) : 0,
                             .error = (const char *)sqlite3_column_text(st, 9)};
        fn(ud, &v);
        n++;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? n : WQ_EIO;
}
