/*
 * Groups and their limits (see group.h). Every placement is a heap
 * operation on the one group that changed, so a get costs O(log groups)
 * however many groups or records are held back.
 */
#include "engine/group.h"

#include <math.h>
#include <string.h>

void wq_pace_set(wq_pace *p, double rate, double burst)
{
    if (!(rate > 0)) {
        p->interval = 0;
        p->tolerance = 0;
        return;
    }
    double iv = (double)WQ_NS_PER_S / rate;
    p->interval = iv < 1 ? 1 : iv > (double)WQ_NEVER / 4 ? WQ_NEVER / 4 : (int64_t)iv;
    double b = burst >= 1 ? floor(burst) : 1;
    double tol = (b - 1) * (double)p->interval;
    p->tolerance = tol > (double)WQ_NEVER / 4 ? WQ_NEVER / 4 : (int64_t)tol;
}

int wq_groups_init(wq_groups *gs)
{
    memset(gs, 0, sizeof *gs);
    gs->free = UINT32_MAX;
    gs->names = wq_keymap_new();
    if (!gs->names)
        return WQ_ENOMEM;
    wq_delay_init(&gs->ready);
    wq_delay_init(&gs->wait);
    wq_delay_init(&gs->idle);
    return 0;
}

void wq_groups_destroy(wq_groups *gs)
{
    for (uint32_t i = 0; i < gs->n; i++) {
        wq_free(gs->v[i].name);
        wq_free(gs->v[i].lv.v);
    }
    wq_free(gs->v);
    wq_keymap_free(gs->names);
    wq_delay_destroy(&gs->ready);
    wq_delay_destroy(&gs->wait);
    wq_delay_destroy(&gs->idle);
    memset(gs, 0, sizeof *gs);
}

int64_t wq_groups_find(const wq_groups *gs, const char *name, size_t len)
{
    const uint64_t *v = wq_keymap_get(gs->names, name, len);
    return v ? (int64_t)*v : -1;
}

int64_t wq_groups_obtain(wq_groups *gs, const char *name, size_t len, int64_t now)
{
    int64_t found = wq_groups_find(gs, name, len);
    if (found >= 0)
        return found;
    if (len > WQ_GROUP_MAX)
        return WQ_E2BIG;
    wq_groups_sweep(gs, now);
    uint32_t gi = gs->free;
    uint32_t nids = gi != UINT32_MAX ? gs->n : gs->n + 1;
    if (gi == UINT32_MAX && gs->n == gs->cap) {
        uint32_t ncap = gs->cap ? gs->cap * 2 : 16;
        wq_group *nv = wq_realloc(gs->v, (size_t)ncap * sizeof *nv);
        if (!nv)
            return WQ_ENOMEM;
        gs->v = nv;
        gs->cap = ncap;
    }
    /* Each heap can then hold every group: placing never allocates. */
    if (wq_delay_room(&gs->ready, nids, gs->live + 1) < 0 ||
        wq_delay_room(&gs->wait, nids, gs->live + 1) < 0 ||
        wq_delay_room(&gs->idle, nids, gs->live + 1) < 0)
        return WQ_ENOMEM;
    char *copy = wq_malloc(len + 1);
    if (!copy)
        return WQ_ENOMEM;
    if (len)
        memcpy(copy, name, len);
    copy[len] = '\0';
    if (gi == UINT32_MAX)
        gi = gs->n;
    int created;
    uint64_t *slot = wq_keymap_put(gs->names, name, len, &created);
    if (!slot) {
        wq_free(copy);
        return WQ_ENOMEM;
    }
    *slot = gi;
    if (gi == gs->n)
        gs->n++;
    else
        gs->free = gs->v[gi].next_free;
    wq_group *g = &gs->v[gi];
    memset(g, 0, sizeof *g);
    g->name = copy;
    g->namelen = (uint32_t)len;
    g->lim = gs->dflt;
    wq_pace_set(&g->pace, g->lim.rate, g->lim.burst);
    gs->live++;
    return gi;
}

