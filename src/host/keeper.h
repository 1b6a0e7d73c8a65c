/*
 * The process keeper: a small process forked at start-up that outlives
 * nothing. It learns the process group of every wq.exec child over a
 * pipe; when the pipe ends (the runner exited or died, by any signal,
 * SIGKILL included) it kills every group it still knows with SIGKILL and
 * exits. `ps` shows it as wqrun-keeper.
 */
#ifndef WQ_KEEPER_H
#define WQ_KEEPER_H

#include <sys/types.h>

typedef struct wq_keeper wq_keeper;

/*
 * Forks the keeper. Call before any thread, file, socket or database
 * connection exists (the keeper closes what it inherits, but a thread
 * holding a lock at the fork would not be there to release it). Returns
 * the keeper, or NULL with *err set to an errno value.
 */
wq_keeper *wq_keeper_start(int *err);
/* The keeper's pid (for logs and tests). */
pid_t wq_keeper_pid(const wq_keeper *k);
/* Tells the keeper about a new process group: one 4-byte write. 0, or -1 when the keeper is gone.
 */
int wq_keeper_watch(wq_keeper *k, pid_t pgid);
/* The runner killed the group, or knows it empty: the keeper forgets it. 0, or -1 when gone. */
int wq_keeper_forget(wq_keeper *k, pid_t pgid);
/* After SIGCHLD: 1 if the keeper has just been found dead (then it stays gone), else 0. */
int wq_keeper_reap(wq_keeper *k);
/*
 * Closes the pipe: the keeper kills the groups it still knows and exits.
 * Waits for it, then frees k. NULL is fine.
 */
void wq_keeper_stop(wq_keeper *k);

#endif
