/*
 * Rate limiters with client-go's semantics (see ratelimit.h and
 * WORKQUEUE.md). One tagged struct covers every kind: the per-key kinds
 * (exponential, fast_slow) keep failure counts in a keymap, the bucket is a
 * golang.org/x/time/rate token bucket on the injected clock, and max_of /
 * with_max_wait combine other limiters.
 *
 * Failure atomicity: the only allocation a When can need is inserting a new
 * key into a per-key map. So When first "reserves" the key in every per-key
 * limiter of the tree (inserting it with count 0), and only then evaluates
 * the children, which can no longer fail. If a reservation fails part-way,
 * the entries inserted so far are removed again; this is safe because
 * outside of a call no stored count is ever 0 (When stores >= 1 and
 * set_requeues(0) deletes), so a 0 marks exactly the keys just reserved.
 * Deleting never allocates, hence the rollback itself cannot fail and an
 * ENOMEM leaves every count, and the bucket's tokens, as they were.
 */
#include "engine/ratelimit.h"

#include "engine/keymap.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct bucket {
    const wq_clock *clock;
    double qps;
    double tokens;
    int64_t burst;
    int64_t last; /* time of the last served request */
    int fresh;    /* no request served yet: the bucket is full */
};

struct wq_limiter {
    wq_limiter_kind kind;
    wq_keymap *counts; /* per-key failure counts; NULL for the other kinds */
    union {
        struct {
            int64_t base, max;
        } exp;
        struct {
            int64_t fast, slow, max_fast;
        } fs;
        struct bucket bucket;
        struct {
            wq_limiter **children;
            size_t n;
            int owns; /* free the children with the limiter (default()) */
        } max_of;
        struct { /* one child: with_max_wait, with_jitter */
            wq_limiter *child;
            int64_t max;
            double jitter;
            wq_rand_fn rand;
            void *rand_ud;
            int owns;
        } wait;
    } u;
};

/* 2^63 as a double: the first value an int64 cannot hold. */
#define TWO_63 9223372036854775808.0

/* Durations below zero make no sense as delays; they behave as 0. */
static int64_t nonneg(int64_t d)
{
    return d < 0 ? 0 : d;
}

static wq_limiter *alloc(wq_limiter_kind kind, int per_key)
{
    wq_limiter *l = wq_malloc(sizeof *l);
    if (!l)
        return NULL;
    memset(l, 0, sizeof *l);
    l->kind = kind;
    if (per_key) {
        l->counts = wq_keymap_new();
        if (!l->counts) {
            wq_free(l);
            return NULL;
        }
    }
    return l;
}

wq_limiter *wq_limiter_exponential(int64_t base_ns, int64_t max_ns)
{
    wq_limiter *l = alloc(WQ_LIMITER_EXPONENTIAL, 1);
    if (!l)
        return NULL;
    l->u.exp.base = nonneg(base_ns);
    l->u.exp.max = nonneg(max_ns);
    return l;
}

wq_limiter *wq_limiter_fast_slow(int64_t fast_ns, int64_t slow_ns, int64_t max_fast)
{
    wq_limiter *l = alloc(WQ_LIMITER_FAST_SLOW, 1);
    if (!l)
        return NULL;
    l->u.fs.fast = nonneg(fast_ns);
    l->u.fs.slow = nonneg(slow_ns);
    l->u.fs.max_fast = max_fast;
    return l;
}

wq_limiter *wq_limiter_bucket(const wq_clock *clock, double qps, int64_t burst)
{
    wq_limiter *l = alloc(WQ_LIMITER_BUCKET, 0);
    if (!l)
        return NULL;
    /* A negative or NaN rate refills nothing: the same as qps 0. */
    l->u.bucket.clock = clock;
    l->u.bucket.qps = qps > 0 ? qps : 0;
    l->u.bucket.burst = burst;
    l->u.bucket.tokens = (double)burst;
    l->u.bucket.fresh = 1;
    return l;
}

