/*
 * Group limits (SPEC 7.4) in the engine: concurrency and rate per group,
 * the queue-wide rate, no head-of-line blocking, and every WORKQUEUE.md
 * rule still holding for grouped keys. A fake clock, nothing sleeps; every
 * observer call runs the invariant checker. The last tests drive random
 * operations against a plain reference model of the dispatch rule.
 */
#include <criterion/criterion.h>

#include "engine/queue.h"
#include "support/fake_clock.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define MS 1000000LL
#define S WQ_NS_PER_S

static wq_queue *q;
static int nready, nqueued;

static void observe(void *ud, wq_queue *qq, wq_event ev, const char *key, size_t len)
{
    (void)ud;
    (void)key;
    (void)len;
    cr_assert_eq(wq_queue_check(qq), 0, "queue inconsistent during event %d", (int)ev);
    nready += ev == WQ_EV_READY;
    nqueued += ev == WQ_EV_QUEUED;
}

static void setup(void)
{
    fc.ns = 1000 * S;
    q = wq_queue_new(&clk);
    cr_assert_not_null(q);
    wq_queue_set_observer(q, observe, NULL);
    nready = nqueued = 0;
}

static void teardown(void)
{
    cr_assert_eq(wq_queue_check(q), 0);
    wq_queue_free(q);
}

TestSuite(groups, .init = setup, .fini = teardown);

static int add_g(const char *key, const char *group, int prio)
{
    wq_add_opts o = {.set_priority = prio != 0, .priority = prio};
    if (group) {
        o.group = group;
        o.grouplen = strlen(group);
    }
    return wq_queue_add(q, key, strlen(key), &o);
}

/* The key get hands out now, or "" when it answers WQ_EEMPTY. */
static char got[64];
static const char *get(void)
{
    wq_item_info info;
    int r = wq_queue_get(q, &info);
    if (r == WQ_EEMPTY)
        return "";
    cr_assert_eq(r, 0);
    cr_assert_lt(info.keylen, sizeof got);
    memcpy(got, info.key, info.keylen);
    got[info.keylen] = 0;
    return got;
}

static void done(const char *key)
{
    cr_assert_eq(wq_queue_done(q, key, strlen(key)), 0, "done %s", key);
}

static void limit_all(uint32_t concurrency, double rate, double burst)
{
    wq_limit l = {concurrency, rate, burst};
    cr_assert_eq(wq_queue_set_group_default(q, &l), 0);
}

Test(groups, a_saturated_group_never_blocks_the_items_of_other_groups)
{
    limit_all(1, 0, 0);
    add_g("slow-1", "slow", 0);
    add_g("slow-2", "slow", 0);
    add_g("slow-3", "slow", 0);
    add_g("fast-1", "fast", 0);
    add_g("fast-2", "fast", 0);
    cr_assert_str_eq(get(), "slow-1");
    cr_assert_str_eq(get(), "fast-1");
    cr_assert_str_eq(get(), "", "both groups are at their concurrency of 1");
    cr_assert_eq(wq_queue_throttled(q), 3);
    cr_assert_eq(wq_queue_len(q), 3, "held back items stay queued");
    done("fast-1");
    cr_assert_str_eq(get(), "fast-2", "the fast group goes on past slow's held items");
    done("fast-2");
    cr_assert_str_eq(get(), "");
    done("slow-1");
    cr_assert_str_eq(get(), "slow-2", "the oldest item of a freed group is next");
}

Test(groups, items_keep_their_place_in_priority_then_fifo_order_across_groups)
{
    limit_all(2, 0, 0);
    add_g("a1", "a", 0);
    add_g("b1", "b", 0);
    add_g("n1", NULL, 0);
    add_g("a2", "a", 0);
    add_g("b2", "b", 5);
    add_g("n2", NULL, 5);
    cr_assert_str_eq(get(), "b2");
    cr_assert_str_eq(get(), "n2");
    cr_assert_str_eq(get(), "a1");
    cr_assert_str_eq(get(), "b1", "b is at its concurrency of 2 now");
    cr_assert_str_eq(get(), "n1");
    cr_assert_str_eq(get(), "a2");
    cr_assert_str_eq(get(), "");
}

