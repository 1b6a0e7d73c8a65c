/*
 * Index-tracked binary min-heap for delayed adds (see delay.h). Ordering is
 * (when, seq): the sequence number is taken at schedule time, so entries
 * due at the same instant fire in the order they were scheduled.
 */
#include "engine/delay.h"

#include <string.h>

void wq_delay_init(wq_delay *d)
{
    memset(d, 0, sizeof *d);
}

void wq_delay_destroy(wq_delay *d)
{
    wq_free(d->heap);
    wq_free(d->pos);
    wq_delay_init(d);
}

static int less(const wq_delay_entry *a, const wq_delay_entry *b)
{
    return a->when < b->when || (a->when == b->when && a->seq < b->seq);
}

static void place(wq_delay *d, uint32_t i, wq_delay_entry e)
{
    d->heap[i] = e;
    d->pos[e.id] = i + 1;
}

static void sift_up(wq_delay *d, uint32_t i)
{
    wq_delay_entry e = d->heap[i];
    while (i > 0) {
        uint32_t parent = (i - 1) / 2;
        if (!less(&e, &d->heap[parent]))
            break;
        place(d, i, d->heap[parent]);
        i = parent;
    }
    place(d, i, e);
}

static void sift_down(wq_delay *d, uint32_t i)
{
    wq_delay_entry e = d->heap[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= d->len)
            break;
        if (c + 1 < d->len && less(&d->heap[c + 1], &d->heap[c]))
            c++;
        if (!less(&d->heap[c], &e))
            break;
        place(d, i, d->heap[c]);
        i = c;
    }
    place(d, i, e);
}

int wq_delay_room(wq_delay *d, uint32_t nids, uint32_t nentries)
{
    if (nids > d->pos_cap) {
        uint32_t ncap = d->pos_cap ? d->pos_cap : 64;
        while (ncap < nids)
            ncap = ncap > UINT32_MAX / 2 ? UINT32_MAX : ncap * 2;
        uint32_t *np = wq_realloc(d->pos, (size_t)ncap * sizeof *np);
        if (!np)
            return WQ_ENOMEM;
        memset(np + d->pos_cap, 0, (size_t)(ncap - d->pos_cap) * sizeof *np);
        d->pos = np;
        d->pos_cap = ncap;
    }
    if (nentries > d->cap) {
        uint32_t ncap = d->cap ? d->cap : 64;
        while (ncap < nentries)
            ncap = ncap > UINT32_MAX / 2 ? UINT32_MAX : ncap * 2;
        wq_delay_entry *nh = wq_realloc(d->heap, (size_t)ncap * sizeof *nh);
        if (!nh)
            return WQ_ENOMEM;
        d->heap = nh;
        d->cap = ncap;
    }
    return 0;
}

int wq_delay_reserve(wq_delay *d, uint32_t max_id)
{
    if (max_id < d->pos_cap && d->len < d->cap)
        return 0; /* the common case, kept as cheap as before wq_delay_room */
    if (max_id == UINT32_MAX)
        return WQ_ENOMEM;
    return wq_delay_room(d, max_id + 1, d->len + 1);
}

void wq_delay_set(wq_delay *d, uint32_t id, int64_t when, uint64_t seq)
{
    wq_delay_entry e = {when, seq, id};
    if (d->pos[id]) {
        uint32_t i = d->pos[id] - 1;
        int up = less(&e, &d->heap[i]);
        place(d, i, e);
        if (up)
            sift_up(d, i);
        else
            sift_down(d, i);
        return;
    }
    uint32_t i = d->len++;
    place(d, i, e);
    sift_up(d, i);
}

int wq_delay_schedule(wq_delay *d, uint32_t id, int64_t when)
{
    if (id < d->pos_cap && d->pos[id]) {
        uint32_t i = d->pos[id] - 1;
        if (when >= d->heap[i].when)
            return 0;
        d->heap[i].when = when;
        d->heap[i].seq = d->seq++;
        sift_up(d, i);
        return 1;
    }
    if (wq_delay_reserve(d, id) < 0)
        return WQ_ENOMEM;
    uint32_t i = d->len++;
    d->heap[i] = (wq_delay_entry){when, d->seq++, id};
    sift_up(d, i);
    return 1;
}

static void remove_at(wq_delay *d, uint32_t i)
{
    d->pos[d->heap[i].id] = 0;
    d->len--;
    if (i == d->len)
        return;
    wq_delay_entry last = d->heap[d->len];
    place(d, i, last);
    if (i > 0 && less(&last, &d->heap[(i - 1) / 2]))
        sift_up(d, i);
    else
        sift_down(d, i);
}

int wq_delay_cancel(wq_delay *d, uint32_t id)
{
    if (id >= d->pos_cap || !d->pos[id])
        return 0;
    remove_at(d, d->pos[id] - 1);
    return 1;
}

int wq_delay_when(const wq_delay *d, uint32_t id, int64_t *when)
{
    if (id >= d->pos_cap || !d->pos[id])
        return 0;
    *when = d->heap[d->pos[id] - 1].when;
    return 1;
}

int64_t wq_delay_next(const wq_delay *d)
{
    return d->len ? d->heap[0].when : WQ_NEVER;
}

int wq_delay_pop_due(wq_delay *d, int64_t now, wq_delay_entry *out)
{
    if (!d->len || d->heap[0].when > now)
        return 0;
    *out = d->heap[0];
    remove_at(d, 0);
    return 1;
}

int wq_delay_check(const wq_delay *d)
{
    for (uint32_t i = 0; i < d->len; i++) {
        const wq_delay_entry *e = &d->heap[i];
        if (i > 0 && less(e, &d->heap[(i - 1) / 2]))
            return -1;
        if (e->id >= d->pos_cap || d->pos[e->id] != i + 1)
            return -1;
    }
    uint32_t tracked = 0;
    for (uint32_t id = 0; id < d->pos_cap; id++)
        tracked += d->pos[id] != 0;
    return tracked == d->len ? 0 : -1;
}
