/*
 * Group commit. The loop tells the store which keys changed (touch);
 * nothing is written until flush, which reads each touched key's current
 * state back from its engine queue and writes it, with the failure-count,
 * dead-letter and inbox changes of the window, in one transaction. A key
 * touched many times in a window costs one row write; a key that came and
 * went within a window costs nothing when the file never had its row.
 *
 * FIFO order is kept in items.seq: a key gets a new sequence number when it
 * enters the ready store (WQ_EV_QUEUED) or moves to the back of a raised
 * priority level, and keeps its old one otherwise. items.enqueued_at is
 * kept the same way: an update leaves it unless the runner gives it (see
 * wq_store_set_meta) or the key's record was dropped in the window, which
 * makes the record there now a new pending item.
 *
 * A flush of many keys is mostly cache misses and SQLite statement
 * overhead, so it avoids both where it can: a key whose last event was
 * WQ_EV_GONE is known to have no record (the engine tells every drop), so
 * it is not looked up; rows the Bloom filter proves new go in as plain
 * multi-row INSERTs, done rows as multi-row INSERT OR REPLACEs, and
 * deletions of both as multi-key DELETEs.
 *
 * A flush commits only while the path still names the file the store has
 * open (checked just before and just after COMMIT), so a commit never
 * reports success into a state file that was deleted or replaced.
 */
#include "store/sqlite/store_int.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define SHRINK_ABOVE 65536 /* pending arrays larger than this are freed after a flush */
#define INDEX_MIN 1024     /* initial size of the pending set's index */

static void free_extra(struct extra *e)
{
    wq_free(e->last_error);
    wq_free(e->dpayload);
    wq_free(e->derror);
    wq_free(e->dtrace);
    wq_free(e->result);
    memset(e, 0, sizeof *e);
}

/* Forgets the pending set (after a successful flush: committed 1, or at close: 0). */
void wq_store_clear_pending(wq_store *s, int committed)
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
    wq_store_clear_jobs(s, committed);
    wq_store_clear_ops(s);
}

/* ---- the pending set ---- */

/*
 * The index slot holding (sq, key), or the empty slot where it would go.
 * Slots carry the hash, so only a slot whose hash matches costs a look at
 * its entry (a cache miss in a big window).
 */
static size_t find_slot(const wq_store *s, const wq_store_queue *sq, const char *key, size_t len,
                        uint32_t h)
{
    size_t i = h & s->index_mask;
    for (;;) {
        uint64_t v = s->index[i];
        if (!v)
            return i;
        if ((uint32_t)(v >> 32) == h) {
            const struct pend *p = &s->ents[(uint32_t)v - 1];
            if (p->qidx == sq->idx && p->keylen == len &&
                (len == 0 || memcmp(s->arena + p->key_off, key, len) == 0))
                return i;
        }
        i = (i + 1) & s->index_mask;
    }
}

