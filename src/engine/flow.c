/*
 * The flow set: flows, their nodes and the edges between them, with a count
 * per node of the dependencies that have not finished (docs/flows.md).
 *
 * A finish walks the finished node's dependents only: each loses one from
 * its count, is released at zero, or dies of a dead dependency; a death
 * walks on down the graph with an explicit work list (a chain of 100,000
 * nodes must not recurse). A revival (a dead node retried) is the mirror
 * image: dependents gain one back, and those that died of it are blocked
 * again. Counts are kept for every dependent whatever its state, so that a
 * finish and a later revival always cancel out.
 *
 * Lookups go through keymaps holding pointers: by id (the store's rows), by
 * flow + queue + key (appends, after), and by queue + key for the node a
 * key belongs to now (the last one added; adds and retries ask it).
 */
#include "engine/flow.h"

#include "engine/keymap.h"

#include <stdio.h>
#include <string.h>

struct wq_flows {
    wq_flows_hooks hooks;
    wq_keymap *flows;   /* id -> wq_flow * */
    wq_keymap *byid;    /* 8-byte id -> wq_fnode * */
    wq_keymap *infl;    /* flow \0 queue \0 key -> wq_fnode * */
    wq_keymap *latest;  /* queue \0 key -> the last wq_fnode * of the key */
    wq_keymap *blocked; /* queue -> number of its blocked nodes */
    wq_flow *head, *tail;
    size_t nflows;
    int64_t next_id;
    /* the work list of finish, kill and revive */
    wq_fnode **work;
    size_t nwork, capwork;
};

static const char *const state_names[] = {"blocked", "pending", "done", "dead"};

const char *wq_node_state_name(wq_node_state s)
{
    return (unsigned)s < 4 ? state_names[s] : "?";
}

int wq_node_state_parse(const char *s)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(s, state_names[i]) == 0)
            return i;
    return -1;
}

static char *dup_bytes(const char *s, size_t len)
{
    char *p = wq_malloc(len + 1);
    if (p) {
        if (len)
            memcpy(p, s, len);
        p[len] = '\0';
    }
    return p;
}

/* ---- composite keys ---- */

typedef struct {
    char small[256];
    char *p;
    size_t len;
} ckey;

/* a \0 b \0 c (c of clen bytes; a, b NUL-terminated, b may be NULL) */
static int ckey_make(ckey *k, const char *a, const char *b, const char *c, size_t clen)
{
    size_t alen = strlen(a), blen = b ? strlen(b) + 1 : 0;
    k->len = alen + 1 + blen + clen;
    k->p = k->len <= sizeof k->small ? k->small : wq_malloc(k->len);
    if (!k->p)
        return WQ_ENOMEM;
    memcpy(k->p, a, alen);
    k->p[alen] = '\0';
    if (b)
        memcpy(k->p + alen + 1, b, blen);
    if (clen)
        memcpy(k->p + alen + 1 + blen, c, clen);
    return 0;
}

static void ckey_done(ckey *k)
{
    if (k->p != k->small)
        wq_free(k->p);
}

static void *map_get(const wq_keymap *m, const char *k, size_t len)
{
    uint64_t *v = wq_keymap_get(m, k, len);
    return v ? (void *)(uintptr_t)*v : NULL;
}

static int map_set(wq_keymap *m, const char *k, size_t len, void *p)
{
    uint64_t *v = wq_keymap_put(m, k, len, NULL);
    if (!v)
        return WQ_ENOMEM;
    *v = (uint64_t)(uintptr_t)p;
    return 0;
}

/* ---- the set ---- */

wq_flows *wq_flows_new(const wq_flows_hooks *hooks)
{
    wq_flows *fs = wq_malloc(sizeof *fs);
    if (!fs)
        return NULL;
    memset(fs, 0, sizeof *fs);
    if (hooks)
        fs->hooks = *hooks;
    fs->next_id = 1;
    fs->flows = wq_keymap_new();
    fs->byid = wq_keymap_new();
    fs->infl = wq_keymap_new();
    fs->latest = wq_keymap_new();
    fs->blocked = wq_keymap_new();
    if (!fs->flows || !fs->byid || !fs->infl || !fs->latest || !fs->blocked) {
        wq_flows_free(fs);
        return NULL;
    }
    return fs;
}

static void node_free(wq_fnode *n)
{
    if (!n)
        return;
    wq_free(n->queue);
    wq_free(n->key);
    wq_free(n->payload);
    wq_free(n->grp);
    wq_free(n->result);
    wq_free(n->error);
    wq_free(n->deps);
    wq_free(n->outs);
    wq_free(n);
}

static void flow_free(wq_flow *f)
{
    for (uint32_t i = 0; i < f->nnodes; i++)
        node_free(f->nodes[i]);
    wq_free(f->nodes);
    wq_free(f->id);
    wq_free(f);
}

void wq_flows_free(wq_flows *fs)
{
    if (!fs)
        return;
    for (wq_flow *f = fs->head, *next; f; f = next) {
        next = f->next;
        flow_free(f);
    }
    wq_keymap_free(fs->flows);
    wq_keymap_free(fs->byid);
    wq_keymap_free(fs->infl);
    wq_keymap_free(fs->latest);
    wq_keymap_free(fs->blocked);
    wq_free(fs->work);
    wq_free(fs);
}

static void touch(wq_flows *fs, const wq_flow *f, const wq_fnode *n)
{
    if (fs->hooks.touch)
        fs->hooks.touch(fs->hooks.ud, f->id, n ? n->id : 0, 0);
}

