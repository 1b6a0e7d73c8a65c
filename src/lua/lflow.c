/*
 * The Lua face of flows (wq.Flow, SPEC 9): wq.flow builds a flow document
 * (a Lua table until commit), f:add appends nodes, f:commit hands the JSON
 * document to the host (host/flows.c), which commits it to the runner's
 * own flow set or to the shared database. A handler of a node gets
 * job.flow (a wq.Flow bound to its flow: a commit appends) and job.deps.
 *
 * What the workers report: a node's result and how its item ended. On the
 * runner's own set the item's end is known only after done (a run re-added
 * meanwhile goes on), so the outcome is stashed on the queue during the
 * outcome and handed over once the key left the queue; on a shared
 * database the result travels with the outcome (wq_bq_node_result) and the
 * database decides.
 */
#include "lua/lflow.h"

#include "host/flows.h"
#include "lua/ljson.h"
#include "lua/lwq.h"
#include "lua/sched.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#define FLOW_MT "wq.Flow"
#define HANDLE_MT "wq.FlowHandle" /* the tables f:add returns */

/* uservalue 1 of a wq.Flow: {id =, keep =, nodes = {...}} (the document) */

static int flow_new(lua_State *L, const char *id, size_t idlen, int has_keep, double keep)
{
    lua_newuserdatauv(L, 0, 1);
    luaL_setmetatable(L, FLOW_MT);
    lua_createtable(L, 0, 3);
    if (id) {
        lua_pushlstring(L, id, idlen);
        lua_setfield(L, -2, "id");
    }
    if (has_keep) {
        lua_pushnumber(L, keep);
        lua_setfield(L, -2, "keep");
    }
    lua_newtable(L);
    lua_setfield(L, -2, "nodes");
    lua_setiuservalue(L, -2, 1);
    return 1;
}

/* The queue name at idx: a wq.Queue or a string. */
static const char *queue_name(lua_State *L, int idx, const char *fn, const char *arg)
{
    lqueue *lq = luaL_testudata(L, idx, "wq.Queue");
    if (lq)
        return lq->name;
    if (lua_type(L, idx) == LUA_TSTRING)
        return lua_tostring(L, idx);
    wq_argerror(L, fn, arg,
                lua_pushfstring(L, "queue or queue name expected, got %s", luaL_typename(L, idx)));
    return NULL;
}

/* Pushes {queue =, key =} of the dependency at idx (a handle or such a table). */
static void push_ref(lua_State *L, int idx, const char *fn)
{
    idx = lua_absindex(L, idx);
    if (!lua_istable(L, idx))
        wq_argerror(L, fn, "after",
                    lua_pushfstring(L, "node handles expected, got %s", luaL_typename(L, idx)));
    if (lua_getmetatable(L, idx)) { /* a handle f:add returned: as it is */
        luaL_getmetatable(L, HANDLE_MT);
        int handle = lua_rawequal(L, -1, -2);
        lua_pop(L, 2);
        if (handle) {
            lua_pushvalue(L, idx);
            return;
        }
    }
    lua_createtable(L, 0, 2);
    lua_getfield(L, idx, "queue");
    lua_pushstring(L, queue_name(L, -1, fn, "after"));
    lua_setfield(L, -3, "queue");
    lua_pop(L, 1);
    lua_getfield(L, idx, "key");
    size_t len;
    const char *key = wq_checkkeyarg(L, -1, fn, "after", &len);
    lua_pushlstring(L, key, len);
    lua_setfield(L, -3, "key");
    lua_pop(L, 1);
}

static const char *const add_opts[] = {"priority", "group", "after", "ignore_dead", NULL};

/*
 * Pushes the document node of (q at qi, key at ki, payload at pi, opts at oi), checking every
 * argument as fn. oi 0: none.
 */
