/*
 * The work queue against WORKQUEUE.md: the base queue, priorities, payloads,
 * the delaying section, shutdown and drain, metrics and the observer. Time
 * comes from a fake clock stepped by hand; nothing sleeps. Every observer
 * call also runs the invariant checker, so each test checks consistency at
 * every state change.
 */
#include <criterion/criterion.h>

#include "engine/metrics.h"
#include "engine/queue.h"
#include "support/fake_clock.h"
#include "support/counting_alloc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define US 1000LL
#define MS 1000000LL
#define S WQ_NS_PER_S

static wq_queue *q;

struct event {
    wq_event ev;
    char key[32];
};

static struct event events[512];
static int nevents;

static void observe(void *ud, wq_queue *qq, wq_event ev, const char *key, size_t len)
{
    (void)ud;
    cr_assert_eq(wq_queue_check(qq), 0, "queue inconsistent during event %d", (int)ev);
    cr_assert_lt(nevents, 512);
    struct event *e = &events[nevents++];
    e->ev = ev;
    e->key[0] = 0;
    if (key) {
        cr_assert_lt(len, sizeof e->key);
        memcpy(e->key, key, len);
        e->key[len] = 0;
    } else {
        cr_assert_eq(len, 0);
    }
}

static void setup(void)
{
    live = 0;
    wq_set_allocator(counting_realloc, NULL);
    fc.ns = 1000 * S;
    nevents = 0;
    q = wq_queue_new(&clk);
    cr_assert_not_null(q);
    wq_queue_set_observer(q, observe, NULL);
}

/*
 * The end of every test: the queue is sound, and freeing it returns every
 * block. (Criterion ignores failures in .fini, so tests call this last.)
 */
static void finish(void)
{
    cr_assert_eq(wq_queue_check(q), 0);
    wq_queue_free(q);
    q = NULL;
    cr_assert_eq(live, 0, "%ld blocks leaked", live);
    wq_set_allocator(NULL, NULL);
}

TestSuite(queue, .init = setup);

/* ---- helpers ---- */

static void step(int64_t ns)
{
    fc.ns += ns;
}

static int add(const char *k)
{
    return wq_queue_add(q, k, strlen(k), NULL);
}

static int add_prio(const char *k, int32_t prio)
{
    wq_add_opts o = {.set_priority = 1, .priority = prio};
    return wq_queue_add(q, k, strlen(k), &o);
}

static int add_payload(const char *k, const char *payload)
{
    wq_add_opts o = {.payload = payload, .paylen = strlen(payload), .set_payload = 1};
    return wq_queue_add(q, k, strlen(k), &o);
}

static int add_after(const char *k, int64_t delay)
{
    return wq_queue_add_after(q, k, strlen(k), delay, NULL);
}

static int add_after_prio(const char *k, int64_t delay, int32_t prio)
{
    wq_add_opts o = {.set_priority = 1, .priority = prio};
    return wq_queue_add_after(q, k, strlen(k), delay, &o);
}

static int done(const char *k)
{
    return wq_queue_done(q, k, strlen(k));
}

static int cancel(const char *k)
{
    return wq_queue_cancel_after(q, k, strlen(k));
}

static char got[64];
static wq_item_info got_info;

/* Hands out one key (a copy in `got`), or NULL with the code in get_rc. */
static int get_rc;
static const char *get(void)
{
    get_rc = wq_queue_get(q, &got_info);
    if (get_rc != 0)
        return NULL;
    cr_assert_lt(got_info.keylen, sizeof got);
    memcpy(got, got_info.key, got_info.keylen);
    got[got_info.keylen] = 0;
    return got;
}

/* Gets everything queued right now (without Done) as "a b c". */
static char order_buf[1024];
static const char *get_all(void)
{
    order_buf[0] = 0;
    const char *k;
    while ((k = get()) != NULL) {
        if (order_buf[0])
            strcat(order_buf, " ");
        strcat(order_buf, k);
    }
    cr_assert_neq(get_rc, 0);
    return order_buf;
}

/* Gets and completes everything, including keys re-queued on Done. */
static const char *run_all(void)
{
    order_buf[0] = 0;
    const char *k;
    while ((k = get()) != NULL) {
        if (order_buf[0])
            strcat(order_buf, " ");
        strcat(order_buf, k);
        cr_assert_eq(done(k), 0);
    }
    return order_buf;
}

static unsigned state_of(const char *k)
{
    wq_item_info info;
    if (!wq_queue_lookup(q, k, strlen(k), &info))
        return 0;
    return info.state;
}

static int has_record(const char *k)
{
    wq_item_info info;
    return wq_queue_lookup(q, k, strlen(k), &info);
}

static int32_t priority_of(const char *k)
{
    wq_item_info info;
    cr_assert(wq_queue_lookup(q, k, strlen(k), &info), "no record for %s", k);
    return info.priority;
}

/* The payload of k as a string, "(none)" without payload, "(no record)". */
static char payload_buf[256];
static const char *payload_of(const char *k)
{
    wq_item_info info;
    if (!wq_queue_lookup(q, k, strlen(k), &info))
        return "(no record)";
    if (!info.payload)
        return "(none)";
    cr_assert_lt(info.paylen, sizeof payload_buf);
    memcpy(payload_buf, info.payload, info.paylen);
    payload_buf[info.paylen] = 0;
    return payload_buf;
}

static const wq_metrics *metrics(void)
{
    return wq_queue_metrics(q);
}

static const char *event_name(wq_event ev)
{
    switch (ev) {
    case WQ_EV_QUEUED: return "queued";
    case WQ_EV_DIRTY: return "dirty";
    case WQ_EV_PROCESSING: return "processing";
    case WQ_EV_WAITING: return "waiting";
    case WQ_EV_UPDATED: return "updated";
    case WQ_EV_GONE: return "gone";
    case WQ_EV_IDLE: return "idle";
    case WQ_EV_SHUTDOWN: return "shutdown";
    case WQ_EV_READY: return "ready";
    }
    return "?";
}

/* The events heard since the last call, as "queued:a processing:a idle". */
static char events_buf[4096];
static const char *take_events(void)
{
    events_buf[0] = 0;
    for (int i = 0; i < nevents; i++) {
        if (i)
            strcat(events_buf, " ");
        strcat(events_buf, event_name(events[i].ev));
        if (events[i].key[0] || (events[i].ev != WQ_EV_IDLE && events[i].ev != WQ_EV_SHUTDOWN)) {
            strcat(events_buf, ":");
            strcat(events_buf, events[i].key);
        }
    }
    nevents = 0;
    return events_buf;
}

/* ---- base queue: Add / Get / Done ---- */

Test(queue, added_key_is_handed_out_by_get)
{
    cr_assert_eq(add("foo"), 1);
    cr_assert_str_eq(get(), "foo");
    cr_assert_eq(got_info.state, WQ_ST_PROCESSING);
    cr_assert_eq(wq_queue_processing(q), 1);
    cr_assert_eq(wq_queue_len(q), 0);
    finish();
}

Test(queue, keys_come_out_in_the_order_they_were_added)
{
    add("c");
    add("a");
    add("b");
    cr_assert_str_eq(get_all(), "c a b");
    finish();
}

Test(queue, get_on_an_empty_queue_reports_empty)
{
    cr_assert_null(get());
    cr_assert_eq(get_rc, WQ_EEMPTY);
    finish();
}

Test(queue, adding_a_queued_key_again_keeps_its_place_and_counts_nothing)
{
    cr_assert_eq(add("a"), 1);
    cr_assert_eq(add("b"), 1);
    cr_assert_eq(add("a"), 0);
    cr_assert_eq(metrics()->adds, 2);
    cr_assert_eq(metrics()->depth, 2);
    cr_assert_eq(wq_queue_len(q), 2);
    cr_assert_str_eq(get_all(), "a b");
    finish();
}

