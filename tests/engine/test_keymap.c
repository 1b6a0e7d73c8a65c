/*
 * The byte-string hash map: put/get/del, the empty key, keys with NUL
 * bytes, growth, backward-shift deletion (every remaining key stays
 * findable after many random deletes) and iteration.
 */
#include <criterion/criterion.h>

#include "engine/keymap.h"
#include "support/counting_alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static wq_keymap *m;

static void setup(void)
{
    live = 0;
    wq_set_allocator(counting_realloc, NULL);
    m = wq_keymap_new();
    cr_assert_not_null(m);
}

/* The end of every test (Criterion ignores failures in .fini). */
static void finish(void)
{
    wq_keymap_free(m);
    cr_assert_eq(live, 0, "%ld blocks leaked", live);
    wq_set_allocator(NULL, NULL);
}

TestSuite(keymap, .init = setup);

static uint64_t *put(const char *k, uint64_t v)
{
    int created;
    uint64_t *p = wq_keymap_put(m, k, strlen(k), &created);
    cr_assert_not_null(p);
    *p = v;
    return p;
}

static uint64_t *get(const char *k)
{
    return wq_keymap_get(m, k, strlen(k));
}

static int del(const char *k)
{
    return wq_keymap_del(m, k, strlen(k));
}

Test(keymap, new_map_is_empty)
{
    cr_assert_eq(wq_keymap_count(m), 0);
    cr_assert_null(get("x"));
    cr_assert_null(get(""));
    cr_assert_eq(del("x"), 0);
    size_t pos = 0;
    const char *k;
    size_t len;
    cr_assert_eq(wq_keymap_next(m, &pos, &k, &len, NULL), 0);
    finish();
}

Test(keymap, put_inserts_zero_then_finds_the_same_value)
{
    int created = -1;
    uint64_t *v = wq_keymap_put(m, "a", 1, &created);
    cr_assert_eq(created, 1);
    cr_assert_eq(*v, 0);
    *v = 42;
    v = wq_keymap_put(m, "a", 1, &created);
    cr_assert_eq(created, 0);
    cr_assert_eq(*v, 42);
    cr_assert_eq(*get("a"), 42);
    cr_assert_eq(wq_keymap_count(m), 1);
    cr_assert_not_null(wq_keymap_put(m, "b", 1, NULL), "created may be NULL");
    finish();
}

Test(keymap, del_removes_once)
{
    put("a", 1);
    put("b", 2);
    cr_assert_eq(del("a"), 1);
    cr_assert_eq(del("a"), 0);
    cr_assert_null(get("a"));
    cr_assert_eq(*get("b"), 2);
    cr_assert_eq(wq_keymap_count(m), 1);
    put("a", 3);
    cr_assert_eq(*get("a"), 3);
    finish();
}

Test(keymap, empty_key_is_a_real_key)
{
    cr_assert_null(get(""));
    put("", 7);
    cr_assert_not_null(get(""));
    cr_assert_eq(*get(""), 7);
    cr_assert_null(wq_keymap_get(m, "\0", 1), "the empty key is not a NUL byte");
    cr_assert_eq(wq_keymap_count(m), 1);
    size_t pos = 0, len = 99;
    const char *k;
    uint64_t v;
    cr_assert_eq(wq_keymap_next(m, &pos, &k, &len, &v), 1);
    cr_assert_eq(len, 0);
    cr_assert_eq(v, 7);
    cr_assert_eq(del(""), 1);
    cr_assert_null(get(""));
    cr_assert_eq(wq_keymap_count(m), 0);
    finish();
}

Test(keymap, keys_are_compared_as_bytes)
{
    *wq_keymap_put(m, "a\0b", 3, NULL) = 1;
    *wq_keymap_put(m, "a\0c", 3, NULL) = 2;
    *wq_keymap_put(m, "a", 1, NULL) = 3;
    *wq_keymap_put(m, "ab", 2, NULL) = 4;
    *wq_keymap_put(m, "abc", 3, NULL) = 5;
    cr_assert_eq(wq_keymap_count(m), 5);
    cr_assert_eq(*wq_keymap_get(m, "a\0b", 3), 1);
    cr_assert_eq(*wq_keymap_get(m, "a\0c", 3), 2);
    cr_assert_eq(*wq_keymap_get(m, "a\0b", 1), 3);
    cr_assert_eq(*get("ab"), 4);
    cr_assert_eq(*get("abc"), 5);
    cr_assert_null(wq_keymap_get(m, "a\0", 2));
    finish();
}