Test(groups, a_done_that_frees_a_saturated_group_wakes_a_getter)
{
    limit_all(1, 0, 0);
    add_g("x", "g", 0);
    add_g("y", "g", 0);
    cr_assert_str_eq(get(), "x");
    cr_assert_str_eq(get(), "");
    nready = 0;
    done("x");
    cr_assert_eq(nready, 1);
    cr_assert_str_eq(get(), "y");
}

Test(groups, a_group_rate_spaces_hand_outs_and_next_ready_names_the_token_time)
{
    limit_all(0, 10, 1); /* one every 100 ms */
    for (int i = 0; i < 5; i++) {
        char k[8];
        snprintf(k, sizeof k, "k%d", i);
        add_g(k, "g", 0);
    }
    cr_assert_str_eq(get(), "k0");
    cr_assert_str_eq(get(), "");
    cr_assert_eq(wq_queue_throttled(q), 4);
    cr_assert_eq(wq_queue_next_ready(q), fc.ns + 100 * MS);
    fc.ns += 99 * MS;
    cr_assert_str_eq(get(), "");
    fc.ns += MS;
    nready = 0;
    cr_assert_geq(wq_queue_fire_due(q), 0);
    cr_assert_eq(nready, 1, "the token's arrival is told");
    cr_assert_str_eq(get(), "k1");
    cr_assert_str_eq(get(), "");
}

Test(groups, a_burst_lets_that_many_out_at_once_then_the_rate_holds)
{
    limit_all(0, 5, 3);
    for (int i = 0; i < 10; i++) {
        char k[8];
        snprintf(k, sizeof k, "k%d", i);
        add_g(k, "g", 0);
    }
    int n = 0;
    while (*get())
        n++;
    cr_assert_eq(n, 3);
    /* 10 seconds at 5/s: 50 more tokens, but only 7 items left. */
    int total = n;
    for (int step = 0; step < 100; step++) {
        fc.ns += 100 * MS;
        wq_queue_fire_due(q);
        while (*get())
            total++;
        if (step == 9)
            cr_assert_eq(total, 3 + 5, "one second later: five more");
    }
    cr_assert_eq(total, 10);
}

Test(groups, emptying_a_group_and_adding_again_does_not_reset_its_rate)
{
    limit_all(0, 1, 1);
    add_g("a", "g", 0);
    cr_assert_str_eq(get(), "a");
    done("a");
    add_g("b", "g", 0);
    cr_assert_str_eq(get(), "", "the group's bucket is still empty");
    fc.ns += S;
    cr_assert_str_eq(get(), "b");
}

Test(groups, a_group_override_applies_to_that_group_and_nil_restores_the_default)
{
    limit_all(1, 0, 0);
    wq_limit two = {2, 0, 0};
    cr_assert_eq(wq_queue_set_group_limit(q, "big", 3, &two), 0);
    add_g("b1", "big", 0);
    add_g("b2", "big", 0);
    add_g("b3", "big", 0);
    add_g("s1", "small", 0);
    add_g("s2", "small", 0);
    cr_assert_str_eq(get(), "b1");
    cr_assert_str_eq(get(), "b2");
    cr_assert_str_eq(get(), "s1");
    cr_assert_str_eq(get(), "");
    wq_limit l;
    cr_assert_eq(wq_queue_group_limit(q, "big", 3, &l), 1);
    cr_assert_eq(l.concurrency, 2);
    cr_assert_eq(wq_queue_set_group_limit(q, "big", 3, NULL), 0);
    cr_assert_eq(wq_queue_group_limit(q, "big", 3, &l), 0);
    cr_assert_eq(l.concurrency, 1);
    done("b1");
    cr_assert_str_eq(get(), "", "big is back to 1 and still has b2 out");
    done("b2");
    cr_assert_str_eq(get(), "b3");
}

