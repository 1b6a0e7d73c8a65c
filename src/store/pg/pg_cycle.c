/*
 * The PostgreSQL backend's cycle (see pg.c): the claims this runner holds
 * in each queue, and the round trips that write the adds, then the
 * outcomes read from the engine and the next claims, handing what they
 * claimed to the runtime once their transaction committed; the floors
 * claims start from.
 */
#include "store/pg/pg_int.h"

#include "engine/common.h"
#include "engine/keymap.h"
#include "engine/log.h"
#include "store/pg/pg_schema.h"
#include "store/pg/pgconn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t hash_bytes(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211ULL;
    return h ^ n;
}

/* ---- a growable byte buffer ---- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t ncap = b->cap ? b->cap * 2 : 256;
        while (ncap < b->n + n + 1)
            ncap *= 2;
        char *np = realloc(b->p, ncap);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = ncap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_str(sbuf *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

/* A JSON string (s is valid UTF-8 without NUL: checked when the add came in). */
static void sb_json_str(sbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    const char *from = s;
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        sb_put(b, from, (size_t)(p - from));
        char esc[8];
        if (c == '"' || c == '\\')
            snprintf(esc, sizeof esc, "\\%c", c);
        else
            snprintf(esc, sizeof esc, "\\u%04x", c);
        sb_str(b, esc);
        from = p + 1;
    }
    sb_str(b, from);
    sb_put(b, "\"", 1);
}

/* An element of a PostgreSQL array literal: quoted, " and \ escaped; s NULL: NULL. */
static void sb_elem(sbuf *b, const char *s, size_t n)
{
    if (b->n && b->p[b->n - 1] != '{')
        sb_put(b, ",", 1);
    if (!s) {
        sb_put(b, "NULL", 4);
        return;
    }
    sb_put(b, "\"", 1);
    size_t from = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '"' || s[i] == '\\') {
            sb_put(b, s + from, i - from);
            sb_put(b, "\\", 1);
            from = i;
        }
    }
    sb_put(b, s + from, n - from);
    sb_put(b, "\"", 1);
}

/* ---- claims of one queue ---- */

claim *wq_pgb_slot_of(pgq *q, const char *key, size_t len, uint32_t *slot)
{
    uint64_t *v = wq_keymap_get(q->keys, key, len);
    if (!v)
        return NULL;
    *slot = (uint32_t)*v;
    return &q->claims[*slot];
}

static int new_slot(pgq *q, uint32_t *slot)
{
    if (q->nfree) {
        *slot = q->free[--q->nfree];
        return 0;
    }
    if (q->nclaims == q->cap) {
        uint32_t ncap = q->cap ? q->cap * 2 : 64;
        claim *n = realloc(q->claims, ncap * sizeof *n);
        uint32_t *f = realloc(q->free, ncap * sizeof *f);
        if (n)
            q->claims = n;
        if (f)
            q->free = f;
        if (!n || !f)
            return WQ_ENOMEM;
        q->cap = ncap;
    }
    *slot = q->nclaims++;
    return 0;
}

static void drop_claim(pgq *q, uint32_t slot, int tell)
{
    claim *c = &q->claims[slot];
    if (!c->used)
        return;
    /* The key may have been claimed again already (the same transaction that wrote this
     * outcome made it pending again): then the map and the runtime's state are the new
     * claim's. */
    uint64_t *v = wq_keymap_get(q->keys, c->key, c->keylen);
    if (v && *v == slot) {
        wq_keymap_del(q->keys, c->key, c->keylen);
        if (tell && q->hooks.released)
            q->hooks.released(q->hooks.ud, c->key, c->keylen);
    }
    if (tell && q->hooks.committed)
        q->hooks.committed(q->hooks.ud, c->key, c->keylen);
    free(c->key);
    free(c->err);
    free(c->result);
    free(c->nres);
    memset(c, 0, sizeof *c);
    q->free[q->nfree++] = slot;
}

void wq_pgb_touch_slot(pgq *q, uint32_t slot)
{
    claim *c = &q->claims[slot];
    if (c->touched || c->sent)
        return;
    if (q->ntouched == q->tcap) {
        size_t ncap = q->tcap ? q->tcap * 2 : 64;
        uint32_t *n = realloc(q->touched, ncap * sizeof *n);
        if (!n)
            return; /* read again at the next touch */
        q->touched = n;
        q->tcap = ncap;
    }
    c->touched = 1;
    q->touched[q->ntouched++] = slot;
}

/* Forgets every claim of q (lease lost: they run elsewhere now), telling the runtime. */
void wq_pgb_lose_claims(pgq *q, const char *why)
{
    if (!q->q)
        return;
    if (q->hooks.lost)
        q->hooks.lost(q->hooks.ud, why);
    for (uint32_t i = 0; i < q->nclaims; i++) {
        if (!q->claims[i].used)
            continue;
        /* A claimed item no handler started leaves the engine at once. */
        wq_queue_remove(q->q, q->claims[i].key, q->claims[i].keylen);
        drop_claim(q, i, 1);
    }
    q->ntouched = 0;
    for (size_t i = 0; i < q->nsent; i++) {
        free(q->sent[i].err);
        free(q->sent[i].payload);
        free(q->sent[i].done);
        free(q->sent[i].nres);
    }
    q->nsent = q->nflight = 0;
}

/* ---- the cycle: adds, then outcomes and claims, one round trip ---- */

static void add_result(void *ud, PGresult *res);
static void add_many_result(void *ud, PGresult *res);
static void adds_synced(void *ud, int ok);
static void finish_result(void *ud, PGresult *res);
static void claim_result(void *ud, PGresult *res);
static void outcomes_synced(void *ud, int ok);
static void claims_synced(void *ud, int ok);
static void next_at_result(void *ud, PGresult *res);
static void floor_clock_result(void *ud, PGresult *res);
static void floor_xid_result(void *ud, PGresult *res);
static void floor_min_result(void *ud, PGresult *res);

