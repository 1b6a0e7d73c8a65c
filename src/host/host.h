/*
 * The wqrun host: one libevent loop, one Lua state, and the scheduler that
 * owns every coroutine. This header is internal to the host and the Lua
 * bindings (src/host, src/lua); main.c only sees wq_host_main.
 */
#ifndef WQ_HOST_H
#define WQ_HOST_H

#include "engine/clock.h"
#include "engine/delay.h"
#include "engine/queue.h"

#include <event2/event.h>
#include <lua.h>

typedef struct wq_host wq_host;
typedef struct wq_task wq_task;
struct lqueue;
struct wq_store;

typedef enum { TASK_ROOT, TASK_MAIN, TASK_SPAWN, TASK_TIMER, TASK_WORKER } wq_task_kind;
typedef enum { TS_READY, TS_RUNNING, TS_WAITING, TS_DEAD } wq_task_state;

/* A coroutine owned by the host. */
struct wq_task {
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
    wq_task *anext, *aprev;     /* every live task, for teardown */
    int id;
};

/* A FIFO list of waiting tasks. */
typedef struct wq_waitlist {
    wq_task *head, *tail;
} wq_waitlist;

/* What a timer does when it fires; id is the timer's id. */
typedef void (*wq_timer_fn)(wq_host *h, void *data, uint64_t id);

typedef struct wq_timer_slot {
    wq_timer_fn fn; /* NULL: free slot */
    void *data;
    uint32_t gen;
    uint32_t next_free;
} wq_timer_slot;

typedef struct wq_host_opts {
    const char *db_path;
    const char *listen;
    const char *token;
    double grace;
    int sync_full;
    int serve;
    int quiet;
    int virtual_time;
} wq_host_opts;

struct wq_host {
    struct event_base *base;
    lua_State *L;
    wq_host_opts opts;
    wq_clock clock;
    int64_t vnow;       /* virtual clock, ns */
    int64_t start_mono; /* clock at start */
    double start_unix;  /* wall clock at start */

    wq_task root; /* stands for "not inside a task" (the main thread) */
    wq_task *ready_head, *ready_tail;
    wq_task *all;                      /* every live task */
    struct event *run_ev;              /* drains the run queue */
    struct event *timer_ev;            /* fires due timers and delayed items */
    struct event *sig_ev, *sigchld_ev; /* SIGINT/SIGTERM (through a pipe), SIGCHLD */
    struct event *tick_ev;             /* periodic: inbox poll, progress */
    struct event *flush_ev;            /* ends a group-commit window */
    int64_t last_flush;                /* real ns of the last commit */
    int64_t busy_since;                /* real ns the state file became locked, 0 when not */
    int64_t flush_backoff;             /* wait before the next attempt while locked */
    int ntasks;
    int next_task_id;

    wq_delay timers;
    wq_timer_slot *slots;
    uint32_t nslots, free_slot;
    int64_t armed; /* deadline timer_ev is armed for, WQ_NEVER when none */

    struct lqueue **queues;
    int nqueues, queues_cap;

    int children; /* running child processes */
    void *execs;  /* list of running exec records */

    int in_pass;      /* wq_sched_run is resuming tasks */
    int store_failed; /* a commit failed: no more writes, exit 1 */
    int stopping;     /* a signal asked for a graceful stop */
    int exiting;      /* the loop is breaking */
    int exit_code;
    uint64_t grace_timer;

    struct wq_store *store;
    void *http;     /* the HTTP server, when listening */
    void *progress; /* the progress line, when shown */
    uint64_t handler_timeouts;
    int gcstress; /* collect garbage before every resume (tests) */
};

/* The thread being resumed right now, NULL between resumes (read by signal handlers). */
extern lua_State *volatile wq_running;

/* Runs wqrun with the given options and script; returns the exit status. */
int wq_host_main(const wq_host_opts *opts, const char *script, int argc, char **argv);

