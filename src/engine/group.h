/*
 * Groups of a queue's keys and the limits on handing them out (SPEC 7.4):
 * the group table (names, limits, pacing, reference counts) and the three
 * heaps that place every group without scanning items: `ready` (groups
 * under their limits with queued items, ordered by their head item),
 * `wait` (groups whose next hand-out waits for a token, by that time) and
 * `idle` (groups with nothing pending, kept until their token bucket is
 * full again so that re-adding cannot reset a rate). A saturated group (at
 * its concurrency) is in no heap: only a done can free it.
 *
 * The item lists of a group (one FIFO per priority, the same wq_levels as
 * the queue's ungrouped ready store) are kept here but linked through the
 * queue's records, so queue.c edits them; it calls wq_groups_place after
 * each change to a group and hears whether the group became ready.
 */
#ifndef WQ_GROUP_H
#define WQ_GROUP_H

#include "engine/common.h"
#include "engine/delay.h"
#include "engine/keymap.h"

/* Group names longer than this are refused (WQ_E2BIG). */
#define WQ_GROUP_MAX 1024

/* A limit on hand-outs: 0 in a field means no limit of that kind. */
typedef struct wq_limit {
    uint32_t concurrency; /* handed out and not done, at most */
    double rate;          /* hand-outs per second, at most */
    double burst;         /* hand-outs at once within the rate (less than 1 counts as 1) */
} wq_limit;

/*
 * A rate kept as a generic cell rate algorithm: one timestamp instead of a
 * token count, so nothing needs refilling. A hand-out conforms at t when
 * t >= tat - tolerance; taking one moves tat one interval on.
 */
typedef struct wq_pace {
    int64_t interval;  /* ns per hand-out at the rate; 0: no rate */
    int64_t tolerance; /* (burst - 1) intervals */
    int64_t tat;       /* theoretical arrival time of the next hand-out */
} wq_pace;

/* Sets the rate (0: none), keeping how far ahead the cell already is. */
void wq_pace_set(wq_pace *p, double rate, double burst);

/* The earliest time a hand-out conforms (INT64_MIN without a rate). */
static inline int64_t wq_pace_next(const wq_pace *p)
{
    return p->interval ? p->tat - p->tolerance : INT64_MIN;
}

/* Accounts for one hand-out at now. */
static inline void wq_pace_take(wq_pace *p, int64_t now)
{
    if (p->interval)
        p->tat = (p->tat > now ? p->tat : now) + p->interval;
}

/* One priority level of a ready store: a FIFO of record ids linked through the records. */
typedef struct wq_level {
    int32_t prio;
    uint32_t head, tail;
    uint32_t count;
} wq_level;

/* A ready store: levels sorted highest priority first, none empty. */
typedef struct wq_levels {
    wq_level *v;
    uint32_t n, cap;
} wq_levels;

enum { WQ_G_NONE, WQ_G_READY, WQ_G_WAIT, WQ_G_IDLE };

typedef struct wq_group {
    char *name; /* NULL: the slot is free */
    uint32_t namelen;
    wq_levels lv;    /* its queued records */
    uint32_t queued; /* records in lv */
    uint32_t active; /* handed out, not done */
    uint32_t refs;   /* records naming the group */
    uint32_t held;   /* what it adds to the throttled count */
    uint32_t next_free;
    uint8_t own;      /* lim was set for this group (kept while set) */
    uint8_t where;    /* WQ_G_*: which heap holds it */
    uint8_t nonempty; /* counted in wq_groups.nonempty */
    wq_limit lim;
    wq_pace pace;
} wq_group;

typedef struct wq_groups {
    wq_group *v;
    uint32_t n, cap;   /* slots in use are < n */
    uint32_t free;     /* free list through next_free */
    uint32_t live;     /* groups that exist */
    uint32_t nonempty; /* groups with queued records */
    uint64_t held;     /* queued records of groups not ready */
    wq_keymap *names;  /* name -> index */
    wq_delay ready, wait, idle;
    wq_limit dflt; /* the limit of groups without their own */
    uint64_t seq;  /* tie-break of wait and idle entries */
} wq_groups;

/* An empty table; 0 or WQ_ENOMEM. */
int wq_groups_init(wq_groups *gs);
/* Frees the table (and every group's level array). */
void wq_groups_destroy(wq_groups *gs);

/* Index of the group called name, or -1. */
int64_t wq_groups_find(const wq_groups *gs, const char *name, size_t len);
/*
 * Index of the group called name, creating it (no records, the default
 * limit) if needed. Makes room in every heap first, so placing it later
 * cannot fail. Returns the index, WQ_E2BIG or WQ_ENOMEM (nothing changed).
 */
int64_t wq_groups_obtain(wq_groups *gs, const char *name, size_t len, int64_t now);

/*
 * Puts group gi where its state says: no records and nothing to remember
 * (dropped), idle, saturated, waiting for a token, or ready with its head
 * record at (prio, seq) when queued. Keeps the held and nonempty counts.
 * Returns 1 if the group has just become ready (a get can now take from
 * it), else 0.
 */
int wq_groups_place(wq_groups *gs, uint32_t gi, int64_t now, int32_t prio, uint64_t seq);

/* Sets the limit of groups without their own (the caller re-places them). */
void wq_groups_set_default(wq_groups *gs, const wq_limit *lim);
/* Gives group gi its own limit, or (lim NULL) the default again (the caller re-places it). */
void wq_groups_set_limit(wq_groups *gs, uint32_t gi, const wq_limit *lim);

/*
 * The groups holding back the most queued records (held > 0), most first,
 * ties by name as bytes: their indexes in out[0..max). Returns how many
 * groups hold records back (possibly more than max).
 */
int64_t wq_groups_most_held(const wq_groups *gs, uint32_t *out, size_t max);

/* Drops idle groups whose buckets are full again at now. */
void wq_groups_sweep(wq_groups *gs, int64_t now);

/* Checks the table's own invariants; 0 or -1. */
int wq_groups_check(const wq_groups *gs, int64_t now);

#endif