Test(keymap, key_is_copied)
{
    char buf[4] = "key";
    *wq_keymap_put(m, buf, 3, NULL) = 9;
    buf[0] = 'x';
    cr_assert_eq(*get("key"), 9);
    cr_assert_null(get("xey"));
    finish();
}

Test(keymap, prefetch_is_only_a_hint)
{
    wq_keymap_prefetch(m, "absent", 6);
    put("k", 5);
    wq_keymap_prefetch(m, "k", 1);
    wq_keymap_prefetch(m, "", 0);
    cr_assert_eq(wq_keymap_count(m), 1);
    cr_assert_eq(*get("k"), 5);
    cr_assert_null(get("absent"));
    finish();
}

Test(keymap, many_keys_survive_growth)
{
    char k[32];
    for (int i = 0; i < 20000; i++) {
        snprintf(k, sizeof k, "key:%d", i);
        put(k, (uint64_t)i * 3);
    }
    cr_assert_eq(wq_keymap_count(m), 20000);
    for (int i = 0; i < 20000; i++) {
        snprintf(k, sizeof k, "key:%d", i);
        uint64_t *v = get(k);
        cr_assert_not_null(v, "%s lost", k);
        cr_assert_eq(*v, (uint64_t)i * 3);
    }
    cr_assert_null(get("key:20000"));
    finish();
}

static uint64_t rng = 0x853c49e6748fea9bULL;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void shuffle(int *a, int n)
{
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(rnd() % (uint64_t)(i + 1));
        int t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* Every key in present[] must be found with its value, every other absent. */
static void check_all(const char (*keys)[32], const int *present, int n)
{
    size_t count = 0;
    for (int i = 0; i < n; i++) {
        uint64_t *v = get(keys[i]);
        if (present[i]) {
            cr_assert_not_null(v, "key %s lost", keys[i]);
            cr_assert_eq(*v, (uint64_t)i + 1);
            count++;
        } else {
            cr_assert_null(v, "deleted key %s found", keys[i]);
        }
    }
    cr_assert_eq(wq_keymap_count(m), count);
}

Test(keymap, backward_shift_deletion_keeps_remaining_keys_findable)
{
    enum { N = 3000 };
    static char keys[N][32];
    static int present[N], order[N];
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof keys[i], "k%d", i);
        put(keys[i], (uint64_t)i + 1);
        present[i] = 1;
        order[i] = i;
    }
    shuffle(order, N);
    for (int j = 0; j < N; j++) {
        int i = order[j];
        cr_assert_eq(del(keys[i]), 1);
        present[i] = 0;
        if (j % 97 == 0 || j > N - 50)
            check_all((const char(*)[32])keys, present, N);
    }
    cr_assert_eq(wq_keymap_count(m), 0);
    finish();
}

Test(keymap, full_small_tables_survive_every_deletion_order)
{
    /* Twelve keys fill a 16-slot table to its load limit: long probe runs
     * that wrap around the end. Delete them in many random orders. */
    enum { N = 12 };
    static char keys[N][32];
    int present[N], order[N];
    for (int round = 0; round < 400; round++) {
        wq_keymap_free(m);
        m = wq_keymap_new();
        for (int i = 0; i < N; i++) {
            snprintf(keys[i], sizeof keys[i], "r%d-%d", round, i);
            put(keys[i], (uint64_t)i + 1);
            present[i] = 1;
            order[i] = i;
        }
        shuffle(order, N);
        for (int j = 0; j < N; j++) {
            cr_assert_eq(del(keys[order[j]]), 1);
            present[order[j]] = 0;
            check_all((const char(*)[32])keys, present, N);
        }
    }
    finish();
}

