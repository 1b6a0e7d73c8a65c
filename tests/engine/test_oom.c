/*
 * Allocation failure: a scripted scenario runs once with a working
 * allocator (the reference), then again for every N with the Nth allocation
 * failing (once, or from then on until the failure is seen). Each call that
 * answers WQ_ENOMEM must leave the queue exactly as it was (same records,
 * states, payloads, metrics, no events) and consistent; the same call then
 * succeeds, and the run must end exactly like the reference. Every block is
 * counted, so a leak fails the test even without ASan.
 */
#include <criterion/criterion.h>

#include "engine/delay.h"
#include "engine/keymap.h"
#include "engine/queue.h"
#include "support/fake_clock.h"
#include "engine/slab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S WQ_NS_PER_S

/* ---- a counting allocator that can fail ---- */

static long alloc_calls; /* allocations (not frees) so far */
static long fail_at;     /* 0: never fail */
static int sticky;       /* fail every allocation from fail_at on */
static long live;        /* blocks allocated and not freed */
static long failures;    /* allocations refused */

static void *test_realloc(void *ud, void *ptr, size_t size)
{
    (void)ud;
    if (size == 0) {
        if (ptr)
            live--;
        free(ptr);
        return NULL;
    }
    alloc_calls++;
    if (fail_at > 0 && (alloc_calls == fail_at || (sticky && alloc_calls > fail_at))) {
        failures++;
        return NULL;
    }
    void *p = realloc(ptr, size);
    if (p && !ptr)
        live++;
    return p;
}

static void install(long n, int is_sticky)
{
    alloc_calls = 0;
    fail_at = n;
    sticky = is_sticky;
    live = 0;
    failures = 0;
    wq_set_allocator(test_realloc, NULL);
}

static void disarm(void)
{
    fail_at = 0;
}

static void restore(void)
{
    wq_set_allocator(NULL, NULL);
}

/* ---- fake clock and event counting ---- */

static long nevents;
static int check_events; /* run the checker at every event (the reference run) */
static void count_events(void *ud, wq_queue *q, wq_event ev, const char *key, size_t len)
{
    (void)ud;
    (void)ev;
    (void)key;
    (void)len;
    if (check_events)
        cr_assert_eq(wq_queue_check(q), 0);
    nevents++;
}

/* ---- snapshots of everything observable ---- */

#define MAX_ITEMS 1400

struct sitem {
    char key[24];
    unsigned state;
    int32_t prio;
    int has_payload;
    size_t paylen;
    uint64_t payhash;
    int64_t ready_at, added_at;
};

struct snap {
    size_t len, processing, waiting, records;
    int shutting_down, draining;
    int64_t next_ready;
    wq_metrics metrics;
    int n;
    struct sitem items[MAX_ITEMS];
};

static int collect(void *ud, const wq_item_info *info)
{
    struct snap *s = ud;
    cr_assert_lt(s->n, MAX_ITEMS);
    struct sitem *it = &s->items[s->n++];
    memset(it, 0, sizeof *it);
    cr_assert_lt(info->keylen, sizeof it->key);
    memcpy(it->key, info->key, info->keylen);
    it->state = info->state;
    it->prio = info->priority;
    it->has_payload = info->payload != NULL;
    it->paylen = info->paylen;
    it->payhash = info->payload ? wq_hash(info->payload, info->paylen) : 0;
    it->ready_at = info->state & WQ_ST_WAITING ? info->ready_at : 0;
    it->added_at = info->state & WQ_ST_DIRTY ? info->added_at : 0;
    return 0;
}

static int by_key(const void *a, const void *b)
{
    return strcmp(((const struct sitem *)a)->key, ((const struct sitem *)b)->key);
}

static void take(const wq_queue *q, struct snap *s)
{
    s->len = wq_queue_len(q);
    s->processing = wq_queue_processing(q);
    s->waiting = wq_queue_waiting(q);
    s->records = wq_queue_records(q);
    s->shutting_down = wq_queue_shutting_down(q);
    s->draining = wq_queue_draining(q);
    s->next_ready = wq_queue_next_ready(q);
    s->metrics = *wq_queue_metrics(q);
    s->n = 0;
    wq_queue_foreach(q, collect, s);
    qsort(s->items, (size_t)s->n, sizeof s->items[0], by_key);
}

