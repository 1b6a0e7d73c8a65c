/*
 * The delay heap on its own: ready-time order, FIFO among equal times,
 * earliest-wins rescheduling, cancellation anywhere in the heap, and a
 * random sequence of operations checked against a plain array.
 */
#include <criterion/criterion.h>

#include "engine/delay.h"
#include "support/counting_alloc.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static wq_delay d;

static void setup(void)
{
    live = 0;
    wq_set_allocator(counting_realloc, NULL);
    wq_delay_init(&d);
}

/* The end of every test (Criterion ignores failures in .fini). */
static void finish(void)
{
    cr_assert_eq(wq_delay_check(&d), 0);
    wq_delay_destroy(&d);
    cr_assert_eq(live, 0, "%ld blocks leaked", live);
    wq_set_allocator(NULL, NULL);
}

TestSuite(delay, .init = setup);

/* Pops everything due at now into ids[]; returns how many. */
static int pop_all(int64_t now, uint32_t *ids, int max)
{
    int n = 0;
    wq_delay_entry e;
    while (wq_delay_pop_due(&d, now, &e)) {
        cr_assert_lt(n, max);
        cr_assert_leq(e.when, now);
        ids[n++] = e.id;
        cr_assert_eq(wq_delay_check(&d), 0);
    }
    return n;
}

Test(delay, empty_heap_has_nothing_due)
{
    wq_delay_entry e;
    int64_t when;
    cr_assert_eq(wq_delay_len(&d), 0);
    cr_assert_eq(wq_delay_next(&d), WQ_NEVER);
    cr_assert_eq(wq_delay_pop_due(&d, INT64_MAX, &e), 0);
    cr_assert_eq(wq_delay_cancel(&d, 3), 0);
    cr_assert_eq(wq_delay_when(&d, 3, &when), 0);
    cr_assert_eq(wq_delay_check(&d), 0);
    finish();
}

Test(delay, entries_pop_in_ready_time_order)
{
    static const int64_t when[] = {50, 10, 40, 20, 30, 5, 45, 15};
    for (uint32_t id = 0; id < 8; id++)
        cr_assert_eq(wq_delay_schedule(&d, id, when[id]), 1);
    cr_assert_eq(wq_delay_len(&d), 8);
    cr_assert_eq(wq_delay_next(&d), 5);
    uint32_t ids[8];
    cr_assert_eq(pop_all(100, ids, 8), 8);
    static const uint32_t want[] = {5, 1, 7, 3, 4, 2, 6, 0};
    for (int i = 0; i < 8; i++)
        cr_assert_eq(ids[i], want[i], "position %d", i);
    finish();
}

Test(delay, only_due_entries_pop)
{
    wq_delay_schedule(&d, 1, 10);
    wq_delay_schedule(&d, 2, 20);
    wq_delay_entry e;
    cr_assert_eq(wq_delay_pop_due(&d, 9, &e), 0);
    cr_assert_eq(wq_delay_pop_due(&d, 10, &e), 1, "due at exactly its time");
    cr_assert_eq(e.id, 1);
    cr_assert_eq(e.when, 10);
    cr_assert_eq(wq_delay_pop_due(&d, 19, &e), 0);
    cr_assert_eq(wq_delay_next(&d), 20);
    finish();
}

Test(delay, equal_times_pop_in_the_order_they_were_scheduled)
{
    static const uint32_t order[] = {9, 3, 7, 0, 12, 5, 1, 8, 2, 11, 4, 6, 10};
    for (int i = 0; i < 13; i++)
        wq_delay_schedule(&d, order[i], 100);
    wq_delay_schedule(&d, 20, 99);
    wq_delay_schedule(&d, 21, 101);
    uint32_t ids[16];
    cr_assert_eq(pop_all(1000, ids, 16), 15);
    cr_assert_eq(ids[0], 20);
    for (int i = 0; i < 13; i++)
        cr_assert_eq(ids[i + 1], order[i], "tie %d", i);
    cr_assert_eq(ids[14], 21);
    finish();
}

