/*
 * The work queue (see queue.h). Records live in one array indexed by id;
 * a power-of-two open-addressing table (linear probing, at most half full)
 * finds them by key. Each table slot is 64 bits: the key's 32-bit hash in
 * the high half, id + 1 in the low half, 0 for an empty slot. So a probe
 * compares hashes without touching the record (the key itself is compared
 * only on a hash match), and growing the table or closing the gap after a
 * removal (backward shift) reads each entry's home slot from the table
 * alone: the records, a random access each, stay out of the table's loops.
 *
 * A record's key and payload share one block from the slab: the key bytes,
 * then, only when the record has a payload (F_PAYLOAD), a 4-byte length and
 * the payload bytes. Keeping the hash in the table and the payload length
 * in the block makes a record 40 bytes.
 *
 * The ready store is one intrusive FIFO list per priority level, levels
 * sorted highest first; the same links chain processing records in the
 * order they were handed out, so the oldest is at the head. Delayed adds
 * live in a wq_delay heap keyed by record id.
 *
 * Groups (group.h) are off until the first grouped add or group limit: a
 * grouped record sits in its group's own levels instead of the queue's,
 * and get compares the head of the ungrouped store with the head of the
 * best ready group, by priority then by the sequence number every record
 * takes when it enters a store. Queues without groups or a rate take the
 * old path through get untouched.
 */
#include "engine/queue.h"

#include "engine/delay.h"
#include "engine/group.h"
#include "engine/slab.h"

#include <assert.h>
#include <string.h>

#define NIL UINT32_MAX

/*
 * For the group code on the add, get and done paths: kept out of line so
 * that those paths stay short for queues without groups. Inlined, it made
 * an add+get+done 14% more instructions and the engine benchmarks 3-7%
 * slower (bench/RESULTS.md, issue 11).
 */
#if defined(__GNUC__)
#define NOINLINE __attribute__((noinline))
#else
#define NOINLINE
#endif

enum { F_DIRTY = 1, F_PROCESSING = 2, F_QUEUED = 4, F_WAITING = 8, F_PAYLOAD = 16 };

struct item {
    char *data;     /* key bytes; with F_PAYLOAD then paylen (PAYLEN_SIZE bytes) and payload */
    int64_t add_ns; /* when it last became dirty */
    union {
        int64_t get_ns; /* processing: when it was handed out */
        uint64_t seq;   /* queued: when it entered the store, in store entries */
    };
    uint32_t next; /* level list, processing list or free list */
    uint32_t prev;
    uint32_t keylen : 27;
    uint32_t flags : 5;
    int32_t prio;
};

/* The memory budget (64 bytes per item besides the key, bench/RESULTS.md) counts on this. */
_Static_assert(sizeof(struct item) <= 40, "struct item grew");

/* Bytes of the payload length stored after the key (unaligned, host order). */
#define PAYLEN_SIZE 4

struct wq_queue {
    const wq_clock *clock;
    struct item *items;
    uint32_t nitems, cap; /* ids in use are < nitems */
    uint32_t free_ids;    /* free list of ids through next */
    uint32_t nrecords;
    uint64_t *table; /* hash << 32 | (id + 1), 0 empty */
    uint32_t mask;
    wq_levels lv;                  /* the ungrouped ready store */
    uint64_t seq;                  /* entries into any store so far */
    uint32_t stored;               /* records in the ready stores */
    uint32_t proc_head, proc_tail; /* processing list, oldest first */
    uint32_t nprocessing;
    wq_delay delay;
    wq_slab slab;
    wq_metrics metrics;
    wq_groups *groups; /* NULL until a group is used */
    uint32_t *grp;     /* per record id: group index + 1, 0 for none (with groups) */
    uint32_t grp_cap;
    wq_pace pace;  /* the queue-wide rate */
    int paced_out; /* a get found the queue-wide rate exhausted */
    int shutting_down, drain;
    int paused; /* get hands nothing out (SPEC 7.5) */
    wq_observer_fn observer;
    void *observer_ud;
    uint32_t ev_id;   /* record of the key event being reported */
    uint32_t last_id; /* record of the last add's key */
    int last_created; /* ... and whether that add created it */
    int64_t last_ns;  /* the clock reading of the last add */
};

static void emit(wq_queue *q, wq_event ev, const struct item *it)
{
    if (!q->observer)
        return;
    if (it) {
        q->ev_id = (uint32_t)(it - q->items);
        q->observer(q->observer_ud, q, ev, it->data, it->keylen);
    } else
        q->observer(q->observer_ud, q, ev, NULL, 0);
}

static uint32_t paylen(const struct item *it)
{
    uint32_t n = 0;
    if (it->flags & F_PAYLOAD)
        memcpy(&n, it->data + it->keylen, sizeof n);
    return n;
}

static const char *payload(const struct item *it)
{
    return it->data + it->keylen + PAYLEN_SIZE;
}

/* Size of the record's data block (what it was allocated with). */
static size_t data_size(const struct item *it)
{
    size_t n = it->keylen;
    if (it->flags & F_PAYLOAD)
        n += PAYLEN_SIZE + (size_t)paylen(it);
    return n;
}

/*
 * A data block holding key and, when has_payload, the payload's length and
 * bytes. NULL on OOM. Even an empty key without payload gets a block: data
 * is never NULL, so memcmp and pointer arithmetic on it stay defined.
 */
static char *new_data(wq_queue *q, const char *key, size_t len, int has_payload, const char *p,
                      size_t n)
{
    size_t size = len + (has_payload ? PAYLEN_SIZE + n : 0);
    char *data = wq_slab_alloc(&q->slab, size);
    if (!data)
        return NULL;
    if (len)
        memcpy(data, key, len);
    if (has_payload) {
        uint32_t n32 = (uint32_t)n;
        memcpy(data + len, &n32, sizeof n32);
        if (n)
            memcpy(data + len + PAYLEN_SIZE, p, n);
    }
    return data;
}

/* ---- construction ---- */

wq_queue *wq_queue_new(const wq_clock *clock)
{
    wq_queue *q = wq_malloc(sizeof *q);
    if (!q)
        return NULL;
    memset(q, 0, sizeof *q);
    q->clock = clock;
    q->free_ids = NIL;
    q->proc_head = q->proc_tail = NIL;
    q->mask = 15;
    q->table = wq_malloc(16 * sizeof *q->table);
    q->lv.cap = 8;
    q->lv.v = wq_malloc(q->lv.cap * sizeof *q->lv.v);
    if (!q->table || !q->lv.v) {
        wq_free(q->table);
        wq_free(q->lv.v);
        wq_free(q);
        return NULL;
    }
    memset(q->table, 0, 16 * sizeof *q->table);
    wq_delay_init(&q->delay);
    wq_slab_init(&q->slab);
    return q;
}

