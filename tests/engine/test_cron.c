/*
 * Cron spec tests: every field kind, Vixie's day-of-month / day-of-week rule,
 * calendar edges (leap days, impossible dates, month and year ends), the
 * macros and @every, the parse errors word for word, local time across real
 * DST changes (America/New_York, Europe/Berlin), and a randomized check of
 * the calendar walk against a minute-by-minute reference.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/common.h"
#include "engine/cron.h"

/* Unix seconds of a UTC date and time. */
static double utc(int y, int mo, int d, int h, int mi)
{
    struct tm tm = {
        .tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h, .tm_min = mi};
    return (double)timegm(&tm);
}

/* "2026-03-08 07:00:00Z" (UTC), "-1" for no time. */
static const char *iso(double t, char *buf, size_t n)
{
    if (t == -1) {
        snprintf(buf, n, "-1");
        return buf;
    }
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    strftime(buf, n, "%Y-%m-%d %H:%M:%SZ", &tm);
    return buf;
}

static wq_cron *parse_ok(const char *spec)
{
    wq_cron *c = NULL;
    char err[200] = "";
    int rc = wq_cron_parse(spec, &c, err, sizeof err);
    cr_assert(eq(int, rc, 0), "\"%s\" should parse, got: %s", spec, err);
    cr_assert(c != NULL);
    return c;
}

static void expect_next_in(const char *spec, int local, double after, double want)
{
    wq_cron *c = parse_ok(spec);
    double got = wq_cron_next(c, after, local);
    char a[40], g[40], w[40];
    cr_assert(got == want, "\"%s\" after %s: got %s, want %s", spec, iso(after, a, sizeof a),
              iso(got, g, sizeof g), iso(want, w, sizeof w));
    wq_cron_free(c);
}

static void expect_next(const char *spec, double after, double want)
{
    expect_next_in(spec, 0, after, want);
}

/* Each want[i] is the next time after want[i - 1] (want[-1] being after). */
static void expect_seq_in(const char *spec, int local, double after, const double *want, size_t n)
{
    wq_cron *c = parse_ok(spec);
    double t = after;
    for (size_t i = 0; i < n; i++) {
        double got = wq_cron_next(c, t, local);
        char a[40], g[40], w[40];
        cr_assert(got == want[i], "\"%s\" run %zu after %s: got %s, want %s", spec, i + 1,
                  iso(t, a, sizeof a), iso(got, g, sizeof g), iso(want[i], w, sizeof w));
        t = got;
    }
    wq_cron_free(c);
}

#define EXPECT_SEQ(spec, after, ...)                                                               \
    do {                                                                                           \
        const double want_[] = {__VA_ARGS__};                                                      \
        expect_seq_in(spec, 0, after, want_, sizeof want_ / sizeof want_[0]);                      \
    } while (0)

#define EXPECT_LOCAL_SEQ(spec, after, ...)                                                         \
    do {                                                                                           \
        const double want_[] = {__VA_ARGS__};                                                      \
        expect_seq_in(spec, 1, after, want_, sizeof want_ / sizeof want_[0]);                      \
    } while (0)

static void expect_error(const char *spec, const char *msg)
{
    wq_cron *c = (wq_cron *)&c; /* must be reset to NULL */
    char err[200] = "unset";
    int rc = wq_cron_parse(spec, &c, err, sizeof err);
    cr_assert(eq(int, rc, WQ_EINVAL), "\"%s\" should be rejected", spec);
    cr_assert(c == NULL);
    cr_assert(eq(str, err, (char *)msg), "error for \"%s\"", spec);
}

/* Two specs fire at the same times, checked from a few starting points. */
static void expect_same(const char *a, const char *b)
{
    wq_cron *ca = parse_ok(a), *cb = parse_ok(b);
    double t = utc(2025, 12, 30, 22, 17);
    for (int i = 0; i < 40; i++) {
        double ta = wq_cron_next(ca, t, 0), tb = wq_cron_next(cb, t, 0);
        char s[40], x[40], y[40];
        cr_assert(ta == tb, "\"%s\" vs \"%s\" after %s: %s vs %s", a, b, iso(t, s, sizeof s),
                  iso(ta, x, sizeof x), iso(tb, y, sizeof y));
        cr_assert(ta != -1);
        t = ta;
    }
    wq_cron_free(ca);
    wq_cron_free(cb);
}

