/*
 * The job runner's own tables (SPEC 7.2, 7.3): completed-job memory (done)
 * and schedules. Their changes go through the group commit like every
 * other row: a done row rides on its key's pending entry (commit.c), a
 * schedule change waits in a short list searched by name (a script has a
 * few schedules, changed once per run of each), a prune is one bound per
 * queue. The runner keeps both tables in memory and reads them once, at
 * start-up.
 *
 * done has no index on finished_at (every job would pay for it), so a
 * prune cannot find the expired rows without reading them all: it sweeps
 * the queue's rows in key order, WQ_STORE_PRUNE_STEP rows per flush, so
 * that no commit is held up by a table of a million rows.
 */
#include "store/sqlite/store_int.h"

#include <math.h>
#include <string.h>

/* ---- pending changes ---- */

static void free_op(struct sched_op *o)
{
    wq_free(o->name);
    wq_free(o->spec);
    wq_free(o->key);
    wq_free(o->payload);
    memset(o, 0, sizeof *o);
}

/* Forgets the queue's prune and the slice a flush prepared (NULL: none). */
static void end_prune(wq_store_queue *sq, int keep)
{
    wq_free(sq->prune_next);
    sq->prune_next = NULL;
    sq->prune_end = 0;
    if (keep)
        return;
    wq_free(sq->prune_from);
    sq->prune_from = NULL;
    sq->prune = 0;
}

void wq_store_clear_jobs(wq_store *s, int committed)
{
    for (size_t i = 0; i < s->nsched; i++)
        free_op(&s->sched[i]);
    s->nsched = 0;
    for (uint32_t i = 0; i < s->nqueues; i++) {
        wq_store_queue *sq = s->queues[i];
        if (committed && sq->prune && !sq->prune_end) {
            /* The slice is committed: the next one starts where it ended. */
            wq_free(sq->prune_from);
            sq->prune_from = sq->prune_next;
            sq->prune_fromlen = sq->prune_nextlen;
            sq->prune_next = NULL;
            continue;
        }
        end_prune(sq, 0);
    }
}

/* The pending change of the queue's schedule name, made if absent (emptied); NULL when out of
 * memory. */
static struct sched_op *sched_op(wq_store_queue *sq, const char *name)
{
    wq_store *s = sq->s;
    for (size_t i = 0; i < s->nsched; i++) {
        struct sched_op *o = &s->sched[i];
        if (o->qidx == sq->idx && strcmp(o->name, name) == 0) {
            char *keep = o->name;
            o->name = NULL;
            free_op(o);
            o->name = keep;
            o->qidx = sq->idx;
            return o;
        }
    }
    char *n = wq_store_dup(name, strlen(name));
    if (!n ||
        wq_store_grow((void **)&s->sched, &s->capsched, s->nsched + 1, sizeof *s->sched) < 0) {
        wq_free(n);
        return NULL;
    }
    struct sched_op *o = &s->sched[s->nsched++];
    memset(o, 0, sizeof *o);
    o->qidx = sq->idx;
    o->name = n;
    return o;
}

/* Drops a pending change made by sched_op that could not be filled. */
static void drop_op(wq_store *s, struct sched_op *o)
{
    free_op(o);
    *o = s->sched[--s->nsched];
}

void wq_store_schedule_put(wq_store_queue *sq, const wq_schedule_row *row)
{
    if (!sq || !row || !row->name || !row->spec)
        return;
    const char *key = row->key ? row->key : row->name;
    size_t keylen = row->key ? row->keylen : strlen(row->name);
    struct sched_op *o = sched_op(sq, row->name);
    if (o) {
        o->spec = wq_store_dup(row->spec, strlen(row->spec));
        o->key = wq_store_dup(key, keylen);
        o->payload = row->payload ? wq_store_dup(row->payload, row->paylen) : NULL;
        if (!o->spec || !o->key || (row->payload && !o->payload)) {
            drop_op(sq->s, o);
            o = NULL;
        }
    }
    if (!o) {
        sq->s->lost_updates++;
        return;
    }
    o->op = OP_SET;
    o->keylen = keylen;
    o->paylen = row->payload ? row->paylen : 0;
    o->tz = row->tz;
    o->catch_up = row->catch_up;
    o->next_at = row->next_at;
    o->last_at = row->last_at;
}

void wq_store_schedule_del(wq_store_queue *sq, const char *name)
{
    if (!sq || !name)
        return;
    struct sched_op *o = sched_op(sq, name);
    if (!o) {
        sq->s->lost_updates++;
        return;
    }
    o->op = OP_DEL;
}

