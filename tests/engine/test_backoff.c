/*
 * wait.Backoff tests: the step sequence with and without factor, steps and
 * cap, jitter from an injected deterministic source that never feeds the
 * next value, and saturation where Go would overflow.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>

#include <math.h>
#include <stdlib.h>

#include "engine/backoff.h"
#include "engine/common.h"

#define S WQ_NS_PER_S

/* A "random" source that returns the value it points at. */
static double fixed(void *ud)
{
    return *(const double *)ud;
}

/* Cycles through a list of values, to show each call draws anew. */
struct seq {
    const double *v;
    size_t n, i;
};

static double cycle(void *ud)
{
    struct seq *s = ud;
    return s->v[s->i++ % s->n];
}

Test(backoff, doubles_for_three_steps_then_stays_at_the_next_value)
{
    wq_backoff b = {.duration_ns = 1 * S, .factor = 2, .steps = 3};
    cr_assert(eq(i64, wq_backoff_step(&b), 1 * S));
    cr_assert(eq(i64, wq_backoff_step(&b), 2 * S));
    cr_assert(eq(i64, wq_backoff_step(&b), 4 * S));
    cr_assert(eq(i64, b.steps, 0));
    for (int i = 0; i < 5; i++)
        cr_assert(eq(i64, wq_backoff_step(&b), 8 * S));
    cr_assert(eq(i64, b.duration_ns, 8 * S));
}

Test(backoff, cap_clamps_the_next_value_and_ends_the_steps)
{
    wq_backoff b = {.duration_ns = 1 * S, .factor = 2, .steps = 3, .cap_ns = 3 * S};
    cr_assert(eq(i64, wq_backoff_step(&b), 1 * S));
    cr_assert(eq(i64, b.steps, 2));
    cr_assert(eq(i64, wq_backoff_step(&b), 2 * S));
    /* 4 s > cap: next is 3 s and no steps remain. */
    cr_assert(eq(i64, b.steps, 0));
    cr_assert(eq(i64, b.duration_ns, 3 * S));
    for (int i = 0; i < 5; i++)
        cr_assert(eq(i64, wq_backoff_step(&b), 3 * S));
}

Test(backoff, value_equal_to_cap_keeps_the_steps)
{
    wq_backoff b = {.duration_ns = 1 * S, .factor = 2, .steps = 5, .cap_ns = 2 * S};
    cr_assert(eq(i64, wq_backoff_step(&b), 1 * S));
    cr_assert(eq(i64, b.steps, 4)); /* 2 s is not above the cap */
    cr_assert(eq(i64, wq_backoff_step(&b), 2 * S));
    cr_assert(eq(i64, b.steps, 0)); /* 4 s was */
    cr_assert(eq(i64, wq_backoff_step(&b), 2 * S));
}

Test(backoff, zero_or_negative_cap_means_no_cap)
{
    wq_backoff b = {.duration_ns = 1 * S, .factor = 10, .steps = 3, .cap_ns = 0};
    wq_backoff_step(&b);
    wq_backoff_step(&b);
    wq_backoff_step(&b);
    cr_assert(eq(i64, wq_backoff_step(&b), 1000 * S));
    b = (wq_backoff){.duration_ns = 1 * S, .factor = 10, .steps = 1, .cap_ns = -1};
    wq_backoff_step(&b);
    cr_assert(eq(i64, wq_backoff_step(&b), 10 * S));
}

Test(backoff, zero_factor_keeps_the_duration_but_spends_steps)
{
    wq_backoff b = {.duration_ns = 1 * S, .factor = 0, .steps = 3};
    for (int i = 0; i < 3; i++)
        cr_assert(eq(i64, wq_backoff_step(&b), 1 * S));
    cr_assert(eq(i64, b.steps, 0));
    cr_assert(eq(i64, wq_backoff_step(&b), 1 * S));
}

Test(backoff, no_steps_returns_the_duration_forever)
{
    wq_backoff b = {.duration_ns = 1 * S, .factor = 2, .steps = 0};
    for (int i = 0; i < 3; i++)
        cr_assert(eq(i64, wq_backoff_step(&b), 1 * S));
    cr_assert(eq(i64, b.duration_ns, 1 * S));
    b.steps = -4;
    cr_assert(eq(i64, wq_backoff_step(&b), 1 * S));
    cr_assert(eq(i64, b.steps, -4));
}

Test(backoff, no_steps_with_jitter_returns_the_jittered_duration_forever)
{
    double quarter = 0.25;
    wq_backoff b = {.duration_ns = 1 * S,
                    .factor = 2,
                    .jitter = 0.5,
                    .steps = 0,
                    .rand = fixed,
                    .rand_ud = &quarter};
    /* 1 s + 0.25 * 0.5 * 1 s, every time; the duration itself never moves. */
    for (int i = 0; i < 4; i++)
        cr_assert(eq(i64, wq_backoff_step(&b), 1125000000), "step %d", i + 1);
    cr_assert(eq(i64, b.duration_ns, 1 * S));
    cr_assert(eq(i64, b.steps, 0));
}

Test(backoff, fractional_factor_truncates_each_next_value)
{
    wq_backoff b = {.duration_ns = 1000, .factor = 1.5, .steps = 10};
    const int64_t want[] = {1000, 1500, 2250, 3375, 5062, 7593};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_assert(eq(i64, wq_backoff_step(&b), want[i]), "step %zu", i + 1);
}

