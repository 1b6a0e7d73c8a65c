/*
 * Internals shared by the PostgreSQL backend's files (pg.c: the operations
 * table, opening and closing, the operations on one queue, the helpers;
 * pg_cycle.c: the claims of each queue and the cycle of adds, outcomes and
 * claims; pg_control.c: liveness, pauses and cancels, the outbox; pg_view.c:
 * the database-wide view; pg_ops.c: operator actions). Nothing outside
 * these files includes this.
 */
#ifndef WQ_PG_INT_H
#define WQ_PG_INT_H

#include "engine/keymap.h"
#include "engine/log.h"
#include "store/backend.h"
#include "store/pg/pgconn.h"

#include <event2/util.h>
#include <stddef.h>
#include <stdint.h>

#define CLAIM_MAX 1000       /* items one claim asks for at most */
#define ADD_BUFFER_MAX 10000 /* adds held while the database is unreachable */
#define POLL_MS 250          /* claim even without a notification this often */
#define FULL_MS 2000         /* a claim from the head of the queue at least this often */
#define REAP_MS 500          /* look for dead runners this often */
#define PRUNE_MS 5000        /* prune expired keep_done memories this often */
#define PRUNE_FLOWS_MS 60000 /* delete flows past their keep this often */
#define FLOOR_MS 250         /* a busy queue's floor moves on at most this often */
#define FLOOR_SLACK 0.05     /* s: a floor stays this far below the clocks it is built from */
#define FLOOR_MARKS 16

/* The database-wide view (pg_view.c, read from pg_control.c's tick): */
#define VIEW_MS 2000   /* read it this often while wanted (less often when it is slow) */
#define VIEW_IDLE_S 60 /* and stop when nobody asked for it this long */

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
    char *result;     /* keep_done or history: its success's result (JSON; "null" for none) */
    int keep;         /* done_put(): the result stays in done (keep_done), not only in history */
    int hcancel;      /* the history was told its run was cancelled: the outcome is a cancel */
    /* A flow node (SPEC 9; the claim said its flow): node_result() gives its result (JSON,
     * NULL for none) when its handler succeeded; a cancel signal for it makes an outcome
     * without one a cancel (WQ_PGF_CANCELLED). */
    int node, node_ok, cancelled;
    char *nres;
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
    char *done;    /* keep_done, history: the success's result (taken from the claim) */
    char *nres;    /* a flow node's result (taken from the claim) */
    int keep;      /* done keeps it (keep_done) */
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
    outcome *sent; /* outcomes of the cycle in flight, then those built or handed back since */
    size_t nsent, scap;
    size_t nflight; /* how many of them the outcomes' transaction in flight carries */
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
    int done;   /* committed or refused: dropped when its flight ends */
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
    int outbox_flight;    /* the first outbox_flight of them are under way, each in a
                             transaction of its own */
    size_t outbox_seen;   /* answers read of those */
    size_t outbox_synced; /* transactions ended of those */
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
    int keeps_history;  /* a queue of this runner keeps history: it prunes it too */
    int hprune_flight, hprune_more;
    int64_t last_hprune;
    /* The database-wide view (db_view), read while someone looks at it: the one shown and
     * the one being read. */
    struct view *view, *view_next_v;
    int view_wanted, view_flight;
    int64_t view_next; /* real ns of the next read */
    int64_t view_sent;
    int64_t view_asked; /* real ns of the last db_view call */
    int prune_flight, prune_more;
    int64_t last_prune, last_sweep, last_prune_flows;
    int control_again; /* notified meanwhile: read them once more */
    /* The database's clock, read first in every claim transaction (pgq's floor): the last
     * reading, and when it was asked for and came back (real ns). */
    double db_clock, txn_clock;
    int64_t db_clock_recv, clock_asked;
    int clock_in_txn;       /* the claim transaction being built has asked for it */
    struct pg_relay *relay; /* events between runners (pg_events.c), NULL: not wanted */
};

/* An operator action until its transaction has committed. */
typedef struct pop {
    wq_bop_kind kind;
    wq_bop_fn fn;
    void *ud;
    int fop;      /* a flow request (wq_fop kind + 1), or 0 */
    int answered; /* 1: result and text hold the answer; -1: text holds the error; -2: the
                   * database refused a flow (text: why) */
    int result;
    char *text;
    /* Until it is sent: the statement, its parameters, the outcome transaction it waits for */
    char *sql;
    char *params[6];
    int nparams;
    int64_t need;
    struct pop *next;
} pop;

/* ---- shared functions, by the file that defines them ---- */

