/*
 * The monotonic clock. clock_gettime costs about 26 ns in a KVM guest and
 * the engine reads the clock at every add, get and done (for the client-go
 * metrics), so the clock alone was a third of a job's cost. Reading the
 * time-stamp counter costs under half of that. Between two calibrations
 * the rate is the one measured over the previous interval (tens of ms), so
 * the error is a few parts per million of the interval, and a clamp keeps
 * the clock from ever going backwards when an anchor moves.
 */
#include "host/monotime.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__)
#include <x86intrin.h>
#define HAVE_TSC 1
#else
#define HAVE_TSC 0
#endif

static int usable; /* the counter may be used once a rate is known */
static int ready;  /* a rate is known */
static uint64_t tsc_anchor;
static int64_t ns_anchor;
static uint64_t mult;  /* ns per tick, times 2^32 */
static int64_t last;   /* the latest value returned */
static uint32_t reads; /* since the last calibration */

/* Calibrate after this many reads too: a loop that never yields to the tick. */
#define READS_PER_CALIBRATION 65536

static int64_t sys_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t ticks(void)
{
#if HAVE_TSC
    return __rdtsc();
#else
    return 0;
#endif
}

/* Whether line-oriented file path has a line containing word. */
static int file_has(const char *path, const char *word)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, word) != NULL;
    fclose(f);
    return found;
}

void wq_monotime_init(void)
{
    usable = 0;
    ready = 0;
#if HAVE_TSC
    /* The kernel's own choice says the counter is stable here (it checks
     * invariance and watches it against other clocks). */
    usable = file_has("/sys/devices/system/clocksource/clocksource0/current_clocksource", "tsc") &&
             file_has("/proc/cpuinfo", "constant_tsc") && file_has("/proc/cpuinfo", "nonstop_tsc");
#endif
    tsc_anchor = ticks();
    ns_anchor = sys_now();
}

void wq_monotime_calibrate(void)
{
    if (!usable)
        return;
    reads = 0;
    uint64_t t = ticks();
    int64_t ns = sys_now();
    uint64_t dt = t - tsc_anchor;
    int64_t dns = ns - ns_anchor;
    if (dns >= 1000000 && dt > 0) { /* at least 1 ms: a meaningful rate */
        mult = (uint64_t)((double)dns / (double)dt * 4294967296.0);
        tsc_anchor = t;
        ns_anchor = ns;
        ready = 1;
    } else if (dns < 0 || dt == 0) {
        tsc_anchor = t;
        ns_anchor = ns;
    }
}

int64_t wq_monotime_now(void)
{
    int64_t ns;
    if (usable && ++reads >= READS_PER_CALIBRATION)
        wq_monotime_calibrate();
    if (ready)
        ns = ns_anchor + (int64_t)(((unsigned __int128)(ticks() - tsc_anchor) * mult) >> 32);
    else
        ns = sys_now();
    if (ns < last)
        ns = last;
    last = ns;
    return ns;
}

int wq_monotime_fast(void)
{
    return ready;
}
