/*
 * apimachinery's wait.Backoff: a sequence of growing durations with
 * optional jitter, a step budget and a cap. Randomness is injected.
 */
#ifndef WQ_BACKOFF_H
#define WQ_BACKOFF_H

#include <stdint.h>

/* Returns a uniform double in [0, 1). */
typedef double (*wq_rand_fn)(void *ud);

typedef struct wq_backoff {
    int64_t duration_ns; /* current duration */
    double factor;       /* multiplier per step; 0 keeps duration */
    double jitter;       /* > 0: add up to jitter*duration at random */
    int64_t steps;       /* steps left before duration stops changing */
    int64_t cap_ns;      /* > 0: duration never exceeds it (and steps end) */
    wq_rand_fn rand;     /* NULL: the C library's rand() */
    void *rand_ud;
} wq_backoff;

/* Returns the current duration (jittered) and advances to the next. */
int64_t wq_backoff_step(wq_backoff *b);
/* d + random[0,1) * f * d; f <= 0 means 1.0. */
int64_t wq_jitter(int64_t d_ns, double f, wq_rand_fn rand, void *ud);

#endif