Test(keymap, interleaved_puts_and_deletes_match_a_plain_array)
{
    enum { N = 500 };
    static char keys[N][32];
    static int present[N];
    for (int i = 0; i < N; i++)
        snprintf(keys[i], sizeof keys[i], "x%d", i);
    for (int step = 0; step < 30000; step++) {
        int i = (int)(rnd() % N);
        if (rnd() % 3) {
            int created;
            uint64_t *v = wq_keymap_put(m, keys[i], strlen(keys[i]), &created);
            cr_assert_eq(created, !present[i]);
            *v = (uint64_t)i + 1;
            present[i] = 1;
        } else {
            cr_assert_eq(del(keys[i]), present[i]);
            present[i] = 0;
        }
        if (step % 1000 == 0)
            check_all((const char(*)[32])keys, present, N);
    }
    check_all((const char(*)[32])keys, present, N);
    finish();
}

Test(keymap, iteration_visits_every_key_once)
{
    enum { N = 1000 };
    static int seen[N];
    char k[32];
    for (int i = 0; i < N; i++) {
        snprintf(k, sizeof k, "%d", i);
        put(k, (uint64_t)i);
    }
    for (int i = 0; i < N; i += 3) {
        snprintf(k, sizeof k, "%d", i);
        del(k);
    }
    size_t pos = 0, len;
    const char *key;
    uint64_t v;
    int n = 0;
    while (wq_keymap_next(m, &pos, &key, &len, &v)) {
        cr_assert_lt(len, sizeof k);
        memcpy(k, key, len);
        k[len] = 0;
        int i = atoi(k);
        cr_assert_eq(v, (uint64_t)i);
        cr_assert_neq(i % 3, 0, "deleted key %d visited", i);
        cr_assert_eq(seen[i], 0, "key %d visited twice", i);
        seen[i] = 1;
        n++;
    }
    cr_assert_eq(n, N - (N + 2) / 3);
    cr_assert_eq(wq_keymap_next(m, &pos, &key, &len, &v), 0, "stays at the end");
    finish();
}

Test(keymap, bounded_iteration_looks_at_no_more_slots_than_asked_and_misses_no_key)
{
    enum { N = 1000 };
    static int seen[N];
    char k[32];
    for (int i = 0; i < N; i++) {
        snprintf(k, sizeof k, "%d", i);
        put(k, (uint64_t)i);
    }
    for (int i = 0; i < N; i++) /* a sparse map: 10 keys in over a thousand slots */
        if (i % 100) {
            snprintf(k, sizeof k, "%d", i);
            del(k);
        }
    size_t pos = 0, len, last = 0;
    const char *key;
    uint64_t v;
    int n = 0, r, stops = 0;
    while ((r = wq_keymap_next_upto(m, &pos, 7, &key, &len, &v)) != 0) {
        cr_assert_leq(pos - last, 7, "looked at %zu slots", pos - last);
        cr_assert_gt(pos, last);
        last = pos;
        if (r < 0) {
            stops++;
            continue;
        }
        cr_assert_eq(r, 1);
        cr_assert_eq(v % 100, 0);
        cr_assert_eq(seen[v], 0);
        seen[v] = 1;
        n++;
    }
    cr_assert_eq(n, 10);
    cr_assert_gt(stops, 100);
    cr_assert_eq(wq_keymap_next_upto(m, &pos, 7, &key, &len, &v), 0, "stays at the end");
    cr_assert_eq(wq_keymap_next_upto(m, &pos, 0, &key, &len, &v), 0);
    pos = 0;
    cr_assert_eq(wq_keymap_next_upto(m, &pos, 0, &key, &len, &v), -1, "no slot looked at");
    cr_assert_eq(pos, 0);
    finish();
}

Test(keymap, clear_removes_every_key_and_the_map_stays_usable)
{
    char k[32];
    for (int i = 0; i < 100; i++) {
        snprintf(k, sizeof k, "%d", i);
        put(k, 1);
    }
    wq_keymap_clear(m);
    cr_assert_eq(wq_keymap_count(m), 0);
    cr_assert_null(get("5"));
    size_t pos = 0, len;
    const char *key;
    cr_assert_eq(wq_keymap_next(m, &pos, &key, &len, NULL), 0);
    put("5", 2);
    cr_assert_eq(*get("5"), 2);
    wq_keymap_free(NULL);
    finish();
}
