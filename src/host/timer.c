/*
 * Host timers: sleeps, wq.after/wq.every, handler and exec timeouts, the
 * shutdown grace period. They share one index-tracked heap (wq_delay) on
 * the host clock, so they work the same in real and virtual time; a single
 * libevent timer is armed for the earliest of them and of the queues'
 * delayed items. An id carries the slot and a generation, so stopping a
 * timer that already fired is harmless.
 */
#include "host/timer.h"

#include <stdlib.h>
#include <string.h>

#define NO_SLOT UINT32_MAX

void wq_timer_init(wq_host *h)
{
    wq_delay_init(&h->timers);
    wq_delay_init(&h->weak_timers);
    h->slots = NULL;
    h->nslots = 0;
    h->free_slot = NO_SLOT;
    h->armed = WQ_NEVER;
}

void wq_timer_destroy(wq_host *h)
{
    wq_delay_destroy(&h->timers);
    wq_delay_destroy(&h->weak_timers);
    free(h->slots);
    h->slots = NULL;
}

static uint64_t start(wq_host *h, int64_t when, wq_timer_fn fn, void *data, int weak)
{
    uint32_t slot = h->free_slot;
    if (slot == NO_SLOT) {
        if (h->nslots == UINT32_MAX - 1)
            return 0;
        if ((h->nslots & (h->nslots - 1)) == 0) { /* capacity is the next power of two */
            uint32_t ncap = h->nslots < 16 ? 16 : h->nslots * 2;
            wq_timer_slot *ns = realloc(h->slots, (size_t)ncap * sizeof *ns);
            if (!ns)
                return 0;
            h->slots = ns;
        }
        slot = h->nslots++;
        h->slots[slot].gen = 0;
    } else {
        h->free_slot = h->slots[slot].next_free;
    }
    if (wq_delay_schedule(weak ? &h->weak_timers : &h->timers, slot, when) < 0) {
        h->slots[slot].fn = NULL;
        h->slots[slot].next_free = h->free_slot;
        h->free_slot = slot;
        return 0;
    }
    wq_timer_slot *s = &h->slots[slot];
    s->fn = fn;
    s->data = data;
    s->weak = weak;
    s->gen++;
    return ((uint64_t)s->gen << 32) | (slot + 1);
}

uint64_t wq_timer_start(wq_host *h, int64_t when, wq_timer_fn fn, void *data)
{
    return start(h, when, fn, data, 0);
}

uint64_t wq_timer_start_weak(wq_host *h, int64_t when, wq_timer_fn fn, void *data)
{
    return start(h, when, fn, data, 1);
}

static void release(wq_host *h, uint32_t slot)
{
    h->slots[slot].fn = NULL;
    h->slots[slot].next_free = h->free_slot;
    h->free_slot = slot;
}

void wq_timer_stop(wq_host *h, uint64_t id)
{
    uint32_t slot = (uint32_t)id - 1;
    if (!id || slot >= h->nslots || !h->slots[slot].fn ||
        h->slots[slot].gen != (uint32_t)(id >> 32))
        return;
    wq_delay_cancel(h->slots[slot].weak ? &h->weak_timers : &h->timers, slot);
    release(h, slot);
}

/* The earliest pending time; with awaited, only of what keeps the process alive. */
static int64_t earliest(wq_host *h, int awaited)
{
    int64_t next = wq_delay_next(&h->timers);
    if (!awaited) {
        int64_t weak = wq_delay_next(&h->weak_timers);
        if (weak < next)
            next = weak;
    }
    for (int i = 0; i < h->nqueues; i++) {
        const wq_hqueue *hq = &h->queues[i];
        if (awaited && !hq->ops->awaited(hq->q))
            continue;
        int64_t t = hq->ops->next_ready(hq->q);
        if (t < next)
            next = t;
    }
    return next;
}

int64_t wq_timer_next(wq_host *h)
{
    return earliest(h, 0);
}

int64_t wq_timer_next_awaited(wq_host *h)
{
    return earliest(h, 1);
}

void wq_timer_run_due(wq_host *h)
{
    int64_t now = wq_host_now(h);
    wq_delay_entry e;
    while (!h->exiting &&
           (wq_delay_pop_due(&h->timers, now, &e) || wq_delay_pop_due(&h->weak_timers, now, &e))) {
        wq_timer_slot s = h->slots[e.id];
        uint64_t id = ((uint64_t)s.gen << 32) | (e.id + 1);
        release(h, e.id);
        s.fn(h, s.data, id);
    }
    for (int i = 0; i < h->nqueues && !h->exiting; i++) {
        const wq_hqueue *hq = &h->queues[i];
        if (hq->ops->next_ready(hq->q) <= now)
            hq->ops->fire_due(hq->q);
    }
}