void wq_pgb_free_add(padd *a)
{
    for (int i = 0; i < 8; i++)
        free(a->params[i]);
}

/* Room for one more outcome in q->sent: 0, or -1 (out of memory: nothing changed). */
static int sent_room(pgq *q)
{
    if (q->nsent < q->scap)
        return 0;
    size_t ncap = q->scap ? q->scap * 2 : 64;
    outcome *ns = realloc(q->sent, ncap * sizeof *ns);
    if (!ns)
        return -1;
    q->sent = ns;
    q->scap = ncap;
    return 0;
}

/* Builds q's outcomes from the engine's state of each touched key. */
static void build_outcomes(pgq *q)
{
    const wq_timebase *tb = &q->b->tb;
    double now = wq_pgb_wall_s();
    size_t n = q->ntouched;
    q->ntouched = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t slot = q->touched[i];
        claim *c = &q->claims[slot];
        /* Sent already: touched again by the removal below (its outcome's transaction may
         * have failed since; the outcome goes again as it was, never built a second time). */
        if (!c->used || c->sent)
            continue;
        c->touched = 0;
        wq_item_info info;
        int have = wq_queue_lookup(q->q, c->key, c->keylen, &info) == 1;
        if (have && (info.state & (WQ_ST_PROCESSING | WQ_ST_QUEUED)))
            continue; /* running, or claimed and not started yet */
        outcome o = {slot, WQ_PGF_DONE, 0, c->requeues, NULL, NULL, NULL, NULL, 0};
        if (c->dead) {
            o.kind = WQ_PGF_DEAD;
            o.requeues = c->attempts;
            o.err = c->err ? strdup(c->err) : NULL;
        } else if (have && (info.state & WQ_ST_WAITING)) {
            o.kind = WQ_PGF_RETRY;
            o.delay = tb->to_unix(tb->ud, info.ready_at) - now;
            if (o.delay < 0)
                o.delay = 0;
            o.requeues = c->new_requeues >= 0 ? c->new_requeues : c->requeues;
            o.err = c->err && o.requeues > 0 ? strdup(c->err) : NULL;
            if (info.payload && hash_bytes(info.payload, info.paylen) != c->payhash) {
                o.payload = malloc(info.paylen + 1);
                if (o.payload) {
                    memcpy(o.payload, info.payload, info.paylen);
                    o.payload[info.paylen] = '\0';
                }
            }
            wq_queue_remove(q->q, c->key, c->keylen); /* the database holds the retry now */
        } else if (c->new_requeues == 0) {
            o.kind = WQ_PGF_SUCCESS;
            o.done = c->result; /* the outcome owns it now */
            o.keep = c->keep;
            c->result = NULL;
        }
        if (c->hcancel && (o.kind == WQ_PGF_SUCCESS || o.kind == WQ_PGF_DONE))
            o.kind = WQ_PGF_CANCELLED; /* its history says cancelled */
        if (c->node && (o.kind == WQ_PGF_SUCCESS || o.kind == WQ_PGF_DONE)) {
            /* A flow node's item leaves: done with its result, or cancelled (a cancel was
             * signalled for it and its handler gave no result: it did not succeed). */
            if (!c->node_ok && c->cancelled)
                o.kind = WQ_PGF_CANCELLED;
            o.nres = c->nres;
            c->nres = NULL;
        }
        if (sent_room(q) < 0) {
            free(o.err);
            free(o.payload);
            c->nres = o.nres;
            c->result = o.done;
            wq_pgb_touch_slot(q, slot); /* try again at the next cycle */
            continue;
        }
        c->sent = 1;
        q->sent[q->nsent++] = o;
    }
}

/* Hands back every claimed item no handler started (graceful stop). */
static void release_unstarted(pgq *q)
{
    for (uint32_t i = 0; i < q->nclaims; i++) {
        claim *c = &q->claims[i];
        if (!c->used || c->sent)
            continue;
        wq_item_info info;
        if (wq_queue_lookup(q->q, c->key, c->keylen, &info) != 1 ||
            (info.state & WQ_ST_PROCESSING) || !(info.state & WQ_ST_QUEUED))
            continue;
        wq_queue_remove(q->q, c->key, c->keylen);
        if (sent_room(q) < 0)
            return;
        c->sent = 1;
        q->sent[q->nsent++] =
            (outcome){i, WQ_PGF_RELEASE, 0, c->requeues, NULL, NULL, NULL, NULL, 0};
    }
}