Test(delay, earlier_time_replaces_a_later_one_and_later_is_ignored)
{
    int64_t when;
    cr_assert_eq(wq_delay_schedule(&d, 1, 100), 1);
    cr_assert_eq(wq_delay_schedule(&d, 2, 50), 1);
    cr_assert_eq(wq_delay_schedule(&d, 1, 200), 0, "later: ignored");
    cr_assert_eq(wq_delay_schedule(&d, 1, 100), 0, "equal: ignored");
    cr_assert(wq_delay_when(&d, 1, &when));
    cr_assert_eq(when, 100);
    cr_assert_eq(wq_delay_schedule(&d, 1, 20), 1, "earlier: replaces");
    cr_assert_eq(wq_delay_len(&d), 2, "an id is kept once");
    cr_assert(wq_delay_when(&d, 1, &when));
    cr_assert_eq(when, 20);
    cr_assert_eq(wq_delay_next(&d), 20);
    uint32_t ids[4];
    cr_assert_eq(pop_all(1000, ids, 4), 2);
    cr_assert_eq(ids[0], 1);
    cr_assert_eq(ids[1], 2);
    finish();
}

Test(delay, entry_moved_earlier_ties_after_entries_already_at_that_time)
{
    wq_delay_schedule(&d, 1, 50);
    wq_delay_schedule(&d, 2, 100);
    wq_delay_schedule(&d, 3, 50);
    wq_delay_schedule(&d, 2, 50); /* its ready time is set last */
    uint32_t ids[4];
    cr_assert_eq(pop_all(50, ids, 4), 3);
    cr_assert_eq(ids[0], 1);
    cr_assert_eq(ids[1], 3);
    cr_assert_eq(ids[2], 2);
    finish();
}

Test(delay, cancel_from_the_middle_keeps_the_order_of_the_rest)
{
    for (uint32_t id = 0; id < 100; id++)
        wq_delay_schedule(&d, id, (int64_t)((id * 37) % 100));
    /* Cancel every third entry, wherever it sits in the heap. */
    for (uint32_t id = 0; id < 100; id += 3) {
        cr_assert_eq(wq_delay_cancel(&d, id), 1);
        cr_assert_eq(wq_delay_cancel(&d, id), 0, "already gone");
        cr_assert_eq(wq_delay_check(&d), 0);
    }
    cr_assert_eq(wq_delay_len(&d), 66);
    wq_delay_entry e;
    int64_t last = -1;
    int n = 0;
    while (wq_delay_pop_due(&d, 1000, &e)) {
        cr_assert_neq(e.id % 3, 0, "cancelled id %u popped", e.id);
        cr_assert_geq(e.when, last);
        cr_assert_eq(e.when, (int64_t)((e.id * 37) % 100));
        last = e.when;
        n++;
    }
    cr_assert_eq(n, 66);
    finish();
}

Test(delay, cancel_of_the_root_and_the_last_entry)
{
    wq_delay_schedule(&d, 1, 10);
    wq_delay_schedule(&d, 2, 20);
    wq_delay_schedule(&d, 3, 30);
    cr_assert_eq(wq_delay_cancel(&d, 1), 1);
    cr_assert_eq(wq_delay_next(&d), 20);
    cr_assert_eq(wq_delay_cancel(&d, 3), 1);
    cr_assert_eq(wq_delay_cancel(&d, 2), 1);
    cr_assert_eq(wq_delay_next(&d), WQ_NEVER);
    cr_assert_eq(wq_delay_check(&d), 0);
    finish();
}

Test(delay, an_id_can_be_scheduled_again_after_pop_or_cancel)
{
    wq_delay_entry e;
    wq_delay_schedule(&d, 7, 10);
    cr_assert(wq_delay_pop_due(&d, 10, &e));
    cr_assert_eq(wq_delay_schedule(&d, 7, 50), 1, "a popped id is not pending");
    wq_delay_cancel(&d, 7);
    cr_assert_eq(wq_delay_schedule(&d, 7, 60), 1, "nor a cancelled one");
    int64_t when;
    cr_assert(wq_delay_when(&d, 7, &when));
    cr_assert_eq(when, 60);
    finish();
}