static void same(const struct snap *a, const struct snap *b, const char *what)
{
    cr_assert_eq(a->len, b->len, "%s: len", what);
    cr_assert_eq(a->processing, b->processing, "%s: processing", what);
    cr_assert_eq(a->waiting, b->waiting, "%s: waiting", what);
    cr_assert_eq(a->records, b->records, "%s: records", what);
    cr_assert_eq(a->shutting_down, b->shutting_down, "%s: shutting down", what);
    cr_assert_eq(a->draining, b->draining, "%s: draining", what);
    cr_assert_eq(a->next_ready, b->next_ready, "%s: next ready", what);
    cr_assert_eq(memcmp(&a->metrics, &b->metrics, sizeof a->metrics), 0, "%s: metrics", what);
    cr_assert_eq(a->n, b->n, "%s: record count", what);
    for (int i = 0; i < a->n; i++)
        cr_assert_eq(memcmp(&a->items[i], &b->items[i], sizeof a->items[i]), 0,
                     "%s: record %s differs", what, a->items[i].key);
}

/* ---- the scenario ---- */

enum { OP_ADD, OP_ADD_AFTER, OP_ADD_AT, OP_GET, OP_DONE, OP_CANCEL, OP_FIRE, OP_KINDS };

#define MAX_OPS 8192
#define CHECKPOINTS 4

struct run {
    wq_queue *q;
    int nops;
    long calls_before[MAX_OPS + 1]; /* reference run: allocations before op i */
    int rc[MAX_OPS];
    char got[MAX_OPS][24];
    long nomem[OP_KINDS];
};

static struct run ref, cur;
static struct snap ref_points[CHECKPOINTS];
static struct run *R;
static int reference; /* filling ref */
static long armed_op; /* the op during which the failure is expected, -1 unknown */
static struct snap before, after;

static char payload_buf[600];

static const wq_add_opts *opts(wq_add_opts *o, int prio_set, int32_t prio, size_t paylen, char fill)
{
    memset(o, 0, sizeof *o);
    if (prio_set) {
        o->set_priority = 1;
        o->priority = prio;
    }
    if (paylen != (size_t)-1) {
        cr_assert_leq(paylen, sizeof payload_buf);
        memset(payload_buf, fill, paylen);
        o->set_payload = 1;
        o->payload = payload_buf;
        o->paylen = paylen;
    }
    return o;
}

static int call(int kind, const char *key, int64_t arg, const wq_add_opts *o, char *got)
{
    wq_queue *q = R->q;
    size_t len = key ? strlen(key) : 0;
    wq_item_info info;
    int rc;
    switch (kind) {
    case OP_ADD: return wq_queue_add(q, key, len, o);
    case OP_ADD_AFTER: return wq_queue_add_after(q, key, len, arg, o);
    case OP_ADD_AT: return wq_queue_add_at(q, key, len, arg, o);
    case OP_GET:
        rc = wq_queue_get(q, &info);
        if (rc == 0) {
            cr_assert_lt(info.keylen, 24);
            memcpy(got, info.key, info.keylen);
            got[info.keylen] = 0;
        }
        return rc;
    case OP_DONE: return wq_queue_done(q, key, len);
    case OP_CANCEL: return wq_queue_cancel_after(q, key, len);
    case OP_FIRE: return wq_queue_fire_due(q);
    }
    return -100;
}