static void push_node(lua_State *L, int qi, int ki, int pi, int oi, const char *fn)
{
    const char *qname = queue_name(L, qi, fn, "queue");
    size_t klen;
    const char *key = wq_checkkey(L, ki, fn, &klen);
    if (pi && !lua_isnoneornil(L, pi)) { /* checked now, encoded with the document */
        wq_encode_payload(L, pi, fn);
        lua_pop(L, 1);
    }
    lua_createtable(L, 0, 7);
    int node = lua_gettop(L);
    lua_pushstring(L, qname);
    lua_setfield(L, node, "queue");
    lua_pushlstring(L, key, klen);
    lua_setfield(L, node, "key");
    if (pi && !lua_isnoneornil(L, pi)) {
        lua_pushvalue(L, pi);
        lua_setfield(L, node, "payload");
    }
    if (!oi || lua_isnoneornil(L, oi))
        return;
    if (!lua_istable(L, oi))
        wq_argerror(L, fn, "opts",
                    lua_pushfstring(L, "table expected, got %s", luaL_typename(L, oi)));
    wq_checkopts(L, oi, fn, add_opts);
    if (lua_getfield(L, oi, "priority") != LUA_TNIL) {
        lua_Integer p;
        if (!lua_isinteger(L, -1) || (p = lua_tointeger(L, -1)) < INT32_MIN || p > INT32_MAX)
            wq_argexpected(L, -1, fn, "priority", "32-bit integer");
        lua_setfield(L, node, "priority");
    } else {
        lua_pop(L, 1);
    }
    if (lua_getfield(L, oi, "group") != LUA_TNIL) {
        size_t glen;
        if (lua_type(L, -1) != LUA_TSTRING || (glen = lua_rawlen(L, -1)) == 0 ||
            glen > WQ_GROUP_MAX)
            wq_argexpected(L, -1, fn, "group", "non-empty string");
        lua_setfield(L, node, "group");
    } else {
        lua_pop(L, 1);
    }
    if (lua_getfield(L, oi, "ignore_dead") != LUA_TNIL) {
        if (!lua_isboolean(L, -1))
            wq_argexpected(L, -1, fn, "ignore_dead", "boolean");
        lua_setfield(L, node, "ignore_dead");
    } else {
        lua_pop(L, 1);
    }
    if (lua_getfield(L, oi, "after") != LUA_TNIL) {
        int a = lua_gettop(L);
        if (!lua_istable(L, a))
            wq_argerror(
                L, fn, "after",
                lua_pushfstring(L, "array of node handles expected, got %s", luaL_typename(L, a)));
        lua_Integer n = luaL_len(L, a);
        if (n > 0) {
            lua_createtable(L, (int)n, 0);
            for (lua_Integer i = 1; i <= n; i++) {
                lua_geti(L, a, i);
                push_ref(L, -1, fn);
                lua_rawseti(L, -3, i);
                lua_pop(L, 1);
            }
            lua_setfield(L, node, "after");
        }
    }
    lua_pop(L, 1);
}

/* f:add(q, key [, payload [, opts]]) -> handle {queue =, key =} */
static int flow_add(lua_State *L)
{
    wq_checkself(L, FLOW_MT, "flow", "flow", "add");
    lua_settop(L, 5);
    push_node(L, 2, 3, 4, 5, "flow:add");
    int node = lua_gettop(L);
    lua_getiuservalue(L, 1, 1);
    lua_getfield(L, -1, "nodes");
    lua_pushvalue(L, node);
    lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
    lua_createtable(L, 0, 2); /* the handle */
    lua_getfield(L, node, "queue");
    lua_setfield(L, -2, "queue");
    lua_getfield(L, node, "key");
    lua_setfield(L, -2, "key");
    luaL_setmetatable(L, HANDLE_MT);
    return 1;
}

/* ---- commit ---- */

typedef struct commit_wait {
    int waiting; /* the answer comes later: a task waits for it (t), or nobody does (NULL) */
    wq_task *t;
    int answered, result; /* an answer before commit returned (the runner's own set) */
    char *text;
} commit_wait;

static void committed(void *ud, int result, const char *text)
{
    commit_wait *w = ud;
    if (!w->waiting) {
        w->answered = 1;
        w->result = result;
        w->text = strdup(text ? text : "");
        return;
    }
    wq_task *t = w->t;
    free(w);
    if (!t)
        return; /* the task went away meanwhile */
    t->wait = NULL;
    t->cancel = NULL;
    if (!lua_checkstack(t->co, 2)) {
        wq_task_interrupt(t, "flow:commit: out of memory");
        return;
    }
    lua_pushinteger(t->co, result);
    lua_pushstring(t->co, text ? text : "");
    wq_task_wake(t, 2);
}

static void commit_cancel(wq_task *t)
{
    commit_wait *w = t->wait;
    if (w)
        w->t = NULL; /* freed by committed(), which still comes */
}