static int send_finish(pgb *b, pgq *q, wq_pgconn *conn, size_t take)
{
    if (!q->nsent)
        return 0;
    sbuf keys = {0}, toks = {0}, kinds = {0}, delays = {0}, reqs = {0}, errs = {0}, pays = {0},
         done = {0}, nres = {0};
    int any_done = 0, any_nres = 0, keep = 0;
    sb_str(&keys, "{");
    sb_str(&toks, "{");
    sb_str(&kinds, "{");
    sb_str(&delays, "{");
    sb_str(&reqs, "{");
    sb_str(&errs, "{");
    sb_str(&pays, "{");
    sb_str(&done, "{");
    sb_str(&nres, "{");
    for (size_t i = 0; i < q->nsent; i++) {
        outcome *o = &q->sent[i];
        claim *c = &q->claims[o->slot];
        char num[40];
        sb_elem(&keys, c->key, c->keylen);
        snprintf(num, sizeof num, "%lld", (long long)c->token);
        sb_elem(&toks, num, strlen(num));
        snprintf(num, sizeof num, "%d", o->kind);
        sb_elem(&kinds, num, strlen(num));
        snprintf(num, sizeof num, "%.9f", o->delay);
        sb_elem(&delays, num, strlen(num));
        snprintf(num, sizeof num, "%lld", (long long)o->requeues);
        sb_elem(&reqs, num, strlen(num));
        sb_elem(&errs, o->err, o->err ? strlen(o->err) : 0);
        sb_elem(&pays, o->payload, o->payload ? strlen(o->payload) : 0);
        sb_elem(&done, o->done, o->done ? strlen(o->done) : 0);
        any_done |= o->done != NULL;
        keep |= o->keep;
        sb_elem(&nres, o->nres, o->nres ? strlen(o->nres) : 0);
        any_nres |= o->nres != NULL;
    }
    sb_str(&keys, "}");
    sb_str(&toks, "}");
    sb_str(&kinds, "}");
    sb_str(&delays, "}");
    sb_str(&reqs, "}");
    sb_str(&errs, "}");
    sb_str(&pays, "}");
    sb_str(&done, "}");
    sb_str(&nres, "}");
    int r = -1;
    if (!keys.oom && !toks.oom && !kinds.oom && !delays.oom && !reqs.oom && !errs.oom &&
        !pays.oom && !done.oom && !nres.oom) {
        char tk[24];
        snprintf(tk, sizeof tk, "%zu", take);
        /* the results go for keep_done or the history; done keeps them for keep_done only */
        int hist = !q->has_def || q->def.history > 0;
        const char *v[14] = {q->name,
                             b->runner_id_s,
                             keys.p,
                             toks.p,
                             kinds.p,
                             delays.p,
                             reqs.p,
                             errs.p,
                             pays.p,
                             any_done ? done.p : NULL,
                             tk,
                             any_nres ? nres.p : NULL,
                             keep ? "true" : "false",
                             hist ? "true" : "false"};
        r = wq_pgconn_send(conn, wq_pg_stmts[PGS_FINISH].name, NULL, 14, v, finish_result, q);
        if (r == 0) {
            q->take_out = take;
            q->handed = 0;
            q->nflight = q->nsent;
        }
    }
    free(keys.p);
    free(toks.p);
    free(kinds.p);
    free(delays.p);
    free(reqs.p);
    free(errs.p);
    free(pays.p);
    free(done.p);
    free(nres.p);
    return r;
}

/* The first statement of every claim transaction: the database's clock, before the
 * transaction has an id (see pgq's floor). */
static void claim_txn_begin(pgb *b)
{
    if (b->clock_in_txn)
        return;
    if (wq_pgconn_send(b->c, wq_pg_stmts[PGS_FLOOR_CLOCK].name, NULL, 0, NULL, floor_clock_result,
                       b) == 0) {
        b->clock_in_txn = 1;
        b->clock_asked = wq_pgb_real_ns();
        b->txn_clock = NAN; /* until it comes back */
    }
}

static void floor_drop(pgq *q)
{
    q->floor_at = -INFINITY;
    q->nmarks = 0;
    q->floor_gen++;
}

/* An epoch as a statement parameter (-Infinity for none). */
static void fmt_epoch(char *buf, size_t n, double t)
{
    if (isinf(t))
        snprintf(buf, n, "%s", t < 0 ? "-Infinity" : "Infinity");
    else
        snprintf(buf, n, "%.6f", t);
}

static void send_claim(pgb *b, pgq *q, size_t want)
{
    char lim[24], fl[40], rs[24];
    q->claim_want = want > CLAIM_MAX ? (size_t)CLAIM_MAX : want;
    snprintf(lim, sizeof lim, "%zu", q->claim_want);
    int64_t now = wq_pgb_real_ns();
    int st = q->limited ? PGS_CLAIM_GROUPED : PGS_CLAIM, n = 5;
    int64_t every = (int64_t)FULL_MS * 1000000;
    if (every < 4 * q->full_took)
        every = 4 * q->full_took;
    if (st == PGS_CLAIM && q->hint && now - q->last_full < every)
        st = PGS_CLAIM_FROM;
    fmt_epoch(fl, sizeof fl, q->floor_at);
    if (st != PGS_CLAIM_GROUPED && !q->probing && (q->more || q->hint) &&
        now - q->floor_sent >= (int64_t)FLOOR_MS * 1000000) {
        /* a busy queue: move its floor on (the clock is this transaction's first statement) */
        const char *pv[2] = {q->name, fl};
        if (wq_pgconn_send(b->c, wq_pg_stmts[PGS_FLOOR_XID].name, NULL, 1, pv, floor_xid_result,
                           q) == 0 &&
            wq_pgconn_send(b->c, wq_pg_stmts[PGS_FLOOR_MIN].name, NULL, 2, pv, floor_min_result,
                           q) == 0) {
            q->probing = 2;
            q->probe_gen = q->floor_gen;
            q->floor_sent = now;
        }
    }
    snprintf(rs, sizeof rs, "%lld", q->floor_resets);
    const char *v[8] = {q->name, lim, b->runner_id_s, fl, rs, NULL, NULL, NULL};
    if (st == PGS_CLAIM_GROUPED) {
        n = 3;
    } else if (st == PGS_CLAIM_FROM) {
        v[3] = q->hint_prio;
        v[4] = q->hint_at;
        v[5] = q->hint_seq;
        v[6] = fl;
        v[7] = rs;
        n = 8;
    }
    if (wq_pgconn_send(b->c, wq_pg_stmts[st].name, NULL, n, v, claim_result, q) == 0) {
        if (st == PGS_CLAIM)
            q->last_full = now;
        q->claim_from = st == PGS_CLAIM_FROM;
        q->claim_sent = now;
        q->claiming = 1;
        q->more = 0;
        q->last_poll = now;
    }
}