int wq_store_done_prune(wq_store_queue *sq, double older_than)
{
    if (!sq || !isfinite(older_than))
        return WQ_EINVAL;
    if (!sq->prune || older_than > sq->prune_before)
        sq->prune_before = older_than;
    sq->prune = 1; /* a sweep under way goes on from where it is, with the new bound */
    return 0;
}

/* ---- writing them (inside the flush's transaction) ---- */

/*
 * Deletes the expired rows among the next WQ_STORE_PRUNE_STEP of the
 * queue's done rows in key order, from prune_from: up to the key after
 * them (kept in prune_next for the next flush) or, when fewer are left, to
 * the end (prune_end: the sweep is through). SQLite result code.
 */
static int prune_slice(wq_store *s, wq_store_queue *sq, uint64_t *rows)
{
    end_prune(sq, 1); /* a slice an earlier, failed flush prepared */
    const char *from = sq->prune_from ? sq->prune_from : "";
    int fromlen = sq->prune_from ? (int)sq->prune_fromlen : 0;
    sqlite3_stmt *st = s->st[ST_PRUNE_SEEK];
    sqlite3_bind_text(st, 1, sq->name, (int)sq->namelen, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, from, fromlen, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, WQ_STORE_PRUNE_STEP);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        const char *k = (const char *)sqlite3_column_text(st, 0);
        size_t klen = (size_t)sqlite3_column_bytes(st, 0);
        sq->prune_next = wq_store_dup(k ? k : "", klen);
        sq->prune_nextlen = klen;
        rc = sq->prune_next ? SQLITE_OK : SQLITE_NOMEM;
    } else if (rc == SQLITE_DONE) {
        sq->prune_end = 1;
        rc = SQLITE_OK;
    }
    sqlite3_reset(st);
    if (rc != SQLITE_OK)
        return rc;
    if (sq->prune_end) {
        st = s->st[ST_PRUNE_TAIL];
        sqlite3_bind_double(st, 3, sq->prune_before);
    } else {
        st = s->st[ST_PRUNE_DONE];
        sqlite3_bind_text(st, 3, sq->prune_next, (int)sq->prune_nextlen, SQLITE_STATIC);
        sqlite3_bind_double(st, 4, sq->prune_before);
    }
    sqlite3_bind_text(st, 1, sq->name, (int)sq->namelen, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, from, fromlen, SQLITE_STATIC);
    rc = wq_store_run(st);
    if (rc == SQLITE_OK)
        *rows += (uint64_t)sqlite3_changes(s->db);
    return rc;
}

static int write_op(wq_store *s, const struct sched_op *o, double now)
{
    const wq_store_queue *sq = s->queues[o->qidx];
    sqlite3_stmt *st = s->st[o->op == OP_SET ? ST_UPSERT_SCHED : ST_DELETE_SCHED];
    sqlite3_bind_text(st, 1, sq->name, (int)sq->namelen, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, o->name, -1, SQLITE_TRANSIENT);
    if (o->op == OP_SET) {
        sqlite3_bind_text(st, 3, o->spec, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text64(st, 4, o->key, o->keylen, SQLITE_TRANSIENT, SQLITE_UTF8);
        if (o->payload)
            sqlite3_bind_text64(st, 5, o->payload, o->paylen, SQLITE_TRANSIENT, SQLITE_UTF8);
        else
            sqlite3_bind_null(st, 5);
        wq_store_bind_time(st, 6, o->next_at);
        wq_store_bind_time(st, 7, o->last_at);
        sqlite3_bind_text(st, 8, o->tz == WQ_SCHED_LOCAL ? "local" : "utc", -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 9, o->catch_up == WQ_SCHED_CATCH_UP_SKIP ? "skip" : "once", -1,
                          SQLITE_STATIC);
        sqlite3_bind_double(st, 10, now);
    }
    return wq_store_run(st);
}

int wq_store_write_jobs(wq_store *s, double now, uint64_t *rows)
{
    int rc = SQLITE_OK;
    for (size_t i = 0; i < s->nsched && rc == SQLITE_OK; i++) {
        if (s->sched[i].op == OP_NONE)
            continue;
        rc = write_op(s, &s->sched[i], now);
        ++*rows;
    }
    /* After the window's done rows (commit.c writes them first): an expired one goes too. */
    for (uint32_t i = 0; i < s->nqueues && rc == SQLITE_OK; i++)
        if (s->queues[i]->prune)
            rc = prune_slice(s, s->queues[i], rows);
    return rc;
}

/* ---- reading them back at start-up ---- */

/* Prepares a per-queue query of the restore, or fails the store; 0 or a WQ_E* code. */
static int start(wq_store_queue *sq, const char *sql, sqlite3_stmt **st, const char *what)
{
    wq_store *s = sq->s;
    if (s->broken)
        return wq_store_broken(s);
    int rc = sqlite3_prepare_v2(s->db, sql, -1, st, NULL);
    if (rc != SQLITE_OK) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s of queue '%s'", what, sq->name);
        return wq_store_sqlite_fail(s, rc, msg);
    }
    sqlite3_bind_text(*st, 1, sq->name, (int)sq->namelen, SQLITE_STATIC);
    return 0;
}