void wq_queue_free(wq_queue *q)
{
    if (!q)
        return;
    for (uint32_t id = 0; id < q->nitems; id++) {
        struct item *it = &q->items[id];
        if (it->flags & (F_DIRTY | F_PROCESSING | F_WAITING))
            wq_slab_free(&q->slab, it->data, data_size(it));
    }
    wq_slab_destroy(&q->slab);
    wq_delay_destroy(&q->delay);
    wq_free(q->items);
    wq_free(q->table);
    wq_free(q->lv.v);
    if (q->groups)
        wq_groups_destroy(q->groups);
    wq_free(q->groups);
    wq_free(q->grp);
    wq_free(q);
}

void wq_queue_set_observer(wq_queue *q, wq_observer_fn fn, void *ud)
{
    q->observer = fn;
    q->observer_ud = ud;
}

/* ---- the key table ---- */

static uint32_t key_hash(const char *key, size_t len)
{
    return (uint32_t)wq_hash(key, len);
}

static uint64_t slot_make(uint32_t h, uint32_t id)
{
    return (uint64_t)h << 32 | (id + 1);
}

static uint32_t slot_hash(uint64_t v)
{
    return (uint32_t)(v >> 32);
}

static uint32_t slot_id(uint64_t v)
{
    return (uint32_t)v - 1;
}

/*
 * The slot holding key, or the empty slot where it would go. Only a slot
 * whose hash matches costs a look at the record (and its key bytes).
 */
static uint32_t find_slot(const wq_queue *q, const char *key, size_t len, uint32_t h)
{
    uint32_t i = h & q->mask;
    for (;;) {
        uint64_t v = q->table[i];
        if (!v)
            return i;
        if (slot_hash(v) == h) {
            const struct item *it = &q->items[slot_id(v)];
            if (it->keylen == len && memcmp(it->data, key, len) == 0)
                return i;
        }
        i = (i + 1) & q->mask;
    }
}

/* The first empty slot from h's home: where an entry known to be absent goes. */
static uint32_t empty_slot(const uint64_t *table, uint32_t mask, uint32_t h)
{
    uint32_t i = h & mask;
    while (table[i])
        i = (i + 1) & mask;
    return i;
}

/* The slot of key's record, or NIL if key has none. */
static uint32_t find(const wq_queue *q, const char *key, size_t len)
{
    if (len > WQ_KEY_MAX)
        return NIL;
    uint32_t i = find_slot(q, key, len, key_hash(key, len));
    return q->table[i] ? i : NIL;
}

static int grow_table(wq_queue *q)
{
    uint32_t ncap = (q->mask + 1) * 2;
    uint64_t *nt = wq_malloc((size_t)ncap * sizeof *nt);
    if (!nt)
        return WQ_ENOMEM;
    memset(nt, 0, (size_t)ncap * sizeof *nt);
    for (uint32_t i = 0; i <= q->mask; i++) {
        uint64_t v = q->table[i];
        if (v)
            nt[empty_slot(nt, ncap - 1, slot_hash(v))] = v;
    }
    wq_free(q->table);
    q->table = nt;
    q->mask = ncap - 1;
    return 0;
}

/*
 * Empties slot i and closes the gap by backward shift: each following
 * entry of the cluster that may move (its home is not in (hole, j]) moves
 * into the hole, so every entry stays reachable from its home without a
 * tombstone.
 */
static void table_remove(wq_queue *q, uint32_t i)
{
    uint64_t *t = q->table;
    uint32_t mask = q->mask, hole = i;
    for (uint32_t j = (i + 1) & mask; t[j]; j = (j + 1) & mask) {
        uint32_t home = slot_hash(t[j]) & mask;
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            t[hole] = t[j];
            hole = j;
        }
    }
    t[hole] = 0;
}

/* ---- records ---- */

static uint32_t group_of(const wq_queue *q, uint32_t id);
static void place_group(wq_queue *q, uint32_t gi, int tell);

/* Grows the per-record group slots to ncap. 0 or WQ_ENOMEM (nothing changed). */
static NOINLINE int grow_grp(wq_queue *q, uint32_t ncap)
{
    uint32_t *ng = wq_realloc(q->grp, (size_t)ncap * sizeof *ng);
    if (!ng)
        return WQ_ENOMEM;
    memset(ng + q->grp_cap, 0, (size_t)(ncap - q->grp_cap) * sizeof *ng);
    q->grp = ng;
    q->grp_cap = ncap;
    return 0;
}

/* Record id joins group gi. */
static NOINLINE void join_group(wq_queue *q, uint32_t id, uint32_t gi)
{
    q->grp[id] = gi + 1;
    if (q->groups->v[gi].refs++ == 0 && q->groups->v[gi].where == WQ_G_IDLE)
        place_group(q, gi, 0); /* in use again: no longer waiting to be forgotten */
}

/* Record id, dropped, leaves group gi, which may go too (group.h). */
static NOINLINE void leave_group(wq_queue *q, uint32_t id, uint32_t gi)
{
    q->grp[id] = 0;
    q->groups->v[gi].refs--;
    place_group(q, gi, 0);
}

static int payload_ok(const wq_add_opts *o)
{
    return !o || !o->set_payload || o->paylen <= WQ_PAYLOAD_MAX - WQ_KEY_MAX;
}

/*
 * Creates an empty record for key (flags 0) in *slot, the empty slot
 * find_slot answered for it; *slot is updated if the table grows. Returns
 * the id, or NIL on OOM. Every allocation a new record needs happens here,
 * so the caller can still back out.
 */
static uint32_t new_record(wq_queue *q, const char *key, size_t len, uint32_t h, uint32_t *slot,
                           const wq_add_opts *o, uint32_t gi)
{
    if ((q->nrecords + 1) * 2 > q->mask + 1) {
        if (grow_table(q) < 0)
            return NIL;
        *slot = empty_slot(q->table, q->mask, h);
    }
    uint32_t id = q->free_ids;
    if (id == NIL && q->nitems == q->cap) {
        uint32_t ncap = q->cap ? q->cap * 2 : 64;
        /* The group slots first, so a failure leaves the records as they were. */
        if (q->grp && q->grp_cap < ncap && grow_grp(q, ncap) < 0)
            return NIL;
        struct item *ni = wq_realloc(q->items, (size_t)ncap * sizeof *ni);
        if (!ni)
            return NIL;
        q->items = ni;
        q->cap = ncap;
    }
    int has_payload = o && o->set_payload;
    char *data = new_data(q, key, len, has_payload, has_payload ? o->payload : NULL,
                          has_payload ? o->paylen : 0);
    if (!data)
        return NIL;
    if (id == NIL)
        id = q->nitems++;
    else
        q->free_ids = q->items[id].next;
    struct item *it = &q->items[id];
    memset(it, 0, sizeof *it);
    it->data = data;
    it->keylen = (uint32_t)len;
    it->next = it->prev = NIL;
    if (has_payload)
        it->flags |= F_PAYLOAD;
    if (o && o->set_priority)
        it->prio = o->priority;
    if (gi != NIL)
        join_group(q, id, gi);
    q->table[*slot] = slot_make(h, id);
    q->nrecords++;
    return id;
}