static void send_waiting(pgb *b, pgq *q)
{
    if (q->want_waiting == q->waiting_db)
        return;
    const char *v[3] = {q->name, b->runner_id_s, q->want_waiting ? "true" : "false"};
    if (wq_pgconn_send(b->c, wq_pg_stmts[PGS_WAITING].name, NULL, 3, v, NULL, NULL) == 0)
        q->waiting_db = q->want_waiting;
}

void wq_pgb_on_cycle(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    pgb *b = arg;
    if (!b->registered || !wq_pgconn_up(b->c))
        return;
    int64_t now_real = wq_pgb_real_ns();
    for (pgq *q = b->queues; q; q = q->next)
        wq_pgb_send_define(b, q);
    if (b->nout && !b->outbox_flight) {
        size_t n = 0;
        b->outbox_seen = 0; /* before sending: a loss answers the sent ones at once */
        b->outbox_synced = 0;
        /* Each in a transaction of its own: two runners firing the same times in another
         * order would otherwise each hold a row the other waits for (a deadlock). */
        for (; n < b->nout; n++) {
            char *sql = wq_pg_sql(wq_pgconn_pg(b->c), b->schema, b->outbox[n].sql);
            int r = sql ? wq_pgconn_send(b->c, NULL, sql, b->outbox[n].n,
                                         (const char *const *)b->outbox[n].params,
                                         wq_pgb_outbox_result, b)
                        : -1;
            free(sql);
            if (r < 0 || wq_pgconn_sync(b->c, wq_pgb_outbox_synced, b) < 0)
                break;
        }
        b->outbox_flight = (int)n;
    }
    if (b->control_again && !b->control_flight) {
        b->control_again = 0;
        wq_pgb_send_control(b);
    }
    /* The adds: one transaction of their own, so that an outcome never waits on them. */
    if (b->nadds && !b->adds_flight) {
        size_t n = b->nadds;
        /* All in one wqrun.add_many(); an add that made a batch fail goes alone next time. */
        sbuf js = {0};
        size_t nbatch = 0;
        sb_str(&js, "[");
        for (size_t i = 0; i < n; i++) {
            padd *a = &b->adds[i];
            if (a->single)
                continue;
            if (nbatch++)
                sb_str(&js, ",");
            /* params: queue, key, payload (JSON), after, priority (numbers), group, force,
             * unique */
            static const char *const field[8] = {
                "{\"queue\":",    ",\"key\":",   ",\"payload\":", ",\"after\":",
                ",\"priority\":", ",\"group\":", ",\"force\":",   ",\"unique\":"};
            for (int f = 0; f < 8; f++) {
                if (!a->params[f])
                    continue;
                sb_str(&js, field[f]);
                if (f == 0 || f == 1 || f == 5)
                    sb_json_str(&js, a->params[f]);
                else
                    sb_str(&js, a->params[f]);
            }
            sb_str(&js, "}");
        }
        sb_str(&js, "]");
        int down = js.oom;
        if (nbatch && !down) {
            const char *v[1] = {js.p};
            down = wq_pgconn_send(b->c, wq_pg_stmts[PGS_ADD_MANY].name, NULL, 1, v, add_many_result,
                                  b) < 0;
        }
        free(js.p);
        for (size_t i = 0; i < n && !down; i++) {
            padd *a = &b->adds[i];
            if (a->single && wq_pgconn_send(b->c, "wq_add", NULL, 8, (const char *const *)a->params,
                                            add_result, a) < 0)
                down = 1;
        }
        if (down)
            return; /* the loss handler keeps them (or the next cycle tries again) */
        b->adds_sent = b->adds;
        b->nadds_sent = n;
        b->adds = NULL;
        b->nadds = b->acap = 0;
        if (wq_pgconn_sync(b->c, adds_synced, b) < 0)
            return;
        b->adds_flight = 1;
    }
    /* Outcomes: a transaction on the second connection (the first when it is down). */
    wq_pgconn *oc = b->c2 && wq_pgconn_up(b->c2) ? b->c2 : b->c;
    if (!b->out_flight) {
        b->out_conn = oc;
        int any = 0;
        for (pgq *q = b->queues; q; q = q->next) {
            if (q->ntouched && q->q)
                build_outcomes(q);
            if (b->stopping && q->q)
                release_unstarted(q);
            if (q->nsent) {
                /* A limited queue's outcomes claim what this runner can start now (that no
                 * claim in flight asked for) in the same transaction: the next items of
                 * their groups, handed over in the slots they free, and what else is first.
                 * One per outcome at least while tasks wait in get (the workers of these
                 * outcomes are on their way back there; a claim in flight may find nothing):
                 * freed slots are not left to be claimed back the slow way. */
                size_t take = 0;
                if (q->limited && !b->stopping && !q->stopped && q->q && q->hooks.demand) {
                    size_t demand = q->hooks.demand(q->hooks.ud);
                    size_t asked = q->claiming ? q->claim_want : 0;
                    size_t at_least = demand ? q->nsent : 0;
                    take = demand > asked ? demand - asked : 0;
                    if (take < at_least)
                        take = at_least;
                    if (take > CLAIM_MAX)
                        take = CLAIM_MAX;
                }
                if (send_finish(b, q, oc, take) < 0)
                    return;
                any = 1;
            }
        }
        if (any) {
            if (wq_pgconn_sync(oc, outcomes_synced, b) < 0)
                return;
            b->out_flight = 1;
            b->out_txn++;
            b->cycle_started = wq_pgb_wall_s();
        } else if (b->ops_waiting && b->ops_waiting->need > b->out_done_txn) {
            b->out_done_txn = ++b->out_txn; /* nothing to write: as good as committed */
            wq_pgb_send_waiting_ops(b);
        }
    }
    /* Claims (and the waiting rows): a transaction on the first. */
    if (b->claim_flight)
        return;
    int any = 0;
    for (pgq *q = b->queues; q; q = q->next) {
        if (b->stopping || q->stopped || !q->hooks.demand)
            continue;
        size_t want = q->hooks.demand(q->hooks.ud);
        int is_due = q->due_at && now_real >= q->due_at;
        /* the finish in flight brings them, unless an item is due now (a rate-held group's
         * next one: a token not claimed at once is lost) */
        if (!is_due)
            want = want > q->take_out ? want - q->take_out : 0;
        q->want_waiting = want > 0;
        if (want > 0 &&
            (q->more || is_due || now_real - q->last_poll >= (int64_t)POLL_MS * 1000000)) {
            if (is_due)
                q->due_at = 0;
            claim_txn_begin(b);
            send_claim(b, q, want);
            any = 1;
        }
        if (want == 0 && q->waiting_db == 1) {
            claim_txn_begin(b);
            send_waiting(b, q);
            any = 1;
        }
    }
    b->clock_in_txn = 0;
    if (any && wq_pgconn_sync(b->c, claims_synced, b) == 0)
        b->claim_flight = 1;
}

