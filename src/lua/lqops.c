/*
 * Operating a queue (SPEC 7.5). Each action exists twice: as a Lua method
 * (q:pause, q:remove, ...) and as a wq_queue_ops member the host calls for
 * HTTP requests and rows of the commands table. Both change the engine
 * queue and the Lua-side maps the same way; the observer and the store
 * calls write the changes with the next commit. The host's calls come from
 * the loop, outside any task: they run on the main thread, protected,
 * since dead letters live in a Lua table.
 */
#include "lua/lqops.h"

#include "host/flows.h"
#include "lua/lflow.h"

#include "lua/lfailures.h"
#include "lua/lgroup.h"
#include "lua/lqueue.h"
#include "lua/lremote.h"
#include "lua/lprogress.h"
#include "lua/lworker.h"
#include "lua/lwq.h"
#include "store/backend.h"

#include <lauxlib.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* An operator action's log line, the same whoever asked (Lua, CLI, HTTP). */
static void log_action(lqueue *lq, const char *key, size_t len, const char *what)
{
    char shown[WQ_SHOWN_KEY];
    wq_log_field f[] = {WQ_LOG_STR("queue", lq->name), WQ_LOG_BYTES("key", key, len),
                        WQ_LOG_STR("action", what)};
    wq_show_key(shown, key, len);
    wq_host_logf(lq->host, WQ_LOG_INFO, f, 3, "wqrun: %s: '%s' %s", lq->name, shown, what);
}

/* ---- pause ---- */

/* Pauses or resumes the engine queue; 1 changed, 0 it already was. */
static int set_paused(lqueue *lq, int paused, const char *how)
{
    if (!wq_queue_set_paused(lq->q, paused))
        return 0;
    if (!paused) { /* its getters and workers look again */
        wq_task *t;
        while ((t = wq_waitlist_pop(&lq->getters)))
            wq_task_wake(t, 0);
        lremote_ready(lq);
    }
    wq_host_log(lq->host, "wqrun: %s: %s%s", lq->name, paused ? "paused" : "resumed", how);
    if (lqueue_told(lq))
        lworker_event(lq, paused ? WQ_LIFE_PAUSED : WQ_LIFE_RESUMED, NULL, 0, 0, NULL, 0, NULL, 0);
    return 1;
}

int lqops_pause(void *q, int paused)
{
    lqueue *lq = q;
    if (!set_paused(lq, paused, ""))
        return 0;
    if (lq->bq)
        wq_bq_set_paused(lq->bq, paused);
    return 1;
}

void lqops_pause_local(struct lqueue *lq, int paused)
{
    if (lq->q)
        set_paused(lq, paused, " (for every runner)");
}

int lqops_op(void *q, const wq_bop *op, wq_bop_fn fn, void *ud)
{
    lqueue *lq = q;
    return lq->bq ? wq_bq_op(lq->bq, op, fn, ud) : WQ_BACKEND_LOCAL;
}

int lqops_paused(void *q)
{
    return wq_queue_paused(((lqueue *)q)->q);
}

int lqops_restore(lqueue *lq)
{
    if (!lq->bq)
        return 0;
    int p = wq_bq_paused(lq->bq);
    if (p < 0)
        return -1;
    wq_queue_set_paused(lq->q, p);
    return 0;
}

/* After a pause or resume the database applied: this runner follows at once (the others when
 * notified). */
static int pause_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    int paused = (int)ctx;
    lqueue_check_answer(L, paused ? "pause" : "resume");
    lqueue *lq = lua_touserdata(L, 1);
    lqops_pause_local(lq, paused);
    return 0;
}

static int pause_common(lua_State *L, int paused)
{
    const char *fn = paused ? "pause" : "resume";
    lqueue *lq = lqueue_check(L, fn);
    lua_settop(L, 1);
    wq_bop op = {.kind = paused ? WQ_BOP_PAUSE : WQ_BOP_RESUME};
    lqueue_op(L, lq, fn, &op, paused, pause_k);
    lqops_pause(lq, paused);
    return 0;
}

static int queue_pause(lua_State *L)
{
    return pause_common(L, 1);
}