/*
 * Drops a record that has nothing pending; slot is where the table holds
 * it. With tell, the observer hears WQ_EV_GONE after the record has left
 * the table (so the queue it sees is consistent) but before its bytes are
 * freed (so the key is still valid).
 */
static void drop_record(wq_queue *q, uint32_t id, uint32_t slot, int tell)
{
    struct item *it = &q->items[id];
    assert(q->table[slot] && slot_id(q->table[slot]) == id);
    size_t size = data_size(it);
    table_remove(q, slot);
    it->flags = 0;
    q->nrecords--;
    uint32_t gi = group_of(q, id);
    if (gi != NIL)
        leave_group(q, id, gi);
    if (tell)
        emit(q, WQ_EV_GONE, &q->items[id]);
    it = &q->items[id];
    wq_slab_free(&q->slab, it->data, size);
    it->data = NULL;
    it->next = q->free_ids;
    q->free_ids = id;
}

static int pending(const struct item *it)
{
    return it->flags & (F_DIRTY | F_PROCESSING | F_WAITING);
}

/* Replaces the payload of a record. 1 changed, 0 same bytes, WQ_ENOMEM. */
static int set_payload(wq_queue *q, uint32_t id, const char *p, size_t n)
{
    struct item *it = &q->items[id];
    if ((it->flags & F_PAYLOAD) && paylen(it) == n && (n == 0 || memcmp(payload(it), p, n) == 0))
        return 0;
    char *data = new_data(q, it->data, it->keylen, 1, p, n);
    if (!data)
        return WQ_ENOMEM;
    wq_slab_free(&q->slab, it->data, data_size(it));
    it->data = data;
    it->flags |= F_PAYLOAD;
    return 1;
}

/* ---- the ready stores ---- */

/* Index of prio's level in ls, or where it would be inserted (*found = 0). */
static uint32_t level_index(const wq_levels *ls, int32_t prio, int *found)
{
    uint32_t lo = 0, hi = ls->n;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (ls->v[mid].prio == prio) {
            *found = 1;
            return mid;
        }
        if (ls->v[mid].prio > prio)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = 0;
    return lo;
}

/* Makes sure ls has a level for prio. Returns its index or WQ_ENOMEM. */
static int64_t ensure_level(wq_levels *ls, int32_t prio)
{
    int found;
    uint32_t i = level_index(ls, prio, &found);
    if (found)
        return i;
    if (ls->n == ls->cap) {
        uint32_t ncap = ls->cap ? ls->cap * 2 : 1;
        wq_level *nl = wq_realloc(ls->v, (size_t)ncap * sizeof *nl);
        if (!nl)
            return WQ_ENOMEM;
        ls->v = nl;
        ls->cap = ncap;
    }
    memmove(&ls->v[i + 1], &ls->v[i], (ls->n - i) * sizeof *ls->v);
    ls->v[i] = (wq_level){prio, NIL, NIL, 0};
    ls->n++;
    return i;
}

static void level_drop(wq_levels *ls, uint32_t li)
{
    ls->n--;
    memmove(&ls->v[li], &ls->v[li + 1], (ls->n - li) * sizeof *ls->v);
}

/* Drops prio's level if it exists and is empty (undoes an unused ensure_level). */
static void trim_level(wq_levels *ls, int32_t prio)
{
    int found;
    uint32_t li = level_index(ls, prio, &found);
    if (found && ls->v[li].count == 0)
        level_drop(ls, li);
}

/* The group index of record id, or NIL. */
static uint32_t group_of(const wq_queue *q, uint32_t id)
{
    return q->grp && id < q->grp_cap && q->grp[id] ? q->grp[id] - 1 : NIL;
}

/* The store record id belongs in: its group's, or the ungrouped one. */
static wq_levels *levels_of(wq_queue *q, uint32_t id)
{
    uint32_t gi = group_of(q, id);
    return gi == NIL ? &q->lv : &q->groups->v[gi].lv;
}

/* The record links serve two kinds of list, a level's FIFO and the
 * processing list: appending and unlinking, given the list's ends. */
static void link_append(wq_queue *q, uint32_t *head, uint32_t *tail, uint32_t id)
{
    struct item *it = &q->items[id];
    it->prev = *tail;
    it->next = NIL;
    if (*tail != NIL)
        q->items[*tail].next = id;
    else
        *head = id;
    *tail = id;
}

static void link_remove(wq_queue *q, uint32_t *head, uint32_t *tail, uint32_t id)
{
    struct item *it = &q->items[id];
    if (it->prev != NIL)
        q->items[it->prev].next = it->next;
    else
        *head = it->next;
    if (it->next != NIL)
        q->items[it->next].prev = it->prev;
    else
        *tail = it->prev;
}

static int64_t now(const wq_queue *q)
{
    return wq_clock_now(q->clock);
}

/*
 * Re-places group gi after a change to its records or limits; tells the
 * observer (WQ_EV_READY) when the change let a get take from it. The clock
 * is read only when it matters (a rate).
 */
static NOINLINE void place_group(wq_queue *q, uint32_t gi, int tell)
{
    wq_group *g = &q->groups->v[gi];
    int32_t prio = 0;
    uint64_t seq = 0;
    if (g->queued) {
        prio = g->lv.v[0].prio;
        seq = q->items[g->lv.v[0].head].seq;
    }
    int64_t t = g->pace.interval ? now(q) : 0;
    if (wq_groups_place(q->groups, gi, t, prio, seq) && tell)
        emit(q, WQ_EV_READY, NULL);
}

/* Appends id to level li of its store (the caller re-places its group). */
static void store_push(wq_queue *q, wq_levels *ls, uint32_t li, uint32_t id)
{
    wq_level *l = &ls->v[li];
    link_append(q, &l->head, &l->tail, id);
    l->count++;
    struct item *it = &q->items[id];
    it->flags |= F_QUEUED;
    it->seq = q->seq++;
    q->stored++;
    if (ls != &q->lv)
        q->groups->v[q->grp[id] - 1].queued++;
}

/* Unlinks id from its level, dropping the level when it empties (the caller re-places its group).
 */