static void touch_new(wq_flows *fs, const wq_flow *f, const wq_fnode *n)
{
    if (fs->hooks.touch)
        fs->hooks.touch(fs->hooks.ud, f->id, n->id, 1);
}

wq_flow *wq_flows_get(const wq_flows *fs, const char *id)
{
    return map_get(fs->flows, id, strlen(id));
}

wq_fnode *wq_flows_node(const wq_flows *fs, int64_t id)
{
    return map_get(fs->byid, (const char *)&id, sizeof id);
}

static wq_fnode *in_flow(const wq_flows *fs, const char *flow, const char *queue, const char *key,
                         size_t keylen);

wq_fnode *wq_flow_node(const wq_flows *fs, const wq_flow *f, const char *queue, const char *key,
                       size_t keylen)
{
    return in_flow(fs, f->id, queue, key, keylen);
}

static wq_fnode *in_flow(const wq_flows *fs, const char *flow, const char *queue, const char *key,
                         size_t keylen)
{
    ckey k;
    if (ckey_make(&k, flow, queue, key, keylen) < 0)
        return NULL;
    wq_fnode *n = map_get(fs->infl, k.p, k.len);
    ckey_done(&k);
    return n;
}

static wq_fnode *latest_of(const wq_flows *fs, const char *queue, const char *key, size_t keylen)
{
    ckey k;
    if (ckey_make(&k, queue, NULL, key, keylen) < 0)
        return NULL;
    wq_fnode *n = map_get(fs->latest, k.p, k.len);
    ckey_done(&k);
    return n;
}

static int unfinished(const wq_fnode *n)
{
    return n->state == WQ_NODE_BLOCKED || n->state == WQ_NODE_PENDING;
}

wq_fnode *wq_flows_live(const wq_flows *fs, const char *queue, const char *key, size_t keylen)
{
    wq_fnode *n = latest_of(fs, queue, key, keylen);
    return n && unfinished(n) ? n : NULL;
}

wq_fnode *wq_flows_last(const wq_flows *fs, const char *queue, const char *key, size_t keylen)
{
    return latest_of(fs, queue, key, keylen);
}

wq_fnode *wq_flows_dead(const wq_flows *fs, const char *queue, const char *key, size_t keylen)
{
    wq_fnode *n = latest_of(fs, queue, key, keylen);
    return n && n->state == WQ_NODE_DEAD && n->cause == 0 ? n : NULL;
}

int wq_flows_blocks(const wq_flows *fs, const char *queue)
{
    if (wq_keymap_count(fs->blocked) == 0)
        return 0;
    uint64_t *v = wq_keymap_get(fs->blocked, queue, strlen(queue));
    return v && *v > 0;
}

size_t wq_flows_count(const wq_flows *fs)
{
    return fs->nflows;
}

wq_flow *wq_flows_next(const wq_flows *fs, size_t *pos)
{
    /* pos holds the flow last returned (0: none yet) */
    wq_flow *f = *pos ? ((wq_flow *)(uintptr_t)*pos)->next : fs->head;
    *pos = (size_t)(uintptr_t)f;
    return f;
}

/* Counts blocked nodes per queue (a node entering, +1, or leaving, -1, the state). */
static void count_blocked(wq_flows *fs, const wq_fnode *n, int d)
{
    uint64_t *v = wq_keymap_put(fs->blocked, n->queue, strlen(n->queue), NULL);
    if (!v) /* out of memory: the count is a hint for adds; a lost +1 only costs lookups */
        return;
    if (d > 0)
        (*v)++;
    else if (*v > 0 && --(*v) == 0)
        wq_keymap_del(fs->blocked, n->queue, strlen(n->queue));
}

static void set_state(wq_flows *fs, wq_fnode *n, wq_node_state s)
{
    if (n->state == WQ_NODE_BLOCKED && s != WQ_NODE_BLOCKED)
        count_blocked(fs, n, -1);
    else if (n->state != WQ_NODE_BLOCKED && s == WQ_NODE_BLOCKED)
        count_blocked(fs, n, +1);
    int was = unfinished(n);
    n->state = s;
    int is = unfinished(n);
    if (was && !is) {
        n->flow->unfinished--;
    } else if (!was && is) {
        n->flow->unfinished++;
        n->flow->finished_at = 0;
    }
}

static int push_work(wq_flows *fs, wq_fnode *n)
{
    if (fs->nwork == fs->capwork) {
        size_t cap = fs->capwork ? fs->capwork * 2 : 64;
        wq_fnode **w = wq_realloc(fs->work, cap * sizeof *w);
        if (!w)
            return WQ_ENOMEM;
        fs->work = w;
        fs->capwork = cap;
    }
    fs->work[fs->nwork++] = n;
    return 0;
}

/* "dependency Q/K is dead: ERROR" (or "flow cancelled"), or NULL when out of memory. */
static char *dep_error(const wq_fnode *dep)
{
    if (dep->flow->cancelled)
        return dup_bytes("flow cancelled", 14);
    char shown[WQ_SHOWN_KEY];
    wq_show_key(shown, dep->key, dep->keylen);
    const char *e = dep->error ? dep->error : "dead";
    size_t len = strlen(dep->queue) + strlen(shown) + strlen(e) + 32;
    char *s = wq_malloc(len);
    if (s)
        snprintf(s, len, "dependency %s/%s is dead: %s", dep->queue, shown, e);
    return s;
}

