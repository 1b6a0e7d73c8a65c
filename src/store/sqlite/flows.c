/*
 * Flows in the state file (docs/flows.md): the runner's flow set written
 * behind, like the engine queues. The set tells what changed (flow ids and
 * node ids, wq_store_flow_touch); the flush reads the set then and writes
 * the rows, in the same transaction as the items the changes came with, so
 * a node's finish, its dependents' counts and the items it released are
 * committed together or not at all. A node's edges are written once, with
 * the node (they never change); a flow that is no longer in the set goes
 * with its nodes and edges.
 */
#include "store/sqlite/store_int.h"

#include <string.h>

enum { F_UPSERT_FLOW, F_UPSERT_NODE, F_UPDATE_NODE, F_INSERT_DEP, F_COUNT };

static const char *const fsql[F_COUNT] = {
    [F_UPSERT_FLOW] = "INSERT INTO flows(id, keep, created_at, finished_at, unfinished, cancelled)"
                      " VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(id) DO UPDATE SET"
                      " keep = excluded.keep, finished_at = excluded.finished_at,"
                      " unfinished = excluded.unfinished, cancelled = excluded.cancelled",
    [F_UPSERT_NODE] =
        "INSERT INTO flow_nodes(id, flow, queue, key, state, waits, ignore_dead, payload,"
        " priority, grp, result, error, cause, finished_at)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"
        " ON CONFLICT(id) DO UPDATE SET state = excluded.state, waits = excluded.waits,"
        " payload = excluded.payload, priority = excluded.priority, result = excluded.result,"
        " error = excluded.error, cause = excluded.cause, finished_at = excluded.finished_at",
    /* a node written before: the columns that change (its row and indexes stay put) */
    [F_UPDATE_NODE] = "UPDATE flow_nodes SET state = ?5, waits = ?6, payload = ?8, priority = ?9,"
                      " result = ?11, error = ?12, cause = ?13, finished_at = ?14 WHERE id = ?1",
    [F_INSERT_DEP] = "INSERT OR REPLACE INTO flow_deps(node, ord, dep) VALUES (?1, ?2, ?3)",
};

struct wq_store_flows {
    wq_flows *fs;
    wq_keymap *flows; /* ids of flows changed in the window */
    wq_keymap *nodes; /* 8-byte ids of nodes changed: value 1 when created */
    sqlite3_stmt *st[F_COUNT];
};

static struct wq_store_flows *state(wq_store *s)
{
    if (s->flows)
        return s->flows;
    struct wq_store_flows *f = wq_malloc(sizeof *f);
    if (!f)
        return NULL;
    memset(f, 0, sizeof *f);
    f->flows = wq_keymap_new();
    f->nodes = wq_keymap_new();
    if (!f->flows || !f->nodes) {
        wq_keymap_free(f->flows);
        wq_keymap_free(f->nodes);
        wq_free(f);
        return NULL;
    }
    s->flows = f;
    return f;
}

void wq_store_flows_attach(wq_store *s, wq_flows *fs)
{
    struct wq_store_flows *f = state(s);
    if (f)
        f->fs = fs;
    else
        s->lost_updates++;
}

void wq_store_flow_touch(wq_store *s, const char *flow, int64_t node, int created)
{
    struct wq_store_flows *f = state(s);
    uint64_t *v = NULL;
    if (f && node == 0)
        v = wq_keymap_put(f->flows, flow, strlen(flow), NULL);
    else if (f)
        v = wq_keymap_put(f->nodes, (const char *)&node, sizeof node, NULL);
    if (!v) {
        s->lost_updates++; /* the flush fails the store: nothing is lost silently */
        return;
    }
    if (created)
        *v = 1;
}

int wq_store_flows_dirty(const wq_store *s)
{
    return s->flows &&
           (wq_keymap_count(s->flows->flows) > 0 || wq_keymap_count(s->flows->nodes) > 0);
}

static int prepare(wq_store *s, int i, sqlite3_stmt **out)
{
    struct wq_store_flows *f = s->flows;
    if (!f->st[i]) {
        int rc = sqlite3_prepare_v3(s->db, fsql[i], -1, SQLITE_PREPARE_PERSISTENT, &f->st[i], NULL);
        if (rc != SQLITE_OK)
            return rc;
    }
    *out = f->st[i];
    return SQLITE_OK;
}

static void bind_text(sqlite3_stmt *st, int i, const char *s, size_t len)
{
    if (s)
        sqlite3_bind_text64(st, i, s, len, SQLITE_STATIC, SQLITE_UTF8);
    else
        sqlite3_bind_null(st, i);
}

