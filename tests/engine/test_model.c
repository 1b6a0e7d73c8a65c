/*
 * Randomized model test: drives a wq_queue with random operations and a
 * deliberately simple reference model of WORKQUEUE.md (plain arrays, O(n)
 * scans, no cleverness) side by side, comparing every observable result
 * after each step and running the invariant checker. Seeds are fixed so a
 * failure reproduces; WQ_MODEL_SEED=<n> [WQ_MODEL_OPS=<n>] runs one seed.
 * AddRateLimited / Forget / NumRequeues go through a real exponential
 * limiter, modelled here by a count per key.
 */
#include <criterion/criterion.h>

#include "engine/queue.h"
#include "support/fake_clock.h"
#include "engine/ratelimit.h"
#include "support/counting_alloc.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NKEYS 50
#define PAYLOAD_CAP 300
#define MAX_EVENTS 512
#define MS 1000000LL

/* ---- the run's context (one run per process: Criterion forks per test) ---- */

static uint64_t seed;
static long step_no;
static const char *op_name = "";

#define MCHECK(cond, ...)                                                                          \
    cr_assert((cond), "seed %" PRIu64 " step %ld op %s: %s", seed, step_no, op_name,               \
              fmt_msg(__VA_ARGS__))

static char msg_buf[512];
static const char *fmt_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *fmt_msg(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg_buf, sizeof msg_buf, fmt, ap);
    va_end(ap);
    return msg_buf;
}

