/*
 * wq.queue: the Lua face of an engine queue, and the job-runner policy on
 * top of it. A queue with a handler runs a pool of worker tasks; each
 * worker loops get -> handler -> outcome -> done in C, using continuations
 * so the handler may wait (sleep, exec, get on another queue). Outcomes:
 * success forgets the key's failures; an error counts a failure and
 * retries through the limiter until max_retries, then dead-letters the
 * key; wq.requeue(s) schedules the key again without counting a failure.
 */
#include "lua/lqueue.h"

#include "lua/lwq.h"
#include "store/store.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#define WORKER_BUDGET 64 /* jobs a worker runs before letting other tasks in */

/* self of method fn: a wq.Queue (a q.fn(...) call instead of q:fn(...) is the usual slip). */
static lqueue *check_queue(lua_State *L, const char *fn)
{
    lqueue *lq = luaL_testudata(L, 1, "wq.Queue");
    if (!lq)
        luaL_error(L, "q:%s: bad argument 'self' (queue expected, got %s; call it as q:%s(...))",
                   fn, luaL_typename(L, 1), fn);
    if (!lq->q)
        luaL_error(L, "q:%s: queue is closed", fn);
    return lq;
}

lqueue *lqueue_find(wq_host *h, const char *name)
{
    for (int i = 0; i < h->nqueues; i++)
        if (strcmp(h->queues[i]->name, name) == 0)
            return h->queues[i];
    return NULL;
}

static int raise_engine(lua_State *L, const char *fn, int err)
{
    if (err == WQ_E2BIG)
        return wq_argerror(L, fn, "key", "key or payload too large");
    return luaL_error(L, "%s: %s", fn, wq_strerror(err));
}

/* ---- observer: wakes waiters and feeds the store ---- */

static void wake_all(wq_waitlist *w)
{
    wq_task *t;
    while ((t = wq_waitlist_pop(w)))
        wq_task_wake(t, 0);
}

static void observe(void *ud, wq_queue *q, wq_event ev, const char *key, size_t len)
{
    (void)q;
    lqueue *lq = ud;
    switch (ev) {
    case WQ_EV_QUEUED: {
        wq_task *t = wq_waitlist_pop(&lq->getters);
        if (t)
            wq_task_wake(t, 0);
        break;
    }
    case WQ_EV_IDLE: wake_all(&lq->drainers); break;
    case WQ_EV_SHUTDOWN:
        wake_all(&lq->getters);
        wake_all(&lq->drainers);
        break;
    default: break;
    }
    if (lq->sq && key)
        wq_store_touch(lq->sq, ev, key, len);
}

/* ---- failure bookkeeping ---- */

static int64_t failure_count(lqueue *lq, const char *key, size_t len)
{
    uint64_t *v = wq_keymap_get(lq->failures, key, len);
    return v ? (int64_t)*v : 0;
}

static void forget(lqueue *lq, const char *key, size_t len)
{
    wq_limiter_forget(lq->limiter, key, len);
    if (wq_keymap_del(lq->failures, key, len) && lq->sq)
        wq_store_failures(lq->sq, key, len, 0, NULL);
}

/* Pushes the queue's dead-letter table. */
static void push_dead(lua_State *L, lqueue *lq)
{
    lua_rawgeti(L, LUA_REGISTRYINDEX, lq->dead_ref);
}

static void add_dead(lua_State *L, lqueue *lq, const char *key, size_t len, const char *json,
                     size_t jlen, const char *err, const char *tb, int64_t attempts, double at)
{
    push_dead(L, lq);
    lua_pushlstring(L, key, len);
    if (lua_rawget(L, -2) == LUA_TNIL)
        lq->ndead++;
    lua_pop(L, 1);
    lua_pushlstring(L, key, len);
    lua_createtable(L, 0, 5);
    if (json) {
        lua_pushlstring(L, json, jlen);
        lua_setfield(L, -2, "json");
    }
    lua_pushstring(L, err);
    lua_setfield(L, -2, "error");
    if (tb) {
        lua_pushstring(L, tb);
        lua_setfield(L, -2, "traceback");
    }
    lua_pushinteger(L, attempts);
    lua_setfield(L, -2, "attempts");
    lua_pushnumber(L, at);
    lua_setfield(L, -2, "failed_at");
    lua_rawset(L, -3);
    lua_pop(L, 1);
}

/*
 * A failed run of key: retry through the limiter while the failure count
 * is below max_retries, else dead-letter it. The caller calls done after.
 */