/* Runs one operation; on WQ_ENOMEM checks nothing changed and tries again. */
static int op(int kind, const char *key, int64_t arg, const wq_add_opts *o)
{
    int i = R->nops++;
    cr_assert_lt(i, MAX_OPS);
    if (reference)
        ref.calls_before[i] = alloc_calls;
    char got[24] = "";
    int watch = !reference && fail_at > 0 && (armed_op < 0 || i == armed_op);
    if (watch)
        take(R->q, &before);
    long ev0 = nevents, f0 = failures;
    int rc = call(kind, key, arg, o, got);
    while (rc == WQ_ENOMEM) {
        cr_assert(!reference, "the reference run has no failures");
        cr_assert(watch, "op %d failed unexpectedly", i);
        cr_assert_eq(wq_queue_check(R->q), 0, "op %d (kind %d): inconsistent after ENOMEM", i,
                     kind);
        cr_assert_eq(nevents, ev0, "op %d (kind %d): events after ENOMEM", i, kind);
        take(R->q, &after);
        same(&before, &after, "after ENOMEM");
        disarm();
        rc = call(kind, key, arg, o, got);
    }
    if (kind == OP_FIRE && !reference) {
        /* A failure part way through fires what it could; fire again. */
        while (wq_queue_next_ready(R->q) <= fc.ns) {
            int more = call(kind, key, arg, o, got);
            if (more == WQ_ENOMEM) {
                disarm();
                continue;
            }
            rc += more;
        }
    }
    if (failures > f0)
        R->nomem[kind]++;
    if (reference || watch)
        cr_assert_eq(wq_queue_check(R->q), 0, "op %d (kind %d)", i, kind);
    R->rc[i] = rc;
    strcpy(R->got[i], got);
    if (!reference) {
        cr_assert_eq(rc, ref.rc[i], "op %d (kind %d): rc %d, reference %d", i, kind, rc, ref.rc[i]);
        cr_assert_str_eq(got, ref.got[i], "op %d: got", i);
    }
    return rc;
}

/* The whole state at a few points must match the reference run's. */
static void checkpoint(int c)
{
    cr_assert_lt(c, CHECKPOINTS);
    cr_assert_eq(wq_queue_check(R->q), 0, "checkpoint %d", c);
    if (reference) {
        take(R->q, &ref_points[c]);
    } else {
        take(R->q, &after);
        same(&after, &ref_points[c], "checkpoint");
    }
}

/*
 * The queue keeps one array entry per non-empty priority level and doubles
 * the array when it is full. Padding the queued levels to a power of two
 * (above any earlier count) makes the next new level of the following
 * phase need memory, so Done and fire_due meet their failure paths.
 */
static int pad_prio;
static int distinct_prio(void *ud, const wq_item_info *info)
{
    int32_t *seen = ud; /* seen[0] = count, then the priorities */
    if (!(info->state & WQ_ST_QUEUED))
        return 0;
    for (int32_t i = 1; i <= seen[0]; i++)
        if (seen[i] == info->priority)
            return 0;
    cr_assert_lt(seen[0], MAX_ITEMS);
    seen[++seen[0]] = info->priority;
    return 0;
}

static void pad_levels_to(int target)
{
    static int32_t seen[MAX_ITEMS + 1];
    seen[0] = 0;
    wq_queue_foreach(R->q, distinct_prio, seen);
    int levels = seen[0];
    cr_assert_leq(levels, target);
    wq_add_opts o;
    char k[32];
    for (; levels < target; levels++) {
        snprintf(k, sizeof k, "pad-%d", pad_prio);
        /* 200-byte payloads: the slab needs more pages */
        op(OP_ADD, k, 0, opts(&o, 1, 100000 + pad_prio++, 200, 'p'));
    }
}

