/*
 * The scheduler: the only place that resumes coroutines. A task becomes
 * ready when something wakes it; waking only queues it and activates the
 * run event, so a producer never runs a consumer inline. The run event
 * resumes ready tasks in FIFO order and reports how each one stopped.
 */
#include "lua/sched.h"

#include "engine/common.h"
#include "host/progress.h"
#include "host/timer.h"
#include "lua/lcron.h"
#include "lua/ljson.h"
#include "lua/lqueue.h"
#include "lua/lwq.h"

#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

lua_State *volatile wq_running;
static volatile unsigned long resume_seq; /* counts resumes, for the watchdog */

static int tostring_k(lua_State *L)
{
    luaL_tolstring(L, 1, NULL);
    return 1;
}

const char *wq_safe_tostring(lua_State *L, int idx)
{
    idx = lua_absindex(L, idx);
    /* A table without __tostring (error({code = 5})) shows as JSON when it has that form. */
    if (lua_type(L, idx) == LUA_TTABLE) {
        if (luaL_getmetafield(L, idx, "__tostring") != LUA_TNIL)
            lua_pop(L, 1);
        else if (wq_ljson_encode(L, idx) == LUA_OK)
            return lua_tostring(L, -1);
        else
            lua_pop(L, 1); /* the encoder's message: tostring's "table: 0x..." then */
    }
    lua_pushcfunction(L, tostring_k);
    lua_pushvalue(L, idx);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK || lua_type(L, -1) != LUA_TSTRING) {
        lua_pop(L, 1);
        lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, idx));
    }
    return lua_tostring(L, -1);
}

wq_task *wq_task_require(lua_State *L, const char *fn)
{
    wq_task *t = wq_task_of(L);
    if (!t || !lua_isyieldable(L))
        luaL_error(L,
                   "%s: cannot wait here (only inside the main chunk, a task, a handler "
                   "or a timer callback, and not inside a coroutine of your own)",
                   fn);
    /* A handler past its deadline is not refused here: its deadline timer
     * is due and, when it fires, counts the timeout and ends the wait. */
    if (t->cancelled) { /* an operator cancelled the job: it waits for nothing more */
        lua_pushstring(L, "cancelled");
        lua_error(L);
    }
    return t;
}

static void enqueue(wq_sched *h, wq_task *t)
{
    t->state = TS_READY;
    t->next_ready = NULL;
    if (h->ready_tail)
        h->ready_tail->next_ready = t;
    else
        h->ready_head = t;
    h->ready_tail = t;
    /* Inside a pass, on_run schedules the next one itself. */
    if (!h->in_pass)
        event_active(h->run_ev, EV_READ, 0);
}

wq_task *wq_task_spawn(lua_State *L, int nargs, wq_task_kind kind)
{
    wq_sched *h = wq_sched_of(L);
    /* The Lua allocations first: they raise on out-of-memory, and nothing
     * of ours exists yet to leak. */
    lua_State *co = lua_newthread(L);
    int ref = luaL_ref(L, LUA_REGISTRYINDEX);
    wq_task *t = calloc(1, sizeof *t);
    if (!t) {
        luaL_unref(L, LUA_REGISTRYINDEX, ref);
        luaL_error(L, "out of memory");
    }
    t->ref = ref;
    t->sched = h;
    t->host = h->host;
    t->co = co;
    t->kind = kind;
    t->deadline = WQ_NEVER;
    t->id = ++h->next_task_id;
    *(wq_task **)lua_getextraspace(co) = t;
    lua_xmove(L, co, nargs + 1); /* the function and its arguments, in order */
    t->nargs = nargs;
    h->ntasks++;
    t->anext = h->all;
    if (h->all)
        h->all->aprev = t;
    h->all = t;
    enqueue(h, t);
    return t;
}

void wq_task_wake(wq_task *t, int nargs)
{
    if (t->state != TS_WAITING)
        return;
    t->cancel = NULL;
    t->wait = NULL;
    t->nargs = nargs;
    enqueue(t->sched, t);
}

int wq_task_wait(lua_State *L, wq_task *t, void (*cancel)(wq_task *), lua_KContext ctx,
                 lua_KFunction k)
{
    t->state = TS_WAITING;
    t->cancel = cancel;
    return lua_yieldk(L, 0, ctx, k);
}

static void timer_wake(wq_host *h, void *data, uint64_t id)
{
    (void)h;
    (void)id;
    wq_task *t = data;
    t->wait_timer = 0;
    wq_task_wake(t, 0);
}

static void timer_cancel(wq_task *t)
{
    wq_timer_stop(t->host, t->wait_timer);
    t->wait_timer = 0;
}

int wq_task_wait_until(lua_State *L, wq_task *t, int64_t when, const char *fn, lua_KContext ctx,
                       lua_KFunction k)
{
    t->wait_timer = wq_timer_start(t->host, when, timer_wake, t);
    if (!t->wait_timer)
        return luaL_error(L, "%s: out of memory", fn);
    return wq_task_wait(L, t, timer_cancel, ctx, k);
}