/* A key for a log line: at most 64 bytes, control and non-ASCII bytes as \xNN. */
static void show_key(char out[4 * 64 + 4], const char *key, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    char *o = out;
    for (size_t i = 0; i < len && i < 64; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c >= 0x20 && c < 0x7f && c != '\\') {
            *o++ = (char)c;
        } else {
            *o++ = '\\';
            *o++ = 'x';
            *o++ = hex[c >> 4];
            *o++ = hex[c & 15];
        }
    }
    if (len > 64) {
        memcpy(o, "...", 3);
        o += 3;
    }
    *o = '\0';
}

static void record_failure(lua_State *L, lqueue *lq, const char *key, size_t len, const char *json,
                           size_t jlen, const char *err, const char *tb)
{
    int64_t count = failure_count(lq, key, len);
    lq->nfailures++;
    if (count < lq->max_retries) {
        uint64_t *v = wq_keymap_put(lq->failures, key, len, NULL);
        if (!v)
            luaL_error(L, "out of memory");
        *v = (uint64_t)count + 1;
        if (lq->sq)
            wq_store_failures(lq->sq, key, len, count + 1, err);
        int64_t delay;
        if (wq_limiter_when(lq->limiter, key, len, &delay) < 0)
            luaL_error(L, "out of memory");
        int r = wq_queue_add_after(lq->q, key, len, delay, NULL);
        if (r < 0 && r != WQ_ESHUTDOWN)
            raise_engine(L, "retry", r);
        return;
    }
    forget(lq, key, len);
    double at = wq_host_unix(lq->host, wq_host_now(lq->host));
    add_dead(L, lq, key, len, json, jlen, err, tb, count + 1, at);
    if (lq->sq)
        wq_store_dead(lq->sq, key, len, json, jlen, err, count + 1, at);
    char shown[4 * 64 + 4];
    show_key(shown, key, len);
    wq_host_log(lq->host, "wqrun: %s: '%s' failed %lld times, dead-lettered: %s", lq->name, shown,
                (long long)(count + 1), err);
}

static void done_key(lua_State *L, lqueue *lq, const char *key, size_t len)
{
    int r = wq_queue_done(lq->q, key, len);
    if (r == 0)
        lq->ndone++;
    else if (r != WQ_ENOENT)
        raise_engine(L, "done", r);
}

/* ---- workers ---- */

/* Worker stack: [1] queue, [2] key, [3] payload JSON or nil, [4] msgh, [5] handler/results. */
enum { PH_GET, PH_RAN };
#define W_KEY 2
#define W_JSON 3
#define W_MSGH 4
#define W_RES 5

static int msgh(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    if (!msg) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
            msg = lua_tostring(L, -1);
        else
            msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

static void timeout_hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    /* L may be a coroutine the handler created (it inherited this hook):
     * the task is then the one being resumed. */
    wq_task *t = wq_task_of(L);
    if (!t && wq_running)
        t = wq_task_of(wq_running);
    /* The virtual clock stands still while a handler computes: use real time too. */
    if (t && t->deadline != WQ_NEVER &&
        (wq_host_now(t->host) >= t->deadline || wq_real_now() >= t->real_deadline)) {
        if (lua_gethookcount(L) != 1) { /* first time for this job */
            t->queue->ntimeouts++;
            t->host->handler_timeouts++;
        }
        /* From now on every instruction raises again, so a handler cannot
         * swallow the timeout with pcall and go on (finish_job removes it). */
        lua_sethook(L, timeout_hook, LUA_MASKCOUNT, 1);
        if (L != t->co)
            lua_sethook(t->co, timeout_hook, LUA_MASKCOUNT, 1);
        lua_pushstring(L, "timeout");
        lua_error(L);
    }
}

static void deadline_fire(wq_host *h, void *data, uint64_t id)
{
    (void)id;
    wq_task *t = data;
    t->deadline_timer = 0;
    t->queue->ntimeouts++;
    h->handler_timeouts++;
    /* The handler fails with "timeout" at its next instruction, even if it
     * catches the interrupted wait with pcall (see timeout_hook). */
    lua_sethook(t->co, timeout_hook, LUA_MASKCOUNT, 1);
    if (t->state == TS_WAITING)
        wq_task_interrupt(t, "timeout");
}

static void get_cancel(wq_task *t)
{
    lqueue *lq = t->wait;
    wq_waitlist_remove(&lq->getters, t);
}

