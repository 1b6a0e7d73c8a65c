/*
 * An allocator hook for the engine tests: every block goes through it, so a
 * leak fails a test even without ASan. Install it with
 * wq_set_allocator(counting_realloc, NULL) after zeroing `live`; at the end
 * of a test `live` must be 0 again.
 */
#ifndef WQ_TEST_COUNTING_ALLOC_H
#define WQ_TEST_COUNTING_ALLOC_H

#include <stdlib.h>

static long live; /* blocks allocated and not yet freed */

static void *counting_realloc(void *ud, void *ptr, size_t size)
{
    (void)ud;
    if (size == 0) {
        if (ptr)
            live--;
        free(ptr);
        return NULL;
    }
    void *p = realloc(ptr, size);
    if (p && !ptr)
        live++;
    return p;
}

#endif
