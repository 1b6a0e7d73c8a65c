/*
 * Size-class block allocator (see slab.h). A free block's first 8 bytes
 * hold the next free block of its class; every class is a multiple of 8
 * bytes, so a block is always large enough for that link.
 */
#include "engine/slab.h"

#include <string.h>

#define PAGE_SIZE (64 * 1024)
#define PAGE_HEADER 16 /* link to the next page, kept 16-byte aligned */

void wq_slab_init(wq_slab *s)
{
    memset(s, 0, sizeof *s);
}

void wq_slab_destroy(wq_slab *s)
{
    void *p = s->pages;
    while (p) {
        void *next;
        memcpy(&next, p, sizeof next);
        wq_free(p);
        p = next;
    }
    wq_slab_init(s);
}

static size_t class_size(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

void *wq_slab_alloc(wq_slab *s, size_t n)
{
    if (n > WQ_SLAB_MAX)
        return wq_malloc(n);
    size_t sz = class_size(n ? n : 1);
    void **head = &s->free[sz / 8];
    if (*head) {
        void *b = *head;
        memcpy(head, b, sizeof *head);
        return b;
    }
    if (s->left < sz) {
        char *page = wq_malloc(PAGE_SIZE);
        if (!page)
            return NULL;
        /* The tail of the old page is too small for this class; hand it to
         * the largest class it fits so it is not wasted. */
        if (s->left >= 8) {
            size_t c = s->left & ~(size_t)7;
            memcpy(s->bump, &s->free[c / 8], sizeof(void *));
            s->free[c / 8] = s->bump;
        }
        memcpy(page, &s->pages, sizeof(void *));
        s->pages = page;
        s->page_bytes += PAGE_SIZE;
        s->bump = page + PAGE_HEADER;
        s->left = PAGE_SIZE - PAGE_HEADER;
    }
    void *b = s->bump;
    s->bump += sz;
    s->left -= sz;
    return b;
}

void wq_slab_free(wq_slab *s, void *p, size_t n)
{
    if (!p)
        return;
    if (n > WQ_SLAB_MAX) {
        wq_free(p);
        return;
    }
    size_t sz = class_size(n ? n : 1);
    memcpy(p, &s->free[sz / 8], sizeof(void *));
    s->free[sz / 8] = p;
}