Test(queue, readded_item_while_processing_runs_again_after_done)
{
    add("foo");
    cr_assert_str_eq(get(), "foo");
    cr_assert_eq(add("foo"), 1);
    cr_assert_eq(state_of("foo"), WQ_ST_PROCESSING | WQ_ST_DIRTY);
    cr_assert_eq(wq_queue_len(q), 0);
    cr_assert_null(get(), "a key being processed is not handed out twice");
    cr_assert_eq(done("foo"), 0);
    cr_assert_eq(state_of("foo"), WQ_ST_DIRTY | WQ_ST_QUEUED);
    cr_assert_str_eq(get(), "foo");
    cr_assert_eq(done("foo"), 0);
    cr_assert_null(get());
    cr_assert_not(has_record("foo"));
    finish();
}

Test(queue, readding_a_processing_key_many_times_runs_it_once_more)
{
    add("foo");
    get();
    for (int i = 0; i < 5; i++)
        add("foo");
    done("foo");
    cr_assert_str_eq(run_all(), "foo");
    finish();
}

Test(queue, requeued_key_goes_to_the_back_of_the_queue)
{
    add("a");
    cr_assert_str_eq(get(), "a");
    add("a");
    add("b");
    done("a");
    cr_assert_str_eq(get_all(), "b a");
    finish();
}

Test(queue, done_on_a_key_that_is_not_processing_is_ignored)
{
    cr_assert_eq(done("nobody"), WQ_ENOENT);
    add("a");
    cr_assert_eq(done("a"), WQ_ENOENT, "a queued key is not processing");
    cr_assert_eq(wq_queue_len(q), 1);
    cr_assert_eq(metrics()->work_duration.count, 0);
    cr_assert_str_eq(get(), "a");
    cr_assert_eq(done("a"), 0);
    cr_assert_eq(done("a"), WQ_ENOENT, "second done");
    cr_assert_null(get(), "no duplicate was pushed");
    cr_assert_eq(wq_queue_len(q), 0);
    cr_assert_eq(metrics()->work_duration.count, 1);
    finish();
}

Test(queue, done_for_a_waiting_key_that_is_not_processing_is_ignored)
{
    add_after("a", 5 * S);
    cr_assert_eq(done("a"), WQ_ENOENT);
    cr_assert_eq(state_of("a"), WQ_ST_WAITING);
    finish();
}

Test(queue, record_is_dropped_when_nothing_is_pending)
{
    add("a");
    cr_assert_eq(wq_queue_records(q), 1);
    get();
    cr_assert_eq(wq_queue_records(q), 1);
    done("a");
    cr_assert_eq(wq_queue_records(q), 0);
    cr_assert_not(has_record("a"));
    finish();
}

Test(queue, keys_are_byte_strings_with_embedded_nuls)
{
    cr_assert_eq(wq_queue_add(q, "a\0b", 3, NULL), 1);
    cr_assert_eq(wq_queue_add(q, "a\0c", 3, NULL), 1);
    cr_assert_eq(wq_queue_add(q, "a", 1, NULL), 1);
    cr_assert_eq(wq_queue_add(q, "a\0b", 3, NULL), 0);
    cr_assert_eq(wq_queue_len(q), 3);
    wq_item_info info;
    cr_assert_eq(wq_queue_get(q, &info), 0);
    cr_assert_eq(info.keylen, 3);
    cr_assert_eq(memcmp(info.key, "a\0b", 3), 0);
    cr_assert_eq(wq_queue_done(q, "a\0b", 3), 0);
    finish();
}

Test(queue, empty_key_is_a_valid_key)
{
    cr_assert_eq(add(""), 1);
    cr_assert_eq(add(""), 0);
    cr_assert(has_record(""));
    cr_assert_str_eq(payload_of(""), "(none)");
    cr_assert_str_eq(get(), "");
    cr_assert_eq(got_info.keylen, 0);
    cr_assert_eq(done(""), 0);
    cr_assert_not(has_record(""));
    cr_assert_eq(add_payload("", ""), 1);
    cr_assert_str_eq(payload_of(""), "");
    cr_assert_eq(add_payload("", "x"), 0);
    cr_assert_str_eq(payload_of(""), "x");
    cr_assert_eq(add_after("", 1 * S), 1);
    cr_assert_eq(cancel(""), 1);
    cr_assert_str_eq(run_all(), "");
    cr_assert_eq(wq_queue_records(q), 0);
    finish();
}

Test(queue, oversized_key_or_payload_is_refused)
{
    const char k[] = "k";
    cr_assert_eq(wq_queue_add(q, k, (size_t)WQ_KEY_MAX + 1, NULL), WQ_E2BIG);
    cr_assert_eq(wq_queue_add_after(q, k, (size_t)WQ_KEY_MAX + 1, S, NULL), WQ_E2BIG);
    wq_add_opts o = {.payload = "p", .paylen = (size_t)WQ_PAYLOAD_MAX + 1, .set_payload = 1};
    cr_assert_eq(wq_queue_add(q, k, 1, &o), WQ_E2BIG);
    cr_assert_eq(wq_queue_add_after(q, k, 1, S, &o), WQ_E2BIG);
    cr_assert_eq(wq_queue_records(q), 0);
    cr_assert_eq(metrics()->adds, 0);
    cr_assert_eq(metrics()->retries, 0);
    cr_assert_eq(nevents, 0);
    finish();
}

/* ---- Len ---- */

Test(queue, len_of_foo_bar_foo_is_two)
{
    add("foo");
    add("bar");
    add("foo");
    cr_assert_eq(wq_queue_len(q), 2);
    finish();
}

Test(queue, len_excludes_a_key_readded_while_processing_until_done)
{
    add("foo");
    get();
    add("foo");
    cr_assert_eq(wq_queue_len(q), 0);
    cr_assert_eq(metrics()->depth, 1, "depth counts every dirty item, so it can exceed len");
    done("foo");
    cr_assert_eq(wq_queue_len(q), 1);
    finish();
}

Test(queue, len_excludes_processing_and_delayed_items)
{
    add("a");
    add("b");
    get();
    add_after("c", S);
    cr_assert_eq(wq_queue_len(q), 1);
    cr_assert_eq(wq_queue_processing(q), 1);
    cr_assert_eq(wq_queue_waiting(q), 1);
    finish();
}

/* ---- shutdown ---- */

Test(queue, add_after_shutdown_is_ignored_without_metrics)
{
    wq_queue_shutdown(q);
    cr_assert_eq(add("a"), WQ_ESHUTDOWN);
    cr_assert_eq(add_after("b", S), WQ_ESHUTDOWN);
    cr_assert_eq(add_after("b", 0), WQ_ESHUTDOWN);
    cr_assert_eq(wq_queue_add_at(q, "c", 1, fc.ns + S, NULL), WQ_ESHUTDOWN);
    cr_assert_eq(wq_queue_len(q), 0);
    cr_assert_eq(wq_queue_records(q), 0);
    cr_assert_eq(metrics()->adds, 0);
    cr_assert_eq(metrics()->depth, 0);
    cr_assert_eq(metrics()->retries, 0);
    finish();
}

Test(queue, shutting_down_is_true_after_either_shutdown)
{
    cr_assert_not(wq_queue_shutting_down(q));
    wq_queue_shutdown(q);
    cr_assert(wq_queue_shutting_down(q));
    wq_queue_shutdown(q);
    cr_assert(wq_queue_shutting_down(q), "shutdown is idempotent");

    wq_queue *q2 = wq_queue_new(&clk);
    wq_queue_shutdown_drain(q2);
    cr_assert(wq_queue_shutting_down(q2));
    wq_queue_free(q2);
    finish();
}

Test(queue, get_keeps_returning_queued_items_after_shutdown_until_empty)
{
    add("a");
    add("b");
    add("c");
    wq_queue_shutdown(q);
    cr_assert_eq(wq_queue_len(q), 3);
    cr_assert_str_eq(get(), "a");
    cr_assert_str_eq(get(), "b");
    cr_assert_str_eq(get(), "c");
    cr_assert_null(get());
    cr_assert_eq(get_rc, WQ_ESHUTDOWN);
    finish();
}

Test(queue, get_on_an_empty_shut_down_queue_reports_shutdown)
{
    wq_queue_shutdown(q);
    cr_assert_null(get());
    cr_assert_eq(get_rc, WQ_ESHUTDOWN);
    finish();
}

