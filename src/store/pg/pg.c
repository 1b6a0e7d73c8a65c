/*
 * The PostgreSQL backend (SPEC section 8): the database is the authority,
 * the local engine queue holds only what this runner claimed.
 *
 * - Adds go to the database (wqrun.add, the same function SQL producers
 *   call) and are answered once their transaction committed.
 * - Claims hand the runtime at most as many items as it asks for (free
 *   workers and waiting gets): no claim-ahead, so no reordering.
 * - Outcomes are read from the local engine at flush time, as the SQLite
 *   store reads it: a claimed key that is gone was finished, one with a
 *   delayed add pending is retried or requeued after that delay. They are
 *   written with their fencing token; a stale token matches nothing.
 * - Three kinds of transaction, at most one of each under way: the adds
 *   and the claims on the first connection, the outcomes on a second one,
 *   so that the server finishes one batch while it claims the next. What
 *   arrives meanwhile waits for the next of its kind (group commit).
 * - Liveness: a session advisory lock per runner (gone the moment its
 *   connection dies), a heartbeat row, and every runner reaping the dead.
 */
#include "store/pg/pg.h"

#include "engine/common.h"
#include "engine/keymap.h"
#include "engine/log.h"
#include "store/pg/pg_item.h"
#include "store/pg/pg_schema.h"
#include "store/pg/pgconn.h"

#include <event2/event.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CLAIM_MAX 1000       /* items one claim asks for at most */
#define ADD_BUFFER_MAX 10000 /* adds held while the database is unreachable */
#define POLL_MS 250          /* claim even without a notification this often */
#define FULL_MS 2000         /* a claim from the head of the queue at least this often */
#define REAP_MS 500          /* look for dead runners this often */
#define PRUNE_MS 5000        /* prune expired keep_done memories this often */
#define FLOOR_MS 250         /* a busy queue's floor moves on at most this often */
#define FLOOR_SLACK 0.05     /* s: a floor stays this far below the clocks it is built from */
#define FLOOR_MARKS 16

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

/* ---- types ---- */

typedef struct pgb pgb;

/* What this runner holds for one claimed key. */
typedef struct claim {
    char *key;
    size_t keylen;
    int64_t token;
    int64_t requeues;     /* the failure count at claim */
    int64_t new_requeues; /* set by failures(); -1: unchanged */
    char *err;            /* the error given with failures() or dead() */
    int dead;             /* dead() was called */
    int64_t attempts;
    uint64_t payhash; /* of the payload as claimed */
    char *result;     /* keep_done: what its success leaves in done (JSON; "null" for none) */
    int touched;
    int sent; /* its outcome is in flight */
    int used; /* slot in use */
} claim;

/* An outcome built at flush, kept until its cycle commits. */
typedef struct outcome {
    uint32_t slot;
    int kind;
    double delay;
    int64_t requeues;
    char *err;
    char *payload; /* a new payload (wq.requeue with one), else NULL */
    char *done;    /* keep_done: what the success leaves in done (taken from the claim) */
} outcome;

typedef struct pgq {
    wq_bqueue base;
    pgb *b;
    char name[65];
    wq_queue *q;
    wq_bqueue_hooks hooks;
    wq_keymap *keys; /* key -> claim slot */
    claim *claims;
    uint32_t nclaims, cap, free_head;
    uint32_t *free;
    uint32_t nfree;
    uint32_t *touched;
    size_t ntouched, tcap;
    outcome *sent; /* outcomes of the cycle in flight */
    size_t nsent, scap;
    int claiming;   /* a claim of this queue is in the cycle in flight */
    int more;       /* claim again without waiting for the poll (notified, or came back full) */
    int waiting_db; /* the waiting row says we want work: 1, 0, -1 unknown */
    int want_waiting;
    int64_t last_poll;  /* real ns of the last claim */
    int64_t claim_sent; /* real ns the claim in flight was sent */
    int64_t due_at;     /* real ns an item of it is due in the database (a delay), 0: none known */
    int stopped;
    int paused;       /* paused for every runner, as the database last said */
    wq_queue_def def; /* the shared options as this runner uses them */
    int has_def;      /* the script defines them (else it takes the database's) */
    int def_sent;     /* 1 sent, 2 stored (0 again if it did not get through) */
    int limited;      /* group limits or a rate: claims count them (PGS_CLAIM_GROUPED) */
    /* Where the last claim stopped (its last item's priority, run_at, seq), while claims came
     * back full: the next claim starts there (PGS_CLAIM_FROM) rather than walking, from the
     * head of the claim index, the entries of items already claimed that a long transaction
     * keeps from being cleaned up. A claim from the head at least every FULL_MS, or every
     * 4 times as long as the last one took when that is longer (under a long transaction
     * they slow down: at most a fifth of the time goes to them). */
    int hint;
    char hint_prio[16], hint_at[40], hint_seq[24];
    size_t claim_want; /* items the claim in flight asked for */
    int claim_from;    /* and it started at the hint */
    int64_t last_full; /* real ns of the last claim from the head */
    int64_t full_took; /* and how long its round trip took */
    int db_rows;       /* the database may hold rows of the queue */
    /* the runtime asked (pg_pending: a run without --serve with nothing to do here) */
    int rows_wanted;
    size_t adds_out; /* adds to it not yet committed */
    /* The floor of a queue without limits (pg_schema.c's schema_v7): a ready time (epoch s,
     * -INFINITY: none yet) below which no item of the queue is pending, nor will be, save
     * items handed back at their old places, which the queue's resets count (a claim whose
     * resets differ starts from the head, and the floor is dropped). Claims start there.
     * Moved on by the claims of a busy queue: each takes the database's clock, then a
     * transaction id (every id after it is given later than that clock: a mark), and the
     * earliest pending ready time from the floor on. Once every transaction up to a mark's
     * id has ended (the oldest running is past it), all they wrote is seen, and what any
     * later one writes is ready no earlier than the mark's clock: the floor goes to the
     * earlier of the two, less FLOOR_SLACK for a clock that steps back (a larger step is
     * seen in the clock's readings, and the floor dropped). A transaction that stays open
     * with an id (a slow producer) holds the floor where it was; one that only reads does
     * not. */
    double floor_at;
    long long floor_resets; /* the resets it holds for, -1 unknown */
    struct {
        uint64_t xid;
        double at;
        long long resets;
    } marks[FLOOR_MARKS];
    int nmarks;
    unsigned floor_gen; /* a drop makes the answers of probes sent before it stale */
    unsigned probe_gen; /* the floor_gen the probe in flight was sent at */
    int probing;        /* 1: its transaction id came back; 2 sent */
    uint64_t probe_xid, probe_xmin;
    long long probe_resets; /* (its clock: the transaction's, pgb's txn_clock) */
    int64_t floor_sent;     /* real ns of the last probe */
    /* Limited queues: the outcomes in flight also claim up to take_out items for this
     * runner (claims ask for that many less until they commit); handed: how many they did. */
    size_t take_out, handed;
    /* The answers of its claim and of its outcomes (which may claim too) in the transactions
     * under way: the items they claimed are handed to the runtime only once their
     * transaction committed. Until then they are not claimed: a later statement of the same
     * transaction may still fail (a deadlock, a lost connection), and with it the claims. */
    PGresult *claim_res, *finish_res;
    struct pgq *next;
} pgq;

/* A statement of the outbox. */
typedef struct pstmt {
    pgb *b;
    const char *what; /* for messages: "schedule", ... */
    char *sql;        /* with @S (expanded when sent) */
    int n;
    char *params[8];
    int failed; /* the database refused it: dropped, not sent again */
} pstmt;

/* A pending add, until its transaction commits. */
typedef struct padd {
    pgq *q;
    int answered;    /* 1: params[0] holds the outcome; -1: it holds the error */
    int single;      /* sent alone (wq_add), not in the batch */
    char *params[8]; /* queue, key, payload, after, priority, group, force, unique */
    wq_badd_fn fn;
    void *ud;
} padd;

struct pgb {
    wq_backend base;
    struct event_base *evb;
    wq_pgconn *c;
    char *url;
    char schema[64];
    char where[300];
    char errmsg[512];
    char runner_name[300];
    char host[200];
    double lease;
    int64_t runner_id;
    char runner_id_s[24];
    int registered; /* the runners row and lock are ours */
    pgq *queues;
    padd *adds; /* waiting to be sent */
    size_t nadds, acap;
    padd *adds_sent; /* in the cycle in flight */
    size_t nadds_sent;
    /* Transactions under way, one of each kind at a time: the adds and the claims on c, the
     * outcomes on c2 (a second connection, so that the database works on both at once). */
    int adds_flight, claim_flight, out_flight;
    wq_pgconn *out_conn; /* the connection of the outcomes' transaction under way */
    /* Outcome transactions sent, and the last that committed: an operator action (pg_op)
     * waits for the outcomes this runner had when it was asked (read your own writes). */
    int64_t out_txn, out_done_txn;
    struct pop *ops_waiting; /* operator actions waiting for that, in order */
    /* Statements that must get through, in order (schedule definitions, firings, deletes):
     * idempotent, so a transaction lost at commit simply goes again. */
    struct pstmt *outbox;
    size_t nout, outcap;
    int outbox_flight;  /* the first outbox_flight of them are in the transaction under way */
    size_t outbox_seen; /* answers read of those */
    wq_pgconn *c2;
    int stopping;
    int lost_claims;    /* told the runtime its claims are gone (lease lost) */
    int64_t down_since; /* real ns the connection was lost, 0 while up */
    struct event *cycle_ev, *tick_ev, *due_ev;
    int64_t due_armed; /* real ns due_ev fires, 0 when not armed */
    int64_t last_reap, last_heartbeat;
    wq_backend_stats st;
    double cycle_started;
    wq_timebase tb;
    int reregistering;
    int control_flight; /* the paused queues and this runner's signals are being read */
    int keeps_done;     /* a queue of this runner keeps done keys: it prunes them too */
    /* The database-wide view (db_view), read while someone looks at it: the one shown and
     * the one being read. */
    struct view *view, *view_next_v;
    int view_wanted, view_flight;
    int64_t view_next; /* real ns of the next read */
    int64_t view_sent;
    int64_t view_asked; /* real ns of the last db_view call */
    int prune_flight, prune_more;
    int64_t last_prune, last_sweep;
    int control_again; /* notified meanwhile: read them once more */
    /* The database's clock, read first in every claim transaction (pgq's floor): the last
     * reading, and when it was asked for and came back (real ns). */
    double db_clock, txn_clock;
    int64_t db_clock_recv, clock_asked;
    int clock_in_txn; /* the claim transaction being built has asked for it */
};

/* An operator action until its transaction has committed. */
typedef struct pop {
    wq_bop_kind kind;
    wq_bop_fn fn;
    void *ud;
    int answered; /* 1: result and text hold the answer; -1: text holds the error */
    int result;
    char *text;
    /* Until it is sent: the statement, its parameters, the outcome transaction it waits for */
    char *sql;
    char *params[6];
    int nparams;
    int64_t need;
    struct pop *next;
} pop;

static void pop_free(pop *o)
{
    free(o->text);
    free(o->sql);
    for (int i = 0; i < 6; i++)
        free(o->params[i]);
    free(o);
}