/* The first empty slot from h's home: where a key known to be absent goes. */
static size_t empty_slot(const uint64_t *index, size_t mask, uint32_t h)
{
    size_t i = h & mask;
    while (index[i])
        i = (i + 1) & mask;
    return i;
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
    uint64_t *idx = wq_malloc(ncap * sizeof *idx);
    if (!idx)
        return -1;
    memset(idx, 0, ncap * sizeof *idx);
    for (size_t i = 0; i < cap; i++) {
        uint64_t v = s->index[i];
        if (v)
            idx[empty_slot(idx, ncap - 1, (uint32_t)(v >> 32))] = v;
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
    uint64_t v = s->index[find_slot(s, sq, key, len, wq_store_key_hash(sq, key, len))];
    return v ? &s->ents[(uint32_t)v - 1] : NULL;
}

/* The pending entry of key, created if absent; NULL when out of memory. */
static struct pend *entry(wq_store_queue *sq, const char *key, size_t len)
{
    wq_store *s = sq->s;
    uint32_t h = wq_store_key_hash(sq, key, len);
    size_t slot = SIZE_MAX;
    if (s->nents) {
        slot = find_slot(s, sq, key, len, h);
        uint64_t v = s->index[slot];
        if (v)
            return &s->ents[(uint32_t)v - 1];
    }
    const uint64_t *before = s->index;
    if (s->nents >= UINT32_MAX - 1 || index_reserve(s, s->nents + 1) < 0 ||
        wq_store_grow((void **)&s->ents, &s->capents, s->nents + 1, sizeof *s->ents) < 0 ||
        wq_store_grow((void **)&s->arena, &s->arena_cap, s->arena_len + len + 1, 1) < 0)
        return NULL;
    if (slot == SIZE_MAX || s->index != before)
        slot = empty_slot(s->index, s->index_mask, h);
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
    s->index[slot] = (uint64_t)h << 32 | (uint32_t)++s->nents;
    return p;
}

void wq_store_forget_gone(wq_store_queue *sq)
{
    wq_store *s = sq->s;
    for (size_t i = 0; i < s->nents; i++)
        if (s->ents[i].qidx == sq->idx)
            s->ents[i].flags &= (uint8_t)~PE_GONE;
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
    p->flags =
        (uint8_t)((p->flags & ~PE_GONE) | PE_ITEM | (ev == WQ_EV_GONE ? PE_GONE | PE_RENEW : 0));
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
    p->flags = (uint8_t)((p->flags & ~PE_GONE) | PE_ITEM | PE_READDED);
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
    if (wq_store_grow((void **)&s->extras, &s->capextras, s->nextras + 1, sizeof *s->extras) < 0)
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
    if (e && requeues > 0 && last_error && !(msg = wq_store_dup(last_error, strlen(last_error))))
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

void wq_store_dead(wq_store_queue *sq, const wq_dead_row *d)
{
    if (!sq)
        return;
    struct extra *e = extra_of(sq, d->key, d->keylen);
    char *pay = NULL, *err = NULL, *tb = NULL;
    if (e && d->payload && !(pay = wq_store_dup(d->payload, d->paylen)))
        e = NULL;
    if (e && d->error && !(err = wq_store_dup(d->error, strlen(d->error))))
        e = NULL;
    if (e && d->traceback && !(tb = wq_store_dup(d->traceback, strlen(d->traceback))))
        e = NULL;
    if (!e) {
        wq_free(pay);
        wq_free(err);
        wq_free(tb);
        sq->s->lost_updates++;
        return;
    }
    wq_free(e->dpayload);
    wq_free(e->derror);
    wq_free(e->dtrace);
    e->dpayload = pay;
    e->dpaylen = d->paylen;
    e->derror = err;
    e->dtrace = tb;
    e->attempts = d->attempts;
    e->failed_at = d->failed_at;
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
    wq_free(e->dtrace);
    e->dpayload = e->derror = e->dtrace = NULL;
    e->dead_op = OP_DEL;
}

void wq_store_done_put(wq_store_queue *sq, const char *key, size_t len, double finished_at,
                       const char *result, size_t rlen)
{
    if (!sq)
        return;
    struct extra *e = extra_of(sq, key, len);
    char *res = NULL;
    if (e && result && !(res = wq_store_dup(result, rlen)))
        e = NULL;
    if (!e) {
        sq->s->lost_updates++;
        return;
    }
    wq_free(e->result);
    e->result = res;
    e->rlen = result ? rlen : 0;
    e->finished_at = finished_at;
    e->done_op = OP_SET;
}

void wq_store_done_del(wq_store_queue *sq, const char *key, size_t len)
{
    if (!sq)
        return;
    struct extra *e = extra_of(sq, key, len);
    if (!e) {
        sq->s->lost_updates++;
        return;
    }
    wq_free(e->result);
    e->result = NULL;
    e->done_op = OP_DEL;
}

int wq_store_dirty(const wq_store *s)
{
    if (!s)
        return 0;
    if (s->nents || s->ninbox_del || s->nannounce || s->lost_updates || s->nsched ||
        wq_store_ops_dirty(s) || wq_store_flows_dirty(s) || wq_store_history_dirty(s) ||
        wq_store_progress_dirty(s))
        return 1;
    for (uint32_t i = 0; i < s->nqueues; i++)
        if (s->queues[i]->resync || s->queues[i]->prune)
            return 1;
    return 0;
}

/* ---- flush ---- */

/* Columns of an items row as bound by bind_row. */
#define ROW_COLS 11

int wq_store_prepare_batches(wq_store *s)
{
    /* A row is "(?n, ... ?n+10)" with numbers of at most 4 digits: under 80 bytes. */
    _Static_assert(ROW_COLS * WQ_STORE_INSERT_BATCH < 10000 && WQ_STORE_DELETE_BATCH < 500,
                   "the buffer below holds the statements");
    char sql[160 + WQ_STORE_INSERT_BATCH * 80];
    size_t n =
        (size_t)snprintf(sql, sizeof sql,
                         "INSERT OR FAIL INTO items(queue, key, payload, state, ready_at, priority,"
                         " seq, added_at, updated_at, enqueued_at, grp) VALUES ");
    for (int r = 0; r < WQ_STORE_INSERT_BATCH; r++) {
        n += (size_t)snprintf(sql + n, sizeof sql - n, "%s(", r ? ", " : "");
        for (int c = 1; c <= ROW_COLS; c++)
            n += (size_t)snprintf(sql + n, sizeof sql - n, "?%d%s", ROW_COLS * r + c,
                                  c < ROW_COLS ? ", " : ")");
    }
    if (wq_store_prepare(s, &s->st[ST_INSERT_ITEMS], sql) < 0)
        return -1;
    n = (size_t)snprintf(sql, sizeof sql,
                         "INSERT OR REPLACE INTO done(queue, key, finished_at, result) VALUES ");
    for (int r = 0; r < WQ_STORE_INSERT_BATCH; r++)
        n += (size_t)snprintf(sql + n, sizeof sql - n, "%s(?%d, ?%d, ?%d, ?%d)", r ? ", " : "",
                              4 * r + 1, 4 * r + 2, 4 * r + 3, 4 * r + 4);
    if (wq_store_prepare(s, &s->st[ST_INSERT_DONE], sql) < 0)
        return -1;
    static const char *const tables[] = {"items", "done"};
    for (int t = 0; t < 2; t++) {
        n = (size_t)snprintf(sql, sizeof sql, "DELETE FROM %s WHERE queue = ?1 AND key IN (",
                             tables[t]);
        for (int k = 0; k < WQ_STORE_DELETE_BATCH; k++)
            n += (size_t)snprintf(sql + n, sizeof sql - n, "?%d%s", k + 2,
                                  k + 1 < WQ_STORE_DELETE_BATCH ? ", " : ")");
        if (wq_store_prepare(s, &s->st[t ? ST_DELETE_DONES : ST_DELETE_ITEMS], sql) < 0)
            return -1;
    }
    return 0;
}

/*
 * One flush's batches. Rows the filter proves new wait in ins for a
 * multi-row INSERT, done rows in dput; keys to delete wait in their
 * queue's del and ddel (the DELETE names one queue). Keys, payloads and
 * results are bound with SQLITE_STATIC: they point into the engine's
 * records and the pending set's arena and extras, which stay put while the
 * flush runs (it changes none of them), and every statement's
 * parameters are all bound again before its next step and cleared when the
 * flush ends.
 */
struct flush {
    wq_store *s;
    double now;
    uint64_t rows;
    struct newrow {
        wq_store_queue *sq;
        wq_item_info info;
        int64_t seq;
        uint32_t hash;
        uint8_t mode, readded, renew;
    } ins[WQ_STORE_INSERT_BATCH];
    int nins;
    uint32_t dput[WQ_STORE_INSERT_BATCH]; /* entries whose done rows to write */
    int ndput;
};

/* Fewer keys than this to delete from a queue go one statement each. */
#define DELETE_BATCH_MIN 8

static const char *state_name(unsigned st)
{
    if (st & WQ_ST_DIRTY)
        return "queued"; /* also when re-added while processing (SPEC section 4) */
    if (st & WQ_ST_PROCESSING)
        return "processing";
    return "waiting";
}

/*
 * An items row's enqueued_at and group: the runner's (wq_store_set_meta)
 * where it gives them, else a stamp for a new pending item; and whether an
 * update of an existing row writes them.
 */
struct rowmeta {
    double enqueued_at;
    const char *grp;
    size_t grplen;
    int set_enqueued, set_grp;
};

static void row_meta(const wq_store *s, const wq_store_queue *sq, const wq_item_info *info,
                     int renew, double now, struct rowmeta *m)
{
    wq_item_meta im;
    memset(&im, 0, sizeof im);
    if (sq->meta_fn)
        sq->meta_fn(sq->meta_ud, info, &im);
    int given = im.enqueued_at > 0 && isfinite(im.enqueued_at);
    if (given)
        m->enqueued_at = im.enqueued_at;
    else if (info->state & WQ_ST_DIRTY)
        m->enqueued_at = s->tb.to_unix(s->tb.ud, info->added_at);
    else
        m->enqueued_at = now;
    m->set_enqueued = given || renew;
    m->grp = im.grp;
    m->grplen = im.grp ? im.grplen : 0;
    m->set_grp = sq->meta_fn != NULL || renew;
}

/* Binds the ROW_COLS columns of an items row at parameters base + 1 .. base + ROW_COLS. */
static void bind_row(sqlite3_stmt *st, int base, const wq_store *s, const wq_store_queue *sq,
                     const wq_item_info *info, int64_t seq, double now, const struct rowmeta *m)
{
    sqlite3_bind_text(st, base + 1, sq->name, (int)sq->namelen, SQLITE_STATIC);
    sqlite3_bind_text(st, base + 2, info->key, (int)info->keylen, SQLITE_STATIC);
    if (info->payload)
        sqlite3_bind_text64(st, base + 3, info->payload, info->paylen, SQLITE_STATIC, SQLITE_UTF8);
    else
        sqlite3_bind_null(st, base + 3);
    sqlite3_bind_text(st, base + 4, state_name(info->state), -1, SQLITE_STATIC);
    if (info->state & WQ_ST_WAITING)
        sqlite3_bind_double(st, base + 5, s->tb.to_unix(s->tb.ud, info->ready_at));
    else
        sqlite3_bind_null(st, base + 5);
    sqlite3_bind_int(st, base + 6, info->priority);
    sqlite3_bind_int64(st, base + 7, seq);
    sqlite3_bind_double(st, base + 8,
                        info->state & WQ_ST_DIRTY ? s->tb.to_unix(s->tb.ud, info->added_at) : now);
    sqlite3_bind_double(st, base + 9, now);
    sqlite3_bind_double(st, base + 10, m->enqueued_at);
    /* The group is the runner's memory, not the engine's: copied, whatever the runner does next. */
    if (m->grp)
        sqlite3_bind_text64(st, base + 11, m->grp, m->grplen, SQLITE_TRANSIENT, SQLITE_UTF8);
    else
        sqlite3_bind_null(st, base + 11);
}

/* Writes the engine's current record of key (info) as its items row. SQLite result code. */
static int upsert_item(struct flush *f, wq_store_queue *sq, const wq_item_info *info, uint32_t h,
                       int64_t seq, int mode, int readded, int renew)
{
    wq_store *s = f->s;
    sqlite3_stmt *st = s->st[ST_UPSERT_ITEM];
    struct rowmeta m;
    row_meta(s, sq, info, renew, f->now, &m);
    bind_row(st, 0, s, sq, info, seq, f->now, &m);
    sqlite3_bind_int(st, ROW_COLS + 1, mode);
    sqlite3_bind_int(st, ROW_COLS + 2, readded);
    sqlite3_bind_int(st, ROW_COLS + 3, m.set_enqueued);
    sqlite3_bind_int(st, ROW_COLS + 4, m.set_grp);
    int rc = wq_store_run(st);
    if (rc == SQLITE_OK)
        wq_store_bloom_add(s, h);
    return rc;
}

/*
 * Inserts the rows waiting in f->ins: a full batch in one statement, the
 * rest (the end of a flush) one by one. The batch is INSERT OR FAIL: a
 * failing row keeps the rows before it, so SQLite needs no statement
 * journal (a temporary file once a statement changes more than 64 KiB of
 * pages). A row that exists after all (someone wrote items while we own
 * the file) stops the batch, which is then written row by row with the
 * upsert (rewriting the rows already in unchanged).
 */
static int insert_rows(struct flush *f)
{
    wq_store *s = f->s;
    int rc = SQLITE_OK;
    if (f->nins == WQ_STORE_INSERT_BATCH) {
        sqlite3_stmt *st = s->st[ST_INSERT_ITEMS];
        for (int i = 0; i < f->nins; i++) {
            const struct newrow *r = &f->ins[i];
            struct rowmeta m;
            row_meta(s, r->sq, &r->info, r->renew, f->now, &m);
            bind_row(st, ROW_COLS * i, s, r->sq, &r->info, r->seq, f->now, &m);
        }
        rc = wq_store_run(st);
        if ((rc & 0xff) != SQLITE_CONSTRAINT) {
            f->nins = 0;
            return rc;
        }
        rc = SQLITE_OK;
    }
    for (int i = 0; i < f->nins && rc == SQLITE_OK; i++) {
        const struct newrow *r = &f->ins[i];
        rc = upsert_item(f, r->sq, &r->info, r->hash, r->seq, r->mode, r->readded, r->renew);
    }
    f->nins = 0;
    return rc;
}

static int delete_key(sqlite3_stmt *st, wq_store_queue *sq, const char *key, size_t len)
{
    sqlite3_bind_text(st, 1, sq->name, (int)sq->namelen, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, key, (int)len, SQLITE_STATIC);
    return wq_store_run(st);
}

/*
 * Deletes the rows of the n keys (pending entries ids) from the queue's
 * table: one statement each (one) when few, else one multi-key statement
 * (many).
 */
static int delete_keys(wq_store *s, wq_store_queue *sq, const uint32_t *ids, int n, int one,
                       int many)
{
    int rc = SQLITE_OK;
    if (n < DELETE_BATCH_MIN) {
        for (int i = 0; i < n && rc == SQLITE_OK; i++) {
            const struct pend *p = &s->ents[ids[i]];
            rc = delete_key(s->st[one], sq, s->arena + p->key_off, p->keylen);
        }
        return rc;
    }
    sqlite3_stmt *st = s->st[many];
    sqlite3_bind_text(st, 1, sq->name, (int)sq->namelen, SQLITE_STATIC);
    for (int i = 0; i < WQ_STORE_DELETE_BATCH; i++) {
        if (i < n) {
            const struct pend *p = &s->ents[ids[i]];
            sqlite3_bind_text(st, i + 2, s->arena + p->key_off, (int)p->keylen, SQLITE_STATIC);
        } else {
            sqlite3_bind_null(st, i + 2); /* matches no key */
        }
    }
    return wq_store_run(st);
}

/* Deletes the items rows of the keys waiting in sq->del. */
static int delete_rows(wq_store *s, wq_store_queue *sq)
{
    int n = (int)sq->ndel;
    sq->ndel = 0;
    return delete_keys(s, sq, sq->del, n, ST_DELETE_ITEM, ST_DELETE_ITEMS);
}

/* Deletes the done rows of the keys waiting in sq->ddel. */
static int delete_done_rows(wq_store *s, wq_store_queue *sq)
{
    int n = (int)sq->nddel;
    sq->nddel = 0;
    return delete_keys(s, sq, sq->ddel, n, ST_DELETE_DONE, ST_DELETE_DONES);
}

/* Binds entry id's done row (queue, key, finished_at, result) at parameters base + 1 ..
 * base + 4. */
static void bind_done(sqlite3_stmt *st, int base, const wq_store *s, uint32_t id)
{
    const struct pend *p = &s->ents[id];
    const struct extra *e = &s->extras[p->extra - 1];
    const wq_store_queue *sq = s->queues[p->qidx];
    sqlite3_bind_text(st, base + 1, sq->name, (int)sq->namelen, SQLITE_STATIC);
    sqlite3_bind_text(st, base + 2, s->arena + p->key_off, (int)p->keylen, SQLITE_STATIC);
    sqlite3_bind_double(st, base + 3, e->finished_at);
    if (e->result)
        sqlite3_bind_text64(st, base + 4, e->result, e->rlen, SQLITE_STATIC, SQLITE_UTF8);
    else
        sqlite3_bind_null(st, base + 4);
}

/* Writes the done rows waiting in f->dput: a full batch in one statement, the rest one by one. */
static int insert_done_rows(struct flush *f)
{
    wq_store *s = f->s;
    int n = f->ndput;
    f->ndput = 0;
    if (n == WQ_STORE_INSERT_BATCH) {
        sqlite3_stmt *st = s->st[ST_INSERT_DONE];
        for (int i = 0; i < n; i++)
            bind_done(st, 4 * i, s, f->dput[i]);
        return wq_store_run(st);
    }
    int rc = SQLITE_OK;
    for (int i = 0; i < n && rc == SQLITE_OK; i++) {
        bind_done(s->st[ST_UPSERT_DONE], 0, s, f->dput[i]);
        rc = wq_store_run(s->st[ST_UPSERT_DONE]);
    }
    return rc;
}

/* Queues entry p's done change (put or delete) for its batch. */
static int write_done(struct flush *f, wq_store_queue *sq, const struct pend *p, int op)
{
    wq_store *s = f->s;
    uint32_t id = (uint32_t)(p - s->ents);
    f->rows++;
    if (op == OP_SET) {
        f->dput[f->ndput++] = id;
        return f->ndput == WQ_STORE_INSERT_BATCH ? insert_done_rows(f) : SQLITE_OK;
    }
    sq->ddel[sq->nddel++] = id;
    return sq->nddel == WQ_STORE_DELETE_BATCH ? delete_done_rows(s, sq) : SQLITE_OK;
}

static int write_item(struct flush *f, wq_store_queue *sq, const struct pend *p, const char *key)
{
    wq_store *s = f->s;
    wq_item_info info;
    if (!sq->q)
        return SQLITE_OK; /* detached: its engine queue is gone, the file keeps its rows */
    /* The engine tells every record it drops (WQ_EV_GONE) and every one it makes. */
    if ((p->flags & PE_GONE) || !wq_queue_lookup(sq->q, key, p->keylen, &info)) {
        if (sq->complete && !wq_store_bloom_test(s, p->hash)) {
            s->stats.deletes_skipped++; /* came and went within the window */
            return SQLITE_OK;
        }
        f->rows++;
        sq->del[sq->ndel++] = (uint32_t)(p - s->ents);
        return sq->ndel == WQ_STORE_DELETE_BATCH ? delete_rows(s, sq) : SQLITE_OK;
    }
    f->rows++;
    int mode = p->seq_mode, readded = (p->flags & PE_READDED) != 0;
    int renew = (p->flags & PE_RENEW) != 0;
    if (!sq->complete || wq_store_bloom_test(s, p->hash))
        return upsert_item(f, sq, &info, p->hash, p->seq, mode, readded, renew);
    /* No row in the file: a plain insert, batched. */
    wq_store_bloom_add(s, p->hash);
    f->ins[f->nins++] =
        (struct newrow){sq, info, p->seq, p->hash, (uint8_t)mode, (uint8_t)readded, (uint8_t)renew};
    return f->nins == WQ_STORE_INSERT_BATCH ? insert_rows(f) : SQLITE_OK;
}

struct resync_ctx {
    struct flush *f;
    wq_store_queue *sq;
    int rc;
};

static int resync_visit(void *ud, const wq_item_info *info)
{
    struct resync_ctx *c = ud;
    wq_store *s = c->f->s;
    c->rc = upsert_item(c->f, c->sq, info, wq_store_key_hash(c->sq, info->key, info->keylen),
                        s->next_seq++, SEQ_FORCE, 1, 1);
    c->f->rows++;
    return c->rc != SQLITE_OK;
}

/*
 * Rewrites all of a queue's rows after a touch was lost (order within a
 * priority may change, and enqueued_at the runner does not give is stamped
 * anew).
 */
static int resync_queue(struct flush *f, wq_store_queue *sq)
{
    wq_store *s = f->s;
    if (!sq->q)
        return SQLITE_OK;
    sqlite3_bind_text(s->st[ST_DELETE_QUEUE_ITEMS], 1, sq->name, (int)sq->namelen, SQLITE_STATIC);
    int rc = wq_store_run(s->st[ST_DELETE_QUEUE_ITEMS]);
    if (rc != SQLITE_OK)
        return rc;
    struct resync_ctx c = {f, sq, SQLITE_OK};
    wq_queue_foreach(sq->q, resync_visit, &c);
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
        rc = wq_store_run(st);
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
        if (e->dtrace)
            sqlite3_bind_text(st, 7, e->dtrace, -1, SQLITE_TRANSIENT);
        else
            sqlite3_bind_null(st, 7);
        rc = wq_store_run(st);
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

/* Ends the flush's use of bound memory: no statement keeps a pointer past it. */
static void unbind(wq_store *s)
{
    static const int bound[] = {ST_UPSERT_ITEM, ST_INSERT_ITEMS, ST_DELETE_ITEM, ST_DELETE_ITEMS,
                                ST_DELETE_FAIL, ST_DELETE_DEAD,  ST_UPSERT_DONE, ST_INSERT_DONE,
                                ST_DELETE_DONE, ST_DELETE_DONES, ST_PRUNE_SEEK,  ST_PRUNE_DONE,
                                ST_PRUNE_TAIL,  ST_UPSERT_SCHED, ST_DELETE_SCHED};
    for (size_t i = 0; i < sizeof bound / sizeof *bound; i++)
        sqlite3_clear_bindings(s->st[bound[i]]);
    for (uint32_t i = 0; i < s->nqueues; i++)
        s->queues[i]->ndel = s->queues[i]->nddel = 0;
}

/* Writes the items rows of the pending set and the other changes of the window. */
static int write_all(struct flush *f)
{
    wq_store *s = f->s;
    int rc = SQLITE_OK;
    for (uint32_t i = 0; i < s->nqueues && rc == SQLITE_OK; i++)
        if (s->queues[i]->resync)
            rc = resync_queue(f, s->queues[i]);
    for (size_t i = 0; i < s->nents && rc == SQLITE_OK; i++) {
        const struct pend *p = &s->ents[i];
        wq_store_queue *sq = s->queues[p->qidx];
        const char *key = s->arena + p->key_off;
        if ((p->flags & PE_ITEM) && !sq->resync)
            rc = write_item(f, sq, p, key);
        if (rc == SQLITE_OK && p->extra) {
            const struct extra *e = &s->extras[p->extra - 1];
            rc = write_extra(s, sq, key, p->keylen, e, f->now, &f->rows);
            if (rc == SQLITE_OK && e->done_op != OP_NONE)
                rc = write_done(f, sq, p, e->done_op);
        }
    }
    if (rc == SQLITE_OK)
        rc = insert_rows(f);
    if (rc == SQLITE_OK)
        rc = insert_done_rows(f);
    for (uint32_t i = 0; i < s->nqueues && rc == SQLITE_OK; i++) {
        if (s->queues[i]->ndel)
            rc = delete_rows(s, s->queues[i]);
        if (rc == SQLITE_OK && s->queues[i]->nddel)
            rc = delete_done_rows(s, s->queues[i]);
    }
    for (size_t i = 0; i < s->nannounce && rc == SQLITE_OK; i++) {
        sqlite3_bind_text(s->st[ST_QUEUE_SEEN], 1, s->announce[i], -1, SQLITE_STATIC);
        sqlite3_bind_double(s->st[ST_QUEUE_SEEN], 2, f->now);
        rc = wq_store_run(s->st[ST_QUEUE_SEEN]);
    }
    for (size_t i = 0; i < s->ninbox_del && rc == SQLITE_OK; i++) {
        sqlite3_bind_int64(s->st[ST_DELETE_INBOX], 1, s->inbox_del[i]);
        rc = wq_store_run(s->st[ST_DELETE_INBOX]);
        f->rows++;
    }
    if (rc == SQLITE_OK)
        rc = wq_store_write_jobs(s, f->now, &f->rows);
    if (rc == SQLITE_OK)
        rc = wq_store_write_ops(s, f->now, &f->rows);
    if (rc == SQLITE_OK)
        rc = wq_store_write_flows(s, &f->rows);
    if (rc == SQLITE_OK)
        rc = wq_store_write_history(s, f->now, &f->rows);
    if (rc == SQLITE_OK) /* after the items' rows */
        rc = wq_store_write_progress(s, &f->rows);
    return rc;
}

int wq_store_flush(wq_store *s)
{
    if (!s)
        return 0;
    if (s->broken)
        return wq_store_broken(s);
    if (!wq_store_dirty(s))
        return 0;
    int64_t t0 = wq_store_mono_ns();
    struct flush f;
    f.s = s;
    f.now = wq_store_wall();
    f.rows = 0;
    f.nins = 0;
    f.ndput = 0;
    double now = f.now;
    wq_ckpt_before_commit(s);
    int rc = wq_store_run(s->st[ST_BEGIN]);
    if (rc == SQLITE_OK)
        rc = write_all(&f);
    unbind(s);
    if (rc == SQLITE_OK && wq_store_check_path(s) < 0) {
        wq_store_run(s->st[ST_ROLLBACK]);
        s->stats.flush_errors++;
        return s->broken;
    }
    if (rc == SQLITE_OK)
        rc = wq_store_run(s->st[ST_COMMIT]);
    if (rc != SQLITE_OK)
        goto failed;
    if (wq_store_check_path(s) < 0) {
        s->stats.flush_errors++; /* committed into a file that is no longer at the path */
        return s->broken;
    }
    uint64_t rows = f.rows;

    note_committed(s);
    wq_store_clear_flows(s, 1);
    wq_store_clear_history(s, 1);
    wq_store_clear_progress(s, 1);
    s->stats.inbox_consumed += s->ninbox_del;
    wq_store_clear_pending(s, 1);
    if (s->bloom_set > WQ_STORE_BLOOM_BITS / 2)
        wq_store_bloom_rebuild(s);
    double dt = (double)(wq_store_mono_ns() - t0) / 1e9;
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
                             "out of memory: %llu failure-count, dead-letter, done or schedule "
                             "changes were not written to %s",
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
    int r = wq_schema_damaged(rc) ? wq_store_sqlite_fail(s, rc, "write pending changes")
                                  : wq_store_fail(s, WQ_EIO, "cannot write state file %s: %s",
                                                  s->path, sqlite3_errmsg(s->db));
    if (!sqlite3_get_autocommit(s->db))
        wq_store_run(s->st[ST_ROLLBACK]);
    return r;
}
