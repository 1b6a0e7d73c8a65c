/*
 * Host timers: sleeps, wq.after/wq.every, handler and exec timeouts, the
 * shutdown grace period, on the host clock (real or virtual).
 */
#ifndef WQ_TIMER_H
#define WQ_TIMER_H

#include "host/host.h"

/* Starts a timer at absolute host time when; returns its id (never 0) or 0 on OOM. */
uint64_t wq_timer_start(wq_host *h, int64_t when, wq_timer_fn fn, void *data);
/* As wq_timer_start, for housekeeping: a weak timer does not keep the process alive. */
uint64_t wq_timer_start_weak(wq_host *h, int64_t when, wq_timer_fn fn, void *data);
/* Stops a pending timer; a stale or zero id is ignored. */
void wq_timer_stop(wq_host *h, uint64_t id);
/* Earliest pending timer or delayed item, WQ_NEVER when none. */
int64_t wq_timer_next(wq_host *h);
/* The same, counting only delayed items someone waits for (they keep the process alive). */
int64_t wq_timer_next_awaited(wq_host *h);
/* Fires every due timer and delayed item. */
void wq_timer_run_due(wq_host *h);
/* An empty timer set (no allocation). */
void wq_timer_init(wq_host *h);
/* Frees the timer set. */
void wq_timer_destroy(wq_host *h);

#endif