/* (result, text) on top: the flow's id, or raises. */
static int commit_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    lua_Integer r = lua_tointeger(L, -2);
    const char *text = lua_tostring(L, -1);
    if (r < 0)
        return luaL_error(L, "flow:commit: %s", text && *text ? text : "failed");
    /* committed: the nodes are in; the id stays (a commit after more adds appends) */
    lua_getiuservalue(L, 1, 1);
    lua_pushvalue(L, -2);
    lua_setfield(L, -2, "id");
    lua_newtable(L);
    lua_setfield(L, -2, "nodes");
    lua_pop(L, 1);
    return 1;
}

/* A string field of t (NULL when absent), its length in *len. */
static const char *str_field(lua_State *L, int t, const char *name, size_t *len)
{
    const char *s = NULL;
    if (lua_getfield(L, t, name) == LUA_TSTRING)
        s = lua_tolstring(L, -1, len);
    lua_pop(L, 1); /* the string stays alive: t holds it */
    return s;
}

/*
 * Commits the document at doc to the runner's own flow set directly (no JSON round trip):
 * pushes the id and returns 1, or raises; 0 when the database keeps the graph.
 */
static int commit_local(lua_State *L, wq_host *h, int doc)
{
    lua_getfield(L, doc, "nodes");
    int nodes = lua_gettop(L);
    size_t n = lua_rawlen(L, nodes), nrefs = 0;
    for (size_t i = 1; i <= n; i++) {
        lua_rawgeti(L, nodes, (lua_Integer)i);
        if (lua_getfield(L, -1, "after") == LUA_TTABLE)
            nrefs += lua_rawlen(L, -1);
        lua_pop(L, 2);
    }
    /* userdata: freed by the collector whatever raises below */
    wq_fnode_def *defs = lua_newuserdatauv(L, n * sizeof *defs + 1, 0);
    wq_fref *refs = lua_newuserdatauv(L, nrefs * sizeof *refs + 1, 0);
    lua_createtable(L, (int)n, 0); /* anchors the payloads' JSON text */
    int anchor = lua_gettop(L);
    memset(defs, 0, n * sizeof *defs);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, nodes, (lua_Integer)i + 1);
        int t = lua_gettop(L);
        wq_fnode_def *d = &defs[i];
        d->queue = str_field(L, t, "queue", NULL);
        d->key = str_field(L, t, "key", &d->keylen);
        d->grp = str_field(L, t, "group", &d->grplen);
        if (lua_getfield(L, t, "priority") == LUA_TNUMBER)
            d->priority = (int32_t)lua_tointeger(L, -1);
        lua_pop(L, 1);
        d->ignore_dead = lua_getfield(L, t, "ignore_dead") == LUA_TBOOLEAN && lua_toboolean(L, -1);
        lua_pop(L, 1);
        if (lua_getfield(L, t, "payload") != LUA_TNIL) {
            int st = wq_ljson_encode(L, -1);
            if (st == LUA_ERRMEM)
                return lua_error(L);
            if (st != LUA_OK)
                return luaL_error(L, "flow:commit: %s", lua_tostring(L, -1));
            d->payload = lua_tolstring(L, -1, &d->paylen);
            lua_rawseti(L, anchor, (lua_Integer)i + 1);
        }
        lua_pop(L, 1);
        if (lua_getfield(L, t, "after") == LUA_TTABLE) {
            int a = lua_gettop(L);
            size_t m = lua_rawlen(L, a);
            d->after = refs + at;
            d->nafter = m;
            for (size_t j = 1; j <= m; j++, at++) {
                lua_rawgeti(L, a, (lua_Integer)j);
                refs[at].queue = str_field(L, -1, "queue", NULL);
                refs[at].key = str_field(L, -1, "key", &refs[at].keylen);
                lua_pop(L, 1); /* the ref table stays alive: after holds it */
            }
        }
        lua_settop(L, t - 1);
    }
    const char *id = NULL;
    if (lua_getfield(L, doc, "id") == LUA_TSTRING)
        id = lua_tostring(L, -1);
    double keep = lua_getfield(L, doc, "keep") == LUA_TNUMBER ? lua_tonumber(L, -1) : -1;
    char idout[256], err[512];
    int r = wq_host_flow_commit(h, id, keep, defs, n, idout, sizeof idout, err, sizeof err);
    if (r == WQ_BACKEND_LOCAL) {
        lua_settop(L, nodes - 1);
        return 0;
    }
    if (r < 0)
        return luaL_error(L, "flow:commit: %s", err);
    lua_settop(L, nodes - 1);
    lua_pushstring(L, idout);
    return 1;
}