static void store_unlink(wq_queue *q, uint32_t id)
{
    uint32_t gi = group_of(q, id);
    wq_levels *ls = &q->lv;
    if (gi != NIL) {
        ls = &q->groups->v[gi].lv;
        q->groups->v[gi].queued--;
    }
    struct item *it = &q->items[id];
    int found;
    uint32_t li = level_index(ls, it->prio, &found);
    assert(found);
    wq_level *l = &ls->v[li];
    link_remove(q, &l->head, &l->tail, id);
    it->flags &= ~F_QUEUED;
    q->stored--;
    if (--l->count == 0)
        level_drop(ls, li);
}

/* Re-places id's group, if it has one, after its store changed. */
static void regroup(wq_queue *q, uint32_t id)
{
    uint32_t gi = group_of(q, id);
    if (gi != NIL)
        place_group(q, gi, 0);
}

/* enqueue for record id of group gi. */
static NOINLINE int enqueue_grouped(wq_queue *q, uint32_t id, uint32_t gi)
{
    wq_levels *ls = &q->groups->v[gi].lv;
    int64_t li = ensure_level(ls, q->items[id].prio);
    if (li < 0)
        return (int)li;
    store_push(q, ls, (uint32_t)li, id);
    place_group(q, gi, 0);
    return 0;
}

/* Appends a dirty, not processing record to its store. 0 or WQ_ENOMEM. */
static int enqueue(wq_queue *q, uint32_t id)
{
    uint32_t gi = group_of(q, id);
    if (gi != NIL)
        return enqueue_grouped(q, id, gi);
    int64_t li = ensure_level(&q->lv, q->items[id].prio);
    if (li < 0)
        return (int)li;
    store_push(q, &q->lv, (uint32_t)li, id);
    return 0;
}

/* ---- processing list ---- */

static void proc_push(wq_queue *q, uint32_t id)
{
    link_append(q, &q->proc_head, &q->proc_tail, id);
    q->nprocessing++;
}

static void proc_unlink(wq_queue *q, uint32_t id)
{
    link_remove(q, &q->proc_head, &q->proc_tail, id);
    q->items[id].next = q->items[id].prev = NIL;
    q->nprocessing--;
}

/* ---- operations ---- */

static void fill_info(const wq_queue *q, uint32_t id, wq_item_info *info);

/* Turns groups on: the table and a group slot per record id. 0 or WQ_ENOMEM. */
static int groups_on(wq_queue *q)
{
    if (q->groups)
        return 0;
    uint32_t cap = q->cap ? q->cap : 64;
    wq_groups *gs = wq_malloc(sizeof *gs);
    uint32_t *grp = wq_malloc((size_t)cap * sizeof *grp);
    if (!gs || !grp || wq_groups_init(gs) < 0) { /* a failed init holds nothing */
        wq_free(gs);
        wq_free(grp);
        return WQ_ENOMEM;
    }
    memset(grp, 0, (size_t)cap * sizeof *grp);
    q->groups = gs;
    q->grp = grp;
    q->grp_cap = cap;
    return 0;
}

/* The index of group name, made if needed (see wq_groups_obtain). */
static NOINLINE int64_t obtain_group(wq_queue *q, const char *name, size_t len)
{
    if (groups_on(q) < 0)
        return WQ_ENOMEM;
    return wq_groups_obtain(q->groups, name, len, now(q));
}

/*
 * Looks key up, creating a record if needed. *created tells which, *slot
 * where the table holds it. Returns the id, or a negative error with
 * nothing changed.
 */
static int64_t obtain(wq_queue *q, const char *key, size_t len, const wq_add_opts *o, int *created,
                      uint32_t *slot)
{
    if (len > WQ_KEY_MAX || !payload_ok(o) || (o && o->group && o->grouplen > WQ_GROUP_MAX))
        return WQ_E2BIG;
    uint32_t h = key_hash(key, len);
    *slot = find_slot(q, key, len, h);
    uint64_t v = q->table[*slot];
    if (v) { /* a pending key keeps its group */
        *created = 0;
        q->last_id = slot_id(v);
        q->last_created = 0;
        return slot_id(v);
    }
    uint32_t gi = NIL;
    if (o && o->group) {
        int64_t g = obtain_group(q, o->group, o->grouplen);
        if (g < 0)
            return g;
        gi = (uint32_t)g;
    }
    uint32_t id = new_record(q, key, len, h, slot, o, gi);
    if (id == NIL) {
        if (gi != NIL)
            place_group(q, gi, 0); /* forgets it again if it was new */
        return WQ_ENOMEM;
    }
    *created = 1;
    q->last_id = id;
    q->last_created = 1;
    return id;
}

/*
 * Applies opts to an existing record: payload replaced; priority raised (a
 * queued key moves to the back of its new level) or, when not queued, set.
 * Returns 1 if anything changed, 0 if not, WQ_ENOMEM with nothing changed.
 */
static int apply_opts(wq_queue *q, uint32_t id, const wq_add_opts *o)
{
    if (!o)
        return 0;
    int changed = 0;
    struct item *it = &q->items[id];
    wq_levels *ls = levels_of(q, id);
    int move = o->set_priority && (it->flags & F_QUEUED) && o->priority > it->prio;
    if (move && ensure_level(ls, o->priority) < 0)
        return WQ_ENOMEM;
    if (o->set_payload) {
        int r = set_payload(q, id, o->payload, o->paylen);
        if (r < 0) {
            if (move)
                trim_level(ls, o->priority);
            return r;
        }
        changed |= r;
        it = &q->items[id];
    }
    if (o->set_priority && o->priority != it->prio) {
        if (it->flags & F_QUEUED) {
            if (move) {
                store_unlink(q, id);
                it->prio = o->priority;
                int found;
                uint32_t li = level_index(ls, it->prio, &found);
                assert(found);
                store_push(q, ls, li, id);
                regroup(q, id);
                changed = 1;
            }
        } else {
            it->prio = o->priority;
            changed = 1;
        }
    }
    return changed;
}

/* Marks an existing, not dirty record dirty and queues it. 0 or WQ_ENOMEM. */
static int make_dirty(wq_queue *q, uint32_t id, wq_event *ev)
{
    struct item *it = &q->items[id];
    if (!(it->flags & F_PROCESSING)) {
        int r = enqueue(q, id);
        if (r < 0)
            return r;
        *ev = WQ_EV_QUEUED;
    } else {
        *ev = WQ_EV_DIRTY;
    }
    it = &q->items[id];
    it->flags |= F_DIRTY;
    it->add_ns = now(q);
    q->last_ns = it->add_ns;
    q->metrics.depth++;
    q->metrics.adds++;
    return 0;
}