static int queue_resume(lua_State *L)
{
    return pause_common(L, 0);
}

static int queue_paused(lua_State *L)
{
    lua_pushboolean(L, lqops_paused(lqueue_check(L, "paused")));
    return 1;
}

/* ---- remove and cancel ---- */

int lqops_remove(void *q, const char *key, size_t len)
{
    lqueue *lq = q;
    wq_item_info info;
    double added = ((lq->bq && lq->history > 0) || lqueue_told(lq)) &&
                           wq_queue_lookup(lq->q, key, len, &info) == 1
                       ? lqueue_enqueued_at(lq, info.id)
                       : 0;
    int r = wq_queue_remove(lq->q, key, len);
    if (r == 0) {
        lworker_history(lq, key, len, WQ_HIST_REMOVED, added, 0, lworker_failures(lq, key, len),
                        NULL, 0, NULL);
        lworker_forget(lq, key, len); /* gone as if never added: no failure count either */
        log_action(lq, key, len, "removed");
        if (lq->host->flows && lflow_is_node(lq, key, len)) { /* its flow's node is dead */
            lflow_dead(lq, "removed");
            lflow_after_done(lq, key, len);
        }
    } else if (r == WQ_ENOENT && wq_host_flow_remove_blocked(lq->host, lq->name, key, len)) {
        log_action(lq, key, len, "removed (a flow's node that was blocked)");
        r = 0;
    }
    return r;
}

int lqops_cancel(void *q, const char *key, size_t len)
{
    int r = lworker_cancel(q, key, len);
    return r == WQ_EBUSY && ((lqueue *)q)->remote ? lremote_cancel(q, key, len) : r;
}

/* After a remove or cancel the database applied: true when it was done. */
static int keyed_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    lqueue_check_answer(L, (const char *)ctx);
    int ok = lua_tointeger(L, -2) == 0;
    lqueue *lq = lqueue_check(L, (const char *)ctx);
    if (ok && strcmp((const char *)ctx, "remove") == 0 && lqueue_told(lq)) {
        size_t len; /* removed from the database: its event (the runner's engine had none) */
        const char *key = lua_tolstring(L, 2, &len);
        lworker_event(lq, WQ_LIFE_REMOVED, key, len, 0, NULL, 0, NULL, 0);
    }
    lua_pushboolean(L, ok);
    return 1;
}

static int queue_remove(lua_State *L)
{
    lqueue *lq = lqueue_check(L, "remove");
    size_t len;
    const char *key = wq_checkkey(L, 2, "remove", &len);
    wq_bop op = {.kind = WQ_BOP_REMOVE, .key = key, .keylen = len};
    lqueue_op(L, lq, "remove", &op, (lua_KContext) "remove", keyed_k);
    lua_pushboolean(L, lqops_remove(lq, key, len) == 0);
    return 1;
}

static int queue_cancel(lua_State *L)
{
    lqueue *lq = lqueue_check(L, "cancel");
    size_t len;
    const char *key = wq_checkkey(L, 2, "cancel", &len);
    wq_bop op = {.kind = WQ_BOP_CANCEL, .key = key, .keylen = len};
    lqueue_op(L, lq, "cancel", &op, (lua_KContext) "cancel", keyed_k);
    lua_pushboolean(L, lqops_cancel(lq, key, len) == 0);
    return 1;
}

/* ---- dead letters ---- */

