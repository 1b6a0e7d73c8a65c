/*
 * The scheduler: every coroutine the runtime owns (main chunk, tasks,
 * timer callbacks, handler workers) is a task, and sched.c is the only
 * place that resumes one.
 */
#ifndef WQ_SCHED_H
#define WQ_SCHED_H

#include "host/host.h"

#include <lua.h>

typedef struct wq_sched wq_sched;
typedef struct wq_task wq_task;
struct lqueue;

typedef enum { TASK_ROOT, TASK_MAIN, TASK_SPAWN, TASK_TIMER, TASK_WORKER } wq_task_kind;
typedef enum { TS_READY, TS_RUNNING, TS_WAITING, TS_DEAD } wq_task_state;

/* A coroutine owned by the scheduler. */
struct wq_task {
    wq_sched *sched;
    wq_host *host;
    lua_State *co;
    int ref; /* registry reference anchoring co */
    wq_task_kind kind;
    wq_task_state state;
    int nargs;                  /* values on co's stack for the next resume */
    wq_task *next_ready;        /* run queue link */
    void (*cancel)(wq_task *t); /* undoes the current wait's registration */
    void *wait;                 /* the current wait's own data */
    uint64_t wait_timer;        /* the current wait's timer, 0 when none */
    wq_task *wnext, *wprev;     /* link in a waiter list */
    int64_t deadline;           /* handler timeout, WQ_NEVER when none */
    int64_t real_deadline;      /* the same on the real clock (CPU loops in virtual time) */
    uint64_t deadline_timer;    /* its timer id, 0 when none */
    const char *interrupt;      /* error to raise when resumed, or NULL */
    struct lqueue *queue;       /* worker: its queue */
    const char *job_key;        /* worker: the key of the job it runs, NULL between jobs */
    size_t job_keylen;
    int cancelled;          /* worker: an operator cancelled the job it runs */
    wq_task *anext, *aprev; /* every live task, for teardown */
    int id;
};

/* A FIFO list of waiting tasks. */
typedef struct wq_waitlist {
    wq_task *head, *tail;
} wq_waitlist;

struct wq_sched {
    wq_host *host;
    lua_State *L;
    wq_task root; /* stands for "not inside a task" (the main thread) */
    wq_task *ready_head, *ready_tail;
    wq_task *all;         /* every live task */
    struct event *run_ev; /* drains the run queue */
    int in_pass;          /* resuming tasks now */
    int ntasks;
    int next_task_id;
    int gcstress;       /* collect garbage before every resume (tests) */
    int hooks_running;  /* wq.on_shutdown hooks are running: a graceful stop waits for them */
    wq_waitlist idlers; /* tasks in wait_idle (lidle.c) */
};

/* The thread being resumed right now, NULL between resumes (read by signal handlers). */
extern lua_State *volatile wq_running;

/* Sets up the scheduler of L (whose extra space must be free) on host h. 0 or -1. */
int wq_sched_init(wq_sched *s, wq_host *h, lua_State *L);
/* Frees every task record (after lua_close) and the run event. */
void wq_sched_destroy(wq_sched *s);
/* Whether tasks are ready to run. */
int wq_sched_runnable(const wq_sched *s);
/* From a signal handler: makes the running thread yield at its next instruction. */
void wq_sched_preempt(void);
/*
 * From a signal handler, every WQ_WATCH_MS: when one resume has run for
 * over a second, has the running thread log (once) who holds the loop and
 * where.
 */
void wq_sched_watch(void);

/* The scheduler of a Lua state (any thread of it). */
static inline wq_sched *wq_sched_of(lua_State *L)
{
    return (*(wq_task **)lua_getextraspace(L))->sched;
}
/* The host of a Lua state (any thread of it). */
static inline wq_host *wq_host_of(lua_State *L)
{
    return (*(wq_task **)lua_getextraspace(L))->host;
}
/* The task running in L, or NULL when L is not a task (main thread, user coroutine). */
static inline wq_task *wq_task_of(lua_State *L)
{
    wq_task *t = *(wq_task **)lua_getextraspace(L);
    return t->kind != TASK_ROOT && t->co == L ? t : NULL;
}

/*
 * Creates a task whose coroutine will call the function at L's stack top
 * - nargs with the nargs values above it as arguments (all popped, as with
 * lua_call). Ready to run. Raises on out-of-memory (L must be protected).
 */
wq_task *wq_task_spawn(lua_State *L, int nargs, wq_task_kind kind);
/* Makes a waiting task ready; the nargs values already pushed on t->co are its results. */
void wq_task_wake(wq_task *t, int nargs);
/*
 * Suspends the running task t until woken: records cancel (called if the
 * wait is abandoned, e.g. on timeout) and yields with continuation k.
 * Never returns (longjmps through lua_yieldk).
 */
int wq_task_wait(lua_State *L, wq_task *t, void (*cancel)(wq_task *), lua_KContext ctx,
                 lua_KFunction k);
/*
 * Suspends the running task t until host time when (a timer), then
 * continues with k; raises "<fn>: out of memory" if no timer can be had.
 * Never returns.
 */
int wq_task_wait_until(lua_State *L, wq_task *t, int64_t when, const char *fn, lua_KContext ctx,
                       lua_KFunction k);
/* Interrupts t: cancels its wait (if waiting) and makes it raise msg when resumed. */
void wq_task_interrupt(wq_task *t, const char *msg);
/* In a continuation: raises the pending interrupt, if any. */
void wq_task_check_interrupt(lua_State *L, wq_task *t);
/*
 * Returns the running task of L, raising "<fn>: cannot wait here ..." when
 * L is not a task or cannot yield.
 */
wq_task *wq_task_require(lua_State *L, const char *fn);
/* A name for log lines: "main chunk", "task 3", "queue 'q' key 'k'"... */
void wq_task_describe(const wq_task *t, char *buf, size_t n);

/* Pushes tostring(value at idx) and returns it; never raises (a failing
 * __tostring gives "(error object is a T value)"). */
const char *wq_safe_tostring(lua_State *L, int idx);

void wq_waitlist_push(wq_waitlist *w, wq_task *t);
void wq_waitlist_remove(wq_waitlist *w, wq_task *t);
wq_task *wq_waitlist_pop(wq_waitlist *w);

#endif