static wq_limiter *max_of(wq_limiter *const *children, size_t n, int owns)
{
    wq_limiter *l = alloc(WQ_LIMITER_MAX_OF, 0);
    if (!l)
        return NULL;
    if (n > 0) {
        l->u.max_of.children = wq_malloc(n * sizeof *children);
        if (!l->u.max_of.children) {
            wq_free(l);
            return NULL;
        }
        memcpy(l->u.max_of.children, children, n * sizeof *children);
    }
    l->u.max_of.n = n;
    l->u.max_of.owns = owns;
    return l;
}

wq_limiter *wq_limiter_max_of(wq_limiter *const *children, size_t n)
{
    return max_of(children, n, 0);
}

wq_limiter *wq_limiter_with_max_wait(wq_limiter *child, int64_t max_ns)
{
    wq_limiter *l = alloc(WQ_LIMITER_MAX_WAIT, 0);
    if (!l)
        return NULL;
    l->u.wait.child = child;
    l->u.wait.max = nonneg(max_ns);
    return l;
}

wq_limiter *wq_limiter_with_jitter(wq_limiter *child, double fraction, wq_rand_fn rand,
                                   void *rand_ud, int owns)
{
    wq_limiter *l = alloc(WQ_LIMITER_JITTER, 0);
    if (!l)
        return NULL;
    l->u.wait.child = child;
    l->u.wait.jitter = fraction > 1 ? 1 : fraction > 0 ? fraction : 0;
    l->u.wait.rand = rand;
    l->u.wait.rand_ud = rand_ud;
    l->u.wait.owns = owns;
    return l;
}

/* d moved by (2u - 1) * fraction * d, u uniform in [0, 1): within +-fraction. */
static int64_t spread(const wq_limiter *l, int64_t d)
{
    if (d == WQ_NEVER || d <= 0 || l->u.wait.jitter <= 0)
        return d;
    double u = l->u.wait.rand ? l->u.wait.rand(l->u.wait.rand_ud) : (double)rand() / RAND_MAX;
    double v = (double)d * (1.0 + l->u.wait.jitter * (2.0 * u - 1.0));
    if (v >= TWO_63)
        return WQ_NEVER - 1;
    return v <= 0 ? 0 : (int64_t)v;
}

wq_limiter *wq_limiter_default(const wq_clock *clock)
{
    wq_limiter *c[2];
    c[0] = wq_limiter_exponential(5 * 1000 * 1000, 1000 * WQ_NS_PER_S);
    c[1] = wq_limiter_bucket(clock, 10, 100);
    wq_limiter *l = c[0] && c[1] ? max_of(c, 2, 1) : NULL;
    if (!l) {
        wq_limiter_free(c[0]);
        wq_limiter_free(c[1]);
    }
    return l;
}

void wq_limiter_free(wq_limiter *l)
{
    if (!l)
        return;
    if (l->kind == WQ_LIMITER_MAX_OF) {
        if (l->u.max_of.owns)
            for (size_t i = 0; i < l->u.max_of.n; i++)
                wq_limiter_free(l->u.max_of.children[i]);
        wq_free(l->u.max_of.children);
    }
    if (l->kind == WQ_LIMITER_JITTER && l->u.wait.owns)
        wq_limiter_free(l->u.wait.child);
    wq_keymap_free(l->counts);
    wq_free(l);
}

wq_limiter_kind wq_limiter_kind_of(const wq_limiter *l)
{
    return l->kind;
}

/* Removes the entries with count 0: exactly those a failed reserve() made. */
static void unreserve(wq_limiter *l, const char *key, size_t len)
{
    switch (l->kind) {
    case WQ_LIMITER_MAX_OF:
        for (size_t i = 0; i < l->u.max_of.n; i++)
            unreserve(l->u.max_of.children[i], key, len);
        break;
    case WQ_LIMITER_MAX_WAIT:
    case WQ_LIMITER_JITTER: unreserve(l->u.wait.child, key, len); break;
    default:
        if (l->counts) {
            uint64_t *c = wq_keymap_get(l->counts, key, len);
            if (c && *c == 0)
                wq_keymap_del(l->counts, key, len);
        }
        break;
    }
}

