/*
 * Operating a live runner from outside (SPEC 7.5): rows of the state
 * file's commands table, written by `wqrun pause|remove|...`, applied to
 * the queues; and the waiters for cancelled handler runs.
 */
#ifndef WQ_COMMANDS_H
#define WQ_COMMANDS_H

#include "host/host.h"

/* Applies new rows of the commands table; their outcomes go with the next commit. */
void wq_commands_poll(wq_host *h);
/* The process ends: tells every wq_host_when_cancelled waiter no (fn(ud, 0)). */
void wq_commands_abandon(wq_host *h);

/*
 * Calls fn(ud, 1) once the handler run of key on queue q, which an
 * operator cancelled, has ended (fn(ud, 0) if the process ends first).
 * 0, or -1 on OOM (fn not called).
 */
int wq_host_when_cancelled(wq_host *h, void *q, const char *key, size_t len, wq_durable_fn fn,
                           void *ud);
/* A cancelled handler run of key on queue q has ended: tells who waits for it. */
void wq_host_cancelled(wq_host *h, void *q, const char *key, size_t len);

#endif