Test(groups, raising_a_limit_lets_held_items_go_at_once)
{
    limit_all(1, 0, 0);
    add_g("a", "g", 0);
    add_g("b", "g", 0);
    cr_assert_str_eq(get(), "a");
    cr_assert_str_eq(get(), "");
    nready = 0;
    wq_limit three = {3, 0, 0};
    cr_assert_eq(wq_queue_set_group_limit(q, "g", 1, &three), 0);
    cr_assert_eq(nready, 1);
    cr_assert_str_eq(get(), "b");
}

Test(groups, the_queue_rate_limits_every_hand_out)
{
    cr_assert_eq(wq_queue_set_rate(q, 2, 1), 0);
    add_g("a", NULL, 0);
    add_g("b", "g", 0);
    add_g("c", NULL, 0);
    cr_assert_str_eq(get(), "a");
    cr_assert_str_eq(get(), "");
    cr_assert_eq(wq_queue_throttled(q), 2);
    cr_assert_eq(wq_queue_next_ready(q), fc.ns + S / 2);
    fc.ns += S / 2;
    nready = 0;
    wq_queue_fire_due(q);
    cr_assert_eq(nready, 1);
    cr_assert_str_eq(get(), "b");
    cr_assert_str_eq(get(), "");
    cr_assert_eq(wq_queue_set_rate(q, 0, 0), 0, "rate 0 lifts the limit");
    cr_assert_str_eq(get(), "c");
}

Test(groups, per_key_exclusivity_and_readd_while_processing_hold_for_grouped_keys)
{
    limit_all(5, 0, 0);
    add_g("k", "g", 0);
    cr_assert_str_eq(get(), "k");
    cr_assert_eq(add_g("k", "g", 0), 1, "dirty while processing");
    cr_assert_str_eq(get(), "", "never twice at once");
    cr_assert_eq(add_g("k", "g", 0), 0, "dedup");
    done("k");
    cr_assert_str_eq(get(), "k", "runs once more after done");
    done("k");
    cr_assert_eq(wq_queue_records(q), 0);
    cr_assert_eq(wq_queue_groups(q), 0);
}

Test(groups, a_key_keeps_the_group_it_was_added_with_while_pending)
{
    add_g("k", "first", 0);
    add_g("k", "second", 0);
    wq_item_info info;
    cr_assert_eq(wq_queue_lookup(q, "k", 1, &info), 1);
    cr_assert_eq(info.grouplen, 5);
    cr_assert_eq(memcmp(info.group, "first", 5), 0);
    cr_assert_str_eq(get(), "k");
    done("k");
    add_g("k", "second", 0);
    cr_assert_eq(wq_queue_lookup(q, "k", 1, &info), 1);
    cr_assert_eq(memcmp(info.group, "second", 6), 0, "a new record takes the new group");
}

Test(groups, a_retried_item_counts_against_its_group_when_handed_out_again)
{
    limit_all(1, 0, 0);
    wq_add_opts o = {.group = "g", .grouplen = 1};
    add_g("a", "g", 0);
    add_g("b", "g", 0);
    cr_assert_str_eq(get(), "a");
    cr_assert_eq(wq_queue_add_after(q, "a", 1, 10 * MS, &o), 1);
    done("a");
    cr_assert_str_eq(get(), "b");
    fc.ns += 10 * MS;
    wq_queue_fire_due(q);
    cr_assert_str_eq(get(), "", "a is due but b holds the group's one slot");
    done("b");
    cr_assert_str_eq(get(), "a");
}

Test(groups, held_items_still_go_out_after_shutdown)
{
    limit_all(0, 1, 1);
    add_g("a", "g", 0);
    add_g("b", "g", 0);
    cr_assert_str_eq(get(), "a");
    wq_queue_shutdown_drain(q);
    cr_assert_eq(wq_queue_get(q, NULL), WQ_EEMPTY, "b is queued: not shut down for get yet");
    cr_assert_eq(wq_queue_next_ready(q), fc.ns + S, "the token time still wakes the host");
    fc.ns += S;
    wq_queue_fire_due(q);
    cr_assert_str_eq(get(), "b");
    cr_assert_eq(wq_queue_get(q, NULL), WQ_ESHUTDOWN);
}