static void release(wq_flows *fs, wq_fnode *n)
{
    set_state(fs, n, WQ_NODE_PENDING);
    touch(fs, n->flow, n);
    if (fs->hooks.release)
        fs->hooks.release(fs->hooks.ud, n);
}

static void finish_flow_if_done(wq_flow *f, double now)
{
    if (f->unfinished == 0 && f->finished_at == 0)
        f->finished_at = now;
}

/*
 * The node on the work list finished (its state already set): its dependents count it,
 * are released, or die of it (pushed in turn).
 */
static void propagate(wq_flows *fs, double now)
{
    while (fs->nwork > 0) {
        wq_fnode *n = fs->work[--fs->nwork];
        int dead = n->state == WQ_NODE_DEAD;
        for (uint32_t i = 0; i < n->nouts; i++) {
            wq_fnode *d = n->outs[i];
            d->waits--;
            touch(fs, d->flow, d);
            if (d->state != WQ_NODE_BLOCKED)
                continue;
            if (dead && !d->ignore_dead) {
                char *err = dep_error(n);
                wq_free(d->error);
                d->error = err;
                d->cause = n->id;
                d->finished_at = now;
                set_state(fs, d, WQ_NODE_DEAD);
                if (push_work(fs, d) < 0) /* out of memory: its own dependents wait */
                    continue;
            } else if (d->waits <= 0) {
                release(fs, d);
            }
        }
        finish_flow_if_done(n->flow, now);
        touch(fs, n->flow, NULL);
    }
}

static int end_node(wq_flows *fs, wq_fnode *n, int dead, const char *result, size_t rlen,
                    const char *error, double now)
{
    char *r = NULL, *e = NULL;
    if (!dead && result && !(r = dup_bytes(result, rlen)))
        return WQ_ENOMEM;
    if (dead && !(e = dup_bytes(error ? error : "dead", error ? strlen(error) : 4))) {
        wq_free(r);
        return WQ_ENOMEM;
    }
    if (push_work(fs, n) < 0) {
        wq_free(r);
        wq_free(e);
        return WQ_ENOMEM;
    }
    fs->nwork--; /* room made: pushed again below, cannot fail now */
    wq_free(n->result);
    wq_free(n->error);
    n->result = r;
    n->rlen = r ? rlen : 0;
    n->error = e;
    n->cause = 0;
    n->finished_at = now;
    if (n->state == WQ_NODE_BLOCKED) { /* killed: its payload will never be used */
        wq_free(n->payload);
        n->payload = NULL;
        n->paylen = 0;
    }
    set_state(fs, n, dead ? WQ_NODE_DEAD : WQ_NODE_DONE);
    touch(fs, n->flow, n);
    fs->work[fs->nwork++] = n;
    propagate(fs, now);
    return 0;
}

int wq_flows_finished(wq_flows *fs, wq_fnode *n, int dead, const char *result, size_t rlen,
                      const char *error, double now)
{
    if (n->state != WQ_NODE_PENDING)
        return WQ_EINVAL;
    return end_node(fs, n, dead, result, rlen, error, now);
}

int wq_flows_kill(wq_flows *fs, wq_fnode *n, const char *error, double now)
{
    if (n->state != WQ_NODE_BLOCKED)
        return WQ_EINVAL;
    return end_node(fs, n, 1, NULL, 0, error, now);
}

/* The first dead dependency of n that kills it (n not ignore_dead), or NULL. */
static wq_fnode *killer(const wq_fnode *n)
{
    if (n->ignore_dead)
        return NULL;
    for (uint32_t i = 0; i < n->ndeps; i++)
        if (n->deps[i]->state == WQ_NODE_DEAD)
            return n->deps[i];
    return NULL;
}

int wq_flows_revive(wq_flows *fs, wq_fnode *n)
{
    if (n->state != WQ_NODE_DEAD)
        return WQ_EINVAL;
    wq_fnode *live = wq_flows_live(fs, n->queue, n->key, n->keylen);
    if (live && live != n)
        return WQ_EINVAL;
    if (push_work(fs, n) < 0)
        return WQ_ENOMEM;
    wq_free(n->error);
    n->error = NULL;
    n->cause = 0;
    n->finished_at = 0;
    set_state(fs, n, WQ_NODE_PENDING);
    touch(fs, n->flow, n);
    touch(fs, n->flow, NULL);
    /* each node on the list became unfinished again: its dependents count it again */
    while (fs->nwork > 0) {
        wq_fnode *u = fs->work[--fs->nwork];
        for (uint32_t i = 0; i < u->nouts; i++) {
            wq_fnode *d = u->outs[i];
            d->waits++;
            touch(fs, d->flow, d);
            if (d->state != WQ_NODE_DEAD || d->cause != u->id)
                continue;
            wq_fnode *k = killer(d);
            if (k) { /* another dead dependency keeps it dead */
                char *err = dep_error(k);
                if (err) {
                    wq_free(d->error);
                    d->error = err;
                }
                d->cause = k->id;
                continue;
            }
            if (push_work(fs, d) < 0)
                continue;
            wq_free(d->error);
            d->error = NULL;
            d->cause = 0;
            d->finished_at = 0;
            set_state(fs, d, WQ_NODE_BLOCKED);
        }
    }
    return 0;
}

int wq_flows_update(wq_flows *fs, wq_fnode *n, const char *payload, size_t paylen, int has_prio,
                    int32_t priority)
{
    if (payload) {
        char *p = dup_bytes(payload, paylen);
        if (!p)
            return WQ_ENOMEM;
        wq_free(n->payload);
        n->payload = p;
        n->paylen = paylen;
    }
    if (has_prio && priority > n->priority)
        n->priority = priority;
    touch(fs, n->flow, n);
    return 0;
}