Test(queue, dirty_item_is_requeued_by_done_after_shutdown_and_get_hands_it_out)
{
    add("foo");
    get();
    add("foo");
    wq_queue_shutdown(q);
    cr_assert_eq(done("foo"), 0);
    cr_assert_eq(wq_queue_len(q), 1);
    cr_assert_str_eq(get(), "foo");
    cr_assert_eq(done("foo"), 0);
    cr_assert_null(get());
    cr_assert_eq(get_rc, WQ_ESHUTDOWN);
    cr_assert_eq(wq_queue_records(q), 0);
    finish();
}

Test(queue, readding_a_processing_key_after_shutdown_is_ignored)
{
    add("foo");
    get();
    wq_queue_shutdown(q);
    cr_assert_eq(add("foo"), WQ_ESHUTDOWN);
    cr_assert_eq(done("foo"), 0);
    cr_assert_null(get());
    cr_assert_eq(get_rc, WQ_ESHUTDOWN);
    finish();
}

Test(queue, drain_waits_for_processing_items_only)
{
    cr_assert_not(wq_queue_draining(q));
    add("a");
    add("b");
    get();
    wq_queue_shutdown_drain(q);
    cr_assert(wq_queue_draining(q));
    cr_assert(wq_queue_shutting_down(q));
    cr_assert_eq(done("a"), 0);
    cr_assert_not(wq_queue_draining(q), "queued b does not hold the drain");
    cr_assert_eq(wq_queue_len(q), 1);
    cr_assert_str_eq(get(), "b", "get still hands out queued items");
    finish();
}

Test(queue, drain_with_nothing_processing_returns_at_once)
{
    add("a");
    wq_queue_shutdown_drain(q);
    cr_assert_not(wq_queue_draining(q));
    finish();
}

Test(queue, later_shutdown_releases_a_drain)
{
    add("a");
    get();
    wq_queue_shutdown_drain(q);
    cr_assert(wq_queue_draining(q));
    wq_queue_shutdown(q);
    cr_assert_eq(wq_queue_draining(q), 0);
    cr_assert_eq(wq_queue_processing(q), 1, "the item is still processing");
    cr_assert_eq(done("a"), 0);
    cr_assert_eq(wq_queue_draining(q), 0);
    finish();
}

Test(queue, drain_keeps_waiting_when_a_worker_did_done_and_get_in_one_step)
{
    add("a");
    add("b");
    get();
    wq_queue_shutdown_drain(q);
    nevents = 0;
    done("a");
    cr_assert_str_eq(take_events(), "gone:a idle", "the waiter is woken");
    cr_assert_str_eq(get(), "b");
    cr_assert(wq_queue_draining(q), "when it resumes, processing is not empty any more");
    done("b");
    cr_assert_not(wq_queue_draining(q));
    finish();
}

Test(queue, drain_waits_for_a_dirty_item_requeued_by_done)
{
    add("a");
    get();
    add("a");
    wq_queue_shutdown_drain(q);
    done("a");
    cr_assert_not(wq_queue_draining(q), "processing is empty; a is only queued");
    cr_assert_str_eq(get(), "a");
    cr_assert(wq_queue_draining(q));
    done("a");
    cr_assert_not(wq_queue_draining(q));
    finish();
}

/* ---- priorities ---- */

Test(queue, higher_priority_is_handed_out_first)
{
    add_prio("low", -1);
    add("mid");
    add_prio("high", 7);
    add_prio("higher", 100);
    cr_assert_str_eq(get_all(), "higher high mid low");
    finish();
}

Test(queue, keys_of_one_priority_are_fifo)
{
    add_prio("a", 3);
    add_prio("x", 1);
    add_prio("b", 3);
    add_prio("y", 1);
    add_prio("c", 3);
    cr_assert_str_eq(get_all(), "a b c x y");
    finish();
}

Test(queue, queued_key_priority_rises_and_goes_to_the_back_of_its_new_level)
{
    add_prio("a", 5);
    add_prio("c", 0);
    add_prio("b", 5);
    add_prio("d", 0);
    cr_assert_eq(add_prio("c", 5), 0, "already dirty: not a new add");
    cr_assert_eq(priority_of("c"), 5);
    cr_assert_eq(metrics()->adds, 4);
    cr_assert_str_eq(get_all(), "a b c d");
    finish();
}

Test(queue, queued_key_priority_cannot_fall)
{
    add_prio("a", 5);
    add_prio("b", 3);
    cr_assert_eq(add_prio("a", 1), 0);
    cr_assert_eq(priority_of("a"), 5);
    cr_assert_str_eq(get_all(), "a b");
    finish();
}

Test(queue, readding_a_queued_key_at_its_own_priority_keeps_its_place)
{
    add_prio("a", 2);
    add_prio("b", 2);
    add_prio("a", 2);
    cr_assert_str_eq(get_all(), "a b");
    finish();
}

Test(queue, adding_without_priority_keeps_the_current_priority)
{
    add_prio("a", 4);
    add("b");
    add("a");
    cr_assert_eq(priority_of("a"), 4);
    cr_assert_str_eq(get(), "a");
    add("a"); /* processing: still priority 4 */
    cr_assert_eq(priority_of("a"), 4);
    done("a");
    add_prio("c", 3);
    cr_assert_str_eq(get_all(), "a c b");
    finish();
}

Test(queue, processing_key_takes_the_last_priority_given)
{
    add_prio("a", 5);
    cr_assert_str_eq(get(), "a");
    add_prio("a", 9);
    add_prio("a", 1);
    cr_assert_eq(priority_of("a"), 1);
    add_prio("b", 2);
    done("a");
    cr_assert_eq(state_of("a"), WQ_ST_DIRTY | WQ_ST_QUEUED);
    cr_assert_str_eq(get_all(), "b a");
    finish();
}

Test(queue, processing_key_readded_can_get_a_higher_priority)
{
    add_prio("a", 0);
    get();
    add_prio("b", 2);
    add_prio("a", 3);
    done("a");
    cr_assert_str_eq(get_all(), "a b");
    finish();
}

Test(queue, waiting_key_takes_the_last_priority_given)
{
    add_after_prio("a", 10 * S, 5);
    cr_assert_eq(priority_of("a"), 5);
    cr_assert_eq(add_after_prio("a", 20 * S, 1), 0, "the later time is ignored");
    cr_assert_eq(priority_of("a"), 1, "the priority is not");
    add_prio("b", 2);
    step(10 * S);
    cr_assert_eq(wq_queue_fire_due(q), 1);
    cr_assert_str_eq(get_all(), "b a");
    finish();
}

Test(queue, waiting_key_added_now_is_queued_at_the_priority_given)
{
    add_after_prio("a", 10 * S, 5);
    add_prio("b", 3);
    add_prio("a", 1);
    cr_assert_str_eq(get_all(), "b a");
    cr_assert_eq(state_of("a"), WQ_ST_PROCESSING | WQ_ST_WAITING);
    finish();
}

Test(queue, priority_is_forgotten_with_the_record)
{
    add_prio("a", 5);
    get();
    done("a");
    add("a");
    cr_assert_eq(priority_of("a"), 0);
    finish();
}

Test(queue, requeued_key_goes_to_the_back_of_its_priority_level)
{
    add_prio("a", 1);
    get();
    add("a");
    add_prio("b", 1);
    add_prio("c", 0);
    done("a");
    add_prio("d", 1);
    cr_assert_str_eq(get_all(), "b a d c");
    finish();
}

Test(queue, priority_extremes_are_ordered)
{
    add_prio("min", INT32_MIN);
    add_prio("max", INT32_MAX);
    add_prio("zero", 0);
    cr_assert_str_eq(get_all(), "max zero min");
    finish();
}

Test(queue, many_priority_levels_stay_sorted)
{
    char k[16];
    for (int i = 0; i < 40; i++) {
        int p = (i * 17) % 40 - 20;
        snprintf(k, sizeof k, "%d", p);
        add_prio(k, p);
    }
    for (int p = 19; p >= -20; p--) {
        snprintf(k, sizeof k, "%d", p);
        cr_assert_str_eq(get(), k);
    }
    finish();
}