static void clear_deadline(lua_State *L, wq_task *t)
{
    if (t->deadline != WQ_NEVER) {
        lua_sethook(L, NULL, 0, 0);
        wq_timer_stop(t->host, t->deadline_timer);
        t->deadline_timer = 0;
        t->deadline = WQ_NEVER;
    }
    t->interrupt = NULL;
}

/* Splits "msg\nstack traceback:..." into the message and the whole text. */
static void outcome_failure(lua_State *L, lqueue *lq, const char *full)
{
    size_t klen, jlen = 0;
    const char *key = lua_tolstring(L, W_KEY, &klen);
    const char *json = lua_tolstring(L, W_JSON, &jlen);
    const char *cut = strstr(full, "\nstack traceback:");
    if (cut) {
        lua_pushlstring(L, full, (size_t)(cut - full));
        record_failure(L, lq, key, klen, json, jlen, lua_tostring(L, -1), full);
        lua_pop(L, 1);
    } else {
        record_failure(L, lq, key, klen, json, jlen, full, NULL);
    }
}

static void finish_job(lua_State *L, lqueue *lq, wq_task *t, int status)
{
    clear_deadline(L, t);
    size_t klen;
    const char *key = lua_tolstring(L, W_KEY, &klen);
    int nres = lua_gettop(L) - W_RES + 1;
    if (status != LUA_OK && status != LUA_YIELD) {
        outcome_failure(L, lq, lua_tostring(L, W_RES) ? lua_tostring(L, W_RES) : "error");
    } else if (nres >= 1 && luaL_testudata(L, W_RES, "wq.Requeue")) {
        double s = *(double *)lua_touserdata(L, W_RES);
        forget(lq, key, klen);
        lq->nrequeued++;
        int r = wq_queue_add_after(lq->q, key, klen, wq_seconds_to_ns(s), NULL);
        if (r < 0 && r != WQ_ESHUTDOWN)
            raise_engine(L, "requeue", r);
    } else if (nres >= 1 && !lua_toboolean(L, W_RES) &&
               (lua_isboolean(L, W_RES) || (nres >= 2 && !lua_isnil(L, W_RES + 1)))) {
        const char *err = nres >= 2 ? wq_safe_tostring(L, W_RES + 1) : "handler returned false";
        outcome_failure(L, lq, err);
    } else {
        lq->nsuccess++;
        forget(lq, key, klen);
    }
    done_key(L, lq, key, klen);
}

/*
 * Pushes the key and the raw payload text (or nil) of a record just handed
 * out. Pushing the key can run a finalizer that re-adds the key with a new
 * payload (freeing the old bytes), so the payload is read afresh after it.
 */
static void push_taken(lua_State *L, lqueue *lq, const wq_item_info *info)
{
    lua_pushlstring(L, info->key, info->keylen);
    size_t klen;
    const char *k = lua_tolstring(L, -1, &klen);
    wq_item_info cur;
    if (info->payload && wq_queue_lookup(lq->q, k, klen, &cur) == 1 && cur.payload)
        lua_pushlstring(L, cur.payload, cur.paylen);
    else
        lua_pushnil(L);
}

/* Replaces the raw payload text on top of the stack with its decoded value. */
static void decode_top(lua_State *L)
{
    if (lua_isnil(L, -1))
        return;
    size_t n;
    const char *raw = lua_tolstring(L, -1, &n);
    wq_push_payload(L, raw, n);
    lua_replace(L, -2);
}

static int worker_k(lua_State *L, int status, lua_KContext ctx)
{
    lqueue *lq = lua_touserdata(L, 1);
    wq_task *t = wq_task_of(L);
    int phase = (int)ctx;
    int budget = WORKER_BUDGET;
    for (;;) {
        if (phase == PH_RAN) {
            finish_job(L, lq, t, status);
            lua_settop(L, 1);
            if (--budget == 0) /* a plain yield: the scheduler runs us again later */
                return lua_yieldk(L, 0, PH_GET, worker_k);
        }
        t->interrupt = NULL;
        if (lq->stopping || !lq->q)
            break;
        wq_item_info info;
        int r = wq_queue_get(lq->q, &info);
        if (r == WQ_ESHUTDOWN)
            break;
        if (r == WQ_EEMPTY) {
            t->wait = lq;
            wq_waitlist_push(&lq->getters, t);
            return wq_task_wait(L, t, get_cancel, PH_GET, worker_k);
        }
        push_taken(L, lq, &info); /* W_KEY, W_JSON */
        lua_pushcfunction(L, msgh);
        lua_rawgeti(L, LUA_REGISTRYINDEX, lq->handler_ref);
        lua_pushvalue(L, W_KEY);
        lua_pushvalue(L, W_JSON);
        decode_top(L);
        if (lq->timeout_ns > 0) {
            wq_host *h = lq->host;
            t->deadline = wq_add_sat(wq_host_now(h), lq->timeout_ns);
            t->real_deadline = wq_add_sat(wq_real_now(), lq->timeout_ns);
            t->deadline_timer = wq_timer_start(h, t->deadline, deadline_fire, t);
            lua_sethook(L, timeout_hook, LUA_MASKCOUNT, 1000);
        }
        status = lua_pcallk(L, 2, LUA_MULTRET, W_MSGH, PH_RAN, worker_k);
        phase = PH_RAN;
    }
    lq->live_workers--;
    return 0;
}