size_t wq_flows_cancel(wq_flows *fs, wq_flow *f, double now, void (*fn)(void *ud, wq_fnode *n),
                       void *ud)
{
    size_t count = f->unfinished;
    f->cancelled = 1;
    touch(fs, f, NULL);
    for (uint32_t i = 0; i < f->nnodes; i++)
        if (f->nodes[i]->state == WQ_NODE_BLOCKED)
            wq_flows_kill(fs, f->nodes[i], "flow cancelled", now);
    for (uint32_t i = 0; i < f->nnodes; i++)
        if (f->nodes[i]->state == WQ_NODE_PENDING && fn)
            fn(ud, f->nodes[i]);
    return count;
}

/* ---- adding nodes ---- */

static int grow_nodes(wq_flow *f, size_t more)
{
    if (f->nnodes + more <= f->capnodes)
        return 0;
    size_t cap = f->capnodes ? f->capnodes : 8;
    while (cap < f->nnodes + more)
        cap *= 2;
    wq_fnode **p = wq_realloc(f->nodes, cap * sizeof *p);
    if (!p)
        return WQ_ENOMEM;
    f->nodes = p;
    f->capnodes = (uint32_t)cap;
    return 0;
}

static int grow_outs(wq_fnode *n, size_t more)
{
    if (n->nouts + more <= n->capouts)
        return 0;
    size_t cap = n->capouts ? n->capouts : 4;
    while (cap < n->nouts + more)
        cap *= 2;
    wq_fnode **p = wq_realloc(n->outs, cap * sizeof *p);
    if (!p)
        return WQ_ENOMEM;
    n->outs = p;
    n->capouts = (uint32_t)cap;
    return 0;
}

static wq_flow *flow_new(const char *id, double keep, double created_at)
{
    wq_flow *f = wq_malloc(sizeof *f);
    if (!f)
        return NULL;
    memset(f, 0, sizeof *f);
    f->id = dup_bytes(id, strlen(id));
    if (!f->id) {
        wq_free(f);
        return NULL;
    }
    f->keep = keep;
    f->created_at = created_at;
    return f;
}

static int flow_insert(wq_flows *fs, wq_flow *f)
{
    if (map_set(fs->flows, f->id, strlen(f->id), f) < 0)
        return WQ_ENOMEM;
    f->prev = fs->tail;
    if (fs->tail)
        fs->tail->next = f;
    else
        fs->head = f;
    fs->tail = f;
    fs->nflows++;
    return 0;
}

static void flow_unlink(wq_flows *fs, wq_flow *f)
{
    wq_keymap_del(fs->flows, f->id, strlen(f->id));
    if (f->prev)
        f->prev->next = f->next;
    else
        fs->head = f->next;
    if (f->next)
        f->next->prev = f->prev;
    else
        fs->tail = f->prev;
    fs->nflows--;
}

static wq_fnode *node_new(const char *queue, const char *key, size_t keylen)
{
    wq_fnode *n = wq_malloc(sizeof *n);
    if (!n)
        return NULL;
    memset(n, 0, sizeof *n);
    n->queue = dup_bytes(queue, strlen(queue));
    n->key = dup_bytes(key, keylen);
    n->keylen = keylen;
    if (!n->queue || !n->key) {
        node_free(n);
        return NULL;
    }
    return n;
}

/* Enters n (of f) into the maps; on failure nothing is left in them. */
static int node_index(wq_flows *fs, wq_fnode *n)
{
    ckey a, b;
    if (ckey_make(&a, n->flow->id, n->queue, n->key, n->keylen) < 0)
        return WQ_ENOMEM;
    if (ckey_make(&b, n->queue, NULL, n->key, n->keylen) < 0) {
        ckey_done(&a);
        return WQ_ENOMEM;
    }
    int r = WQ_ENOMEM;
    wq_fnode *prev = map_get(fs->latest, b.p, b.len);
    if (map_set(fs->byid, (const char *)&n->id, sizeof n->id, n) < 0)
        goto out;
    if (map_set(fs->infl, a.p, a.len, n) < 0) {
        wq_keymap_del(fs->byid, (const char *)&n->id, sizeof n->id);
        goto out;
    }
    /* the key's node now: an unfinished one, else the one that finished last */
    if (!prev || (!unfinished(prev) && (unfinished(n) || n->finished_at >= prev->finished_at))) {
        if (map_set(fs->latest, b.p, b.len, n) < 0) {
            wq_keymap_del(fs->byid, (const char *)&n->id, sizeof n->id);
            wq_keymap_del(fs->infl, a.p, a.len);
            goto out;
        }
    }
    r = 0;
out:
    ckey_done(&a);
    ckey_done(&b);
    return r;
}

static void node_unindex(wq_flows *fs, wq_fnode *n)
{
    ckey a, b;
    wq_keymap_del(fs->byid, (const char *)&n->id, sizeof n->id);
    if (ckey_make(&a, n->flow->id, n->queue, n->key, n->keylen) == 0) {
        wq_keymap_del(fs->infl, a.p, a.len);
        ckey_done(&a);
    }
    if (ckey_make(&b, n->queue, NULL, n->key, n->keylen) == 0) {
        if (map_get(fs->latest, b.p, b.len) == n)
            wq_keymap_del(fs->latest, b.p, b.len);
        ckey_done(&b);
    }
    if (n->state == WQ_NODE_BLOCKED)
        count_blocked(fs, n, -1);
}