static uint64_t rng_state;
static uint64_t rnd(void)
{
    /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

static int64_t rnd_range(int64_t lo, int64_t hi) /* inclusive */
{
    return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}

static int chance(int percent_x10) /* per mille */
{
    return (int)(rnd() % 1000) < percent_x10;
}

static char key_names[NKEYS][40];
static size_t key_lens[NKEYS];

static void make_keys(void)
{
    for (int i = 0; i < NKEYS; i++) {
        if (i == 0)
            key_names[i][0] = 0; /* the empty key */
        else if (i % 7 == 0)
            snprintf(key_names[i], sizeof key_names[i], "a-rather-longer-key-name-%d", i);
        else
            snprintf(key_names[i], sizeof key_names[i], "k%d", i);
        key_lens[i] = strlen(key_names[i]);
    }
}

static int key_index(const char *key, size_t len)
{
    for (int i = 0; i < NKEYS; i++)
        if (key_lens[i] == len && memcmp(key_names[i], key, len) == 0)
            return i;
    return -1;
}

/* ---- events: what the model expects and what the queue said ---- */

struct event {
    wq_event ev;
    int key; /* -1 for keyless events */
};

static struct event want_ev[MAX_EVENTS], got_ev[MAX_EVENTS];
static int nwant, ngot;

static void expect_event(wq_event ev, int key)
{
    MCHECK(nwant < MAX_EVENTS, "too many events");
    want_ev[nwant++] = (struct event){ev, key};
}

static void observer(void *ud, wq_queue *q, wq_event ev, const char *key, size_t len)
{
    (void)ud;
    MCHECK(wq_queue_check(q) == 0, "queue inconsistent during event %d", (int)ev);
    MCHECK(ngot < MAX_EVENTS, "too many events");
    int k = -1;
    if (key) {
        k = key_index(key, len);
        MCHECK(k >= 0, "event for an unknown key");
        wq_item_info info;
        int found = wq_queue_lookup(q, key, len, &info);
        MCHECK(found == (ev != WQ_EV_GONE), "event %d: record presence %d", (int)ev, found);
    } else {
        MCHECK(len == 0, "keyless event with a length");
    }
    got_ev[ngot++] = (struct event){ev, k};
}

/* ---- the reference model ---- */

struct mkey {
    int dirty, processing, queued, waiting;
    int64_t qseq; /* place in the store: lower is earlier */
    int32_t prio;
    int has_payload;
    size_t paylen;
    char payload[PAYLOAD_CAP];
    int64_t ready_at;
    uint64_t wseq; /* tie-break among equal ready times */
    int64_t added_at, get_ns;
};

/* The limiter: exponential(1 ms, 16 ms); its model is a failure count per key. */
#define LIM_BASE (1 * MS)
#define LIM_MAX (16 * MS)
static wq_limiter *lim;
static int64_t lim_count[NKEYS];

static int64_t m_when(int i)
{
    int64_t c = lim_count[i]++;
    return c >= 5 ? LIM_MAX : LIM_BASE << c; /* 1, 2, 4, 8, 16, 16, ... ms */
}

static struct model {
    struct mkey k[NKEYS];
    int64_t qseq;
    uint64_t wseq;
    int shutdown, drain;
    int64_t depth;
    uint64_t adds, retries;
    wq_histogram lat, work;
} m;

static int m_pending(const struct mkey *k)
{
    return k->dirty || k->processing || k->waiting;
}

static void m_clear_if_idle(struct mkey *k)
{
    if (!m_pending(k)) {
        k->has_payload = 0;
        k->paylen = 0;
        k->prio = 0;
    }
}

static size_t m_count(int what)
{
    size_t n = 0;
    for (int i = 0; i < NKEYS; i++) {
        const struct mkey *k = &m.k[i];
        n += what == 0   ? k->queued
             : what == 1 ? k->processing
             : what == 2 ? k->waiting
                         : m_pending(k);
    }
    return n;
}

static void m_observe(wq_histogram *h, int64_t ns)
{
    double s = (double)ns / 1e9;
    int i = 0;
    while (i < WQ_HIST_BOUNDS && s > wq_hist_bounds[i])
        i++;
    h->buckets[i]++;
    h->count++;
    h->sum += s;
}

/* Applies payload/priority to an existing record; 1 if anything changed. */
static int m_apply(struct mkey *k, const wq_add_opts *o)
{
    int changed = 0;
    if (!o)
        return 0;
    if (o->set_payload) {
        if (!(k->has_payload && k->paylen == o->paylen &&
              memcmp(k->payload, o->payload, o->paylen) == 0)) {
            k->has_payload = 1;
            k->paylen = o->paylen;
            memcpy(k->payload, o->payload, o->paylen);
            changed = 1;
        }
    }
    if (o->set_priority && o->priority != k->prio) {
        if (k->queued) {
            if (o->priority > k->prio) { /* only rises; back of the new level */
                k->prio = o->priority;
                k->qseq = m.qseq++;
                changed = 1;
            }
        } else { /* processing or waiting: the last priority given */
            k->prio = o->priority;
            changed = 1;
        }
    }
    return changed;
}

/* A record that did not exist takes the options as given. */
static void m_create(struct mkey *k, const wq_add_opts *o)
{
    k->prio = o && o->set_priority ? o->priority : 0;
    k->has_payload = o && o->set_payload;
    k->paylen = k->has_payload ? o->paylen : 0;
    if (k->has_payload)
        memcpy(k->payload, o->payload, o->paylen);
}

/* Marks a not-dirty key dirty: Add's "else" branch. */
static void m_make_dirty(int i)
{
    struct mkey *k = &m.k[i];
    k->dirty = 1;
    k->added_at = fc.ns;
    m.depth++;
    m.adds++;
    if (k->processing) {
        expect_event(WQ_EV_DIRTY, i);
    } else {
        k->queued = 1;
        k->qseq = m.qseq++;
        expect_event(WQ_EV_QUEUED, i);
    }
}

static int m_add(int i, const wq_add_opts *o)
{
    if (m.shutdown)
        return WQ_ESHUTDOWN;
    struct mkey *k = &m.k[i];
    if (k->dirty) {
        if (m_apply(k, o))
            expect_event(WQ_EV_UPDATED, i);
        return 0;
    }
    if (m_pending(k))
        m_apply(k, o);
    else
        m_create(k, o);
    m_make_dirty(i);
    return 1;
}

static int m_get(int *out)
{
    int best = -1;
    for (int i = 0; i < NKEYS; i++) {
        const struct mkey *k = &m.k[i];
        if (!k->queued)
            continue;
        if (best < 0 || k->prio > m.k[best].prio ||
            (k->prio == m.k[best].prio && k->qseq < m.k[best].qseq))
            best = i;
    }
    if (best < 0)
        return m.shutdown ? WQ_ESHUTDOWN : WQ_EEMPTY;
    struct mkey *k = &m.k[best];
    k->queued = 0;
    k->dirty = 0;
    k->processing = 1;
    m.depth--;
    m_observe(&m.lat, fc.ns - k->added_at);
    k->get_ns = fc.ns;
    expect_event(WQ_EV_PROCESSING, best);
    *out = best;
    return 0;
}

static int m_done(int i)
{
    struct mkey *k = &m.k[i];
    if (!k->processing)
        return WQ_ENOENT;
    k->processing = 0;
    m_observe(&m.work, fc.ns - k->get_ns);
    if (k->dirty) {
        k->queued = 1;
        k->qseq = m.qseq++;
        expect_event(WQ_EV_QUEUED, i);
    } else if (!m_pending(k)) {
        expect_event(WQ_EV_GONE, i);
        m_clear_if_idle(k);
    } else {
        expect_event(WQ_EV_WAITING, i);
    }
    if (m_count(1) == 0)
        expect_event(WQ_EV_IDLE, -1);
    return 0;
}

static int m_schedule(int i, int64_t when, const wq_add_opts *o)
{
    struct mkey *k = &m.k[i];
    int changed = 0;
    if (m_pending(k))
        changed = m_apply(k, o);
    else
        m_create(k, o);
    int moved = 0;
    if (!k->waiting || when < k->ready_at) {
        k->waiting = 1;
        k->ready_at = when;
        k->wseq = m.wseq++;
        moved = 1;
    }
    if (moved)
        expect_event(WQ_EV_WAITING, i);
    else if (changed)
        expect_event(WQ_EV_UPDATED, i);
    return moved;
}

static int m_add_after(int i, int64_t delay, const wq_add_opts *o)
{
    if (m.shutdown)
        return WQ_ESHUTDOWN;
    m.retries++;
    if (delay <= 0)
        return m_add(i, o);
    return m_schedule(i, fc.ns + delay, o);
}

static int m_add_at(int i, int64_t at, const wq_add_opts *o)
{
    if (m.shutdown)
        return WQ_ESHUTDOWN;
    if (at <= fc.ns)
        return m_add(i, o);
    return m_schedule(i, at, o);
}

static int m_cancel(int i)
{
    struct mkey *k = &m.k[i];
    if (!k->waiting)
        return 0;
    k->waiting = 0;
    if (!m_pending(k)) {
        expect_event(WQ_EV_GONE, i);
        m_clear_if_idle(k);
    } else {
        expect_event(WQ_EV_UPDATED, i);
    }
    return 1;
}

static int m_fire(void)
{
    if (m.shutdown)
        return 0;
    int n = 0;
    for (;;) {
        int best = -1;
        for (int i = 0; i < NKEYS; i++) {
            const struct mkey *k = &m.k[i];
            if (!k->waiting || k->ready_at > fc.ns)
                continue;
            if (best < 0 || k->ready_at < m.k[best].ready_at ||
                (k->ready_at == m.k[best].ready_at && k->wseq < m.k[best].wseq))
                best = i;
        }
        if (best < 0)
            return n;
        struct mkey *k = &m.k[best];
        k->waiting = 0;
        if (k->dirty)
            expect_event(WQ_EV_UPDATED, best); /* Add of a dirty key: nothing */
        else
            m_make_dirty(best);
        n++;
    }
}

static int64_t m_next_ready(void)
{
    if (m.shutdown)
        return WQ_NEVER;
    int64_t t = WQ_NEVER;
    for (int i = 0; i < NKEYS; i++)
        if (m.k[i].waiting && m.k[i].ready_at < t)
            t = m.k[i].ready_at;
    return t;
}

static void m_shutdown(int drain)
{
    m.shutdown = 1;
    m.drain = drain;
    expect_event(WQ_EV_SHUTDOWN, -1);
}

/* ---- comparison ---- */

static void compare_hist(const wq_histogram *a, const wq_histogram *b, const char *name)
{
    MCHECK(a->count == b->count, "%s count %" PRIu64 " vs %" PRIu64, name, a->count, b->count);
    MCHECK(a->sum == b->sum, "%s sum %.12g vs %.12g", name, a->sum, b->sum);
    for (int i = 0; i <= WQ_HIST_BOUNDS; i++)
        MCHECK(a->buckets[i] == b->buckets[i], "%s bucket %d", name, i);
}

static void compare(wq_queue *q)
{
    MCHECK(wq_queue_check(q) == 0, "invariant checker failed");
    MCHECK(ngot == nwant, "%d events, model expects %d", ngot, nwant);
    for (int i = 0; i < nwant; i++)
        MCHECK(got_ev[i].ev == want_ev[i].ev && got_ev[i].key == want_ev[i].key,
               "event %d is (%d, key %d), model expects (%d, key %d)", i, (int)got_ev[i].ev,
               got_ev[i].key, (int)want_ev[i].ev, want_ev[i].key);
    ngot = nwant = 0;

    MCHECK(wq_queue_len(q) == m_count(0), "len %zu vs %zu", wq_queue_len(q), m_count(0));
    MCHECK(wq_queue_processing(q) == m_count(1), "processing %zu vs %zu", wq_queue_processing(q),
           m_count(1));
    /* Shutdown drops pending delayed adds: the entries stay (for a store), none waits. */
    size_t waiting = m.shutdown ? 0 : m_count(2);
    MCHECK(wq_queue_waiting(q) == waiting, "waiting %zu vs %zu", wq_queue_waiting(q), waiting);
    MCHECK(wq_queue_records(q) == m_count(3), "records %zu vs %zu", wq_queue_records(q),
           m_count(3));
    MCHECK(wq_queue_shutting_down(q) == m.shutdown, "shutting_down");
    MCHECK(wq_queue_draining(q) == (m.drain && m_count(1) > 0), "draining");
    MCHECK(wq_queue_next_ready(q) == m_next_ready(), "next_ready %" PRId64 " vs %" PRId64,
           wq_queue_next_ready(q), m_next_ready());

    const wq_metrics *mt = wq_queue_metrics(q);
    MCHECK(mt->depth == m.depth, "depth %" PRId64 " vs %" PRId64, mt->depth, m.depth);
    MCHECK(mt->adds == m.adds, "adds %" PRIu64 " vs %" PRIu64, mt->adds, m.adds);
    MCHECK(mt->retries == m.retries, "retries %" PRIu64 " vs %" PRIu64, mt->retries, m.retries);
    compare_hist(&mt->queue_latency, &m.lat, "queue latency");
    compare_hist(&mt->work_duration, &m.work, "work duration");

    double unfinished, longest, want_unf = 0, want_long = 0;
    wq_queue_work_ages(q, &unfinished, &longest);
    for (int i = 0; i < NKEYS; i++) {
        if (!m.k[i].processing)
            continue;
        double age = (double)(fc.ns - m.k[i].get_ns) / 1e9;
        want_unf += age;
        if (age > want_long)
            want_long = age;
    }
    MCHECK(fabs(unfinished - want_unf) <= 1e-9 * (1 + want_unf), "unfinished %.12g vs %.12g",
           unfinished, want_unf);
    MCHECK(longest == want_long, "longest %.12g vs %.12g", longest, want_long);

    for (int i = 0; i < NKEYS; i++) {
        int64_t n = wq_limiter_num_requeues(lim, key_names[i], key_lens[i]);
        MCHECK(n == lim_count[i], "key %d: num_requeues %" PRId64 " vs %" PRId64, i, n,
               lim_count[i]);
    }
    for (int i = 0; i < NKEYS; i++) {
        const struct mkey *k = &m.k[i];
        wq_item_info info;
        int found = wq_queue_lookup(q, key_names[i], key_lens[i], &info);
        MCHECK(found == m_pending(k), "key %d: record %d vs %d", i, found, m_pending(k));
        if (!found)
            continue;
        unsigned want = (k->dirty ? WQ_ST_DIRTY : 0) | (k->processing ? WQ_ST_PROCESSING : 0) |
                        (k->queued ? WQ_ST_QUEUED : 0) | (k->waiting ? WQ_ST_WAITING : 0);
        MCHECK(info.state == want, "key %d: state %u vs %u", i, info.state, want);
        MCHECK(info.keylen == key_lens[i] && memcmp(info.key, key_names[i], key_lens[i]) == 0,
               "key %d: key bytes", i);
        MCHECK(info.priority == k->prio, "key %d: priority %d vs %d", i, info.priority, k->prio);
        MCHECK((info.payload != NULL) == k->has_payload, "key %d: has payload", i);
        if (k->has_payload)
            MCHECK(info.paylen == k->paylen && memcmp(info.payload, k->payload, k->paylen) == 0,
                   "key %d: payload (%zu vs %zu bytes)", i, info.paylen, k->paylen);
        if (k->waiting)
            MCHECK(info.ready_at == k->ready_at, "key %d: ready_at", i);
        if (k->dirty)
            MCHECK(info.added_at == k->added_at, "key %d: added_at", i);
    }
}

/* ---- random operations ---- */

static char payload_src[PAYLOAD_CAP];

/* Random options: sometimes none, sometimes a priority and/or a payload. */
static const wq_add_opts *random_opts(wq_add_opts *o)
{
    memset(o, 0, sizeof *o);
    if (chance(400))
        return NULL;
    if (chance(400)) {
        o->set_priority = 1;
        o->priority = (int32_t)rnd_range(-2, 3);
    }
    if (chance(400)) {
        o->set_payload = 1;
        uint64_t r = rnd() % 10;
        if (r < 4) {
            /* a few recurring payloads, so "same bytes" happens */
            static const char *const fixed[] = {"", "a", "bb", "payload"};
            o->payload = fixed[r];
            o->paylen = strlen(fixed[r]);
        } else {
            o->paylen = (size_t)rnd_range(0, r == 9 ? PAYLOAD_CAP : 40);
            for (size_t j = 0; j < o->paylen; j++)
                payload_src[j] = (char)rnd();
            o->payload = payload_src;
        }
    }
    return o;
}

static int64_t random_delay(void)
{
    if (chance(200))
        return rnd_range(-5 * MS, 0);
    return rnd_range(1, 30) * MS / (chance(100) ? 1000 : 1); /* mostly whole ms: ties */
}

static int random_key(void)
{
    return (int)(rnd() % NKEYS);
}

static int random_processing_key(void)
{
    int n = (int)m_count(1);
    if (n == 0)
        return random_key();
    int pick = (int)(rnd() % (uint64_t)n);
    for (int i = 0; i < NKEYS; i++)
        if (m.k[i].processing && pick-- == 0)
            return i;
    return random_key();
}

/* Outcome counts per operation, printed with WQ_MODEL_STATS=1 (coverage sanity). */
static long stats[16][3];
static void tally(int op, int rc)
{
    stats[op][rc > 0 ? 2 : rc == 0 ? 1 : 0]++;
}

static void one_step(wq_queue *q)
{
    wq_add_opts o;
    int r = (int)(rnd() % 1000);
    if (r < 250) {
        op_name = "add";
        int i = random_key();
        const wq_add_opts *po = random_opts(&o);
        int got = wq_queue_add(q, key_names[i], key_lens[i], po);
        int want = m_add(i, po);
        MCHECK(got == want, "add key %d: %d vs %d", i, got, want);
        tally(0, got);
    } else if (r < 370) {
        op_name = "add_after";
        int i = random_key();
        int64_t d = random_delay();
        const wq_add_opts *po = random_opts(&o);
        int got = wq_queue_add_after(q, key_names[i], key_lens[i], d, po);
        int want = m_add_after(i, d, po);
        MCHECK(got == want, "add_after key %d delay %" PRId64 ": %d vs %d", i, d, got, want);
        tally(1, got);
    } else if (r < 400) {
        op_name = "add_at";
        int i = random_key();
        int64_t at = fc.ns + rnd_range(-5, 30) * MS;
        const wq_add_opts *po = random_opts(&o);
        int got = wq_queue_add_at(q, key_names[i], key_lens[i], at, po);
        int want = m_add_at(i, at, po);
        MCHECK(got == want, "add_at key %d: %d vs %d", i, got, want);
        tally(2, got);
    } else if (r < 600) {
        op_name = "get";
        wq_item_info info;
        int want_key = -1;
        int got = wq_queue_get(q, &info);
        int want = m_get(&want_key);
        MCHECK(got == want, "get: %d vs %d", got, want);
        tally(3, got);
        if (got == 0) {
            int k = key_index(info.key, info.keylen);
            MCHECK(k == want_key, "get handed out key %d, model expects %d", k, want_key);
            const struct mkey *mk = &m.k[want_key];
            MCHECK(info.state == WQ_ST_PROCESSING ||
                       info.state == (WQ_ST_PROCESSING | WQ_ST_WAITING),
                   "state after get %u", info.state);
            MCHECK(info.priority == mk->prio, "priority handed out");
            MCHECK((info.payload != NULL) == mk->has_payload, "payload handed out");
            if (mk->has_payload)
                MCHECK(info.paylen == mk->paylen &&
                           memcmp(info.payload, mk->payload, mk->paylen) == 0,
                       "payload bytes handed out");
        }
    } else if (r < 750) {
        op_name = "done";
        int i = chance(700) ? random_processing_key() : random_key();
        int got = wq_queue_done(q, key_names[i], key_lens[i]);
        int want = m_done(i);
        MCHECK(got == want, "done key %d: %d vs %d", i, got, want);
        tally(4, got);
    } else if (r < 790) {
        op_name = "cancel_after";
        int i = random_key();
        int got = wq_queue_cancel_after(q, key_names[i], key_lens[i]);
        int want = m_cancel(i);
        MCHECK(got == want, "cancel key %d: %d vs %d", i, got, want);
        tally(5, got);
    } else if (r < 940) {
        op_name = "step+fire_due";
        if (chance(800))
            fc.ns += rnd_range(0, 5) * MS;
        int got = wq_queue_fire_due(q);
        int want = m_fire();
        MCHECK(got == want, "fire_due: %d vs %d", got, want);
        tally(6, got);
    } else if (r < 980) {
        /* AddRateLimited: When is called first and always, even after shutdown. */
        op_name = "add_rate_limited";
        int i = random_key();
        int64_t delay;
        MCHECK(wq_limiter_when(lim, key_names[i], key_lens[i], &delay) == 0, "when");
        int64_t want_delay = m_when(i);
        MCHECK(delay == want_delay, "when key %d: %" PRId64 " vs %" PRId64, i, delay, want_delay);
        const wq_add_opts *po = random_opts(&o);
        int got = wq_queue_add_after(q, key_names[i], key_lens[i], delay, po);
        int want = m_add_after(i, delay, po);
        MCHECK(got == want, "add_rate_limited key %d: %d vs %d", i, got, want);
        tally(8, got);
    } else if (r < 998) {
        op_name = "forget";
        int i = random_key();
        wq_limiter_forget(lim, key_names[i], key_lens[i]);
        lim_count[i] = 0;
        tally(9, 0);
    } else if (chance(300)) { /* shutdown about once every 3,000 steps */
        op_name = "shutdown";
        int drain = (int)(rnd() & 1);
        if (drain)
            wq_queue_shutdown_drain(q);
        else
            wq_queue_shutdown(q);
        m_shutdown(drain);
        tally(7, drain);
    } else {
        op_name = "noop";
    }
    compare(q);
}

static void run(uint64_t s, long ops)
{
    seed = s;
    rng_state = s * 0x9E3779B97F4A7C15ULL + 1;
    make_keys();
    live = 0;
    wq_set_allocator(counting_realloc, NULL);
    fc.ns = 1000 * 1000 * MS;
    memset(lim_count, 0, sizeof lim_count);
    lim = wq_limiter_exponential(LIM_BASE, LIM_MAX);
    MCHECK(lim != NULL, "limiter");
    wq_queue *q = NULL;
    long after_shutdown = 0;
    for (step_no = 0; step_no < ops; step_no++) {
        if (!q) {
            memset(&m, 0, sizeof m);
            ngot = nwant = 0;
            q = wq_queue_new(&clk);
            MCHECK(q != NULL, "wq_queue_new");
            wq_queue_set_observer(q, observer, NULL);
            after_shutdown = 0;
        }
        one_step(q);
        /* A shut-down queue keeps draining for a while, then a new one starts. */
        if (m.shutdown && ++after_shutdown > 200) {
            wq_queue_free(q);
            q = NULL;
        }
    }
    wq_queue_free(q);
    wq_limiter_free(lim);
    MCHECK(live == 0, "%ld blocks leaked", live);
    wq_set_allocator(NULL, NULL);
    if (getenv("WQ_MODEL_STATS")) {
        static const char *const names[] = {"add",      "add_after", "add_at",   "get",
                                            "done",     "cancel",    "fire_due", "shutdown",
                                            "rate_lim", "forget"};
        for (int i = 0; i < 10; i++)
            fprintf(stderr, "seed %" PRIu64 " %-9s error %6ld  zero %6ld  positive %6ld\n", s,
                    names[i], stats[i][0], stats[i][1], stats[i][2]);
    }
}

static long env_long(const char *name, long dflt)
{
    const char *v = getenv(name);
    return v && *v ? strtol(v, NULL, 0) : dflt;
}

#define OPS_PER_SEED 30000

Test(model, random_operations_match_the_model_seed_1)
{
    run(1, OPS_PER_SEED);
}

Test(model, random_operations_match_the_model_seed_2)
{
    run(2, OPS_PER_SEED);
}

Test(model, random_operations_match_the_model_seed_3)
{
    run(3, OPS_PER_SEED);
}

Test(model, random_operations_match_the_model_seed_20240601)
{
    run(20240601, OPS_PER_SEED);
}

Test(model, random_operations_match_the_model_seed_987654321)
{
    run(987654321, OPS_PER_SEED);
}

/* WQ_MODEL_SEED=n [WQ_MODEL_OPS=n] reproduces or explores one seed. */
Test(model, random_operations_match_the_model_for_the_seed_from_the_environment)
{
    long s = env_long("WQ_MODEL_SEED", 0);
    if (s == 0)
        cr_skip_test("set WQ_MODEL_SEED to run");
    run((uint64_t)s, env_long("WQ_MODEL_OPS", 100000));
}