static void scenario(void)
{
    char k[32];
    wq_add_opts o;
    /* Many keys, twelve priority levels, payloads of every size class and beyond the slab. */
    for (int i = 0; i < 300; i++) {
        snprintf(k, sizeof k, "key-%d", i);
        size_t pl = i % 7 == 0 ? 400 : i % 5 == 0 ? 250 : (size_t)(i % 40);
        op(OP_ADD, k, 0, opts(&o, 1, i % 12, pl, (char)i));
    }
    /* Some processing; those and some queued keys re-added with new payloads and priorities. */
    for (int i = 0; i < 50; i++)
        op(OP_GET, NULL, 0, NULL);
    for (int i = 0; i < 300; i++) {
        if (i % 6 != 0 && i % 12 < 10) /* the gets took priorities 11 and 10 */
            continue;
        snprintf(k, sizeof k, "key-%d", i);
        op(OP_ADD, k, 0, opts(&o, 1, 1000 + i, (size_t)(i % 3 == 0 ? 500 : 12), 'r'));
    }
    /* Payloads replaced and priorities raised on queued keys. */
    for (int i = 100; i < 160; i += 3) {
        snprintf(k, sizeof k, "key-%d", i);
        op(OP_ADD, k, 0, opts(&o, i % 2, 50 + i, (size_t)(i % 4 == 0 ? 300 : i % 30), 'x'));
    }
    /*
     * Delayed adds: new keys, queued keys, ties, earlier and later times,
     * delay <= 0. Each at its own priority, so firing them grows the levels.
     */
    for (int i = 0; i < 200; i++) {
        snprintf(k, sizeof k, "w-%d", i);
        int64_t d = (i % 13) * S / 2 - S;
        op(OP_ADD_AFTER, k, d, opts(&o, 1, 2000 + i, i % 3 ? (size_t)-1 : (size_t)(i % 50), 'w'));
    }
    for (int i = 0; i < 300; i += 10) {
        snprintf(k, sizeof k, "key-%d", i);
        op(OP_ADD_AFTER, k, 3 * S, opts(&o, 1, 3000 + i, (size_t)-1, 0));
    }
    for (int i = 0; i < 200; i += 4) {
        snprintf(k, sizeof k, "w-%d", i);
        op(OP_ADD_AFTER, k, S / 3, NULL);
        op(OP_ADD_AT, k, fc.ns + 10 * S, NULL);
    }
    for (int i = 0; i < 40; i++) {
        snprintf(k, sizeof k, "at-%d", i);
        op(OP_ADD_AT, k, fc.ns + (i % 4) * S, i % 2 ? NULL : opts(&o, 0, 0, 3, 'a'));
    }
    for (int i = 1; i < 200; i += 9) {
        snprintf(k, sizeof k, "w-%d", i);
        op(OP_CANCEL, k, 0, NULL);
    }
    /* Adds of waiting keys: queued now at a new level, with a new payload. */
    for (int i = 5; i < 200; i += 9) {
        snprintf(k, sizeof k, "w-%d", i);
        op(OP_ADD, k, 0, opts(&o, 1, 5000 + i, (size_t)(i % 2 ? 300 : 20), 'n'));
    }
    pad_levels_to(256);
    checkpoint(0);
    /* Done: re-added keys go back at their new (fresh) priority levels. */
    for (int i = 0; i < 300; i++) {
        snprintf(k, sizeof k, "key-%d", i);
        op(OP_DONE, k, 0, NULL);
    }
    pad_levels_to(512);
    checkpoint(1);
    /* Time passes: due keys are added at their own fresh levels. */
    for (int t = 0; t < 8; t++) {
        fc.ns += S;
        op(OP_FIRE, NULL, 0, NULL);
    }
    checkpoint(2);
    /* Drain everything, re-adding now and then. */
    for (int i = 0; i < 2000; i++) {
        int rc = op(OP_GET, NULL, 0, NULL);
        if (rc != 0)
            break;
        const char *got = R->got[R->nops - 1];
        if (i % 17 == 0)
            op(OP_ADD, got, 0, opts(&o, 1, 4000 + i, 7, 'z'));
        char key[24];
        strcpy(key, got);
        op(OP_DONE, key, 0, NULL);
    }
    fc.ns += 60 * S;
    op(OP_FIRE, NULL, 0, NULL);
    checkpoint(3);
    wq_queue_shutdown_drain(R->q);
    while (op(OP_GET, NULL, 0, NULL) == 0) {
        char key[24];
        strcpy(key, R->got[R->nops - 1]);
        op(OP_DONE, key, 0, NULL);
    }
}

static void run_scenario(struct run *r, int is_reference, long n, int is_sticky)
{
    memset(r, 0, sizeof *r);
    R = r;
    reference = is_reference;
    nevents = 0;
    fc.ns = 1000 * S;
    install(is_reference ? 0 : n, is_sticky);
    armed_op = -1;
    if (!is_reference) {
        /* The run is the reference run until the failure: find the op it hits. */
        for (int i = 0; i < ref.nops; i++)
            if (ref.calls_before[i] < n && n <= ref.calls_before[i + 1])
                armed_op = i;
    }
    r->q = wq_queue_new(&clk);
    if (!r->q) {
        cr_assert(!is_reference);
        cr_assert_eq(live, 0, "wq_queue_new leaked after failing");
        disarm();
        r->q = wq_queue_new(&clk);
        cr_assert_not_null(r->q);
        if (armed_op < 0)
            armed_op = -2; /* failure already seen */
    }
    wq_queue_set_observer(r->q, count_events, NULL);
    check_events = is_reference;
    pad_prio = 0;
    scenario();
    if (is_reference)
        ref.calls_before[ref.nops] = alloc_calls;
    cr_assert_eq(wq_queue_records(r->q), 0);
    wq_queue_free(r->q);
    r->q = NULL;
    cr_assert_eq(live, 0, "leaked %ld blocks (fail_at %ld)", live, n);
    restore();
}