Test(delay, sparse_large_ids_are_tracked)
{
    cr_assert_eq(wq_delay_schedule(&d, 100000, 5), 1);
    cr_assert_eq(wq_delay_schedule(&d, 3, 6), 1);
    cr_assert_eq(wq_delay_schedule(&d, 70000, 4), 1);
    uint32_t ids[3];
    cr_assert_eq(pop_all(10, ids, 3), 3);
    cr_assert_eq(ids[0], 70000);
    cr_assert_eq(ids[1], 100000);
    cr_assert_eq(ids[2], 3);
    finish();
}

Test(delay, extreme_times_are_ordered)
{
    wq_delay_schedule(&d, 1, INT64_MAX);
    wq_delay_schedule(&d, 2, INT64_MIN);
    wq_delay_schedule(&d, 3, 0);
    uint32_t ids[3];
    cr_assert_eq(pop_all(INT64_MAX, ids, 3), 3);
    cr_assert_eq(ids[0], 2);
    cr_assert_eq(ids[1], 3);
    cr_assert_eq(ids[2], 1);
    finish();
}

/* ---- random operations against a plain array ---- */

#define IDS 200

static uint64_t rng = 88172645463325252ULL;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

struct ref {
    int pending;
    int64_t when;
    uint64_t seq;
};

Test(delay, random_operations_match_a_plain_array)
{
    static struct ref ref[IDS];
    memset(ref, 0, sizeof ref);
    uint64_t seq = 0;
    int64_t now = 0;
    for (int step = 0; step < 60000; step++) {
        uint32_t id = (uint32_t)(rnd() % IDS);
        int op = (int)(rnd() % 10);
        if (op < 5) {
            int64_t when = now + (int64_t)(rnd() % 50);
            int want = !ref[id].pending || when < ref[id].when;
            cr_assert_eq(wq_delay_schedule(&d, id, when), want, "step %d schedule", step);
            if (want)
                ref[id] = (struct ref){1, when, seq++};
        } else if (op < 7) {
            cr_assert_eq(wq_delay_cancel(&d, id), ref[id].pending, "step %d cancel", step);
            ref[id].pending = 0;
        } else {
            now += (int64_t)(rnd() % 4);
            wq_delay_entry e;
            for (;;) {
                int best = -1;
                for (int i = 0; i < IDS; i++)
                    if (ref[i].pending && ref[i].when <= now &&
                        (best < 0 || ref[i].when < ref[best].when ||
                         (ref[i].when == ref[best].when && ref[i].seq < ref[best].seq)))
                        best = i;
                int popped = wq_delay_pop_due(&d, now, &e);
                cr_assert_eq(popped, best >= 0, "step %d pop", step);
                if (!popped)
                    break;
                cr_assert_eq(e.id, (uint32_t)best, "step %d: popped %u, want %d", step, e.id, best);
                cr_assert_eq(e.when, ref[best].when);
                ref[best].pending = 0;
            }
        }
        cr_assert_eq(wq_delay_check(&d), 0, "step %d", step);
        uint32_t n = 0;
        int64_t next = WQ_NEVER;
        for (int i = 0; i < IDS; i++) {
            int64_t when;
            cr_assert_eq(wq_delay_when(&d, (uint32_t)i, &when), ref[i].pending);
            if (ref[i].pending) {
                cr_assert_eq(when, ref[i].when);
                n++;
                if (ref[i].when < next)
                    next = ref[i].when;
            }
        }
        cr_assert_eq(wq_delay_len(&d), n);
        cr_assert_eq(wq_delay_next(&d), next);
    }
    finish();
}

Test(delay, checker_notices_a_broken_heap)
{
    wq_delay_schedule(&d, 1, 10);
    wq_delay_schedule(&d, 2, 20);
    d.heap[0].when = 30; /* now larger than its child */
    cr_assert_eq(wq_delay_check(&d), -1);
    d.heap[0].when = 10;
    d.pos[2] = 1; /* wrong index */
    cr_assert_eq(wq_delay_check(&d), -1);
    d.pos[2] = 2;
    cr_assert_eq(wq_delay_check(&d), 0);
    finish();
}