/* The host of a Lua state (any thread of it). */
wq_host *wq_host_of(lua_State *L);
/* Monotonic ns of the real clock, whatever the host clock is. */
int64_t wq_real_now(void);
/* Current time in ns on the host clock (virtual or monotonic). */
int64_t wq_host_now(wq_host *h);
/* Wall-clock Unix seconds for a host-clock time. */
double wq_host_unix(wq_host *h, int64_t mono);
/* Ends the loop with the given status (after the current callback). */
void wq_host_exit(wq_host *h, int code);
/* Reports a fatal Lua error (message + traceback of co) and exits 1. */
void wq_host_fail(wq_host *h, lua_State *co, const char *what);

/* Pushes tostring(value at idx) and returns it; never raises (a failing
 * __tostring gives "(error object is a T value)"). */
const char *wq_safe_tostring(lua_State *L, int idx);
/* Re-arms the timer and checks for idle/virtual-time jumps; call after state changes. */
void wq_host_settle(wq_host *h);
/* Registers a queue with the host (for timers, idle checks, signals). 0 or -1. */
int wq_host_add_queue(wq_host *h, struct lqueue *q);
/* Writes a timestamped line to stderr (above the progress line). */
void wq_host_log(wq_host *h, const char *fmt, ...);

/* ---- scheduler (sched.c) ---- */

/* The task running in L, or NULL when L is not a host task (main thread, user coroutine). */
wq_task *wq_task_of(lua_State *L);
/*
 * Creates a task whose coroutine will call the function at L's stack top
 * - nargs with the nargs values above it as arguments (all popped, as with
 * lua_call). Ready to run. NULL on OOM.
 */
wq_task *wq_task_spawn(wq_host *h, lua_State *L, int nargs, wq_task_kind kind);
/* Makes a waiting task ready; the nargs values already pushed on t->co are its results. */
void wq_task_wake(wq_task *t, int nargs);
/*
 * Suspends the running task t until woken: records cancel (called if the
 * wait is abandoned, e.g. on timeout) and yields with continuation k.
 * Never returns (longjmps through lua_yieldk).
 */
int wq_task_wait(lua_State *L, wq_task *t, void (*cancel)(wq_task *), lua_KContext ctx,
                 lua_KFunction k);
/* Interrupts t: cancels its wait (if waiting) and makes it raise msg when resumed. */
void wq_task_interrupt(wq_task *t, const char *msg);
/* In a continuation: raises the pending interrupt, if any. */
void wq_task_check_interrupt(lua_State *L, wq_task *t);
/*
 * Returns the running task of L, raising "<fn>: cannot wait here ..." when
 * L is not a host task or cannot yield.
 */
wq_task *wq_task_require(lua_State *L, const char *fn);

/* The run event's callback. */
void wq_sched_run(evutil_socket_t fd, short what, void *arg);
/* Frees every task (teardown, after lua_close). */
void wq_sched_free_all(wq_host *h);

void wq_waitlist_push(wq_waitlist *w, wq_task *t);
void wq_waitlist_remove(wq_waitlist *w, wq_task *t);
wq_task *wq_waitlist_pop(wq_waitlist *w);

/* ---- timers (timer.c) ---- */

/* Starts a timer at absolute host time when; returns its id (never 0) or 0 on OOM. */
uint64_t wq_timer_start(wq_host *h, int64_t when, wq_timer_fn fn, void *data);
/* Stops a pending timer; a stale or zero id is ignored. */
void wq_timer_stop(wq_host *h, uint64_t id);
/* Earliest pending timer or delayed item, WQ_NEVER when none. */
int64_t wq_timer_next(wq_host *h);
/* Fires every due timer and delayed item. */
void wq_timer_run_due(wq_host *h);
void wq_timer_init(wq_host *h);
void wq_timer_destroy(wq_host *h);

/* ---- child processes (exec.c) ---- */

/* wq.exec(argv [, opts]) */
int wq_exec_lua(lua_State *L);
/* Handles SIGCHLD: reaps exited children. */
void wq_exec_reap(wq_host *h);
/* Kills and reaps every running child (at exit). */
void wq_exec_kill_all(wq_host *h);

#endif