/* ---- fields ----------------------------------------------------------- */

Test(cron, numbers_in_every_field_fire_once_a_year)
{
    EXPECT_SEQ("30 14 15 6 *", utc(2026, 1, 1, 0, 0), utc(2026, 6, 15, 14, 30),
               utc(2027, 6, 15, 14, 30), utc(2028, 6, 15, 14, 30));
}

Test(cron, stars_fire_every_minute_strictly_after_the_given_time)
{
    expect_next("* * * * *", utc(2026, 5, 5, 10, 0), utc(2026, 5, 5, 10, 1));
    expect_next("* * * * *", utc(2026, 5, 5, 10, 0) + 30, utc(2026, 5, 5, 10, 1));
    expect_next("* * * * *", utc(2026, 5, 5, 10, 0) - 0.5, utc(2026, 5, 5, 10, 0));
    expect_next("* * * * *", utc(2026, 5, 5, 10, 0) - 59.25, utc(2026, 5, 5, 10, 0));
}

Test(cron, range_in_the_hour_field_fires_each_hour_of_the_range)
{
    EXPECT_SEQ("0 9-11 * * *", utc(2026, 5, 5, 9, 0), utc(2026, 5, 5, 10, 0),
               utc(2026, 5, 5, 11, 0), utc(2026, 5, 6, 9, 0));
}

Test(cron, step_in_the_minute_field_fires_every_n_minutes)
{
    EXPECT_SEQ("*/15 * * * *", utc(2026, 5, 5, 10, 7), utc(2026, 5, 5, 10, 15),
               utc(2026, 5, 5, 10, 30), utc(2026, 5, 5, 10, 45), utc(2026, 5, 5, 11, 0));
}

Test(cron, range_with_a_step_fires_from_its_start_to_its_end)
{
    EXPECT_SEQ("10-40/10 * * * *", utc(2026, 5, 5, 10, 0), utc(2026, 5, 5, 10, 10),
               utc(2026, 5, 5, 10, 20), utc(2026, 5, 5, 10, 30), utc(2026, 5, 5, 10, 40),
               utc(2026, 5, 5, 11, 10));
    EXPECT_SEQ("0 1-23/6 * * *", utc(2026, 5, 5, 0, 0), utc(2026, 5, 5, 1, 0),
               utc(2026, 5, 5, 7, 0), utc(2026, 5, 5, 13, 0), utc(2026, 5, 5, 19, 0),
               utc(2026, 5, 6, 1, 0));
}

Test(cron, start_with_a_step_runs_to_the_end_of_the_field)
{
    EXPECT_SEQ("5/20 * * * *", utc(2026, 5, 5, 10, 0), utc(2026, 5, 5, 10, 5),
               utc(2026, 5, 5, 10, 25), utc(2026, 5, 5, 10, 45), utc(2026, 5, 5, 11, 5));
    expect_same("0 0 1 2/3 *", "0 0 1 2,5,8,11 *");
    expect_same("0 0 * * 1/2", "0 0 * * 1,3,5");
}

Test(cron, list_mixes_numbers_ranges_and_steps)
{
    EXPECT_SEQ("1,10-12,*/30 * * * *", utc(2026, 5, 5, 9, 59), utc(2026, 5, 5, 10, 0),
               utc(2026, 5, 5, 10, 1), utc(2026, 5, 5, 10, 10), utc(2026, 5, 5, 10, 11),
               utc(2026, 5, 5, 10, 12), utc(2026, 5, 5, 10, 30), utc(2026, 5, 5, 11, 0));
}

Test(cron, month_names_are_case_insensitive_and_mix_with_numbers)
{
    EXPECT_SEQ("0 0 1 jan,JUL *", utc(2026, 1, 1, 0, 0), utc(2026, 7, 1, 0, 0),
               utc(2027, 1, 1, 0, 0));
    expect_same("0 0 1 jan,JUL *", "0 0 1 1,7 *");
    expect_same("0 0 1 Mar-may,oct *", "0 0 1 3-5,10 *");
    expect_same("0 0 1 feb-dec/2 *", "0 0 1 2,4,6,8,10,12 *");
}