int wq_queue_add(wq_queue *q, const char *key, size_t len, const wq_add_opts *o)
{
    if (q->shutting_down)
        return WQ_ESHUTDOWN;
    int created;
    uint32_t slot;
    int64_t r = obtain(q, key, len, o, &created, &slot);
    if (r < 0)
        return (int)r;
    uint32_t id = (uint32_t)r;
    if (!created && (q->items[id].flags & F_DIRTY)) {
        int c = apply_opts(q, id, o);
        if (c > 0)
            emit(q, WQ_EV_UPDATED, &q->items[id]);
        return c < 0 ? c : 0;
    }
    /* Not dirty: the record is new, processing or only waiting. */
    if (!created) {
        int32_t prio = o && o->set_priority ? o->priority : q->items[id].prio;
        int queue_now = !(q->items[id].flags & F_PROCESSING);
        wq_levels *ls = levels_of(q, id);
        if (queue_now && ensure_level(ls, prio) < 0)
            return WQ_ENOMEM;
        int c = apply_opts(q, id, o);
        if (c < 0) {
            if (queue_now)
                trim_level(ls, prio);
            return c;
        }
    }
    wq_event ev;
    if (make_dirty(q, id, &ev) < 0) {
        drop_record(q, id, slot, 0); /* only a new record can fail here */
        return WQ_ENOMEM;
    }
    emit(q, ev, &q->items[id]);
    return 1;
}

/* Keys up to this long are worth hashing just to prefetch their slot. */
#define PREFETCH_KEY_MAX 128

/* Hints that record id's table slot will be read soon (a hint only: no effect on state). */
static void prefetch_slot(const wq_queue *q, uint32_t id)
{
#if defined(__GNUC__)
    const struct item *it = &q->items[id];
    if (it->keylen <= PREFETCH_KEY_MAX)
        __builtin_prefetch(&q->table[key_hash(it->data, it->keylen) & q->mask]);
#else
    (void)q;
    (void)id;
#endif
}

/*
 * With groups or a queue-wide rate: the record a get hands out at t, or NIL
 * when every queued record is held back by a limit. Groups whose token
 * came are made ready first.
 */
static uint32_t pick(wq_queue *q, int64_t t)
{
    if (wq_pace_next(&q->pace) > t) {
        q->paced_out = 1;
        return NIL;
    }
    uint32_t best = q->lv.n ? q->lv.v[0].head : NIL;
    wq_groups *gs = q->groups;
    if (!gs)
        return best;
    while (wq_delay_len(&gs->wait) && wq_delay_next(&gs->wait) <= t)
        place_group(q, wq_delay_top(&gs->wait), 0);
    if (!wq_delay_len(&gs->ready))
        return best;
    const wq_level *l = &gs->v[wq_delay_top(&gs->ready)].lv.v[0];
    if (best == NIL || l->prio > q->items[best].prio ||
        (l->prio == q->items[best].prio && q->items[l->head].seq < q->items[best].seq))
        best = l->head;
    return best;
}

/* After a get with limits: charges the record's group and the queue's rate. */
static void charge(wq_queue *q, uint32_t id, int64_t t)
{
    wq_pace_take(&q->pace, t);
    uint32_t gi = group_of(q, id);
    if (gi == NIL)
        return;
    wq_group *g = &q->groups->v[gi];
    g->active++;
    wq_pace_take(&g->pace, t);
    place_group(q, gi, 0);
}

/* Whether a get at t would find something (groups or a rate on). */
static int available(const wq_queue *q, int64_t t)
{
    uint64_t held = q->groups ? q->groups->held : 0;
    return q->stored > held && wq_pace_next(&q->pace) <= t;
}

/*
 * A fast worker's done follows its get at once, too soon for the done's
 * table slot (a cache miss in a large table) to load in the meantime.
 * Start loading the slot of the record two places after id in its level:
 * by the time its get and done come, the line is in cache.
 */
static inline void prefetch_ahead(const wq_queue *q, uint32_t id)
{
    uint32_t next = q->items[id].next;
    uint32_t ahead = next != NIL ? q->items[next].next : NIL;
    if (ahead != NIL)
        prefetch_slot(q, ahead);
}

/* Hands out record id, just unlinked from its store, at t. */
static inline void hand_out(wq_queue *q, uint32_t id, int64_t t)
{
    struct item *it = &q->items[id];
    it->flags = (it->flags & ~F_DIRTY) | F_PROCESSING;
    q->metrics.depth--;
    wq_histogram_observe(&q->metrics.queue_latency, (double)(t - it->add_ns) / 1e9);
    it->get_ns = t;
    proc_push(q, id);
    emit(q, WQ_EV_PROCESSING, it);
}

/*
 * Get with groups or a queue-wide rate, but for filling the item info:
 * hands out the record picked at the clock's now, charging its group and
 * the rate. Returns its id, or NIL when every queued record is held back.
 */
static NOINLINE uint32_t get_limited(wq_queue *q)
{
    int64_t t = now(q);
    uint32_t id = pick(q, t);
    if (id == NIL)
        return NIL;
    /* Records come out of many groups in turn, so the one two places on
     * in id's group may be far off: load id's own slot too, for its done. */
    prefetch_ahead(q, id);
    prefetch_slot(q, id);
    store_unlink(q, id);
    charge(q, id, t);
    hand_out(q, id, t);
    /* A limit may have kept waiters asleep while this get found a record:
     * wake the next one while more are there to take. */
    if (available(q, t))
        emit(q, WQ_EV_READY, NULL);
    return id;
}

int wq_queue_get(wq_queue *q, wq_item_info *out)
{
    if (!q->stored || q->paused)
        return q->shutting_down ? WQ_ESHUTDOWN : WQ_EEMPTY;
    uint32_t id;
    if (q->groups || q->pace.interval) {
        id = get_limited(q);
        if (id == NIL)
            return WQ_EEMPTY;
    } else {
        id = q->lv.v[0].head;
        prefetch_ahead(q, id);
        store_unlink(q, id);
        hand_out(q, id, now(q));
    }
    if (out)
        fill_info(q, id, out);
    return 0;
}

/* The rest of a done of record id (no longer processing) of group gi. */
static NOINLINE void done_grouped(wq_queue *q, uint32_t id, uint32_t slot, uint32_t gi)
{
    q->groups->v[gi].active--;
    int was_ready = q->groups->v[gi].where == WQ_G_READY;
    struct item *it = &q->items[id];
    if (it->flags & F_DIRTY) {
        enqueue(q, id); /* cannot fail: the level exists */
        emit(q, WQ_EV_QUEUED, &q->items[id]);
    } else if (!pending(it)) {
        drop_record(q, id, slot, 1);
    } else {
        place_group(q, gi, 0);
        emit(q, WQ_EV_WAITING, it);
    }
    /* The group was placed above (enqueue, drop_record or here); it may be gone. */
    if (q->groups->v[gi].name && !was_ready && q->groups->v[gi].where == WQ_G_READY)
        emit(q, WQ_EV_READY, NULL); /* a slot freed: one more get can take from it */
}