Test(backoff, jitter_is_added_to_the_result_but_never_feeds_the_next_value)
{
    double half = 0.5;
    wq_backoff b = {.duration_ns = 1 * S,
                    .factor = 2,
                    .jitter = 1.0,
                    .steps = 3,
                    .rand = fixed,
                    .rand_ud = &half};
    cr_assert(eq(i64, wq_backoff_step(&b), 1500000000));
    cr_assert(eq(i64, b.duration_ns, 2 * S));
    cr_assert(eq(i64, wq_backoff_step(&b), 3 * S));
    cr_assert(eq(i64, wq_backoff_step(&b), 6 * S));
    /* Out of steps: still jittered, around the clean 8 s. */
    cr_assert(eq(i64, wq_backoff_step(&b), 12 * S));
    cr_assert(eq(i64, wq_backoff_step(&b), 12 * S));
    cr_assert(eq(i64, b.duration_ns, 8 * S));
}

Test(backoff, jitter_draws_a_new_random_value_every_step)
{
    const double v[] = {0.0, 0.25, 0.75};
    struct seq s = {v, 3, 0};
    wq_backoff b = {
        .duration_ns = 1000, .factor = 1, .jitter = 0.5, .steps = 10, .rand = cycle, .rand_ud = &s};
    cr_assert(eq(i64, wq_backoff_step(&b), 1000));
    cr_assert(eq(i64, wq_backoff_step(&b), 1125));
    cr_assert(eq(i64, wq_backoff_step(&b), 1375));
    cr_assert(eq(u64, s.i, 3));
}

Test(backoff, zero_or_negative_jitter_means_none_in_step)
{
    double almost = 0.99;
    wq_backoff b = {.duration_ns = 1 * S,
                    .factor = 2,
                    .jitter = 0,
                    .steps = 1,
                    .rand = fixed,
                    .rand_ud = &almost};
    cr_assert(eq(i64, wq_backoff_step(&b), 1 * S));
    cr_assert(eq(i64, wq_backoff_step(&b), 2 * S));
    b.jitter = -1;
    cr_assert(eq(i64, wq_backoff_step(&b), 2 * S));
}

Test(backoff, growth_saturates_instead_of_overflowing)
{
    wq_backoff b = {.duration_ns = INT64_C(1) << 62, .factor = 4, .steps = 3};
    cr_assert(eq(i64, wq_backoff_step(&b), INT64_C(1) << 62));
    cr_assert(eq(i64, b.duration_ns, INT64_MAX));
    cr_assert(eq(i64, wq_backoff_step(&b), INT64_MAX));
    cr_assert(eq(i64, wq_backoff_step(&b), INT64_MAX));
    cr_assert(eq(i64, wq_backoff_step(&b), INT64_MAX));
}

Test(backoff, jitter_saturates_at_int64_max)
{
    double almost = 0.99;
    wq_backoff b = {
        .duration_ns = INT64_MAX - 10, .jitter = 1.0, .rand = fixed, .rand_ud = &almost};
    cr_assert(eq(i64, wq_backoff_step(&b), INT64_MAX));
}

Test(backoff, nan_factor_keeps_the_duration)
{
    wq_backoff b = {.duration_ns = 7, .factor = NAN, .steps = 2};
    cr_assert(eq(i64, wq_backoff_step(&b), 7));
    cr_assert(eq(i64, wq_backoff_step(&b), 7));
    cr_assert(eq(i64, b.steps, 0));
}

Test(jitter, adds_random_share_of_factor_times_duration)
{
    double r = 0.25;
    cr_assert(eq(i64, wq_jitter(1000, 0.5, fixed, &r), 1125));
    cr_assert(eq(i64, wq_jitter(1000, 2.0, fixed, &r), 1500));
    r = 0;
    cr_assert(eq(i64, wq_jitter(1000, 2.0, fixed, &r), 1000));
}

Test(jitter, zero_or_negative_factor_means_one)
{
    double r = 0.25;
    cr_assert(eq(i64, wq_jitter(1000, 0, fixed, &r), 1250));
    cr_assert(eq(i64, wq_jitter(1000, -3, fixed, &r), 1250));
    cr_assert(eq(i64, wq_jitter(1000, NAN, fixed, &r), 1250));
}

Test(jitter, truncates_to_whole_ns)
{
    double r = 0.3333;
    cr_assert(eq(i64, wq_jitter(10, 1.0, fixed, &r), 13)); /* 10 + 3.333 */
}

Test(jitter, saturates_instead_of_overflowing)
{
    double r = 0.9;
    cr_assert(eq(i64, wq_jitter(INT64_C(1) << 62, 4.0, fixed, &r), INT64_MAX));
    cr_assert(eq(i64, wq_jitter(INT64_MAX, 1.0, fixed, &r), INT64_MAX));
}

Test(jitter, null_source_uses_the_c_library_and_stays_in_range)
{
    srand(42);
    int above = 0;
    for (int i = 0; i < 1000; i++) {
        int64_t d = wq_jitter(1000000, 0.5, NULL, NULL);
        cr_assert(ge(i64, d, 1000000));
        cr_assert(lt(i64, d, 1500000));
        above += d > 1000000;
    }
    cr_assert(gt(int, above, 900));
    wq_backoff b = {.duration_ns = 1000000, .jitter = 0.5};
    int64_t d = wq_backoff_step(&b);
    cr_assert(ge(i64, d, 1000000));
    cr_assert(lt(i64, d, 1500000));
}
