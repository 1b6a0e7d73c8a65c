/*
 * Process pools (SPEC 10.1): long-lived children of one argv that each
 * answer one JSON line on stdout for each JSON line written to their stdin,
 * one request at a time. Calls wait in FIFO order for a free process. A
 * process that exits, answers with something that is not one JSON line (or
 * a line over WQ_POOL_LINE_MAX bytes) or overruns the call timeout is
 * killed with its process group and replaced, and its call fails saying
 * which. No Lua here: the binding is src/lua/lpool.c.
 */
#ifndef WQ_POOL_H
#define WQ_POOL_H

#include "host/host.h"

#include <json-c/json_object.h>
#include <stdint.h>
#include <sys/types.h>

/* The longest reply line, without its newline. */
#define WQ_POOL_LINE_MAX (1024 * 1024)
/* The longest stderr line logged as one line (a longer one is logged in parts). */
#define WQ_POOL_ERR_LINE_MAX 4096

typedef struct wq_pool wq_pool;
typedef struct wq_pool_call wq_pool_call;

typedef struct wq_pool_spec {
    char *const *argv;  /* NULL-terminated; argv[0] is looked up in PATH (copied) */
    char *const *env;   /* NULL-terminated, or NULL for ours (copied) */
    const char *cwd;    /* NULL: ours (copied) */
    int size;           /* processes, >= 1 */
    int64_t timeout_ns; /* per call, from when a process takes it; 0: none */
} wq_pool_spec;

/* Called from the loop when the call is over (c->ok says how). */
typedef void (*wq_pool_fn)(wq_pool_call *c);
/* Whether a reply is one the caller understands: NULL, or why not (a static string). */
typedef const char *(*wq_pool_check_fn)(json_object *reply);

/* One call: the caller's memory, set up before wq_pool_call_start. */
struct wq_pool_call {
    /* The caller's: */
    const char *req; /* one line ending in '\n', borrowed until fn or wq_pool_abandon */
    size_t reqlen;
    wq_pool_fn fn;
    void *ud;
    wq_pool_check_fn check; /* NULL: any JSON value is a reply */
    const char *queue;      /* for the process's stderr lines: the queue and key it runs */
    const char *key;        /* (borrowed like req), NULL for a plain call */
    size_t keylen;
    /* The outcome, when fn is called: */
    int ok;
    json_object *reply; /* ok: the reply, the caller's to put (NULL: the JSON null) */
    char err[512];      /* !ok: why */
    /* The pool's: */
    int state;
    wq_pool *pool;
    struct pproc *proc;
    wq_pool_call *next, *prev;
};

/* What pool:stats() shows. */
typedef struct wq_pool_stats {
    int size, running, busy; /* processes: wanted, running now, running a call */
    size_t waiting;          /* calls waiting for a free process */
    uint64_t calls;          /* answered */
    uint64_t failed;         /* calls that failed (exit, bad reply, timeout, closed) */
    uint64_t started;        /* processes started, the first ones included */
} wq_pool_stats;

/*
 * Starts spec->size processes. 0 and *out, or an errno value when the first
 * one cannot be started (nothing left behind). The pool is the caller's
 * (wq_pool_free); the host kills its processes at exit (wq_pool_kill_all).
 */
int wq_pool_new(wq_host *h, const wq_pool_spec *spec, wq_pool **out);
/*
 * Starts c on a free process, or queues it behind the calls waiting. 0 (fn
 * will be called), or -1 with c->err set when it fails at once (the pool
 * is closed, or every process is down, restarting after a backoff).
 */
int wq_pool_call_start(wq_pool *p, wq_pool_call *c);
/* The caller no longer waits for c: a waiting call is dropped, a running
 * one's process is killed and replaced. fn is not called. Idle c is fine. */
void wq_pool_abandon(wq_pool_call *c);
/* Kills the processes; waiting and running calls fail ("pool closed"). Idempotent. */
void wq_pool_close(wq_pool *p);
/* Whether the pool is closed. */
int wq_pool_closed(const wq_pool *p);
/* Closes the pool without calling anyone back, then frees it. NULL is fine. */
void wq_pool_free(wq_pool *p);
/* The pool's numbers now. */
void wq_pool_get_stats(const wq_pool *p, wq_pool_stats *st);
/* The name of the pool's program, as logs show it (its argv[0]). */
const char *wq_pool_name(const wq_pool *p);

/* Handles SIGCHLD: reaps the pools' processes. */
void wq_pool_reap(wq_host *h);
/* At exit: kills every pool's processes and waits for them; nobody is called back. */
void wq_pool_kill_all(wq_host *h);

#endif