int wq_queue_done(wq_queue *q, const char *key, size_t len)
{
    uint32_t slot = find(q, key, len);
    if (slot == NIL)
        return WQ_ENOENT;
    uint32_t id = slot_id(q->table[slot]);
    struct item *it = &q->items[id];
    if (!(it->flags & F_PROCESSING))
        return WQ_ENOENT;
    if ((it->flags & F_DIRTY) && ensure_level(levels_of(q, id), it->prio) < 0)
        return WQ_ENOMEM;
    proc_unlink(q, id);
    it->flags &= ~F_PROCESSING;
    wq_histogram_observe(&q->metrics.work_duration, (double)(now(q) - it->get_ns) / 1e9);
    uint32_t gi = group_of(q, id);
    if (gi != NIL) {
        done_grouped(q, id, slot, gi);
    } else if (it->flags & F_DIRTY) {
        enqueue(q, id); /* cannot fail: the level exists */
        emit(q, WQ_EV_QUEUED, &q->items[id]);
    } else if (!pending(it)) {
        drop_record(q, id, slot, 1);
    } else {
        emit(q, WQ_EV_WAITING, it);
    }
    if (q->nprocessing == 0)
        emit(q, WQ_EV_IDLE, NULL);
    return 0;
}

int wq_queue_set_paused(wq_queue *q, int paused)
{
    paused = paused != 0;
    if (q->paused == paused)
        return 0;
    q->paused = paused;
    return 1;
}

int wq_queue_paused(const wq_queue *q)
{
    return q->paused;
}

int wq_queue_remove(wq_queue *q, const char *key, size_t len)
{
    uint32_t slot = find(q, key, len);
    if (slot == NIL)
        return WQ_ENOENT;
    uint32_t id = slot_id(q->table[slot]);
    struct item *it = &q->items[id];
    if (it->flags & F_PROCESSING)
        return WQ_EBUSY;
    if (it->flags & F_QUEUED)
        store_unlink(q, id);
    if (it->flags & F_DIRTY) {
        it->flags &= ~F_DIRTY;
        q->metrics.depth--;
    }
    if (it->flags & F_WAITING) {
        wq_delay_cancel(&q->delay, id);
        it->flags &= ~F_WAITING;
    }
    drop_record(q, id, slot, 1);
    return 0;
}

size_t wq_queue_len(const wq_queue *q)
{
    return q->stored;
}

void wq_queue_shutdown(wq_queue *q)
{
    q->shutting_down = 1;
    q->drain = 0;
    emit(q, WQ_EV_SHUTDOWN, NULL);
}

void wq_queue_shutdown_drain(wq_queue *q)
{
    q->shutting_down = 1;
    q->drain = 1;
    emit(q, WQ_EV_SHUTDOWN, NULL);
}

int wq_queue_draining(const wq_queue *q)
{
    return q->drain && q->nprocessing > 0;
}

int wq_queue_shutting_down(const wq_queue *q)
{
    return q->shutting_down;
}

static int schedule(wq_queue *q, const char *key, size_t len, int64_t when, const wq_add_opts *o)
{
    int created;
    uint32_t slot;
    int64_t r = obtain(q, key, len, o, &created, &slot);
    if (r < 0)
        return (int)r;
    uint32_t id = (uint32_t)r;
    if (wq_delay_reserve(&q->delay, id) < 0) {
        if (created)
            drop_record(q, id, slot, 0);
        return WQ_ENOMEM;
    }
    int changed = 0;
    if (!created) {
        changed = apply_opts(q, id, o);
        if (changed < 0)
            return changed;
    }
    int moved = wq_delay_schedule(&q->delay, id, when); /* cannot fail after reserve */
    q->items[id].flags |= F_WAITING;
    if (moved)
        emit(q, WQ_EV_WAITING, &q->items[id]);
    else if (changed)
        emit(q, WQ_EV_UPDATED, &q->items[id]);
    return moved;
}

int wq_queue_add_after(wq_queue *q, const char *key, size_t len, int64_t delay_ns,
                       const wq_add_opts *o)
{
    if (q->shutting_down)
        return WQ_ESHUTDOWN;
    if (len > WQ_KEY_MAX || !payload_ok(o))
        return WQ_E2BIG;
    q->metrics.retries++;
    int r;
    if (delay_ns <= 0) {
        r = wq_queue_add(q, key, len, o);
    } else {
        q->last_ns = now(q);
        r = schedule(q, key, len, wq_add_sat(q->last_ns, delay_ns), o);
    }
    if (r == WQ_ENOMEM)
        q->metrics.retries--; /* nothing happened; the caller may try again */
    return r;
}

int wq_queue_add_at(wq_queue *q, const char *key, size_t len, int64_t ready_at,
                    const wq_add_opts *o)
{
    if (q->shutting_down)
        return WQ_ESHUTDOWN;
    q->last_ns = now(q);
    if (ready_at <= q->last_ns)
        return wq_queue_add(q, key, len, o);
    return schedule(q, key, len, ready_at, o);
}

int wq_queue_cancel_after(wq_queue *q, const char *key, size_t len)
{
    uint32_t slot = find(q, key, len);
    if (slot == NIL)
        return 0;
    uint32_t id = slot_id(q->table[slot]);
    if (!wq_delay_cancel(&q->delay, id))
        return 0;
    struct item *it = &q->items[id];
    it->flags &= ~F_WAITING;
    if (!pending(it)) {
        drop_record(q, id, slot, 1);
    } else {
        emit(q, WQ_EV_UPDATED, it);
    }
    return 1;
}

int64_t wq_queue_next_ready(const wq_queue *q)
{
    int64_t t = q->shutting_down ? WQ_NEVER : wq_delay_next(&q->delay);
    if (q->groups && wq_delay_len(&q->groups->wait) && wq_delay_next(&q->groups->wait) < t)
        t = wq_delay_next(&q->groups->wait);
    if (q->paced_out && wq_pace_next(&q->pace) < t)
        t = wq_pace_next(&q->pace);
    return t;
}

/* Groups whose token came become ready; the queue's rate earns one. Counts the wakes. */
static int release_due(wq_queue *q, int64_t t)
{
    int n = 0;
    wq_groups *gs = q->groups;
    while (gs && wq_delay_len(&gs->wait) && wq_delay_next(&gs->wait) <= t) {
        place_group(q, wq_delay_top(&gs->wait), 1);
        n++;
    }
    if (q->paced_out && wq_pace_next(&q->pace) <= t) {
        q->paced_out = 0;
        emit(q, WQ_EV_READY, NULL);
        n++;
    }
    return n;
}

