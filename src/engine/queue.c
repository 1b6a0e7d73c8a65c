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
 */
#include "engine/queue.h"

#include "engine/delay.h"
#include "engine/slab.h"

#include <assert.h>
#include <string.h>

#define NIL UINT32_MAX

enum { F_DIRTY = 1, F_PROCESSING = 2, F_QUEUED = 4, F_WAITING = 8, F_PAYLOAD = 16 };

struct item {
    char *data;     /* key bytes; with F_PAYLOAD then paylen (PAYLEN_SIZE bytes) and payload */
    int64_t add_ns; /* when it last became dirty */
    int64_t get_ns; /* when it was handed out */
    uint32_t next;  /* level list, processing list or free list */
    uint32_t prev;
    uint32_t keylen : 27;
    uint32_t flags : 5;
    int32_t prio;
};

/* The memory budget (64 bytes per item besides the key, bench/RESULTS.md) counts on this. */
_Static_assert(sizeof(struct item) <= 40, "struct item grew");

/* Bytes of the payload length stored after the key (unaligned, host order). */
#define PAYLEN_SIZE 4

struct level {
    int32_t prio;
    uint32_t head, tail;
    uint32_t count;
};

struct wq_queue {
    const wq_clock *clock;
    struct item *items;
    uint32_t nitems, cap; /* ids in use are < nitems */
    uint32_t free_ids;    /* free list of ids through next */
    uint32_t nrecords;
    uint64_t *table; /* hash << 32 | (id + 1), 0 empty */
    uint32_t mask;
    struct level *levels; /* sorted by prio, highest first; never empty lists */
    uint32_t nlevels, levels_cap;
    uint32_t stored;               /* records in the ready store */
    uint32_t proc_head, proc_tail; /* processing list, oldest first */
    uint32_t nprocessing;
    wq_delay delay;
    wq_slab slab;
    wq_metrics metrics;
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
    q->levels_cap = 8;
    q->levels = wq_malloc(q->levels_cap * sizeof *q->levels);
    if (!q->table || !q->levels) {
        wq_free(q->table);
        wq_free(q->levels);
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
    wq_free(q->levels);
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
                           const wq_add_opts *o)
{
    if ((q->nrecords + 1) * 2 > q->mask + 1) {
        if (grow_table(q) < 0)
            return NIL;
        *slot = empty_slot(q->table, q->mask, h);
    }
    uint32_t id = q->free_ids;
    if (id == NIL && q->nitems == q->cap) {
        uint32_t ncap = q->cap ? q->cap * 2 : 64;
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
    if (tell)
        emit(q, WQ_EV_GONE, it);
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

/* ---- the ready store ---- */

/* Index of prio's level, or where it would be inserted (*found = 0). */
static uint32_t level_index(const wq_queue *q, int32_t prio, int *found)
{
    uint32_t lo = 0, hi = q->nlevels;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (q->levels[mid].prio == prio) {
            *found = 1;
            return mid;
        }
        if (q->levels[mid].prio > prio)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = 0;
    return lo;
}

/* Makes sure a level for prio exists. Returns its index or WQ_ENOMEM. */
static int64_t ensure_level(wq_queue *q, int32_t prio)
{
    int found;
    uint32_t i = level_index(q, prio, &found);
    if (found)
        return i;
    if (q->nlevels == q->levels_cap) {
        uint32_t ncap = q->levels_cap * 2;
        struct level *nl = wq_realloc(q->levels, (size_t)ncap * sizeof *nl);
        if (!nl)
            return WQ_ENOMEM;
        q->levels = nl;
        q->levels_cap = ncap;
    }
    memmove(&q->levels[i + 1], &q->levels[i], (q->nlevels - i) * sizeof *q->levels);
    q->levels[i] = (struct level){prio, NIL, NIL, 0};
    q->nlevels++;
    return i;
}

static void level_drop(wq_queue *q, uint32_t li)
{
    q->nlevels--;
    memmove(&q->levels[li], &q->levels[li + 1], (q->nlevels - li) * sizeof *q->levels);
}

/* Drops prio's level if it exists and is empty (undoes an unused ensure_level). */
static void trim_level(wq_queue *q, int32_t prio)
{
    int found;
    uint32_t li = level_index(q, prio, &found);
    if (found && q->levels[li].count == 0)
        level_drop(q, li);
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

static void store_push(wq_queue *q, uint32_t li, uint32_t id)
{
    struct level *l = &q->levels[li];
    link_append(q, &l->head, &l->tail, id);
    l->count++;
    q->items[id].flags |= F_QUEUED;
    q->stored++;
}

/* Unlinks id from its level (dropping the level when it empties). */
static void store_unlink(wq_queue *q, uint32_t id)
{
    struct item *it = &q->items[id];
    int found;
    uint32_t li = level_index(q, it->prio, &found);
    assert(found);
    struct level *l = &q->levels[li];
    link_remove(q, &l->head, &l->tail, id);
    it->flags &= ~F_QUEUED;
    q->stored--;
    if (--l->count == 0)
        level_drop(q, li);
}

/* Appends a dirty, not processing record to the store. 0 or WQ_ENOMEM. */
static int enqueue(wq_queue *q, uint32_t id)
{
    int64_t li = ensure_level(q, q->items[id].prio);
    if (li < 0)
        return (int)li;
    store_push(q, (uint32_t)li, id);
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

static int64_t now(const wq_queue *q)
{
    return wq_clock_now(q->clock);
}

/*
 * Looks key up, creating a record if needed. *created tells which, *slot
 * where the table holds it. Returns the id, or a negative error with
 * nothing changed.
 */
static int64_t obtain(wq_queue *q, const char *key, size_t len, const wq_add_opts *o, int *created,
                      uint32_t *slot)
{
    if (len > WQ_KEY_MAX || !payload_ok(o))
        return WQ_E2BIG;
    uint32_t h = key_hash(key, len);
    *slot = find_slot(q, key, len, h);
    uint64_t v = q->table[*slot];
    if (v) {
        *created = 0;
        q->last_id = slot_id(v);
        q->last_created = 0;
        return slot_id(v);
    }
    uint32_t id = new_record(q, key, len, h, slot, o);
    if (id == NIL)
        return WQ_ENOMEM;
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
    int move = o->set_priority && (it->flags & F_QUEUED) && o->priority > it->prio;
    if (move && ensure_level(q, o->priority) < 0)
        return WQ_ENOMEM;
    if (o->set_payload) {
        int r = set_payload(q, id, o->payload, o->paylen);
        if (r < 0) {
            if (move)
                trim_level(q, o->priority);
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
                uint32_t li = level_index(q, it->prio, &found);
                assert(found);
                store_push(q, li, id);
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
        if (queue_now && ensure_level(q, prio) < 0)
            return WQ_ENOMEM;
        int c = apply_opts(q, id, o);
        if (c < 0) {
            if (queue_now)
                trim_level(q, prio);
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

int wq_queue_get(wq_queue *q, wq_item_info *out)
{
    if (!q->stored || q->paused)
        return q->shutting_down ? WQ_ESHUTDOWN : WQ_EEMPTY;
    uint32_t id = q->levels[0].head;
    struct item *it = &q->items[id];
    /* A fast worker's done follows its get at once, too soon for the
     * done's table slot (a cache miss in a large table) to load in the
     * meantime. Start loading the slot of the record two places after this
     * one in the queue: by the time its get and done come, the line is in
     * cache. */
    uint32_t ahead = it->next != NIL ? q->items[it->next].next : NIL;
    if (ahead != NIL)
        prefetch_slot(q, ahead);
    store_unlink(q, id);
    int64_t t = now(q);
    it->flags = (it->flags & ~F_DIRTY) | F_PROCESSING;
    q->metrics.depth--;
    wq_histogram_observe(&q->metrics.queue_latency, (double)(t - it->add_ns) / 1e9);
    it->get_ns = t;
    proc_push(q, id);
    emit(q, WQ_EV_PROCESSING, it);
    if (out)
        fill_info(q, id, out);
    return 0;
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
    if ((it->flags & F_DIRTY) && ensure_level(q, it->prio) < 0)
        return WQ_ENOMEM;
    proc_unlink(q, id);
    it->flags &= ~F_PROCESSING;
    wq_histogram_observe(&q->metrics.work_duration, (double)(now(q) - it->get_ns) / 1e9);
    if (it->flags & F_DIRTY) {
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
    return q->shutting_down ? WQ_NEVER : wq_delay_next(&q->delay);
}

int wq_queue_fire_due(wq_queue *q)
{
    if (q->shutting_down)
        return 0;
    int64_t t = now(q);
    int n = 0;
    wq_delay_entry e;
    while (wq_delay_next(&q->delay) <= t) {
        uint32_t id = q->delay.heap[0].id;
        struct item *it = &q->items[id];
        if (!(it->flags & (F_DIRTY | F_PROCESSING)) && ensure_level(q, it->prio) < 0)
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
}

int wq_queue_lookup(const wq_queue *q, const char *key, size_t len, wq_item_info *info)
{
    uint32_t slot = find(q, key, len);
    if (slot == NIL)
        return 0;
    fill_info(q, slot_id(q->table[slot]), info);
    return 1;
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
    /* Each level: non-empty, sorted, linked both ways, members queued at that priority. */
    uint32_t inlevels = 0;
    for (uint32_t li = 0; li < q->nlevels; li++) {
        const struct level *l = &q->levels[li];
        CHECK(l->count > 0);
        CHECK(li == 0 || q->levels[li - 1].prio > l->prio);
        uint32_t n = 0, prev = NIL;
        for (uint32_t id = l->head; id != NIL; id = q->items[id].next) {
            CHECK(id < q->nitems);
            CHECK(q->items[id].prev == prev);
            CHECK(q->items[id].flags & F_QUEUED);
            CHECK(q->items[id].prio == l->prio);
            prev = id;
            CHECK(++n <= q->nrecords);
        }
        CHECK(prev == l->tail && n == l->count);
        inlevels += n;
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