int lqops_retry_dead(lua_State *L, lqueue *lq, const char *key, size_t len)
{
    lworker_push_dead(L, lq);
    int dead = lua_gettop(L);
    lua_pushlstring(L, key, len);
    if (lua_rawget(L, dead) == LUA_TNIL) {
        lua_settop(L, dead - 1);
        return 0;
    }
    lua_getfield(L, -1, "json");
    size_t jlen;
    const char *json = lua_tolstring(L, -1, &jlen);
    wq_add_opts o = {.payload = json, .paylen = jlen, .set_payload = json != NULL};
    if (lq->group_of_ref != LUA_NOREF) { /* a retried key is a new item: group_of names its group */
        lua_pushlstring(L, key, len);
        int k = lua_gettop(L);
        if (json)
            wq_push_payload(L, json, jlen);
        else
            lua_pushnil(L);
        lgroup_resolve(L, lq, k, k + 1, "retry_dead", &o);
    }
    lworker_forget(lq, key, len);
    int r = wq_queue_add(lq->q, key, len, &o);
    if (r < 0 && r != WQ_ESHUTDOWN)
        lqueue_raise(L, "retry_dead", r);
    if (r == WQ_ESHUTDOWN) {
        lua_settop(L, dead - 1);
        return 0;
    }
    lqueue_note_add(lq);
    wq_host_flow_retried(lq->host, lq->name, key, len); /* a flow's node runs again */
    lua_pushlstring(L, key, len);
    lua_pushnil(L);
    lua_rawset(L, dead);
    lq->ndead--;
    if (lq->bq)
        wq_bq_undead(lq->bq, key, len);
    lua_settop(L, dead - 1);
    log_action(lq, key, len, "retried (dead letter re-queued)");
    return 1;
}

struct retry_args {
    lqueue *lq;
    const char *key; /* NULL: all */
    size_t len;
    int n;
};

static int retry_p(lua_State *L)
{
    struct retry_args *a = lua_touserdata(L, 1);
    if (a->key) {
        a->n = lqops_retry_dead(L, a->lq, a->key, a->len);
        return 0;
    }
    /* The keys first: retrying changes the table being walked. */
    lworker_push_dead(L, a->lq);
    lua_newtable(L);
    int n = 0;
    lua_pushnil(L);
    while (lua_next(L, -3)) {
        lua_pop(L, 1);
        lua_pushvalue(L, -1);
        lua_rawseti(L, -3, ++n);
    }
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, -1, i);
        size_t len;
        const char *key = lua_tolstring(L, -1, &len);
        a->n += lqops_retry_dead(L, a->lq, key, len);
        lua_pop(L, 1);
    }
    return 0;
}

int lqops_retry(void *q, const char *key, size_t len)
{
    lqueue *lq = q;
    struct retry_args a = {lq, key, len, 0};
    lua_State *L = lq->L;
    lua_pushcfunction(L, retry_p);
    lua_pushlightuserdata(L, &a);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
        lua_pop(L, 1);
        return a.n ? a.n : WQ_ENOMEM;
    }
    return a.n;
}

static int purge_p(lua_State *L)
{
    lqueue *lq = lua_touserdata(L, 1);
    int *n = lua_touserdata(L, 2);
    lworker_push_dead(L, lq);
    lua_newtable(L); /* first: it may raise, and then nothing changed */
    lua_pushnil(L);
    while (lua_next(L, -3)) {
        lua_pop(L, 1);
        size_t len;
        const char *key = lua_tolstring(L, -1, &len);
        if (lq->bq)
            wq_bq_undead(lq->bq, key, len);
        ++*n;
    }
    lua_rawseti(L, LUA_REGISTRYINDEX, lq->dead_ref);
    lq->ndead = 0;
    if (*n > 0) {
        wq_log_field f[] = {WQ_LOG_STR("queue", lq->name), WQ_LOG_NUM("purged", *n)};
        wq_host_logf(lq->host, WQ_LOG_INFO, f, 2, "wqrun: %s: %d dead letter(s) purged", lq->name,
                     *n);
    }
    return 0;
}

int lqops_purge_dead(void *q)
{
    lqueue *lq = q;
    int n = 0;
    lua_State *L = lq->L;
    lua_pushcfunction(L, purge_p);
    lua_pushlightuserdata(L, lq);
    lua_pushlightuserdata(L, &n);
    if (lua_pcall(L, 2, 0, 0) != LUA_OK) {
        lua_pop(L, 1);
        return WQ_ENOMEM;
    }
    return n;
}

static int purge_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    lua_pushinteger(L, lqueue_check_answer(L, "purge_dead"));
    return 1;
}

static int queue_purge_dead(lua_State *L)
{
    lqueue *lq = lqueue_check(L, "purge_dead");
    wq_bop op = {.kind = WQ_BOP_PURGE_DEAD};
    lqueue_op(L, lq, "purge_dead", &op, 0, purge_k);
    int n = 0;
    lua_settop(L, 1);
    lua_pushcfunction(L, purge_p);
    lua_pushlightuserdata(L, lq);
    lua_pushlightuserdata(L, &n);
    lua_call(L, 2, 0);
    lua_pushinteger(L, n);
    return 1;
}