static const wq_backend_ops pg_ops;

static int64_t real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * WQ_NS_PER_S + ts.tv_nsec;
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t hash_bytes(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211ULL;
    return h ^ n;
}

static void set_err(pgb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_err(pgb *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->errmsg, sizeof b->errmsg, fmt, ap);
    va_end(ap);
}

static void logf_(pgb *b, wq_log_level lv, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void logf_(pgb *b, wq_log_level lv, const char *fmt, ...)
{
    (void)b;
    if (!wq_log_enabled(lv))
        return;
    char msg[600] = "wqrun: ";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + 7, sizeof msg - 7, fmt, ap);
    va_end(ap);
    for (char *p = msg; *p; p++) /* libpq's messages span lines: one log line each */
        if (*p == '\n' || *p == '\t')
            *p = ' ';
    wq_log_write(lv, NULL, 0, msg);
}

static void kick(pgb *b)
{
    if (b->cycle_ev)
        event_active(b->cycle_ev, EV_TIMEOUT, 0);
}

/* A delayed item of q is due at real ns when: claim then (not at the next poll). */
static void due(pgq *q, int64_t when)
{
    pgb *b = q->b;
    if (!q->due_at || when < q->due_at)
        q->due_at = when;
    if (!b->due_ev || (b->due_armed && b->due_armed <= when))
        return;
    int64_t d = when - real_ns();
    if (d < 0)
        d = 0;
    struct timeval tv = {(time_t)(d / WQ_NS_PER_S), (suseconds_t)(d % WQ_NS_PER_S / 1000)};
    evtimer_add(b->due_ev, &tv);
    b->due_armed = when;
}

static void on_due(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    pgb *b = arg;
    b->due_armed = 0;
    int64_t now = real_ns(), next = 0;
    for (pgq *q = b->queues; q; q = q->next)
        if (q->due_at && q->due_at > now && (!next || q->due_at < next))
            next = q->due_at;
    kick(b);
    if (next) /* another queue's item comes later */
        for (pgq *q = b->queues; q; q = q->next)
            if (q->due_at == next)
                due(q, next);
}

/* ---- claims of one queue ---- */

static claim *slot_of(pgq *q, const char *key, size_t len, uint32_t *slot)
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
    free(c->key);
    free(c->err);
    free(c->result);
    memset(c, 0, sizeof *c);
    q->free[q->nfree++] = slot;
}

static void touch_slot(pgq *q, uint32_t slot)
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
static void lose_claims(pgq *q, const char *why)
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
    }
    q->nsent = 0;
}

/* ---- the cycle: adds, then outcomes and claims, one round trip ---- */

static void add_result(void *ud, PGresult *res);
static void add_many_result(void *ud, PGresult *res);
static void adds_synced(void *ud, int ok);
static char *dupn(const char *s, size_t n);
static void finish_result(void *ud, PGresult *res);
static void claim_result(void *ud, PGresult *res);
static void outcomes_synced(void *ud, int ok);
static void claims_synced(void *ud, int ok);
static void next_at_result(void *ud, PGresult *res);
static void floor_clock_result(void *ud, PGresult *res);
static void floor_xid_result(void *ud, PGresult *res);
static void floor_min_result(void *ud, PGresult *res);
static void send_control(pgb *b);
static void send_define(pgb *b, pgq *q);
static void outbox_result(void *ud, PGresult *res);
static void outbox_synced(void *ud, int ok);
static void send_view(pgb *b);
static void send_waiting_ops(pgb *b);

static void free_add(padd *a)
{
    for (int i = 0; i < 8; i++)
        free(a->params[i]);
}

/* Builds q's outcomes from the engine's state of each touched key. */
static void build_outcomes(pgq *q)
{
    const wq_timebase *tb = &q->b->tb;
    double now = wall_s();
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
        outcome o = {slot, WQ_PGF_DONE, 0, c->requeues, NULL, NULL, NULL};
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
            c->result = NULL;
        }
        if (q->nsent == q->scap) {
            size_t ncap = q->scap ? q->scap * 2 : 64;
            outcome *ns = realloc(q->sent, ncap * sizeof *ns);
            if (!ns) {
                free(o.err);
                free(o.payload);
                c->result = o.done;
                touch_slot(q, slot); /* try again at the next cycle */
                continue;
            }
            q->sent = ns;
            q->scap = ncap;
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
        if (q->nsent == q->scap) {
            size_t ncap = q->scap ? q->scap * 2 : 64;
            outcome *ns = realloc(q->sent, ncap * sizeof *ns);
            if (!ns)
                return;
            q->sent = ns;
            q->scap = ncap;
        }
        c->sent = 1;
        q->sent[q->nsent++] = (outcome){i, WQ_PGF_RELEASE, 0, c->requeues, NULL, NULL, NULL};
    }
}

static int send_finish(pgb *b, pgq *q, wq_pgconn *conn, size_t take)
{
    if (!q->nsent)
        return 0;
    sbuf keys = {0}, toks = {0}, kinds = {0}, delays = {0}, reqs = {0}, errs = {0}, pays = {0},
         done = {0};
    int any_done = 0;
    sb_str(&keys, "{");
    sb_str(&toks, "{");
    sb_str(&kinds, "{");
    sb_str(&delays, "{");
    sb_str(&reqs, "{");
    sb_str(&errs, "{");
    sb_str(&pays, "{");
    sb_str(&done, "{");
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
    }
    sb_str(&keys, "}");
    sb_str(&toks, "}");
    sb_str(&kinds, "}");
    sb_str(&delays, "}");
    sb_str(&reqs, "}");
    sb_str(&errs, "}");
    sb_str(&pays, "}");
    sb_str(&done, "}");
    int r = -1;
    if (!keys.oom && !toks.oom && !kinds.oom && !delays.oom && !reqs.oom && !errs.oom &&
        !pays.oom && !done.oom) {
        char tk[24];
        snprintf(tk, sizeof tk, "%zu", take);
        const char *v[11] = {q->name,  b->runner_id_s, keys.p, toks.p, kinds.p,
                             delays.p, reqs.p,         errs.p, pays.p, any_done ? done.p : NULL,
                             tk};
        r = wq_pgconn_send(conn, wq_pg_stmts[PGS_FINISH].name, NULL, 11, v, finish_result, q);
        if (r == 0) {
            q->take_out = take;
            q->handed = 0;
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
        b->clock_asked = real_ns();
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
    int64_t now = real_ns();
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

static void on_cycle(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    pgb *b = arg;
    if (!b->registered || !wq_pgconn_up(b->c))
        return;
    int64_t now_real = real_ns();
    for (pgq *q = b->queues; q; q = q->next)
        send_define(b, q);
    if (b->nout && !b->outbox_flight) {
        size_t n = 0;
        b->outbox_seen = 0; /* before sending: a loss answers the sent ones at once */
        for (; n < b->nout; n++) {
            char *sql = wq_pg_sql(wq_pgconn_pg(b->c), b->schema, b->outbox[n].sql);
            int r = sql ? wq_pgconn_send(b->c, NULL, sql, b->outbox[n].n,
                                         (const char *const *)b->outbox[n].params, outbox_result, b)
                        : -1;
            free(sql);
            if (r < 0)
                break;
        }
        if (n && wq_pgconn_sync(b->c, outbox_synced, b) == 0)
            b->outbox_flight = (int)n;
    }
    if (b->control_again && !b->control_flight) {
        b->control_again = 0;
        send_control(b);
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
            b->cycle_started = wall_s();
        } else if (b->ops_waiting && b->ops_waiting->need > b->out_done_txn) {
            b->out_done_txn = ++b->out_txn; /* nothing to write: as good as committed */
            send_waiting_ops(b);
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
    } else if (res && PQresultStatus(res) == PGRES_FATAL_ERROR) {
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
            sent[k].params[0] = dupn(q + 1, (size_t)(e - q - 1));
            sent[k].answered = 1;
            p = e + 1;
            i++;
        }
        return;
    }
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
    kick(b);
    if (!ok) {
        /* Lost at commit: unknown whether it committed; send again (dedup makes it safe).
         * Failed: the add that failed is told why, the others go again. */
        for (size_t i = 0; i < n; i++) {
            if (sent[i].answered < 0 && wq_pgconn_up(b->c)) {
                sent[i].q->adds_out--;
                if (sent[i].fn)
                    sent[i].fn(sent[i].ud, WQ_EINVAL, sent[i].params[0]);
                free_add(&sent[i]);
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
                    free_add(&sent[i]);
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
                due(q, real_ns() + (int64_t)(atof(sent[i].params[3]) * 1e9));
        }
        if (sent[i].fn)
            sent[i].fn(sent[i].ud, ok ? outcome_code(what) : WQ_EIO,
                       ok ? (what ? what : "queued") : b->errmsg);
        free_add(&sent[i]);
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
        set_err(q->b, "cannot write outcomes: %s", PQresultErrorMessage(res));
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
        logf_(q->b, WQ_LOG_WARN, "%s: %ld outcome(s) discarded: their items had been taken over",
              q->name, stale);
    }
}

static void claim_result(void *ud, PGresult *res)
{
    pgq *q = ud;
    q->claiming = 0;
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK) {
        if (res && PQresultStatus(res) == PGRES_FATAL_ERROR)
            logf_(q->b, WQ_LOG_WARN, "%s: claim failed: %s", q->name, PQresultErrorMessage(res));
        return;
    }
    int64_t took = real_ns() - q->claim_sent;
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
    due(q, real_ns() + (int64_t)(s * 1e9));
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
        logf_(b, WQ_LOG_WARN, "the database's clock stepped back by %.3f s",
              b->db_clock + (double)(b->clock_asked - b->db_clock_recv) / 1e9 - t);
        for (pgq *q = b->queues; q; q = q->next)
            floor_drop(q);
    }
    b->db_clock = t;
    b->db_clock_recv = real_ns();
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

static void claims_synced(void *ud, int ok)
{
    pgb *b = ud;
    b->claim_flight = 0;
    for (pgq *q = b->queues; q; q = q->next) {
        if (q->claim_res && ok) /* (one that did not commit claimed nothing) */
            claim_committed(q, q->claim_res);
        PQclear(q->claim_res);
        q->claim_res = NULL;
        q->claiming = 0;
        q->probing = 0; /* answered, or lost with the transaction */
    }
    kick(b);
}

static void outcomes_synced(void *ud, int ok)
{
    pgb *b = ud;
    b->out_flight = 0;
    double dt = wall_s() - b->cycle_started;
    wq_histogram_observe(&b->st.commit_latency, dt);
    b->st.commit_seconds_sum += dt;
    for (pgq *q = b->queues; q; q = q->next) {
        if (q->finish_res && ok)
            finish_committed(q, q->finish_res);
        PQclear(q->finish_res);
        q->finish_res = NULL;
    }
    for (pgq *q = b->queues; q; q = q->next) {
        if (ok) {
            for (size_t i = 0; i < q->nsent; i++) {
                outcome *o = &q->sent[i];
                if (o->kind == WQ_PGF_RETRY)
                    due(q, real_ns() + (int64_t)(o->delay * 1e9));
                free(o->err);
                free(o->payload);
                free(o->done);
                drop_claim(q, o->slot, 1);
            }
            b->st.rows_written += q->nsent;
            /* An outcome in a limited queue frees its group's slot and may make the next
             * held item claimable, now or when its group's rate lets it: unless the
             * transaction claimed all this runner could start, claim now (a claim that finds
             * nothing learns when the next one is due), not at the next poll. */
            if (q->limited && q->nsent && q->handed < q->take_out)
                q->more = 1;
            q->nsent = 0;
        } else if (q->nsent) {
            /* Not written (or unknown: lost at commit): the same outcomes go again with the
             * next transaction; they cannot be built again, since a retry's delayed item has
             * left the engine. A stale token makes a second write harmless. */
            b->st.flush_errors++;
        }
        q->take_out = 0; /* what it claimed is in; claims ask for all again */
    }
    if (ok) {
        b->st.commits++;
        b->st.last_commit_unix = wall_s();
        b->out_done_txn = b->out_txn;
        send_waiting_ops(b);
    }
    kick(b);
}

/* ---- liveness: heartbeat, reaping, reconnects ---- */

static void reap_result(void *ud, PGresult *res)
{
    pgb *b = ud;
    if (res && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
        long n = atol(PQgetvalue(res, 0, 0));
        if (n > 0) {
            b->st.takeovers += (uint64_t)n;
            logf_(b, WQ_LOG_WARN, "took over %ld item(s) of dead runners", n);
            for (pgq *q = b->queues; q; q = q->next) {
                q->more = 1;
                q->hint = 0; /* their items went back to where they were in the queue */
            }
            kick(b);
        }
    }
}

static void lose_all(pgb *b, const char *why)
{
    if (b->lost_claims)
        return;
    b->lost_claims = 1;
    logf_(b, WQ_LOG_WARN, "%s: running handlers are cancelled (their items run elsewhere now)",
          why);
    for (pgq *q = b->queues; q; q = q->next)
        lose_claims(q, "lease lost");
}

static void heartbeat_result(void *ud, PGresult *res)
{
    pgb *b = ud;
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK)
        return;
    if (PQntuples(res) == 1) {
        b->last_heartbeat = real_ns();
        if (b->lost_claims) {
            /* Back within reach but our handlers were cancelled (cut off past the lease) and
             * nobody declared us dead: give their items back ourselves. */
            char *sql = wq_pg_sql(wq_pgconn_pg(b->c), b->schema,
                                  "SELECT @S.release(ARRAY[$1::bigint], false)");
            const char *v[1] = {b->runner_id_s};
            if (sql && wq_pgconn_send(b->c, NULL, sql, 1, v, NULL, NULL) == 0 &&
                wq_pgconn_sync(b->c, NULL, NULL) == 0)
                b->lost_claims = 0;
            free(sql);
            for (pgq *q = b->queues; q; q = q->next)
                q->more = 1;
        }
        return;
    }
    /* Our row is gone: declared dead (silent past the lease). Our claims run elsewhere. */
    lose_all(b, "this runner was declared dead by the others (no heartbeat within --lease)");
    b->registered = 0;
}