Test(groups, bad_group_names_and_limits_are_refused_without_a_change)
{
    char big[WQ_GROUP_MAX + 2];
    memset(big, 'g', sizeof big - 1);
    big[sizeof big - 1] = 0;
    cr_assert_eq(add_g("k", big, 0), WQ_E2BIG);
    cr_assert_eq(wq_queue_records(q), 0);
    big[WQ_GROUP_MAX] = 0;
    cr_assert_eq(add_g("k", big, 0), 1, "WQ_GROUP_MAX bytes are fine");
    wq_limit neg = {0, -1, 0};
    cr_assert_eq(wq_queue_set_group_default(q, &neg), WQ_EINVAL);
    cr_assert_eq(wq_queue_set_rate(q, 0.0 / 0.0, 1), WQ_EINVAL);
}

Test(groups, stats_count_groups_with_queued_items_and_throttled_items)
{
    limit_all(1, 0, 0);
    add_g("a1", "a", 0);
    add_g("a2", "a", 0);
    add_g("b1", "b", 0);
    add_g("n", NULL, 0);
    cr_assert_eq(wq_queue_groups(q), 2);
    cr_assert_eq(wq_queue_throttled(q), 0);
    cr_assert_str_eq(get(), "a1");
    cr_assert_eq(wq_queue_throttled(q), 1);
    cr_assert_str_eq(get(), "b1");
    cr_assert_eq(wq_queue_groups(q), 1);
}

struct seen {
    char names[8][16];
    uint32_t held[8], queued[8], active[8], conc[8];
    int own[8], n;
};

static void on_group(void *ud, const wq_group_view *g)
{
    struct seen *s = ud;
    cr_assert_lt(s->n, 8);
    cr_assert_lt(g->namelen, sizeof s->names[0]);
    memcpy(s->names[s->n], g->name, g->namelen);
    s->names[s->n][g->namelen] = 0;
    s->held[s->n] = g->held;
    s->queued[s->n] = g->queued;
    s->active[s->n] = g->active;
    s->conc[s->n] = g->lim.concurrency;
    s->own[s->n] = g->own;
    s->n++;
}

Test(groups, the_most_held_groups_come_most_first_then_by_name_with_their_counts)
{
    struct seen s = {0};
    cr_assert_eq(wq_queue_most_held_groups(q, 10, on_group, &s), 0, "no groups yet");
    limit_all(1, 0, 0);
    wq_limit two = {2, 0, 0};
    cr_assert_eq(wq_queue_set_group_limit(q, "c", 1, &two), 0);
    const char *keys[] = {"a1", "a2", "a3", "b1", "b2", "c1", "c2", "c3", "c4", "d1", "e1", "e2"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        char g[2] = {keys[i][0], 0};
        cr_assert_eq(add_g(keys[i], g, 0), 1);
    }
    /* One of each group out (two of c): a holds 2, b 1, c 2, d none, e 1. */
    for (int i = 0; i < 6; i++)
        get();
    cr_assert_eq(wq_queue_throttled(q), 6);
    cr_assert_eq(wq_queue_most_held_groups(q, 10, on_group, &s), 4);
    cr_assert_eq(s.n, 4);
    const char *want[] = {"a", "c", "b", "e"};
    const uint32_t held[] = {2, 2, 1, 1}, active[] = {1, 2, 1, 1}, conc[] = {1, 2, 1, 1};
    for (int i = 0; i < 4; i++) {
        cr_assert_str_eq(s.names[i], want[i], "place %d", i);
        cr_assert_eq(s.held[i], held[i], "%s held", want[i]);
        cr_assert_eq(s.queued[i], held[i], "%s queued", want[i]);
        cr_assert_eq(s.active[i], active[i], "%s active", want[i]);
        cr_assert_eq(s.conc[i], conc[i], "%s concurrency", want[i]);
        cr_assert_eq(s.own[i], strcmp(want[i], "c") == 0, "%s own", want[i]);
    }
    /* The top two only; the count still says four hold items back. */
    memset(&s, 0, sizeof s);
    cr_assert_eq(wq_queue_most_held_groups(q, 2, on_group, &s), 4);
    cr_assert_eq(s.n, 2);
    cr_assert_str_eq(s.names[0], "a");
    cr_assert_str_eq(s.names[1], "c");
    /* A done frees a: its next item goes out, it holds one less. */
    done("a1");
    cr_assert_str_eq(get(), "a2");
    memset(&s, 0, sizeof s);
    cr_assert_eq(wq_queue_most_held_groups(q, 1, on_group, &s), 4);
    cr_assert_str_eq(s.names[0], "c");
    cr_assert_eq(s.held[0], 2);
}