static int worker_main(lua_State *L)
{
    return worker_k(L, LUA_OK, PH_GET);
}

static void start_workers(lua_State *L, lqueue *lq)
{
    for (int i = 0; i < lq->workers; i++) {
        lua_pushcfunction(L, worker_main);
        lua_pushlightuserdata(L, lq);
        wq_task *t = wq_task_spawn(lq->host, L, 1, TASK_WORKER);
        if (!t)
            luaL_error(L, "queue: out of memory");
        t->queue = lq;
        lq->live_workers++;
    }
}

/* ---- construction ---- */

static int valid_name(const char *s, size_t n)
{
    if (n < 1 || n > 64)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

static void restore_item(void *ud, const wq_restored *r)
{
    lqueue *lq = ud;
    wq_add_opts o = {r->payload, r->paylen, r->payload != NULL, 1, r->priority};
    if (r->queued)
        wq_queue_add(lq->q, r->key, r->keylen, &o);
    if (r->waiting)
        wq_queue_add_at(lq->q, r->key, r->keylen, r->ready_at_mono, &o);
}

static void restore_failure(void *ud, const char *key, size_t len, int64_t requeues,
                            const char *last_error)
{
    (void)last_error;
    lqueue *lq = ud;
    uint64_t *v = wq_keymap_put(lq->failures, key, len, NULL);
    if (v)
        *v = (uint64_t)requeues;
    wq_limiter_set_requeues(lq->limiter, key, len, requeues);
}

static void restore_dead(void *ud, const char *key, size_t len, const char *payload,
                         const char *error, int64_t attempts, double failed_at)
{
    lqueue *lq = ud;
    add_dead(lq->host->L, lq, key, len, payload, payload ? strlen(payload) : 0, error ? error : "",
             NULL, attempts, failed_at);
}

static const char *const queue_opts[] = {"handler", "workers", "limiter", "max_retries",
                                         "timeout", "persist", NULL};

static int queue_new(lua_State *L)
{
    size_t nlen;
    if (lua_type(L, 1) != LUA_TSTRING) /* before lua_tolstring, which converts numbers */
        wq_argerror(L, "queue", "name",
                    lua_pushfstring(L, "string expected, got %s", luaL_typename(L, 1)));
    const char *name = lua_tolstring(L, 1, &nlen);
    if (!valid_name(name, nlen))
        wq_argerror(L, "queue", "name", "1-64 characters of [A-Za-z0-9_.-]");
    if (!lua_isnoneornil(L, 2) && !lua_istable(L, 2))
        wq_argerror(L, "queue", "opts",
                    lua_pushfstring(L, "table expected, got %s", luaL_typename(L, 2)));
    lua_settop(L, 2);
    if (lua_isnil(L, 2)) {
        lua_newtable(L);
        lua_replace(L, 2);
    }
    /* Unknown options are typos: say so. */
    lua_pushnil(L);
    while (lua_next(L, 2)) {
        lua_pop(L, 1);
        int known = 0;
        if (lua_type(L, -1) == LUA_TSTRING)
            for (int i = 0; queue_opts[i]; i++)
                known |= strcmp(lua_tostring(L, -1), queue_opts[i]) == 0;
        if (!known)
            wq_argerror(L, "queue", "opts",
                        lua_pushfstring(L, "unknown option '%s'", luaL_tolstring(L, -1, NULL)));
    }
    wq_host *h = wq_host_of(L);
    if (lqueue_find(h, name))
        wq_argerror(L, "queue", "name", lua_pushfstring(L, "queue '%s' already exists", name));

    int handler = lua_getfield(L, 2, "handler"); /* 3 */
    if (handler != LUA_TNIL && handler != LUA_TFUNCTION)
        wq_argerror(L, "queue", "handler",
                    lua_pushfstring(L, "function expected, got %s", luaL_typename(L, 3)));
    lua_Integer workers = 1;
    if (lua_getfield(L, 2, "workers") != LUA_TNIL) { /* 4 */
        if (!lua_isinteger(L, 4) || lua_tointeger(L, 4) <= 0 || lua_tointeger(L, 4) > 100000)
            wq_argerror(L, "queue", "workers", "integer > 0 expected");
        workers = lua_tointeger(L, 4);
    }
    lua_Integer max_retries = 5;
    if (lua_getfield(L, 2, "max_retries") != LUA_TNIL) { /* 5 */
        if (!lua_isinteger(L, 5) || lua_tointeger(L, 5) < 0)
            wq_argerror(L, "queue", "max_retries", "integer >= 0 expected");
        max_retries = lua_tointeger(L, 5);
    }
    double timeout = 0;
    if (lua_getfield(L, 2, "timeout") != LUA_TNIL) /* 6 */
        timeout = wq_checkduration(L, 6, "queue", "timeout", 1);
    int persist = 1;
    if (lua_getfield(L, 2, "persist") != LUA_TNIL) { /* 7 */
        if (!lua_isboolean(L, 7))
            wq_argerror(L, "queue", "persist", "boolean expected");
        persist = lua_toboolean(L, 7);
    }
    wq_limiter *limiter;
    if (lua_getfield(L, 2, "limiter") != LUA_TNIL) { /* 8 */
        limiter = wq_lua_checklimiter(L, 8, "queue", "limiter");
    } else {
        lua_pop(L, 1);
        limiter = wq_lua_push_default_limiter(L); /* 8 */
    }

    lqueue *lq = lua_newuserdatauv(L, sizeof *lq, 0); /* 9 */
    memset(lq, 0, sizeof *lq);
    lq->handler_ref = lq->limiter_ref = lq->dead_ref = lq->ref = LUA_NOREF;
    luaL_setmetatable(L, "wq.Queue");
    lq->host = h;
    memcpy(lq->name, name, nlen + 1);
    lq->workers = handler == LUA_TFUNCTION ? (int)workers : 0;
    lq->max_retries = max_retries;
    lq->timeout_ns = wq_seconds_to_ns(timeout);
    lq->persist = persist;
    lq->limiter = limiter;
    lq->q = wq_queue_new(&h->clock);
    lq->failures = wq_keymap_new();
    if (!lq->q || !lq->failures || wq_host_add_queue(h, lq) < 0) {
        wq_queue_free(lq->q);
        wq_keymap_free(lq->failures);
        lq->q = NULL;
        return luaL_error(L, "queue: out of memory");
    }
    wq_queue_set_observer(lq->q, observe, lq);
    lua_pushvalue(L, 9);
    lq->ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_pushvalue(L, 8);
    lq->limiter_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_newtable(L);
    lq->dead_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    if (handler == LUA_TFUNCTION) {
        lua_pushvalue(L, 3);
        lq->handler_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    }
    if (h->store && persist) {
        lq->sq = wq_store_attach(h->store, name, lq->q);
        if (!lq->sq)
            return luaL_error(L, "queue: %s", wq_store_errmsg(h->store));
        int r = wq_store_restore(lq->sq, restore_item, restore_failure, restore_dead, lq);
        if (r < 0)
            return luaL_error(L, "queue: cannot restore '%s': %s", name, wq_store_errmsg(h->store));
    }
    if (lq->stopping || h->stopping)
        lqueue_stop(lq);
    start_workers(L, lq);
    lua_settop(L, 9);
    return 1;
}

/* ---- methods ---- */

/* Reads the optional payload (at idx) and opts table (at idx + 1) of an add. */
static void read_add_args(lua_State *L, int idx, const char *fn, wq_add_opts *o)
{
    memset(o, 0, sizeof *o);
    int top = lua_gettop(L);
    if (top >= idx + 1 && !lua_isnil(L, idx + 1)) {
        if (!lua_istable(L, idx + 1))
            wq_argerror(L, fn, "opts",
                        lua_pushfstring(L, "table expected, got %s", luaL_typename(L, idx + 1)));
        int t = lua_getfield(L, idx + 1, "priority");
        if (t != LUA_TNIL) {
            if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < INT32_MIN ||
                lua_tointeger(L, -1) > INT32_MAX)
                wq_argerror(L, fn, "priority", "32-bit integer expected");
            o->set_priority = 1;
            o->priority = (int32_t)lua_tointeger(L, -1);
        }
        lua_pop(L, 1);
    }
    wq_encode_payload(L, idx, fn); /* pushed: JSON text or nil */
    if (!lua_isnil(L, -1)) {
        o->payload = lua_tolstring(L, -1, &o->paylen);
        o->set_payload = 1;
    }
}