static void add_result(void *ud, PGresult *res)
{
    padd *a = ud;
    /* The answer is told at the sync, once committed: keep the text in params[0]. */
    if (res && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
        free(a->params[0]);
        a->params[0] = strdup(PQgetvalue(res, 0, 0));
        a->answered = 1;
    } else if (res && PQresultStatus(res) == PGRES_FATAL_ERROR && !wq_pg_transient(res)) {
        char msg[400];
        wq_pg_msg(msg, sizeof msg, PQresultErrorMessage(res));
        free(a->params[0]);
        a->params[0] = strdup(msg);
        a->answered = -1;
    }
}

/* The answer of a batch: a JSON array of outcome words, one per batched add, in order. */
static void add_many_result(void *ud, PGresult *res)
{
    pgb *b = ud;
    size_t n = b->nadds_sent, i = 0;
    padd *sent = b->adds_sent ? b->adds_sent : b->adds; /* adds_sent is set after the send */
    if (res && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
        const char *p = PQgetvalue(res, 0, 0);
        for (size_t k = 0; k < n; k++) {
            if (sent[k].single)
                continue;
            const char *q = p ? strchr(p, '"') : NULL;
            const char *e = q ? strchr(q + 1, '"') : NULL;
            if (!e)
                break;
            free(sent[k].params[0]);
            sent[k].params[0] = wq_pgb_dupn(q + 1, (size_t)(e - q - 1));
            sent[k].answered = 1;
            p = e + 1;
            i++;
        }
        return;
    }
    if (res && PQresultStatus(res) == PGRES_FATAL_ERROR && wq_pg_transient(res))
        return; /* the batch goes again as it is */
    /* The batch failed (a row PostgreSQL refused): each goes alone, and only that one fails. */
    for (size_t k = 0; k < n; k++)
        if (!sent[k].single)
            sent[k].single = 1;
    (void)i;
}

static int outcome_code(const char *what)
{
    if (!what)
        return WQ_EIO;
    if (strcmp(what, "deduplicated") == 0)
        return 0;
    if (strcmp(what, "skipped: pending") == 0)
        return WQ_ADD_PENDING;
    if (strcmp(what, "skipped: processing") == 0)
        return WQ_ADD_PROCESSING;
    if (strcmp(what, "blocked") == 0)
        return WQ_ADD_BLOCKED;
    if (strncmp(what, "skipped", 7) == 0)
        return WQ_ADD_DONE;
    return 1;
}

static void adds_synced(void *ud, int ok)
{
    pgb *b = ud;
    padd *sent = b->adds_sent;
    size_t n = b->nadds_sent;
    b->adds_sent = NULL;
    b->nadds_sent = 0;
    b->adds_flight = 0;
    wq_pgb_kick(b);
    if (!ok) {
        /* Lost at commit: unknown whether it committed; send again (dedup makes it safe).
         * Failed: the add that failed is told why, the others go again. */
        for (size_t i = 0; i < n; i++) {
            if (sent[i].answered < 0 && wq_pgconn_up(b->c)) {
                sent[i].q->adds_out--;
                if (sent[i].fn)
                    sent[i].fn(sent[i].ud, WQ_EINVAL, sent[i].params[0]);
                wq_pgb_free_add(&sent[i]);
                continue;
            }
            if (sent[i].answered) { /* params[0] holds an answer, not the queue: restore it */
                free(sent[i].params[0]);
                sent[i].params[0] = strdup(sent[i].q->name);
                sent[i].answered = 0;
            }
            if (b->nadds == b->acap) {
                size_t ncap = b->acap ? b->acap * 2 : 64;
                padd *na = realloc(b->adds, ncap * sizeof *na);
                if (!na) {
                    if (sent[i].fn)
                        sent[i].fn(sent[i].ud, WQ_EIO, "database unavailable");
                    wq_pgb_free_add(&sent[i]);
                    continue;
                }
                b->adds = na;
                b->acap = ncap;
            }
            b->adds[b->nadds++] = sent[i];
        }
        free(sent);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const char *what = sent[i].answered > 0 ? sent[i].params[0] : NULL;
        pgq *q = sent[i].q;
        q->adds_out--;
        if (ok) {
            q->db_rows = 1;
            q->more = 1;
            if (sent[i].params[3] && what && strcmp(what, "delayed") == 0)
                wq_pgb_due(q, wq_pgb_real_ns() + (int64_t)(atof(sent[i].params[3]) * 1e9));
        }
        if (ok && outcome_code(what) == 1 && q->q && q->hooks.added && sent[i].params[1])
            q->hooks.added(q->hooks.ud, sent[i].params[1], strlen(sent[i].params[1]));
        if (sent[i].fn)
            sent[i].fn(sent[i].ud, ok ? outcome_code(what) : WQ_EIO,
                       ok ? (what ? what : "queued") : b->errmsg);
        wq_pgb_free_add(&sent[i]);
    }
    free(sent);
    if (ok)
        b->st.commits++;
}

