/*
 * The handler worker policy: a queue with a handler runs a pool of worker
 * tasks; each loops get -> handler -> outcome -> done in C, using
 * continuations so the handler may wait (sleep, exec, get on another
 * queue). Outcomes: success forgets the key's failures; an error counts a
 * failure and retries through the limiter until max_retries, then
 * dead-letters the key; wq.requeue(s) schedules the key again without
 * counting a failure. A handler timeout is a deadline timer plus a count
 * hook for handlers that never yield.
 */
#include "lua/lworker.h"

#include "engine/common.h"
#include "host/commands.h"
#include "host/events.h"
#include "host/timer.h"
#include "lua/lfailures.h"
#include "lua/lflow.h"
#include "lua/lprogress.h"
#include "lua/ljson.h"
#include "lua/lwq.h"
#include "store/backend.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#define WORKER_BUDGET 64 /* jobs a worker runs before letting other tasks in */

/* ---- failure bookkeeping ---- */

int64_t lworker_failures(lqueue *lq, const char *key, size_t len)
{
    return lfail_count(lq, key, len);
}

void lworker_forget(lqueue *lq, const char *key, size_t len)
{
    wq_limiter_forget(lq->limiter, key, len);
    if (lfail_clear(lq, key, len) && lq->bq)
        wq_bq_failures(lq->bq, key, len, 0, NULL);
}

/* Pushes the queue's dead-letter table. */
void lworker_push_dead(lua_State *L, lqueue *lq)
{
    lua_rawgeti(L, LUA_REGISTRYINDEX, lq->dead_ref);
}