static int flow_commit(lua_State *L)
{
    wq_checkself(L, FLOW_MT, "flow", "flow", "commit");
    lua_settop(L, 1);
    wq_host *h = wq_sched_of(L)->host;
    lua_getiuservalue(L, 1, 1);
    int doc = lua_gettop(L);
    lua_getfield(L, doc, "nodes");
    int empty = lua_rawlen(L, -1) == 0;
    lua_pop(L, 1);
    if (empty) { /* nothing to add */
        if (lua_getfield(L, doc, "id") == LUA_TSTRING)
            return 1;
        return luaL_error(L, "flow:commit: the flow has no nodes");
    }
    if (h->flows) { /* the runner's own set: committed now */
        commit_local(L, h, doc);
        lua_pushinteger(L, 0);
        lua_pushvalue(L, -2);
        return commit_k(L, LUA_OK, 0);
    }
    int st = wq_ljson_encode(L, doc);
    if (st == LUA_ERRMEM)
        return lua_error(L);
    if (st != LUA_OK)
        return luaL_error(L, "flow:commit: %s", lua_tostring(L, -1));
    size_t len;
    const char *text = lua_tolstring(L, -1, &len);
    commit_wait *w = calloc(1, sizeof *w);
    if (!w)
        return luaL_error(L, "flow:commit: out of memory");
    int r = wq_host_flow_add(h, text, len, committed, w);
    if (r < 0) {
        free(w);
        return luaL_error(L, "flow:commit: %s",
                          r == WQ_EIO ? "database unavailable" : wq_strerror(r));
    }
    if (w->answered) {
        lua_pushinteger(L, w->result);
        lua_pushstring(L, w->text ? w->text : "out of memory");
        free(w->text);
        free(w);
        return commit_k(L, LUA_OK, 0);
    }
    wq_task *t = wq_task_of(L);
    w->waiting = 1;
    if (!t || !lua_isyieldable(L)) { /* committed() frees w when the answer comes */
        return luaL_error(L, "flow:commit: cannot wait for the database here (call it from a "
                             "task, a handler or the main chunk)");
    }
    w->t = t;
    t->wait = w;
    return wq_task_wait(L, t, commit_cancel, 0, commit_k);
}

static int flow_index(lua_State *L)
{
    const char *k = luaL_checkstring(L, 2);
    if (strcmp(k, "id") == 0) {
        lua_getiuservalue(L, 1, 1);
        lua_getfield(L, -1, "id");
        return 1;
    }
    lua_getmetatable(L, 1);
    lua_getfield(L, -1, "methods");
    lua_getfield(L, -1, k);
    return 1;
}

/* A flow id argument: 1 to 200 bytes, no NUL (a key-like value: numbers become strings). */
static const char *check_id(lua_State *L, int idx, size_t *len)
{
    const char *id = wq_checkkeyarg(L, idx, "flow", "id", len);
    if (*len == 0 || *len > 200 || memchr(id, '\0', *len))
        wq_argerror(L, "flow", "id", "1 to 200 bytes without NUL expected");
    return id;
}

/* wq.flow([id [, opts]]) -> wq.Flow; wq.flow{id =, keep =, nodes = {...}} -> id (committed) */
static int flow_fn(lua_State *L)
{
    static const char *const flow_opts[] = {"keep", NULL};
    static const char *const whole_opts[] = {"id", "keep", "nodes", NULL};
    if (lua_istable(L, 1)) { /* the whole flow at once */
        lua_settop(L, 1);
        wq_checkopts(L, 1, "flow", whole_opts);
        const char *id = NULL;
        size_t idlen = 0;
        if (lua_getfield(L, 1, "id") != LUA_TNIL)
            id = check_id(L, -1, &idlen);
        int has_keep = lua_getfield(L, 1, "keep") != LUA_TNIL;
        double keep = has_keep ? wq_checkduration(L, -1, "flow", "keep", 1) : 0;
        flow_new(L, id, idlen, has_keep, keep);
        int f = lua_gettop(L);
        lua_getiuservalue(L, f, 1);
        lua_getfield(L, -1, "nodes");
        int out = lua_gettop(L);
        if (lua_getfield(L, 1, "nodes") != LUA_TTABLE)
            return wq_argexpected(L, -1, "flow", "nodes", "array of nodes");
        int in = lua_gettop(L);
        lua_Integer n = luaL_len(L, in);
        static const char *const node_fields[] = {"queue",       "key",      "payload", "after",
                                                  "ignore_dead", "priority", "group",   NULL};
        for (lua_Integer i = 1; i <= n; i++) {
            lua_geti(L, in, i);
            int x = lua_gettop(L);
            if (!lua_istable(L, x))
                return wq_argexpected(L, x, "flow", "nodes", "array of node tables");
            wq_checkopts(L, x, "flow", node_fields);
            lua_getfield(L, x, "queue");
            lua_getfield(L, x, "key");
            lua_getfield(L, x, "payload");
            lua_createtable(L, 0, 4); /* opts */
            static const char *const copy[] = {"after", "ignore_dead", "priority", "group"};
            for (int c = 0; c < 4; c++) {
                lua_getfield(L, x, copy[c]);
                lua_setfield(L, -2, copy[c]);
            }
            push_node(L, x + 1, x + 2, x + 3, x + 4, "flow");
            lua_rawseti(L, out, i);
            lua_settop(L, in);
        }
        lua_settop(L, f);
        lua_replace(L, 1);
        lua_settop(L, 1);
        return flow_commit(L);
    }
    const char *id = NULL;
    size_t idlen = 0;
    if (!lua_isnoneornil(L, 1))
        id = check_id(L, 1, &idlen);
    int has_keep = 0;
    double keep = 0;
    if (!lua_isnoneornil(L, 2)) {
        if (!lua_istable(L, 2))
            return wq_argerror(L, "flow", "opts",
                               lua_pushfstring(L, "table expected, got %s", luaL_typename(L, 2)));
        wq_checkopts(L, 2, "flow", flow_opts);
        if ((has_keep = lua_getfield(L, 2, "keep") != LUA_TNIL))
            keep = wq_checkduration(L, -1, "flow", "keep", 1);
    }
    return flow_new(L, id, idlen, has_keep, keep);
}