int wq_queue_fire_due(wq_queue *q)
{
    int64_t t = now(q);
    release_due(q, t); /* even shut down: queued records still go out */
    if (q->shutting_down)
        return 0;
    int n = 0;
    wq_delay_entry e;
    while (wq_delay_next(&q->delay) <= t) {
        uint32_t id = q->delay.heap[0].id;
        struct item *it = &q->items[id];
        if (!(it->flags & (F_DIRTY | F_PROCESSING)) && ensure_level(levels_of(q, id), it->prio) < 0)
            return n ? n : WQ_ENOMEM;
        wq_delay_pop_due(&q->delay, t, &e);
        it = &q->items[id];
        it->flags &= ~F_WAITING;
        if (it->flags & F_DIRTY) {
            emit(q, WQ_EV_UPDATED, it); /* already queued: the add is a no-op */
        } else {
            wq_event ev;
            make_dirty(q, id, &ev); /* cannot fail: the level exists */
            emit(q, ev, &q->items[id]);
        }
        n++;
    }
    return n;
}

static void fill_info(const wq_queue *q, uint32_t id, wq_item_info *info)
{
    const struct item *it = &q->items[id];
    info->id = id;
    info->key = it->data;
    info->keylen = it->keylen;
    info->payload = (it->flags & F_PAYLOAD) ? payload(it) : NULL;
    info->paylen = paylen(it);
    info->priority = it->prio;
    info->state = 0;
    if (it->flags & F_DIRTY)
        info->state |= WQ_ST_DIRTY;
    if (it->flags & F_PROCESSING)
        info->state |= WQ_ST_PROCESSING;
    if (it->flags & F_QUEUED)
        info->state |= WQ_ST_QUEUED;
    info->ready_at = 0;
    if (it->flags & F_WAITING) {
        info->state |= WQ_ST_WAITING;
        wq_delay_when(&q->delay, id, &info->ready_at);
    }
    info->added_at = it->add_ns;
    info->started_at = (it->flags & F_PROCESSING) ? it->get_ns : 0;
    uint32_t gi = group_of(q, id);
    info->group = gi == NIL ? NULL : q->groups->v[gi].name;
    info->grouplen = gi == NIL ? 0 : q->groups->v[gi].namelen;
}

int wq_queue_lookup(const wq_queue *q, const char *key, size_t len, wq_item_info *info)
{
    uint32_t slot = find(q, key, len);
    if (slot == NIL)
        return 0;
    fill_info(q, slot_id(q->table[slot]), info);
    return 1;
}

static int limit_ok(const wq_limit *l)
{
    return l->rate >= 0 && l->burst >= 0 && l->rate <= 1e12 && l->burst <= 1e12;
}

/* Re-places every group (after the default limit changed). */
static void place_all(wq_queue *q)
{
    for (uint32_t gi = 0; gi < q->groups->n; gi++)
        if (q->groups->v[gi].name)
            place_group(q, gi, 1);
}

int wq_queue_set_group_default(wq_queue *q, const wq_limit *lim)
{
    if (!limit_ok(lim))
        return WQ_EINVAL;
    if (groups_on(q) < 0)
        return WQ_ENOMEM;
    wq_groups_set_default(q->groups, lim);
    place_all(q);
    return 0;
}

int wq_queue_set_group_limit(wq_queue *q, const char *group, size_t len, const wq_limit *lim)
{
    if (lim && !limit_ok(lim))
        return WQ_EINVAL;
    if (!lim && (!q->groups || wq_groups_find(q->groups, group, len) < 0))
        return 0; /* nothing of its own to forget */
    int64_t gi = obtain_group(q, group, len);
    if (gi < 0)
        return (int)gi;
    wq_groups_set_limit(q->groups, (uint32_t)gi, lim);
    place_group(q, (uint32_t)gi, 1);
    return 0;
}

int wq_queue_set_rate(wq_queue *q, double per_second, double burst)
{
    wq_limit l = {0, per_second, burst};
    if (!limit_ok(&l))
        return WQ_EINVAL;
    wq_pace_set(&q->pace, per_second, burst);
    if (!q->pace.interval && q->paced_out) {
        q->paced_out = 0;
        emit(q, WQ_EV_READY, NULL);
    }
    return 0;
}

int wq_queue_group_limit(const wq_queue *q, const char *group, size_t len, wq_limit *out)
{
    int64_t gi = q->groups ? wq_groups_find(q->groups, group, len) : -1;
    if (gi < 0) {
        static const wq_limit none;
        *out = q->groups ? q->groups->dflt : none;
        return 0;
    }
    *out = q->groups->v[gi].lim;
    return q->groups->v[gi].own;
}

size_t wq_queue_groups(const wq_queue *q)
{
    return q->groups ? q->groups->nonempty : 0;
}

size_t wq_queue_throttled(const wq_queue *q)
{
    if (q->pace.interval && wq_pace_next(&q->pace) > now(q))
        return q->stored;
    return q->groups ? (size_t)q->groups->held : 0;
}

int64_t wq_queue_most_held_groups(const wq_queue *q, size_t max,
                                  void (*fn)(void *ud, const wq_group_view *g), void *ud)
{
    if (!q->groups)
        return 0;
    uint32_t *top = max ? wq_malloc(max * sizeof *top) : NULL;
    if (max && !top)
        return WQ_ENOMEM;
    int64_t total = wq_groups_most_held(q->groups, top, max);
    size_t n = (uint64_t)total < max ? (size_t)total : max;
    for (size_t i = 0; i < n; i++) {
        const wq_group *g = &q->groups->v[top[i]];
        wq_group_view v = {g->name, g->namelen, g->held, g->queued, g->active, g->lim, g->own};
        fn(ud, &v);
    }
    wq_free(top);
    return total;
}

size_t wq_queue_processing(const wq_queue *q)
{
    return q->nprocessing;
}

size_t wq_queue_waiting(const wq_queue *q)
{
    /*
     * Shutdown drops pending delayed adds (WORKQUEUE.md). The heap entries
     * stay, frozen and without GONE events, so a store keeps them for the
     * next run; they just no longer wait for anything here.
     */
    return q->shutting_down ? 0 : wq_delay_len(&q->delay);
}

size_t wq_queue_records(const wq_queue *q)
{
    return q->nrecords;
}

const wq_metrics *wq_queue_metrics(const wq_queue *q)
{
    return &q->metrics;
}

void wq_queue_work_ages(const wq_queue *q, double *unfinished, double *longest)
{
    int64_t t = now(q);
    double sum = 0;
    for (uint32_t id = q->proc_head; id != NIL; id = q->items[id].next)
        sum += (double)(t - q->items[id].get_ns) / 1e9;
    *unfinished = sum;
    *longest = q->proc_head == NIL ? 0 : (double)(t - q->items[q->proc_head].get_ns) / 1e9;
}

