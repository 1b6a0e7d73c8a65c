/*
 * apimachinery's wait.Backoff.Step and wait.Jitter (see backoff.h and
 * WORKQUEUE.md). Go converts float64 to Duration without checks; here every
 * float-to-int conversion saturates, so a large factor or jitter gives
 * INT64_MAX (WQ_NEVER) instead of undefined behaviour.
 */
#include "engine/backoff.h"

#include "engine/common.h"

#include <math.h>
#include <stdlib.h>

/* x as int64 nanoseconds, truncated toward zero, saturating at the ends. */
static int64_t to_ns(double x)
{
    if (isnan(x))
        return 0;
    if (x >= 9223372036854775808.0)
        return INT64_MAX;
    if (x < -9223372036854775808.0)
        return INT64_MIN;
    return (int64_t)x;
}

static double libc_rand(void)
{
    /* RAND_MAX + 1 keeps the result below 1, as the contract asks. */
    return (double)rand() / ((double)RAND_MAX + 1.0);
}

int64_t wq_jitter(int64_t d_ns, double f, wq_rand_fn rand_fn, void *ud)
{
    if (!(f > 0)) /* also catches NaN */
        f = 1.0;
    double r = rand_fn ? rand_fn(ud) : libc_rand();
    return wq_add_sat(d_ns, to_ns(r * f * (double)d_ns));
}

int64_t wq_backoff_step(wq_backoff *b)
{
    if (b->steps < 1) {
        if (b->jitter > 0)
            return wq_jitter(b->duration_ns, b->jitter, b->rand, b->rand_ud);
        return b->duration_ns;
    }
    b->steps--;
    int64_t cur = b->duration_ns;
    /* A NaN factor is treated like 0: there is no sensible next value. */
    if (b->factor != 0 && !isnan(b->factor)) {
        b->duration_ns = to_ns((double)b->duration_ns * b->factor);
        if (b->cap_ns > 0 && b->duration_ns > b->cap_ns) {
            b->duration_ns = b->cap_ns;
            b->steps = 0;
        }
    }
    /* Only the returned value is jittered; the sequence itself stays clean. */
    if (b->jitter > 0)
        return wq_jitter(cur, b->jitter, b->rand, b->rand_ud);
    return cur;
}