static void show_node(char *out, size_t size, const char *queue, const char *key, size_t keylen)
{
    char shown[WQ_SHOWN_KEY];
    wq_show_key(shown, key, keylen);
    snprintf(out, size, "%s/%s", queue, shown);
}

/* Per def of a commit: where it stands. */
typedef struct {
    wq_fnode *node;  /* new node, or the existing one (skip) */
    int skip;        /* already in the flow */
    uint32_t indeg;  /* new deps not placed yet (Kahn) */
    wq_fnode **deps; /* resolved, in after's order, duplicates dropped */
    uint32_t ndeps;
    int32_t *depdef; /* per dep: the def index, or -1 for an existing node */
} defstate;

static int commit_fail(char *err, size_t errlen, const char *id, const wq_fnode_def *d,
                       const char *what)
{
    char node[WQ_SHOWN_KEY + 80];
    show_node(node, sizeof node, d->queue ? d->queue : "?", d->key ? d->key : "", d->keylen);
    snprintf(err, errlen, "flow %s: node %s %s", id, node, what);
    return WQ_EINVAL;
}

int wq_flows_commit(wq_flows *fs, const char *id, double keep, double now, const wq_fnode_def *defs,
                    size_t n, size_t *added, char *err, size_t errlen)
{
    if (added)
        *added = 0;
    wq_flow *f = wq_flows_get(fs, id);
    int fresh = f == NULL;
    defstate *ds = NULL;
    wq_keymap *seen = NULL, *oldseen = NULL;
    uint32_t *order = NULL, *mark = NULL;
    int r = WQ_ENOMEM;
    if (fresh && !(f = flow_new(id, keep, now)))
        return WQ_ENOMEM;
    if (!fresh && f->cancelled && n > 0) {
        snprintf(err, errlen, "flow %s: cancelled (nothing can be added to it)", id);
        return WQ_EINVAL;
    }
    if (n > 0 && !(ds = wq_malloc(n * sizeof *ds)))
        goto fail;
    if (n > 0)
        memset(ds, 0, n * sizeof *ds); /* before anything can fail: the cleanup reads it */
    if (n > 0 && !(order = wq_malloc(n * sizeof *order)))
        goto fail;
    if (!(seen = wq_keymap_new()))
        goto fail;
    /* 1. each node: new or already in the flow; its queue and key free */
    for (size_t i = 0; i < n; i++) {
        const wq_fnode_def *d = &defs[i];
        ckey k;
        if (!d->queue || !d->key) {
            r = commit_fail(err, errlen, id, d, "has no queue or key");
            goto fail;
        }
        if (ckey_make(&k, d->queue, NULL, d->key, d->keylen) < 0)
            goto fail;
        int created = 0;
        uint64_t *v = wq_keymap_put(seen, k.p, k.len, &created);
        ckey_done(&k);
        if (!v)
            goto fail;
        if (!created) {
            r = commit_fail(err, errlen, id, d, "is added twice");
            goto fail;
        }
        *v = i;
        wq_fnode *old = fresh ? NULL : in_flow(fs, id, d->queue, d->key, d->keylen);
        if (old) {
            ds[i].skip = 1;
            ds[i].node = old;
            continue;
        }
        int c = fs->hooks.check ? fs->hooks.check(fs->hooks.ud, d->queue, d->key, d->keylen) : 0;
        if (c == WQ_ENOENT) {
            char what[128];
            snprintf(what, sizeof what, ": no queue named %s", d->queue);
            char node[WQ_SHOWN_KEY + 80];
            show_node(node, sizeof node, d->queue, d->key, d->keylen);
            snprintf(err, errlen, "flow %s: node %s%s", id, node, what);
            r = WQ_EINVAL;
            goto fail;
        }
        if (c == WQ_EBUSY || wq_flows_live(fs, d->queue, d->key, d->keylen)) {
            r = commit_fail(err, errlen, id, d, "is already pending outside the flow");
            goto fail;
        }
    }
    /* 2. what each new node waits for */
    if (n > 0 && (!(mark = wq_malloc(n * sizeof *mark)) || !(oldseen = wq_keymap_new())))
        goto fail;
    if (n > 0)
        memset(mark, 0, n * sizeof *mark);
    for (size_t i = 0; i < n; i++) {
        const wq_fnode_def *d = &defs[i];
        if (ds[i].skip || d->nafter == 0)
            continue;
        if (wq_keymap_count(oldseen) > 0)
            wq_keymap_clear(oldseen);
        if (!(ds[i].deps = wq_malloc(d->nafter * sizeof *ds[i].deps)) ||
            !(ds[i].depdef = wq_malloc(d->nafter * sizeof *ds[i].depdef)))
            goto fail;
        for (size_t j = 0; j < d->nafter; j++) {
            const wq_fref *a = &d->after[j];
            wq_fnode *dep = NULL;
            int32_t di = -1;
            ckey k;
            if (!a->queue || !a->key || ckey_make(&k, a->queue, NULL, a->key, a->keylen) < 0) {
                if (a->queue && a->key)
                    goto fail;
                r = commit_fail(err, errlen, id, d, "has an after entry without queue or key");
                goto fail;
            }
            uint64_t *v = wq_keymap_get(seen, k.p, k.len);
            ckey_done(&k);
            if (v && !ds[*v].skip)
                di = (int32_t)*v;
            else if (v)
                dep = ds[*v].node;
            else if (!fresh)
                dep = in_flow(fs, id, a->queue, a->key, a->keylen);
            if (di < 0 && !dep) {
                char other[WQ_SHOWN_KEY + 80], what[WQ_SHOWN_KEY + 160];
                show_node(other, sizeof other, a->queue, a->key, a->keylen);
                snprintf(what, sizeof what, "waits for %s, which is no node of the flow", other);
                r = commit_fail(err, errlen, id, d, what);
                goto fail;
            }
            if ((size_t)di == i) {
                r = commit_fail(err, errlen, id, d, "is in a cycle");
                goto fail;
            }
            /* the same dependency twice counts once: a mark per def, a set of the old ones */
            if (di >= 0) {
                if (mark[di] == i + 1)
                    continue;
                mark[di] = (uint32_t)i + 1;
            } else {
                int created = 0;
                if (!wq_keymap_put(oldseen, (const char *)&dep, sizeof dep, &created))
                    goto fail;
                if (!created)
                    continue;
            }
            ds[i].deps[ds[i].ndeps] = dep;
            ds[i].depdef[ds[i].ndeps++] = di;
            if (di >= 0)
                ds[i].indeg++;
        }
    }
    /* 3. an order where every new node comes after its new dependencies (Kahn), else a
     * cycle: named by a node on it (walked back from one left over) */
    size_t nord = 0, head = 0;
    for (size_t i = 0; i < n; i++)
        if (!ds[i].skip && ds[i].indeg == 0)
            order[nord++] = (uint32_t)i;
    size_t nnew = 0;
    for (size_t i = 0; i < n; i++)
        nnew += !ds[i].skip;
    /* dependents of each def: found by scanning (commits are built once; n^2 only in the
     * worst case of a dense graph, bounded by the sum of after lengths per placed node) */
    {
        /* reverse edges among new defs, as index lists */
        size_t nedges = 0;
        for (size_t i = 0; i < n; i++)
            for (uint32_t m = 0; m < ds[i].ndeps; m++)
                nedges += ds[i].depdef && ds[i].depdef[m] >= 0;
        uint32_t *start = wq_malloc((n + 1) * sizeof *start);
        uint32_t *edges = nedges ? wq_malloc(nedges * sizeof *edges) : NULL;
        if (!start || (nedges && !edges)) {
            wq_free(start);
            wq_free(edges);
            goto fail;
        }
        memset(start, 0, (n + 1) * sizeof *start);
        for (size_t i = 0; i < n; i++)
            for (uint32_t m = 0; m < ds[i].ndeps; m++)
                if (ds[i].depdef[m] >= 0)
                    start[ds[i].depdef[m] + 1]++;
        for (size_t i = 0; i < n; i++)
            start[i + 1] += start[i];
        uint32_t *fill = wq_malloc((n + 1) * sizeof *fill);
        if (!fill) {
            wq_free(start);
            wq_free(edges);
            goto fail;
        }
        memcpy(fill, start, (n + 1) * sizeof *fill);
        for (size_t i = 0; i < n; i++)
            for (uint32_t m = 0; m < ds[i].ndeps; m++)
                if (ds[i].depdef[m] >= 0)
                    edges[fill[ds[i].depdef[m]]++] = (uint32_t)i;
        wq_free(fill);
        while (head < nord) {
            uint32_t u = order[head++];
            for (uint32_t e = start[u]; e < start[u + 1]; e++)
                if (--ds[edges[e]].indeg == 0)
                    order[nord++] = edges[e];
        }
        wq_free(start);
        wq_free(edges);
    }
    if (nord < nnew) {
        size_t at = 0;
        while (ds[at].skip || ds[at].indeg == 0)
            at++;
        /* walk dependencies still unplaced: after at most n steps the walk is on the cycle */
        for (size_t step = 0; step < n; step++) {
            for (uint32_t m = 0; m < ds[at].ndeps; m++) {
                int32_t di = ds[at].depdef[m];
                if (di >= 0 && ds[di].indeg > 0) {
                    at = (size_t)di;
                    break;
                }
            }
        }
        r = commit_fail(err, errlen, id, &defs[at], "is in a cycle");
        goto fail;
    }
    /* 4. the nodes, the flow's room for them and their dependencies' room for the edges */
    if (grow_nodes(f, nnew) < 0)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        if (ds[i].skip)
            continue;
        const wq_fnode_def *d = &defs[i];
        wq_fnode *x = node_new(d->queue, d->key, d->keylen);
        if (!x)
            goto unreserve;
        ds[i].node = x;
        x->flow = f;
        x->ignore_dead = d->ignore_dead;
        x->priority = d->priority;
        if ((d->payload && !(x->payload = dup_bytes(d->payload, d->paylen))) ||
            (d->grp && !(x->grp = dup_bytes(d->grp, d->grplen))))
            goto unreserve;
        x->paylen = d->payload ? d->paylen : 0;
        x->grplen = d->grp ? d->grplen : 0;
        x->state = WQ_NODE_DONE; /* placeholder: set below, outside any count */
    }
    for (size_t i = 0; i < n; i++) {
        if (ds[i].skip || ds[i].ndeps == 0)
            continue;
        wq_fnode *x = ds[i].node;
        if (!(x->deps = wq_malloc(ds[i].ndeps * sizeof *x->deps)))
            goto unreserve;
        for (uint32_t m = 0; m < ds[i].ndeps; m++) {
            wq_fnode *dep = ds[i].depdef[m] >= 0 ? ds[ds[i].depdef[m]].node : ds[i].deps[m];
            if (grow_outs(dep, 1) < 0)
                goto unreserve;
            x->deps[m] = dep;
            x->ndeps = m + 1;
            dep->nouts++; /* reserved: rolled back on failure */
        }
    }
    /* the count of blocked nodes per queue: room for each queue of a new node */
    for (size_t i = 0; i < n; i++)
        if (!ds[i].skip && !wq_keymap_put(fs->blocked, defs[i].queue, strlen(defs[i].queue), NULL))
            goto unreserve;
    /* 5. ids and indexes; nothing fails after this step */
    if (fresh && flow_insert(fs, f) < 0)
        goto unreserve;
    {
        size_t done = 0;
        for (size_t i = 0; i < n; i++) {
            if (ds[i].skip)
                continue;
            ds[i].node->id = fs->next_id + (int64_t)done;
            if (node_index(fs, ds[i].node) < 0) {
                for (size_t j = 0; j < i; j++)
                    if (!ds[j].skip)
                        node_unindex(fs, ds[j].node);
                if (fresh)
                    flow_unlink(fs, f);
                goto unreserve;
            }
            done++;
        }
        fs->next_id += (int64_t)done;
    }
    /* the edges (room reserved above), the states, the releases in dependency order */
    for (size_t i = 0; i < n; i++) {
        if (ds[i].skip)
            continue;
        wq_fnode *x = ds[i].node;
        for (uint32_t m = 0; m < x->ndeps; m++)
            x->deps[m]->nouts--;
    }
    for (size_t i = 0; i < n; i++) {
        if (ds[i].skip)
            continue;
        wq_fnode *x = ds[i].node;
        x->index = f->nnodes;
        f->nodes[f->nnodes++] = x;
        for (uint32_t m = 0; m < x->ndeps; m++)
            x->deps[m]->outs[x->deps[m]->nouts++] = x;
    }
    touch(fs, f, NULL);
    for (size_t o = 0; o < nord; o++) {
        wq_fnode *x = ds[order[o]].node;
        wq_fnode *k = killer(x);
        /* (a new dependency was placed earlier in this loop: blocked, pending or dead) */
        x->waits = 0;
        for (uint32_t m = 0; m < x->ndeps; m++)
            x->waits += unfinished(x->deps[m]);
        x->state = WQ_NODE_PENDING; /* counted as unfinished; set_state moves the counts */
        f->unfinished++;
        f->finished_at = 0;
        if (k) {
            char *e = dep_error(k);
            x->error = e;
            x->cause = k->id;
            x->finished_at = now;
            set_state(fs, x, WQ_NODE_DEAD);
            touch_new(fs, f, x);
        } else if (x->waits > 0) {
            set_state(fs, x, WQ_NODE_BLOCKED);
            touch_new(fs, f, x);
        } else {
            touch_new(fs, f, x);
            if (fs->hooks.release)
                fs->hooks.release(fs->hooks.ud, x);
        }
    }
    finish_flow_if_done(f, now);
    if (added)
        *added = nnew;
    r = 0;
    goto out;
