/*
 * Waiting for idle queues: q:wait_idle([timeout]) and wq.wait_idle([timeout])
 * (SPEC section 12). A waiting task sits in the scheduler's idlers list; every
 * time the loop settles, lidle_settled wakes those whose queue (or every
 * queue) has nothing queued, waiting or processing, with true. A timeout
 * wakes one with false. No script polls.
 */
#include "lua/lidle.h"

#include "engine/flow.h"
#include "host/timer.h"
#include "lua/lwq.h"

#include <lauxlib.h>

/* t->wait of a task waiting for every queue (one of a queue holds its lqueue). */
static char every_queue;

/* Nothing queued, delayed, processing, being added, blocked in a flow or held by a backend. */
static int queue_idle(lqueue *lq)
{
    if (lq->add_waits || wq_queue_len(lq->q) > 0 || wq_queue_waiting(lq->q) > 0 ||
        wq_queue_processing(lq->q) > 0)
        return 0;
    if (lq->host->flows && wq_flows_blocks(lq->host->flows, lq->name))
        return 0;
    /* Rows a shared database holds, this runner's or others' (asks it when not known). */
    return !(lq->bq && wq_bq_pending(lq->bq));
}

static int all_idle(wq_host *h)
{
    for (int i = 0; i < h->nqueues; i++)
        if (!queue_idle(h->queues[i].q)) /* every queue of the host is an lqueue */
            return 0;
    return 1;
}

static int is_idle(wq_task *t)
{
    return t->wait == &every_queue ? all_idle(t->host) : queue_idle(t->wait);
}

static void idle_cancel(wq_task *t)
{
    wq_timer_stop(t->host, t->wait_timer);
    t->wait_timer = 0;
    wq_waitlist_remove(&t->sched->idlers, t);
}

static void on_timeout(wq_host *h, void *data, uint64_t id)
{
    (void)h;
    (void)id;
    wq_task *t = data;
    t->wait_timer = 0;
    wq_waitlist_remove(&t->sched->idlers, t);
    lua_pushboolean(t->co, 0);
    wq_task_wake(t, 1);
}

void lidle_settled(wq_sched *s)
{
    wq_task *t = s->idlers.head;
    while (t) {
        wq_task *next = t->wnext;
        if (is_idle(t)) {
            wq_timer_stop(t->host, t->wait_timer);
            t->wait_timer = 0;
            wq_waitlist_remove(&s->idlers, t);
            lua_pushboolean(t->co, 1);
            wq_task_wake(t, 1);
        }
        t = next;
    }
}

static int wait_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    wq_task_check_interrupt(L, wq_task_of(L));
    return 1; /* the boolean the waker pushed */
}

/* Waits in the task for what wait names (a queue, or &every_queue), until timeout at idx. */
static int wait_idle(lua_State *L, const char *fn, void *wait, int idx)
{
    double timeout = -1;
    if (!lua_isnoneornil(L, idx))
        timeout = wq_checkduration(L, idx, fn, "timeout", 1);
    wq_task *t = wq_task_require(L, fn);
    t->wait = wait;
    if (is_idle(t)) {
        lua_pushboolean(L, 1);
        return 1;
    }
    if (timeout == 0) {
        lua_pushboolean(L, 0);
        return 1;
    }
    if (timeout > 0) {
        int64_t when = wq_add_sat(wq_host_now(t->host), wq_seconds_to_ns(timeout));
        t->wait_timer = wq_timer_start(t->host, when, on_timeout, t);
        if (!t->wait_timer)
            return luaL_error(L, "%s: out of memory", fn);
    }
    wq_waitlist_push(&t->sched->idlers, t);
    /* A backend that does not know yet whether it holds rows finds out. */
    if (wait != &every_queue && ((lqueue *)wait)->bq)
        wq_bq_want(((lqueue *)wait)->bq);
    return wq_task_wait(L, t, idle_cancel, 0, wait_k);
}

static int queue_wait_idle(lua_State *L)
{
    lqueue *lq = lqueue_check(L, "wait_idle");
    return wait_idle(L, "wait_idle", lq, 2);
}

static int wq_wait_idle(lua_State *L)
{
    wq_host *h = wq_host_of(L);
    for (int i = 0; i < h->nqueues; i++)
        if (((lqueue *)h->queues[i].q)->bq)
            wq_bq_want(((lqueue *)h->queues[i].q)->bq);
    return wait_idle(L, "wait_idle", &every_queue, 1);
}

const luaL_Reg lidle_methods[] = {{"wait_idle", queue_wait_idle}, {NULL, NULL}};
const luaL_Reg lidle_funcs[] = {{"wait_idle", wq_wait_idle}, {NULL, NULL}};