/* The dead letter of key from its entry on top of the stack, leaving its five fields above it
 * (they keep the strings alive). */
static void read_dead(lua_State *L, const char *key, size_t len, wq_dead_view *d)
{
    memset(d, 0, sizeof *d);
    d->key = key;
    d->keylen = len;
    lua_getfield(L, -1, "json");
    d->payload = lua_tolstring(L, -1, &d->paylen);
    lua_getfield(L, -2, "error");
    d->error = lua_tostring(L, -1);
    lua_getfield(L, -3, "attempts");
    d->attempts = lua_tointeger(L, -1);
    lua_getfield(L, -4, "failed_at");
    d->failed_at = lua_tonumber(L, -1);
    lua_getfield(L, -5, "traceback");
    d->traceback = lua_tostring(L, -1);
}

/* One dead letter, pointing into the dead table's strings (alive while it holds them). */
struct dead_entry {
    wq_dead_view v;
};

static int cmp_dead(const void *a, const void *b)
{
    const wq_dead_view *x = &((const struct dead_entry *)a)->v;
    const wq_dead_view *y = &((const struct dead_entry *)b)->v;
    if (x->failed_at != y->failed_at)
        return x->failed_at < y->failed_at ? -1 : 1;
    size_t n = x->keylen < y->keylen ? x->keylen : y->keylen;
    int c = n ? memcmp(x->key, y->key, n) : 0;
    return c ? c : (x->keylen > y->keylen) - (x->keylen < y->keylen);
}

struct dead_args {
    lqueue *lq;
    void (*fn)(void *ud, const wq_dead_view *d);
    void *ud;
    struct dead_entry *v;
    int n;
};

static int dead_p(lua_State *L)
{
    struct dead_args *a = lua_touserdata(L, 1);
    lworker_push_dead(L, a->lq);
    int dead = lua_gettop(L);
    size_t cap = a->lq->ndead ? (size_t)a->lq->ndead : 1;
    a->v = malloc(cap * sizeof *a->v);
    if (!a->v)
        return luaL_error(L, "out of memory");
    lua_pushnil(L);
    while (lua_next(L, dead)) {
        if ((size_t)a->n == cap) {
            struct dead_entry *nv = realloc(a->v, 2 * cap * sizeof *nv);
            if (!nv)
                return luaL_error(L, "out of memory");
            a->v = nv;
            cap *= 2;
        }
        wq_dead_view *d = &a->v[a->n++].v;
        size_t len;
        const char *key = lua_tolstring(L, -2, &len);
        read_dead(L, key, len, d);
        lua_pop(L, 6); /* the strings stay alive in the table */
    }
    if (a->n)
        qsort(a->v, (size_t)a->n, sizeof *a->v, cmp_dead);
    for (int i = 0; i < a->n; i++)
        a->fn(a->ud, &a->v[i].v);
    return 0;
}

int lqops_dead(void *q, void (*fn)(void *ud, const wq_dead_view *d), void *ud)
{
    lqueue *lq = q;
    struct dead_args a = {lq, fn, ud, NULL, 0};
    lua_State *L = lq->L;
    lua_pushcfunction(L, dead_p);
    lua_pushlightuserdata(L, &a);
    int st = lua_pcall(L, 1, 0, 0);
    free(a.v);
    if (st != LUA_OK) {
        lua_pop(L, 1);
        return WQ_ENOMEM;
    }
    return a.n;
}

/* ---- listing pending items ---- */

static int cmp_key(const char *a, size_t alen, const char *b, size_t blen)
{
    size_t n = alen < blen ? alen : blen;
    int c = n ? memcmp(a, b, n) : 0;
    return c ? c : (alen > blen) - (alen < blen);
}

static const char *state_of(unsigned st)
{
    if (st & WQ_ST_PROCESSING)
        return "processing";
    if (st & WQ_ST_DIRTY)
        return "queued";
    return "waiting";
}

