/*
 * The small-block allocator: freed blocks are reused by their size class,
 * blocks never overlap, sizes above WQ_SLAB_MAX go to the general
 * allocator, and destroy returns every page (counted through the
 * allocator hook).
 */
#include <criterion/criterion.h>

#include "engine/slab.h"
#include "support/counting_alloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static wq_slab s;

static void setup(void)
{
    live = 0;
    wq_set_allocator(counting_realloc, NULL);
    wq_slab_init(&s);
}

/* The end of every test (Criterion ignores failures in .fini). */
static void finish(void)
{
    wq_slab_destroy(&s);
    cr_assert_eq(live, 0, "destroy left %ld blocks", live);
    cr_assert_eq(s.page_bytes, 0);
    wq_set_allocator(NULL, NULL);
}

TestSuite(slab, .init = setup);

static void fill(void *p, size_t n, unsigned tag)
{
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(tag * 31 + i);
}

static int intact(const void *p, size_t n, unsigned tag)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != (unsigned char)(tag * 31 + i))
            return 0;
    return 1;
}

Test(slab, a_freed_block_is_reused_for_the_same_size_class)
{
    void *a = wq_slab_alloc(&s, 16);
    void *b = wq_slab_alloc(&s, 16);
    cr_assert_neq(a, b);
    wq_slab_free(&s, a, 16);
    cr_assert_eq(wq_slab_alloc(&s, 16), a);
    wq_slab_free(&s, b, 16);
    cr_assert_eq(wq_slab_alloc(&s, 9), b, "9 bytes share the 16-byte class");
    void *c = wq_slab_alloc(&s, 24);
    wq_slab_free(&s, c, 24);
    cr_assert_neq(wq_slab_alloc(&s, 16), c, "another class does not take it");
    cr_assert_eq(wq_slab_alloc(&s, 17), c);
    finish();
}

Test(slab, zero_bytes_get_a_distinct_block)
{
    void *a = wq_slab_alloc(&s, 0);
    void *b = wq_slab_alloc(&s, 0);
    cr_assert_not_null(a);
    cr_assert_not_null(b);
    cr_assert_neq(a, b);
    wq_slab_free(&s, a, 0);
    wq_slab_free(&s, b, 0);
    wq_slab_free(&s, NULL, 10);
    finish();
}

Test(slab, blocks_of_every_size_up_to_the_limit_do_not_overlap)
{
    static void *p[WQ_SLAB_MAX + 1];
    for (size_t n = 1; n <= WQ_SLAB_MAX; n++) {
        p[n] = wq_slab_alloc(&s, n);
        cr_assert_not_null(p[n]);
        cr_assert_eq((uintptr_t)p[n] % 8, 0, "block of %zu bytes is 8-byte aligned", n);
        fill(p[n], n, (unsigned)n);
    }
    cr_assert_eq(live, 1, "all from one page");
    for (size_t n = 1; n <= WQ_SLAB_MAX; n++)
        cr_assert(intact(p[n], n, (unsigned)n), "block of %zu bytes overwritten", n);
    for (size_t n = 1; n <= WQ_SLAB_MAX; n += 2)
        wq_slab_free(&s, p[n], n);
    for (size_t n = 1; n <= WQ_SLAB_MAX; n += 2) {
        p[n] = wq_slab_alloc(&s, n);
        fill(p[n], n, (unsigned)n + 1000);
    }
    for (size_t n = 1; n <= WQ_SLAB_MAX; n++)
        cr_assert(intact(p[n], n, (unsigned)n + (n % 2 ? 1000 : 0)), "block %zu", n);
    finish();
}

Test(slab, blocks_above_the_limit_come_from_the_general_allocator)
{
    void *a = wq_slab_alloc(&s, WQ_SLAB_MAX + 1);
    void *b = wq_slab_alloc(&s, 100000);
    cr_assert_not_null(a);
    cr_assert_not_null(b);
    cr_assert_eq(live, 2);
    cr_assert_eq(s.page_bytes, 0, "no page was taken");
    fill(a, WQ_SLAB_MAX + 1, 1);
    fill(b, 100000, 2);
    cr_assert(intact(a, WQ_SLAB_MAX + 1, 1));
    cr_assert(intact(b, 100000, 2));
    wq_slab_free(&s, a, WQ_SLAB_MAX + 1);
    wq_slab_free(&s, b, 100000);
    cr_assert_eq(live, 0);
    finish();
}

Test(slab, the_largest_slab_size_uses_a_page)
{
    void *a = wq_slab_alloc(&s, WQ_SLAB_MAX);
    cr_assert_gt(s.page_bytes, 0);
    fill(a, WQ_SLAB_MAX, 3);
    cr_assert(intact(a, WQ_SLAB_MAX, 3));
    wq_slab_free(&s, a, WQ_SLAB_MAX);
    finish();
}

Test(slab, many_blocks_span_pages_without_overlap)
{
    enum { N = 20000 };
    static void *p[N];
    static size_t len[N];
    for (unsigned i = 0; i < N; i++) {
        len[i] = (size_t)(i * 7919u % 300u); /* sizes 0..299: some above the limit */
        p[i] = wq_slab_alloc(&s, len[i]);
        cr_assert_not_null(p[i]);
        fill(p[i], len[i], i);
    }
    cr_assert_gt(s.page_bytes, 64 * 1024, "more than one page");
    /* Free half, allocate again with other sizes, then check every block. */
    for (unsigned i = 0; i < N; i += 2)
        wq_slab_free(&s, p[i], len[i]);
    for (unsigned i = 0; i < N; i += 2) {
        len[i] = (size_t)(i * 104729u % 260u);
        p[i] = wq_slab_alloc(&s, len[i]);
        fill(p[i], len[i], i + 7);
    }
    for (unsigned i = 0; i < N; i++)
        cr_assert(intact(p[i], len[i], i % 2 ? i : i + 7), "block %u", i);
    for (unsigned i = 0; i < N; i++)
        wq_slab_free(&s, p[i], len[i]);
    finish();
}

Test(slab, the_tail_of_a_full_page_is_not_handed_out_twice)
{
    /* 256-byte blocks until a second page is needed, then small blocks that
     * may come from the first page's tail: none may overlap. */
    enum { N = 400 };
    static void *big[N], *small[N];
    for (unsigned i = 0; i < N; i++) {
        big[i] = wq_slab_alloc(&s, 256);
        fill(big[i], 256, i);
    }
    for (unsigned i = 0; i < N; i++) {
        small[i] = wq_slab_alloc(&s, 8 * (i % 30 + 1));
        fill(small[i], 8 * (i % 30 + 1), i + 5000);
    }
    for (unsigned i = 0; i < N; i++) {
        cr_assert(intact(big[i], 256, i));
        cr_assert(intact(small[i], 8 * (i % 30 + 1), i + 5000));
    }
    finish();
}

Test(slab, destroy_returns_every_page)
{
    for (int i = 0; i < 5000; i++)
        wq_slab_alloc(&s, 100);
    cr_assert_gt(live, 1);
    wq_slab_destroy(&s);
    cr_assert_eq(live, 0);
    cr_assert_null(s.pages);
    cr_assert_not_null(wq_slab_alloc(&s, 8), "usable again after destroy");
    finish();
}