static int delete_flow(wq_store *s, const char *id, size_t len, uint64_t *rows)
{
    /* three statements: run them one by one with the id bound */
    static const char *const sql[3] = {
        "DELETE FROM flow_deps WHERE node IN (SELECT id FROM flow_nodes WHERE flow = ?1)",
        "DELETE FROM flow_nodes WHERE flow = ?1", "DELETE FROM flows WHERE id = ?1"};
    for (int i = 0; i < 3; i++) {
        sqlite3_stmt *st;
        int rc = sqlite3_prepare_v2(s->db, sql[i], -1, &st, NULL);
        if (rc != SQLITE_OK)
            return rc;
        sqlite3_bind_text(st, 1, id, (int)len, SQLITE_STATIC);
        rc = sqlite3_step(st);
        *rows += (uint64_t)sqlite3_changes(s->db);
        sqlite3_finalize(st);
        if (rc != SQLITE_DONE)
            return rc;
    }
    return SQLITE_OK;
}

static int write_flow(wq_store *s, const wq_flow *fl, uint64_t *rows)
{
    sqlite3_stmt *st;
    int rc = prepare(s, F_UPSERT_FLOW, &st);
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_bind_text(st, 1, fl->id, -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 2, fl->keep);
    sqlite3_bind_double(st, 3, fl->created_at);
    wq_store_bind_time(st, 4, fl->finished_at);
    sqlite3_bind_int64(st, 5, fl->unfinished);
    sqlite3_bind_int(st, 6, fl->cancelled);
    rc = wq_store_run(st);
    sqlite3_clear_bindings(st);
    (*rows)++;
    return rc;
}

static int write_node(wq_store *s, const wq_fnode *n, int created, uint64_t *rows)
{
    sqlite3_stmt *st;
    int rc = prepare(s, created ? F_UPSERT_NODE : F_UPDATE_NODE, &st);
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_bind_int64(st, 1, n->id);
    if (created) {
        sqlite3_bind_text(st, 2, n->flow->id, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, n->queue, -1, SQLITE_STATIC);
        sqlite3_bind_text64(st, 4, n->key, n->keylen, SQLITE_STATIC, SQLITE_UTF8);
        sqlite3_bind_int(st, 7, n->ignore_dead);
        bind_text(st, 10, n->grp, n->grplen);
    }
    sqlite3_bind_text(st, 5, wq_node_state_name(n->state), -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 6, n->waits);
    bind_text(st, 8, n->payload, n->paylen);
    sqlite3_bind_int(st, 9, n->priority);
    bind_text(st, 11, n->result, n->rlen);
    bind_text(st, 12, n->error, n->error ? strlen(n->error) : 0);
    if (n->cause)
        sqlite3_bind_int64(st, 13, n->cause);
    else
        sqlite3_bind_null(st, 13);
    wq_store_bind_time(st, 14, n->finished_at);
    rc = wq_store_run(st);
    sqlite3_clear_bindings(st);
    (*rows)++;
    if (rc != SQLITE_OK || !created)
        return rc;
    if ((rc = prepare(s, F_INSERT_DEP, &st)) != SQLITE_OK)
        return rc;
    for (uint32_t i = 0; i < n->ndeps && rc == SQLITE_OK; i++) {
        sqlite3_bind_int64(st, 1, n->id);
        sqlite3_bind_int(st, 2, (int)i);
        sqlite3_bind_int64(st, 3, n->deps[i]->id);
        rc = wq_store_run(st);
        (*rows)++;
    }
    return rc;
}

int wq_store_write_flows(wq_store *s, uint64_t *rows)
{
    struct wq_store_flows *f = s->flows;
    if (!f || !f->fs)
        return SQLITE_OK;
    int rc = SQLITE_OK;
    size_t pos = 0;
    const char *k;
    size_t len;
    uint64_t v;
    /* flows first: a flow gone takes its nodes, which are then not in the set either */
    while (rc == SQLITE_OK && wq_keymap_next(f->flows, &pos, &k, &len, &v)) {
        char id[256];
        if (len >= sizeof id)
            continue; /* longer than any id the host accepts */
        memcpy(id, k, len);
        id[len] = '\0';
        const wq_flow *fl = wq_flows_get(f->fs, id);
        rc = fl ? write_flow(s, fl, rows) : delete_flow(s, id, len, rows);
    }
    pos = 0;
    while (rc == SQLITE_OK && wq_keymap_next(f->nodes, &pos, &k, &len, &v)) {
        int64_t nid;
        memcpy(&nid, k, sizeof nid);
        const wq_fnode *n = wq_flows_node(f->fs, nid);
        if (n)
            rc = write_node(s, n, (int)v, rows);
    }
    return rc;
}