/*
 * The first limit keys after after_key: a max-heap of the smallest keys
 * seen, so a page of a deep queue costs one walk and O(limit) memory.
 */
struct select {
    const wq_items_query *qry;
    wq_item_info *heap;
    size_t n, cap;
    int nomem;
};

static int heap_less(const wq_item_info *a, const wq_item_info *b)
{
    return cmp_key(a->key, a->keylen, b->key, b->keylen) < 0;
}

static void sift_up(wq_item_info *h, size_t i)
{
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&h[p], &h[i]))
            break;
        wq_item_info t = h[p];
        h[p] = h[i];
        h[i] = t;
        i = p;
    }
}

static void sift_down(wq_item_info *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && heap_less(&h[m], &h[l]))
            m = l;
        if (r < n && heap_less(&h[m], &h[r]))
            m = r;
        if (m == i)
            return;
        wq_item_info t = h[m];
        h[m] = h[i];
        h[i] = t;
        i = m;
    }
}

static int select_visit(void *ud, const wq_item_info *info)
{
    struct select *s = ud;
    const wq_items_query *qry = s->qry;
    if (qry->state && strcmp(qry->state, state_of(info->state)) != 0)
        return 0;
    if (qry->after_key && cmp_key(info->key, info->keylen, qry->after_key, qry->after_len) <= 0)
        return 0;
    if (s->n < qry->limit) {
        if (s->n == s->cap) {
            size_t ncap = s->cap ? s->cap * 2 : 64;
            if (ncap > qry->limit)
                ncap = qry->limit;
            wq_item_info *nh = realloc(s->heap, ncap * sizeof *nh);
            if (!nh) {
                s->nomem = 1;
                return 1;
            }
            s->heap = nh;
            s->cap = ncap;
        }
        s->heap[s->n] = *info;
        sift_up(s->heap, s->n++);
    } else if (heap_less(info, &s->heap[0])) {
        s->heap[0] = *info;
        sift_down(s->heap, s->n, 0);
    }
    return 0;
}

static int cmp_info(const void *a, const void *b)
{
    const wq_item_info *x = a, *y = b;
    return cmp_key(x->key, x->keylen, y->key, y->keylen);
}

/* The selected records in key order in *out (malloc'd, the caller frees); the count or WQ_ENOMEM.
 */
static int select_items(lqueue *lq, const wq_items_query *qry, wq_item_info **out)
{
    struct select s = {qry, NULL, 0, 0, 0};
    *out = NULL;
    if (qry->limit == 0)
        return 0;
    wq_queue_foreach(lq->q, select_visit, &s);
    if (s.nomem) {
        free(s.heap);
        return WQ_ENOMEM;
    }
    if (s.n)
        qsort(s.heap, s.n, sizeof *s.heap, cmp_info);
    *out = s.heap;
    return (int)s.n;
}

static void fill_view(lqueue *lq, const wq_item_info *info, wq_item_view *v)
{
    memset(v, 0, sizeof *v);
    v->key = info->key;
    v->keylen = info->keylen;
    v->payload = info->payload;
    v->paylen = info->paylen;
    v->state = state_of(info->state);
    v->priority = info->priority;
    if (info->state & WQ_ST_WAITING)
        v->ready_at = wq_host_unix(lq->host, info->ready_at);
    v->attempt = lfail_count(lq, info->key, info->keylen) + 1;
    v->last_error = lfail_last_error(lq, info->key, info->keylen);
    v->group = info->group;
    v->grouplen = info->grouplen;
    if (lq->progress && (info->state & WQ_ST_PROCESSING))
        v->progress = lprogress_get(lq, info->key, info->keylen, &v->progresslen);
}

int lqops_history(void *q, int64_t before, size_t limit,
                  void (*fn)(void *ud, const wq_history_view *v), void *ud)
{
    lqueue *lq = q;
    if (!lq->bq) /* in memory: nothing outlives the run, no history is kept */
        return WQ_ENOENT;
    return wq_bq_history_list(lq->bq, before, limit, fn, ud);
}

