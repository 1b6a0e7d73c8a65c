/*
 * Engine benchmark of group limits (issue 11), one result per line as
 * "<name> <value> <unit>", machine and date first as '#' comment lines.
 *
 * As in bench_engine.c the queue reads a fake clock (a static counter the
 * benchmark steps), so the numbers measure the engine, not clock_gettime.
 * Keys are 16 bytes ("key:%012u"), group names 12 ("grp:%08u"), all built
 * before timing. Cases:
 *
 *   saturated  100,000 groups with concurrency 1, each with one record
 *              handed out and not done, QUEUED records queued behind them
 *              (spread over those groups, all held back), QUEUED = 10k,
 *              100k, 1M. cycle: one eligible record in a group of its own
 *              (with its own limit, so the group stays while the record is
 *              gone between done and add); get (which must hand it out),
 *              done, add it again; wall ns per cycle. get: 64 eligible
 *              groups of one record each; 64 gets in a row timed, their
 *              dones and adds untimed; wall ns per get. Both also on a
 *              queue holding only the eligible records, without groups, as
 *              the reference.
 *   dispatch   1M records over 1,000 groups with concurrency 1, drained by
 *              8 simulated workers (up to 8 handed out; each get beyond
 *              that is preceded by the done of the oldest), against the
 *              same records without groups: items/s and the ratio.
 *   rate       1M records in one group with a rate of 1e6/s (burst 1 and
 *              100) or the default burst, drained as the host does: get
 *              until WQ_EEMPTY, then step the clock to wq_queue_next_ready
 *              and fire_due. CPU ns per item against the same drain without
 *              groups; the fake time the drain took.
 *
 * Each case runs REPEAT times, the grouped and the reference runs
 * alternating; the MEDIAN is reported and every run listed on a '#' line.
 */
#define BENCH_NAME "bench_groups"
#include "bench_header.h"
#include "bench_queue.h"

#include "engine/queue.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GROUP_LEN 12
#define N_ITEMS 1000000u
#define SAT_GROUPS 100000u
#define SAT_CYCLES 1000000u
#define SAT_BATCH 64u
#define DISPATCH_GROUPS 1000u
#define WORKERS 8u
#define REPEAT 5

static char (*keys)[KEY_LEN];
static char (*groups)[GROUP_LEN];

static void build_names(void)
{
    keys = malloc((size_t)(N_ITEMS + SAT_GROUPS + SAT_BATCH) * KEY_LEN);
    groups = malloc((size_t)(SAT_GROUPS + SAT_BATCH) * GROUP_LEN);
    if (!keys || !groups)
        bench_die("out of memory for names");
    for (uint32_t i = 0; i < N_ITEMS + SAT_GROUPS + SAT_BATCH; i++)
        bench_key(keys[i], i);
    char buf[GROUP_LEN + 1];
    for (uint32_t i = 0; i < SAT_GROUPS + SAT_BATCH; i++) {
        snprintf(buf, sizeof buf, "grp:%08u", i);
        memcpy(groups[i], buf, GROUP_LEN);
    }
}

/* Adds key i, in group g (UINT32_MAX: none). */
static void add(wq_queue *q, uint32_t i, uint32_t g)
{
    wq_add_opts o = {0};
    if (g != UINT32_MAX) {
        o.group = groups[g];
        o.grouplen = GROUP_LEN;
    }
    bench_check(wq_queue_add(q, keys[i], KEY_LEN, g != UINT32_MAX ? &o : NULL), "add");
}