Test(cron, weekday_names_and_both_sundays_mean_the_same_day)
{
    /* 2026-01-01 is a Thursday. */
    EXPECT_SEQ("0 12 * * sun", utc(2026, 1, 1, 0, 0), utc(2026, 1, 4, 12, 0),
               utc(2026, 1, 11, 12, 0));
    expect_same("0 12 * * 0", "0 12 * * 7");
    expect_same("0 12 * * 0", "0 12 * * SUN");
    expect_same("0 12 * * 5-7", "0 12 * * fri,sat,sun");
    expect_same("0 12 * * mon-fri", "0 12 * * 1-5");
    EXPECT_SEQ("0 8 * * mon-fri", utc(2026, 1, 2, 9, 0), utc(2026, 1, 5, 8, 0),
               utc(2026, 1, 6, 8, 0));
}

Test(cron, whitespace_between_and_around_fields_is_any_amount)
{
    expect_same("  */5\t 1  * *   *  \n", "*/5 1 * * *");
}

/* ---- day-of-month and day-of-week ------------------------------------ */

Test(cron, restricted_day_of_month_and_day_of_week_fire_when_either_matches)
{
    /* January 2026: Fridays 2, 9, 16, 23, 30; the 13th is a Tuesday. */
    EXPECT_SEQ("0 0 13 * fri", utc(2026, 1, 1, 0, 0), utc(2026, 1, 2, 0, 0), utc(2026, 1, 9, 0, 0),
               utc(2026, 1, 13, 0, 0), utc(2026, 1, 16, 0, 0), utc(2026, 1, 23, 0, 0),
               utc(2026, 1, 30, 0, 0), utc(2026, 2, 6, 0, 0));
}

Test(cron, a_star_day_field_leaves_the_other_one_alone_in_charge)
{
    EXPECT_SEQ("0 0 13 * *", utc(2026, 1, 1, 0, 0), utc(2026, 1, 13, 0, 0), utc(2026, 2, 13, 0, 0));
    EXPECT_SEQ("0 0 * * fri", utc(2026, 1, 1, 0, 0), utc(2026, 1, 2, 0, 0), utc(2026, 1, 9, 0, 0));
}

Test(cron, a_day_field_starting_with_a_star_and_a_step_makes_both_fields_required)
{
    /* Vixie: "*" + "/2" is still "star", so odd days that are also Mondays
     * (January 2026 Mondays: 5, 12, 19, 26). */
    EXPECT_SEQ("0 0 */2 * mon", utc(2026, 1, 1, 0, 0), utc(2026, 1, 5, 0, 0),
               utc(2026, 1, 19, 0, 0));
    /* The same days written without a star are restricted: either field counts. */
    EXPECT_SEQ("0 0 1-31/2 * mon", utc(2026, 1, 1, 0, 0), utc(2026, 1, 3, 0, 0),
               utc(2026, 1, 5, 0, 0), utc(2026, 1, 7, 0, 0));
}

/* ---- calendar edges --------------------------------------------------- */

Test(cron, february_29th_fires_in_the_next_leap_year)
{
    EXPECT_SEQ("0 0 29 2 *", utc(2026, 1, 1, 0, 0), utc(2028, 2, 29, 0, 0), utc(2032, 2, 29, 0, 0));
    /* 2100 is no leap year: almost 8 years to wait. */
    expect_next("0 0 29 2 *", utc(2096, 3, 1, 0, 0), utc(2104, 2, 29, 0, 0));
}

Test(cron, dates_that_never_exist_give_minus_one)
{
    expect_next("0 0 30 2 *", utc(2026, 1, 1, 0, 0), -1);
    expect_next("0 0 31 4,6,9,11 *", utc(2026, 1, 1, 0, 0), -1);
    expect_next_in("0 0 30 feb *", 1, utc(2026, 1, 1, 0, 0), -1);
}