/* ---- payloads ---- */

Test(queue, payload_is_copied)
{
    char buf[8] = "hello";
    wq_add_opts o = {.payload = buf, .paylen = 5, .set_payload = 1};
    char key[4] = "k";
    wq_queue_add(q, key, 1, &o);
    memcpy(buf, "XXXXX", 5);
    key[0] = 'z';
    cr_assert_str_eq(payload_of("k"), "hello");
    cr_assert_str_eq(get(), "k");
    cr_assert_eq(got_info.paylen, 5);
    cr_assert_eq(memcmp(got_info.payload, "hello", 5), 0);
    finish();
}

Test(queue, later_payload_replaces_the_earlier_one)
{
    cr_assert_eq(add_payload("k", "one"), 1);
    cr_assert_eq(add_payload("k", "two"), 0);
    nevents = 0;
    cr_assert_eq(add_payload("k", "two"), 0);
    cr_assert_str_eq(take_events(), "", "same bytes: nothing changed");
    cr_assert_str_eq(get(), "k");
    cr_assert_eq(got_info.paylen, 3);
    cr_assert_eq(memcmp(got_info.payload, "two", 3), 0);
    finish();
}

Test(queue, payload_is_kept_across_readds_without_payload)
{
    add_payload("k", "data");
    add("k");
    cr_assert_str_eq(payload_of("k"), "data");
    get();
    add("k");
    cr_assert_str_eq(payload_of("k"), "data");
    done("k");
    cr_assert_str_eq(get(), "k");
    cr_assert_eq(memcmp(got_info.payload, "data", 4), 0);
    finish();
}

Test(queue, payload_given_while_processing_is_seen_on_the_next_run)
{
    add_payload("k", "first");
    get();
    cr_assert_eq(memcmp(got_info.payload, "first", 5), 0);
    add_payload("k", "second");
    cr_assert_str_eq(payload_of("k"), "second");
    done("k");
    get();
    cr_assert_eq(got_info.paylen, 6);
    cr_assert_eq(memcmp(got_info.payload, "second", 6), 0);
    finish();
}

Test(queue, payload_is_dropped_when_nothing_is_pending)
{
    add_payload("k", "data");
    get();
    done("k");
    cr_assert_str_eq(payload_of("k"), "(no record)");
    add("k");
    cr_assert_str_eq(payload_of("k"), "(none)");
    finish();
}

Test(queue, empty_payload_differs_from_no_payload)
{
    add("a");
    cr_assert_str_eq(payload_of("a"), "(none)");
    add_payload("a", "");
    cr_assert_str_eq(payload_of("a"), "");
    cr_assert_str_eq(get(), "a");
    cr_assert_not_null(got_info.payload);
    cr_assert_eq(got_info.paylen, 0);
    finish();
}

Test(queue, binary_and_large_payloads_are_kept_exactly)
{
    static char big[5000];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (char)(i * 7);
    wq_add_opts o = {.payload = big, .paylen = sizeof big, .set_payload = 1};
    wq_queue_add(q, "k", 1, &o);
    char small[3] = {0, 'x', 0};
    wq_add_opts o2 = {.payload = small, .paylen = 3, .set_payload = 1};
    wq_queue_add(q, "s", 1, &o2);
    cr_assert_str_eq(get(), "k");
    cr_assert_eq(got_info.paylen, sizeof big);
    cr_assert_eq(memcmp(got_info.payload, big, sizeof big), 0);
    cr_assert_str_eq(get(), "s");
    cr_assert_eq(got_info.paylen, 3);
    cr_assert_eq(memcmp(got_info.payload, small, 3), 0);
    wq_add_opts o3 = {.payload = "tiny", .paylen = 4, .set_payload = 1};
    wq_queue_add(q, "k", 1, &o3);
    cr_assert_str_eq(payload_of("k"), "tiny");
    finish();
}

Test(queue, payload_of_a_delayed_add_applies_to_the_record)
{
    wq_add_opts o = {.payload = "later", .paylen = 5, .set_payload = 1};
    cr_assert_eq(wq_queue_add_after(q, "k", 1, S, &o), 1);
    cr_assert_str_eq(payload_of("k"), "later");
    step(S);
    wq_queue_fire_due(q);
    cr_assert_str_eq(get(), "k");
    cr_assert_eq(memcmp(got_info.payload, "later", 5), 0);
    finish();
}

/* ---- metrics ---- */

Test(queue, metrics_follow_the_worked_example)
{
    const wq_metrics *m = metrics();
    add("foo");
    cr_assert_eq(m->adds, 1);
    cr_assert_eq(m->depth, 1);

    step(50 * US);
    cr_assert_str_eq(get(), "foo");
    cr_assert_eq(m->queue_latency.count, 1);
    cr_assert_eq(m->queue_latency.sum, 5e-05);
    cr_assert_eq(m->depth, 0);

    for (int i = 0; i < 5; i++)
        add("foo");
    cr_assert_eq(m->adds, 2);
    cr_assert_eq(m->depth, 1);

    step(25 * US);
    cr_assert_eq(done("foo"), 0);
    cr_assert_eq(m->work_duration.count, 1);
    cr_assert_eq(m->work_duration.sum, 2.5e-05);
    cr_assert_str_eq(get(), "foo");
    cr_assert_eq(m->queue_latency.count, 2);
    cr_assert_eq(m->queue_latency.sum, 5e-05 + 2.5e-05);

    step(1 * MS);
    double unfinished, longest;
    wq_queue_work_ages(q, &unfinished, &longest);
    cr_assert_eq(unfinished, 0.001);
    cr_assert_eq(longest, 0.001);
    cr_assert_eq(done("foo"), 0);
    cr_assert_eq(m->work_duration.count, 2);
    cr_assert_eq(m->work_duration.sum, 2.5e-05 + 0.001);

    /* Both latencies (5e-05, 2.5e-05) fall in the (1e-05, 1e-04] bucket. */
    static const uint64_t lat[WQ_HIST_BOUNDS + 1] = {0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0};
    /* Work: 2.5e-05 in (1e-05, 1e-04], 0.001 in (1e-04, 0.001]. */
    static const uint64_t work[WQ_HIST_BOUNDS + 1] = {0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0};
    for (int i = 0; i <= WQ_HIST_BOUNDS; i++) {
        cr_assert_eq(m->queue_latency.buckets[i], lat[i], "latency bucket %d", i);
        cr_assert_eq(m->work_duration.buckets[i], work[i], "work bucket %d", i);
    }
    cr_assert_eq(wq_histogram_cumulative(&m->queue_latency, 3), 0);
    cr_assert_eq(wq_histogram_cumulative(&m->queue_latency, 4), 2);
    cr_assert_eq(wq_histogram_cumulative(&m->work_duration, 4), 1);
    cr_assert_eq(wq_histogram_cumulative(&m->work_duration, 5), 2);
    cr_assert_eq(wq_histogram_cumulative(&m->work_duration, WQ_HIST_BOUNDS), 2);
    cr_assert_eq(m->adds, 2);
    cr_assert_eq(m->depth, 0);
    cr_assert_eq(m->retries, 0);
    wq_queue_work_ages(q, &unfinished, &longest);
    cr_assert_eq(unfinished, 0);
    cr_assert_eq(longest, 0);
    finish();
}

Test(queue, histogram_buckets_are_the_client_go_ones)
{
    static const double want[WQ_HIST_BOUNDS] = {1e-08, 1e-07, 1e-06, 1e-05, 1e-04,
                                                0.001, 0.01,  0.1,   1,     10};
    for (int i = 0; i < WQ_HIST_BOUNDS; i++)
        cr_assert_eq(wq_hist_bounds[i], want[i], "bound %d", i);
    finish();
}