static void drop(wq_groups *gs, uint32_t gi)
{
    wq_group *g = &gs->v[gi];
    wq_keymap_del(gs->names, g->name, g->namelen);
    wq_free(g->name);
    wq_free(g->lv.v);
    memset(g, 0, sizeof *g);
    g->next_free = gs->free;
    gs->free = gi;
    gs->live--;
}

static wq_delay *heap_of(wq_groups *gs, uint8_t where)
{
    switch (where) {
    case WQ_G_READY: return &gs->ready;
    case WQ_G_WAIT: return &gs->wait;
    case WQ_G_IDLE: return &gs->idle;
    default: return NULL;
    }
}

/* Moves group gi to heap `where` with key (when, seq), or out of every heap. */
static void move(wq_groups *gs, uint32_t gi, uint8_t where, int64_t when, uint64_t seq)
{
    wq_group *g = &gs->v[gi];
    if (g->where != where) {
        wq_delay *from = heap_of(gs, g->where);
        if (from)
            wq_delay_cancel(from, gi);
        g->where = where;
    }
    wq_delay *to = heap_of(gs, where);
    if (to)
        wq_delay_set(to, gi, when, seq);
}

int wq_groups_place(wq_groups *gs, uint32_t gi, int64_t now, int32_t prio, uint64_t seq)
{
    wq_group *g = &gs->v[gi];
    uint8_t was = g->where;
    if (g->queued == 0) {
        if (g->refs == 0 && !g->own) {
            if (g->pace.interval && g->pace.tat > now) {
                move(gs, gi, WQ_G_IDLE, g->pace.tat, gs->seq++);
            } else {
                move(gs, gi, WQ_G_NONE, 0, 0);
                gs->held -= g->held;
                gs->nonempty -= g->nonempty;
                drop(gs, gi);
                return 0;
            }
        } else {
            move(gs, gi, WQ_G_NONE, 0, 0);
        }
    } else if (g->lim.concurrency && g->active >= g->lim.concurrency) {
        move(gs, gi, WQ_G_NONE, 0, 0); /* saturated: a done frees it */
    } else if (wq_pace_next(&g->pace) > now) {
        int64_t at = wq_pace_next(&g->pace);
        if (was != WQ_G_WAIT || gs->wait.heap[gs->wait.pos[gi] - 1].when != at)
            move(gs, gi, WQ_G_WAIT, at, gs->seq++);
    } else {
        /* Highest priority first, then the oldest head: (-prio, seq). */
        move(gs, gi, WQ_G_READY, -(int64_t)prio, seq);
    }
    uint32_t held = g->where == WQ_G_READY ? 0 : g->queued;
    gs->held += (uint64_t)held - g->held;
    g->held = held;
    uint8_t nonempty = g->queued > 0;
    gs->nonempty += (uint32_t)nonempty - g->nonempty;
    g->nonempty = nonempty;
    return g->where == WQ_G_READY && was != WQ_G_READY;
}

void wq_groups_set_default(wq_groups *gs, const wq_limit *lim)
{
    gs->dflt = *lim;
    for (uint32_t gi = 0; gi < gs->n; gi++) {
        wq_group *g = &gs->v[gi];
        if (!g->name || g->own)
            continue;
        g->lim = *lim;
        wq_pace_set(&g->pace, lim->rate, lim->burst);
    }
}

void wq_groups_set_limit(wq_groups *gs, uint32_t gi, const wq_limit *lim)
{
    wq_group *g = &gs->v[gi];
    g->own = lim != NULL;
    g->lim = lim ? *lim : gs->dflt;
    wq_pace_set(&g->pace, g->lim.rate, g->lim.burst);
}

/* Whether group a ranks before group b among the most held: more held, then the name. */
static int held_before(const wq_group *a, const wq_group *b)
{
    if (a->held != b->held)
        return a->held > b->held;
    size_t n = a->namelen < b->namelen ? a->namelen : b->namelen;
    int c = n ? memcmp(a->name, b->name, n) : 0;
    return c ? c < 0 : a->namelen < b->namelen;
}