Test(cron, month_ends_are_crossed_and_short_months_skipped)
{
    EXPECT_SEQ("0 0 31 * *", utc(2026, 1, 31, 0, 0), utc(2026, 3, 31, 0, 0), utc(2026, 5, 31, 0, 0),
               utc(2026, 7, 31, 0, 0), utc(2026, 8, 31, 0, 0));
    expect_next("*/30 * * * *", utc(2026, 2, 28, 23, 45), utc(2026, 3, 1, 0, 0));
    expect_next("0 0 1 * *", utc(2028, 2, 28, 12, 0), utc(2028, 3, 1, 0, 0));
}

Test(cron, year_ends_are_crossed)
{
    expect_next("59 23 31 12 *", utc(2026, 12, 31, 23, 59), utc(2027, 12, 31, 23, 59));
    expect_next("0 0 1 1 *", utc(2026, 12, 31, 23, 59) + 59, utc(2027, 1, 1, 0, 0));
    expect_next("* * * * *", utc(2026, 12, 31, 23, 59), utc(2027, 1, 1, 0, 0));
    expect_next("0 0 * 1 *", utc(2026, 2, 1, 0, 0), utc(2027, 1, 1, 0, 0));
}

Test(cron, times_before_1970_work_too)
{
    expect_next("0 12 * * *", utc(1969, 12, 31, 12, 0), utc(1970, 1, 1, 12, 0));
    expect_next("0 0 29 2 *", utc(1965, 1, 1, 0, 0), utc(1968, 2, 29, 0, 0));
}

Test(cron, a_time_that_is_not_finite_has_no_next)
{
    wq_cron *c = parse_ok("* * * * *");
    cr_assert(eq(dbl, wq_cron_next(c, 1.0 / 0.0, 0), -1));
    cr_assert(eq(dbl, wq_cron_next(c, 0.0 / 0.0, 1), -1));
    cr_assert(eq(dbl, wq_cron_next(c, 1e300, 0), -1));
    wq_cron_free(c);
}

/* ---- macros ----------------------------------------------------------- */

Test(cron, each_macro_fires_like_its_five_fields)
{
    expect_same("@yearly", "0 0 1 1 *");
    expect_same("@annually", "0 0 1 1 *");
    expect_same("@monthly", "0 0 1 * *");
    expect_same("@weekly", "0 0 * * 0");
    expect_same("@daily", "0 0 * * *");
    expect_same("@midnight", "0 0 * * *");
    expect_same("@hourly", "0 * * * *");
    expect_next("@yearly", utc(2026, 5, 5, 10, 0), utc(2027, 1, 1, 0, 0));
    expect_next("@monthly", utc(2026, 5, 5, 10, 0), utc(2026, 6, 1, 0, 0));
    expect_next("@weekly", utc(2026, 1, 1, 10, 0), utc(2026, 1, 4, 0, 0));
    expect_next("@daily", utc(2026, 5, 5, 10, 0), utc(2026, 5, 6, 0, 0));
    expect_next("@hourly", utc(2026, 5, 5, 10, 0), utc(2026, 5, 5, 11, 0));
}

Test(cron, macro_names_ignore_case_and_surrounding_whitespace)
{
    expect_same("  @Daily\t", "0 0 * * *");
    expect_same("@HOURLY", "0 * * * *");
}

Test(cron, cron_specs_are_not_every_intervals)
{
    wq_cron *c = parse_ok("@daily");
    double s = 42;
    cr_assert(eq(int, wq_cron_is_every(c, &s), 0));
    cr_assert(eq(dbl, s, 0));
    cr_assert(eq(int, wq_cron_is_every(c, NULL), 0));
    wq_cron_free(c);
}

/* ---- @every ----------------------------------------------------------- */

static void expect_every(const char *spec, double seconds)
{
    wq_cron *c = parse_ok(spec);
    double s = -1;
    cr_assert(eq(int, wq_cron_is_every(c, &s), 1), "\"%s\"", spec);
    cr_assert(eq(dbl, s, seconds), "\"%s\"", spec);
    cr_assert(eq(dbl, wq_cron_next(c, 1000.25, 0), 1000.25 + seconds), "\"%s\"", spec);
    cr_assert(eq(dbl, wq_cron_next(c, 1000.25, 1), 1000.25 + seconds), "\"%s\"", spec);
    wq_cron_free(c);
}