Test(groups, a_get_among_many_saturated_groups_finds_the_one_eligible_item)
{
    limit_all(1, 0, 0);
    wq_queue_set_observer(q, NULL, NULL); /* the full check per event would be quadratic */
    char k[32], g[32];
    for (int i = 0; i < 20000; i++) {
        snprintf(k, sizeof k, "k%d", i);
        snprintf(g, sizeof g, "g%d", i % 2000);
        add_g(k, g, 0);
    }
    cr_assert_eq(wq_queue_check(q), 0);
    for (int i = 0; i < 1999; i++)
        cr_assert_str_neq(get(), "");
    cr_assert_eq(wq_queue_check(q), 0);
    cr_assert_str_eq(get(), "k1999", "the last group not yet saturated");
    cr_assert_str_eq(get(), "");
    cr_assert_eq(wq_queue_throttled(q), 18000);
    done("k7");
    cr_assert_str_eq(get(), "k2007");
    cr_assert_eq(wq_queue_check(q), 0);
}

/* ---- random operations against a reference model ---- */

#define NK 24
#define NG 4

static uint64_t rs;
static uint64_t rnd(void)
{
    rs ^= rs >> 12;
    rs ^= rs << 25;
    rs ^= rs >> 27;
    return rs * 0x2545F4914F6CDD1DULL;
}

/* The model: plain arrays and scans. */
static struct mk {
    int rec, dirty, queued, processing, waiting;
    int64_t when;
    int prio, grp; /* grp -1: none */
    uint64_t seq;
} mk[NK];
static struct mg {
    int own;
    wq_limit lim;
    wq_pace pace;
} mg[NG];
static wq_limit mdef;
static uint64_t mseq;
static wq_pace mqpace;

static const char *kname(int i)
{
    static char b[NK][16];
    snprintf(b[i], sizeof b[i], "key%d", i);
    return b[i];
}

static const char *gname(int g)
{
    static const char *names[NG] = {"ga", "gb", "gc", "gd"};
    return names[g];
}

static int m_active(int g)
{
    int n = 0;
    for (int i = 0; i < NK; i++)
        n += mk[i].rec && mk[i].processing && mk[i].grp == g;
    return n;
}

static int m_eligible(int g, int64_t t)
{
    if (g < 0)
        return 1;
    const wq_limit *l = mg[g].own ? &mg[g].lim : &mdef;
    if (l->concurrency && m_active(g) >= (int)l->concurrency)
        return 0;
    return wq_pace_next(&mg[g].pace) <= t;
}

/* The dispatch rule itself: the first queued key by (prio desc, seq asc) whose group may go. */
static int m_pick(int64_t t)
{
    if (wq_pace_next(&mqpace) > t)
        return -1;
    int best = -1;
    for (int i = 0; i < NK; i++) {
        if (!mk[i].queued || !m_eligible(mk[i].grp, t))
            continue;
        if (best < 0 || mk[i].prio > mk[best].prio ||
            (mk[i].prio == mk[best].prio && mk[i].seq < mk[best].seq))
            best = i;
    }
    return best;
}

static void m_enqueue(int i)
{
    mk[i].queued = 1;
    mk[i].seq = mseq++;
}