unreserve:
    for (size_t i = 0; i < n; i++) {
        if (ds[i].skip || !ds[i].node)
            continue;
        for (uint32_t m = 0; m < ds[i].node->ndeps; m++)
            ds[i].node->deps[m]->nouts--;
        ds[i].node->ndeps = 0;
    }
fail:
    for (size_t i = 0; ds && i < n; i++)
        if (!ds[i].skip && ds[i].node) {
            node_free(ds[i].node);
            ds[i].node = NULL;
        }
    if (fresh && f) {
        f->nnodes = 0;
        flow_free(f);
    }
out:
    for (size_t i = 0; ds && i < n; i++) {
        wq_free(ds[i].deps);
        wq_free(ds[i].depdef);
    }
    wq_free(ds);
    wq_free(order);
    wq_free(mark);
    wq_keymap_free(seen);
    wq_keymap_free(oldseen);
    return r;
}

/* ---- pruning ---- */

static void flow_delete(wq_flows *fs, wq_flow *f)
{
    for (uint32_t i = 0; i < f->nnodes; i++)
        node_unindex(fs, f->nodes[i]);
    /* edges from other flows never exist: after names nodes of the same flow */
    flow_unlink(fs, f);
    if (fs->hooks.touch)
        fs->hooks.touch(fs->hooks.ud, f->id, 0, 0);
    flow_free(f);
}