static void relock_result(void *ud, PGresult *res)
{
    pgb *b = ud;
    if (res && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
        PQgetvalue(res, 0, 0)[0] == 't')
        return;
    logf_(b, WQ_LOG_ERROR, "could not take this runner's lock again after reconnecting");
}

static void reregister_result(void *ud, PGresult *res)
{
    pgb *b = ud;
    b->reregistering = 0;
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
        return; /* the next tick tries again */
    b->runner_id = atoll(PQgetvalue(res, 0, 0));
    snprintf(b->runner_id_s, sizeof b->runner_id_s, "%lld", (long long)b->runner_id);
    b->registered = 1;
    b->lost_claims = 0;
    b->last_heartbeat = real_ns();
    b->control_again = 1; /* the paused queues, at once */
    logf_(b, WQ_LOG_INFO, "registered again as runner %lld", (long long)b->runner_id);
    for (pgq *q = b->queues; q; q = q->next) {
        q->waiting_db = -1;
        q->more = 1;
    }
    kick(b);
}

/* Declared dead earlier: come back as a new runner. */
static void reregister(pgb *b)
{
    char *sql = wq_pg_sql(wq_pgconn_pg(b->c), b->schema,
                          "WITH r AS (INSERT INTO @S.runners (name, host, pid, lease, version) "
                          "VALUES ($1, $2, $3, $4, $5) RETURNING id) "
                          "SELECT id, pg_try_advisory_lock($6, id::integer) FROM r");
    char pid[24], lease[32], cls[24];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    snprintf(lease, sizeof lease, "%.3f", b->lease);
    snprintf(cls, sizeof cls, "%d", WQ_PG_LOCK_CLASS);
    const char *v[6] = {b->runner_name, b->host, pid, lease, WQ_VERSION, cls};
    if (sql && wq_pgconn_send(b->c, NULL, sql, 6, v, reregister_result, b) == 0 &&
        wq_pgconn_sync(b->c, NULL, NULL) == 0)
        b->reregistering = 1;
    free(sql);
}

/* ---- operating: pauses and cancels from any runner, the CLI or SQL (SPEC 8.2) ---- */

static pgq *queue_named(pgb *b, const char *name)
{
    for (pgq *q = b->queues; q; q = q->next)
        if (strcmp(q->name, name) == 0)
            return q;
    return NULL;
}

/* Follows another runner's definition of q's options (the last one started wins). */
static void redefine(pgq *q, const wq_queue_def *def, const char *by)
{
    q->def = *def;
    if (q->q && q->hooks.redefined)
        q->hooks.redefined(q->hooks.ud, def, by);
}

static void queues_result(void *ud, PGresult *res)
{
    pgb *b = ud;
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK)
        return;
    for (pgq *q = b->queues; q; q = q->next) {
        int p = 0;
        for (int i = 0; i < PQntuples(res); i++) {
            if (strcmp(PQgetvalue(res, i, 0), q->name) != 0)
                continue;
            p = PQgetvalue(res, i, 1)[0] == 't';
            q->limited = PQgetvalue(res, i, 5)[0] == 't';
            /* Another runner started after this one's definition was stored. */
            wq_queue_def d = q->def;
            d.max_retries = atoll(PQgetvalue(res, i, 2));
            d.keep_done = atof(PQgetvalue(res, i, 3));
            if (q->has_def && q->def_sent == 2 && !PQgetisnull(res, i, 2) &&
                (d.max_retries != q->def.max_retries || d.keep_done != q->def.keep_done))
                redefine(q, &d, PQgetvalue(res, i, 4));
        }
        if (p == q->paused)
            continue;
        q->paused = p;
        if (q->q && q->hooks.paused)
            q->hooks.paused(q->hooks.ud, p);
        if (!p)
            q->more = 1;
    }
}

static void define_result(void *ud, PGresult *res)
{
    pgq *q = ud;
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        q->def_sent = 0; /* again after a reconnect */
        return;
    }
    q->def_sent = 2; /* answers read after this one see it (or a later runner's) */
    const char *by = PQgetisnull(res, 0, 2) ? "?" : PQgetvalue(res, 0, 2);
    if (!PQgetisnull(res, 0, 0) && atoll(PQgetvalue(res, 0, 0)) != q->def.max_retries)
        logf_(q->b, WQ_LOG_WARN,
              "warning: queue '%s': max_retries is %lld in this runner's script and was %s as "
              "runner '%s' defined it; the last runner started wins: %lld for every runner now",
              q->name, (long long)q->def.max_retries, PQgetvalue(res, 0, 0), by,
              (long long)q->def.max_retries);
    if (!PQgetisnull(res, 0, 1) && atof(PQgetvalue(res, 0, 1)) != q->def.keep_done)
        logf_(q->b, WQ_LOG_WARN,
              "warning: queue '%s': keep_done is %g s in this runner's script and was %s s as "
              "runner '%s' defined it; the last runner started wins: %g s for every runner now",
              q->name, q->def.keep_done, PQgetvalue(res, 0, 1), by, q->def.keep_done);
}

/* Stores q's definition (at attach, and after a reconnect if it did not get through). */
static void send_define(pgb *b, pgq *q)
{
    if (!q->has_def || q->def_sent || !b->registered || !wq_pgconn_up(b->c))
        return;
    char mr[24], kd[40], gc[24], gr[40], gb[40], qr[40], qb[40];
    const wq_queue_def *d = &q->def;
    snprintf(mr, sizeof mr, "%lld", (long long)d->max_retries);
    snprintf(kd, sizeof kd, "%.17g", d->keep_done);
    snprintf(gc, sizeof gc, "%lld", (long long)d->group_concurrency);
    snprintf(gr, sizeof gr, "%.17g", d->group_rate);
    snprintf(gb, sizeof gb, "%.17g", d->group_burst);
    snprintf(qr, sizeof qr, "%.17g", d->rate);
    snprintf(qb, sizeof qb, "%.17g", d->burst);
    const char *v[9] = {q->name, mr, kd, b->runner_name, gc, gr, gb, qr, qb};
    if (wq_pgconn_send(b->c, wq_pg_stmts[PGS_DEFINE].name, NULL, 9, v, define_result, q) == 0 &&
        wq_pgconn_sync(b->c, NULL, NULL) == 0)
        q->def_sent = 1;
}

static void signals_result(void *ud, PGresult *res)
{
    pgb *b = ud;
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK)
        return;
    for (int i = 0; i < PQntuples(res); i++) {
        pgq *q = queue_named(b, PQgetvalue(res, i, 0));
        const char *key = PQgetvalue(res, i, 1);
        size_t len = (size_t)PQgetlength(res, i, 1);
        uint32_t slot;
        claim *c = q && q->q ? slot_of(q, key, len, &slot) : NULL;
        /* A cancel of an earlier claim of the key (it ended meanwhile) is stale. */
        if (c && c->token == atoll(PQgetvalue(res, i, 2)) && q->hooks.cancel)
            q->hooks.cancel(q->hooks.ud, key, len);
    }
}

static void control_synced(void *ud, int ok)
{
    (void)ok;
    pgb *b = ud;
    b->control_flight = 0;
    if (b->control_again)
        kick(b);
}

/* Reads the paused queues and this runner's cancels (with the heartbeat, and when notified). */
static void send_control(pgb *b)
{
    if (b->control_flight) {
        b->control_again = 1;
        return;
    }
    const char *v[1] = {b->runner_id_s};
    if (wq_pgconn_send(b->c, wq_pg_stmts[PGS_QUEUES].name, NULL, 0, NULL, queues_result, b) < 0 ||
        wq_pgconn_send(b->c, wq_pg_stmts[PGS_SIGNALS].name, NULL, 1, v, signals_result, b) < 0 ||
        wq_pgconn_sync(b->c, control_synced, b) < 0)
        return;
    b->control_flight = 1;
}

static void prune_result(void *ud, PGresult *res)
{
    pgb *b = ud;
    b->prune_more = res && PQresultStatus(res) == PGRES_COMMAND_OK &&
                    atol(PQcmdTuples(res)) >= 1000; /* a full batch: more may be due */
}