static void m_add(int i, int g, int prio, int setprio)
{
    if (!mk[i].rec) {
        memset(&mk[i], 0, sizeof mk[i]);
        mk[i].rec = 1;
        mk[i].grp = g;
    }
    if (mk[i].dirty) {
        if (setprio && prio > mk[i].prio && mk[i].queued) {
            mk[i].prio = prio;
            m_enqueue(i); /* to the back of its new level */
        } else if (setprio && !mk[i].queued) {
            mk[i].prio = prio;
        }
        return;
    }
    if (setprio)
        mk[i].prio = prio;
    mk[i].dirty = 1;
    if (!mk[i].processing)
        m_enqueue(i);
}

static int64_t m_pace_time(const wq_pace *p)
{
    return wq_pace_next(p);
}

static void sync_pace(int g)
{
    const wq_limit *l = mg[g].own ? &mg[g].lim : &mdef;
    int64_t tat = mg[g].pace.tat;
    wq_pace_set(&mg[g].pace, l->rate, l->burst);
    mg[g].pace.tat = tat;
}

static void m_forget_if_idle(int i)
{
    if (!mk[i].dirty && !mk[i].processing && !mk[i].waiting)
        mk[i].rec = 0;
}

static wq_limit random_limit(void)
{
    wq_limit l = {0, 0, 0};
    l.concurrency = (uint32_t)(rnd() % 4);
    if (rnd() % 2) {
        static const double rates[] = {1, 5, 20, 1000};
        l.rate = rates[rnd() % 4];
        l.burst = (double)(rnd() % 4);
    }
    return l;
}

