/*
 * The engine never reads the system clock: its owner injects one. The host
 * gives the libevent monotonic (or virtual) clock, tests a fake one they
 * step by hand, so no engine test ever sleeps.
 */
#ifndef WQ_CLOCK_H
#define WQ_CLOCK_H

#include <stdint.h>

typedef struct wq_clock {
    int64_t (*now)(void *ud); /* monotonic nanoseconds */
    void *ud;
} wq_clock;

static inline int64_t wq_clock_now(const wq_clock *c)
{
    return c->now(c->ud);
}

#endif