Test(cron, every_takes_go_style_durations)
{
    expect_every("@every 90s", 90);
    expect_every("@every 5m", 300);
    expect_every("@every 1h30m", 5400);
    expect_every("@every 1.5h", 5400);
    expect_every("@every 2h45m30s", 9930);
    expect_every("@every 250ms", 0.25);
    expect_every("@every .5m", 30);
    expect_every("@every 1m0s", 60);
    expect_every("  @EVERY   10s  ", 10);
}

/* ---- parse errors ----------------------------------------------------- */

Test(cron, wrong_field_counts_are_rejected)
{
    expect_error("", "empty schedule");
    expect_error("   ", "empty schedule");
    expect_error("* * * *",
                 "expected 5 fields (minute hour day-of-month month day-of-week), got 4");
    expect_error("0 * * * * *",
                 "expected 5 fields (minute hour day-of-month month day-of-week), got 6");
}

Test(cron, out_of_range_values_name_the_field_and_its_range)
{
    expect_error("60 * * * *", "field 1 (minute): 60 is out of range 0-59");
    expect_error("0 24 * * *", "field 2 (hour): 24 is out of range 0-23");
    expect_error("0 0 0 * *", "field 3 (day-of-month): 0 is out of range 1-31");
    expect_error("0 0 32 * *", "field 3 (day-of-month): 32 is out of range 1-31");
    expect_error("0 0 * 13 *", "field 4 (month): 13 is out of range 1-12");
    expect_error("0 0 * 0 *", "field 4 (month): 0 is out of range 1-12");
    expect_error("0 0 * * 8", "field 5 (day-of-week): 8 is out of range 0-7");
    expect_error("0-99999999999 * * * *", "field 1 (minute): 99999999999 is out of range 0-59");
}

Test(cron, reversed_ranges_are_rejected)
{
    expect_error("5-1 * * * *", "field 1 (minute): range 5-1 is reversed (start after end)");
    expect_error("0 0 * * sat-sun",
                 "field 5 (day-of-week): range sat-sun is reversed (start after end)");
}

Test(cron, bad_steps_are_rejected)
{
    expect_error("*/0 * * * *", "field 1 (minute): step 0 is out of range 1-60");
    expect_error("0 */25 * * *", "field 2 (hour): step 25 is out of range 1-24");
    expect_error("*/ * * * *", "field 1 (minute): missing step after \"/\" in \"*/\"");
    expect_error("1-5/x * * * *", "field 1 (minute): missing step after \"/\" in \"1-5/x\"");
}

Test(cron, empty_list_items_are_rejected)
{
    expect_error("1,,2 * * * *", "field 1 (minute): empty list item");
    expect_error("1, * * * *", "field 1 (minute): empty list item");
    expect_error("0 0 ,1 * *", "field 3 (day-of-month): empty list item");
}

Test(cron, unknown_names_and_stray_characters_are_rejected)
{
    expect_error("0 0 * foo *", "field 4 (month): unknown name \"foo\" (use jan-dec)");
    expect_error("0 0 * january *", "field 4 (month): unknown name \"january\" (use jan-dec)");
    expect_error("0 0 * * funday", "field 5 (day-of-week): unknown name \"funday\" (use sun-sat)");
    expect_error("0 mon * * *", "field 2 (hour): expected a number, got \"mon\"");
    expect_error("5x * * * *", "field 1 (minute): unexpected \"x\" in \"5x\"");
    expect_error("*5 * * * *", "field 1 (minute): unexpected \"5\" in \"*5\"");
    expect_error("1- * * * *", "field 1 (minute): missing value");
    expect_error("-1 * * * *", "field 1 (minute): unexpected \"-\"");
}

Test(cron, unknown_macros_and_macro_arguments_are_rejected)
{
    expect_error("@fortnightly", "unknown macro \"@fortnightly\" (use @yearly, @annually, "
                                 "@monthly, @weekly, @daily, @midnight, @hourly or @every)");
    expect_error("@daily 5", "@daily takes no arguments, got \"5\"");
}