/* Empties a set of the window: a big one goes (clearing it, and walking it at each flush,
 * would cost its whole capacity every time), a small one is cleared. */
static void empty_set(wq_keymap **m)
{
    if (wq_keymap_count(*m) > 256) {
        wq_keymap *fresh = wq_keymap_new();
        if (fresh) {
            wq_keymap_free(*m);
            *m = fresh;
            return;
        }
    }
    wq_keymap_clear(*m);
}

void wq_store_clear_flows(wq_store *s, int committed)
{
    if (!s->flows || !committed)
        return; /* not committed: written again by the next flush */
    empty_set(&s->flows->flows);
    empty_set(&s->flows->nodes);
}

void wq_store_flows_free(wq_store *s)
{
    struct wq_store_flows *f = s->flows;
    if (!f)
        return;
    for (int i = 0; i < F_COUNT; i++)
        sqlite3_finalize(f->st[i]);
    wq_keymap_free(f->flows);
    wq_keymap_free(f->nodes);
    wq_free(f);
    s->flows = NULL;
}

/* ---- reading them back at start-up ---- */

static double column_time(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? 0 : sqlite3_column_double(st, i);
}

static const char *column_text(sqlite3_stmt *st, int i, size_t *len)
{
    const char *t = (const char *)sqlite3_column_text(st, i);
    if (len)
        *len = t ? (size_t)sqlite3_column_bytes(st, i) : 0;
    return t;
}

int wq_store_restore_flows(wq_store *s, wq_flows *fs)
{
    if (s->broken)
        return wq_store_broken(s);
    static const char *const sql[3] = {
        "SELECT id, keep, created_at, finished_at, cancelled FROM flows ORDER BY created_at, id",
        "SELECT flow, id, queue, key, state, ignore_dead, payload, priority, grp, result, error,"
        " cause, finished_at FROM flow_nodes ORDER BY flow, id",
        "SELECT node, ord, dep FROM flow_deps ORDER BY node, ord"};
    int n = 0;
    for (int q = 0; q < 3; q++) {
        sqlite3_stmt *st;
        int rc = sqlite3_prepare_v2(s->db, sql[q], -1, &st, NULL);
        if (rc != SQLITE_OK)
            return wq_store_sqlite_fail(s, rc, "restore the flows");
        int r = 0;
        while (r == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
            if (q == 0) {
                const char *id = column_text(st, 0, NULL);
                r = wq_flows_restore_flow(fs, id ? id : "", sqlite3_column_double(st, 1),
                                          column_time(st, 2), column_time(st, 3),
                                          sqlite3_column_int(st, 4));
            } else if (q == 1) {
                size_t klen, plen, glen, rlen;
                const char *flow = column_text(st, 0, NULL), *queue = column_text(st, 2, NULL),
                           *key = column_text(st, 3, &klen), *state = column_text(st, 4, NULL),
                           *payload = column_text(st, 6, &plen), *grp = column_text(st, 8, &glen),
                           *result = column_text(st, 9, &rlen), *error = column_text(st, 10, NULL);
                int sv = state ? wq_node_state_parse(state) : -1;
                if (!flow || !queue || !key || sv < 0) {
                    r = WQ_EINVAL;
                    break;
                }
                r = wq_flows_restore_node(fs, flow, sqlite3_column_int64(st, 1), queue, key, klen,
                                          (wq_node_state)sv, sqlite3_column_int(st, 5), payload,
                                          plen, (int32_t)sqlite3_column_int(st, 7), grp, glen,
                                          result, rlen, error, sqlite3_column_int64(st, 11),
                                          column_time(st, 12));
                n++;
            } else {
                r = wq_flows_restore_dep(fs, sqlite3_column_int64(st, 0),
                                         (uint32_t)sqlite3_column_int(st, 1),
                                         sqlite3_column_int64(st, 2));
            }
        }
        sqlite3_finalize(st);
        if (r == WQ_ENOMEM)
            return WQ_ENOMEM;
        if (r < 0)
            return wq_store_fail(
                s, WQ_EFORMAT, "state file %s: its flow tables do not hold together (%s)", s->path,
                q == 0   ? "flows"
                : q == 1 ? "flow_nodes"
                         : "flow_deps");
        if (rc != SQLITE_DONE)
            return wq_store_sqlite_fail(s, rc, "restore the flows");
    }
    char err[128];
    if (wq_flows_restored(fs, err, sizeof err) < 0)
        return WQ_ENOMEM;
    return n;
}