int lqops_items(void *q, const wq_items_query *qry, void (*fn)(void *ud, const wq_item_view *it),
                void *ud)
{
    lqueue *lq = q;
    wq_item_info *sel;
    int n = select_items(lq, qry, &sel);
    for (int i = 0; i < n; i++) {
        wq_item_view v;
        fill_view(lq, &sel[i], &v);
        fn(ud, &v);
    }
    free(sel);
    return n;
}

struct build {
    lqueue *lq;
    wq_item_info *sel;
    int n;
};

/*
 * Calls f(arg) protected, pushing its one result (or the error): the engine's records and the
 * done memory must not change while they are read, so no collection runs (whose finalizers
 * could add or remove keys) until the answer is built. The pcall status.
 */
static int call_no_gc(lua_State *L, lua_CFunction f, void *arg)
{
    int gc = lua_gc(L, LUA_GCISRUNNING);
    lua_gc(L, LUA_GCSTOP);
    lua_pushcfunction(L, f);
    lua_pushlightuserdata(L, arg);
    int st = lua_pcall(L, 1, 1, 0);
    if (gc)
        lua_gc(L, LUA_GCRESTART);
    return st;
}

/* Pushes the q:items() entry of v. */
static void push_item(lua_State *L, const wq_item_view *v)
{
    lua_createtable(L, 0, 8);
    lua_pushlstring(L, v->key, v->keylen);
    lua_setfield(L, -2, "key");
    if (v->payload) {
        wq_push_payload(L, v->payload, v->paylen);
        lua_setfield(L, -2, "payload");
    }
    lua_pushstring(L, v->state);
    lua_setfield(L, -2, "state");
    lua_pushinteger(L, v->priority);
    lua_setfield(L, -2, "priority");
    if (v->group) {
        lua_pushlstring(L, v->group, v->grouplen);
        lua_setfield(L, -2, "group");
    }
    if (v->ready_at > 0) {
        lua_pushnumber(L, v->ready_at);
        lua_setfield(L, -2, "ready_at");
    }
    lua_pushinteger(L, v->attempt);
    lua_setfield(L, -2, "attempt");
    if (v->last_error) {
        lua_pushstring(L, v->last_error);
        lua_setfield(L, -2, "last_error");
    }
    if (v->progress) {
        wq_push_payload(L, v->progress, v->progresslen);
        lua_setfield(L, -2, "progress");
    }
}

/* Pushes the array of q:items() entries for the selected records. */
static int build_p(lua_State *L)
{
    const struct build *b = lua_touserdata(L, 1);
    lua_createtable(L, b->n, 0);
    int out = lua_gettop(L);
    for (int i = 0; i < b->n; i++) {
        wq_item_view v;
        fill_view(b->lq, &b->sel[i], &v);
        push_item(L, &v);
        lua_rawseti(L, out, i + 1);
    }
    return 1;
}

static int items_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    lqueue_check_answer(L, "items");
    lqueue_push_answer(L, "items");
    return 1;
}

static const char *const item_opts[] = {"state", "limit", "after_key", NULL};

/* q:items{state=, limit=, after_key=} -> array of {key=, payload=, state=, priority=, ...} */
static int queue_items(lua_State *L)
{
    lqueue *lq = lqueue_check(L, "items");
    wq_items_query qry = {NULL, (size_t)-1, NULL, 0};
    if (!lua_isnoneornil(L, 2)) {
        if (!lua_istable(L, 2))
            wq_argerror(L, "items", "opts",
                        lua_pushfstring(L, "table expected, got %s", luaL_typename(L, 2)));
        lua_settop(L, 2);
        wq_checkopts(L, 2, "items", item_opts);
        if (lua_getfield(L, 2, "state") != LUA_TNIL) { /* 3 */
            const char *st = lua_type(L, 3) == LUA_TSTRING ? lua_tostring(L, 3) : "";
            if (strcmp(st, "queued") != 0 && strcmp(st, "processing") != 0 &&
                strcmp(st, "waiting") != 0)
                wq_argexpected(L, 3, "items", "state", "'queued', 'processing' or 'waiting'");
            qry.state = st;
        }
        if (lua_getfield(L, 2, "limit") != LUA_TNIL) { /* 4 */
            if (!lua_isinteger(L, 4) || lua_tointeger(L, 4) <= 0)
                wq_argexpected(L, 4, "items", "limit", "integer > 0");
            qry.limit = (size_t)lua_tointeger(L, 4);
        }
        if (lua_getfield(L, 2, "after_key") != LUA_TNIL) /* 5 */
            qry.after_key = wq_checkkeyarg(L, 5, "items", "after_key", &qry.after_len);
    }
    wq_bop op = {.kind = WQ_BOP_ITEMS,
                 .state = qry.state,
                 .limit = qry.limit == (size_t)-1 ? (size_t)INT64_MAX : qry.limit,
                 .after_key = qry.after_key,
                 .after_len = qry.after_len};
    lqueue_op(L, lq, "items", &op, 0, items_k);
    struct build b = {lq, NULL, 0};
    b.n = select_items(lq, &qry, &b.sel);
    if (b.n < 0)
        return luaL_error(L, "items: out of memory");
    int st = call_no_gc(L, build_p, &b);
    free(b.sel);
    if (st != LUA_OK)
        return lua_error(L);
    return 1;
}