static void add_dead(lua_State *L, lqueue *lq, const char *key, size_t len, const char *json,
                     size_t jlen, const char *err, const char *tb, int64_t attempts, double at)
{
    /* A database shared by runners keeps it (wq_bq_dead: the outcome writes it) and answers
     * every question about it (q:dead(), q:stats(), the HTTP routes): a copy here would
     * only grow, one per dead letter, for as long as the runner runs. */
    if (lq->bq && wq_backend_shared(lq->host->backend))
        return;
    lworker_push_dead(L, lq);
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

/* Runs the queue's on_dead hook as a task: on_dead(key, payload, err, attempts). */
static void call_on_dead(lua_State *L, lqueue *lq, const char *key, size_t len, const char *json,
                         size_t jlen, const char *err, int64_t attempts)
{
    if (lq->on_dead_ref == LUA_NOREF)
        return;
    lua_rawgeti(L, LUA_REGISTRYINDEX, lq->on_dead_ref);
    lua_pushlstring(L, key, len);
    if (json)
        wq_push_payload(L, json, jlen);
    else
        lua_pushnil(L);
    lua_pushstring(L, err);
    lua_pushinteger(L, attempts);
    wq_task_spawn(L, 4, TASK_SPAWN);
}

/* When key's record was first added and its run started (Unix s; 0: not known, not running). */
static void run_times(lqueue *lq, const char *key, size_t len, double *added, double *started)
{
    wq_item_info info;
    *added = *started = 0;
    if (!lq->q || wq_queue_lookup(lq->q, key, len, &info) != 1)
        return;
    *added = lqueue_enqueued_at(lq, info.id);
    if (info.started_at)
        *started = wq_host_unix(lq->host, info.started_at);
}

/*
 * A failed run of key: retry through the limiter while the failure count
 * is below max_retries (and the failure is not permanent), else dead-letter
 * it. The caller calls done after.
 */
static void record_failure(lua_State *L, lqueue *lq, const char *key, size_t len, const char *json,
                           size_t jlen, const char *err, const char *tb, int permanent,
                           int64_t retry_in)
{
    int64_t count = lworker_failures(lq, key, len);
    lq->nfailures++;
    if (count < lq->max_retries && !permanent) {
        if (lfail_set(lq, key, len, count + 1, err) < 0)
            luaL_error(L, "out of memory");
        if (lq->bq) /* the message as kept: cut to LFAIL_ERROR_MAX */
            wq_bq_failures(lq->bq, key, len, count + 1, lfail_last_error(lq, key, len));
        int64_t delay;
        /* wq.retry_in gives the delay; the limiter still counts the failure. */
        if (wq_limiter_when(lq->limiter, key, len, &delay) < 0)
            luaL_error(L, "out of memory");
        if (retry_in >= 0)
            delay = retry_in;
        lfail_log(lq, key, len, count + 1, err, LFAIL_RETRY, delay);
        if (lqueue_told(lq))
            lworker_event(lq, WQ_LIFE_RETRYING, key, len, count + 1, NULL, 0, err,
                          (double)delay / 1e9);
        int r = wq_queue_add_after(lq->q, key, len, delay, NULL);
        if (r < 0 && r != WQ_ESHUTDOWN)
            lqueue_raise(L, "retry", r);
        return;
    }
    lworker_forget(lq, key, len);
    lq->host->ndead_run++;
    double at = wq_host_unix(lq->host, wq_host_now(lq->host));
    if (lq->host->flows && lflow_is_node(lq, key, len))
        lflow_dead(lq, err);
    /* The traceback without the message, cut to WQ_TRACEBACK_MAX (kept with the letter). */
    const char *trace = tb ? strstr(tb, "stack traceback:") : NULL;
    int cut = trace && strlen(trace) > WQ_TRACEBACK_MAX;
    if (cut) {
        lua_pushlstring(L, trace, wq_utf8_cut(trace, strlen(trace), WQ_TRACEBACK_MAX));
        trace = lua_tostring(L, -1); /* anchored on the stack until the end of this */
    }
    add_dead(L, lq, key, len, json, jlen, err, trace, count + 1, at);
    if ((lq->bq && lq->history > 0) || lqueue_told(lq)) {
        double added, started;
        run_times(lq, key, len, &added, &started);
        lworker_history(lq, key, len, WQ_HIST_DEAD, added, started, count + 1, NULL, 0, err);
    }
    if (lq->bq) {
        wq_dead_row d = {.key = key,
                         .keylen = len,
                         .payload = json,
                         .paylen = jlen,
                         .error = err,
                         .traceback = trace,
                         .attempts = count + 1,
                         .failed_at = at};
        wq_bq_dead(lq->bq, &d);
    }
    lfail_log(lq, key, len, count + 1, err, permanent ? LFAIL_PERMANENT : LFAIL_DEAD, 0);
    call_on_dead(L, lq, key, len, json, jlen, err, count + 1);
    if (cut)
        lua_pop(L, 1);
}

void lworker_history(lqueue *lq, const char *key, size_t len, wq_hist_state state, double added,
                     double started, int64_t attempts, const char *result, size_t rlen,
                     const char *error)
{
    int kept = lq->bq && lq->history > 0, told = lqueue_told(lq);
    if (!kept && !told)
        return;
    double now = wq_host_unix(lq->host, wq_host_now(lq->host));
    if (kept) {
        wq_history_row r = {.key = key,
                            .keylen = len,
                            .state = state,
                            .added_at = added,
                            .started_at = started,
                            .finished_at = now,
                            .attempts = attempts,
                            .result = result,
                            .rlen = rlen,
                            .error = error,
                            .keep = lq->history};
        wq_bq_history(lq->bq, &r);
    }
    if (told) {
        static const wq_life_type type[] = {WQ_LIFE_DONE, WQ_LIFE_DEAD, WQ_LIFE_CANCELLED,
                                            WQ_LIFE_REMOVED};
        wq_life e = {.type = type[state],
                     .queue = lq->name,
                     .key = key,
                     .keylen = len,
                     .attempt = state == WQ_HIST_REMOVED ? 0 : attempts,
                     .data = result,
                     .datalen = rlen,
                     .error = error,
                     .at = now,
                     .added_at = added,
                     .started_at = started};
        wq_events_emit(lq->host, &e);
    }
}

void lworker_event(lqueue *lq, wq_life_type type, const char *key, size_t len, int64_t attempt,
                   const char *data, size_t dlen, const char *error, double retry_in)
{
    wq_life e = {.type = type,
                 .queue = lq->name,
                 .key = key,
                 .keylen = len,
                 .attempt = attempt,
                 .data = data,
                 .datalen = dlen,
                 .error = error,
                 .retry_in = retry_in};
    wq_events_emit(lq->host, &e);
}

/* A key that succeeds loses its dead letter (it was re-added and fixed). */
static void clear_dead(lua_State *L, lqueue *lq, const char *key, size_t len)
{
    if (lq->ndead == 0)
        return;
    lworker_push_dead(L, lq);
    lua_pushlstring(L, key, len);
    if (lua_rawget(L, -2) != LUA_TNIL) {
        lua_pop(L, 1);
        lua_pushlstring(L, key, len);
        lua_pushnil(L);
        lua_rawset(L, -3);
        lq->ndead--;
        if (lq->bq)
            wq_bq_undead(lq->bq, key, len);
    } else {
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

static void done_key(lua_State *L, lqueue *lq, const char *key, size_t len)
{
    int r = wq_queue_done(lq->q, key, len);
    if (r == 0)
        lq->ndone++;
    else if (r != WQ_ENOENT)
        lqueue_raise(L, "done", r);
}

/* ---- workers ---- */

/* Worker stack: [1] queue, [2] key, [3] payload JSON or nil, [4] msgh, [5] handler/results. */
enum { PH_GET, PH_RAN };
#define W_KEY 2
#define W_JSON 3
#define W_MSGH 4
#define W_RES 5

/* The wq.Fail object at idx, or NULL. */
static int is_fail(lua_State *L, int idx)
{
    return luaL_testudata(L, idx, "wq.Fail") != NULL;
}

/* The wq.Retry object (wq.retry_in) at idx, or NULL. */
static int is_retry(lua_State *L, int idx)
{
    return luaL_testudata(L, idx, "wq.Retry") != NULL;
}

static int msgh(lua_State *L)
{
    /* error(wq.fail(msg)), error(wq.retry_in(s, msg)): kept as they are, no traceback */
    if (is_fail(L, 1) || is_retry(L, 1))
        return 1;
    const char *msg = lua_tostring(L, 1);
    if (!msg) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
            msg = lua_tostring(L, -1);
        else if (lua_type(L, 1) == LUA_TTABLE && wq_ljson_encode(L, 1) == LUA_OK)
            msg = lua_tostring(L, -1); /* error({code = 5}): {"code":5} */
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

int lworker_cancel(lqueue *lq, const char *key, size_t len)
{
    wq_item_info info;
    if (!wq_queue_lookup(lq->q, key, len, &info))
        return WQ_ENOENT;
    if (!(info.state & WQ_ST_PROCESSING))
        return WQ_EBUSY;
    for (wq_task *t = wq_sched_of(lq->L)->all; t; t = t->anext) {
        if (t->kind != TASK_WORKER || t->queue != lq || !t->job_key || t->job_keylen != len ||
            (len && memcmp(t->job_key, key, len) != 0))
            continue;
        /* The wait it is in (or returns from) raises "cancelled", and so does every later
         * one (wq_task_require): cleanup code under pcall runs, waiting does not. */
        if (!t->cancelled) {
            t->cancelled = 1;
            wq_task_interrupt(t, "cancelled"); /* ends a wq.exec wait: the child is killed */
        }
        return 0;
    }
    return WQ_EBUSY; /* handed out by q:get(): the script's own loop runs it */
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

/*
 * The result of a success, for keep_done and the history: the JSON text of a string or
 * JSON-representable table the handler returned (at W_RES) in *r, else NULL. Returns the
 * number of values it pushed (the text, or the encoder's message), for the caller to pop once
 * done with *r. One that cannot be encoded is logged when keep_done would have kept it.
 */
static int push_result(lua_State *L, lqueue *lq, const char *key, size_t klen, int nres,
                       const char **r, size_t *rlen)
{
    *r = NULL;
    *rlen = 0;
    int t = nres >= 1 ? lua_type(L, W_RES) : LUA_TNIL;
    if (t != LUA_TSTRING && t != LUA_TTABLE)
        return 0;
    int status = wq_ljson_encode(L, W_RES);
    if (status == LUA_ERRMEM)
        lua_error(L);
    if (status == LUA_OK) {
        *r = lua_tolstring(L, -1, rlen);
    } else if (lq->keep_done > 0) {
        char shown[WQ_SHOWN_KEY];
        wq_show_key(shown, key, klen);
        wq_host_log(lq->host, "wqrun: %s: the result of '%s' is not kept: %s", lq->name, shown,
                    lua_tostring(L, -1));
    }
    return 1;
}

/*
 * Splits "msg\nstack traceback:..." into the message and the whole text.
 * retry_in: the delay before the next try, < 0 for the limiter's.
 */
static void outcome_failure(lua_State *L, lqueue *lq, const char *full, int permanent,
                            int64_t retry_in)
{
    size_t klen, jlen = 0;
    const char *key = lua_tolstring(L, W_KEY, &klen);
    const char *json = lua_tolstring(L, W_JSON, &jlen);
    const char *cut = strstr(full, "\nstack traceback:");
    if (cut) {
        lua_pushlstring(L, full, (size_t)(cut - full));
        record_failure(L, lq, key, klen, json, jlen, lua_tostring(L, -1), full, permanent,
                       retry_in);
        lua_pop(L, 1);
    } else {
        record_failure(L, lq, key, klen, json, jlen, full, NULL, permanent, retry_in);
    }
}

/* A permanent failure with the message of the wq.Fail object at idx. */
static void outcome_fail(lua_State *L, lqueue *lq, int idx)
{
    lua_getiuservalue(L, idx, 1);
    const char *msg = lua_tostring(L, -1);
    outcome_failure(L, lq, msg ? msg : "failed", 1, -1);
    lua_pop(L, 1);
}

/* A failure that counts, retried after the delay of the wq.Retry object at idx. */
static void outcome_retry(lua_State *L, lqueue *lq, int idx)
{
    int64_t delay = wq_seconds_to_ns(*(double *)lua_touserdata(L, idx));
    lua_getiuservalue(L, idx, 1);
    const char *msg = lua_tostring(L, -1);
    outcome_failure(L, lq, msg ? msg : "failed", 0, delay);
    lua_pop(L, 1);
}

/* A success's result (JSON text, NULL: none) into the history and the keep_done memory. */
static void kept_result(lqueue *lq, const char *key, size_t klen, int history, int64_t attempts,
                        const char *r, size_t rlen)
{
    if (history) {
        double added, started;
        run_times(lq, key, klen, &added, &started);
        lworker_history(lq, key, klen, WQ_HIST_DONE, added, started, attempts, r, rlen, NULL);
    }
    if (lq->keep_done > 0)
        lqueue_remember_done(lq, key, klen, r, rlen);
}

void lworker_end_cancelled(lua_State *L, lqueue *lq, const char *key, size_t klen)
{
    if (lq->progress)
        lprogress_end(lq, key, klen);
    lq->ncancelled++;
    if ((lq->bq && lq->history > 0) || lqueue_told(lq)) {
        double added, started;
        run_times(lq, key, klen, &added, &started);
        lworker_history(lq, key, klen, WQ_HIST_CANCELLED, added, started,
                        lworker_failures(lq, key, klen) + 1, NULL, 0, "cancelled");
    }
    lworker_forget(lq, key, klen);
    char shown[WQ_SHOWN_KEY];
    wq_show_key(shown, key, klen);
    wq_host_log(lq->host, "wqrun: %s: '%s' cancelled", lq->name, shown);
    if (lq->host->flows && lflow_is_node(lq, key, klen))
        lflow_dead(lq, "cancelled");
    done_key(L, lq, key, klen);
    lflow_after_done(lq, key, klen);
    /* With the done, in the same commit: the cancel's outcome (commands, HTTP). */
    wq_host_cancelled(lq->host, lq, key, klen);
}

void lworker_end_done(lua_State *L, lqueue *lq, const char *key, size_t klen, const char *r,
                      size_t rlen)
{
    if (lq->progress)
        lprogress_end(lq, key, klen);
    lq->nsuccess++;
    int history = (lq->bq && lq->history > 0) || lqueue_told(lq);
    int64_t attempts = history ? lworker_failures(lq, key, klen) + 1 : 0;
    lworker_forget(lq, key, klen);
    clear_dead(L, lq, key, klen);
    kept_result(lq, key, klen, history, attempts, r, rlen);
    if (lflow_is_node(lq, key, klen))
        lflow_result_json(lq, key, klen, r, rlen);
    done_key(L, lq, key, klen);
    lflow_after_done(lq, key, klen);
}

void lworker_end_failed(lua_State *L, lqueue *lq, const char *key, size_t klen, const char *err,
                        int permanent, int64_t retry_in)
{
    if (lq->progress)
        lprogress_end(lq, key, klen);
    wq_item_info info;
    const char *json = NULL;
    size_t jlen = 0;
    if (wq_queue_lookup(lq->q, key, klen, &info) == 1 && info.payload) {
        lua_pushlstring(L, info.payload, info.paylen); /* kept while the dead letter is made */
        json = lua_tolstring(L, -1, &jlen);
    }
    record_failure(L, lq, key, klen, json, jlen, err, NULL, permanent, retry_in);
    if (json)
        lua_pop(L, 1);
    done_key(L, lq, key, klen);
    lflow_after_done(lq, key, klen);
}

void lworker_end_handed_back(lua_State *L, lqueue *lq, const char *key, size_t klen)
{
    if (lq->progress)
        lprogress_end(lq, key, klen);
    /* Pending again with what it holds (a newer payload, if one came meanwhile): the follow-up
     * rule runs it once more after the done. No failure is counted. */
    int r = wq_queue_add_after(lq->q, key, klen, 0, NULL);
    if (r == WQ_ESHUTDOWN) /* stopping: it stays as it is, to run again at the next start */
        return;
    if (r < 0)
        lqueue_raise(L, "hand back", r);
    done_key(L, lq, key, klen);
}

static void finish_job(lua_State *L, lqueue *lq, wq_task *t, int status)
{
    clear_deadline(L, t);
    size_t klen;
    const char *key = lua_tolstring(L, W_KEY, &klen);
    int nres = lua_gettop(L) - W_RES + 1;
    if (t->cancelled) {
        /* Whatever the handler did after the cancel: no retry, no dead letter. */
        t->cancelled = 0;
        lworker_end_cancelled(L, lq, key, klen);
        return;
    }
    if (lq->progress)
        lprogress_end(lq, key, klen);
    if (status != LUA_OK && status != LUA_YIELD) {
        if (is_fail(L, W_RES))
            outcome_fail(L, lq, W_RES);
        else if (is_retry(L, W_RES))
            outcome_retry(L, lq, W_RES);
        else
            outcome_failure(L, lq, lua_tostring(L, W_RES) ? lua_tostring(L, W_RES) : "error", 0,
                            -1);
    } else if (nres >= 1 && luaL_testudata(L, W_RES, "wq.Requeue")) {
        double s = *(double *)lua_touserdata(L, W_RES);
        lworker_forget(lq, key, klen);
        lq->nrequeued++;
        wq_add_opts o;
        memset(&o, 0, sizeof o);
        if (lua_getiuservalue(L, W_RES, 1) == LUA_TSTRING) { /* a new payload */
            o.payload = lua_tolstring(L, -1, &o.paylen);
            o.set_payload = 1;
        }
        int r = wq_queue_add_after(lq->q, key, klen, wq_seconds_to_ns(s), &o);
        lua_pop(L, 1);
        if (r < 0 && r != WQ_ESHUTDOWN)
            lqueue_raise(L, "requeue", r);
    } else if (nres >= 1 && is_fail(L, W_RES)) {
        outcome_fail(L, lq, W_RES);
    } else if (nres >= 1 && is_retry(L, W_RES)) {
        outcome_retry(L, lq, W_RES);
    } else if (nres >= 1 && !lua_toboolean(L, W_RES) &&
               (lua_isboolean(L, W_RES) || (nres >= 2 && !lua_isnil(L, W_RES + 1)))) {
        const char *err = nres >= 2 ? wq_safe_tostring(L, W_RES + 1) : "handler returned false";
        outcome_failure(L, lq, err, 0, -1);
    } else {
        lq->nsuccess++;
        int history = (lq->bq && lq->history > 0) || lqueue_told(lq);
        int64_t attempts = history ? lworker_failures(lq, key, klen) + 1 : 0;
        lworker_forget(lq, key, klen);
        clear_dead(L, lq, key, klen);
        if (history || lq->keep_done > 0) { /* the result encoded once for both */
            const char *r;
            size_t rlen;
            int pushed = push_result(L, lq, key, klen, nres, &r, &rlen);
            kept_result(lq, key, klen, history, attempts, r, rlen);
            lua_pop(L, pushed);
        }
        if (lflow_is_node(lq, key, klen))
            lflow_result(L, lq, key, klen, W_RES, nres);
    }
    done_key(L, lq, key, klen);
    lflow_after_done(lq, key, klen);
}

/*
 * Pushes the key and the raw payload text (or nil) of a record just handed
 * out. Pushing the key can run a finalizer that re-adds the key with a new
 * payload (freeing the old bytes), so the payload is read afresh after it.
 */
static int worker_k(lua_State *L, int status, lua_KContext ctx)
{
    lqueue *lq = lua_touserdata(L, 1);
    wq_task *t = wq_task_of(L);
    int phase = (int)ctx;
    int budget = WORKER_BUDGET;
    for (;;) {
        if (phase == PH_RAN) {
            t->job_key = NULL;
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
            if (lq->bq)
                wq_bq_want(lq->bq);
            return wq_task_wait(L, t, lqueue_get_cancel, PH_GET, worker_k);
        }
        if (lq->done_mem) /* remembered once it succeeds: load its slot meanwhile */
            wq_keymap_prefetch(lq->done_mem, info.key, info.keylen);
        if (lqueue_told(lq))
            lworker_event(lq, WQ_LIFE_STARTED, info.key, info.keylen,
                          lworker_failures(lq, info.key, info.keylen) + 1, NULL, 0, NULL, 0);
        lqueue_push_taken(L, lq, &info);                      /* W_KEY, W_JSON */
        t->job_key = lua_tolstring(L, W_KEY, &t->job_keylen); /* for the watchdog */
        lua_pushcfunction(L, msgh);
        lua_rawgeti(L, LUA_REGISTRYINDEX, lq->handler_ref);
        lua_pushvalue(L, W_KEY);
        lua_pushvalue(L, W_JSON);
        int nargs = 2;
        if (lq->raw_payload) { /* a pool's handler: handler(key, payload text, attempt) */
            lua_pushinteger(L, lworker_failures(lq, t->job_key, t->job_keylen) + 1);
            nargs = 3;
        } else {
            lqueue_decode_top(L);
        }
        if (lq->job_arg) { /* handler(key, payload, job) */
            lua_createtable(L, 0, 5);
            lua_pushinteger(L, lworker_failures(lq, t->job_key, t->job_keylen) + 1);
            lua_setfield(L, -2, "attempt");
            lua_pushvalue(L, W_KEY);
            lua_setfield(L, -2, "key");
            lprogress_set_meta(L); /* job:progress */
            lua_rawgeti(L, LUA_REGISTRYINDEX, lq->ref);
            lua_setfield(L, -2, "queue");
            lua_pushnumber(L, lqueue_enqueued_at(lq, info.id));
            lua_setfield(L, -2, "enqueued_at");
            if (info.group) {
                lua_pushlstring(L, info.group, info.grouplen);
                lua_setfield(L, -2, "group");
            }
            lflow_push_job(L, lq, t->job_key, t->job_keylen);
            nargs = 3;
        }
        if (lq->timeout_ns > 0) {
            wq_host *h = lq->host;
            t->deadline = wq_add_sat(wq_host_now(h), lq->timeout_ns);
            t->real_deadline = wq_add_sat(wq_real_now(), lq->timeout_ns);
            t->deadline_timer = wq_timer_start(h, t->deadline, deadline_fire, t);
            lua_sethook(L, timeout_hook, LUA_MASKCOUNT, 1000);
        }
        status = lua_pcallk(L, nargs, LUA_MULTRET, W_MSGH, PH_RAN, worker_k);
        phase = PH_RAN;
    }
    lq->live_workers--;
    return 0;
}

static int worker_main(lua_State *L)
{
    return worker_k(L, LUA_OK, PH_GET);
}

void lworker_start(lua_State *L, lqueue *lq)
{
    for (int i = 0; i < lq->workers; i++) {
        lua_pushcfunction(L, worker_main);
        lua_pushlightuserdata(L, lq);
        wq_task *t = wq_task_spawn(L, 1, TASK_WORKER);
        t->queue = lq;
        lq->live_workers++;
    }
}

void lworker_restore_failure(void *ud, const char *key, size_t len, int64_t requeues,
                             const char *last_error)
{
    lworker_restore *r = ud;
    if (lfail_set(r->lq, key, len, requeues, last_error) < 0 ||
        wq_limiter_set_requeues(r->lq->limiter, key, len, requeues) < 0)
        r->nomem = 1;
}

typedef struct dead_args {
    lqueue *lq;
    const wq_dead_row *d;
} dead_args;

static int restore_dead_p(lua_State *L)
{
    const dead_args *a = lua_touserdata(L, 1);
    const wq_dead_row *d = a->d;
    add_dead(L, a->lq, d->key, d->keylen, d->payload, d->payload ? d->paylen : 0,
             d->error ? d->error : "", d->traceback, d->attempts, d->failed_at);
    return 0;
}

void lworker_restore_dead(void *ud, const wq_dead_row *d)
{
    lworker_restore *r = ud;
    dead_args a = {r->lq, d};
    /* Protected: an error must not unwind through the store's reading
     * (its statement and transaction would stay open). */
    lua_pushcfunction(r->L, restore_dead_p);
    lua_pushlightuserdata(r->L, &a);
    if (lua_pcall(r->L, 1, 0, 0) != LUA_OK) {
        lua_pop(r->L, 1);
        r->nomem = 1;
    }
}
