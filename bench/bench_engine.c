/*
 * Engine benchmark: the five cases of issue 2, one result per line as
 * "<name> <value> <unit>", machine and date first as '#' comment lines.
 *
 * The queue reads time from a fake clock (a static counter), so the numbers
 * measure the engine and not clock_gettime; wall time around each case comes
 * from CLOCK_MONOTONIC. Keys are built once, up front, into one array. Every
 * timing case runs REPEAT times on a fresh queue and reports the best run;
 * all runs are listed on a comment line after it. Resident bytes per item
 * are measured once, in a separate untimed pass that runs before anything
 * else has touched the allocator.
 */
#define BENCH_NAME "bench_engine"
#include "bench_header.h"
#include "bench_queue.h"

#include "engine/queue.h"
#include "engine/ratelimit.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define N_ITEMS 1000000u
#define REPEAT 3
#define DEDUP_KEYS 1000u
#define DEDUP_ROUNDS 1000u
#define DELAY_MAX_NS (10 * WQ_NS_PER_S)
#define STEP_NS 1000000 /* 1 ms: the drain loop's clock tick */
#define RL_KEYS 10000u
#define RL_FAILURES 3

static char (*keys)[KEY_LEN];

/* Resident set size in bytes, from /proc/self/statm. */
static long rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size, resident;
    if (!f)
        bench_die("cannot open /proc/self/statm");
    if (fscanf(f, "%ld %ld", &size, &resident) != 2)
        bench_die("cannot parse /proc/self/statm");
    fclose(f);
    return resident * sysconf(_SC_PAGESIZE);
}

static uint64_t rng_state = 0x2545f4914f6cdd1dULL;