/* pg.c: the helpers (wq_pgb_real_ns: the monotonic clock in ns; wq_pgb_wall_s: Unix time). */
int64_t wq_pgb_real_ns(void);
double wq_pgb_wall_s(void);
void wq_pgb_set_err(pgb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void wq_pgb_logf(pgb *b, wq_log_level lv, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Runs the cycle (wq_pgb_on_cycle) from the loop, soon. */
void wq_pgb_kick(pgb *b);
/* A delayed item of q is due at real ns when: claim then (not at the next poll). */
void wq_pgb_due(pgq *q, int64_t when);
/* Whether s is valid UTF-8 without NUL bytes (PostgreSQL text holds nothing else). */
int wq_pgb_text_ok(const char *s, size_t n);
/* A NUL-terminated copy of s's n bytes (NULL: out of memory). */
char *wq_pgb_dupn(const char *s, size_t n);

/* pg_cycle.c: the claims of one queue (the claim of key, or NULL; *slot: its slot). */
claim *wq_pgb_slot_of(pgq *q, const char *key, size_t len, uint32_t *slot);
/* Its outcome is built at the next cycle. */
void wq_pgb_touch_slot(pgq *q, uint32_t slot);
/* Forgets every claim of q (lease lost: they run elsewhere now), telling the runtime. */
void wq_pgb_lose_claims(pgq *q, const char *why);
void wq_pgb_free_add(padd *a);
/* The cycle: adds, then outcomes and claims, one round trip (cycle_ev's callback). */
void wq_pgb_on_cycle(evutil_socket_t fd, short what, void *arg);

/* pg_events.c: events between runners. */
int wq_pgb_events_open(pgb *b, const wq_backend_opts *opts);
void wq_pgb_events_close(pgb *b);
/* The backend ops listen and publish. */
void wq_pgb_listen(wq_backend *base, const char *queues);
int wq_pgb_relays(wq_backend *base, const char *queue);
void wq_pgb_publish(wq_backend *base, const char *json, size_t n);
/* A notification that is the relay's ("~" events, "!events:ID:QUEUES"): 1 handled, 0 not the
 * relay's. */
int wq_pgb_events_notified(pgb *b, const char *payload);
/* From the tick: announce while listening, stop relaying when nobody announced. */
void wq_pgb_events_tick(pgb *b, int64_t now);

/* pg_control.c: definitions, pauses and cancels, the outbox, liveness. */
/* Stores q's definition (at attach, and after a reconnect if it did not get through). */
void wq_pgb_send_define(pgb *b, pgq *q);
/* Reads the paused queues and this runner's cancels (with the heartbeat, and when notified). */
void wq_pgb_send_control(pgb *b);
void wq_pgb_pstmt_free(pstmt *p);
/* Queues sql (with @S) and its n text parameters (NULL: SQL NULL); 0 or WQ_ENOMEM. */
int wq_pgb_outbox_put(pgb *b, const char *what, const char *sql, int n, const char *const *v);
/* The outbox's statements are sent by the cycle: their answers, and their sync. */
void wq_pgb_outbox_result(void *ud, PGresult *res);
void wq_pgb_outbox_synced(void *ud, int ok);
/* tick_ev's callback: the heartbeat, reaping, sweeps, prunes, the view. */
void wq_pgb_on_tick(evutil_socket_t fd, short what, void *arg);
/* Prepares the statements on conn (and LISTENs on the first connection). */
void wq_pgb_prepare_all(pgb *b, wq_pgconn *conn, int listen);
/* The hooks of the first connection (c) and of the second (c2, the outcomes'). */
void wq_pgb_on_up(void *ud);
void wq_pgb_on_down(void *ud, const char *why);
void wq_pgb_on_notify(void *ud, const char *channel, const char *payload);
void wq_pgb_on_up2(void *ud);
void wq_pgb_on_down2(void *ud, const char *why);

/* pg_view.c: the database-wide view (ops->db_view: wq_pgb_db_view). */
void wq_pgb_view_free(struct view *v);
void wq_pgb_send_view(pgb *b);
const wq_db_view *wq_pgb_db_view(wq_backend *base);

/* pg_ops.c: operator actions (ops->op: wq_pgb_op). */
void wq_pgb_pop_free(pop *o);
/* The operator actions whose outcome transaction has committed go now, in order. */
void wq_pgb_send_waiting_ops(pgb *b);
int wq_pgb_op(wq_bqueue *bq, const wq_bop *op, wq_bop_fn fn, void *ud);
/* ops->flow_op: flow requests (SPEC 9), answered as operator actions are. */
int wq_pgb_flow_op(wq_backend *base, const wq_fop *op, wq_bop_fn fn, void *ud);

#endif