int wq_queue_foreach(const wq_queue *q, int (*fn)(void *ud, const wq_item_info *info), void *ud)
{
    for (uint32_t id = 0; id < q->nitems; id++) {
        const struct item *it = &q->items[id];
        if (!pending(it))
            continue;
        wq_item_info info;
        fill_info(q, id, &info);
        int r = fn(ud, &info);
        if (r)
            return r;
    }
    return 0;
}

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c))                                                                                  \
            return -1;                                                                             \
    } while (0)

/*
 * Checks one store: levels non-empty, sorted, linked both ways, members
 * queued at that priority, in the store of group gi (NIL: ungrouped), in
 * order of entry. Returns the count of records, or -1.
 */
static int64_t check_levels(const wq_queue *q, const wq_levels *ls, uint32_t gi)
{
    int64_t total = 0;
    for (uint32_t li = 0; li < ls->n; li++) {
        const wq_level *l = &ls->v[li];
        CHECK(l->count > 0);
        CHECK(li == 0 || ls->v[li - 1].prio > l->prio);
        uint32_t n = 0, prev = NIL;
        for (uint32_t id = l->head; id != NIL; id = q->items[id].next) {
            CHECK(id < q->nitems);
            CHECK(q->items[id].prev == prev);
            CHECK(q->items[id].flags & F_QUEUED);
            CHECK(q->items[id].prio == l->prio);
            CHECK(group_of(q, id) == gi);
            CHECK(prev == NIL || q->items[prev].seq < q->items[id].seq);
            prev = id;
            CHECK(++n <= q->nrecords);
        }
        CHECK(prev == l->tail && n == l->count);
        total += n;
    }
    return total;
}

/* Every grouped record names a live group; each group's refs and active counts are right. */
static int check_refs(const wq_queue *q)
{
    const wq_groups *gs = q->groups;
    uint32_t *n = wq_malloc(2 * (size_t)gs->n * sizeof *n + 1);
    if (!n)
        return 0; /* cannot count: nothing found wrong */
    memset(n, 0, 2 * (size_t)gs->n * sizeof *n);
    int bad = 0;
    for (uint32_t id = 0; id < q->nitems && !bad; id++) {
        uint32_t gi = group_of(q, id);
        if (gi == NIL)
            continue;
        bad = !pending(&q->items[id]) || gi >= gs->n || !gs->v[gi].name;
        if (!bad) {
            n[2 * gi]++;
            n[2 * gi + 1] += !!(q->items[id].flags & F_PROCESSING);
        }
    }
    for (uint32_t gi = 0; gi < gs->n && !bad; gi++)
        bad = gs->v[gi].name && (n[2 * gi] != gs->v[gi].refs || n[2 * gi + 1] != gs->v[gi].active);
    wq_free(n);
    return bad ? -1 : 0;
}

int wq_queue_check(const wq_queue *q)
{
    uint32_t records = 0, dirty = 0, queued = 0, processing = 0, waiting = 0;
    for (uint32_t id = 0; id < q->nitems; id++) {
        const struct item *it = &q->items[id];
        if (!pending(it)) {
            CHECK(!(it->flags & F_QUEUED));
            continue;
        }
        records++;
        CHECK(it->data != NULL);
        /* Found from its home, at a slot naming it with its key's hash. */
        uint32_t slot = find(q, it->data, it->keylen);
        CHECK(slot != NIL);
        CHECK(slot_id(q->table[slot]) == id);
        CHECK(slot_hash(q->table[slot]) == key_hash(it->data, it->keylen));
        if (it->flags & F_DIRTY)
            dirty++;
        if (it->flags & F_QUEUED) {
            CHECK(it->flags & F_DIRTY);
            CHECK(!(it->flags & F_PROCESSING));
            queued++;
        }
        if (it->flags & F_DIRTY && !(it->flags & F_PROCESSING))
            CHECK(it->flags & F_QUEUED);
        if (it->flags & F_PROCESSING)
            processing++;
        int64_t when;
        CHECK(!!(it->flags & F_WAITING) == wq_delay_when(&q->delay, id, &when));
        if (it->flags & F_WAITING)
            waiting++;
    }
    CHECK(records == q->nrecords);
    CHECK(queued == q->stored);
    CHECK(processing == q->nprocessing);
    CHECK(waiting == wq_delay_len(&q->delay));
    CHECK((int64_t)dirty == q->metrics.depth);
    /* Every used slot names a live record; with the finds above, one slot per record. */
    uint32_t slots = 0;
    for (uint32_t i = 0; i <= q->mask; i++) {
        uint64_t v = q->table[i];
        if (!v)
            continue;
        CHECK(slot_id(v) < q->nitems && pending(&q->items[slot_id(v)]));
        slots++;
    }
    CHECK(slots == q->nrecords);
    CHECK(q->nrecords * 2 <= q->mask + 1);
    int64_t inlevels = check_levels(q, &q->lv, NIL);
    CHECK(inlevels >= 0);
    if (q->groups) {
        const wq_groups *gs = q->groups;
        CHECK(wq_groups_check(gs, now(q)) == 0);
        for (uint32_t gi = 0; gi < gs->n; gi++) {
            const wq_group *g = &gs->v[gi];
            if (!g->name)
                continue;
            int64_t n = check_levels(q, &g->lv, gi);
            CHECK(n == g->queued);
            inlevels += n;
            int64_t when;
            if (g->where == WQ_G_READY) { /* keyed by its head: (-prio, seq) */
                CHECK(wq_delay_when(&gs->ready, gi, &when) && when == -(int64_t)g->lv.v[0].prio);
                CHECK(gs->ready.heap[gs->ready.pos[gi] - 1].seq == q->items[g->lv.v[0].head].seq);
            }
        }
        CHECK(check_refs(q) == 0);
    }
    CHECK(inlevels == q->stored);
    uint32_t n = 0, prev = NIL;
    for (uint32_t id = q->proc_head; id != NIL; id = q->items[id].next) {
        CHECK(q->items[id].flags & F_PROCESSING);
        CHECK(q->items[id].prev == prev);
        CHECK(prev == NIL || q->items[prev].get_ns <= q->items[id].get_ns);
        prev = id;
        CHECK(++n <= q->nprocessing);
    }
    CHECK(prev == q->proc_tail && n == q->nprocessing);
    return wq_delay_check(&q->delay);
}

uint32_t wq_queue_last_id(const wq_queue *q)
{
    return q->last_id;
}

int wq_queue_last_created(const wq_queue *q, int64_t *at)
{
    *at = q->last_ns;
    return q->last_created;
}

uint32_t wq_queue_event_id(const wq_queue *q)
{
    return q->ev_id;
}

uint32_t wq_queue_id_bound(const wq_queue *q)
{
    return q->nitems;
}