static int queue_add(lua_State *L)
{
    lqueue *lq = check_queue(L, "add");
    size_t len;
    const char *key = wq_checkkey(L, 2, "add", &len);
    wq_add_opts o;
    read_add_args(L, 3, "add", &o);
    int r = wq_queue_add(lq->q, key, len, &o);
    if (r < 0 && r != WQ_ESHUTDOWN)
        return raise_engine(L, "add", r);
    lua_pushboolean(L, r >= 0);
    return 1;
}

static int queue_add_after(lua_State *L)
{
    lqueue *lq = check_queue(L, "add_after");
    size_t len;
    const char *key = wq_checkkey(L, 2, "add_after", &len);
    double s = wq_checkduration(L, 3, "add_after", "seconds", 0);
    wq_add_opts o;
    read_add_args(L, 4, "add_after", &o);
    int r = wq_queue_add_after(lq->q, key, len, wq_seconds_to_ns(s), &o);
    if (r < 0 && r != WQ_ESHUTDOWN)
        return raise_engine(L, "add_after", r);
    lua_pushboolean(L, r >= 0);
    return 1;
}

static int queue_add_rate_limited(lua_State *L)
{
    lqueue *lq = check_queue(L, "add_rate_limited");
    size_t len;
    const char *key = wq_checkkey(L, 2, "add_rate_limited", &len);
    wq_add_opts o;
    read_add_args(L, 3, "add_rate_limited", &o);
    int64_t delay;
    if (wq_limiter_when(lq->limiter, key, len, &delay) < 0)
        return luaL_error(L, "add_rate_limited: out of memory");
    int r = wq_queue_add_after(lq->q, key, len, delay, &o);
    if (r < 0 && r != WQ_ESHUTDOWN)
        return raise_engine(L, "add_rate_limited", r);
    lua_pushboolean(L, r >= 0);
    return 1;
}