/* Makes sure every per-key limiter in l has an entry for key (new ones 0). */
static int reserve_all(wq_limiter *l, const char *key, size_t len)
{
    switch (l->kind) {
    case WQ_LIMITER_MAX_OF:
        for (size_t i = 0; i < l->u.max_of.n; i++)
            if (reserve_all(l->u.max_of.children[i], key, len) < 0)
                return WQ_ENOMEM;
        return 0;
    case WQ_LIMITER_MAX_WAIT:
    case WQ_LIMITER_JITTER: return reserve_all(l->u.wait.child, key, len);
    default:
        if (l->counts && !wq_keymap_put(l->counts, key, len, NULL))
            return WQ_ENOMEM;
        return 0;
    }
}

static int reserve(wq_limiter *l, const char *key, size_t len)
{
    if (reserve_all(l, key, len) == 0)
        return 0;
    unreserve(l, key, len);
    return WQ_ENOMEM;
}

/* The reserved count of key; it must exist. */
static uint64_t *count_of(wq_limiter *l, const char *key, size_t len)
{
    uint64_t *c = wq_keymap_get(l->counts, key, len);
    assert(c);
    return c;
}

static void bump(uint64_t *c)
{
    if (*c < (uint64_t)INT64_MAX)
        (*c)++;
}

static int64_t exponential(wq_limiter *l, const char *key, size_t len)
{
    uint64_t *c = count_of(l, key, len);
    /* Past 2^2100 every nonzero base is inf anyway; the clamp keeps ldexp's int. */
    int e = *c > 2100 ? 2100 : (int)*c;
    double backoff = ldexp((double)l->u.exp.base, e);
    bump(c);
    /* Upstream converts 2^63 to a negative duration; we give max instead. */
    if (!isfinite(backoff) || backoff >= TWO_63)
        return l->u.exp.max;
    int64_t d = (int64_t)backoff;
    return d > l->u.exp.max ? l->u.exp.max : d;
}

static int64_t fast_slow(wq_limiter *l, const char *key, size_t len)
{
    uint64_t *c = count_of(l, key, len);
    bump(c);
    return (int64_t)*c <= l->u.fs.max_fast ? l->u.fs.fast : l->u.fs.slow;
}

/* Go's Duration.Seconds(): whole seconds and the rest apart, for precision. */
static double seconds(uint64_t ns)
{
    return (double)(ns / WQ_NS_PER_S) + (double)(ns % WQ_NS_PER_S) / 1e9;
}

/* x/time/rate's Reserve(1).Delay() on the injected clock. */
static int64_t take(wq_limiter *l)
{
    struct bucket *b = &l->u.bucket;
    if (isinf(b->qps))
        return 0;
    if (b->qps == 0) {
        /* Upstream spends the burst itself when nothing refills it. */
        if (b->burst < 1)
            return WQ_NEVER;
        b->burst--;
        return 0;
    }
    if (b->burst < 1)
        return WQ_NEVER; /* one token can never fit: refused, state kept */
    int64_t now = wq_clock_now(b->clock);
    double tokens = (double)b->burst;
    if (!b->fresh) {
        /* A clock read earlier than the last one adds nothing (no negative refill). */
        /* Unsigned: the gap between two int64 readings may not fit an int64. */
        uint64_t elapsed = now > b->last ? (uint64_t)now - (uint64_t)b->last : 0;
        tokens = b->tokens + seconds(elapsed) * b->qps;
        if (tokens > (double)b->burst)
            tokens = (double)b->burst;
    }
    tokens -= 1;
    int64_t wait = 0;
    if (tokens < 0) {
        double ns = (-tokens / b->qps) * 1e9;
        wait = ns >= TWO_63 ? WQ_NEVER : (int64_t)ns;
    }
    b->fresh = 0;
    b->last = now;
    b->tokens = tokens;
    return wait;
}

