/*
 * The history of finished runs in the state file (SPEC 11, table history):
 * a row per run that ended done, dead, cancelled or removed, appended
 * behind like everything else (in the group commit of the outcome that
 * made it), and pruned in slices once older than the queue's history
 * option. The table has no index but its row id, the order the runs
 * finished in: a row is an append at the tree's right edge and a prune a
 * delete at its left edge, which keeps the cost per job small (a secondary
 * index on the key cost 40% of the persisted jobs/s, measured). Readers
 * walk it by id: newest first for a listing, a key's last run by a scan.
 *
 * A prune never reads the table whole (the flush runs on the loop): a queue
 * walks its rows with a cursor below which they are gone, and a slice reads
 * at most WINDOW row ids after it, deleting the queue's expired rows there.
 * Runs finish in id order, so the queue's first row left after a slice is
 * the oldest it has: until that row expires the walk costs nothing. A queue
 * has two walks: one from the table's start, through the rows of earlier
 * runs (of every queue: WINDOW ids a slice), and one from this process's
 * first row of the queue on, so that its new rows go in time however many
 * rows lie before them. Slices go on within a flush for at most BUDGET_NS;
 * a backlog drains over the next flushes.
 */
#include "store/sqlite/store_int.h"

#include <string.h>
#include <unistd.h>

#define PRUNE_ROWS 1000   /* rows a prune slice deletes at most */
#define WINDOW 16384      /* row ids a prune slice reads at most */
#define BUDGET_NS 2000000 /* time a flush spends on slices at most */
#define BATCH 32          /* rows per INSERT statement (one statement per row costs 2x) */
#define COLS 10
#define PRUNE_EVERY 1.0 /* seconds between the prunes of a flush */

static const char *const state_names[] = {"done", "dead", "cancelled", "removed"};

struct hrow {
    uint32_t qidx;
    uint8_t state;
    char *key, *result, *error; /* owned; result and error may be NULL */
    size_t keylen, rlen;
    double added_at, started_at, finished_at;
    int64_t attempts;
};

/* A walk over a stretch of a queue's row ids: its rows up to id are gone, the stretch ends at
 * end (0: at the table's end), and nothing there expires before due (0: more to do now). */
struct walk {
    int64_t id, end;
    double due;
};

/* A queue's walks: w[0] from the table's start; w[1], once split, from this process's first
 * row of the queue on. All zeros: one walk over the whole table. */
struct cursor {
    struct walk w[2];
    int split;
};