/* ---- one key: q:item(key) ---- */

/* Whether v's dead letter came after its done memory. */
static int d_later(const wq_key_view *v)
{
    return v->dead.failed_at >= v->finished_at;
}

/*
 * What lq knows of key, in *v: 1, or 0 nothing. Pushes what keeps v's strings alive (the caller
 * drops it). Pending wins; else the later of a dead letter and a done memory.
 */
/* A finished flow node of key (its results are kept with the flow, whatever keep_done says;
 * a node dead of a dependency has no dead letter): 1 with v filled, else 0. */
static int flow_finished(lqueue *lq, const char *key, size_t len, wq_key_view *v)
{
    wq_fnode *n = wq_host_flow_last(lq->host, lq->name, key, len);
    if (n && n->state == WQ_NODE_DONE) {
        v->state = "done";
        v->finished_at = n->finished_at;
        v->result = n->result;
        v->rlen = n->rlen;
        return 1;
    }
    if (n && n->state == WQ_NODE_DEAD) {
        v->state = "dead";
        v->dead.key = key;
        v->dead.keylen = len;
        v->dead.payload = n->payload;
        v->dead.paylen = n->paylen;
        v->dead.error = n->error;
        v->dead.failed_at = n->finished_at;
        return 1;
    }
    return 0;
}

static int lookup(lua_State *L, lqueue *lq, const char *key, size_t len, wq_key_view *v)
{
    memset(v, 0, sizeof *v);
    wq_item_info info;
    if (wq_queue_lookup(lq->q, key, len, &info)) {
        fill_view(lq, &info, &v->item);
        v->state = v->item.state;
        return 1;
    }
    wq_fnode *n = wq_host_flow_blocked(lq->host, lq->name, key, len);
    if (n) {
        v->state = "blocked";
        v->key = key;
        v->keylen = len;
        v->flow = n->flow->id;
        v->waits = n->waits;
        v->payload = n->payload;
        v->paylen = n->paylen;
        v->priority = n->priority;
        return 1;
    }
    int dead = 0, done = lqueue_done_lookup(lq, key, len, &v->finished_at, &v->result, &v->rlen);
    lworker_push_dead(L, lq);
    lua_pushlstring(L, key, len);
    if (lua_rawget(L, -2) == LUA_TTABLE) {
        read_dead(L, key, len, &v->dead);
        dead = 1;
    }
    if (dead && (!done || d_later(v)))
        v->state = "dead";
    else if (done)
        v->state = "done";
    else if (!flow_finished(lq, key, len, v))
        return 0;
    v->key = key;
    v->keylen = len;
    return 1;
}