typedef struct row {
    int i;
    int32_t prio;
    double run_at;
    int64_t seq;
} claim_row;

static int cmp_rows(const void *a, const void *b)
{
    const claim_row *x = a, *y = b;
    if (x->prio != y->prio)
        return x->prio > y->prio ? -1 : 1;
    if (x->run_at != y->run_at)
        return x->run_at < y->run_at ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Hands the items claimed for this runner in res (PGS_CLAIM's columns from c0 on; a row
 * without a key is not one) to the runtime, in claim order. Returns how many rows were
 * items; *last: the last of them in that order (-1 none). */
static int accept_claims(pgq *q, PGresult *res, int c0, int *last)
{
    int nrows = PQntuples(res), n = 0;
    claim_row *rows = nrows ? malloc((size_t)nrows * sizeof *rows) : NULL;
    for (int i = 0; i < nrows; i++) {
        if (PQgetisnull(res, i, c0))
            continue;
        if (rows)
            rows[n] =
                (claim_row){i, (int32_t)atol(PQgetvalue(res, i, c0 + 2)),
                            atof(PQgetvalue(res, i, c0 + 7)), atoll(PQgetvalue(res, i, c0 + 8))};
        n++;
    }
    if (rows)
        qsort(rows, (size_t)n, sizeof *rows, cmp_rows);
    *last = rows && n > 0 ? rows[n - 1].i : -1;
    q->b->st.claims += (uint64_t)n;
    for (int k = 0; k < (rows ? n : nrows); k++) {
        int i = rows ? rows[k].i : k;
        if (PQgetisnull(res, i, c0) || !q->q || !q->hooks.claimed)
            continue; /* detached meanwhile: the release at close hands them back */
        wq_claimed c = {0};
        c.key = PQgetvalue(res, i, c0);
        c.keylen = (size_t)PQgetlength(res, i, c0);
        if (!PQgetisnull(res, i, c0 + 1)) {
            c.payload = PQgetvalue(res, i, c0 + 1);
            c.paylen = (size_t)PQgetlength(res, i, c0 + 1);
        }
        c.priority = (int32_t)atol(PQgetvalue(res, i, c0 + 2));
        c.requeues = atoll(PQgetvalue(res, i, c0 + 4));
        c.enqueued_at = atof(PQgetvalue(res, i, c0 + 5));
        if (!PQgetisnull(res, i, c0 + 6)) {
            c.grp = PQgetvalue(res, i, c0 + 6);
            c.grplen = (size_t)PQgetlength(res, i, c0 + 6);
        }
        if (!PQgetisnull(res, i, c0 + 9)) { /* a flow's node (SPEC 9) */
            c.flow = PQgetvalue(res, i, c0 + 9);
            c.flowlen = (size_t)PQgetlength(res, i, c0 + 9);
            c.deps = PQgetisnull(res, i, c0 + 10) ? "[]" : PQgetvalue(res, i, c0 + 10);
            c.depslen = strlen(c.deps);
        }
        uint32_t slot;
        int ok = new_slot(q, &slot) == 0;
        uint64_t *v = ok ? wq_keymap_put(q->keys, c.key, c.keylen, NULL) : NULL;
        char *key = v ? malloc(c.keylen + 1) : NULL;
        if (!key) {
            if (v)
                wq_keymap_del(q->keys, c.key, c.keylen);
            if (ok)
                q->free[q->nfree++] = slot;
            continue; /* stays claimed: taken back when this runner ends */
        }
        memcpy(key, c.key, c.keylen);
        key[c.keylen] = '\0';
        *v = slot;
        q->claims[slot] = (claim){.key = key,
                                  .keylen = c.keylen,
                                  .token = atoll(PQgetvalue(res, i, c0 + 3)),
                                  .requeues = c.requeues,
                                  .new_requeues = -1,
                                  .payhash = c.payload ? hash_bytes(c.payload, c.paylen) : 0,
                                  .node = c.flow != NULL,
                                  .used = 1};
        if (q->hooks.claimed(q->hooks.ud, &c) < 0)
            drop_claim(q, slot, 1);
    }
    free(rows);
    return n;
}

static void finish_result(void *ud, PGresult *res)
{
    pgq *q = ud;
    if (res && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) >= 1) {
        PQclear(q->finish_res);
        q->finish_res = wq_pgconn_keep(q->b->out_conn); /* see finish_committed */
    } else if (res) {
        wq_pgb_set_err(q->b, "cannot write outcomes: %s", PQresultErrorMessage(res));
    }
}

/* The outcomes' transaction committed: the items its finish claimed are this runner's. */
static void finish_committed(pgq *q, PGresult *res)
{
    int last;
    q->handed = (size_t)accept_claims(q, res, 1, &last);
    int i = PQntuples(res) - 1;
    long stale = PQgetisnull(res, i, 0) ? 0 : atol(PQgetvalue(res, i, 0));
    if (stale > 0) {
        q->b->st.stale_outcomes += (uint64_t)stale;
        wq_pgb_logf(q->b, WQ_LOG_WARN,
                    "%s: %ld outcome(s) discarded: their items had been taken over (or, after a "
                    "transaction lost at commit, the outcomes were written already)",
                    q->name, stale);
    }
}