/* splitmix64: fixed seed, so every run schedules the same delays. */
static uint64_t rng(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void build_keys(void)
{
    keys = malloc((size_t)N_ITEMS * KEY_LEN);
    if (!keys)
        bench_die("out of memory for keys");
    for (uint32_t i = 0; i < N_ITEMS; i++)
        bench_key(keys[i], i);
}

/* Gets and dones everything queued; returns how many. */
static uint32_t drain_ready(wq_queue *q)
{
    wq_item_info info;
    uint32_t n = 0;
    while (wq_queue_get(q, &info) == 0) {
        if (wq_queue_done(q, info.key, info.keylen) != 0)
            bench_die("done failed");
        n++;
    }
    return n;
}

static void result(const char *name, double value, const char *unit)
{
    printf("%s %.0f %s\n", name, value, unit);
}

/* Best (highest) rate of REPEAT runs, printed with all runs listed. */
static void report(const char *name, const double rates[REPEAT], const char *unit)
{
    double best = rates[0];
    for (int i = 1; i < REPEAT; i++)
        if (rates[i] > best)
            best = rates[i];
    result(name, best, unit);
    printf("#   %s runs:", name);
    for (int i = 0; i < REPEAT; i++)
        printf(" %.0f", rates[i]);
    printf("\n");
}

static void print_machine(void)
{
    bench_print_header("bench_engine (wqrun engine benchmark)");
#ifdef NDEBUG
    printf("# build: assertions off");
#else
    printf("# build: assertions on");
#endif
#ifdef WQ_DEBUG_CHECKS
    printf(", debug checks on (not a release build: numbers are not representative)");
#endif
    printf("\n# repeat: each timing case runs %d times on a fresh queue; best run reported\n",
           REPEAT);
    printf("# queue time: fake clock (static counter); wall time: CLOCK_MONOTONIC\n");
}

/*
 * Case 1, memory: RSS growth while the queue holds N_ITEMS keys. Also
 * checks that get hands them out in FIFO order.
 */
static void case_memory(void)
{
    long before = rss_bytes();
    wq_queue *q = bench_new_queue();
    for (uint32_t i = 0; i < N_ITEMS; i++)
        bench_check(wq_queue_add(q, keys[i], KEY_LEN, NULL), "add");
    long after = rss_bytes();
    wq_item_info info;
    for (uint32_t i = 0; i < N_ITEMS; i++) {
        if (wq_queue_get(q, &info) != 0 || info.keylen != KEY_LEN ||
            memcmp(info.key, keys[i], KEY_LEN) != 0)
            bench_die("get out of order at %u", i);
        if (wq_queue_done(q, info.key, info.keylen) != 0)
            bench_die("done failed");
    }
    if (wq_queue_records(q) != 0 || wq_queue_len(q) != 0)
        bench_die("records left after draining");
    wq_queue_free(q);
    double per_item = (double)(after - before) / N_ITEMS;
    printf("bytes_per_item %.1f bytes\n", per_item);
    printf("bytes_per_item_excl_key %.1f bytes\n", per_item - KEY_LEN);
}

/* Case 1: add all, then get+done all; items/s over the whole cycle. */
static double run_add_get_done(void)
{
    wq_queue *q = bench_new_queue();
    double t0 = bench_wall();
    for (uint32_t i = 0; i < N_ITEMS; i++)
        bench_check(wq_queue_add(q, keys[i], KEY_LEN, NULL), "add");
    uint32_t n = drain_ready(q);
    double t1 = bench_wall();
    if (n != N_ITEMS || wq_queue_records(q) != 0)
        bench_die("add_get_done: %u items out of %u", n, N_ITEMS);
    wq_queue_free(q);
    return N_ITEMS / (t1 - t0);
}

/* Case 2: DEDUP_KEYS keys, each added DEDUP_ROUNDS times, round-robin. */
static double run_dedup(void)
{
    wq_queue *q = bench_new_queue();
    uint32_t hits = 0;
    double t0 = bench_wall();
    for (uint32_t r = 0; r < DEDUP_ROUNDS; r++)
        for (uint32_t i = 0; i < DEDUP_KEYS; i++) {
            int rc = wq_queue_add(q, keys[i], KEY_LEN, NULL);
            bench_check(rc, "add");
            hits += rc == 0;
        }
    double t1 = bench_wall();
    if (hits != DEDUP_KEYS * (DEDUP_ROUNDS - 1) || wq_queue_len(q) != DEDUP_KEYS)
        bench_die("dedup: %u hits", hits);
    wq_queue_free(q);
    return (double)DEDUP_KEYS * DEDUP_ROUNDS / (t1 - t0);
}

/* Case 3: each item added, got and done before the next one is added. */
static double run_interleaved(void)
{
    wq_queue *q = bench_new_queue();
    wq_item_info info;
    double t0 = bench_wall();
    for (uint32_t i = 0; i < N_ITEMS; i++) {
        bench_check(wq_queue_add(q, keys[i], KEY_LEN, NULL), "add");
        if (wq_queue_get(q, &info) != 0)
            bench_die("get failed");
        if (wq_queue_done(q, info.key, info.keylen) != 0)
            bench_die("done failed");
    }
    double t1 = bench_wall();
    if (wq_queue_records(q) != 0)
        bench_die("interleaved: records left");
    wq_queue_free(q);
    return N_ITEMS / (t1 - t0);
}

/*
 * Advances the fake clock one tick, or straight to the next ready time when
 * that is later (what the host's timer does), fires what is due and
 * get+dones everything ready. Returns the number of items processed.
 */
static uint32_t step_and_drain(wq_queue *q)
{
    int64_t next = wq_queue_next_ready(q);
    fake_now = next > fake_now + STEP_NS ? next : fake_now + STEP_NS;
    if (wq_queue_fire_due(q) < 0)
        bench_die("fire_due failed");
    return drain_ready(q);
}

/* Case 4: N_ITEMS add_after with delays uniform in [0, 10 s), then drain. */
static void run_add_after(double *total_rate, double *add_rate)
{
    wq_queue *q = bench_new_queue();
    int64_t *delays = malloc(N_ITEMS * sizeof *delays);
    if (!delays)
        bench_die("out of memory for delays");
    rng_state = 0x2545f4914f6cdd1dULL;
    for (uint32_t i = 0; i < N_ITEMS; i++)
        delays[i] = (int64_t)(rng() % (uint64_t)DELAY_MAX_NS);
    double t0 = bench_wall();
    for (uint32_t i = 0; i < N_ITEMS; i++)
        bench_check(wq_queue_add_after(q, keys[i], KEY_LEN, delays[i], NULL), "add_after");
    double t1 = bench_wall();
    uint32_t n = drain_ready(q); /* the zero delays */
    while (wq_queue_waiting(q) > 0)
        n += step_and_drain(q);
    double t2 = bench_wall();
    if (n != N_ITEMS || wq_queue_records(q) != 0)
        bench_die("add_after: %u items out of %u", n, N_ITEMS);
    free(delays);
    wq_queue_free(q);
    *total_rate = N_ITEMS / (t2 - t0);
    *add_rate = N_ITEMS / (t1 - t0);
}

/*
 * Case 5: RL_KEYS keys, each failing RL_FAILURES times. A worker loop as a
 * controller runs it: get; on failure AddRateLimited (limiter when, then
 * add_after with that delay), else forget; done. The clock advances as in
 * case 4. ops = AddRateLimited calls; the time covers the whole loop.
 */
static double run_rate_limited(int64_t *span_ns)
{
    static uint8_t fails[RL_KEYS];
    wq_queue *q = bench_new_queue();
    wq_limiter *l = wq_limiter_default(&clock_fake);
    if (!l)
        bench_die("wq_limiter_default failed");
    memset(fails, 0, sizeof fails);
    int64_t start = fake_now;
    uint32_t ops = 0, finished = 0;
    wq_item_info info;
    double t0 = bench_wall();
    for (uint32_t i = 0; i < RL_KEYS; i++)
        bench_check(wq_queue_add(q, keys[i], KEY_LEN, NULL), "add");
    for (;;) {
        while (wq_queue_get(q, &info) == 0) {
            uint32_t k = bench_key_index(info.key);
            if (fails[k] < RL_FAILURES) {
                int64_t delay;
                if (wq_limiter_when(l, info.key, info.keylen, &delay) != 0 || delay == WQ_NEVER)
                    bench_die("limiter when failed");
                bench_check(wq_queue_add_after(q, info.key, info.keylen, delay, NULL), "add_after");
                fails[k]++;
                ops++;
            } else {
                wq_limiter_forget(l, info.key, info.keylen);
                finished++;
            }
            if (wq_queue_done(q, info.key, info.keylen) != 0)
                bench_die("done failed");
        }
        if (wq_queue_waiting(q) == 0)
            break;
        int64_t next = wq_queue_next_ready(q);
        fake_now = next > fake_now + STEP_NS ? next : fake_now + STEP_NS;
        if (wq_queue_fire_due(q) < 0)
            bench_die("fire_due failed");
    }
    double t1 = bench_wall();
    if (ops != RL_KEYS * RL_FAILURES || finished != RL_KEYS || wq_queue_records(q) != 0)
        bench_die("rate_limited: %u ops, %u finished", ops, finished);
    *span_ns = fake_now - start;
    wq_limiter_free(l);
    wq_queue_free(q);
    return ops / (t1 - t0);
}

int main(int argc, char **argv)
{
    if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        printf("usage: bench_engine [case...]\n"
               "cases: memory add_get_done dedup interleaved add_after rate_limited\n");
        return 0;
    }
    print_machine();
    build_keys();
    double a[REPEAT], b[REPEAT];

    if (bench_selected(argc - 1, argv + 1, "memory"))
        case_memory();

    if (bench_selected(argc - 1, argv + 1, "add_get_done")) {
        for (int r = 0; r < REPEAT; r++)
            a[r] = run_add_get_done();
        report("add_get_done_1m_distinct", a, "items/s");
    }

    if (bench_selected(argc - 1, argv + 1, "dedup")) {
        for (int r = 0; r < REPEAT; r++)
            a[r] = run_dedup();
        report("dedup_1k_keys_x1k", a, "adds/s");
    }

    if (bench_selected(argc - 1, argv + 1, "interleaved")) {
        for (int r = 0; r < REPEAT; r++)
            a[r] = run_interleaved();
        report("add_get_done_interleaved_1m", a, "items/s");
    }

    if (bench_selected(argc - 1, argv + 1, "add_after")) {
        for (int r = 0; r < REPEAT; r++)
            run_add_after(&a[r], &b[r]);
        report("add_after_1m_random_0_10s", a, "ops/s");
        report("add_after_1m_only", b, "ops/s");
    }

    if (bench_selected(argc - 1, argv + 1, "rate_limited")) {
        int64_t span = 0;
        for (int r = 0; r < REPEAT; r++)
            a[r] = run_rate_limited(&span);
        report("add_rate_limited_10k_x3", a, "ops/s");
        printf("#   add_rate_limited_10k_x3: fake time to drain %.1f s\n", (double)span / 1e9);
    }

    free(keys);
    return 0;
}