Test(queue, histogram_bucket_upper_bounds_are_inclusive)
{
    wq_histogram h;
    memset(&h, 0, sizeof h);
    wq_histogram_observe(&h, 0);
    wq_histogram_observe(&h, 1e-08);
    wq_histogram_observe(&h, 1.0000001e-08);
    wq_histogram_observe(&h, 1);
    wq_histogram_observe(&h, 10);
    wq_histogram_observe(&h, 10.5);
    wq_histogram_observe(&h, 3600);
    static const uint64_t want[WQ_HIST_BOUNDS + 1] = {2, 1, 0, 0, 0, 0, 0, 0, 1, 1, 2};
    for (int i = 0; i <= WQ_HIST_BOUNDS; i++)
        cr_assert_eq(h.buckets[i], want[i], "bucket %d", i);
    cr_assert_eq(h.count, 7);
    cr_assert_float_eq(h.sum, 0 + 1e-08 + 1.0000001e-08 + 1 + 10 + 10.5 + 3600, 1e-9);
    cr_assert_eq(wq_histogram_cumulative(&h, 0), 2);
    cr_assert_eq(wq_histogram_cumulative(&h, 1), 3);
    cr_assert_eq(wq_histogram_cumulative(&h, 9), 5);
    cr_assert_eq(wq_histogram_cumulative(&h, WQ_HIST_BOUNDS), 7);
    finish();
}

Test(queue, queue_latency_counts_from_the_add_that_made_the_key_dirty)
{
    add("a");
    step(10 * US);
    add("a");
    step(10 * US);
    get();
    cr_assert_eq(metrics()->queue_latency.sum, 2e-05);
    cr_assert_eq(got_info.added_at, fc.ns - 20 * US);
    finish();
}

Test(queue, depth_rises_when_a_key_becomes_dirty_and_falls_at_get)
{
    const wq_metrics *m = metrics();
    add("a");
    add("b");
    add("a");
    cr_assert_eq(m->depth, 2);
    get();
    cr_assert_eq(m->depth, 1);
    add("a"); /* dirty again while processing */
    cr_assert_eq(m->depth, 2);
    cr_assert_eq(m->adds, 3);
    done("a"); /* requeued: not a new add */
    cr_assert_eq(m->depth, 2);
    cr_assert_eq(m->adds, 3);
    get_all();
    cr_assert_eq(m->depth, 0);
    finish();
}

Test(queue, unfinished_work_sums_the_ages_and_longest_is_the_oldest)
{
    add("a");
    add("b");
    add("c");
    get();
    step(1 * S);
    get();
    step(2 * S);
    get();
    step(1 * S);
    double unfinished, longest;
    wq_queue_work_ages(q, &unfinished, &longest);
    cr_assert_eq(unfinished, 4 + 3 + 1);
    cr_assert_eq(longest, 4);
    done("a");
    wq_queue_work_ages(q, &unfinished, &longest);
    cr_assert_eq(unfinished, 3 + 1);
    cr_assert_eq(longest, 3);
    done("c");
    wq_queue_work_ages(q, &unfinished, &longest);
    cr_assert_eq(unfinished, 3);
    cr_assert_eq(longest, 3);
    finish();
}

Test(queue, metrics_belong_to_each_queue)
{
    wq_queue *q2 = wq_queue_new(&clk);
    cr_assert_not_null(q2);
    add("a");
    add_after("b", S);
    cr_assert_eq(wq_queue_metrics(q2)->adds, 0);
    cr_assert_eq(wq_queue_metrics(q2)->retries, 0);
    wq_queue_add(q2, "x", 1, NULL);
    cr_assert_eq(metrics()->adds, 1);
    cr_assert_eq(wq_queue_metrics(q2)->adds, 1);
    wq_queue_free(q2);
    finish();
}

/* ---- delaying queue ---- */

Test(queue, delayed_key_waits_until_its_ready_time)
{
    int64_t t0 = fc.ns;
    cr_assert_eq(add_after("a", 10 * S), 1);
    cr_assert_eq(wq_queue_len(q), 0);
    cr_assert_eq(wq_queue_waiting(q), 1);
    cr_assert_eq(state_of("a"), WQ_ST_WAITING);
    cr_assert_eq(metrics()->adds, 0, "waiting is not dirty");
    cr_assert_eq(metrics()->depth, 0);
    cr_assert_eq(wq_queue_next_ready(q), t0 + 10 * S);
    step(10 * S - 1);
    cr_assert_eq(wq_queue_fire_due(q), 0);
    cr_assert_null(get());
    step(1);
    cr_assert_eq(wq_queue_fire_due(q), 1);
    cr_assert_eq(wq_queue_waiting(q), 0);
    cr_assert_eq(wq_queue_next_ready(q), WQ_NEVER);
    cr_assert_eq(metrics()->adds, 1);
    cr_assert_str_eq(get(), "a");
    cr_assert_eq(got_info.added_at, t0 + 10 * S, "latency counts from the delayed add");
    finish();
}

Test(queue, next_ready_is_never_when_nothing_waits)
{
    cr_assert_eq(wq_queue_next_ready(q), WQ_NEVER);
    cr_assert_eq(wq_queue_fire_due(q), 0);
    finish();
}

Test(queue, delay_of_zero_or_less_adds_now)
{
    cr_assert_eq(add_after("a", 0), 1);
    cr_assert_eq(add_after("b", -5 * S), 1);
    cr_assert_eq(add_after("a", -1), 0, "already dirty");
    cr_assert_eq(wq_queue_len(q), 2);
    cr_assert_eq(wq_queue_waiting(q), 0);
    cr_assert_eq(metrics()->retries, 3);
    cr_assert_eq(metrics()->adds, 2);
    cr_assert_str_eq(get_all(), "a b");
    finish();
}

Test(queue, earlier_ready_time_replaces_a_later_one)
{
    int64_t t0 = fc.ns;
    cr_assert_eq(add_after("a", 10 * S), 1);
    cr_assert_eq(add_after("a", 5 * S), 1);
    cr_assert_eq(wq_queue_waiting(q), 1, "a waiting key is kept once");
    cr_assert_eq(wq_queue_next_ready(q), t0 + 5 * S);
    step(5 * S);
    cr_assert_eq(wq_queue_fire_due(q), 1);
    cr_assert_str_eq(get(), "a");
    done("a");
    step(10 * S);
    cr_assert_eq(wq_queue_fire_due(q), 0, "the later time is gone");
    cr_assert_null(get());
    finish();
}

Test(queue, later_or_equal_ready_time_is_ignored)
{
    int64_t t0 = fc.ns;
    add_after("a", 5 * S);
    cr_assert_eq(add_after("a", 10 * S), 0);
    cr_assert_eq(add_after("a", 5 * S), 0);
    wq_item_info info;
    cr_assert(wq_queue_lookup(q, "a", 1, &info));
    cr_assert_eq(info.ready_at, t0 + 5 * S);
    cr_assert_eq(metrics()->retries, 3, "ignored calls still count a retry");
    finish();
}

Test(queue, ready_time_is_computed_when_add_after_is_called)
{
    int64_t t0 = fc.ns;
    add_after("a", 10 * S);
    step(3 * S);
    cr_assert_eq(add_after("a", 8 * S), 0, "3 + 8 = 11 is later than 10");
    cr_assert_eq(wq_queue_next_ready(q), t0 + 10 * S);
    cr_assert_eq(add_after("a", 6 * S), 1, "3 + 6 = 9 is earlier");
    cr_assert_eq(wq_queue_next_ready(q), t0 + 9 * S);
    finish();
}

Test(queue, add_does_not_cancel_a_pending_delayed_add)
{
    add_after("x", 3600 * S);
    cr_assert_eq(add("x"), 1);
    cr_assert_eq(state_of("x"), WQ_ST_DIRTY | WQ_ST_QUEUED | WQ_ST_WAITING);
    cr_assert_str_eq(get(), "x");
    done("x");
    cr_assert_eq(state_of("x"), WQ_ST_WAITING);
    cr_assert_null(get());
    step(3600 * S);
    cr_assert_eq(wq_queue_fire_due(q), 1);
    cr_assert_str_eq(get(), "x", "x runs again in an hour");
    cr_assert_eq(metrics()->adds, 2);
    finish();
}

Test(queue, delayed_add_of_a_queued_key_is_kept_separately)
{
    add("x");
    cr_assert_eq(add_after("x", 60 * S), 1);
    cr_assert_eq(wq_queue_len(q), 1);
    cr_assert_eq(wq_queue_waiting(q), 1);
    cr_assert_str_eq(get(), "x");
    done("x");
    step(60 * S);
    cr_assert_eq(wq_queue_fire_due(q), 1);
    cr_assert_str_eq(run_all(), "x");
    finish();
}

