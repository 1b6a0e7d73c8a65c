/*
 * The process's monotonic clock in nanoseconds, cheap enough to read three
 * times per job: the CPU's time-stamp counter scaled by a rate measured
 * against CLOCK_MONOTONIC, re-anchored by the host's tick; plain
 * clock_gettime where the counter cannot be trusted (not x86-64, no
 * invariant TSC, or the kernel itself does not use it), and until the first
 * rate is known.
 */
#ifndef WQ_MONOTIME_H
#define WQ_MONOTIME_H

#include <stdint.h>

/* Decides whether the counter can be used; call once at start-up. */
void wq_monotime_init(void);
/* Re-anchors the counter on CLOCK_MONOTONIC and updates its rate (call every ~50 ms). */
void wq_monotime_calibrate(void);
/* Monotonic ns; never goes backwards. */
int64_t wq_monotime_now(void);
/* Whether the counter is in use (1) or clock_gettime (0). */
int wq_monotime_fast(void);

#endif