static int queue_cancel_after(lua_State *L)
{
    lqueue *lq = check_queue(L, "cancel_after");
    size_t len;
    const char *key = wq_checkkey(L, 2, "cancel_after", &len);
    lua_pushboolean(L, wq_queue_cancel_after(lq->q, key, len));
    return 1;
}

static int queue_len(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)wq_queue_len(check_queue(L, "len")->q));
    return 1;
}

static int get_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    lqueue *lq = (lqueue *)ctx;
    wq_task *t = wq_task_of(L);
    wq_task_check_interrupt(L, t);
    if (lq->stopping) { /* see queue_get */
        lua_pushnil(L);
        return 1;
    }
    wq_item_info info;
    int r = wq_queue_get(lq->q, &info);
    if (r == 0) {
        push_taken(L, lq, &info);
        decode_top(L);
        return 2;
    }
    if (r == WQ_ESHUTDOWN) {
        lua_pushnil(L);
        return 1;
    }
    t->wait = lq;
    wq_waitlist_push(&lq->getters, t);
    return wq_task_wait(L, t, get_cancel, ctx, get_k);
}

static int queue_get(lua_State *L)
{
    lqueue *lq = check_queue(L, "get");
    wq_item_info info;
    /* A graceful stop (SIGINT/SIGTERM) hands out nothing more: what is
     * queued stays queued (and in the state file) for the next run. */
    if (lq->stopping) {
        lua_pushnil(L);
        return 1;
    }
    /* Only wait (and so only require a task) when there is nothing to take. */
    int r = wq_queue_get(lq->q, &info);
    if (r == 0) {
        push_taken(L, lq, &info);
        decode_top(L);
        return 2;
    }
    if (r == WQ_ESHUTDOWN) {
        lua_pushnil(L);
        return 1;
    }
    wq_task *t = wq_task_require(L, "get");
    t->wait = lq;
    wq_waitlist_push(&lq->getters, t);
    return wq_task_wait(L, t, get_cancel, (lua_KContext)lq, get_k);
}

static int queue_done(lua_State *L)
{
    lqueue *lq = check_queue(L, "done");
    size_t len;
    const char *key = wq_checkkey(L, 2, "done", &len);
    int r = wq_queue_done(lq->q, key, len);
    if (r < 0 && r != WQ_ENOENT)
        return raise_engine(L, "done", r);
    if (r == 0)
        lq->ndone++;
    lua_pushboolean(L, r == 0);
    return 1;
}