static void sweep(int is_sticky)
{
    run_scenario(&ref, 1, 0, 0);
    long total = alloc_calls;
    cr_assert_gt(total, 20, "the scenario allocates");
    cr_assert_lt(ref.nops, MAX_OPS);
    long nomem[OP_KINDS] = {0};
    for (long n = 1; n <= total; n++) {
        run_scenario(&cur, 0, n, is_sticky);
        for (int k = 0; k < OP_KINDS; k++)
            nomem[k] += cur.nomem[k];
    }
    /* The scenario must reach every allocating operation's failure path. */
    cr_assert_gt(nomem[OP_ADD], 0);
    cr_assert_gt(nomem[OP_ADD_AFTER], 0);
    cr_assert_gt(nomem[OP_ADD_AT], 0);
    cr_assert_gt(nomem[OP_DONE], 0);
    cr_assert_gt(nomem[OP_FIRE], 0);
}

Test(oom, every_failed_allocation_leaves_the_queue_unchanged_and_retrying_succeeds)
{
    sweep(0);
}

Test(oom, allocations_failing_from_some_point_on_are_reported_until_memory_returns)
{
    sweep(1);
}

/* ---- targeted cases ---- */

Test(oom, queue_new_returns_null_and_leaks_nothing)
{
    for (long n = 1; n <= 3; n++) {
        install(n, 1);
        cr_assert_null(wq_queue_new(&clk), "allocation %ld failing", n);
        cr_assert_eq(live, 0);
        restore();
    }
    install(0, 0);
    wq_queue *q = wq_queue_new(&clk);
    cr_assert_not_null(q);
    wq_queue_free(q);
    cr_assert_eq(live, 0);
    restore();
}

Test(oom, failed_add_after_counts_no_retry)
{
    install(0, 0);
    fc.ns = 1000 * S;
    wq_queue *q = wq_queue_new(&clk);
    fail_at = alloc_calls + 1;
    sticky = 1;
    cr_assert_eq(wq_queue_add_after(q, "a", 1, S, NULL), WQ_ENOMEM);
    cr_assert_eq(wq_queue_add_after(q, "a", 1, 0, NULL), WQ_ENOMEM);
    cr_assert_eq(wq_queue_metrics(q)->retries, 0);
    cr_assert_eq(wq_queue_records(q), 0);
    disarm();
    cr_assert_eq(wq_queue_add_after(q, "a", 1, S, NULL), 1);
    cr_assert_eq(wq_queue_metrics(q)->retries, 1);
    wq_queue_free(q);
    cr_assert_eq(live, 0);
    restore();
}

Test(oom, done_that_cannot_requeue_keeps_the_key_processing)
{
    install(0, 0);
    fc.ns = 1000 * S;
    wq_queue *q = wq_queue_new(&clk);
    char k[16];
    /* Fill the level array exactly (8 levels), then requeue at a ninth. */
    for (int i = 0; i < 8; i++) {
        snprintf(k, sizeof k, "%d", i);
        wq_add_opts o = {.set_priority = 1, .priority = i};
        wq_queue_add(q, k, strlen(k), &o);
    }
    wq_item_info info;
    cr_assert_eq(wq_queue_get(q, &info), 0); /* "7": its level empties */
    wq_add_opts o = {.set_priority = 1, .priority = 7};
    wq_queue_add(q, "x", 1, &o); /* level 7 again: 8 levels */
    wq_add_opts hi = {.set_priority = 1, .priority = 99};
    wq_queue_add(q, "7", 1, &hi); /* dirty while processing, at a new level */
    fail_at = alloc_calls + 1;
    sticky = 1;
    cr_assert_eq(wq_queue_done(q, "7", 1), WQ_ENOMEM);
    cr_assert_eq(wq_queue_processing(q), 1);
    cr_assert_eq(wq_queue_len(q), 8);
    cr_assert_eq(wq_queue_metrics(q)->work_duration.count, 0);
    cr_assert_eq(wq_queue_check(q), 0);
    disarm();
    cr_assert_eq(wq_queue_done(q, "7", 1), 0);
    cr_assert_eq(wq_queue_get(q, &info), 0);
    cr_assert_eq(info.keylen, 1);
    cr_assert_eq(info.key[0], '7');
    wq_queue_free(q);
    cr_assert_eq(live, 0);
    restore();
}

