/*
 * The process clock (host/monotime.c): whatever it reads (time-stamp
 * counter or clock_gettime), it never goes backwards and stays within a
 * millisecond of CLOCK_MONOTONIC, across calibrations.
 */
#include <criterion/criterion.h>

#include "host/monotime.h"

#include <stdint.h>
#include <time.h>

static int64_t sys_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

Test(monotime, never_goes_back_and_follows_the_system_clock)
{
    wq_monotime_init();
    int64_t start = sys_now(), prev = wq_monotime_now();
    int64_t worst = 0;
    long n = 0;
    /* 40 ms of reads, calibrating now and then as the host's tick does. */
    while (sys_now() - start < 40 * 1000000) {
        int64_t before = sys_now();
        int64_t t = wq_monotime_now();
        int64_t after = sys_now();
        cr_assert_geq(t, prev, "went back by %lld ns after %ld reads", (long long)(prev - t), n);
        prev = t;
        int64_t off = t < before ? before - t : t > after ? t - after : 0;
        if (off > worst)
            worst = off;
        if (++n % 5000 == 0)
            wq_monotime_calibrate();
    }
    cr_assert_lt(worst, 1000000, "%lld ns away from CLOCK_MONOTONIC (fast: %d)", (long long)worst,
                 wq_monotime_fast());
}