Test(queue, due_key_that_is_already_queued_is_not_added_twice)
{
    add_after("x", S);
    add("x");
    step(S);
    nevents = 0;
    cr_assert_eq(wq_queue_fire_due(q), 1);
    cr_assert_str_eq(take_events(), "updated:x");
    cr_assert_eq(metrics()->adds, 1);
    cr_assert_eq(wq_queue_len(q), 1);
    cr_assert_str_eq(run_all(), "x");
    finish();
}

Test(queue, due_key_that_is_processing_runs_again_after_done)
{
    add("x");
    get();
    add_after("x", S);
    step(S);
    cr_assert_eq(wq_queue_fire_due(q), 1);
    cr_assert_eq(state_of("x"), WQ_ST_PROCESSING | WQ_ST_DIRTY);
    cr_assert_eq(wq_queue_len(q), 0);
    done("x");
    cr_assert_str_eq(run_all(), "x");
    finish();
}

Test(queue, ready_entries_are_added_in_ascending_ready_time)
{
    add_after("c", 3 * S);
    add_after("a", 1 * S);
    add_after("d", 4 * S);
    add_after("b", 2 * S);
    step(3 * S);
    cr_assert_eq(wq_queue_fire_due(q), 3);
    cr_assert_eq(wq_queue_waiting(q), 1);
    cr_assert_str_eq(get_all(), "a b c");
    step(10 * S);
    cr_assert_eq(wq_queue_fire_due(q), 1);
    cr_assert_str_eq(get_all(), "d");
    finish();
}

Test(queue, equal_ready_times_fire_in_insertion_order)
{
    const char *keys[] = {"k5", "k1", "k9", "k3", "k7", "k2", "k8", "k4", "k6", "k0"};
    for (int i = 0; i < 10; i++)
        add_after(keys[i], 5 * S);
    step(5 * S);
    cr_assert_eq(wq_queue_fire_due(q), 10);
    cr_assert_str_eq(get_all(), "k5 k1 k9 k3 k7 k2 k8 k4 k6 k0");
    finish();
}

Test(queue, ties_reached_through_different_delays_fire_in_call_order)
{
    add_after("b", 5 * S);
    step(2 * S);
    add_after("a", 3 * S);
    step(3 * S);
    wq_queue_fire_due(q);
    cr_assert_str_eq(get_all(), "b a");
    finish();
}

Test(queue, retries_count_every_add_after_before_shutdown)
{
    add_after("a", S);
    add_after("a", 2 * S); /* ignored, still counted */
    add_after("b", 0);
    add_after("c", -S);
    add_after("b", 0); /* already dirty, still counted */
    cr_assert_eq(metrics()->retries, 5);
    wq_queue_add_at(q, "d", 1, fc.ns + S, NULL);
    cr_assert_eq(metrics()->retries, 5, "add_at restores, it is not a retry");
    add("e");
    get();
    done("b");
    cr_assert_eq(metrics()->retries, 5, "add/get/done do not count");
    wq_queue_shutdown(q);
    cr_assert_eq(add_after("z", S), WQ_ESHUTDOWN);
    cr_assert_eq(add_after("z", 0), WQ_ESHUTDOWN);
    cr_assert_eq(metrics()->retries, 5);
    finish();
}

Test(queue, delayed_entries_freeze_after_shutdown)
{
    add_after("a", S);
    add_after("b", 2 * S);
    wq_queue_shutdown(q);
    cr_assert_eq(wq_queue_next_ready(q), WQ_NEVER);
    step(10 * S);
    cr_assert_eq(wq_queue_fire_due(q), 0);
    cr_assert_eq(wq_queue_len(q), 0);
    cr_assert_null(get());
    cr_assert_eq(get_rc, WQ_ESHUTDOWN);
    cr_assert_eq(metrics()->adds, 0);
    finish();
}

Test(queue, pending_delayed_entries_no_longer_count_as_waiting_after_shutdown)
{
    add_after("a", S);
    add_after("b", 2 * S);
    add("c");
    get();
    add_after("c", S); /* processing and waiting */
    cr_assert_eq(wq_queue_waiting(q), 3);
    take_events();
    wq_queue_shutdown(q);
    cr_assert_eq(wq_queue_waiting(q), 0, "dropped in memory (WORKQUEUE.md)");
    cr_assert_eq(wq_queue_check(q), 0);
    /* The records stay, with no event, so a store keeps them for the next run. */
    cr_assert_str_eq(take_events(), "shutdown");
    cr_assert_eq(state_of("a"), WQ_ST_WAITING);
    cr_assert_eq(state_of("b"), WQ_ST_WAITING);
    cr_assert_eq(wq_queue_records(q), 3);
    step(10 * S);
    cr_assert_eq(wq_queue_fire_due(q), 0);
    cr_assert_eq(wq_queue_waiting(q), 0, "time passing brings nothing back");
    cr_assert_eq(wq_queue_processing(q), 1);
    done("c");
    cr_assert_eq(wq_queue_waiting(q), 0);
    cr_assert_eq(wq_queue_check(q), 0);
    finish();
}

Test(queue, add_after_never_blocks_beyond_a_thousand_entries)
{
    wq_queue_set_observer(q, NULL, NULL); /* checking at each event would be quadratic */
    char k[16];
    for (int i = 0; i < 5000; i++) {
        snprintf(k, sizeof k, "k%d", i);
        cr_assert_eq(add_after(k, (int64_t)(5000 - i) * MS), 1);
    }
    cr_assert_eq(wq_queue_waiting(q), 5000);
    cr_assert_eq(wq_queue_check(q), 0);
    step(5 * S);
    cr_assert_eq(wq_queue_fire_due(q), 5000);
    for (int i = 4999; i >= 0; i--) {
        snprintf(k, sizeof k, "k%d", i);
        cr_assert_str_eq(get(), k);
    }
    finish();
}

Test(queue, delay_overflow_saturates_to_never_firing)
{
    cr_assert_eq(add_after("a", INT64_MAX), 1);
    wq_item_info info;
    cr_assert(wq_queue_lookup(q, "a", 1, &info));
    cr_assert_eq(info.ready_at, WQ_NEVER);
    step(3600 * S);
    cr_assert_eq(wq_queue_fire_due(q), 0);
    finish();
}

Test(queue, cancel_after_removes_the_pending_delayed_add)
{
    add_after("a", S);
    add_after("b", S);
    cr_assert_eq(cancel("a"), 1);
    cr_assert_eq(cancel("a"), 0);
    cr_assert_eq(cancel("nobody"), 0);
    cr_assert_not(has_record("a"), "nothing else was pending for a");
    cr_assert_eq(wq_queue_waiting(q), 1);
    step(S);
    cr_assert_eq(wq_queue_fire_due(q), 1);
    cr_assert_str_eq(get_all(), "b");
    finish();
}

Test(queue, cancel_after_keeps_a_queued_or_processing_key)
{
    add("a");
    add_after("a", S);
    cr_assert_eq(cancel("a"), 1);
    cr_assert_eq(state_of("a"), WQ_ST_DIRTY | WQ_ST_QUEUED);
    get();
    add_after("a", S);
    cr_assert_eq(cancel("a"), 1);
    cr_assert_eq(state_of("a"), WQ_ST_PROCESSING);
    step(S);
    cr_assert_eq(wq_queue_fire_due(q), 0);
    done("a");
    cr_assert_not(has_record("a"));
    finish();
}

Test(queue, cancel_then_add_after_schedules_again_at_a_later_time)
{
    int64_t t0 = fc.ns;
    add_after("a", S);
    cancel("a");
    cr_assert_eq(add_after("a", 5 * S), 1);
    cr_assert_eq(wq_queue_next_ready(q), t0 + 5 * S);
    finish();
}