/* Ends a restore query: the row count, or a WQ_E* code when the last step failed. */
static int finish(wq_store_queue *sq, sqlite3_stmt *st, int rc, int n, const char *what)
{
    sqlite3_finalize(st);
    if (rc == SQLITE_DONE)
        return n;
    char msg[160];
    snprintf(msg, sizeof msg, "%s of queue '%s'", what, sq->name);
    return wq_store_sqlite_fail(sq->s, rc, msg);
}

static double column_time(sqlite3_stmt *st, int i)
{
    if (sqlite3_column_type(st, i) == SQLITE_NULL)
        return 0;
    double t = sqlite3_column_double(st, i);
    return isfinite(t) ? t : 0;
}

int wq_store_restore_done(wq_store_queue *sq,
                          void (*fn)(void *ud, const char *key, size_t len, double finished_at,
                                     const char *result, size_t rlen),
                          void *ud)
{
    static const char what[] = "restore the done rows";
    if (!sq || !fn)
        return WQ_EINVAL;
    sqlite3_stmt *st;
    int r = start(sq,
                  "SELECT key, finished_at, result FROM done WHERE queue = ?1"
                  " ORDER BY finished_at, key",
                  &st, what);
    if (r < 0)
        return r;
    int rc, n = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *key = (const char *)sqlite3_column_text(st, 0);
        size_t len = (size_t)sqlite3_column_bytes(st, 0);
        const char *result = (const char *)sqlite3_column_text(st, 2);
        size_t rlen = result ? (size_t)sqlite3_column_bytes(st, 2) : 0;
        fn(ud, key ? key : "", len, column_time(st, 1), result, rlen);
        n++;
    }
    return finish(sq, st, rc, n, what);
}

int wq_store_restore_schedules(wq_store_queue *sq, void (*fn)(void *ud, const wq_schedule_row *row),
                               void *ud)
{
    static const char what[] = "restore the schedules";
    if (!sq || !fn)
        return WQ_EINVAL;
    sqlite3_stmt *st;
    int r = start(sq,
                  "SELECT name, spec, key, payload, tz, catch_up, next_at, last_at FROM schedules"
                  " WHERE queue = ?1 ORDER BY name",
                  &st, what);
    if (r < 0)
        return r;
    int rc, n = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        wq_schedule_row row;
        memset(&row, 0, sizeof row);
        row.name = (const char *)sqlite3_column_text(st, 0);
        row.spec = (const char *)sqlite3_column_text(st, 1);
        row.key = (const char *)sqlite3_column_text(st, 2);
        row.keylen = row.key ? (size_t)sqlite3_column_bytes(st, 2) : 0;
        row.payload = (const char *)sqlite3_column_text(st, 3);
        row.paylen = row.payload ? (size_t)sqlite3_column_bytes(st, 3) : 0;
        const char *tz = (const char *)sqlite3_column_text(st, 4);
        const char *catch_up = (const char *)sqlite3_column_text(st, 5);
        row.tz = tz && strcmp(tz, "local") == 0 ? WQ_SCHED_LOCAL : WQ_SCHED_UTC;
        row.catch_up = catch_up && strcmp(catch_up, "skip") == 0 ? WQ_SCHED_CATCH_UP_SKIP
                                                                 : WQ_SCHED_CATCH_UP_ONCE;
        row.next_at = column_time(st, 6);
        row.last_at = column_time(st, 7);
        if (!row.name)
            row.name = "";
        if (!row.spec)
            row.spec = "";
        if (!row.key) {
            row.key = row.name;
            row.keylen = strlen(row.name);
        }
        fn(ud, &row);
        n++;
    }
    return finish(sq, st, rc, n, what);
}
