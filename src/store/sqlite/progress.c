/*
 * Running jobs' progress in the state file (SPEC 11): items.progress, the
 * latest value job:progress gave (JSON), set at most once a second per job
 * by the runtime, cleared when the run ends. Written behind with the next
 * commit, after the items' own rows (an item added in the same window has
 * its row by then); a key whose row is gone by then updates nothing.
 */
#include "store/sqlite/store_int.h"

#include <string.h>

struct prow {
    uint32_t qidx;
    char *key, *json; /* owned; json NULL: cleared */
    size_t keylen, n;
};

struct wq_store_progress {
    struct prow *rows;
    size_t n, cap;
    sqlite3_stmt *set;
};

void wq_store_progress_put(wq_store_queue *sq, const char *key, size_t len, const char *json,
                           size_t n)
{
    if (!sq)
        return;
    wq_store *s = sq->s;
    struct wq_store_progress *p = s->progress;
    if (!p && (p = wq_malloc(sizeof *p)))
        memset(p, 0, sizeof *p);
    s->progress = p;
    struct prow r = {sq->idx, wq_store_dup(key, len), json ? wq_store_dup(json, n) : NULL, len, n};
    if (!p || !r.key || (json && !r.json) ||
        (p->n == p->cap &&
         wq_store_grow((void **)&p->rows, &p->cap, p->n + 1, sizeof *p->rows) < 0)) {
        wq_free(r.key);
        wq_free(r.json);
        s->lost_updates++; /* a progress is not worth failing the store for: shown later */
        return;
    }
    p->rows[p->n++] = r;
}

int wq_store_progress_dirty(const wq_store *s)
{
    return s->progress && s->progress->n > 0;
}

int wq_store_write_progress(wq_store *s, uint64_t *rows)
{
    struct wq_store_progress *p = s->progress;
    if (!p || !p->n)
        return SQLITE_OK;
    int rc = p->set ? SQLITE_OK
                    : sqlite3_prepare_v3(
                          s->db, "UPDATE items SET progress = ?3 WHERE queue = ?1 AND key = ?2", -1,
                          SQLITE_PREPARE_PERSISTENT, &p->set, NULL);
    for (size_t i = 0; i < p->n && rc == SQLITE_OK; i++) {
        const struct prow *r = &p->rows[i];
        const wq_store_queue *sq = s->queues[r->qidx];
        sqlite3_bind_text(p->set, 1, sq->name, (int)sq->namelen, SQLITE_STATIC);
        sqlite3_bind_text64(p->set, 2, r->key, r->keylen, SQLITE_STATIC, SQLITE_UTF8);
        if (r->json)
            sqlite3_bind_text64(p->set, 3, r->json, r->n, SQLITE_STATIC, SQLITE_UTF8);
        else
            sqlite3_bind_null(p->set, 3);
        rc = wq_store_run(p->set);
        ++*rows;
    }
    if (p->set)
        sqlite3_clear_bindings(p->set);
    return rc;
}

void wq_store_clear_progress(wq_store *s, int committed)
{
    struct wq_store_progress *p = s->progress;
    if (!p || !committed)
        return; /* not committed: the next flush writes them again */
    for (size_t i = 0; i < p->n; i++) {
        wq_free(p->rows[i].key);
        wq_free(p->rows[i].json);
    }
    p->n = 0;
}

void wq_store_progress_free(wq_store *s)
{
    struct wq_store_progress *p = s->progress;
    if (!p)
        return;
    wq_store_clear_progress(s, 1);
    sqlite3_finalize(p->set);
    wq_free(p->rows);
    wq_free(p);
    s->progress = NULL;
}