Test(queue, cancel_after_works_after_shutdown)
{
    add_after("a", S);
    wq_queue_shutdown(q);
    cr_assert_eq(state_of("a"), WQ_ST_WAITING, "the frozen entry is still there");
    cr_assert_eq(cancel("a"), 1);
    cr_assert_eq(wq_queue_waiting(q), 0);
    cr_assert_eq(wq_queue_records(q), 0);
    finish();
}

Test(queue, add_at_schedules_at_an_absolute_time)
{
    int64_t t0 = fc.ns;
    cr_assert_eq(wq_queue_add_at(q, "a", 1, t0 + 7 * S, NULL), 1);
    cr_assert_eq(wq_queue_next_ready(q), t0 + 7 * S);
    cr_assert_eq(wq_queue_add_at(q, "a", 1, t0 + 9 * S, NULL), 0, "later is ignored");
    cr_assert_eq(wq_queue_add_at(q, "a", 1, t0 + 6 * S, NULL), 1, "earlier wins");
    cr_assert_eq(wq_queue_add_at(q, "b", 1, t0, NULL), 1, "a time not in the future adds now");
    cr_assert_eq(wq_queue_add_at(q, "c", 1, t0 - S, NULL), 1);
    cr_assert_eq(wq_queue_len(q), 2);
    cr_assert_eq(metrics()->retries, 0);
    step(6 * S);
    cr_assert_eq(wq_queue_fire_due(q), 1);
    cr_assert_str_eq(get_all(), "b c a");
    finish();
}

Test(queue, fire_due_adds_only_what_is_due)
{
    add_after("a", S);
    add_after("b", 3 * S);
    step(2 * S);
    cr_assert_eq(wq_queue_fire_due(q), 1);
    cr_assert_eq(wq_queue_fire_due(q), 0);
    cr_assert_eq(wq_queue_next_ready(q), fc.ns + S);
    finish();
}

/* ---- observer ---- */

Test(queue, observer_hears_each_state_change)
{
    add("a");
    cr_assert_str_eq(take_events(), "queued:a");
    add("a");
    cr_assert_str_eq(take_events(), "", "nothing changed");
    get();
    cr_assert_str_eq(take_events(), "processing:a");
    add("a");
    cr_assert_str_eq(take_events(), "dirty:a");
    done("a");
    cr_assert_str_eq(take_events(), "queued:a idle");
    get();
    done("a");
    cr_assert_str_eq(take_events(), "processing:a gone:a idle");
    cr_assert_eq(done("a"), WQ_ENOENT);
    cr_assert_str_eq(take_events(), "");

    add_after("b", 2 * S);
    cr_assert_str_eq(take_events(), "waiting:b");
    add_after("b", 3 * S);
    cr_assert_str_eq(take_events(), "", "a later time changes nothing");
    add_after("b", 1 * S);
    cr_assert_str_eq(take_events(), "waiting:b", "moved earlier");
    add_payload("b", "p");
    cr_assert_str_eq(take_events(), "queued:b");
    add_payload("b", "q");
    cr_assert_str_eq(take_events(), "updated:b");
    add_prio("b", 3);
    cr_assert_str_eq(take_events(), "updated:b");
    step(S);
    wq_queue_fire_due(q);
    cr_assert_str_eq(take_events(), "updated:b", "no longer waiting, still queued");
    get();
    add_after("b", S);
    done("b");
    cr_assert_str_eq(take_events(), "processing:b waiting:b waiting:b idle");
    step(S);
    wq_queue_fire_due(q);
    cr_assert_str_eq(take_events(), "queued:b");

    add_after("c", S);
    add("c");
    cancel("c");
    cr_assert_str_eq(take_events(), "waiting:c queued:c updated:c");
    add_after("d", S);
    cancel("d");
    cr_assert_str_eq(take_events(), "waiting:d gone:d");
    wq_queue_shutdown_drain(q);
    cr_assert_str_eq(take_events(), "shutdown");
    add("e");
    add_after("e", S);
    cr_assert_str_eq(take_events(), "", "ignored after shutdown");
    wq_queue_shutdown(q);
    cr_assert_str_eq(take_events(), "shutdown", "a later shutdown is heard (it releases a drain)");
    finish();
}

static int gone_seen;
static void check_gone(void *ud, wq_queue *qq, wq_event ev, const char *key, size_t len)
{
    (void)ud;
    cr_assert_eq(wq_queue_check(qq), 0);
    wq_item_info info;
    if (ev == WQ_EV_GONE) {
        cr_assert_eq(wq_queue_lookup(qq, key, len, &info), 0, "gone means no record");
        cr_assert_eq(wq_queue_records(qq), 0);
        cr_assert_eq(len, 3);
        cr_assert_eq(memcmp(key, "key", 3), 0, "the key is still readable");
        gone_seen++;
    } else if (ev == WQ_EV_QUEUED) {
        cr_assert(wq_queue_lookup(qq, key, len, &info));
        cr_assert(info.state & WQ_ST_QUEUED);
    } else if (ev == WQ_EV_PROCESSING) {
        cr_assert(wq_queue_lookup(qq, key, len, &info));
        cr_assert_eq(info.state, WQ_ST_PROCESSING);
    }
}

Test(queue, observer_sees_a_consistent_queue_at_every_event)
{
    wq_queue_set_observer(q, check_gone, NULL);
    add("key");
    get();
    done("key");
    add_after("key", S);
    cancel("key");
    cr_assert_eq(gone_seen, 2);
    finish();
}

Test(queue, observer_can_be_removed)
{
    wq_queue_set_observer(q, NULL, NULL);
    add("a");
    get();
    done("a");
    cr_assert_eq(nevents, 0);
    finish();
}

/* ---- lookup, foreach ---- */

Test(queue, lookup_reports_state_priority_times_and_payload)
{
    int64_t t0 = fc.ns;
    wq_add_opts o = {
        .payload = "pl", .paylen = 2, .set_payload = 1, .set_priority = 1, .priority = 4};
    wq_queue_add(q, "k", 1, &o);
    add_after("k", 3 * S);
    wq_item_info info;
    cr_assert(wq_queue_lookup(q, "k", 1, &info));
    cr_assert_eq(info.keylen, 1);
    cr_assert_eq(info.key[0], 'k');
    cr_assert_eq(info.paylen, 2);
    cr_assert_eq(memcmp(info.payload, "pl", 2), 0);
    cr_assert_eq(info.priority, 4);
    cr_assert_eq(info.state, WQ_ST_DIRTY | WQ_ST_QUEUED | WQ_ST_WAITING);
    cr_assert_eq(info.ready_at, t0 + 3 * S);
    cr_assert_eq(info.added_at, t0);
    cr_assert_not(wq_queue_lookup(q, "x", 1, &info));
    finish();
}

static int count_visit(void *ud, const wq_item_info *info)
{
    int *n = ud;
    cr_assert_neq(info->state, 0);
    (*n)++;
    return 0;
}

static int stop_visit(void *ud, const wq_item_info *info)
{
    (void)info;
    int *n = ud;
    return ++(*n) == 2 ? 42 : 0;
}

Test(queue, foreach_visits_every_record)
{
    add("a");
    add("b");
    get();
    add_after("c", S);
    add("d");
    get();
    done("a");
    int n = 0;
    cr_assert_eq(wq_queue_foreach(q, count_visit, &n), 0);
    cr_assert_eq(n, 3);
    cr_assert_eq(wq_queue_records(q), 3);
    n = 0;
    cr_assert_eq(wq_queue_foreach(q, stop_visit, &n), 42);
    cr_assert_eq(n, 2);
    finish();
}

Test(queue, many_keys_grow_and_shrink_the_tables)
{
    wq_queue_set_observer(q, NULL, NULL);
    char k[16];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 3000; i++) {
            snprintf(k, sizeof k, "key-%d", i);
            wq_add_opts o = {.set_priority = 1, .priority = i % 7};
            cr_assert_eq(wq_queue_add(q, k, strlen(k), &o), 1);
        }
        cr_assert_eq(wq_queue_check(q), 0);
        cr_assert_eq(wq_queue_len(q), 3000);
        int last_prio = 7;
        for (int i = 0; i < 3000; i++) {
            cr_assert_eq(wq_queue_get(q, &got_info), 0);
            cr_assert_leq(got_info.priority, last_prio);
            last_prio = got_info.priority;
            cr_assert_eq(wq_queue_done(q, got_info.key, got_info.keylen), 0);
        }
        cr_assert_eq(wq_queue_records(q), 0);
        cr_assert_eq(wq_queue_check(q), 0);
    }
    finish();
}