static void prune_synced(void *ud, int ok)
{
    (void)ok;
    ((pgb *)ud)->prune_flight = 0;
}

/* ---- the outbox (schedules) ---- */

static void pstmt_free(pstmt *p)
{
    free(p->sql);
    for (int i = 0; i < p->n; i++)
        free(p->params[i]);
}

/* Queues sql (with @S) and its n text parameters (NULL: SQL NULL); 0 or WQ_ENOMEM. */
static int outbox_put(pgb *b, const char *what, const char *sql, int n, const char *const *v)
{
    if (b->nout == b->outcap) {
        size_t ncap = b->outcap ? b->outcap * 2 : 16;
        pstmt *np = realloc(b->outbox, ncap * sizeof *np);
        if (!np)
            return WQ_ENOMEM;
        b->outbox = np;
        b->outcap = ncap;
    }
    pstmt *p = &b->outbox[b->nout];
    memset(p, 0, sizeof *p);
    p->what = what;
    p->n = n;
    p->sql = strdup(sql); /* @S is expanded when it is sent: the connection may be down now */
    int oom = !p->sql;
    for (int i = 0; i < n; i++)
        if (v[i] && !(p->params[i] = strdup(v[i])))
            oom = 1;
    if (oom) {
        pstmt_free(p);
        return WQ_ENOMEM;
    }
    b->nout++;
    kick(b);
    return 0;
}

/* The answers come in the order sent: the i-th is outbox[i]'s (an index: the array may grow
 * meanwhile). */
static void outbox_result(void *ud, PGresult *res)
{
    pgb *b = ud;
    if (b->outbox_seen >= b->nout)
        return;
    pstmt *p = &b->outbox[b->outbox_seen++];
    if (res && PQresultStatus(res) == PGRES_FATAL_ERROR) {
        char msg[400];
        wq_pg_msg(msg, sizeof msg, PQresultErrorMessage(res));
        logf_(b, WQ_LOG_ERROR, "%s: the database refused it: %s", p->what, msg);
        p->failed = 1;
    } else if (res && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
               strncmp(PQgetvalue(res, 0, 0), "caught up", 9) == 0) {
        logf_(b, WQ_LOG_INFO, "%s '%s' of %s: %s (a time missed while no runner ran it)", p->what,
              p->params[1] ? p->params[1] : "?", p->params[0] ? p->params[0] : "?",
              PQgetvalue(res, 0, 0));
    }
}

static void outbox_synced(void *ud, int ok)
{
    pgb *b = ud;
    size_t n = (size_t)b->outbox_flight;
    b->outbox_flight = 0;
    size_t drop = 0;
    for (size_t i = 0; i < n; i++)
        if (ok || b->outbox[i].failed) {
            pstmt_free(&b->outbox[i]);
            drop++;
        } else {
            b->outbox[i - drop] = b->outbox[i];
        }
    /* the ones kept (not committed) stay first, in order */
    memmove(b->outbox + (n - drop), b->outbox + n, (b->nout - n) * sizeof *b->outbox);
    b->nout -= drop;
    if (b->nout)
        kick(b);
}

/* ---- the database-wide view (dashboards, /metrics) ---- */

#define VIEW_MS 2000   /* read it this often while wanted (less often when it is slow) */
#define VIEW_IDLE_S 60 /* and stop when nobody asked for it this long */

typedef struct view {
    wq_db_view pub;
    wq_db_queue *queues;
    size_t nq, qcap;
    wq_db_runner *runners;
    size_t nr, rcap;
    char **strs; /* names it owns */
    size_t ns, scap;
    int oom;
} view;

static void view_free(view *v)
{
    if (!v)
        return;
    for (size_t i = 0; i < v->ns; i++)
        free(v->strs[i]);
    free(v->strs);
    free(v->queues);
    free(v->runners);
    free(v);
}

static const char *view_str(view *v, const char *s)
{
    if (v->ns == v->scap) {
        size_t ncap = v->scap ? v->scap * 2 : 32;
        char **n = realloc(v->strs, ncap * sizeof *n);
        if (!n) {
            v->oom = 1;
            return "";
        }
        v->strs = n;
        v->scap = ncap;
    }
    char *d = strdup(s);
    if (!d) {
        v->oom = 1;
        return "";
    }
    return v->strs[v->ns++] = d;
}

static wq_db_queue *view_queue(view *v, const char *name)
{
    for (size_t i = 0; i < v->nq; i++)
        if (strcmp(v->queues[i].name, name) == 0)
            return &v->queues[i];
    if (v->nq == v->qcap) {
        size_t ncap = v->qcap ? v->qcap * 2 : 16;
        wq_db_queue *n = realloc(v->queues, ncap * sizeof *n);
        if (!n) {
            v->oom = 1;
            return NULL;
        }
        v->queues = n;
        v->qcap = ncap;
    }
    wq_db_queue *q = &v->queues[v->nq++];
    memset(q, 0, sizeof *q);
    q->name = view_str(v, name);
    return q;
}

static wq_db_runner *view_runner(view *v, int64_t id)
{
    for (size_t i = 0; i < v->nr; i++)
        if (v->runners[i].id == id)
            return &v->runners[i];
    return NULL;
}

static void view_rest_result(void *ud, PGresult *res)
{
    pgb *b = ud;
    view *v = b->view_next_v;
    if (!v || !res || PQresultStatus(res) != PGRES_TUPLES_OK) {
        if (v)
            v->oom = 1; /* not complete: not shown */
        return;
    }
    for (int i = 0; i < PQntuples(res); i++) {
        const char *kind = PQgetvalue(res, i, 0);
        if (kind[0] == 'q') {
            wq_db_queue *q = view_queue(v, PQgetvalue(res, i, 1));
            if (q) {
                q->paused = atoi(PQgetvalue(res, i, 2));
                q->dead = strtoull(PQgetvalue(res, i, 3), NULL, 10);
            }
        } else if (kind[0] == 'r') {
            if (v->nr == v->rcap) {
                size_t ncap = v->rcap ? v->rcap * 2 : 8;
                wq_db_runner *n = realloc(v->runners, ncap * sizeof *n);
                if (!n) {
                    v->oom = 1;
                    continue;
                }
                v->runners = n;
                v->rcap = ncap;
            }
            wq_db_runner *r = &v->runners[v->nr++];
            memset(r, 0, sizeof *r);
            r->id = atoll(PQgetvalue(res, i, 1));
            r->name = view_str(v, PQgetvalue(res, i, 2));
            r->host = view_str(v, PQgetvalue(res, i, 3));
            r->pid = atoi(PQgetvalue(res, i, 4));
            r->started_at = atof(PQgetvalue(res, i, 5));
            r->heartbeat_age = atof(PQgetvalue(res, i, 6));
            r->done = strtoull(PQgetvalue(res, i, 7), NULL, 10);
            r->self = r->id == b->runner_id;
        } else if (kind[0] == 'm') {
            v->pub.jobs_dead_tuples = atoll(PQgetvalue(res, i, 1));
            v->pub.takeovers = strtoull(PQgetvalue(res, i, 2), NULL, 10);
            v->pub.crash_dead = strtoull(PQgetvalue(res, i, 3), NULL, 10);
        }
    }
}

static void view_jobs_result(void *ud, PGresult *res)
{
    pgb *b = ud;
    view *v = b->view_next_v;
    if (!v || !res || PQresultStatus(res) != PGRES_TUPLES_OK) {
        if (v)
            v->oom = 1;
        return;
    }
    for (int i = 0; i < PQntuples(res); i++) {
        wq_db_queue *q = view_queue(v, PQgetvalue(res, i, 0));
        if (!q)
            continue;
        uint64_t c[5];
        for (int k = 0; k < 5; k++)
            c[k] = strtoull(PQgetvalue(res, i, 2 + k), NULL, 10);
        q->queued += c[0];
        q->processing += c[1];
        q->waiting += c[2];
        q->held += c[3];
        q->retrying += c[4];
        wq_db_runner *r =
            PQgetisnull(res, i, 1) ? NULL : view_runner(v, atoll(PQgetvalue(res, i, 1)));
        if (r)
            r->running += c[1];
    }
}

static void view_synced(void *ud, int ok)
{
    pgb *b = ud;
    view *v = b->view_next_v;
    b->view_next_v = NULL;
    b->view_flight = 0;
    int64_t took = real_ns() - b->view_sent;
    /* a slow read (a big table) is made less often: at most a tenth of the time */
    int64_t wait = (int64_t)VIEW_MS * 1000000;
    if (took * 10 > wait)
        wait = took * 10;
    b->view_next = real_ns() + wait;
    if (!ok || !v || v->oom) {
        view_free(v);
        return;
    }
    v->pub.at = wall_s();
    v->pub.nqueues = v->nq;
    v->pub.queues = v->queues;
    v->pub.nrunners = v->nr;
    v->pub.runners = v->runners;
    view_free(b->view);
    b->view = v;
}

static void send_view(pgb *b)
{
    view *v = calloc(1, sizeof *v);
    if (!v)
        return;
    const char *s[1] = {b->schema};
    /* On the outcomes' connection when it is up: the pass over jobs takes a while (seconds
     * under a long transaction elsewhere) and claims must not wait behind it. The small
     * tables first: the runners' rows are there when jobs' counts come. */
    wq_pgconn *vc = b->c2 && wq_pgconn_up(b->c2) ? b->c2 : b->c;
    b->view_next_v = v;
    if (wq_pgconn_send(vc, wq_pg_stmts[PGS_VIEW_REST].name, NULL, 1, s, view_rest_result, b) < 0 ||
        wq_pgconn_send(vc, wq_pg_stmts[PGS_VIEW_JOBS].name, NULL, 0, NULL, view_jobs_result, b) <
            0 ||
        wq_pgconn_sync(vc, view_synced, b) < 0) {
        b->view_next_v = NULL;
        view_free(v);
        return; /* the loss handler answers what was sent; the next tick tries again */
    }
    b->view_flight = 1;
    b->view_sent = real_ns();
}