static int queue_shutdown(lua_State *L)
{
    wq_queue_shutdown(check_queue(L, "shutdown")->q);
    return 0;
}

static void drain_cancel(wq_task *t)
{
    lqueue *lq = t->wait;
    wq_waitlist_remove(&lq->drainers, t);
}

static int drain_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    lqueue *lq = (lqueue *)ctx;
    wq_task *t = wq_task_of(L);
    wq_task_check_interrupt(L, t);
    if (!wq_queue_draining(lq->q))
        return 0;
    t->wait = lq;
    wq_waitlist_push(&lq->drainers, t);
    return wq_task_wait(L, t, drain_cancel, ctx, drain_k);
}

static int queue_shutdown_with_drain(lua_State *L)
{
    lqueue *lq = check_queue(L, "shutdown_with_drain");
    /* If it will have to wait, check that it can before changing anything. */
    if (wq_queue_processing(lq->q) > 0)
        wq_task_require(L, "shutdown_with_drain");
    wq_queue_shutdown_drain(lq->q);
    if (!wq_queue_draining(lq->q))
        return 0;
    return drain_k(L, LUA_OK, (lua_KContext)lq);
}

static int queue_shutting_down(lua_State *L)
{
    lua_pushboolean(L, wq_queue_shutting_down(check_queue(L, "shutting_down")->q));
    return 1;
}

static int queue_forget(lua_State *L)
{
    lqueue *lq = check_queue(L, "forget");
    size_t len;
    const char *key = wq_checkkey(L, 2, "forget", &len);
    forget(lq, key, len);
    return 0;
}

static int queue_num_requeues(lua_State *L)
{
    lqueue *lq = check_queue(L, "num_requeues");
    size_t len;
    const char *key = wq_checkkey(L, 2, "num_requeues", &len);
    lua_pushinteger(L, wq_limiter_num_requeues(lq->limiter, key, len));
    return 1;
}

static void setint(lua_State *L, const char *k, lua_Integer v)
{
    lua_pushinteger(L, v);
    lua_setfield(L, -2, k);
}

/* Pushes the stats table of lq (also used by the HTTP API). */
void lqueue_push_stats(lua_State *L, lqueue *lq);
void lqueue_push_stats(lua_State *L, lqueue *lq)
{
    const wq_metrics *m = wq_queue_metrics(lq->q);
    lua_createtable(L, 0, 14);
    lua_pushstring(L, lq->name);
    lua_setfield(L, -2, "name");
    setint(L, "depth", (lua_Integer)m->depth);
    setint(L, "queued", (lua_Integer)wq_queue_len(lq->q));
    setint(L, "processing", (lua_Integer)wq_queue_processing(lq->q));
    setint(L, "waiting", (lua_Integer)wq_queue_waiting(lq->q));
    setint(L, "adds", (lua_Integer)m->adds);
    setint(L, "done", (lua_Integer)lq->ndone);
    setint(L, "retries", (lua_Integer)m->retries);
    setint(L, "failures", (lua_Integer)lq->nfailures);
    setint(L, "dead", (lua_Integer)lq->ndead);
    setint(L, "succeeded", (lua_Integer)lq->nsuccess);
    setint(L, "requeued", (lua_Integer)lq->nrequeued);
    setint(L, "timeouts", (lua_Integer)lq->ntimeouts);
    setint(L, "workers", lq->workers);
}

static int queue_stats(lua_State *L)
{
    lqueue_push_stats(L, check_queue(L, "stats"));
    return 1;
}

/* Orders dead letters by failure time, then key. */
static int dead_less(lua_State *L)
{
    lua_getfield(L, 1, "failed_at");
    lua_getfield(L, 2, "failed_at");
    if (lua_compare(L, -2, -1, LUA_OPEQ)) {
        lua_getfield(L, 1, "key");
        lua_getfield(L, 2, "key");
    }
    lua_pushboolean(L, lua_compare(L, -2, -1, LUA_OPLT));
    return 1;
}

