/*
 * The fake clock of the engine tests: a queue made with &clk reads fc.ns,
 * which the test sets and advances itself (engine tests never sleep).
 */
#ifndef WQ_FAKE_CLOCK_H
#define WQ_FAKE_CLOCK_H

#include "engine/clock.h"

#include <stdint.h>

struct fake_clock {
    int64_t ns;
};

static struct fake_clock fc;

static int64_t fake_now(void *ud)
{
    return ((const struct fake_clock *)ud)->ns;
}

static const wq_clock clk = {fake_now, &fc};

#endif