Test(cron, every_rejects_garbage_durations)
{
    expect_error("@every", "@every: missing duration (e.g. @every 5m)");
    expect_error("@every   ", "@every: missing duration (e.g. @every 5m)");
    expect_error("@every 0s", "@every: duration \"0s\" must be greater than zero");
    expect_error("@every 0h0m", "@every: duration \"0h0m\" must be greater than zero");
    expect_error("@every 5x", "@every: unknown unit \"x\" in \"5x\" (use ms, s, m or h)");
    expect_error("@every 5", "@every: missing unit in \"5\" (use ms, s, m or h)");
    expect_error("@every 5M", "@every: unknown unit \"M\" in \"5M\" (use ms, s, m or h)");
    expect_error("@every -1m", "@every: \"-1m\" is not a valid duration (a positive number with "
                               "a unit, e.g. 90s, 5m, 1h30m)");
    expect_error("@every h",
                 "@every: \"h\" is not a valid duration (expected e.g. 90s, 5m, 1h30m)");
    expect_error("@every 1h 30m", "@every: unexpected \"30m\" after the duration");
}

Test(cron, the_reason_is_cut_to_the_buffer_and_the_buffer_is_optional)
{
    wq_cron *c = NULL;
    char err[8];
    cr_assert(eq(int, wq_cron_parse("0 24 * * *", &c, err, sizeof err), WQ_EINVAL));
    cr_assert(eq(str, err, "field 2"));
    cr_assert(eq(int, wq_cron_parse("0 24 * * *", &c, NULL, 0), WQ_EINVAL));
    cr_assert(c == NULL);
    cr_assert(eq(int, wq_cron_parse(NULL, &c, NULL, 0), WQ_EINVAL));
}

/* ---- a randomized check of the walk ----------------------------------- */

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

/* A random field over lo..hi: "*" or a list of explicit values, as text and set. */
static int rand_field(char *out, size_t n, int lo, int hi, int dense, uint64_t *set)
{
    if (rnd(3) == 0) {
        snprintf(out, n, "*");
        *set = 0;
        for (int v = lo; v <= hi; v++)
            *set |= (uint64_t)1 << v;
        return 1;
    }
    int k = 1 + (int)rnd(dense ? 12 : 3);
    size_t len = 0;
    *set = 0;
    for (int i = 0; i < k; i++) {
        int v = lo + (int)rnd((uint32_t)(hi - lo + 1));
        *set |= (uint64_t)1 << v;
        len += (size_t)snprintf(out + len, n - len, "%s%d", i ? "," : "", v);
    }
    return 0;
}

Test(cron, the_calendar_walk_agrees_with_a_minute_by_minute_search)
{
    for (int round = 0; round < 150; round++) {
        char f[5][64], spec[400];
        uint64_t set[5];
        int star[5];
        static const int lo[5] = {0, 0, 1, 1, 0}, hi[5] = {59, 23, 31, 12, 6};
        for (int i = 0; i < 5; i++)
            star[i] = rand_field(f[i], sizeof f[i], lo[i], hi[i], i < 2, &set[i]);
        snprintf(spec, sizeof spec, "%s %s %s %s %s", f[0], f[1], f[2], f[3], f[4]);
        wq_cron *c = parse_ok(spec);
        int64_t after = (int64_t)utc(2024 + (int)rnd(6), 1 + (int)rnd(12), 1 + (int)rnd(28),
                                     (int)rnd(24), (int)rnd(60)) +
                        (int64_t)rnd(60);
        double got = wq_cron_next(c, (double)after, 0);
        /* The reference looks 400 days ahead: a match there must be ours exactly,
         * none there means ours is later (or -1). */
        int64_t want = -1;
        for (int64_t t = after - after % 60 + 60; t <= after + 400 * 86400LL; t += 60) {
            time_t tt = (time_t)t;
            struct tm tm;
            gmtime_r(&tt, &tm);
            if (!(set[0] >> tm.tm_min & 1) || !(set[1] >> tm.tm_hour & 1) ||
                !(set[3] >> (tm.tm_mon + 1) & 1))
                continue;
            int dom = set[2] >> tm.tm_mday & 1, dow = set[4] >> tm.tm_wday & 1;
            if (star[2] || star[4] ? dom && dow : dom || dow) {
                want = t;
                break;
            }
        }
        char a[40], g[40], w[40];
        if (want != -1)
            cr_assert(got == (double)want, "\"%s\" after %s: got %s, want %s", spec,
                      iso((double)after, a, sizeof a), iso(got, g, sizeof g),
                      iso((double)want, w, sizeof w));
        else
            cr_assert(got == -1 || got > (double)(after + 400 * 86400LL),
                      "\"%s\" after %s: got %s, want none within 400 days", spec,
                      iso((double)after, a, sizeof a), iso(got, g, sizeof g));
        wq_cron_free(c);
    }
}

