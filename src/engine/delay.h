/*
 * The delaying section of a queue: a binary min-heap of (ready time,
 * sequence, id) with a position index per id, so a pending entry can be
 * found, moved earlier or cancelled in O(log n). Equal ready times pop in
 * the order they were scheduled (the sequence number breaks ties).
 */
#ifndef WQ_DELAY_H
#define WQ_DELAY_H

#include "engine/common.h"

typedef struct wq_delay_entry {
    int64_t when; /* absolute ns */
    uint64_t seq;
    uint32_t id;
} wq_delay_entry;

typedef struct wq_delay {
    wq_delay_entry *heap;
    uint32_t len, cap;
    uint32_t *pos; /* pos[id] = heap index + 1, 0 when not scheduled */
    uint32_t pos_cap;
    uint64_t seq;
} wq_delay;

/* An empty heap (no allocation until the first entry). */
void wq_delay_init(wq_delay *d);
/* Frees the heap's memory. */
void wq_delay_destroy(wq_delay *d);

/*
 * Schedules id at `when`, keeping the earlier time if id is already pending.
 * Returns 1 if the entry was added or moved earlier, 0 if the existing
 * (earlier or equal) one was kept, WQ_ENOMEM with nothing changed.
 */
int wq_delay_schedule(wq_delay *d, uint32_t id, int64_t when);
/* Makes room so the next schedule of a new id up to max_id cannot fail. 0 or WQ_ENOMEM. */
int wq_delay_reserve(wq_delay *d, uint32_t max_id);
/* Makes room for ids below nids and nentries entries at once: later sets cannot fail. */
int wq_delay_room(wq_delay *d, uint32_t nids, uint32_t nentries);
/*
 * Gives id exactly the key (when, seq), adding it or moving it either way
 * (a heap ordered by something other than time: the caller chooses both
 * parts). Room must have been made for it (wq_delay_room).
 */
void wq_delay_set(wq_delay *d, uint32_t id, int64_t when, uint64_t seq);
/* The id of the earliest entry; the heap must not be empty. */
static inline uint32_t wq_delay_top(const wq_delay *d)
{
    return d->heap[0].id;
}
/* Removes id's pending entry; returns 1 if there was one, else 0. */
int wq_delay_cancel(wq_delay *d, uint32_t id);
/* Ready time of id's pending entry in *when; returns 1 if pending, else 0. */
int wq_delay_when(const wq_delay *d, uint32_t id, int64_t *when);
/* Earliest ready time, or WQ_NEVER when empty. */
int64_t wq_delay_next(const wq_delay *d);
/* Pops the earliest entry if its time is <= now into *out; returns 1, else 0. */
int wq_delay_pop_due(wq_delay *d, int64_t now, wq_delay_entry *out);
/* Number of pending entries. */
static inline uint32_t wq_delay_len(const wq_delay *d)
{
    return d->len;
}
/* Checks the heap property and the position index; returns 0 or -1. */
int wq_delay_check(const wq_delay *d);

#endif