static void claim_result(void *ud, PGresult *res)
{
    pgq *q = ud;
    q->claiming = 0;
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK) {
        if (res && PQresultStatus(res) == PGRES_FATAL_ERROR)
            wq_pgb_logf(q->b, WQ_LOG_WARN, "%s: claim failed: %s", q->name,
                        PQresultErrorMessage(res));
        return;
    }
    int64_t took = wq_pgb_real_ns() - q->claim_sent;
    wq_histogram_observe(&q->b->st.claim_latency, (double)took / 1e9);
    if (!q->claim_from)
        q->full_took = took;
    PQclear(q->claim_res);
    q->claim_res = wq_pgconn_keep(q->b->c); /* see claim_committed */
}

/* The claims' transaction committed: what the claim found is this runner's. */
static void claim_committed(pgq *q, PGresult *res)
{
    int last, n = accept_claims(q, res, 0, &last);
    /* Came back full: the next claim may start after its last item. */
    q->hint = last >= 0 && (size_t)n >= q->claim_want;
    if (q->hint) {
        snprintf(q->hint_prio, sizeof q->hint_prio, "%s", PQgetvalue(res, last, 2));
        snprintf(q->hint_at, sizeof q->hint_at, "%s", PQgetvalue(res, last, 7));
        snprintf(q->hint_seq, sizeof q->hint_seq, "%s", PQgetvalue(res, last, 8));
    }
    /* Some: there may be more; none: wait for a notification (say so to producers) or the
     * next delayed item. */
    q->more = n > 0;
    int sent = 0;
    if (n == 0) {
        q->want_waiting = 1;
        /* whether the queue has rows at all matters only to a run that may end (the runtime
         * asked) when none of its items runs here: under a long transaction the walk costs */
        const char *v[2] = {q->name, q->rows_wanted && q->nclaims == q->nfree ? "true" : "false"};
        sent = wq_pgconn_send(q->b->c, wq_pg_stmts[PGS_NEXT_AT].name, NULL, 2, v, next_at_result,
                              q) == 0;
    }
    if (q->want_waiting != q->waiting_db) {
        send_waiting(q->b, q);
        sent = 1;
    }
    if (sent)
        wq_pgconn_sync(q->b->c, NULL, NULL);
}

static void next_at_result(void *ud, PGresult *res)
{
    pgq *q = ud;
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
        return;
    int rows = PQgetisnull(res, 0, 0) ? q->db_rows : PQgetvalue(res, 0, 0)[0] == 't';
    if (rows != q->db_rows) {
        q->db_rows = rows;
        if (q->hooks.changed)
            q->hooks.changed(q->hooks.ud);
    }
    if (PQgetisnull(res, 0, 1))
        return;
    double s = atof(PQgetvalue(res, 0, 1));
    /* Claim again when the next delayed item is due; one another runner adds meanwhile
     * is found by the poll. */
    wq_pgb_due(q, wq_pgb_real_ns() + (int64_t)(s * 1e9));
}

/* The database's clock: a reading earlier than the last one plus the time that has passed
 * since (less FLOOR_SLACK) means it stepped back: every floor goes. */
static void floor_clock_result(void *ud, PGresult *res)
{
    pgb *b = ud;
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
        return;
    double t = atof(PQgetvalue(res, 0, 0));
    if (b->db_clock_recv &&
        t < b->db_clock + (double)(b->clock_asked - b->db_clock_recv) / 1e9 - FLOOR_SLACK) {
        wq_pgb_logf(b, WQ_LOG_WARN, "the database's clock stepped back by %.3f s",
                    b->db_clock + (double)(b->clock_asked - b->db_clock_recv) / 1e9 - t);
        for (pgq *q = b->queues; q; q = q->next)
            floor_drop(q);
    }
    b->db_clock = t;
    b->db_clock_recv = wq_pgb_real_ns();
    b->txn_clock = t;
}

static void floor_xid_result(void *ud, PGresult *res)
{
    pgq *q = ud;
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 ||
        PQgetisnull(res, 0, 2)) {
        q->probing = 0;
        return;
    }
    q->probe_xid = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
    q->probe_xmin = strtoull(PQgetvalue(res, 0, 1), NULL, 10);
    q->probe_resets = atoll(PQgetvalue(res, 0, 2));
    q->probing = 1;
    if (q->probe_resets != q->floor_resets) {
        /* items went back to their old places since: from the head (at the first look there
         * is no floor to drop) */
        if (q->floor_resets >= 0)
            floor_drop(q);
        q->floor_resets = q->probe_resets;
    }
}

