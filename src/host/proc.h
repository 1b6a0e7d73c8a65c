/*
 * Child processes for wq.exec: spawned without a shell, their output
 * collected through pipes the loop watches, reaped on SIGCHLD, killed
 * (with their process group) on timeout or when their waiter goes away.
 */
#ifndef WQ_PROC_H
#define WQ_PROC_H

#include "host/host.h"

typedef struct wq_proc wq_proc;

typedef struct wq_proc_spec {
    char *const *argv; /* NULL-terminated; argv[0] is looked up in PATH */
    char *const *env;  /* NULL-terminated, or NULL for ours */
    const char *cwd;   /* NULL: ours */
    const char *in;    /* standard input (copied), may be NULL */
    size_t inlen;
    int64_t timeout_ns; /* kill after this long (host clock), 0: never */
} wq_proc_spec;

typedef struct wq_proc_result {
    int exited;    /* ended by exit: status is valid */
    int status;    /* exit status */
    int signal;    /* the signal that ended it, 0 when exited */
    int timed_out; /* killed by the timeout */
    const char *out, *err;
    size_t outlen, errlen;
} wq_proc_result;

/* Called once when the child has exited and its output is complete. */
typedef void (*wq_proc_fn)(void *ud, wq_proc *p);

/*
 * Spawns a child; fn(ud, p) is called from the loop when it is finished.
 * Returns 0 and sets *out, or an errno value (nothing to free).
 */
int wq_proc_spawn(wq_host *h, const wq_proc_spec *spec, wq_proc_fn fn, void *ud, wq_proc **out);
/* The result of a finished child; valid until wq_proc_free. */
const wq_proc_result *wq_proc_output(const wq_proc *p);
/* Frees a finished child's record (after its callback). */
void wq_proc_free(wq_proc *p);
/* The waiter is gone: kills the child; the record frees itself, no callback. */
void wq_proc_abandon(wq_proc *p);
/* Handles SIGCHLD: reaps exited children. */
void wq_proc_reap(wq_host *h);
/* Kills and reaps every running child (at exit). */
void wq_proc_kill_all(wq_host *h);

#endif