/* ---- local time ------------------------------------------------------- */

static char saved_tz[256];
static int had_tz;

/* Switches TZ to zone (restored by restore_tz), failing if the zone data is missing. */
static void use_zone(const char *zone)
{
    const char *old = getenv("TZ");
    had_tz = old != NULL;
    if (old)
        snprintf(saved_tz, sizeof saved_tz, "%s", old);
    char path[256];
    snprintf(path, sizeof path, "/usr/share/zoneinfo/%s", zone);
    cr_assert(access(path, R_OK) == 0,
              "time zone data %s is missing: install tzdata (apt-get install tzdata)", path);
    setenv("TZ", zone, 1);
    tzset();
}

static void restore_tz(void)
{
    if (had_tz)
        setenv("TZ", saved_tz, 1);
    else
        unsetenv("TZ");
    tzset();
}

/* The local wall time of t as "YYYY-mm-dd HH:MM". */
static void wall(double t, char *buf, size_t n)
{
    time_t tt = (time_t)t;
    struct tm tm;
    localtime_r(&tt, &tm);
    strftime(buf, n, "%Y-%m-%d %H:%M", &tm);
}

#define H 3600.0

Test(cron, local_time_follows_the_zone_on_an_ordinary_day, .fini = restore_tz)
{
    use_zone("America/New_York");
    /* 2026-06-01 is a Monday; EDT is UTC-4. */
    EXPECT_LOCAL_SEQ("0 9 * * mon-fri", utc(2026, 5, 30, 0, 0), utc(2026, 6, 1, 13, 0),
                     utc(2026, 6, 2, 13, 0));
    /* Winter: EST is UTC-5, and the local date differs from the UTC one. */
    expect_next_in("0 21 * * *", 1, utc(2026, 1, 10, 0, 0), utc(2026, 1, 10, 2, 0));
    expect_next_in("@daily", 1, utc(2026, 1, 10, 0, 0), utc(2026, 1, 10, 5, 0));
    expect_next_in("0 0 1 1 *", 1, utc(2026, 6, 1, 0, 0), utc(2027, 1, 1, 5, 0));
}

Test(cron, a_wall_time_skipped_by_spring_forward_runs_once_at_the_end_of_the_gap,
     .fini = restore_tz)
{
    use_zone("America/New_York");
    /* 2026-03-08: 02:00 EST becomes 03:00 EDT (07:00 UTC); 02:30 never happens. */
    EXPECT_LOCAL_SEQ("30 2 * * *", utc(2026, 3, 7, 12, 0), utc(2026, 3, 8, 7, 0),
                     utc(2026, 3, 9, 6, 30), utc(2026, 3, 10, 6, 30));
    EXPECT_LOCAL_SEQ("30 2 * * *", utc(2026, 3, 6, 12, 0), utc(2026, 3, 7, 7, 30),
                     utc(2026, 3, 8, 7, 0));
    /* Every skipped match, and 03:00 itself, collapse into one run at 03:00 EDT. */
    EXPECT_LOCAL_SEQ("*/30 * * * *", utc(2026, 3, 8, 6, 0), utc(2026, 3, 8, 6, 30),
                     utc(2026, 3, 8, 7, 0), utc(2026, 3, 8, 7, 30), utc(2026, 3, 8, 8, 0));
    EXPECT_LOCAL_SEQ("0,15 2 * * *", utc(2026, 3, 8, 6, 59) + 59, utc(2026, 3, 8, 7, 0),
                     utc(2026, 3, 9, 6, 0));
    /* A match just before the gap is not moved. */
    expect_next_in("59 1 * * *", 1, utc(2026, 3, 8, 5, 0), utc(2026, 3, 8, 6, 59));
}

