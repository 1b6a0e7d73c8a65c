/*
 * What the engine benchmarks (bench_engine, bench_groups) share: a fake
 * clock the program moves itself (fake_now), queues on it, keys of the
 * form "key:" + 12 decimal digits, and an error check. Include after
 * bench_header.h.
 */
#ifndef WQ_BENCH_QUEUE_H
#define WQ_BENCH_QUEUE_H

#include "engine/queue.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define KEY_LEN 16 /* "key:" and 12 digits, no terminator */

static int64_t fake_now;

static int64_t fake_clock(void *ud)
{
    (void)ud;
    return fake_now;
}

static const wq_clock clock_fake = {fake_clock, NULL};

/* Writes key number i into out (KEY_LEN bytes, not terminated). */
static inline void bench_key(char out[KEY_LEN], uint32_t i)
{
    char buf[KEY_LEN + 1];
    snprintf(buf, sizeof buf, "key:%012u", i);
    memcpy(out, buf, KEY_LEN);
}

/* The number of a key made by bench_key. */
static inline uint32_t bench_key_index(const char *k)
{
    uint32_t n = 0;
    for (int i = 4; i < KEY_LEN; i++)
        n = n * 10 + (uint32_t)(k[i] - '0');
    return n;
}

/* A new queue on the fake clock, which it sets to 1000 s. */
static inline wq_queue *bench_new_queue(void)
{
    fake_now = 1000 * WQ_NS_PER_S;
    wq_queue *q = wq_queue_new(&clock_fake);
    if (!q)
        bench_die("wq_queue_new failed");
    return q;
}

/* Dies with the engine's message when r is an error. */
static inline void bench_check(int r, const char *what)
{
    if (r < 0)
        bench_die("%s: %s", what, wq_strerror(r));
}

#endif