void wq_task_interrupt(wq_task *t, const char *msg)
{
    t->interrupt = msg;
    if (t->state == TS_WAITING) {
        if (t->cancel)
            t->cancel(t);
        t->cancel = NULL;
        lua_settop(t->co, 0);
        wq_task_wake(t, 0);
    }
}

void wq_task_check_interrupt(lua_State *L, wq_task *t)
{
    if (t->interrupt) {
        const char *msg = t->interrupt;
        t->interrupt = NULL;
        lua_pushstring(L, msg);
        lua_error(L);
    }
}

static void finish(wq_sched *h, wq_task *t)
{
    t->state = TS_DEAD;
    luaL_unref(h->L, LUA_REGISTRYINDEX, t->ref);
    h->ntasks--;
    if (t->aprev)
        t->aprev->anext = t->anext;
    else
        h->all = t->anext;
    if (t->anext)
        t->anext->aprev = t->aprev;
    free(t);
}

void wq_sched_destroy(wq_sched *h)
{
    while (h->all) {
        wq_task *t = h->all;
        h->all = t->anext;
        free(t);
    }
    h->ready_head = h->ready_tail = NULL;
    h->ntasks = 0;
    if (h->run_ev)
        event_free(h->run_ev);
    h->run_ev = NULL;
}

int wq_sched_runnable(const wq_sched *s)
{
    return s->ready_head != NULL;
}

void wq_task_describe(const wq_task *t, char *buf, size_t n)
{
    switch (t->kind) {
    case TASK_MAIN: snprintf(buf, n, "main chunk"); break;
    case TASK_TIMER: snprintf(buf, n, "timer callback (task %d)", t->id); break;
    case TASK_WORKER: snprintf(buf, n, "worker of queue '%s'", wq_lqueue_name(t->queue)); break;
    default: snprintf(buf, n, "task %d", t->id); break;
    }
}

/*
 * Reports a task's error (message + traceback of co) and exits 1. Runs
 * inside the pass's protected call: an allocation failure here is caught.
 */
static void task_failed(wq_sched *h, wq_task *t)
{
    wq_host *host = h->host;
    if (host->exiting)
        return;
    /* co is dead: run the error object's __tostring (which may fail) on
     * the main thread, and only read co's stack for the traceback. */
    lua_State *L = h->L;
    lua_xmove(t->co, L, 1);
    const char *msg = wq_safe_tostring(L, -1);
    luaL_traceback(L, t->co, msg, 0);
    const char *what = t->kind == TASK_MAIN     ? "main chunk"
                       : t->kind == TASK_TIMER  ? "timer callback"
                       : t->kind == TASK_WORKER ? "worker"
                                                : "task";
    wq_log(WQ_LOG_ERROR, "wqrun: error in %s: %s", what, lua_tostring(L, -1));
    lua_pop(L, 3);
    wq_host_exit(host, 1);
}

static void resume(wq_sched *h, wq_task *t)
{
    int nres;
    t->state = TS_RUNNING;
    int nargs = t->nargs;
    t->nargs = 0;
    if (h->gcstress)
        lua_gc(h->L, LUA_GCCOLLECT);
    resume_seq++;
    wq_running = t->co;
    int st = lua_resume(t->co, h->L, nargs, &nres);
    wq_running = NULL;
    if (st == LUA_YIELD) {
        lua_pop(t->co, nres);
        if (t->state == TS_RUNNING) /* a plain yield: let the others run, then continue */
            enqueue(h, t);
        return;
    }
    if (st == LUA_OK) {
        if (t->kind == TASK_MAIN) /* its schedules are defined by now */
            lcron_report_undefined(h->host);
        finish(h, t);
        return;
    }
    task_failed(h, t);
    finish(h, t);
}

/*
 * One pass over the tasks ready now, inside a protected call: lua_resume
 * protects the coroutines, this protects what the pass itself does on the
 * main thread (error reports, unrefs), so nothing here can panic.
 */
static int run_pass(lua_State *L)
{
    wq_sched *h = lua_touserdata(L, 1);
    /* Only the tasks ready now: tasks woken meanwhile run in the next pass,
     * so the loop gets a chance to look at timers, signals and sockets. */
    wq_task *tail = h->ready_tail;
    while (h->ready_head && !h->host->exiting) {
        wq_task *t = h->ready_head;
        h->ready_head = t->next_ready;
        if (!h->ready_head)
            h->ready_tail = NULL;
        int last = t == tail;
        resume(h, t);
        if (last)
            break;
    }
    return 0;
}

/* The run event: resumes the tasks that are ready now. */
static void on_run(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    wq_sched *h = arg;
    wq_host *host = h->host;
    h->in_pass = 1;
    lua_State *L = h->L;
    lua_pushcfunction(L, run_pass);
    lua_pushlightuserdata(L, h);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
        wq_log(WQ_LOG_ERROR, "wqrun: %s; stopping", wq_safe_tostring(L, -1));
        lua_settop(L, 0);
        wq_host_exit(host, 1);
    }
    h->in_pass = 0;
    /* Not event_active: libevent would run us again in this same iteration,
     * without polling. A zero timeout comes after the next poll. */
    if (h->ready_head && !host->exiting) {
        static const struct timeval zero = {0, 0};
        event_add(h->run_ev, &zero);
    }
    wq_host_settle(host);
}