static const wq_db_view *pg_db_view(wq_backend *base)
{
    pgb *b = (pgb *)base;
    b->view_asked = real_ns();
    if (!b->view_wanted) {
        b->view_wanted = 1; /* from now on, every VIEW_MS */
        b->view_next = 0;
    }
    return b->view ? &b->view->pub : NULL;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    pgb *b = arg;
    int64_t now = real_ns();
    if (!wq_pgconn_up(b->c)) {
        if (b->down_since && now - b->down_since > (int64_t)(b->lease * 1e9))
            lose_all(b, "the database was unreachable for longer than --lease");
        return;
    }
    if (!b->registered) {
        if (!b->reregistering)
            reregister(b);
        return;
    }
    if (now - b->last_heartbeat > (int64_t)(b->lease * 1e9 / 5) ||
        now - b->last_heartbeat > WQ_NS_PER_S) {
        char done[24];
        snprintf(done, sizeof done, "%llu", (unsigned long long)b->st.rows_written);
        const char *v[2] = {b->runner_id_s, done};
        wq_pgconn_send(b->c, wq_pg_stmts[PGS_HEARTBEAT].name, NULL, 2, v, heartbeat_result, b);
        wq_pgconn_sync(b->c, NULL, NULL);
        send_control(b); /* the fallback for a notification missed (reconnect) */
    }
    if (b->view_wanted && now - b->view_asked > (int64_t)VIEW_IDLE_S * WQ_NS_PER_S)
        b->view_wanted = 0; /* nobody looked for a while: no more passes over jobs */
    if (b->view_wanted && !b->view_flight && now >= b->view_next)
        send_view(b);
    if (now - b->last_reap > (int64_t)REAP_MS * 1000000) {
        b->last_reap = now;
        char cls[24];
        snprintf(cls, sizeof cls, "%d", WQ_PG_LOCK_CLASS);
        const char *v[1] = {cls};
        wq_pgconn_send(b->c, wq_pg_stmts[PGS_REAP].name, NULL, 1, v, reap_result, b);
        wq_pgconn_sync(b->c, NULL, NULL);
    }
    /* Queues with group limits: held items of groups with room (see wqrun.sweep). */
    if (now - b->last_sweep > (int64_t)PRUNE_MS * 1000000) {
        b->last_sweep = now;
        int any = 0;
        for (pgq *q = b->queues; q; q = q->next) {
            const char *v[1] = {q->name};
            if (q->limited && q->q &&
                wq_pgconn_send(b->c, wq_pg_stmts[PGS_SWEEP].name, NULL, 1, v, NULL, NULL) == 0)
                any = 1;
        }
        if (any)
            wq_pgconn_sync(b->c, NULL, NULL);
    }
    /* Expired completed-job memories: a thousand per short transaction, again at once while
     * there are more, else every PRUNE_MS. */
    if (b->keeps_done && !b->prune_flight &&
        (b->prune_more || now - b->last_prune > (int64_t)PRUNE_MS * 1000000)) {
        b->last_prune = now;
        if (wq_pgconn_send(b->c, wq_pg_stmts[PGS_PRUNE_DONE].name, NULL, 0, NULL, prune_result,
                           b) == 0 &&
            wq_pgconn_sync(b->c, prune_synced, b) == 0)
            b->prune_flight = 1;
    }
    kick(b); /* the poll fallback */
}

/* Prepares the statements on conn (and LISTENs on the first connection). */
static void prepare_all(pgb *b, wq_pgconn *conn, int listen)
{
    PGconn *pg = wq_pgconn_pg(conn);
    for (int i = 0; i < PGS_COUNT; i++) {
        char *sql = wq_pg_sql(pg, b->schema, wq_pg_stmts[i].sql);
        if (sql)
            wq_pgconn_prepare(conn, wq_pg_stmts[i].name, sql, NULL, NULL);
        free(sql);
    }
    char *add = wq_pg_sql(pg, b->schema,
                          "SELECT @S.add($1, $2, $3::jsonb, $4, $5, $6, coalesce($7, false), "
                          "coalesce($8, false))");
    if (add)
        wq_pgconn_prepare(conn, "wq_add", add, NULL, NULL);
    free(add);
    char *sql = listen ? wq_pg_sql(pg, b->schema, "LISTEN @S") : NULL;
    if (sql)
        wq_pgconn_send(conn, NULL, sql, 0, NULL, NULL, NULL);
    free(sql);
    wq_pgconn_sync(conn, NULL, NULL);
}

/* The second connection (outcomes) is back: prepare again, and what waited goes. */
static void on_up2(void *ud)
{
    pgb *b = ud;
    prepare_all(b, b->c2, 0);
    kick(b);
}

static void on_down2(void *ud, const char *why)
{
    (void)ud;
    (void)why; /* outcomes use the first connection meanwhile; its loss is the one logged */
}

static void on_up(void *ud)
{
    pgb *b = ud;
    logf_(b, WQ_LOG_INFO, "reconnected to PostgreSQL at %s after %.1f s", b->where,
          (double)(real_ns() - b->down_since) / 1e9);
    b->down_since = 0;
    b->st.reconnects++;
    b->st.connected = 1;
    prepare_all(b, b->c, 1);
    char cls[24];
    snprintf(cls, sizeof cls, "%d", WQ_PG_LOCK_CLASS);
    const char *v[2] = {cls, b->runner_id_s};
    wq_pgconn_send(b->c, wq_pg_stmts[PGS_RELOCK].name, NULL, 2, v, relock_result, b);
    char done[24];
    snprintf(done, sizeof done, "%llu", (unsigned long long)b->st.rows_written);
    const char *h[2] = {b->runner_id_s, done};
    wq_pgconn_send(b->c, wq_pg_stmts[PGS_HEARTBEAT].name, NULL, 2, h, heartbeat_result, b);
    wq_pgconn_sync(b->c, NULL, NULL);
    b->control_again = 1; /* pauses and cancels notified while it was down */
    for (pgq *q = b->queues; q; q = q->next) {
        q->waiting_db = -1;
        q->more = 1;
        /* Outcomes that were in flight go again. */
        for (uint32_t i = 0; i < q->nclaims; i++)
            if (q->claims[i].used && !q->claims[i].sent)
                touch_slot(q, i);
    }
    kick(b);
}

static void on_down(void *ud, const char *why)
{
    pgb *b = ud;
    if (!b->down_since) {
        b->down_since = real_ns();
        logf_(b, WQ_LOG_WARN, "lost the connection to PostgreSQL at %s (%s); reconnecting",
              b->where, why);
    }
    b->st.connected = 0;
    set_err(b, "database unavailable: %s", why);
}

static void on_notify(void *ud, const char *channel, const char *payload)
{
    pgb *b = ud;
    (void)channel;
    if (payload[0] == '!') { /* '!control': a pause, resume or cancel (no queue name has '!') */
        b->control_again = 1;
        kick(b);
        return;
    }
    for (pgq *q = b->queues; q; q = q->next)
        if (strcmp(q->name, payload) == 0) {
            q->more = 1;
            q->hint = 0; /* another runner's items may have gone back (takeover) */
        }
    kick(b);
}

/* ---- the ops ---- */

static int busy(const pgb *b)
{
    if (b->adds_flight || b->claim_flight || b->out_flight || b->nadds || b->nadds_sent)
        return 1;
    for (const pgq *q = b->queues; q; q = q->next)
        if (q->ntouched || q->nsent)
            return 1;
    return 0;
}

static void pg_drain(wq_backend *base, int timeout_ms)
{
    pgb *b = (pgb *)base;
    b->stopping = 1;
    int64_t end = real_ns() + (int64_t)timeout_ms * 1000000;
    while (wq_pgconn_up(b->c) && b->registered && real_ns() < end) {
        on_cycle(-1, 0, b);
        if (!busy(b))
            break;
        wq_pgconn_wait(b->c, 50);
        if (b->c2)
            wq_pgconn_wait(b->c2, 50);
    }
}

static void pg_close(wq_backend *base)
{
    pgb *b = (pgb *)base;
    if (b->c && wq_pgconn_up(b->c) && b->registered) {
        /* Last outcomes, then leave: what still runs goes back to the queue. */
        pg_drain(base, 5000);
        char *sql = wq_pg_sql(wq_pgconn_pg(b->c), b->schema,
                              "WITH w AS (DELETE FROM @S.waiting WHERE runner = $1), "
                              "r AS (DELETE FROM @S.runners WHERE id = $1) "
                              "SELECT @S.release(ARRAY[$1::bigint], false)");
        const char *v[1] = {b->runner_id_s};
        if (sql && wq_pgconn_send(b->c, NULL, sql, 1, v, NULL, NULL) == 0 &&
            wq_pgconn_sync(b->c, NULL, NULL) == 0)
            wq_pgconn_wait(b->c, 5000);
        free(sql);
    }
    wq_pgconn_free(b->c2);
    b->c2 = NULL;
    wq_pgconn_free(b->c); /* adds still under way come back to b->adds */
    b->c = NULL;
    for (size_t i = 0; i < b->nadds; i++) {
        if (b->adds[i].fn)
            b->adds[i].fn(b->adds[i].ud, WQ_EIO, "the runner is stopping");
        free_add(&b->adds[i]);
    }
    while (b->ops_waiting) {
        pop *o = b->ops_waiting;
        b->ops_waiting = o->next;
        o->fn(o->ud, WQ_EIO, "the runner is stopping");
        pop_free(o);
    }
    free(b->adds);
    for (size_t i = 0; i < b->nout; i++)
        pstmt_free(&b->outbox[i]);
    free(b->outbox);
    view_free(b->view);
    view_free(b->view_next_v);
    if (b->cycle_ev)
        event_free(b->cycle_ev);
    if (b->tick_ev)
        event_free(b->tick_ev);
    if (b->due_ev)
        event_free(b->due_ev);
    pgq *q = b->queues;
    while (q) {
        pgq *next = q->next;
        for (uint32_t i = 0; i < q->nclaims; i++)
            if (q->claims[i].used) {
                free(q->claims[i].key);
                free(q->claims[i].err);
                free(q->claims[i].result);
            }
        for (size_t i = 0; i < q->nsent; i++) {
            free(q->sent[i].err);
            free(q->sent[i].payload);
            free(q->sent[i].done);
        }
        PQclear(q->claim_res);
        PQclear(q->finish_res);
        wq_keymap_free(q->keys);
        free(q->claims);
        free(q->free);
        free(q->touched);
        free(q->sent);
        free(q);
        q = next;
    }
    free(b->url);
    free(b);
}

static const char *pg_errmsg(const wq_backend *base)
{
    return ((const pgb *)base)->errmsg;
}

static int pg_check(wq_backend *base)
{
    (void)base;
    return 0; /* a lost connection is waited for, never fatal */
}

static int pg_gone(const wq_backend *base)
{
    (void)base;
    return 0;
}

static void pg_set_busy_timeout(wq_backend *base, int ms)
{
    (void)base;
    (void)ms;
}

static const char *pg_where(const wq_backend *base)
{
    return ((const pgb *)base)->where;
}

static int pg_dirty(const wq_backend *base)
{
    (void)base;
    return 0; /* adds carry their own acknowledgement; outcomes are written by the cycle */
}

static int pg_flush(wq_backend *base)
{
    kick((pgb *)base);
    return 0;
}

static void pg_set_commit_fn(wq_backend *base, void (*fn)(void *ud, int ok), void *ud)
{
    (void)base;
    (void)fn;
    (void)ud;
}

static int pg_poll_inbox(wq_backend *base, int (*fn)(void *ud, const wq_inbox_row *row), void *ud)
{
    (void)base;
    (void)fn;
    (void)ud;
    return 0; /* producers call wqrun.add() instead */
}

static int pg_poll_commands(wq_backend *base, void (*fn)(void *ud, const wq_command *c), void *ud)
{
    (void)base;
    (void)fn;
    (void)ud;
    return 0;
}

static void pg_command_result(wq_backend *base, int64_t id, int ok, const char *text)
{
    (void)base;
    (void)id;
    (void)ok;
    (void)text;
}

static void pg_known_queue(wq_backend *base, const char *name)
{
    (void)base;
    (void)name;
}

static void pg_get_stats(const wq_backend *base, wq_backend_stats *st)
{
    const pgb *b = (const pgb *)base;
    *st = b->st;
    st->shared = 1;
    st->connected = wq_pgconn_up(b->c);
}

