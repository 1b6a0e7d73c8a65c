/*
 * A small-block allocator for key and payload bytes: blocks up to
 * WQ_SLAB_MAX bytes come from 64 KiB pages in 8-byte size classes with
 * intrusive free lists, so storing a 16-byte key costs 16 bytes, not a
 * malloc chunk. Larger blocks go to wq_malloc. Pages are returned only when
 * the slab is destroyed.
 */
#ifndef WQ_SLAB_H
#define WQ_SLAB_H

#include "engine/common.h"

#define WQ_SLAB_MAX 256

typedef struct wq_slab {
    void *free[WQ_SLAB_MAX / 8 + 1]; /* free list per class (index = size / 8) */
    char *bump;                      /* next unused byte of the current page */
    size_t left;                     /* bytes left in the current page */
    void *pages;                     /* singly linked list of pages */
    size_t page_bytes;               /* total bytes of pages held */
} wq_slab;

/* An empty slab (no allocation until the first block). */
void wq_slab_init(wq_slab *s);
/* Frees every page; every block becomes invalid. */
void wq_slab_destroy(wq_slab *s);
/* A block of n bytes (n > 0), or NULL when out of memory. */
void *wq_slab_alloc(wq_slab *s, size_t n);
/* Returns a block of n bytes (the same n it was allocated with). NULL is fine. */
void wq_slab_free(wq_slab *s, void *p, size_t n);

#endif