static void model_run(uint64_t seed, int steps)
{
    rs = seed;
    memset(mk, 0, sizeof mk);
    memset(mg, 0, sizeof mg);
    memset(&mqpace, 0, sizeof mqpace);
    mseq = 0;
    mdef = random_limit();
    cr_assert_eq(wq_queue_set_group_default(q, &mdef), 0);
    for (int g = 0; g < NG; g++)
        sync_pace(g);
    for (int step = 0; step < steps; step++) {
        int op = (int)(rnd() % 100);
        int i = (int)(rnd() % NK);
        int64_t t = fc.ns;
        char what[64];
        if (op < 35) {
            int g = (int)(rnd() % (NG + 1)) - 1;
            int setprio = rnd() % 4 == 0;
            int prio = (int)(rnd() % 3);
            snprintf(what, sizeof what, "add %s group %d prio %d/%d", kname(i), g, setprio, prio);
            wq_add_opts o = {.set_priority = setprio, .priority = prio};
            if (g >= 0) {
                o.group = gname(g);
                o.grouplen = strlen(o.group);
            }
            int r = wq_queue_add(q, kname(i), strlen(kname(i)), &o);
            cr_assert_geq(r, 0, "seed %" PRIu64 " step %d: %s", seed, step, what);
            m_add(i, g, prio, setprio);
        } else if (op < 65) {
            snprintf(what, sizeof what, "get");
            int want = m_pick(t);
            wq_item_info info;
            int r = wq_queue_get(q, &info);
            if (want < 0) {
                cr_assert_neq(r, 0, "seed %" PRIu64 " step %d: get handed out %.*s, model none",
                              seed, step, (int)info.keylen, info.key);
            } else {
                cr_assert_eq(r, 0, "seed %" PRIu64 " step %d: get found nothing, model %s", seed,
                             step, kname(want));
                cr_assert(info.keylen == strlen(kname(want)) &&
                              memcmp(info.key, kname(want), info.keylen) == 0,
                          "seed %" PRIu64 " step %d: get %.*s, model %s", seed, step,
                          (int)info.keylen, info.key, kname(want));
                mk[want].queued = 0;
                mk[want].dirty = 0;
                mk[want].processing = 1;
                wq_pace_take(&mqpace, t);
                if (mk[want].grp >= 0)
                    wq_pace_take(&mg[mk[want].grp].pace, t);
            }
        } else if (op < 85) {
            int p = -1;
            for (int j = 0; j < NK; j++)
                if (mk[(i + j) % NK].rec && mk[(i + j) % NK].processing) {
                    p = (i + j) % NK;
                    break;
                }
            if (p < 0)
                continue;
            cr_assert_eq(wq_queue_done(q, kname(p), strlen(kname(p))), 0);
            mk[p].processing = 0;
            if (mk[p].dirty)
                m_enqueue(p);
            m_forget_if_idle(p);
        } else if (op < 90) {
            int64_t d = (int64_t)(rnd() % 300) * MS;
            int g = (int)(rnd() % (NG + 1)) - 1;
            wq_add_opts o = {0};
            if (g >= 0) {
                o.group = gname(g);
                o.grouplen = strlen(o.group);
            }
            int r = wq_queue_add_after(q, kname(i), strlen(kname(i)), d, &o);
            cr_assert_geq(r, 0);
            if (d <= 0) {
                m_add(i, g, 0, 0);
            } else {
                if (!mk[i].rec) {
                    memset(&mk[i], 0, sizeof mk[i]);
                    mk[i].rec = 1;
                    mk[i].grp = g;
                }
                if (!mk[i].waiting || t + d < mk[i].when)
                    mk[i].when = t + d;
                mk[i].waiting = 1;
            }
        } else if (op < 97) {
            fc.ns += (int64_t)(rnd() % 400) * MS;
            cr_assert_geq(wq_queue_fire_due(q), 0);
            /* Model: every due wait fires, in time order (ties: any order is fine here). */
            for (;;) {
                int first = -1;
                for (int j = 0; j < NK; j++)
                    if (mk[j].rec && mk[j].waiting && mk[j].when <= fc.ns &&
                        (first < 0 || mk[j].when < mk[first].when))
                        first = j;
                if (first < 0)
                    break;
                mk[first].waiting = 0;
                if (!mk[first].dirty)
                    m_add(first, mk[first].grp, 0, 0);
            }
        } else if (op < 99) {
            int g = (int)(rnd() % NG);
            if (rnd() % 3 == 0) {
                cr_assert_eq(wq_queue_set_group_limit(q, gname(g), strlen(gname(g)), NULL), 0);
                mg[g].own = 0;
            } else {
                wq_limit l = random_limit();
                cr_assert_eq(wq_queue_set_group_limit(q, gname(g), strlen(gname(g)), &l), 0);
                mg[g].own = 1;
                mg[g].lim = l;
            }
            sync_pace(g);
        } else {
            double rate = rnd() % 2 ? 0 : 50;
            cr_assert_eq(wq_queue_set_rate(q, rate, 2), 0);
            int64_t tat = mqpace.tat;
            wq_pace_set(&mqpace, rate, 2);
            mqpace.tat = tat;
        }
        cr_assert_eq(wq_queue_check(q), 0, "seed %" PRIu64 " step %d: check failed", seed, step);
        /* Observable counts agree with the model. */
        size_t queued = 0, held = 0;
        int any_pace = wq_pace_next(&mqpace) > fc.ns;
        for (int j = 0; j < NK; j++) {
            if (!mk[j].rec || !mk[j].queued)
                continue;
            queued++;
            held += !m_eligible(mk[j].grp, fc.ns);
        }
        cr_assert_eq(wq_queue_len(q), queued, "seed %" PRIu64 " step %d: len", seed, step);
        if (any_pace)
            cr_assert_eq(wq_queue_throttled(q), queued);
        else
            cr_assert_geq(wq_queue_throttled(q), held, "seed %" PRIu64 " step %d", seed, step);
        (void)m_pace_time;
    }
}

Test(groups, random_operations_match_the_dispatch_model_seed_1)
{
    model_run(1, 20000);
}

Test(groups, random_operations_match_the_dispatch_model_seed_2)
{
    model_run(0x9e3779b97f4a7c15ULL, 20000);
}

Test(groups, random_operations_match_the_dispatch_model_seed_3)
{
    model_run(20261123, 20000);
}