size_t wq_flows_prune(wq_flows *fs, double now, size_t max)
{
    size_t n = 0;
    for (wq_flow *f = fs->head, *next; f && n < max; f = next) {
        next = f->next;
        if (f->unfinished == 0 && f->finished_at > 0 && f->finished_at + f->keep < now) {
            flow_delete(fs, f);
            n++;
        }
    }
    return n;
}

/* ---- restoring ---- */

int wq_flows_restore_flow(wq_flows *fs, const char *id, double keep, double created_at,
                          double finished_at, int cancelled)
{
    if (wq_flows_get(fs, id))
        return WQ_EINVAL;
    wq_flow *f = flow_new(id, keep, created_at);
    if (!f)
        return WQ_ENOMEM;
    f->finished_at = finished_at;
    f->cancelled = cancelled;
    if (flow_insert(fs, f) < 0) {
        flow_free(f);
        return WQ_ENOMEM;
    }
    return 0;
}

int wq_flows_restore_node(wq_flows *fs, const char *flow, int64_t id, const char *queue,
                          const char *key, size_t keylen, wq_node_state state, int ignore_dead,
                          const char *payload, size_t paylen, int32_t priority, const char *grp,
                          size_t grplen, const char *result, size_t rlen, const char *error,
                          int64_t cause, double finished_at)
{
    wq_flow *f = wq_flows_get(fs, flow);
    if (!f || id <= 0 || (unsigned)state > WQ_NODE_DEAD || wq_flows_node(fs, id))
        return WQ_EINVAL;
    wq_fnode *n = node_new(queue, key, keylen);
    if (!n || grow_nodes(f, 1) < 0)
        goto oom;
    n->id = id;
    n->flow = f;
    n->state = state;
    n->ignore_dead = ignore_dead;
    n->priority = priority;
    n->cause = cause;
    n->finished_at = finished_at;
    if ((payload && !(n->payload = dup_bytes(payload, paylen))) ||
        (grp && !(n->grp = dup_bytes(grp, grplen))) ||
        (result && !(n->result = dup_bytes(result, rlen))) ||
        (error && !(n->error = dup_bytes(error, strlen(error)))))
        goto oom;
    n->paylen = payload ? paylen : 0;
    n->grplen = grp ? grplen : 0;
    n->rlen = result ? rlen : 0;
    if (node_index(fs, n) < 0)
        goto oom;
    if (state == WQ_NODE_BLOCKED)
        count_blocked(fs, n, +1);
    n->index = f->nnodes;
    f->nodes[f->nnodes++] = n;
    if (id >= fs->next_id)
        fs->next_id = id + 1;
    return 0;
oom:
    node_free(n);
    return WQ_ENOMEM;
}