/* Pushes the q:item() table of v. */
static void push_key_view(lua_State *L, const wq_key_view *v)
{
    if (v->item.key) {
        push_item(L, &v->item);
        return;
    }
    lua_createtable(L, 0, 6);
    lua_pushlstring(L, v->key, v->keylen);
    lua_setfield(L, -2, "key");
    lua_pushstring(L, v->state);
    lua_setfield(L, -2, "state");
    if (strcmp(v->state, "blocked") == 0) {
        lua_pushstring(L, v->flow);
        lua_setfield(L, -2, "flow");
        lua_pushinteger(L, v->waits);
        lua_setfield(L, -2, "waits");
        lua_pushinteger(L, v->priority);
        lua_setfield(L, -2, "priority");
        if (v->payload) {
            wq_push_payload(L, v->payload, v->paylen);
            lua_setfield(L, -2, "payload");
        }
        return;
    }
    if (strcmp(v->state, "done") == 0) {
        lua_pushnumber(L, v->finished_at);
        lua_setfield(L, -2, "finished_at");
        if (v->result) {
            wq_push_payload(L, v->result, v->rlen);
            lua_setfield(L, -2, "result");
        }
        return;
    }
    if (v->dead.payload) {
        wq_push_payload(L, v->dead.payload, v->dead.paylen);
        lua_setfield(L, -2, "payload");
    }
    if (v->dead.error) {
        lua_pushstring(L, v->dead.error);
        lua_setfield(L, -2, "error");
    }
    lua_pushinteger(L, v->dead.attempts);
    lua_setfield(L, -2, "attempts");
    lua_pushnumber(L, v->dead.failed_at);
    lua_setfield(L, -2, "failed_at");
    if (v->dead.traceback) {
        lua_pushstring(L, v->dead.traceback);
        lua_setfield(L, -2, "traceback");
    }
}

struct item_args {
    lqueue *lq;
    const char *key;
    size_t len;
    void (*fn)(void *ud, const wq_key_view *v);
    void *ud;
    int found;
};

/* Calls a->fn with what the queue knows of the key; without fn, returns its q:item() value. */
static int item_p(lua_State *L)
{
    struct item_args *a = lua_touserdata(L, 1);
    wq_key_view v;
    a->found = lookup(L, a->lq, a->key, a->len, &v);
    if (a->found && a->fn)
        a->fn(a->ud, &v);
    else if (a->found)
        push_key_view(L, &v);
    else
        lua_pushnil(L);
    return 1;
}

int lqops_item(void *q, const char *key, size_t len, void (*fn)(void *ud, const wq_key_view *v),
               void *ud)
{
    lqueue *lq = q;
    struct item_args a = {lq, key, len, fn, ud, 0};
    lua_State *L = lq->L;
    lua_pushcfunction(L, item_p);
    lua_pushlightuserdata(L, &a);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
        lua_pop(L, 1);
        return WQ_ENOMEM;
    }
    return a.found;
}

static int item_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    if (lqueue_check_answer(L, "item") <= 0) {
        lua_pushnil(L);
        return 1;
    }
    lqueue_push_answer(L, "item");
    return 1;
}

/* q:item(key) -> {key=, state=, ...} (the fields of its state) or nil */
static int queue_item(lua_State *L)
{
    lqueue *lq = lqueue_check(L, "item");
    size_t len;
    const char *key = wq_checkkey(L, 2, "item", &len);
    lua_settop(L, 2);
    wq_bop op = {.kind = WQ_BOP_ITEM, .key = key, .keylen = len};
    lqueue_op(L, lq, "item", &op, 0, item_k);
    struct item_args a = {lq, key, len, NULL, NULL, 0};
    if (call_no_gc(L, item_p, &a) != LUA_OK)
        return lua_error(L);
    /* Unknown to the engine: its last run, where the history is the file's (asked only where the
     * caller can wait, as q:item never had to before the history). */
    if (!a.found && lq->bq && lq->history > 0 && wq_task_of(L) && lua_isyieldable(L)) {
        op.kind = WQ_BOP_LAST_RUN;
        lua_pop(L, 1);
        lqueue_op(L, lq, "item", &op, 0, item_k);
        lua_pushnil(L);
    }
    return 1;
}

const luaL_Reg lqops_methods[] = {
    {"pause", queue_pause},           {"resume", queue_resume}, {"paused", queue_paused},
    {"remove", queue_remove},         {"cancel", queue_cancel}, {"items", queue_items},
    {"purge_dead", queue_purge_dead}, {"item", queue_item},     {NULL, NULL}};