static void set_default(wq_queue *q, uint32_t concurrency, double rate, double burst)
{
    wq_limit lim = {concurrency, rate, burst};
    bench_check(wq_queue_set_group_default(q, &lim), "set_group_default");
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n)
{
    double s[REPEAT];
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/* The median of REPEAT runs as a result line, the runs on a comment line. */
static double report(const char *name, const double *runs, const char *unit, int decimals)
{
    double m = median(runs, REPEAT);
    printf("%s %.*f %s\n#   %s runs:", name, decimals, m, unit, name);
    for (int i = 0; i < REPEAT; i++)
        printf(" %.*f", decimals, runs[i]);
    printf("\n");
    return m;
}

/* ---- saturated: get of an eligible record behind 100k saturated groups ---- */

/*
 * The queue of the saturated case: SAT_GROUPS groups at their concurrency
 * of 1 (one record each handed out), `queued` records behind them, and
 * `eligible` groups after those, each with one record (keys from *first).
 * Built untimed.
 */
static wq_queue *saturated_queue(uint32_t queued, uint32_t eligible, uint32_t *first)
{
    wq_queue *q = bench_new_queue();
    set_default(q, 1, 0, 0);
    wq_item_info info;
    for (uint32_t g = 0; g < SAT_GROUPS; g++) {
        add(q, g, g);
        if (wq_queue_get(q, &info) != 0)
            bench_die("saturated: setup get failed");
    }
    for (uint32_t i = 0; i < queued; i++)
        add(q, SAT_GROUPS + i, i % SAT_GROUPS);
    if (wq_queue_get(q, &info) != WQ_EEMPTY)
        bench_die("saturated: a saturated group handed something out");
    *first = SAT_GROUPS + queued;
    for (uint32_t e = 0; e < eligible; e++) {
        /* Its own limit keeps an eligible group while its key is between done and add. */
        wq_limit own = {1, 0, 0};
        bench_check(wq_queue_set_group_limit(q, groups[SAT_GROUPS + e], GROUP_LEN, &own),
                    "set_group_limit");
        add(q, *first + e, SAT_GROUPS + e);
    }
    if (wq_queue_len(q) != queued + eligible || wq_queue_throttled(q) != queued ||
        wq_queue_processing(q) != SAT_GROUPS)
        bench_die("saturated: setup is not what it should be");
    return q;
}

/*
 * One eligible record (reference: a queue holding only that record, no
 * groups): SAT_CYCLES times get (which must hand it out), done, add it
 * again. Wall ns per cycle.
 */
static double saturated_cycle(uint32_t queued, int reference)
{
    uint32_t k = 0;
    wq_queue *q;
    if (reference) {
        q = bench_new_queue();
        add(q, k, UINT32_MAX);
    } else {
        q = saturated_queue(queued, 1, &k);
    }
    uint32_t g = reference ? UINT32_MAX : SAT_GROUPS;
    wq_item_info info;
    double t0 = bench_wall();
    for (uint32_t c = 0; c < SAT_CYCLES; c++) {
        if (wq_queue_get(q, &info) != 0 || info.keylen != KEY_LEN ||
            memcmp(info.key, keys[k], KEY_LEN) != 0)
            bench_die("saturated: get did not hand out the eligible key");
        bench_check(wq_queue_done(q, keys[k], KEY_LEN), "done");
        add(q, k, g);
    }
    double t1 = bench_wall();
    wq_queue_free(q);
    return (t1 - t0) * 1e9 / SAT_CYCLES;
}

/*
 * SAT_BATCH eligible groups of one record each (reference: SAT_BATCH
 * records, no groups): SAT_BATCH gets in a row, timed, then their dones and
 * adds, untimed; SAT_CYCLES gets in all. Wall ns per get.
 */
static double saturated_gets(uint32_t queued, int reference)
{
    uint32_t first = 0;
    wq_queue *q;
    if (reference) {
        q = bench_new_queue();
        for (uint32_t e = 0; e < SAT_BATCH; e++)
            add(q, e, UINT32_MAX);
    } else {
        q = saturated_queue(queued, SAT_BATCH, &first);
    }
    wq_item_info info;
    double spent = 0;
    for (uint32_t c = 0; c < SAT_CYCLES / SAT_BATCH; c++) {
        double t0 = bench_wall();
        for (uint32_t e = 0; e < SAT_BATCH; e++)
            if (wq_queue_get(q, &info) != 0)
                bench_die("saturated: get found nothing");
        spent += bench_wall() - t0;
        if (wq_queue_get(q, &info) != WQ_EEMPTY)
            bench_die("saturated: get handed out a held-back record");
        for (uint32_t e = 0; e < SAT_BATCH; e++) {
            bench_check(wq_queue_done(q, keys[first + e], KEY_LEN), "done");
            add(q, first + e, reference ? UINT32_MAX : SAT_GROUPS + e);
        }
    }
    wq_queue_free(q);
    return spent * 1e9 / (SAT_CYCLES / SAT_BATCH * SAT_BATCH);
}

static void case_saturated(void)
{
    printf("# saturated: %u groups at concurrency 1, each with one record handed out and not "
           "done; QUEUED records spread over them (all held back)\n",
           SAT_GROUPS);
    printf("#   cycle: one eligible record in a group of its own; %u x (get, done, add it "
           "again), wall ns per cycle\n",
           SAT_CYCLES);
    printf("#   get: %u eligible groups of one record each; %u gets in a row timed (one clock "
           "pair per %u gets), then their dones and adds untimed; wall ns per get\n",
           SAT_BATCH, SAT_BATCH, SAT_BATCH);
    printf("#   reference: the same loops on a queue holding only the eligible records, no "
           "groups\n");
    static const uint32_t sizes[] = {10000, 100000, 1000000};
    static const char *labels[] = {"10k", "100k", "1m"};
    double cyc[3][REPEAT], get[3][REPEAT], ref_cyc[REPEAT], ref_get[REPEAT];
    for (int r = 0; r < REPEAT; r++) {
        ref_cyc[r] = saturated_cycle(0, 1);
        ref_get[r] = saturated_gets(0, 1);
        for (int s = 0; s < 3; s++) {
            cyc[s][r] = saturated_cycle(sizes[s], 0);
            get[s][r] = saturated_gets(sizes[s], 0);
        }
    }
    char name[96];
    for (int s = 0; s < 3; s++) {
        snprintf(name, sizeof name, "saturated_100k_groups_q%s_cycle", labels[s]);
        report(name, cyc[s], "ns", 1);
    }
    report("saturated_reference_no_groups_cycle", ref_cyc, "ns", 1);
    for (int s = 0; s < 3; s++) {
        snprintf(name, sizeof name, "saturated_100k_groups_q%s_get", labels[s]);
        report(name, get[s], "ns", 1);
    }
    report("saturated_reference_no_groups_get", ref_get, "ns", 1);
}

/* ---- dispatch: 1M records over 1,000 groups, 8 workers ---- */

/*
 * Adds N_ITEMS records (grouped: record i in group i % DISPATCH_GROUPS),
 * drains them with WORKERS. Returns items/s over both; *add_s and *drain_s
 * get the seconds of each phase.
 */
static double dispatch_run(int grouped, double *add_s, double *drain_s)
{
    wq_queue *q = bench_new_queue();
    if (grouped)
        set_default(q, 1, 0, 0);
    static uint32_t ring[WORKERS];
    uint32_t head = 0, inflight = 0, n = 0;
    wq_item_info info;
    double t0 = bench_wall();
    for (uint32_t i = 0; i < N_ITEMS; i++)
        add(q, i, grouped ? i % DISPATCH_GROUPS : UINT32_MAX);
    double tm = bench_wall();
    for (;;) {
        if (inflight == WORKERS) {
            bench_check(wq_queue_done(q, keys[ring[head]], KEY_LEN), "done");
            head = (head + 1) % WORKERS;
            inflight--;
        }
        int r = wq_queue_get(q, &info);
        if (r == 0) {
            ring[(head + inflight) % WORKERS] = bench_key_index(info.key);
            inflight++;
            n++;
        } else if (inflight) {
            bench_check(wq_queue_done(q, keys[ring[head]], KEY_LEN), "done");
            head = (head + 1) % WORKERS;
            inflight--;
        } else {
            break;
        }
    }
    double t1 = bench_wall();
    if (n != N_ITEMS || wq_queue_records(q) != 0)
        bench_die("dispatch: %u items out of %u", n, N_ITEMS);
    wq_queue_free(q);
    *add_s = tm - t0;
    *drain_s = t1 - tm;
    return N_ITEMS / (t1 - t0);
}

static void case_dispatch(void)
{
    printf("# dispatch: add %u records, then get+done all with %u simulated workers (at most "
           "%u handed out; the oldest is done first); grouped: record i in group i %% %u, "
           "concurrency 1\n",
           N_ITEMS, WORKERS, WORKERS, DISPATCH_GROUPS);
    double plain[REPEAT], grouped[REPEAT], ratio[REPEAT];
    double add[2][REPEAT], drain[2][REPEAT];
    for (int r = 0; r < REPEAT; r++) {
        double a, d;
        plain[r] = dispatch_run(0, &a, &d);
        add[0][r] = a * 1e9 / N_ITEMS;
        drain[0][r] = d * 1e9 / N_ITEMS;
        grouped[r] = dispatch_run(1, &a, &d);
        add[1][r] = a * 1e9 / N_ITEMS;
        drain[1][r] = d * 1e9 / N_ITEMS;
        ratio[r] = grouped[r] / plain[r];
    }
    report("dispatch_1m_no_groups", plain, "items/s", 0);
    report("dispatch_1m_1k_groups_c1", grouped, "items/s", 0);
    report("dispatch_1k_groups_over_no_groups", ratio, "ratio", 3);
    report("dispatch_1m_no_groups_add", add[0], "ns/item", 1);
    report("dispatch_1m_1k_groups_c1_add", add[1], "ns/item", 1);
    report("dispatch_1m_no_groups_drain", drain[0], "ns/item", 1);
    report("dispatch_1m_1k_groups_c1_drain", drain[1], "ns/item", 1);
}

/* ---- rate: 1M records in one group at 1e6/s ---- */

/*
 * Adds N_ITEMS records (in one group with the rate, or none), then drains
 * them as the host does. Returns CPU ns per item; *span the fake seconds.
 */
static double rate_run(double rate, double burst, double *span)
{
    wq_queue *q = bench_new_queue();
    uint32_t g = UINT32_MAX;
    if (rate > 0) {
        set_default(q, 0, rate, burst);
        g = 0;
    }
    int64_t start = fake_now;
    wq_item_info info;
    uint32_t n = 0;
    double c0 = bench_cpu();
    for (uint32_t i = 0; i < N_ITEMS; i++)
        add(q, i, g);
    while (n < N_ITEMS) {
        int r = wq_queue_get(q, &info);
        if (r == 0) {
            bench_check(wq_queue_done(q, info.key, info.keylen), "done");
            n++;
            continue;
        }
        if (r != WQ_EEMPTY)
            bench_die("rate: get: %s", wq_strerror(r));
        int64_t next = wq_queue_next_ready(q);
        if (next == WQ_NEVER)
            bench_die("rate: nothing to wait for with %u items left", N_ITEMS - n);
        if (next > fake_now)
            fake_now = next;
        bench_check(wq_queue_fire_due(q), "fire_due");
    }
    double c1 = bench_cpu();
    if (wq_queue_records(q) != 0)
        bench_die("rate: records left");
    *span = (double)(fake_now - start) / 1e9;
    wq_queue_free(q);
    return (c1 - c0) * 1e9 / N_ITEMS;
}

static void case_rate(void)
{
    printf("# rate: add %u records in one group with a rate of 1e6/s, then get+done until "
           "WQ_EEMPTY, step the fake clock to next_ready, fire_due, again (the host's timer); "
           "CPU ns per item over adds and drain; reference: the same without groups\n",
           N_ITEMS);
    static const double bursts[] = {1, 100, 1e6};
    static const char *labels[] = {"burst1", "burst100", "burst1m"};
    double plain[REPEAT], v[3][REPEAT], ratio[3][REPEAT], span[3] = {0};
    for (int r = 0; r < REPEAT; r++) {
        double s;
        plain[r] = rate_run(0, 0, &s);
        for (int b = 0; b < 3; b++) {
            v[b][r] = rate_run(1e6, bursts[b], &span[b]);
            ratio[b][r] = v[b][r] / plain[r];
        }
    }
    report("rate_reference_no_groups_1m", plain, "ns/item", 1);
    char name[96];
    for (int b = 0; b < 3; b++) {
        snprintf(name, sizeof name, "rate_1group_1e6_%s", labels[b]);
        report(name, v[b], "ns/item", 1);
        snprintf(name, sizeof name, "rate_1group_1e6_%s_over_no_groups", labels[b]);
        report(name, ratio[b], "ratio", 3);
        printf("#   %s: fake time to drain %.3f s\n", name, span[b]);
    }
}

int main(int argc, char **argv)
{
    if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        printf("usage: bench_groups [case...]\ncases: saturated dispatch rate\n");
        return 0;
    }
    bench_print_header("bench_groups (engine: group limits)");
#ifdef WQ_DEBUG_CHECKS
    printf("# build: debug checks on (not a release build: numbers are not representative)\n");
#endif
    printf("# repeat: each case runs %d times, grouped and reference runs alternating; median "
           "reported\n# queue time: fake clock (stepped by the benchmark); wall time: "
           "CLOCK_MONOTONIC\n",
           REPEAT);
    build_names();
    if (bench_selected(argc - 1, argv + 1, "saturated"))
        case_saturated();
    if (bench_selected(argc - 1, argv + 1, "dispatch"))
        case_dispatch();
    if (bench_selected(argc - 1, argv + 1, "rate"))
        case_rate();
    free(keys);
    free(groups);
    return 0;
}
