/*
 * Reading the state file back: the start-up restore of a queue (its items
 * in run order, failure counts, dead letters) and the inbox, which any
 * process may feed while the runner runs. Both hand rows to the caller
 * straight from SQLite's buffers, without copies, so a million items
 * restore in well under a second of store time. Every step's result is
 * checked: an error is never the end of the rows, and one that says the
 * file is damaged breaks the store (nothing more is written to the file).
 */
#include "store/sqlite/store_int.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/*
 * Run order: every row that runs again (queued, processing, or waiting
 * without a time) by priority, then FIFO; then the rows that only wait,
 * which the engine orders by time itself.
 */
static const char restore_items_sql[] =
    "SELECT key, payload, priority, state, ready_at, enqueued_at, grp FROM items WHERE queue = ?1"
    " ORDER BY state = 'waiting' AND ready_at IS NOT NULL, priority DESC, seq";

/* Unix seconds kept within what every timebase converts without overflow. */
static double sane_time(double t)
{
    if (!(t > -1e12))
        return -1e12;
    return t < 1e12 ? t : 1e12;
}

/* Feeds the queue's items rows to item_fn, counting them in *n. SQLite result code. */
static int restore_items(wq_store_queue *sq, void (*item_fn)(void *ud, const wq_restored *r),
                         void *ud, int *n, int *incomplete)
{
    wq_store *s = sq->s;
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(s->db, restore_items_sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_bind_text(st, 1, sq->name, (int)sq->namelen, SQLITE_STATIC);
    size_t records = sq->q ? wq_queue_records(sq->q) : 0;
    *n = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        wq_restored r;
        memset(&r, 0, sizeof r);
        r.key = (const char *)sqlite3_column_text(st, 0);
        r.keylen = (size_t)sqlite3_column_bytes(st, 0);
        if (!r.key)
            r.key = "";
        if (sqlite3_column_type(st, 1) != SQLITE_NULL) {
            r.payload = (const char *)sqlite3_column_text(st, 1);
            r.paylen = (size_t)sqlite3_column_bytes(st, 1);
        }
        int64_t prio = sqlite3_column_int64(st, 2);
        r.priority = prio > INT32_MAX ? INT32_MAX : prio < INT32_MIN ? INT32_MIN : (int32_t)prio;
        const char *state = (const char *)sqlite3_column_text(st, 3);
        int timed = sqlite3_column_type(st, 4) != SQLITE_NULL;
        int only_waiting = timed && state && strcmp(state, "waiting") == 0;
        r.queued = !only_waiting;
        r.waiting = timed;
        if (timed)
            r.ready_at_mono = s->tb.to_mono(s->tb.ud, sane_time(sqlite3_column_double(st, 4)));
        if (sqlite3_column_type(st, 5) != SQLITE_NULL) {
            double t = sqlite3_column_double(st, 5);
            r.enqueued_at = t > 0 && isfinite(t) ? t : 0;
        }
        if (sqlite3_column_type(st, 6) != SQLITE_NULL) {
            r.grp = (const char *)sqlite3_column_text(st, 6);
            r.grplen = r.grp ? (size_t)sqlite3_column_bytes(st, 6) : 0;
        }
        wq_store_bloom_add(s, wq_store_key_hash(sq, r.key, r.keylen));
        item_fn(ud, &r);
        ++*n;
        wq_item_info info;
        if (only_waiting && sq->q && wq_queue_lookup(sq->q, r.key, r.keylen, &info) &&
            (info.state & WQ_ST_DIRTY))
            wq_store_touch_requeued(sq, r.key, r.keylen); /* its time has passed: queued now */
    }
    /* Each row is a distinct key: unless each became a new record, some rows are not ours. */
    if (!sq->q || wq_queue_records(sq->q) - records != (size_t)*n)
        *incomplete = 1;
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int restore_failures(wq_store_queue *sq,
                            void (*fail_fn)(void *ud, const char *key, size_t len, int64_t requeues,
                                            const char *last_error),
                            void *ud, int *incomplete)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(sq->s->db,
                                "SELECT key, requeues, last_error FROM failures WHERE queue = ?1",
                                -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_bind_text(st, 1, sq->name, (int)sq->namelen, SQLITE_STATIC);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *key = (const char *)sqlite3_column_text(st, 0);
        size_t len = (size_t)sqlite3_column_bytes(st, 0);
        if (!key)
            key = "";
        if (!wq_keymap_put(sq->fail_set, key, len, NULL))
            *incomplete = 1;
        if (fail_fn)
            fail_fn(ud, key, len, sqlite3_column_int64(st, 1),
                    (const char *)sqlite3_column_text(st, 2));
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int restore_dead(wq_store_queue *sq, void (*dead_fn)(void *ud, const wq_dead_row *d),
                        void *ud)
{
    if (!dead_fn)
        return SQLITE_OK;
    sqlite3_stmt *st;
    int rc =
        sqlite3_prepare_v2(sq->s->db,
                           "SELECT key, payload, error, attempts, failed_at, traceback FROM dead"
                           " WHERE queue = ?1 ORDER BY failed_at",
                           -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_bind_text(st, 1, sq->name, (int)sq->namelen, SQLITE_STATIC);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *key = (const char *)sqlite3_column_text(st, 0);
        const char *payload = (const char *)sqlite3_column_text(st, 1);
        wq_dead_row d = {.key = key ? key : "",
                         .keylen = (size_t)sqlite3_column_bytes(st, 0),
                         .payload = payload,
                         .paylen = payload ? (size_t)sqlite3_column_bytes(st, 1) : 0,
                         .error = (const char *)sqlite3_column_text(st, 2),
                         .traceback = (const char *)sqlite3_column_text(st, 5),
                         .attempts = sqlite3_column_int64(st, 3),
                         .failed_at = sqlite3_column_double(st, 4)};
        dead_fn(ud, &d);
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

int wq_store_restore(wq_store_queue *sq, void (*item_fn)(void *ud, const wq_restored *r),
                     void (*fail_fn)(void *ud, const char *key, size_t len, int64_t requeues,
                                     const char *last_error),
                     void (*dead_fn)(void *ud, const wq_dead_row *d), void *ud)
{
    if (!sq || !item_fn)
        return WQ_EINVAL;
    wq_store *s = sq->s;
    if (s->broken)
        return wq_store_broken(s);
    char what[128];
    snprintf(what, sizeof what, "restore queue '%s'", sq->name);
    /* One write transaction: a consistent read, and the processing rows rewritten with it. */
    int rc = sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        return wq_store_sqlite_fail(s, rc, what);
    int incomplete = 0, n = 0;
    wq_store_forget_gone(sq); /* keys it restores may have gone from another engine queue */
    sq->restoring = 1;
    rc = restore_items(sq, item_fn, ud, &n, &incomplete);
    sq->restoring = 0;
    if (rc == SQLITE_OK) {
        /* At-least-once: what was in flight runs again, and the file says so. */
        sqlite3_stmt *st;
        rc = sqlite3_prepare_v2(s->db,
                                "UPDATE items SET state = 'queued'"
                                " WHERE queue = ?1 AND state = 'processing'",
                                -1, &st, NULL);
        if (rc == SQLITE_OK) {
            sqlite3_bind_text(st, 1, sq->name, (int)sq->namelen, SQLITE_STATIC);
            rc = sqlite3_step(st);
            sqlite3_finalize(st);
            rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
        }
    }
    if (rc == SQLITE_OK)
        rc = restore_failures(sq, fail_fn, ud, &incomplete);
    if (rc == SQLITE_OK)
        rc = restore_dead(sq, dead_fn, ud);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        int r = wq_store_sqlite_fail(s, rc, what);
        if (!sqlite3_get_autocommit(s->db))
            sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
        sq->complete = 0;
        return r;
    }
    sq->complete = !incomplete;
    return n;
}

/* ---- inbox ---- */

/*
 * Payloads that are not valid JSON become JSON strings, as with `wqrun
 * add`; `after` counts from the row's created_at (NULL created_at: from now).
 */
static const char select_inbox_sql[] =
    "SELECT id, queue, key,"
    " CASE WHEN payload IS NULL THEN NULL"
    "  WHEN json_valid(CAST(payload AS TEXT)) THEN CAST(payload AS TEXT)"
    "  ELSE json_quote(CAST(payload AS TEXT)) END,"
    " CASE WHEN after IS NULL THEN 0.0"
    "  WHEN typeof(created_at) IN ('real', 'integer') THEN created_at + after - ?2"
    "  ELSE after END,"
    " CAST(grp AS TEXT), priority, typeof(priority) = 'integer',"
    " CASE WHEN unique_add IS NULL THEN 0 WHEN CAST(unique_add AS INTEGER) != 0 THEN 1"
    "  ELSE -1 END"
    " FROM inbox WHERE id > ?1 ORDER BY id";

static int taken(const wq_store *s, int64_t id)
{
    size_t lo = 0, hi = s->ninbox_del;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->inbox_del[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->ninbox_del && s->inbox_del[lo] == id;
}

/* Room to remember one more taken row: 0, or -1 when out of memory. */
static int reserve(wq_store *s)
{
    if (s->ninbox_del + 1 > s->capinbox_del) {
        size_t n = s->capinbox_del ? s->capinbox_del * 2 : 64;
        int64_t *p = wq_realloc(s->inbox_del, n * sizeof *p);
        if (!p)
            return -1;
        s->inbox_del = p;
        s->capinbox_del = n;
    }
    return 0;
}

/* Remembers a taken row (room reserved). */
static void take(wq_store *s, int64_t id)
{
    size_t i = s->ninbox_del;
    while (i > 0 && s->inbox_del[i - 1] > id) {
        s->inbox_del[i] = s->inbox_del[i - 1];
        i--;
    }
    s->inbox_del[i] = id;
    s->ninbox_del++;
}

int wq_store_poll_inbox(wq_store *s, int (*fn)(void *ud, const wq_inbox_row *row), void *ud)
{
    if (!s || !fn)
        return WQ_EINVAL;
    if (s->broken)
        return wq_store_broken(s);
    int64_t version;
    int rc = wq_store_data_version(s, &version, "read the inbox");
    if (rc < 0)
        return rc;
    if (wq_store_prepare(s, &s->st[ST_SELECT_INBOX], select_inbox_sql) < 0)
        return WQ_EIO;
    int all = !s->inbox_polled || s->inbox_rescan;
    if (!all && version == s->data_version)
        return 0; /* nobody else wrote to the file */
    s->data_version = version;
    s->inbox_polled = 1;
    s->inbox_rescan = 0;

    sqlite3_stmt *st = s->st[ST_SELECT_INBOX];
    sqlite3_bind_int64(st, 1, all ? 0 : s->inbox_mark);
    sqlite3_bind_double(st, 2, wq_store_wall());
    int n = 0, r = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(st, 0);
        if (id > s->inbox_mark)
            s->inbox_mark = id;
        if (taken(s, id))
            continue; /* taken earlier, deleted with the next flush */
        const char *queue = (const char *)sqlite3_column_text(st, 1);
        const char *key = (const char *)sqlite3_column_text(st, 2);
        size_t keylen = (size_t)sqlite3_column_bytes(st, 2);
        const char *payload = (const char *)sqlite3_column_text(st, 3);
        size_t paylen = payload ? (size_t)sqlite3_column_bytes(st, 3) : 0;
        double after = sqlite3_column_double(st, 4);
        if (!isfinite(after))
            after = after > 0 ? 1e9 : 0;
        if (!queue || !key)
            continue;
        /* Room first: a row added to its queue but not remembered would
         * never be deleted, and be added again by the next run. */
        if (reserve(s) < 0) {
            r = wq_store_fail(s, WQ_ENOMEM, "out of memory reading the inbox");
            break;
        }
        wq_inbox_row row = {.queue = queue,
                            .key = key,
                            .keylen = keylen,
                            .payload = payload,
                            .paylen = paylen,
                            .after = after};
        row.grp = (const char *)sqlite3_column_text(st, 5);
        row.grplen = row.grp ? (size_t)sqlite3_column_bytes(st, 5) : 0;
        row.has_priority = sqlite3_column_type(st, 6) != SQLITE_NULL;
        row.priority = sqlite3_column_int(st, 7) ? sqlite3_column_int64(st, 6) : INT64_MAX;
        row.unique = sqlite3_column_int(st, 8);
        if (fn(ud, &row) == 1) {
            take(s, id);
            n++;
        }
    }
    sqlite3_reset(st);
    /* The rows not read yet are past inbox_mark but may be offered only when
     * the file changes again: read them all at the next poll instead. */
    if (r < 0 || (rc != SQLITE_DONE && rc != SQLITE_ROW))
        s->inbox_rescan = 1;
    if (r < 0)
        return r;
    if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        return wq_store_sqlite_fail(s, rc, "read the inbox");
    return n;
}