Test(oom, delay_heap_schedule_fails_without_change)
{
    install(0, 0);
    wq_delay d;
    wq_delay_init(&d);
    for (uint32_t id = 0; id < 64; id++)
        cr_assert_eq(wq_delay_schedule(&d, id, 100 - id), 1);
    fail_at = alloc_calls + 1;
    sticky = 1;
    cr_assert_eq(wq_delay_schedule(&d, 64, 1), WQ_ENOMEM, "heap full");
    cr_assert_eq(wq_delay_schedule(&d, 5000, 1), WQ_ENOMEM, "index too small");
    cr_assert_eq(wq_delay_len(&d), 64);
    cr_assert_eq(wq_delay_next(&d), 37);
    cr_assert_eq(wq_delay_check(&d), 0);
    cr_assert_eq(wq_delay_schedule(&d, 3, 1), 1, "moving an entry needs no memory");
    disarm();
    cr_assert_eq(wq_delay_schedule(&d, 5000, 0), 1);
    cr_assert_eq(wq_delay_next(&d), 0);
    wq_delay_destroy(&d);
    cr_assert_eq(live, 0);
    restore();
}

Test(oom, keymap_put_fails_without_change)
{
    install(0, 0);
    wq_keymap *m = wq_keymap_new();
    char k[16];
    for (int i = 0; i < 12; i++) { /* 12 of 16 slots: the next put grows the table */
        snprintf(k, sizeof k, "k%d", i);
        *wq_keymap_put(m, k, strlen(k), NULL) = (uint64_t)i;
    }
    for (int round = 0; round < 2; round++) {
        fail_at = alloc_calls + 1 + round; /* the table growth, then the key copy */
        sticky = 0;
        int created = -1;
        cr_assert_null(wq_keymap_put(m, "new", 3, &created));
        cr_assert_eq(wq_keymap_count(m), 12);
        cr_assert_null(wq_keymap_get(m, "new", 3));
        for (int i = 0; i < 12; i++) {
            snprintf(k, sizeof k, "k%d", i);
            uint64_t *v = wq_keymap_get(m, k, strlen(k));
            cr_assert_not_null(v);
            cr_assert_eq(*v, (uint64_t)i);
        }
        disarm();
    }
    cr_assert_not_null(wq_keymap_put(m, "new", 3, NULL));
    cr_assert_eq(wq_keymap_count(m), 13);
    wq_keymap_free(m);
    cr_assert_eq(live, 0);
    install(1, 0);
    cr_assert_null(wq_keymap_new());
    install(2, 0);
    cr_assert_null(wq_keymap_new());
    cr_assert_eq(live, 0);
    restore();
}

Test(oom, slab_alloc_reports_null_and_recovers)
{
    install(0, 0);
    wq_slab s;
    wq_slab_init(&s);
    fail_at = alloc_calls + 1;
    sticky = 1;
    cr_assert_null(wq_slab_alloc(&s, 16), "no page");
    cr_assert_null(wq_slab_alloc(&s, 1000), "large block");
    disarm();
    void *a = wq_slab_alloc(&s, 16);
    void *b = wq_slab_alloc(&s, 1000);
    cr_assert_not_null(a);
    cr_assert_not_null(b);
    wq_slab_free(&s, b, 1000);
    wq_slab_free(&s, a, 16);
    wq_slab_destroy(&s);
    cr_assert_eq(live, 0);
    restore();
}