static void pg_stop(wq_backend *base)
{
    pgb *b = (pgb *)base;
    b->stopping = 1;
    kick(b);
}

static wq_bqueue *pg_attach(wq_backend *base, const char *name, wq_queue *eq,
                            const wq_bqueue_hooks *hooks)
{
    pgb *b = (pgb *)base;
    for (pgq *q = b->queues; q; q = q->next)
        if (strcmp(q->name, name) == 0) {
            q->q = eq;
            if (hooks)
                q->hooks = *hooks;
            return &q->base;
        }
    pgq *q = calloc(1, sizeof *q);
    if (!q || !(q->keys = wq_keymap_new())) {
        free(q);
        set_err(b, "out of memory");
        return NULL;
    }
    q->base.b = base;
    q->b = b;
    snprintf(q->name, sizeof q->name, "%s", name);
    q->q = eq;
    if (hooks)
        q->hooks = *hooks;
    q->waiting_db = -1;
    q->more = 1;
    q->db_rows = 1; /* until a claim finds none */
    q->floor_at = -INFINITY;
    q->floor_resets = -1;
    q->next = b->queues;
    b->queues = q;
    kick(b);
    return &q->base;
}

static void pg_detach(wq_bqueue *bq)
{
    pgq *q = (pgq *)bq;
    q->stopped = 1;
    q->q = NULL; /* being freed: outcomes not built by now are left to the release at close */
    q->ntouched = 0;
    memset(&q->hooks, 0, sizeof q->hooks);
}

static int pg_restore(wq_bqueue *bq, void (*item_fn)(void *ud, const wq_restored *r),
                      void (*fail_fn)(void *ud, const char *key, size_t len, int64_t requeues,
                                      const char *last_error),
                      void (*dead_fn)(void *ud, const char *key, size_t len, const char *payload,
                                      const char *error, int64_t attempts, double failed_at),
                      void *ud)
{
    (void)bq;
    (void)item_fn;
    (void)fail_fn;
    (void)dead_fn;
    (void)ud;
    return 0; /* nothing is local: items come by claims */
}

static void pg_set_meta(wq_bqueue *bq,
                        void (*fn)(void *ud, const wq_item_info *info, wq_item_meta *out), void *ud)
{
    (void)bq;
    (void)fn;
    (void)ud;
}

/* Whether s is valid UTF-8 without NUL bytes (PostgreSQL text holds nothing else). */
static int pg_text_ok(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c == 0)
            return 0;
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n)
            return 0;
        for (size_t j = 1; j < k; j++)
            if (((unsigned char)s[i + j] >> 6) != 2)
                return 0;
        i += k;
    }
    return 1;
}

/* Whether JSON text holds the escape \u0000 (jsonb refuses it). */
static int json_nul(const char *s, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++) {
        if (s[i] != '\\')
            continue;
        if (s[i + 1] == 'u' && i + 5 < n && memcmp(s + i + 2, "0000", 4) == 0)
            return 1;
        i++; /* the escaped character */
    }
    return 0;
}

static char *dupn(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

static int pg_add(wq_bqueue *bq, const wq_badd *a, wq_badd_fn fn, void *ud)
{
    pgq *q = (pgq *)bq;
    pgb *b = q->b;
    if (!pg_text_ok(a->key, a->keylen)) {
        set_err(b, "bad argument 'key' (PostgreSQL text holds UTF-8 without NUL bytes)");
        return WQ_EINVAL;
    }
    if (a->grp && !pg_text_ok(a->grp, a->grplen)) {
        set_err(b, "bad argument 'group' (PostgreSQL text holds UTF-8 without NUL bytes)");
        return WQ_EINVAL;
    }
    if (a->payload && (!pg_text_ok(a->payload, a->paylen) || json_nul(a->payload, a->paylen))) {
        set_err(b, "bad argument 'payload' (PostgreSQL's jsonb holds UTF-8 text without NUL "
                   "characters, \\u0000)");
        return WQ_EINVAL;
    }
    if (a->keylen > 65536)
        return WQ_E2BIG;
    if (!wq_pgconn_up(b->c) && (a->no_wait || b->nadds >= ADD_BUFFER_MAX)) {
        set_err(b, "database unavailable");
        return WQ_EIO;
    }
    if (b->nadds == b->acap) {
        size_t ncap = b->acap ? b->acap * 2 : 64;
        padd *na = realloc(b->adds, ncap * sizeof *na);
        if (!na)
            return WQ_ENOMEM;
        b->adds = na;
        b->acap = ncap;
    }
    padd *p = &b->adds[b->nadds];
    memset(p, 0, sizeof *p);
    p->q = q;
    p->fn = fn;
    p->ud = ud;
    char num[40];
    p->params[0] = strdup(q->name);
    p->params[1] = dupn(a->key, a->keylen);
    int oom = !p->params[0] || !p->params[1];
    if (a->payload && !(p->params[2] = dupn(a->payload, a->paylen)))
        oom = 1;
    if (a->after > 0) {
        snprintf(num, sizeof num, "%.9f", a->after);
        if (!(p->params[3] = strdup(num)))
            oom = 1;
    }
    if (a->has_priority) {
        snprintf(num, sizeof num, "%d", (int)a->priority);
        if (!(p->params[4] = strdup(num)))
            oom = 1;
    }
    if (a->grp && !(p->params[5] = dupn(a->grp, a->grplen)))
        oom = 1;
    if (a->force && !(p->params[6] = strdup("true")))
        oom = 1;
    if (a->unique && !(p->params[7] = strdup("true")))
        oom = 1;
    if (oom) {
        free_add(p);
        return WQ_ENOMEM;
    }
    b->nadds++;
    q->adds_out++;
    kick(b);
    return 0;
}

static void pg_touch(wq_bqueue *bq, wq_event ev, const char *key, size_t len)
{
    pgq *q = (pgq *)bq;
    if (ev == WQ_EV_QUEUED || ev == WQ_EV_PROCESSING)
        return; /* a claim arriving, or a handler taking it: nothing to write */
    uint32_t slot;
    if (!slot_of(q, key, len, &slot))
        return;
    touch_slot(q, slot);
    kick(q->b);
}

static void pg_failures(wq_bqueue *bq, const char *key, size_t len, int64_t requeues,
                        const char *last_error)
{
    pgq *q = (pgq *)bq;
    uint32_t slot;
    claim *c = slot_of(q, key, len, &slot);
    if (!c)
        return;
    c->new_requeues = requeues;
    if (last_error) {
        free(c->err);
        c->err = strdup(last_error);
    }
}

static void pg_dead(wq_bqueue *bq, const char *key, size_t len, const char *payload, size_t paylen,
                    const char *error, int64_t attempts, double failed_at)
{
    (void)payload;
    (void)paylen;
    (void)failed_at;
    pgq *q = (pgq *)bq;
    uint32_t slot;
    claim *c = slot_of(q, key, len, &slot);
    if (!c)
        return;
    c->dead = 1;
    c->attempts = attempts;
    free(c->err);
    c->err = error ? strdup(error) : NULL;
}

static void pg_undead(wq_bqueue *bq, const char *key, size_t len)
{
    (void)bq;
    (void)key;
    (void)len; /* a success clears the dead letter in the database (finish) */
}

static void pg_done_put(wq_bqueue *bq, const char *key, size_t len, double finished_at,
                        const char *result, size_t rlen)
{
    (void)finished_at; /* the database's clock decides (finish) */
    pgq *q = (pgq *)bq;
    uint32_t slot;
    claim *c = slot_of(q, key, len, &slot);
    if (!c)
        return; /* not a claim of this runner (a q:get() done of another's?) */
    free(c->result);
    c->result = result && pg_text_ok(result, rlen) && !json_nul(result, rlen) ? dupn(result, rlen)
                                                                              : strdup("null");
}

static void pg_done_del(wq_bqueue *bq, const char *key, size_t len)
{
    (void)bq;
    (void)key;
    (void)len;
}

static int pg_done_prune(wq_bqueue *bq, double older_than)
{
    (void)bq;
    (void)older_than;
    return 0;
}

static int pg_restore_done(wq_bqueue *bq,
                           void (*fn)(void *ud, const char *key, size_t len, double finished_at,
                                      const char *result, size_t rlen),
                           void *ud)
{
    (void)bq;
    (void)fn;
    (void)ud;
    return 0;
}

static void pg_schedule_put(wq_bqueue *bq, const wq_schedule_row *row)
{
    pgq *q = (pgq *)bq;
    char next[40];
    snprintf(next, sizeof next, "%.6f", row->next_at);
    char *key = row->key ? dupn(row->key, row->keylen) : NULL;
    char *payload = row->payload ? dupn(row->payload, row->paylen) : NULL;
    const char *v[8] = {q->name,
                        row->name,
                        row->spec,
                        key,
                        payload,
                        row->tz == WQ_SCHED_LOCAL ? "local" : "utc",
                        row->catch_up == WQ_SCHED_CATCH_UP_SKIP ? "skip" : "once",
                        next};
    if ((row->key && !key) || (row->payload && !payload) ||
        outbox_put(q->b, "schedule",
                   "SELECT @S.define_schedule($1, $2, $3, $4, $5::jsonb, $6, $7, $8::float8)", 8,
                   v) < 0)
        logf_(q->b, WQ_LOG_ERROR, "schedule '%s' of %s: out of memory: not stored", row->name,
              q->name);
    free(key);
    free(payload);
}

static void pg_schedule_del(wq_bqueue *bq, const char *name)
{
    pgq *q = (pgq *)bq;
    const char *v[2] = {q->name, name};
    if (outbox_put(q->b, "schedule", "DELETE FROM @S.schedules WHERE queue = $1 AND name = $2", 2,
                   v) < 0)
        logf_(q->b, WQ_LOG_ERROR, "schedule '%s' of %s: out of memory: not deleted", name, q->name);
}

static int pg_schedule_fire(wq_bqueue *bq, const wq_schedule_row *row)
{
    pgq *q = (pgq *)bq;
    char at[40], next[40];
    snprintf(at, sizeof at, "%.6f", row->last_at);
    snprintf(next, sizeof next, "%.6f", row->next_at);
    const char *v[4] = {q->name, row->name, at, next};
    return outbox_put(q->b, "schedule", "SELECT @S.fire($1, $2, $3::float8, $4::float8)", 4, v);
}

static int pg_restore_schedules(wq_bqueue *bq, void (*fn)(void *ud, const wq_schedule_row *row),
                                void *ud)
{
    (void)bq;
    (void)fn;
    (void)ud;
    return 0;
}

static int pg_paused(wq_bqueue *bq)
{
    (void)bq;
    return 0;
}

static void pg_set_paused(wq_bqueue *bq, int paused)
{
    (void)bq;
    (void)paused;
}

static void pg_define(wq_bqueue *bq, const wq_queue_def *def)
{
    pgq *q = (pgq *)bq;
    q->def = *def;
    if (def->keep_done > 0)
        q->b->keeps_done = 1;
    q->limited = def->group_concurrency > 0 || def->group_rate > 0 || def->rate > 0;
    q->has_def = 1;
    q->def_sent = 0;
    kick(q->b);
}

static int pg_pending(wq_bqueue *bq)
{
    pgq *q = (pgq *)bq;
    q->rows_wanted = 1;
    return q->db_rows || q->adds_out || q->nsent || q->ntouched;
}

static void pg_want(wq_bqueue *bq)
{
    kick(((pgq *)bq)->b);
}

static void op_result(void *ud, PGresult *res)
{
    pop *o = ud;
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        char msg[400];
        wq_pg_msg(msg, sizeof msg,
                  res ? PQresultErrorMessage(res) : "the connection to the database was lost");
        free(o->text);
        o->text = strdup(msg);
        o->answered = -1;
        return;
    }
    const char *v = PQgetvalue(res, 0, 0);
    o->answered = 1;
    switch (o->kind) {
    case WQ_BOP_PAUSE:
    case WQ_BOP_RESUME: o->result = v[0] == 't'; break;
    case WQ_BOP_REMOVE:
        o->result = strcmp(v, "removed") == 0      ? 0
                    : strcmp(v, "processing") == 0 ? WQ_EBUSY
                                                   : WQ_ENOENT;
        break;
    case WQ_BOP_CANCEL:
        o->result = strcmp(v, "cancelling") == 0 ? 0
                    : strcmp(v, "absent") == 0   ? WQ_ENOENT
                                                 : WQ_EBUSY;
        break;
    case WQ_BOP_RETRY_DEAD:
    case WQ_BOP_CANCEL_AFTER:
    case WQ_BOP_FORGET_DONE:
    case WQ_BOP_PURGE_DEAD: o->result = atoi(v); break;
    case WQ_BOP_SET_GROUP_LIMIT: o->result = 0; break;
    case WQ_BOP_GROUP_LIMIT:
    case WQ_BOP_ITEM:
    case WQ_BOP_STATS:
    case WQ_BOP_DONE_INFO:
    case WQ_BOP_ITEMS:
    case WQ_BOP_DEAD:
    case WQ_BOP_SCHEDULES:
    case WQ_BOP_HELD_GROUPS:
        o->result = atoi(v);
        o->text = strdup(PQgetvalue(res, 0, 1));
        if (!o->text) {
            o->text = strdup("out of memory");
            o->answered = -1;
        }
        break;
    }
}