struct wq_store_history {
    struct hrow *rows; /* appended since the last commit */
    size_t n, cap;
    double *keep;       /* per queue index: its history option (0: none seen) */
    struct cursor *cur; /* per queue index */
    uint32_t nkeep;
    int64_t high; /* the highest row id written: one below it means ids were reused */
    double next_prune;
    char runner[300]; /* "host:pid": who ran them */
    sqlite3_stmt *ins, *ins_batch, *prune, *first, *last;
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
        uint32_t n = sq->idx + 1;
        double *k = wq_realloc(h->keep, n * sizeof *k);
        if (k)
            h->keep = k;
        struct cursor *c = k ? wq_realloc(h->cur, n * sizeof *c) : NULL;
        if (c) {
            h->cur = c;
            memset(k + h->nkeep, 0, (n - h->nkeep) * sizeof *k);
            memset(c + h->nkeep, 0, (n - h->nkeep) * sizeof *c);
            h->nkeep = n;
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

static int walk_done(const struct walk *w)
{
    return w->end && w->id >= w->end;
}

/* Row id is queue q's first of this process: its walk splits there (w[0] ends before it). */
static void first_row(struct wq_store_history *h, uint32_t q, int64_t id)
{
    struct cursor *c = &h->cur[q];
    if (c->split)
        return;
    c->split = 1;
    if (c->w[0].id < id - 1) {
        c->w[0].end = id - 1;
        c->w[1] = (struct walk){.id = id - 1};
    } else { /* w[0] is past it already: it goes on as w[1], and w[0] is done */
        c->w[1] = c->w[0];
        c->w[0] = (struct walk){.id = 1, .end = 1};
    }
}

/* One slice of walk w of queue q: the queue's expired rows among the WINDOW ids after its
 * cursor go; the cursor moves to its first row left there, and due to when that one expires. */
static int prune_slice(wq_store *s, struct wq_store_history *h, uint32_t q, struct walk *w,
                       double now, uint64_t *rows)
{
    const wq_store_queue *sq = s->queues[q];
    double cutoff = now - h->keep[q]; /* a row finished at or before it has expired */
    int64_t to = w->id + WINDOW;
    if (w->end && to > w->end)
        to = w->end;
    sqlite3_stmt *st = h->prune;
    sqlite3_bind_int64(st, 1, w->id);
    sqlite3_bind_int64(st, 2, to);
    sqlite3_bind_text(st, 3, sq->name, (int)sq->namelen, SQLITE_STATIC);
    sqlite3_bind_double(st, 4, cutoff);
    sqlite3_bind_int(st, 5, PRUNE_ROWS);
    int rc = wq_store_run(st);
    if (rc != SQLITE_OK)
        return rc;
    *rows += (uint64_t)sqlite3_changes(s->db);
    st = h->first;
    sqlite3_bind_int64(st, 1, w->id);
    sqlite3_bind_int64(st, 2, to);
    sqlite3_bind_text(st, 3, sq->name, (int)sq->namelen, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        double at = sqlite3_column_double(st, 1);
        w->id = sqlite3_column_int64(st, 0) - 1;
        w->due = at > cutoff ? at + h->keep[q] : 0; /* expired: past the slice's limit */
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE && w->end) { /* none of its rows there */
        w->id = to;
        w->due = 0;
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) { /* none there: on past them, up to the table's last row */
        rc = sqlite3_step(h->last);
        int64_t last = rc == SQLITE_ROW ? sqlite3_column_int64(h->last, 0) : 0;
        rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
        sqlite3_reset(h->last);
        w->id = to < last ? to : last;
        w->due = to < last ? 0 : now + PRUNE_EVERY / 2; /* at the end: the next prune looks */
    }
    sqlite3_reset(st);
    return rc;
}

/* Slices of every queue's walks with expired rows, within the flush's budget. */
static int prune(wq_store *s, struct wq_store_history *h, double now, uint64_t *rows)
{
    int rc = prepare(s, &h->prune,
                     "DELETE FROM history WHERE id IN (SELECT id FROM history WHERE id > ?1"
                     " AND id <= ?2 AND queue = ?3 AND finished_at <= ?4 ORDER BY id LIMIT ?5)");
    if (rc == SQLITE_OK)
        rc = prepare(s, &h->first,
                     "SELECT id, finished_at FROM history WHERE id > ?1 AND id <= ?2"
                     " AND queue = ?3 ORDER BY id LIMIT 1");
    if (rc == SQLITE_OK)
        rc = prepare(s, &h->last, "SELECT max(id) FROM history");
    int64_t end = wq_store_mono_ns() + BUDGET_NS;
    /* this process's rows first (w[1]), then those of earlier runs */
    for (int i = 1, more = 1; i >= 0 && rc == SQLITE_OK; i -= !more) {
        more = 0;
        for (uint32_t q = 0; q < h->nkeep && q < s->nqueues && rc == SQLITE_OK; q++) {
            struct walk *w = &h->cur[q].w[i];
            if (h->keep[q] <= 0 || (i && !h->cur[q].split) || walk_done(w) || w->due > now)
                continue;
            if (wq_store_mono_ns() >= end) /* the rest at the next flush */
                goto out;
            rc = prune_slice(s, h, q, w, now, rows);
            more |= w->due == 0 && !walk_done(w);
        }
    }
out:
    if (h->prune)
        sqlite3_clear_bindings(h->prune);
    if (h->first)
        sqlite3_clear_bindings(h->first);
    return rc;
}

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
        int64_t last = sqlite3_last_insert_rowid(s->db); /* the rows' ids are in their order */
        for (int r = 0; rc == SQLITE_OK && r < BATCH; r++)
            first_row(h, h->rows[i + (size_t)r].qidx, last - BATCH + 1 + r);
    }
    if (rc == SQLITE_OK && i < h->n)
        rc = prepare(s, &h->ins, INSERT_HEAD "(?,?,?,?,?,?,?,?,?,?)");
    for (; rc == SQLITE_OK && i < h->n; i++) {
        bind_row(h, s, h->ins, 0, &h->rows[i]);
        rc = wq_store_run(h->ins);
        ++*rows;
        if (rc == SQLITE_OK)
            first_row(h, h->rows[i].qidx, sqlite3_last_insert_rowid(s->db));
    }
    if (h->ins)
        sqlite3_clear_bindings(h->ins);
    if (h->ins_batch)
        sqlite3_clear_bindings(h->ins_batch);
    if (rc == SQLITE_OK && h->n > 0) {
        /* below the last one: the table was emptied and ids start again, so do the walks */
        int64_t id = sqlite3_last_insert_rowid(s->db);
        if (id < h->high && h->cur)
            memset(h->cur, 0, h->nkeep * sizeof *h->cur);
        h->high = id;
    }
    if (rc != SQLITE_OK || now < h->next_prune)
        return rc;
    h->next_prune = now + PRUNE_EVERY;
    return prune(s, h, now, rows);
}

void wq_store_clear_history(wq_store *s, int committed)
{
    struct wq_store_history *h = s->history;
    if (h && !committed && h->cur) /* a prune rolled back: its rows are there again */
        memset(h->cur, 0, h->nkeep * sizeof *h->cur);
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
    sqlite3_finalize(h->first);
    sqlite3_finalize(h->last);
    wq_free(h->rows);
    wq_free(h->keep);
    wq_free(h->cur);
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