int wq_flows_restore_dep(wq_flows *fs, int64_t node, uint32_t ord, int64_t dep)
{
    wq_fnode *n = wq_flows_node(fs, node), *d = wq_flows_node(fs, dep);
    if (!n || !d || n->flow != d->flow || n == d)
        return WQ_EINVAL;
    if (ord >= n->ndeps) { /* grows to ord + 1, holes filled as rows come */
        wq_fnode **p = wq_realloc(n->deps, (ord + 1) * sizeof *p);
        if (!p)
            return WQ_ENOMEM;
        for (uint32_t i = n->ndeps; i <= ord; i++)
            p[i] = NULL;
        n->deps = p;
        n->ndeps = ord + 1;
    }
    n->deps[ord] = d;
    return 0;
}

int wq_flows_restored(wq_flows *fs, char *err, size_t errlen)
{
    for (wq_flow *f = fs->head; f; f = f->next) {
        f->unfinished = 0;
        for (uint32_t i = 0; i < f->nnodes; i++) {
            wq_fnode *n = f->nodes[i];
            uint32_t k = 0; /* rows lost in a hole of ord: dropped */
            for (uint32_t m = 0; m < n->ndeps; m++)
                if (n->deps[m])
                    n->deps[k++] = n->deps[m];
            n->ndeps = k;
            for (uint32_t m = 0; m < n->ndeps; m++) {
                if (grow_outs(n->deps[m], 1) < 0) {
                    snprintf(err, errlen, "out of memory");
                    return WQ_ENOMEM;
                }
                n->deps[m]->outs[n->deps[m]->nouts++] = n;
            }
            f->unfinished += unfinished(n);
        }
        /* counts from the states (what was written with each finish) */
        for (uint32_t i = 0; i < f->nnodes; i++) {
            wq_fnode *n = f->nodes[i];
            n->waits = 0;
            for (uint32_t m = 0; m < n->ndeps; m++)
                n->waits += unfinished(n->deps[m]);
        }
        if (f->unfinished > 0)
            f->finished_at = 0;
        else if (f->finished_at == 0)
            f->finished_at = f->created_at;
    }
    (void)err;
    (void)errlen;
    return 0;
}

/* ---- checking ---- */

int wq_flows_check(const wq_flows *fs)
{
    size_t nflows = 0;
    for (wq_flow *f = fs->head; f; f = f->next) {
        nflows++;
        if (wq_flows_get(fs, f->id) != f)
            return WQ_EINVAL;
        uint32_t unf = 0;
        for (uint32_t i = 0; i < f->nnodes; i++) {
            wq_fnode *n = f->nodes[i];
            if (n->flow != f || n->index != i || wq_flows_node(fs, n->id) != n)
                return WQ_EINVAL;
            int32_t waits = 0;
            for (uint32_t m = 0; m < n->ndeps; m++) {
                wq_fnode *d = n->deps[m];
                waits += unfinished(d);
                int found = 0;
                for (uint32_t o = 0; o < d->nouts && !found; o++)
                    found = d->outs[o] == n;
                if (!found)
                    return WQ_EINVAL;
            }
            if (waits != n->waits)
                return WQ_EINVAL;
            if (n->state == WQ_NODE_BLOCKED && (waits == 0 || killer(n)))
                return WQ_EINVAL; /* it should have been released, or died */
            if (unfinished(n) && wq_flows_live(fs, n->queue, n->key, n->keylen) != n)
                return WQ_EINVAL;
            if (n->state == WQ_NODE_BLOCKED && !wq_flows_blocks(fs, n->queue))
                return WQ_EINVAL;
            unf += unfinished(n);
        }
        if (unf != f->unfinished || (unf == 0) != (f->finished_at > 0))
            return WQ_EINVAL;
    }
    return nflows == fs->nflows ? 0 : WQ_EINVAL;
}