int wq_sched_init(wq_sched *s, wq_host *h, lua_State *L)
{
    memset(s, 0, sizeof *s);
    s->host = h;
    s->L = L;
    s->root.kind = TASK_ROOT;
    s->root.sched = s;
    s->root.host = h;
    s->root.co = L;
    *(wq_task **)lua_getextraspace(L) = &s->root;
    s->run_ev = event_new(h->base, -1, 0, on_run, s);
    if (!s->run_ev)
        return -1;
    const char *e = getenv("WQ_TEST_GCSTRESS");
    s->gcstress = e && *e && strcmp(e, "0") != 0;
    return 0;
}

void wq_waitlist_push(wq_waitlist *w, wq_task *t)
{
    t->wnext = NULL;
    t->wprev = w->tail;
    if (w->tail)
        w->tail->wnext = t;
    else
        w->head = t;
    w->tail = t;
}

void wq_waitlist_remove(wq_waitlist *w, wq_task *t)
{
    if (t->wprev)
        t->wprev->wnext = t->wnext;
    else if (w->head == t)
        w->head = t->wnext;
    else
        return; /* not in this list */
    if (t->wnext)
        t->wnext->wprev = t->wprev;
    else
        w->tail = t->wprev;
    t->wnext = t->wprev = NULL;
}

wq_task *wq_waitlist_pop(wq_waitlist *w)
{
    wq_task *t = w->head;
    if (t)
        wq_waitlist_remove(w, t);
    return t;
}

/*
 * Preemption for signals: if Lua code is running when SIGINT/SIGTERM
 * arrives (a handler stuck in a computation), a one-instruction count hook
 * on that thread yields back to the scheduler, so the loop sees the signal
 * and the graceful stop (or the second signal's immediate exit) happens.
 */
static lua_Hook saved_hook;
static int saved_mask, saved_count;

static void preempt_hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    lua_sethook(L, saved_hook, saved_mask, saved_count);
    if (lua_isyieldable(L))
        lua_yield(L, 0);
}

void wq_sched_preempt(void)
{
    lua_State *L = wq_running;
    if (L && lua_gethook(L) != preempt_hook) {
        saved_hook = lua_gethook(L);
        saved_mask = lua_gethookmask(L);
        saved_count = lua_gethookcount(L);
        lua_sethook(L, preempt_hook, LUA_MASKCOUNT, 1);
    }
}

/*
 * The watchdog: a task that runs for over a second without yielding holds
 * the loop (timers, HTTP, delayed items all wait). The signal only counts
 * ticks; the report is made by a one-instruction hook on the running
 * thread, in ordinary context, where it can read the position.
 */
#define STALL_TICKS (1000 / WQ_WATCH_MS) /* ticks of one resume: 1 s */

static lua_Hook stall_saved_hook;
static int stall_saved_mask, stall_saved_count;
static volatile unsigned long watched_seq, reported_seq;
static volatile int watched_ticks;

static void stall_hook(lua_State *L, lua_Debug *ar)
{
    lua_sethook(L, stall_saved_hook, stall_saved_mask, stall_saved_count);
    char where[256] = "?";
    if (lua_getinfo(L, "Sl", ar) && ar->currentline > 0)
        snprintf(where, sizeof where, "%s:%d", ar->short_src, ar->currentline);
    wq_task *t = wq_running ? *(wq_task **)lua_getextraspace(wq_running) : NULL;
    if (!t || t->kind == TASK_ROOT)
        return;
    char who[160];
    wq_task_describe(t, who, sizeof who);
    char shown[WQ_SHOWN_KEY], key[WQ_SHOWN_KEY + 16] = "";
    if (t->kind == TASK_WORKER && t->job_key) {
        wq_show_key(shown, t->job_key, t->job_keylen);
        snprintf(key, sizeof key, " (key '%s')", shown);
    }
    wq_host_log(t->host,
                "wqrun: %s%s has held the loop for over %d s without yielding, at %s; timers, "
                "HTTP and delayed items wait meanwhile (a long loop should call wq.sleep(0) "
                "now and then)",
                who, key, STALL_TICKS * WQ_WATCH_MS / 1000, where);
}

void wq_sched_watch(void)
{
    lua_State *L = wq_running;
    unsigned long seq = resume_seq;
    if (!L || seq != watched_seq) {
        watched_seq = seq;
        watched_ticks = 0;
        return;
    }
    if (++watched_ticks < STALL_TICKS || reported_seq == seq)
        return;
    reported_seq = seq;
    lua_Hook cur = lua_gethook(L);
    if (cur == stall_hook || cur == preempt_hook)
        return;
    stall_saved_hook = cur;
    stall_saved_mask = lua_gethookmask(L);
    stall_saved_count = lua_gethookcount(L);
    lua_sethook(L, stall_hook, LUA_MASKCOUNT, 1);
}