Test(cron, a_wall_time_repeated_by_fall_back_runs_at_its_first_occurrence_only, .fini = restore_tz)
{
    use_zone("America/New_York");
    /* 2026-11-01: 02:00 EDT becomes 01:00 EST; 01:30 happens at 05:30 and 06:30 UTC. */
    EXPECT_LOCAL_SEQ("30 1 * * *", utc(2026, 10, 31, 12, 0), utc(2026, 11, 1, 5, 30),
                     utc(2026, 11, 2, 6, 30));
    /* Asked during the second 01:xx hour, the repeated 01:30 is already done. */
    expect_next_in("30 1 * * *", 1, utc(2026, 11, 1, 6, 10), utc(2026, 11, 2, 6, 30));
    expect_next_in("30 1 * * *", 1, utc(2026, 11, 1, 5, 40), utc(2026, 11, 2, 6, 30));
}

Test(cron, half_hourly_runs_over_the_fall_back_night_have_no_duplicate_or_missing_wall_time,
     .fini = restore_tz)
{
    use_zone("America/New_York");
    wq_cron *c = parse_ok("*/30 * * * *");
    static const char *const want[] = {
        "2026-10-31 23:30", "2026-11-01 00:00", "2026-11-01 00:30", "2026-11-01 01:00",
        "2026-11-01 01:30", "2026-11-01 02:00", "2026-11-01 02:30", "2026-11-01 03:00",
    };
    /* Hours after 2026-11-01 00:00 UTC: EDT (UTC-4) until 01:59, then EST (UTC-5). */
    static const double want_utc[] = {3.5, 4, 4.5, 5, 5.5, 7, 7.5, 8};
    double t = utc(2026, 11, 1, 3, 0) + 60; /* 23:01 EDT on Oct 31 */
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        t = wq_cron_next(c, t, 1);
        char buf[40];
        wall(t, buf, sizeof buf);
        cr_assert(eq(str, buf, (char *)want[i]), "run %zu", i + 1);
        cr_assert(eq(dbl, t, utc(2026, 11, 1, 0, 0) + want_utc[i] * H), "run %zu", i + 1);
    }
    /* 01:30 EDT (05:30 UTC) is followed by 02:00 EST (07:00 UTC): one 01:xx hour. */
    EXPECT_LOCAL_SEQ("*/30 * * * *", utc(2026, 11, 1, 5, 0), utc(2026, 11, 1, 5, 30),
                     utc(2026, 11, 1, 7, 0), utc(2026, 11, 1, 7, 30));
    /* Asked during the second 01:xx hour, the next run is 02:00 EST. */
    expect_next_in("*/15 * * * *", 1, utc(2026, 11, 1, 6, 20), utc(2026, 11, 1, 7, 0));
    wq_cron_free(c);
}

Test(cron, berlin_skips_and_repeats_its_two_oclock_hour, .fini = restore_tz)
{
    use_zone("Europe/Berlin");
    /* 2026-03-29: 02:00 CET becomes 03:00 CEST (01:00 UTC). */
    EXPECT_LOCAL_SEQ("30 2 * * *", utc(2026, 3, 28, 12, 0), utc(2026, 3, 29, 1, 0),
                     utc(2026, 3, 30, 0, 30));
    /* 2026-10-25: 03:00 CEST becomes 02:00 CET; 02:30 runs at 00:30 UTC, not 01:30. */
    EXPECT_LOCAL_SEQ("30 2 * * *", utc(2026, 10, 24, 12, 0), utc(2026, 10, 25, 0, 30),
                     utc(2026, 10, 26, 1, 30));
    expect_next_in("0 12 * * *", 1, utc(2026, 7, 1, 0, 0), utc(2026, 7, 1, 10, 0));
}
