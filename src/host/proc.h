/*
 * Child processes for wq.exec: spawned without a shell, their output
 * collected through pipes the loop watches, reaped on SIGCHLD, killed
 * (with their process group) on timeout or when their waiter goes away.
 */
#ifndef WQ_PROC_H
#define WQ_PROC_H

#include "host/host.h"

#include <sys/types.h>

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

/* The pieces every child of wqrun is started with (wq.exec here, pools in pool.c). */

/*
 * Three pipes for a child: parent[0] writes its stdin, parent[1] and [2]
 * read its stdout and stderr (non-blocking, close-on-exec); child[] are the
 * other ends. 0, or an errno value with nothing left open.
 */
int wq_proc_pipes(int parent[3], int child[3]);
/* Closes the descriptors of fd that are open and sets them to -1. */
void wq_proc_close_fds(int fd[3]);
/*
 * Starts spec's argv (no shell; argv[0] looked up in PATH; env, cwd) on the
 * child ends, in a process group of its own, with the default signal
 * dispositions; closes child[] either way. 0 and *pid, or an errno value.
 */
int wq_proc_exec(const wq_proc_spec *spec, int child[3], pid_t *pid);
/* Tells the keeper about the group pgid: 1 if it knows it now, 0 without a keeper. */
int wq_proc_keep(wq_host *h, pid_t pgid);
/* The group is killed or empty: the keeper forgets it (when *kept; clears *kept). */
void wq_proc_unkeep(wq_host *h, pid_t pgid, int *kept);
/* SIGKILL to the process group of pid and to pid, and the keeper forgets the group. */
void wq_proc_kill_group(wq_host *h, pid_t pid, int *kept);
/* After SIGCHLD: notices a dead keeper (and goes on without it). */
void wq_proc_reap_keeper(wq_host *h);

#endif