static int queue_dead(lua_State *L)
{
    lqueue *lq = check_queue(L, "dead");
    push_dead(L, lq);
    int dead = lua_gettop(L);
    /* Oldest first, so the listing is stable. */
    lua_newtable(L);
    int out = dead + 1, n = 0;
    lua_pushnil(L);
    while (lua_next(L, dead)) {
        lua_createtable(L, 0, 6);
        lua_pushvalue(L, -3);
        lua_setfield(L, -2, "key");
        lua_getfield(L, -2, "json");
        size_t jlen;
        const char *json = lua_tolstring(L, -1, &jlen);
        wq_push_payload(L, json, jlen);
        lua_setfield(L, -3, "payload");
        lua_pop(L, 1);
        const char *fields[] = {"error", "attempts", "failed_at", "traceback"};
        for (int i = 0; i < 4; i++) {
            lua_getfield(L, -2, fields[i]);
            lua_setfield(L, -2, fields[i]);
        }
        lua_rawseti(L, out, ++n);
        lua_pop(L, 1);
    }
    lua_getglobal(L, "table");
    lua_getfield(L, -1, "sort");
    lua_pushvalue(L, out);
    lua_pushcfunction(L, dead_less);
    lua_call(L, 2, 0);
    lua_pop(L, 1);
    return 1;
}

static int queue_retry_dead(lua_State *L)
{
    lqueue *lq = check_queue(L, "retry_dead");
    size_t len;
    const char *key = wq_checkkey(L, 2, "retry_dead", &len);
    push_dead(L, lq);
    lua_pushvalue(L, 2);
    if (lua_rawget(L, -2) == LUA_TNIL) {
        lua_pushboolean(L, 0);
        return 1;
    }
    lua_getfield(L, -1, "json");
    size_t jlen;
    const char *json = lua_tolstring(L, -1, &jlen);
    wq_add_opts o = {json, jlen, json != NULL, 0, 0};
    forget(lq, key, len);
    int r = wq_queue_add(lq->q, key, len, &o);
    if (r < 0 && r != WQ_ESHUTDOWN)
        return raise_engine(L, "retry_dead", r);
    if (r == WQ_ESHUTDOWN) {
        lua_pushboolean(L, 0);
        return 1;
    }
    lua_pushvalue(L, 2);
    lua_pushnil(L);
    lua_rawset(L, -5);
    lq->ndead--;
    if (lq->sq)
        wq_store_undead(lq->sq, key, len);
    lua_pushboolean(L, 1);
    return 1;
}

static int queue_name(lua_State *L)
{
    lua_pushstring(L, check_queue(L, "name")->name);
    return 1;
}

static int queue_tostring(lua_State *L)
{
    lqueue *lq = luaL_checkudata(L, 1, "wq.Queue");
    lua_pushfstring(L, "wq.Queue(%s)", lq->name);
    return 1;
}

/* ---- host hooks ---- */

void lqueue_fire_due(lqueue *lq)
{
    if (wq_queue_fire_due(lq->q) < 0)
        wq_host_log(lq->host, "wqrun: %s: out of memory firing delayed items", lq->name);
}

int lqueue_busy(const lqueue *lq)
{
    return lq->handler_ref != LUA_NOREF && !lq->stopping &&
           (wq_queue_len(lq->q) > 0 || wq_queue_processing(lq->q) > 0);
}

void lqueue_stop(lqueue *lq)
{
    lq->stopping = 1;
    wq_queue_shutdown(lq->q);
}

int lqueue_add_external(lqueue *lq, const char *key, size_t keylen, const char *payload,
                        size_t paylen, double after, const int32_t *priority)
{
    wq_add_opts o = {payload, paylen, payload != NULL, priority != NULL, priority ? *priority : 0};
    if (after > 0)
        return wq_queue_add_after(lq->q, key, keylen, wq_seconds_to_ns(after), &o);
    return wq_queue_add(lq->q, key, keylen, &o);
}

static const luaL_Reg queue_methods[] = {{"add", queue_add},
                                         {"len", queue_len},
                                         {"get", queue_get},
                                         {"done", queue_done},
                                         {"shutdown", queue_shutdown},
                                         {"shutdown_with_drain", queue_shutdown_with_drain},
                                         {"shutting_down", queue_shutting_down},
                                         {"add_after", queue_add_after},
                                         {"add_rate_limited", queue_add_rate_limited},
                                         {"cancel_after", queue_cancel_after},
                                         {"forget", queue_forget},
                                         {"num_requeues", queue_num_requeues},
                                         {"stats", queue_stats},
                                         {"dead", queue_dead},
                                         {"retry_dead", queue_retry_dead},
                                         {"name", queue_name},
                                         {NULL, NULL}};

void wq_lua_open_queue(lua_State *L)
{
    luaL_newmetatable(L, "wq.Queue");
    luaL_newlib(L, queue_methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, queue_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pop(L, 1);
    lua_pushcfunction(L, queue_new);
    lua_setfield(L, -2, "queue");
}