static void op_synced(void *ud, int ok)
{
    pop *o = ud;
    if (ok && o->answered == 1)
        o->fn(o->ud, o->result, o->text);
    else
        o->fn(o->ud, WQ_EIO, o->answered == -1 && o->text ? o->text : "database unavailable");
    pop_free(o);
}

/* Sends o, answered through op_synced; -1 when the connection is down (o untouched). */
static int send_op(pgb *b, pop *o)
{
    if (wq_pgconn_up(b->c) &&
        wq_pgconn_send(b->c, NULL, o->sql, o->nparams, (const char *const *)o->params, op_result,
                       o) == 0 &&
        wq_pgconn_sync(b->c, op_synced, o) == 0)
        return 0;
    return -1;
}

/* The operator actions whose outcome transaction has committed go now, in order. */
static void send_waiting_ops(pgb *b)
{
    while (b->ops_waiting && b->ops_waiting->need <= b->out_done_txn) {
        pop *o = b->ops_waiting;
        b->ops_waiting = o->next;
        if (send_op(b, o) < 0) {
            o->fn(o->ud, WQ_EIO, "database unavailable");
            pop_free(o);
        }
    }
}

/* An optional field of the JSON objects the listings build: absent when NULL. */
#define PG_OPT(name, expr)                                                                         \
    " || CASE WHEN " expr " IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('" name "', " expr    \
    ") END"

static int pg_op(wq_bqueue *bq, const wq_bop *op, wq_bop_fn fn, void *ud)
{
    pgq *q = (pgq *)bq;
    pgb *b = q->b;
    static const char *const sql[] = {
        [WQ_BOP_PAUSE] = "SELECT @S.pause($1, true)",
        [WQ_BOP_RESUME] = "SELECT @S.pause($1, false)",
        [WQ_BOP_REMOVE] = "SELECT @S.remove($1, $2)",
        [WQ_BOP_CANCEL] = "SELECT @S.cancel($1, $2)",
        [WQ_BOP_RETRY_DEAD] = "SELECT @S.retry_dead($1, $2)",
        [WQ_BOP_PURGE_DEAD] = "SELECT @S.purge_dead($1)",
        /* In key order as bytes (COLLATE "C"), as the engine lists them. */
        [WQ_BOP_ITEMS] =
            "SELECT count(*), coalesce(jsonb_agg(x.o ORDER BY x.k), '[]')::text FROM ("
            "SELECT key COLLATE \"C\" AS k, jsonb_build_object('key', key, 'state', state,"
            " 'priority', priority, 'attempt', attempt)" PG_OPT("payload", "payload")
                PG_OPT("group", "grp") PG_OPT("last_error", "last_error")
                    PG_OPT("ready_at",
                           "extract(epoch FROM ready_at)") " AS o FROM @S.items WHERE queue = $1 "
                                                           "AND ($2::text IS NULL OR state = $2)"
                                                           " AND ($3::text IS NULL OR key COLLATE "
                                                           "\"C\" > $3)"
                                                           " ORDER BY key COLLATE \"C\" LIMIT "
                                                           "$4::bigint) x",
        [WQ_BOP_DONE_INFO] =
            "SELECT (x.o IS NOT NULL)::int, coalesce(x.o::text, 'null') FROM (SELECT ("
            "SELECT jsonb_build_object('finished_at', extract(epoch FROM d.finished_at))" PG_OPT(
                "result", "d.result") " FROM @S.done d JOIN @S.queues q ON q.name = d.queue"
                                      " WHERE d.queue = $1 AND d.key = $2 AND d.finished_at >"
                                      " now() - make_interval(secs => coalesce(q.keep_done, 0))"
                                      ") AS o) x",
        [WQ_BOP_SET_GROUP_LIMIT] = "SELECT @S.set_group_limit($1, $2, $3::boolean,"
                                   " nullif($4::integer, 0), nullif($5::float8, 0),"
                                   " nullif($6::float8, 0)), 0",
        [WQ_BOP_GROUP_LIMIT] =
            "SELECT coalesce(g.own, false)::int, jsonb_strip_nulls(jsonb_build_object("
            "'concurrency', CASE WHEN g.own THEN g.conc ELSE q.g_conc END,"
            " 'rate', CASE WHEN g.own THEN g.rate ELSE q.g_rate END,"
            " 'burst', CASE WHEN g.own THEN g.burst ELSE q.g_burst END))::text"
            " FROM (SELECT 1) one LEFT JOIN @S.queues q ON q.name = $1"
            " LEFT JOIN @S.groups g ON g.queue = $1 AND g.grp = $2",
        [WQ_BOP_ITEM] = WQ_PG_KEY_JSON,
        [WQ_BOP_FORGET_DONE] = "WITH d AS (DELETE FROM @S.done WHERE queue = $1 AND key = $2"
                               " RETURNING 1) SELECT count(*) FROM d",
        /* q:stats()'s fields that the database holds for every runner (q:len() is queued);
         * queued counts the items group limits hold back, as the engine does. */
        [WQ_BOP_STATS] =
            "SELECT 0, jsonb_build_object("
            "'queued', count(*) FILTER (WHERE NOT running AND run_at <= now()),"
            " 'depth', count(*) FILTER (WHERE NOT running AND run_at <= now() OR running AND "
            "dirty),"
            " 'processing', count(*) FILTER (WHERE running),"
            " 'waiting', count(*) FILTER (WHERE NOT running AND run_at > now()"
            "  OR delay_at IS NOT NULL),"
            " 'throttled', count(*) FILTER (WHERE held),"
            " 'retrying', count(*) FILTER (WHERE requeues > 0),"
            " 'groups', count(DISTINCT grp) FILTER (WHERE NOT running AND run_at <= now()),"
            " 'dead', (SELECT count(*) FROM @S.dead WHERE queue = $1),"
            " 'paused', coalesce((SELECT paused FROM @S.queues WHERE name = $1), false))::text"
            " FROM @S.jobs WHERE queue = $1",
        /* A waiting row is its delayed add: gone with it. Beside a queued or running item the
         * delayed add is delay_at. The two conditions never hold for one row. */
        [WQ_BOP_CANCEL_AFTER] =
            "WITH d AS (DELETE FROM @S.jobs WHERE queue = $1 AND key = $2 AND NOT running"
            " AND run_at > now() RETURNING 1),"
            " u AS (UPDATE @S.jobs SET delay_at = NULL WHERE queue = $1 AND key = $2"
            " AND (running OR run_at <= now()) AND delay_at IS NOT NULL RETURNING 1)"
            " SELECT (SELECT count(*) FROM d) + (SELECT count(*) FROM u)",
        [WQ_BOP_DEAD] = "SELECT (SELECT count(*) FROM @S.dead WHERE queue = $1),"
                        " coalesce(jsonb_agg(x.o ORDER BY x.failed_at, x.k), '[]')::text FROM ("
                        "SELECT failed_at, key COLLATE \"C\" AS k, jsonb_build_object('key', key,"
                        " 'attempts', attempts, 'failed_at', extract(epoch FROM failed_at))" PG_OPT(
                            "payload", "payload")
                            PG_OPT("error", "error") " AS o FROM @S.dead WHERE queue = $1 ORDER BY "
                                                     "failed_at, key COLLATE \"C\""
                                                     " LIMIT $2::bigint) x",
        [WQ_BOP_SCHEDULES] =
            "SELECT count(*), coalesce(jsonb_agg(x.o ORDER BY x.k), '[]')::text FROM ("
            "SELECT name COLLATE \"C\" AS k, jsonb_build_object('name', name, 'spec', spec,"
            " 'key', coalesce(key, name), 'tz', tz, 'catch_up', catch_up)" PG_OPT(
                "payload", "payload") PG_OPT("next_at", "extract(epoch FROM next_at)")
                PG_OPT("last_at", "extract(epoch FROM last_at)") " AS o FROM @S.schedules"
                                                                 " WHERE queue = $1) x",
        /* Counted from the held items' index; the queued and running counts and the limits
         * only for the groups shown. */
        [WQ_BOP_HELD_GROUPS] =
            "WITH h AS (SELECT grp, count(*) AS held FROM @S.jobs WHERE queue = $1 AND held"
            " GROUP BY grp)"
            " SELECT (SELECT count(*) FROM h),"
            " coalesce(jsonb_agg(x.o ORDER BY x.held DESC, x.k), '[]')::text FROM ("
            "SELECT t.held, t.grp COLLATE \"C\" AS k, jsonb_build_object('group', t.grp,"
            " 'held', t.held, 'queued', t.held + (SELECT count(*) FROM @S.jobs y"
            " WHERE y.queue = $1 AND y.grp = t.grp AND NOT y.running AND NOT y.held"
            " AND y.run_at <= now()), 'running', coalesce(g.running, 0),"
            " 'own', coalesce(g.own, false))" PG_OPT(
                "concurrency", "CASE WHEN g.own THEN g.conc ELSE q.g_conc END")
                PG_OPT("rate", "CASE WHEN g.own THEN g.rate ELSE q.g_rate END") PG_OPT(
                    "burst",
                    "CASE WHEN g.own THEN g.burst ELSE q.g_burst END") " AS o"
                                                                       " FROM (SELECT grp, held "
                                                                       "FROM h ORDER BY held DESC, "
                                                                       "grp COLLATE \"C\""
                                                                       " LIMIT $2::bigint) t LEFT "
                                                                       "JOIN @S.groups g ON "
                                                                       "g.queue = $1 AND g.grp = "
                                                                       "t.grp"
                                                                       " LEFT JOIN @S.queues q ON "
                                                                       "q.name = $1) x",
    };
    if (!fn)
        return 0; /* asked only whether the database applies it: it does */
    if (!b->registered || !wq_pgconn_up(b->c)) {
        set_err(b, "database unavailable");
        return WQ_EIO;
    }
    if (op->key && !pg_text_ok(op->key, op->keylen))
        return WQ_ENOENT; /* PostgreSQL holds no such key */
    /* No key holds a NUL: the keys after "a\0b" are those after "a". */
    size_t after_len = op->after_key ? strnlen(op->after_key, op->after_len) : 0;
    if (op->after_key && !pg_text_ok(op->after_key, after_len)) {
        set_err(b, "bad argument 'after_key' (not UTF-8: PostgreSQL holds UTF-8 keys only)");
        return WQ_EINVAL;
    }
    pop *o = calloc(1, sizeof *o);
    if (!o)
        return WQ_ENOMEM;
    o->kind = op->kind;
    o->fn = fn;
    o->ud = ud;
    o->sql = wq_pg_sql(wq_pgconn_pg(b->c), b->schema, sql[op->kind]);
    char lim[24];
    snprintf(lim, sizeof lim, "%zu", op->limit ? op->limit : (size_t)1000);
    /* $1 the queue, then: the key; or state, after_key, limit (ITEMS); or limit (DEAD,
     * HELD_GROUPS); or nothing (SCHEDULES) */
    const char *v[6] = {q->name, NULL, NULL, NULL, NULL, NULL};
    size_t len[6] = {strlen(q->name), op->keylen, 0, 0, 0, 0};
    if (op->key)
        v[1] = op->key;
    int n = op->kind == WQ_BOP_PAUSE || op->kind == WQ_BOP_RESUME ||
                    op->kind == WQ_BOP_PURGE_DEAD || op->kind == WQ_BOP_STATS ||
                    op->kind == WQ_BOP_SCHEDULES
                ? 1
                : 2;
    char conc[24] = "0", rate[40] = "0", burst[40] = "0";
    if (op->kind == WQ_BOP_SET_GROUP_LIMIT) {
        if (op->glimit) {
            snprintf(conc, sizeof conc, "%u", op->glimit->concurrency);
            snprintf(rate, sizeof rate, "%.17g", op->glimit->rate);
            snprintf(burst, sizeof burst, "%.17g", op->glimit->burst);
        }
        const char *w[4] = {op->glimit ? "true" : "false", conc, rate, burst};
        for (int i = 0; i < 4; i++)
            v[2 + i] = w[i], len[2 + i] = strlen(w[i]);
        n = 6;
        q->limited = 1; /* this runner's claims count them at once, the others' when told */
    } else if (op->kind == WQ_BOP_ITEMS) {
        v[1] = op->state, len[1] = op->state ? strlen(op->state) : 0;
        v[2] = op->after_key, len[2] = after_len;
        v[3] = lim, len[3] = strlen(lim);
        n = 4;
    } else if (op->kind == WQ_BOP_DEAD || op->kind == WQ_BOP_HELD_GROUPS) {
        v[1] = lim, len[1] = strlen(lim);
        n = 2;
    }
    o->nparams = n;
    int oom = !o->sql;
    for (int i = 0; i < n && !oom; i++)
        if (v[i] && !(o->params[i] = dupn(v[i], len[i])))
            oom = 1;
    if (oom) {
        pop_free(o);
        return WQ_ENOMEM;
    }
    /* Read your own writes: the outcomes this runner has not written yet (a handler that
     * just finished) are written first. They go with the next outcome transaction, or are
     * in the one under way. */
    int unsent = 0;
    for (pgq *x = b->queues; x; x = x->next)
        if (x->ntouched || (x->nsent && !b->out_flight))
            unsent = 1;
    o->need = unsent ? b->out_txn + 1 : b->out_flight ? b->out_txn : b->out_done_txn;
    if (o->need <= b->out_done_txn && !b->ops_waiting) {
        if (send_op(b, o) == 0)
            return 0;
        pop_free(o);
        set_err(b, "database unavailable");
        return WQ_EIO;
    }
    pop **tail = &b->ops_waiting;
    while (*tail)
        tail = &(*tail)->next;
    *tail = o;
    kick(b);
    return 0;
}

