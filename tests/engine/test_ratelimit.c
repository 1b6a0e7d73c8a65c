/*
 * Rate limiter tests: every number in WORKQUEUE.md's "Rate limiters"
 * section, the 2^63 edge where wqrun differs from upstream, the token
 * bucket on a fake clock, and out-of-memory atomicity through an allocator
 * that fails on demand.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/ratelimit.h"

#define MS (1000 * 1000LL)
#define S WQ_NS_PER_S

/* A clock the test steps by hand. */
static int64_t fake_now;

static int64_t fake_clock(void *ud)
{
    (void)ud;
    return fake_now;
}

static const wq_clock clock_ = {fake_clock, NULL};

/*
 * An allocator with a budget: budget < 0 never fails, otherwise each
 * allocation (fresh or realloc) spends one unit and fails at 0. live counts
 * the blocks handed out and not yet freed, to catch leaks after a failure.
 */
static long budget = -1;
static long live;

static void *budget_realloc(void *ud, void *ptr, size_t size)
{
    (void)ud;
    if (size == 0) {
        if (ptr)
            live--;
        free(ptr);
        return NULL;
    }
    if (budget == 0)
        return NULL;
    if (budget > 0)
        budget--;
    void *p = realloc(ptr, size);
    if (p && !ptr)
        live++;
    return p;
}

static void use_budget_allocator(void)
{
    fake_now = 0;
    budget = -1;
    live = 0;
    wq_set_allocator(budget_realloc, NULL);
}

static void restore_allocator(void)
{
    wq_set_allocator(NULL, NULL);
}

/* When on a NUL-terminated key, which must succeed. */
static int64_t when(wq_limiter *l, const char *key)
{
    int64_t d = -1;
    int rc = wq_limiter_when(l, key, strlen(key), &d);
    cr_assert(eq(int, rc, 0), "When failed: %s", wq_strerror(rc));
    return d;
}

static int64_t requeues(const wq_limiter *l, const char *key)
{
    return wq_limiter_num_requeues(l, key, strlen(key));
}

static void forget(wq_limiter *l, const char *key)
{
    wq_limiter_forget(l, key, strlen(key));
}

TestSuite(exponential, .init = use_budget_allocator, .fini = restore_allocator);
TestSuite(fast_slow, .init = use_budget_allocator, .fini = restore_allocator);
TestSuite(bucket, .init = use_budget_allocator, .fini = restore_allocator);
TestSuite(max_of, .init = use_budget_allocator, .fini = restore_allocator);
TestSuite(max_wait, .init = use_budget_allocator, .fini = restore_allocator);
TestSuite(default_limiter, .init = use_budget_allocator, .fini = restore_allocator);
TestSuite(set_requeues, .init = use_budget_allocator, .fini = restore_allocator);
TestSuite(oom, .init = use_budget_allocator, .fini = restore_allocator);

/* ---- exponential ---- */