/* ---- what handlers see and report ---- */

typedef struct claim_info {
    char *flow;
    char *deps;
} claim_info;

int lflow_claimed(lqueue *lq, const wq_claimed *c)
{
    if (!c->flow)
        return 0;
    if (!lq->flow_claims && !(lq->flow_claims = wq_keymap_new()))
        return WQ_ENOMEM;
    claim_info *ci = calloc(1, sizeof *ci);
    if (!ci || !(ci->flow = strndup(c->flow, c->flowlen)) ||
        !(ci->deps = strndup(c->deps ? c->deps : "[]", c->deps ? c->depslen : 2))) {
        if (ci) {
            free(ci->flow);
            free(ci);
        }
        return WQ_ENOMEM;
    }
    int created;
    uint64_t *v = wq_keymap_put(lq->flow_claims, c->key, c->keylen, &created);
    if (!v) {
        free(ci->flow);
        free(ci->deps);
        free(ci);
        return WQ_ENOMEM;
    }
    if (!created) {
        claim_info *old = (claim_info *)(uintptr_t)*v;
        free(old->flow);
        free(old->deps);
        free(old);
    }
    *v = (uint64_t)(uintptr_t)ci;
    return 0;
}

void lflow_released(lqueue *lq, const char *key, size_t len)
{
    if (!lq->flow_claims)
        return;
    uint64_t *v = wq_keymap_get(lq->flow_claims, key, len);
    if (!v)
        return;
    claim_info *ci = (claim_info *)(uintptr_t)*v;
    free(ci->flow);
    free(ci->deps);
    free(ci);
    wq_keymap_del(lq->flow_claims, key, len);
}

void lflow_close(lqueue *lq)
{
    free(lq->flow_stash.text);
    lq->flow_stash.text = NULL;
    if (!lq->flow_claims)
        return;
    size_t pos = 0;
    const char *k;
    size_t len;
    uint64_t v;
    while (wq_keymap_next(lq->flow_claims, &pos, &k, &len, &v)) {
        claim_info *ci = (claim_info *)(uintptr_t)v;
        free(ci->flow);
        free(ci->deps);
        free(ci);
    }
    wq_keymap_free(lq->flow_claims);
    lq->flow_claims = NULL;
}

int lflow_is_node(lqueue *lq, const char *key, size_t len)
{
    if (lq->flow_claims && wq_keymap_count(lq->flow_claims) > 0)
        return wq_keymap_get(lq->flow_claims, key, len) != NULL;
    return wq_host_flow_pending(lq->host, lq->name, key, len);
}

/* Pushes job.deps from its JSON text. */
static void push_deps(lua_State *L, const char *json)
{
    if (wq_ljson_decode(L, json, strlen(json)) != LUA_OK) {
        lua_pop(L, 1);
        lua_newtable(L);
    }
}