static const wq_backend_ops pg_ops = {
    .version = WQ_BACKEND_VERSION,
    .name = "postgres",
    .flags = WQ_BACKEND_SHARED,
    .close = pg_close,
    .errmsg = pg_errmsg,
    .check = pg_check,
    .gone = pg_gone,
    .set_busy_timeout = pg_set_busy_timeout,
    .where = pg_where,
    .dirty = pg_dirty,
    .flush = pg_flush,
    .set_commit_fn = pg_set_commit_fn,
    .poll_inbox = pg_poll_inbox,
    .poll_commands = pg_poll_commands,
    .command_result = pg_command_result,
    .known_queue = pg_known_queue,
    .get_stats = pg_get_stats,
    .stop = pg_stop,
    .drain = pg_drain,
    .attach = pg_attach,
    .detach = pg_detach,
    .restore = pg_restore,
    .set_meta = pg_set_meta,
    .add = pg_add,
    .touch = pg_touch,
    .failures = pg_failures,
    .dead = pg_dead,
    .undead = pg_undead,
    .done_put = pg_done_put,
    .done_del = pg_done_del,
    .done_prune = pg_done_prune,
    .restore_done = pg_restore_done,
    .schedule_put = pg_schedule_put,
    .schedule_del = pg_schedule_del,
    .schedule_fire = pg_schedule_fire,
    .restore_schedules = pg_restore_schedules,
    .paused = pg_paused,
    .set_paused = pg_set_paused,
    .pending = pg_pending,
    .want = pg_want,
    .db_view = pg_db_view,
    .define = pg_define,
    .op = pg_op,
};

/* Inserts the runners row and takes its session lock, in one transaction (blocking). */
static int register_runner(pgb *b, PGconn *pg, char *err, size_t errlen)
{
    char *sql = wq_pg_sql(pg, b->schema,
                          "WITH r AS (INSERT INTO @S.runners (name, host, pid, lease, version) "
                          "VALUES ($1, $2, $3, $4, $5) RETURNING id) "
                          "SELECT id, pg_advisory_lock($6, id::integer) FROM r");
    char pid[24], lease[32], cls[24];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    snprintf(lease, sizeof lease, "%.3f", b->lease);
    snprintf(cls, sizeof cls, "%d", WQ_PG_LOCK_CLASS);
    const char *v[6] = {b->runner_name, b->host, pid, lease, WQ_VERSION, cls};
    PGresult *r = sql ? PQexecParams(pg, sql, 6, NULL, v, NULL, NULL, 0) : NULL;
    free(sql);
    if (!r || PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
        snprintf(err, errlen, "cannot register this runner in %s: %s", b->where,
                 r ? PQresultErrorMessage(r) : "out of memory");
        PQclear(r);
        return -1;
    }
    b->runner_id = atoll(PQgetvalue(r, 0, 0));
    snprintf(b->runner_id_s, sizeof b->runner_id_s, "%lld", (long long)b->runner_id);
    PQclear(r);
    b->registered = 1;
    b->last_heartbeat = real_ns();
    b->control_again = 1; /* the paused queues, at once */
    return 0;
}

int wq_pg_open(wq_backend **out, const wq_backend_opts *opts, char *err, size_t errlen)
{
    *out = NULL;
    pgb *b = calloc(1, sizeof *b);
    if (!b || !(b->url = strdup(opts->where))) {
        free(b);
        snprintf(err, errlen, "out of memory");
        return WQ_ENOMEM;
    }
    b->base.ops = &pg_ops;
    b->evb = opts->event_base;
    b->tb = opts->tb;
    b->lease = opts->lease > 0 ? opts->lease : 15;
    snprintf(b->schema, sizeof b->schema, "%s", opts->pg_schema ? opts->pg_schema : "wqrun");
    gethostname(b->host, sizeof b->host - 1);
    if (opts->runner_name)
        snprintf(b->runner_name, sizeof b->runner_name, "%s", opts->runner_name);
    else
        snprintf(b->runner_name, sizeof b->runner_name, "%s:%d", b->host, (int)getpid());
    wq_pgconn_hooks hooks = {on_up, on_down, on_notify, b};
    b->c = wq_pgconn_open(b->evb, b->url, 10, &hooks, err, errlen);
    if (!b->c) {
        free(b->url);
        free(b);
        return WQ_EIO;
    }
    PGconn *pg = wq_pgconn_pg(b->c);
    snprintf(b->where, sizeof b->where, "%s", wq_pg_describe(pg, NULL));
    /* Start-up is blocking: leave pipeline mode for it. */
    PQexitPipelineMode(pg);
    PQsetnonblocking(pg, 0);
    char done[200], e[512];
    int rc = WQ_EIO;
    if (wq_pg_migrate(pg, b->schema, done, sizeof done, e, sizeof e) < 0) {
        snprintf(err, errlen, "PostgreSQL at %s: %s", b->where, e);
        rc = WQ_EFORMAT;
        goto fail;
    }
    if (register_runner(b, pg, err, errlen) < 0)
        goto fail;
    if (PQsetnonblocking(pg, 1) != 0 || PQenterPipelineMode(pg) != 1) {
        snprintf(err, errlen, "cannot enter pipeline mode on %s", b->where);
        goto fail;
    }
    b->cycle_ev = event_new(b->evb, -1, 0, on_cycle, b);
    b->tick_ev = event_new(b->evb, -1, EV_PERSIST, on_tick, b);
    b->due_ev = evtimer_new(b->evb, on_due, b);
    if (!b->cycle_ev || !b->tick_ev || !b->due_ev) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    struct timeval tv = {0, 100000};
    event_add(b->tick_ev, &tv);
    prepare_all(b, b->c, 1);
    /* Outcomes get a connection of their own: the database claims and finishes at once. */
    wq_pgconn_hooks hooks2 = {on_up2, on_down2, NULL, b};
    char err2[512];
    b->c2 = wq_pgconn_open(b->evb, b->url, 10, &hooks2, err2, sizeof err2);
    if (b->c2)
        prepare_all(b, b->c2, 0);
    else
        logf_(b, WQ_LOG_WARN, "one connection only (outcomes share it with claims): %s", err2);
    b->st.connected = 1;
    *out = &b->base;
    return 0;
fail:
    wq_pgconn_free(b->c);
    b->c = NULL;
    if (b->cycle_ev)
        event_free(b->cycle_ev);
    if (b->tick_ev)
        event_free(b->tick_ev);
    if (b->due_ev)
        event_free(b->due_ev);
    free(b->url);
    free(b);
    return rc;
}