Test(exponential, doubles_from_base_and_caps_at_max)
{
    wq_limiter *l = wq_limiter_exponential(1 * MS, 1 * S);
    cr_assert(eq(int, wq_limiter_kind_of(l), WQ_LIMITER_EXPONENTIAL));
    const int64_t want[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_assert(eq(i64, when(l, "one"), want[i] * MS), "call %zu", i + 1);
    /* 1024 ms would exceed 1 s. */
    cr_assert(eq(i64, when(l, "one"), 1 * S));
    cr_assert(eq(i64, when(l, "one"), 1 * S));
    wq_limiter_free(l);
}

Test(exponential, counts_requeues_per_key_and_forget_starts_over)
{
    wq_limiter *l = wq_limiter_exponential(1 * MS, 1 * S);
    cr_assert(eq(i64, requeues(l, "one"), 0));
    for (int i = 0; i < 5; i++)
        when(l, "one");
    cr_assert(eq(i64, requeues(l, "one"), 5));
    /* Another key has its own count. */
    cr_assert(eq(i64, when(l, "two"), 1 * MS));
    cr_assert(eq(i64, requeues(l, "two"), 1));
    forget(l, "one");
    cr_assert(eq(i64, requeues(l, "one"), 0));
    cr_assert(eq(i64, when(l, "one"), 1 * MS));
    cr_assert(eq(i64, requeues(l, "two"), 1));
    wq_limiter_free(l);
}

Test(exponential, keys_are_byte_strings_with_embedded_nul)
{
    wq_limiter *l = wq_limiter_exponential(1 * MS, 1 * S);
    int64_t d;
    cr_assert(eq(int, wq_limiter_when(l, "a\0b", 3, &d), 0));
    cr_assert(eq(int, wq_limiter_when(l, "a\0b", 3, &d), 0));
    cr_assert(eq(i64, d, 2 * MS));
    cr_assert(eq(i64, wq_limiter_num_requeues(l, "a", 1), 0));
    cr_assert(eq(i64, wq_limiter_num_requeues(l, "a\0c", 3), 0));
    cr_assert(eq(int, wq_limiter_when(l, "", 0, &d), 0));
    cr_assert(eq(i64, d, 1 * MS));
    cr_assert(eq(i64, wq_limiter_num_requeues(l, "", 0), 1));
    cr_assert(eq(i64, wq_limiter_num_requeues(l, "a\0b", 3), 2));
    wq_limiter_free(l);
}

Test(exponential, default_controller_values_reach_655_36_s_at_call_18_then_1000_s)
{
    wq_limiter *l = wq_limiter_exponential(5 * MS, 1000 * S);
    for (int call = 1; call <= 17; call++)
        cr_assert(eq(i64, when(l, "k"), (5 * MS) << (call - 1)), "call %d", call);
    cr_assert(eq(i64, when(l, "k"), 655360000000LL));
    for (int call = 19; call <= 40; call++)
        cr_assert(eq(i64, when(l, "k"), 1000 * S), "call %d", call);
    cr_assert(eq(i64, requeues(l, "k"), 40));
    wq_limiter_free(l);
}

Test(exponential, base_above_max_always_returns_max)
{
    wq_limiter *l = wq_limiter_exponential(2 * S, 1 * S);
    for (int i = 0; i < 5; i++)
        cr_assert(eq(i64, when(l, "k"), 1 * S));
    wq_limiter_free(l);
}

Test(exponential, zero_base_always_returns_zero_even_after_huge_counts)
{
    wq_limiter *l = wq_limiter_exponential(0, 1 * S);
    for (int i = 0; i < 2000; i++)
        cr_assert(eq(i64, when(l, "k"), 0), "call %d", i + 1);
    cr_assert(eq(i64, requeues(l, "k"), 2000));
    wq_limiter_free(l);
}

Test(exponential, exactly_two_to_the_63_ns_returns_max_where_upstream_goes_negative)
{
    wq_limiter *l = wq_limiter_exponential(1, INT64_MAX);
    for (int c = 0; c < 63; c++)
        cr_assert(eq(i64, when(l, "k"), (int64_t)1 << c), "count %d", c);
    /* count 63: 2^63 does not fit an int64. */
    cr_assert(eq(i64, when(l, "k"), INT64_MAX));
    cr_assert(eq(i64, when(l, "k"), INT64_MAX));
    wq_limiter_free(l);

    /* The same with a max that is not WQ_NEVER: max is what comes back. */
    l = wq_limiter_exponential(1, INT64_MAX - 5);
    cr_assert(eq(int, wq_limiter_set_requeues(l, "k", 1, 62), 0));
    cr_assert(eq(i64, when(l, "k"), (int64_t)1 << 62));
    cr_assert(eq(i64, when(l, "k"), INT64_MAX - 5));
    wq_limiter_free(l);
}

Test(exponential, just_below_two_to_the_63_converts_exactly)
{
    wq_limiter *l = wq_limiter_exponential(3, INT64_MAX);
    cr_assert(eq(int, wq_limiter_set_requeues(l, "k", 1, 61), 0));
    cr_assert(eq(i64, when(l, "k"), 6917529027641081856LL)); /* 3 * 2^61 */
    cr_assert(eq(i64, when(l, "k"), INT64_MAX));             /* 3 * 2^62 >= 2^63 */
    wq_limiter_free(l);
}

Test(exponential, infinite_backoff_after_many_calls_returns_max)
{
    wq_limiter *l = wq_limiter_exponential(1 * MS, 1 * S);
    for (int i = 0; i < 2000; i++)
        when(l, "k");
    /* count 2000: 1e6 * 2^2000 is +inf in double. */
    cr_assert(eq(i64, when(l, "k"), 1 * S));
    cr_assert(eq(i64, requeues(l, "k"), 2001));
    cr_assert(eq(int, wq_limiter_set_requeues(l, "k", 1, INT64_MAX), 0));
    cr_assert(eq(i64, when(l, "k"), 1 * S));
    /* The count saturates instead of wrapping. */
    cr_assert(eq(i64, requeues(l, "k"), INT64_MAX));
    wq_limiter_free(l);
}

/* ---- fast_slow ---- */

Test(fast_slow, fast_for_max_fast_tries_then_slow)
{
    wq_limiter *l = wq_limiter_fast_slow(5 * MS, 10 * S, 3);
    cr_assert(eq(int, wq_limiter_kind_of(l), WQ_LIMITER_FAST_SLOW));
    const int64_t want[] = {5 * MS, 5 * MS, 5 * MS, 10 * S, 10 * S};
    for (int i = 0; i < 5; i++)
        cr_assert(eq(i64, when(l, "k"), want[i]), "call %d", i + 1);
    cr_assert(eq(i64, requeues(l, "k"), 5));
    wq_limiter_free(l);
}

Test(fast_slow, forget_restarts_the_fast_tries_per_key)
{
    wq_limiter *l = wq_limiter_fast_slow(5 * MS, 10 * S, 1);
    cr_assert(eq(i64, when(l, "a"), 5 * MS));
    cr_assert(eq(i64, when(l, "a"), 10 * S));
    cr_assert(eq(i64, when(l, "b"), 5 * MS));
    forget(l, "a");
    cr_assert(eq(i64, requeues(l, "a"), 0));
    cr_assert(eq(i64, when(l, "a"), 5 * MS));
    cr_assert(eq(i64, requeues(l, "b"), 1));
    wq_limiter_free(l);
}

Test(fast_slow, zero_max_fast_is_always_slow)
{
    wq_limiter *l = wq_limiter_fast_slow(5 * MS, 10 * S, 0);
    cr_assert(eq(i64, when(l, "k"), 10 * S));
    cr_assert(eq(i64, when(l, "k"), 10 * S));
    wq_limiter_free(l);
}

/* ---- bucket ---- */

Test(bucket, burst_100_at_10_qps_serves_100_then_spaces_by_a_tenth_of_a_second)
{
    fake_now = 5 * S;
    wq_limiter *l = wq_limiter_bucket(&clock_, 10, 100);
    cr_assert(eq(int, wq_limiter_kind_of(l), WQ_LIMITER_BUCKET));
    for (int call = 1; call <= 100; call++)
        cr_assert(eq(i64, when(l, "k"), 0), "call %d", call);
    cr_assert(eq(i64, when(l, "k"), 100000000));
    cr_assert(eq(i64, when(l, "k"), 200000000));
    cr_assert(eq(i64, when(l, "k"), 300000000));
    cr_assert(eq(i64, when(l, "k"), 400000000));
    cr_assert(eq(i64, when(l, "k"), 500000000));
    fake_now += 250 * MS;
    cr_assert(eq(i64, when(l, "k"), 350000000));
    wq_limiter_free(l);
}

Test(bucket, three_qps_burst_one_truncates_to_whole_ns)
{
    wq_limiter *l = wq_limiter_bucket(&clock_, 3, 1);
    cr_assert(eq(i64, when(l, "k"), 0));
    cr_assert(eq(i64, when(l, "k"), 333333333));
    cr_assert(eq(i64, when(l, "k"), 666666666));
    cr_assert(eq(i64, when(l, "k"), 1000000000));
    wq_limiter_free(l);
}

Test(bucket, zero_qps_serves_the_burst_then_never)
{
    wq_limiter *l = wq_limiter_bucket(&clock_, 0, 1);
    cr_assert(eq(i64, when(l, "k"), 0));
    cr_assert(eq(i64, when(l, "k"), WQ_NEVER));
    fake_now += 1000 * S; /* nothing refills */
    cr_assert(eq(i64, when(l, "k"), WQ_NEVER));
    wq_limiter_free(l);

    l = wq_limiter_bucket(&clock_, 0, 3);
    cr_assert(eq(i64, when(l, "a"), 0));
    cr_assert(eq(i64, when(l, "b"), 0));
    cr_assert(eq(i64, when(l, "c"), 0));
    cr_assert(eq(i64, when(l, "d"), WQ_NEVER));
    wq_limiter_free(l);
}

Test(bucket, zero_burst_with_finite_qps_is_never_and_keeps_its_state)
{
    wq_limiter *l = wq_limiter_bucket(&clock_, 10, 0);
    cr_assert(eq(i64, when(l, "k"), WQ_NEVER));
    fake_now += 10 * S;
    cr_assert(eq(i64, when(l, "k"), WQ_NEVER));
    wq_limiter_free(l);
}

Test(bucket, infinite_qps_is_always_zero_even_with_zero_burst)
{
    wq_limiter *l = wq_limiter_bucket(&clock_, INFINITY, 0);
    for (int i = 0; i < 1000; i++)
        cr_assert(eq(i64, when(l, "k"), 0));
    wq_limiter_free(l);
}

Test(bucket, is_shared_by_all_keys_and_has_no_requeues)
{
    wq_limiter *l = wq_limiter_bucket(&clock_, 10, 2);
    cr_assert(eq(i64, when(l, "a"), 0));
    cr_assert(eq(i64, when(l, "b"), 0));
    cr_assert(eq(i64, when(l, "c"), 100 * MS));
    cr_assert(eq(i64, requeues(l, "a"), 0));
    cr_assert(eq(i64, requeues(l, "c"), 0));
    /* Forget gives no tokens back. */
    forget(l, "c");
    cr_assert(eq(i64, when(l, "c"), 200 * MS));
    wq_limiter_set_requeues(l, "c", 1, 7);
    cr_assert(eq(i64, requeues(l, "c"), 0));
    wq_limiter_free(l);
}

Test(bucket, refills_at_qps_but_never_beyond_burst)
{
    wq_limiter *l = wq_limiter_bucket(&clock_, 10, 2);
    cr_assert(eq(i64, when(l, "k"), 0));
    cr_assert(eq(i64, when(l, "k"), 0));
    cr_assert(eq(i64, when(l, "k"), 100 * MS)); /* tokens -1 */
    fake_now += 1000 * S;                       /* refills to 2, not 10000 */
    cr_assert(eq(i64, when(l, "k"), 0));
    cr_assert(eq(i64, when(l, "k"), 0));
    cr_assert(eq(i64, when(l, "k"), 100 * MS));
    fake_now += 50 * MS; /* half a token: -1 + 0.5 - 1 */
    cr_assert(eq(i64, when(l, "k"), 150 * MS));
    wq_limiter_free(l);
}

Test(bucket, starts_full_whatever_the_clock_reads)
{
    fake_now = INT64_MIN + 1;
    wq_limiter *l = wq_limiter_bucket(&clock_, 10, 2);
    cr_assert(eq(i64, when(l, "k"), 0));
    cr_assert(eq(i64, when(l, "k"), 0));
    cr_assert(eq(i64, when(l, "k"), 100 * MS));
    /* A jump wider than an int64 can hold refills to burst, no overflow. */
    fake_now = INT64_MAX;
    cr_assert(eq(i64, when(l, "k"), 0));
    cr_assert(eq(i64, when(l, "k"), 0));
    cr_assert(eq(i64, when(l, "k"), 100 * MS));
    wq_limiter_free(l);
}

Test(bucket, clock_going_backwards_adds_no_tokens)
{
    fake_now = 10 * S;
    wq_limiter *l = wq_limiter_bucket(&clock_, 10, 1);
    cr_assert(eq(i64, when(l, "k"), 0));
    fake_now = 5 * S;
    cr_assert(eq(i64, when(l, "k"), 100 * MS));
    /* last is now 5 s: 100 ms later one token is back, tokens -1 + 1 - 1. */
    fake_now = 5 * S + 100 * MS;
    cr_assert(eq(i64, when(l, "k"), 100 * MS));
    wq_limiter_free(l);
}

Test(bucket, unbounded_wait_saturates_at_never)
{
    wq_limiter *l = wq_limiter_bucket(&clock_, 1e-300, 1);
    cr_assert(eq(i64, when(l, "k"), 0));
    cr_assert(eq(i64, when(l, "k"), WQ_NEVER));
    wq_limiter_free(l);
}

/* ---- max_of ---- */

Test(max_of, calls_every_child_and_returns_the_largest)
{
    wq_limiter *c[3] = {wq_limiter_exponential(1 * MS, 1 * S),
                        wq_limiter_fast_slow(3 * MS, 10 * S, 2), wq_limiter_bucket(&clock_, 10, 1)};
    wq_limiter *l = wq_limiter_max_of(c, 3);
    cr_assert(eq(int, wq_limiter_kind_of(l), WQ_LIMITER_MAX_OF));
    cr_assert(eq(i64, when(l, "k"), 3 * MS));   /* 1 ms, 3 ms, 0 */
    cr_assert(eq(i64, when(l, "k"), 100 * MS)); /* 2 ms, 3 ms, 100 ms */
    cr_assert(eq(i64, when(l, "k"), 10 * S));   /* 4 ms, 10 s, 200 ms */
    /* Every child kept its side effects. */
    cr_assert(eq(i64, requeues(c[0], "k"), 3));
    cr_assert(eq(i64, requeues(c[1], "k"), 3));
    cr_assert(eq(i64, when(c[2], "other"), 300 * MS));
    cr_assert(eq(i64, when(c[0], "k"), 8 * MS));
    wq_limiter_free(l);
    for (int i = 0; i < 3; i++)
        wq_limiter_free(c[i]);
}

Test(max_of, with_no_children_returns_zero)
{
    wq_limiter *l = wq_limiter_max_of(NULL, 0);
    cr_assert(eq(i64, when(l, "k"), 0));
    cr_assert(eq(i64, requeues(l, "k"), 0));
    forget(l, "k");
    wq_limiter_free(l);
}

Test(max_of, num_requeues_is_the_max_and_forget_clears_every_child)
{
    wq_limiter *c[2] = {wq_limiter_exponential(1 * MS, 1 * S),
                        wq_limiter_fast_slow(3 * MS, 10 * S, 2)};
    wq_limiter *l = wq_limiter_max_of(c, 2);
    when(c[0], "k");
    when(c[0], "k");
    when(c[1], "k");
    cr_assert(eq(i64, requeues(l, "k"), 2));
    when(l, "k");
    cr_assert(eq(i64, requeues(l, "k"), 3));
    cr_assert(eq(i64, requeues(c[1], "k"), 2));
    forget(l, "k");
    cr_assert(eq(i64, requeues(c[0], "k"), 0));
    cr_assert(eq(i64, requeues(c[1], "k"), 0));
    wq_limiter_free(l);
    wq_limiter_free(c[0]);
    wq_limiter_free(c[1]);
}

Test(max_of, borrows_its_children_and_copies_the_array)
{
    wq_limiter *child = wq_limiter_exponential(1 * MS, 1 * S);
    long child_blocks = live;
    wq_limiter *c[1] = {child};
    wq_limiter *l = wq_limiter_max_of(c, 1);
    c[0] = NULL; /* the limiter keeps its own copy of the array */
    cr_assert(eq(i64, when(l, "k"), 1 * MS));
    wq_limiter_free(l);
    /* Freeing the parent left the child (and only the child) alive. */
    cr_assert(eq(long, live, child_blocks + 1)); /* + the copy of "k" */
    cr_assert(eq(i64, when(child, "k"), 2 * MS));
    wq_limiter_free(child);
    cr_assert(eq(long, live, 0));
}

Test(max_of, never_from_a_child_wins)
{
    wq_limiter *c[2] = {wq_limiter_exponential(1 * MS, 1 * S), wq_limiter_bucket(&clock_, 0, 0)};
    wq_limiter *l = wq_limiter_max_of(c, 2);
    cr_assert(eq(i64, when(l, "k"), WQ_NEVER));
    cr_assert(eq(i64, requeues(l, "k"), 1));
    wq_limiter_free(l);
    wq_limiter_free(c[0]);
    wq_limiter_free(c[1]);
}

/* ---- with_max_wait ---- */

Test(max_wait, caps_the_child_and_delegates_requeues_and_forget)
{
    wq_limiter *c = wq_limiter_exponential(1 * MS, 1 * S);
    wq_limiter *l = wq_limiter_with_max_wait(c, 5 * MS);
    cr_assert(eq(int, wq_limiter_kind_of(l), WQ_LIMITER_MAX_WAIT));
    const int64_t want[] = {1 * MS, 2 * MS, 4 * MS, 5 * MS, 5 * MS};
    for (int i = 0; i < 5; i++)
        cr_assert(eq(i64, when(l, "k"), want[i]), "call %d", i + 1);
    cr_assert(eq(i64, requeues(l, "k"), 5));
    cr_assert(eq(i64, requeues(c, "k"), 5));
    forget(l, "k");
    cr_assert(eq(i64, requeues(c, "k"), 0));
    wq_limiter_free(l);
    /* The child was borrowed and still works. */
    cr_assert(eq(i64, when(c, "k"), 1 * MS));
    wq_limiter_free(c);
}

Test(max_wait, caps_never_to_the_maximum)
{
    wq_limiter *c = wq_limiter_bucket(&clock_, 0, 0);
    wq_limiter *l = wq_limiter_with_max_wait(c, 30 * S);
    cr_assert(eq(i64, when(l, "k"), 30 * S));
    wq_limiter_free(l);
    wq_limiter_free(c);
}

/* ---- default ---- */

Test(default_limiter, is_exponential_5ms_1000s_under_a_10_qps_burst_100_bucket)
{
    wq_limiter *l = wq_limiter_default(&clock_);
    cr_assert(eq(int, wq_limiter_kind_of(l), WQ_LIMITER_MAX_OF));
    /* One key: the exponential dominates while the bucket has tokens. */
    for (int call = 1; call <= 17; call++)
        cr_assert(eq(i64, when(l, "k"), (5 * MS) << (call - 1)), "call %d", call);
    cr_assert(eq(i64, when(l, "k"), 655360000000LL));
    cr_assert(eq(i64, when(l, "k"), 1000 * S));
    cr_assert(eq(i64, requeues(l, "k"), 19));
    /* 19 tokens used; 81 fresh keys use the rest at 5 ms each. */
    char key[16];
    for (int i = 0; i < 81; i++) {
        snprintf(key, sizeof key, "k%d", i);
        cr_assert(eq(i64, when(l, key), 5 * MS));
    }
    /* Call 101 on a fresh key: the bucket's 100 ms beats the exponential's 5 ms. */
    cr_assert(eq(i64, when(l, "fresh"), 100 * MS));
    forget(l, "k");
    cr_assert(eq(i64, requeues(l, "k"), 0));
    /* Freeing it frees both children (the leak count proves it). */
    wq_limiter_free(l);
    cr_assert(eq(long, live, 0));
}

/* ---- set_requeues ---- */

Test(set_requeues, restores_counts_through_nested_limiters)
{
    wq_limiter *c[3] = {wq_limiter_exponential(1 * MS, 1 * S),
                        wq_limiter_fast_slow(5 * MS, 10 * S, 3),
                        wq_limiter_bucket(&clock_, 10, 100)};
    wq_limiter *m = wq_limiter_max_of(c, 3);
    wq_limiter *l = wq_limiter_with_max_wait(m, 60 * S);
    cr_assert(eq(int, wq_limiter_set_requeues(l, "k", 1, 4), 0));
    cr_assert(eq(i64, requeues(c[0], "k"), 4));
    cr_assert(eq(i64, requeues(c[1], "k"), 4));
    cr_assert(eq(i64, requeues(l, "k"), 4));
    /* count 4: exponential 16 ms, fast_slow's 5th try is slow. */
    cr_assert(eq(i64, when(c[0], "k"), 16 * MS));
    cr_assert(eq(i64, when(c[1], "k"), 10 * S));
    /* Overwrites, not adds. */
    cr_assert(eq(int, wq_limiter_set_requeues(l, "k", 1, 1), 0));
    cr_assert(eq(i64, when(l, "k"), 5 * MS)); /* max(2 ms, 5 ms, 0) */
    wq_limiter_free(l);
    wq_limiter_free(m);
    for (int i = 0; i < 3; i++)
        wq_limiter_free(c[i]);
}

Test(set_requeues, zero_removes_the_key)
{
    wq_limiter *l = wq_limiter_exponential(1 * MS, 1 * S);
    when(l, "k");
    when(l, "k");
    long before = live;
    cr_assert(eq(int, wq_limiter_set_requeues(l, "k", 1, 0), 0));
    cr_assert(eq(i64, requeues(l, "k"), 0));
    cr_assert(eq(long, live, before - 1)); /* the key's copy is gone */
    cr_assert(eq(i64, when(l, "k"), 1 * MS));
    wq_limiter_free(l);
}

/* ---- out of memory ---- */

Test(oom, when_for_a_new_key_fails_cleanly_then_succeeds)
{
    wq_limiter *l = wq_limiter_exponential(1 * MS, 1 * S);
    when(l, "old");
    long before = live;
    budget = 0;
    int64_t d = 12345;
    cr_assert(eq(int, wq_limiter_when(l, "new", 3, &d), WQ_ENOMEM));
    cr_assert(eq(i64, d, 12345));
    cr_assert(eq(i64, requeues(l, "new"), 0));
    cr_assert(eq(long, live, before));
    /* A key that exists needs no memory. */
    cr_assert(eq(i64, when(l, "old"), 2 * MS));
    budget = -1;
    cr_assert(eq(i64, when(l, "new"), 1 * MS));
    cr_assert(eq(i64, requeues(l, "new"), 1));
    wq_limiter_free(l);
}

Test(oom, failing_table_growth_changes_nothing)
{
    wq_limiter *l = wq_limiter_fast_slow(5 * MS, 10 * S, 1);
    char key[16];
    int i = 0, failed = 0;
    /* Allow exactly one allocation per call: a new key copy fits, a growth does not. */
    for (; i < 100 && !failed; i++) {
        snprintf(key, sizeof key, "k%d", i);
        budget = 1;
        int64_t d;
        int rc = wq_limiter_when(l, key, strlen(key), &d);
        if (rc == WQ_ENOMEM)
            failed = 1;
        else
            cr_assert(eq(i64, d, 5 * MS));
    }
    cr_assert(failed, "a table growth should have needed two allocations");
    cr_assert(eq(i64, requeues(l, key), 0));
    for (int j = 0; j < i - 1; j++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", j);
        cr_assert(eq(i64, requeues(l, k), 1));
    }
    budget = -1;
    cr_assert(eq(i64, when(l, key), 5 * MS));
    wq_limiter_free(l);
}

Test(oom, max_of_failing_in_a_later_child_rolls_back_the_earlier_ones)
{
    wq_limiter *c[3] = {wq_limiter_exponential(1 * MS, 1 * S), wq_limiter_bucket(&clock_, 10, 1),
                        wq_limiter_fast_slow(5 * MS, 10 * S, 3)};
    wq_limiter *l = wq_limiter_max_of(c, 3);
    long before = live;
    budget = 1; /* the exponential's key copy succeeds, the fast_slow's fails */
    int64_t d;
    cr_assert(eq(int, wq_limiter_when(l, "k", 1, &d), WQ_ENOMEM));
    cr_assert(eq(long, live, before)); /* the first child's entry was removed */
    cr_assert(eq(i64, requeues(c[0], "k"), 0));
    cr_assert(eq(i64, requeues(c[2], "k"), 0));
    budget = -1;
    /* The bucket's only token was not spent by the failed call. */
    cr_assert(eq(i64, when(l, "k"), 5 * MS));
    cr_assert(eq(i64, requeues(c[0], "k"), 1));
    cr_assert(eq(i64, requeues(c[2], "k"), 1));
    wq_limiter_free(l);
    for (int i = 0; i < 3; i++)
        wq_limiter_free(c[i]);
}

Test(oom, max_of_failure_keeps_existing_counts_of_earlier_children)
{
    wq_limiter *c[2] = {wq_limiter_exponential(1 * MS, 1 * S),
                        wq_limiter_fast_slow(5 * MS, 10 * S, 3)};
    wq_limiter *l = wq_limiter_max_of(c, 2);
    when(c[0], "k"); /* only the first child knows k */
    budget = 0;
    int64_t d;
    cr_assert(eq(int, wq_limiter_when(l, "k", 1, &d), WQ_ENOMEM));
    cr_assert(eq(i64, requeues(c[0], "k"), 1));
    cr_assert(eq(i64, requeues(c[1], "k"), 0));
    budget = -1;
    cr_assert(eq(i64, when(l, "k"), 5 * MS)); /* max(2 ms, 5 ms) */
    cr_assert(eq(i64, requeues(c[0], "k"), 2));
    wq_limiter_free(l);
    wq_limiter_free(c[0]);
    wq_limiter_free(c[1]);
}

Test(oom, set_requeues_failure_changes_nothing)
{
    wq_limiter *c[2] = {wq_limiter_exponential(1 * MS, 1 * S),
                        wq_limiter_fast_slow(5 * MS, 10 * S, 3)};
    wq_limiter *l = wq_limiter_max_of(c, 2);
    long before = live;
    budget = 1;
    cr_assert(eq(int, wq_limiter_set_requeues(l, "k", 1, 9), WQ_ENOMEM));
    cr_assert(eq(long, live, before));
    cr_assert(eq(i64, requeues(c[0], "k"), 0));
    cr_assert(eq(i64, requeues(c[1], "k"), 0));
    /* Removing needs no memory. */
    budget = 0;
    cr_assert(eq(int, wq_limiter_set_requeues(l, "k", 1, 0), 0));
    budget = -1;
    cr_assert(eq(int, wq_limiter_set_requeues(l, "k", 1, 9), 0));
    cr_assert(eq(i64, requeues(l, "k"), 9));
    wq_limiter_free(l);
    wq_limiter_free(c[0]);
    wq_limiter_free(c[1]);
}

Test(oom, constructors_return_null_and_leak_nothing)
{
    wq_limiter *child = wq_limiter_exponential(1, 2);
    long base = live;
    for (int kind = 0; kind < 6; kind++) {
        for (long n = 0;; n++) {
            budget = n;
            wq_limiter *l = NULL;
            switch (kind) {
            case 0: l = wq_limiter_exponential(1, 2); break;
            case 1: l = wq_limiter_fast_slow(1, 2, 3); break;
            case 2: l = wq_limiter_bucket(&clock_, 1, 1); break;
            case 3: l = wq_limiter_max_of(&child, 1); break;
            case 4: l = wq_limiter_with_max_wait(child, 1); break;
            case 5: l = wq_limiter_default(&clock_); break;
            }
            budget = -1;
            if (l) {
                cr_assert(gt(long, live, base));
                wq_limiter_free(l);
                cr_assert(eq(long, live, base), "kind %d leaks", kind);
                break;
            }
            cr_assert(eq(long, live, base), "kind %d leaks after %ld allocations", kind, n);
            cr_assert(lt(long, n, 100));
        }
    }
    wq_limiter_free(child);
}

/* ---- with_jitter ---- */

/* A "random" source the test sets: returns u. */
static double fixed_u;

static double fixed_rand(void *ud)
{
    (void)ud;
    return fixed_u;
}

Test(jitter, spreads_the_child_delay_within_plus_minus_the_fraction)
{
    wq_limiter *c = wq_limiter_fast_slow(1 * S, 10 * S, 100);
    wq_limiter *l = wq_limiter_with_jitter(c, 0.1, fixed_rand, NULL, 1);
    cr_assert(l != NULL);
    int64_t d;
    fixed_u = 0.0; /* the lowest draw: -10% */
    cr_assert(eq(int, wq_limiter_when(l, "k", 1, &d), 0));
    cr_assert(eq(i64, d, 900 * MS));
    fixed_u = 0.5; /* the middle: unchanged */
    wq_limiter_when(l, "k", 1, &d);
    cr_assert(eq(i64, d, 1 * S));
    fixed_u = 0.999999; /* just under the top: +10% */
    wq_limiter_when(l, "k", 1, &d);
    cr_assert(d > 1099 * MS && d < 1100 * MS, "got %lld", (long long)d);
    wq_limiter_free(l); /* owns c: ASan reports a leak otherwise */
}

Test(jitter, counts_forgets_and_restores_through_the_child)
{
    wq_limiter *c = wq_limiter_exponential(1 * MS, 1000 * S);
    wq_limiter *l = wq_limiter_with_jitter(c, 0.5, fixed_rand, NULL, 0);
    int64_t d;
    fixed_u = 0.5;
    wq_limiter_when(l, "k", 1, &d);
    wq_limiter_when(l, "k", 1, &d);
    cr_assert(eq(i64, d, 2 * MS), "the child's backoff goes on: 1 ms, then 2 ms");
    cr_assert(eq(i64, wq_limiter_num_requeues(l, "k", 1), 2));
    cr_assert(eq(i64, wq_limiter_num_requeues(c, "k", 1), 2));
    wq_limiter_forget(l, "k", 1);
    cr_assert(eq(i64, wq_limiter_num_requeues(c, "k", 1), 0));
    cr_assert(eq(int, wq_limiter_set_requeues(l, "k", 1, 5), 0));
    cr_assert(eq(i64, wq_limiter_num_requeues(c, "k", 1), 5));
    wq_limiter_free(l); /* borrowed: c survives */
    wq_limiter_when(c, "k", 1, &d);
    cr_assert(eq(i64, d, 32 * MS));
    wq_limiter_free(c);
}

Test(jitter, never_stays_never_and_zero_stays_zero)
{
    wq_limiter *c = wq_limiter_bucket(&clock_, 0, 0); /* can never serve */
    wq_limiter *l = wq_limiter_with_jitter(c, 1.0, fixed_rand, NULL, 1);
    int64_t d;
    fixed_u = 0.0;
    wq_limiter_when(l, "k", 1, &d);
    cr_assert(eq(i64, d, WQ_NEVER));
    wq_limiter_free(l);
    c = wq_limiter_exponential(0, 0);
    l = wq_limiter_with_jitter(c, 1.0, fixed_rand, NULL, 1);
    fixed_u = 0.99;
    wq_limiter_when(l, "k", 1, &d);
    cr_assert(eq(i64, d, 0));
    wq_limiter_free(l);
}

Test(jitter, fraction_is_clamped_to_zero_and_one)
{
    wq_limiter *l =
        wq_limiter_with_jitter(wq_limiter_fast_slow(1 * S, 1 * S, 0), 5.0, fixed_rand, NULL, 1);
    int64_t d;
    fixed_u = 0.0;
    wq_limiter_when(l, "k", 1, &d);
    cr_assert(eq(i64, d, 0), "a fraction above 1 acts as 1: never negative");
    wq_limiter_free(l);
    l = wq_limiter_with_jitter(wq_limiter_fast_slow(1 * S, 1 * S, 0), -1, fixed_rand, NULL, 1);
    wq_limiter_when(l, "k", 1, &d);
    cr_assert(eq(i64, d, 1 * S), "a negative fraction is no jitter");
    wq_limiter_free(l);
}