/*
 * A bounded selection: out[0..k) stays sorted, each held group is inserted
 * where it ranks, the last one falling off once max are kept. max is small
 * (a dashboard's top ten), so this costs O(groups x max) at worst and
 * allocates nothing.
 */
int64_t wq_groups_most_held(const wq_groups *gs, uint32_t *out, size_t max)
{
    int64_t total = 0;
    size_t k = 0;
    for (uint32_t gi = 0; gi < gs->n; gi++) {
        const wq_group *g = &gs->v[gi];
        if (!g->name || g->held == 0)
            continue;
        total++;
        if (k == max && (k == 0 || !held_before(g, &gs->v[out[k - 1]])))
            continue;
        size_t i = k < max ? k++ : k - 1;
        while (i > 0 && held_before(g, &gs->v[out[i - 1]])) {
            out[i] = out[i - 1];
            i--;
        }
        out[i] = gi;
    }
    return total;
}

void wq_groups_sweep(wq_groups *gs, int64_t now)
{
    while (wq_delay_len(&gs->idle) && wq_delay_next(&gs->idle) <= now) {
        uint32_t gi = wq_delay_top(&gs->idle);
        wq_delay_cancel(&gs->idle, gi);
        gs->v[gi].where = WQ_G_NONE;
        drop(gs, gi);
    }
}

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c))                                                                                  \
            return -1;                                                                             \
    } while (0)

int wq_groups_check(const wq_groups *gs, int64_t now)
{
    uint32_t live = 0, nonempty = 0;
    uint64_t held = 0;
    for (uint32_t gi = 0; gi < gs->n; gi++) {
        const wq_group *g = &gs->v[gi];
        int64_t when;
        CHECK(wq_delay_when(&gs->ready, gi, &when) == (g->name && g->where == WQ_G_READY));
        CHECK(wq_delay_when(&gs->wait, gi, &when) == (g->name && g->where == WQ_G_WAIT));
        CHECK(wq_delay_when(&gs->idle, gi, &when) == (g->name && g->where == WQ_G_IDLE));
        if (!g->name)
            continue;
        live++;
        const uint64_t *v = wq_keymap_get(gs->names, g->name, g->namelen);
        CHECK(v && *v == gi);
        CHECK(g->queued <= g->refs && g->active <= g->refs);
        nonempty += g->queued > 0;
        CHECK(g->nonempty == (g->queued > 0));
        CHECK(g->held == (g->where == WQ_G_READY ? 0 : g->queued));
        held += g->held;
        CHECK(g->own || (g->lim.concurrency == gs->dflt.concurrency &&
                         g->lim.rate == gs->dflt.rate && g->lim.burst == gs->dflt.burst));
        int saturated = g->lim.concurrency && g->active >= g->lim.concurrency;
        switch (g->where) {
        case WQ_G_READY:
            CHECK(g->queued > 0 && !saturated);
            CHECK(wq_pace_next(&g->pace) <= now);
            break;
        case WQ_G_WAIT:
            CHECK(g->queued > 0 && !saturated);
            wq_delay_when(&gs->wait, gi, &when);
            CHECK(when == wq_pace_next(&g->pace));
            break;
        case WQ_G_IDLE: CHECK(g->refs == 0 && !g->own); break;
        default: CHECK(g->queued == 0 || saturated); break;
        }
        CHECK(g->refs > 0 || g->own || g->where == WQ_G_IDLE);
    }
    CHECK(live == gs->live && live == wq_keymap_count(gs->names));
    CHECK(nonempty == gs->nonempty && held == gs->held);
    CHECK(wq_delay_check(&gs->ready) == 0 && wq_delay_check(&gs->wait) == 0 &&
          wq_delay_check(&gs->idle) == 0);
    return 0;
}