void lflow_push_job(lua_State *L, lqueue *lq, const char *key, size_t len)
{
    int job = lua_gettop(L);
    if (lq->flow_claims) {
        uint64_t *v = wq_keymap_get(lq->flow_claims, key, len);
        if (!v)
            return;
        claim_info *ci = (claim_info *)(uintptr_t)*v;
        flow_new(L, ci->flow, strlen(ci->flow), 0, 0);
        lua_setfield(L, job, "flow");
        push_deps(L, ci->deps);
        lua_setfield(L, job, "deps");
        return;
    }
    if (!wq_host_flow_pending(lq->host, lq->name, key, len))
        return;
    wq_fnode *n = wq_flows_live(lq->host->flows, lq->name, key, len);
    flow_new(L, n->flow->id, strlen(n->flow->id), 0, 0);
    lua_setfield(L, job, "flow");
    /* job.deps straight from the graph: a table per dependency, its result decoded */
    lua_createtable(L, (int)n->ndeps, 0);
    for (uint32_t i = 0; i < n->ndeps; i++) {
        const wq_fnode *d = n->deps[i];
        lua_createtable(L, 0, 5);
        lua_pushstring(L, d->queue);
        lua_setfield(L, -2, "queue");
        lua_pushlstring(L, d->key, d->keylen);
        lua_setfield(L, -2, "key");
        lua_pushstring(L, wq_node_state_name(d->state));
        lua_setfield(L, -2, "state");
        if (d->result) {
            wq_push_payload(L, d->result, d->rlen);
            lua_setfield(L, -2, "result");
        }
        if (d->error) {
            lua_pushstring(L, d->error);
            lua_setfield(L, -2, "error");
        }
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, job, "deps");
}

static void stash(lqueue *lq, int kind, const char *text, size_t len)
{
    free(lq->flow_stash.text);
    lq->flow_stash.text = text ? strndup(text, len) : NULL;
    lq->flow_stash.len = text ? len : 0;
    lq->flow_stash.kind = kind;
}

void lflow_result(lua_State *L, lqueue *lq, const char *key, size_t len, int idx, int nres)
{
    const char *r = NULL;
    size_t rlen = 0;
    int t = nres >= 1 ? lua_type(L, idx) : LUA_TNIL;
    int pushed = 0;
    if (t == LUA_TSTRING || t == LUA_TTABLE) {
        int st = wq_ljson_encode(L, idx);
        pushed = 1;
        if (st == LUA_ERRMEM)
            lua_error(L);
        if (st == LUA_OK)
            r = lua_tolstring(L, -1, &rlen);
    }
    lflow_result_json(lq, key, len, r, rlen);
    if (pushed)
        lua_pop(L, 1);
}

void lflow_result_json(lqueue *lq, const char *key, size_t len, const char *r, size_t rlen)
{
    if (lq->flow_claims && lq->bq)
        wq_bq_node_result(lq->bq, key, len, r, rlen);
    else
        stash(lq, LFLOW_DONE, r, rlen);
}

void lflow_dead(lqueue *lq, const char *error)
{
    stash(lq, LFLOW_DEAD, error, error ? strlen(error) : 0);
}

void lflow_after_done(lqueue *lq, const char *key, size_t len)
{
    int kind = lq->flow_stash.kind;
    lq->flow_stash.kind = 0;
    /* no flow at all (the common case): not even a lookup per finished job */
    if (!lq->host->flows || wq_flows_count(lq->host->flows) == 0)
        return;
    wq_item_info info;
    if (!lq->q || wq_queue_lookup(lq->q, key, len, &info)) /* runs again: not finished */
        return;
    wq_host_flow_gone(lq->host, lq->name, key, len, kind == LFLOW_DEAD,
                      kind == LFLOW_DONE ? lq->flow_stash.text : NULL, lq->flow_stash.len,
                      kind == LFLOW_DEAD ? lq->flow_stash.text : NULL);
}

/* ---- registration ---- */

static const luaL_Reg flow_methods[] = {{"add", flow_add}, {"commit", flow_commit}, {NULL, NULL}};

void wq_lua_open_flow(lua_State *L, int wq)
{
    wq = lua_absindex(L, wq);
    luaL_newmetatable(L, HANDLE_MT);
    lua_pop(L, 1);
    luaL_newmetatable(L, FLOW_MT);
    luaL_newlib(L, flow_methods);
    lua_setfield(L, -2, "methods");
    lua_pushcfunction(L, flow_index);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
    lua_pushcfunction(L, flow_fn);
    lua_setfield(L, wq, "flow");
}