/* When for a tree whose per-key entries are already reserved: cannot fail. */
static int64_t eval(wq_limiter *l, const char *key, size_t len)
{
    switch (l->kind) {
    case WQ_LIMITER_EXPONENTIAL: return exponential(l, key, len);
    case WQ_LIMITER_FAST_SLOW: return fast_slow(l, key, len);
    case WQ_LIMITER_BUCKET: return take(l);
    case WQ_LIMITER_MAX_OF: {
        int64_t max = 0;
        for (size_t i = 0; i < l->u.max_of.n; i++) {
            int64_t d = eval(l->u.max_of.children[i], key, len);
            if (d > max)
                max = d;
        }
        return max;
    }
    case WQ_LIMITER_MAX_WAIT: {
        int64_t d = eval(l->u.wait.child, key, len);
        return d < l->u.wait.max ? d : l->u.wait.max;
    }
    case WQ_LIMITER_JITTER: return spread(l, eval(l->u.wait.child, key, len));
    }
    return 0;
}

int wq_limiter_when(wq_limiter *l, const char *key, size_t len, int64_t *delay_ns)
{
    if (reserve(l, key, len) < 0)
        return WQ_ENOMEM;
    *delay_ns = eval(l, key, len);
    return 0;
}

void wq_limiter_forget(wq_limiter *l, const char *key, size_t len)
{
    switch (l->kind) {
    case WQ_LIMITER_MAX_OF:
        for (size_t i = 0; i < l->u.max_of.n; i++)
            wq_limiter_forget(l->u.max_of.children[i], key, len);
        break;
    case WQ_LIMITER_MAX_WAIT:
    case WQ_LIMITER_JITTER: wq_limiter_forget(l->u.wait.child, key, len); break;
    default:
        if (l->counts)
            wq_keymap_del(l->counts, key, len);
        break;
    }
}

int64_t wq_limiter_num_requeues(const wq_limiter *l, const char *key, size_t len)
{
    switch (l->kind) {
    case WQ_LIMITER_MAX_OF: {
        int64_t max = 0;
        for (size_t i = 0; i < l->u.max_of.n; i++) {
            int64_t n = wq_limiter_num_requeues(l->u.max_of.children[i], key, len);
            if (n > max)
                max = n;
        }
        return max;
    }
    case WQ_LIMITER_MAX_WAIT:
    case WQ_LIMITER_JITTER: return wq_limiter_num_requeues(l->u.wait.child, key, len);
    default:
        if (l->counts) {
            const uint64_t *c = wq_keymap_get(l->counts, key, len);
            return c ? (int64_t)*c : 0;
        }
        return 0;
    }
}

/* Stores count in every per-key limiter; the entries are reserved already. */
static void set_all(wq_limiter *l, const char *key, size_t len, int64_t count)
{
    switch (l->kind) {
    case WQ_LIMITER_MAX_OF:
        for (size_t i = 0; i < l->u.max_of.n; i++)
            set_all(l->u.max_of.children[i], key, len, count);
        break;
    case WQ_LIMITER_MAX_WAIT:
    case WQ_LIMITER_JITTER: set_all(l->u.wait.child, key, len, count); break;
    default:
        if (l->counts)
            *count_of(l, key, len) = (uint64_t)count;
        break;
    }
}

int wq_limiter_set_requeues(wq_limiter *l, const char *key, size_t len, int64_t count)
{
    /* A stored 0 would look like a pending reservation: no count is no key. */
    if (count <= 0) {
        wq_limiter_forget(l, key, len);
        return 0;
    }
    if (reserve(l, key, len) < 0)
        return WQ_ENOMEM;
    set_all(l, key, len, count);
    return 0;
}