Test(queue, get_without_an_info_struct_still_hands_out_the_key)
{
    add("a");
    cr_assert_eq(wq_queue_get(q, NULL), 0);
    cr_assert_eq(state_of("a"), WQ_ST_PROCESSING);
    cr_assert_eq(done("a"), 0);
    wq_queue_free(NULL);
    finish();
}

Test(queue, strerror_names_every_code)
{
    cr_assert_str_eq(wq_strerror(0), "success");
    cr_assert_str_eq(wq_strerror(WQ_ENOMEM), "out of memory");
    cr_assert_str_eq(wq_strerror(WQ_EEMPTY), "queue is empty");
    cr_assert_str_eq(wq_strerror(WQ_ESHUTDOWN), "queue is shut down");
    cr_assert_str_eq(wq_strerror(WQ_ENOENT), "no such key");
    cr_assert_str_eq(wq_strerror(WQ_E2BIG), "key or payload too large");
    cr_assert_not_null(wq_strerror(-999));
    finish();
}

/* ---- record ids (the Lua binding keeps one string per id) ---- */

static uint32_t gone_ids[16];
static int ngone;

static void observe_ids(void *ud, wq_queue *qq, wq_event ev, const char *key, size_t len)
{
    (void)ud;
    (void)key;
    (void)len;
    if (ev == WQ_EV_GONE && ngone < 16)
        gone_ids[ngone++] = wq_queue_event_id(qq);
}

Test(queue, record_ids_name_the_same_record_in_adds_gets_and_events)
{
    wq_queue_set_observer(q, observe_ids, NULL);
    ngone = 0;
    cr_assert_eq(add("a"), 1);
    uint32_t ida = wq_queue_last_id(q);
    cr_assert_eq(add("b"), 1);
    uint32_t idb = wq_queue_last_id(q);
    cr_assert_neq(ida, idb);
    cr_assert_eq(add("a"), 0);
    cr_assert_eq(wq_queue_last_id(q), ida, "a dedup add names the existing record");
    cr_assert_eq(add_after("c", 5 * S), 1);
    uint32_t idc = wq_queue_last_id(q);
    cr_assert(idc != ida && idc != idb);
    cr_assert_lt(ida, wq_queue_id_bound(q));
    cr_assert_lt(idc, wq_queue_id_bound(q));

    wq_item_info info;
    cr_assert_eq(wq_queue_get(q, &info), 0);
    cr_assert_eq(info.id, ida, "get reports the id the add did");
    cr_assert_eq(wq_queue_done(q, "a", 1), 0);
    cr_assert_eq(ngone, 1);
    cr_assert_eq(gone_ids[0], ida, "the record that went is a's");

    /* a's id is free: the next new key may take it, and then reports it. */
    cr_assert_eq(add("d"), 1);
    uint32_t idd = wq_queue_last_id(q);
    cr_assert_eq(wq_queue_lookup(q, "d", 1, &info), 1);
    cr_assert_eq(info.id, idd);
    cr_assert_eq(wq_queue_lookup(q, "b", 1, &info), 1);
    cr_assert_eq(info.id, idb);
    wq_queue_set_observer(q, observe, NULL);
    finish();
}

/* ---- pause and remove (SPEC 7.5) ---- */

static int saw_gone(const char *k)
{
    for (int i = 0; i < nevents; i++)
        if (events[i].ev == WQ_EV_GONE && strcmp(events[i].key, k) == 0)
            return 1;
    return 0;
}

Test(queue, paused_queue_takes_adds_but_hands_nothing_out)
{
    cr_assert_eq(wq_queue_set_paused(q, 1), 1);
    cr_assert_eq(wq_queue_set_paused(q, 1), 0, "pausing twice changes nothing");
    cr_assert(wq_queue_paused(q));
    cr_assert_eq(add("a"), 1);
    cr_assert_eq(add("b"), 1);
    cr_assert_eq(wq_queue_len(q), 2);
    cr_assert_null(get());
    cr_assert_eq(get_rc, WQ_EEMPTY);
    cr_assert_eq(wq_queue_set_paused(q, 0), 1);
    cr_assert_not(wq_queue_paused(q));
    cr_assert_str_eq(get_all(), "a b", "resumed: the items come out in their order");
    finish();
}

Test(queue, paused_queue_keeps_processing_items_and_fires_delayed_ones)
{
    add("run");
    cr_assert_str_eq(get(), "run");
    wq_queue_set_paused(q, 1);
    add_after("later", 2 * S);
    step(3 * S);
    cr_assert_eq(wq_queue_fire_due(q), 1);
    cr_assert_eq(state_of("later"), WQ_ST_DIRTY | WQ_ST_QUEUED, "a due item is queued");
    cr_assert_eq(done("run"), 0, "done works while paused");
    cr_assert_null(get());
    wq_queue_set_paused(q, 0);
    cr_assert_str_eq(get(), "later");
    finish();
}

Test(queue, paused_and_shut_down_queue_reports_shutdown_with_items_left)
{
    add("a");
    wq_queue_set_paused(q, 1);
    wq_queue_shutdown(q);
    cr_assert_null(get());
    cr_assert_eq(get_rc, WQ_ESHUTDOWN, "a get loop ends instead of waiting forever");
    cr_assert_eq(wq_queue_len(q), 1, "the item stays queued");
    finish();
}

Test(queue, remove_drops_a_queued_key_as_if_never_added)
{
    add("a");
    add("b");
    add("c");
    cr_assert_eq(wq_queue_remove(q, "b", 1), 0);
    cr_assert_not(has_record("b"));
    cr_assert(saw_gone("b"), "the observer hears the record go");
    cr_assert_eq(metrics()->depth, 2);
    cr_assert_eq(metrics()->adds, 3, "adds counts what happened");
    cr_assert_eq(wq_queue_len(q), 2);
    cr_assert_str_eq(get_all(), "a c");
    cr_assert_eq(add("b"), 1, "a removed key can be added again");
    finish();
}

Test(queue, remove_drops_a_delayed_key_and_its_queued_entry)
{
    add_after("w", 5 * S);
    add("both");
    add_after("both", 5 * S);
    cr_assert_eq(wq_queue_remove(q, "w", 1), 0);
    cr_assert_eq(wq_queue_remove(q, "both", 4), 0);
    cr_assert_eq(wq_queue_waiting(q), 0);
    cr_assert_eq(wq_queue_records(q), 0);
    cr_assert_eq(metrics()->depth, 0);
    cr_assert_eq(wq_queue_next_ready(q), WQ_NEVER);
    step(10 * S);
    cr_assert_eq(wq_queue_fire_due(q), 0, "nothing fires later");
    cr_assert_null(get());
    finish();
}

Test(queue, remove_refuses_a_processing_key_and_an_unknown_one)
{
    add("p");
    cr_assert_str_eq(get(), "p");
    add("p");
    add_after("p", S);
    cr_assert_eq(wq_queue_remove(q, "p", 1), WQ_EBUSY);
    cr_assert_eq(state_of("p"), WQ_ST_PROCESSING | WQ_ST_DIRTY | WQ_ST_WAITING, "nothing changed");
    cr_assert_eq(wq_queue_remove(q, "nope", 4), WQ_ENOENT);
    cr_assert_eq(done("p"), 0);
    cr_assert_eq(wq_queue_remove(q, "p", 1), 0, "once done, its re-add can be removed");
    cr_assert_eq(wq_queue_records(q), 0);
    finish();
}

Test(queue, remove_of_the_last_queued_key_of_a_priority_level_drops_the_level)
{
    add_prio("hi", 5);
    add_prio("lo", 0);
    cr_assert_eq(wq_queue_remove(q, "hi", 2), 0);
    cr_assert_str_eq(get_all(), "lo");
    add_prio("hi2", 5);
    cr_assert_str_eq(get_all(), "hi2");
    finish();
}