static void floor_min_result(void *ud, PGresult *res)
{
    pgq *q = ud;
    int had = q->probing == 1;
    q->probing = 0;
    if (!had || !res || PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
        return;
    if (q->probe_gen != q->floor_gen) {
        /* dropped meanwhile: the earliest times were read from a floor that is gone; the
         * mark still counts (its clock and id hold whatever the floor) */
        q->nmarks = 0;
    } else {
        double first = PQgetisnull(res, 0, 0) ? INFINITY : atof(PQgetvalue(res, 0, 0));
        double held = PQgetisnull(res, 0, 1) ? INFINITY : atof(PQgetvalue(res, 0, 1));
        /* the newest mark every transaction up to which has ended */
        int m = -1;
        for (int i = 0; i < q->nmarks; i++)
            if (q->marks[i].xid < q->probe_xmin && q->marks[i].resets == q->probe_resets)
                m = i;
        if (m >= 0) {
            double f = q->marks[m].at - FLOOR_SLACK;
            if (first < f)
                f = first;
            if (held < f)
                f = held;
            if (f > q->floor_at)
                q->floor_at = f;
            memmove(q->marks, q->marks + m + 1, (size_t)(q->nmarks - m - 1) * sizeof q->marks[0]);
            q->nmarks -= m + 1;
        }
    }
    double clock = q->b->txn_clock; /* this transaction's first statement */
    if (isnan(clock) || q->probe_resets != q->floor_resets)
        return;
    if (q->nmarks == FLOOR_MARKS) {
        memmove(q->marks, q->marks + 1, (FLOOR_MARKS - 1) * sizeof q->marks[0]);
        q->nmarks--;
    }
    q->marks[q->nmarks].xid = q->probe_xid;
    q->marks[q->nmarks].at = clock;
    q->marks[q->nmarks].resets = q->probe_resets;
    q->nmarks++;
}

/* A transaction that claimed items (res: PGS_CLAIM's columns from c0 on) was lost at
 * commit: its connection went down, and whether it committed is unknown. If it did, the
 * items run for this runner in the database and no handler knows them (this runner may
 * keep its id: a reconnect takes its lock again). They go back with the next outcomes, as
 * items handed back unstarted; the token of a claim that never committed matches nothing. */
static void hand_back_unknown(pgq *q, PGresult *res, int c0)
{
    int nrows = PQntuples(res);
    for (int i = 0; i < nrows; i++) {
        if (PQgetisnull(res, i, c0))
            continue;
        size_t len = (size_t)PQgetlength(res, i, c0);
        uint32_t slot;
        char *key = malloc(len + 1);
        if (!key || new_slot(q, &slot) < 0) {
            free(key);
            continue; /* taken back when this runner ends (its release) */
        }
        if (sent_room(q) < 0) {
            free(key);
            q->free[q->nfree++] = slot;
            continue;
        }
        memcpy(key, PQgetvalue(res, i, c0), len);
        key[len] = '\0';
        int64_t requeues = atoll(PQgetvalue(res, i, c0 + 4));
        /* not in the key map: the runtime never heard of it, and is told nothing */
        q->claims[slot] = (claim){.key = key,
                                  .keylen = len,
                                  .token = atoll(PQgetvalue(res, i, c0 + 3)),
                                  .requeues = requeues,
                                  .new_requeues = -1,
                                  .sent = 1,
                                  .used = 1};
        q->sent[q->nsent++] =
            (outcome){slot, WQ_PGF_RELEASE, 0, requeues, NULL, NULL, NULL, NULL, 0};
    }
}

static void claims_synced(void *ud, int ok)
{
    pgb *b = ud;
    b->claim_flight = 0;
    int lost = !ok && !wq_pgconn_up(b->c);
    for (pgq *q = b->queues; q; q = q->next) {
        if (q->claim_res && ok) /* (one that did not commit claimed nothing) */
            claim_committed(q, q->claim_res);
        else if (q->claim_res && lost && q->q)
            hand_back_unknown(q, q->claim_res, 0);
        PQclear(q->claim_res);
        q->claim_res = NULL;
        q->claiming = 0;
        q->probing = 0; /* answered, or lost with the transaction */
    }
    wq_pgb_kick(b);
}

static void outcomes_synced(void *ud, int ok)
{
    pgb *b = ud;
    b->out_flight = 0;
    double dt = wq_pgb_wall_s() - b->cycle_started;
    wq_histogram_observe(&b->st.commit_latency, dt);
    b->st.commit_seconds_sum += dt;
    int lost = !ok && !wq_pgconn_up(b->out_conn);
    for (pgq *q = b->queues; q; q = q->next) {
        if (q->finish_res && ok)
            finish_committed(q, q->finish_res);
        else if (q->finish_res && lost && q->q)
            hand_back_unknown(q, q->finish_res, 1);
        PQclear(q->finish_res);
        q->finish_res = NULL;
    }
    for (pgq *q = b->queues; q; q = q->next) {
        if (ok) {
            for (size_t i = 0; i < q->nflight; i++) {
                outcome *o = &q->sent[i];
                if (o->kind == WQ_PGF_RETRY)
                    wq_pgb_due(q, wq_pgb_real_ns() + (int64_t)(o->delay * 1e9));
                free(o->err);
                free(o->payload);
                free(o->done);
                free(o->nres);
                drop_claim(q, o->slot, 1);
            }
            b->st.rows_written += q->nflight;
            /* An outcome in a limited queue frees its group's slot and may make the next
             * held item claimable, now or when its group's rate lets it: unless the
             * transaction claimed all this runner could start, claim now (a claim that finds
             * nothing learns when the next one is due), not at the next poll. */
            if (q->limited && q->nflight && q->handed < q->take_out)
                q->more = 1;
            /* what came meanwhile (items handed back: hand_back_unknown) goes next time */
            if (q->nsent > q->nflight)
                memmove(q->sent, q->sent + q->nflight, (q->nsent - q->nflight) * sizeof *q->sent);
            q->nsent -= q->nflight;
        } else if (q->nsent) {
            /* Not written (or unknown: lost at commit): the same outcomes go again with the
             * next transaction; they cannot be built again, since a retry's delayed item has
             * left the engine. A stale token makes a second write harmless. */
            b->st.flush_errors++;
        }
        q->nflight = 0;
        q->take_out = 0; /* what it claimed is in; claims ask for all again */
    }
    if (ok) {
        b->st.commits++;
        b->st.last_commit_unix = wq_pgb_wall_s();
        b->out_done_txn = b->out_txn;
        wq_pgb_send_waiting_ops(b);
    }
    wq_pgb_kick(b);
}
