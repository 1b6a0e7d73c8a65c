/*
 * The PostgreSQL schema (SPEC 8.1): its objects, their versions and the
 * migrations between them (sql/migrations/vN.sql), its functions
 * (sql/functions/NN-*.sql), and the statements the runner prepares
 * (pg_schema.c).
 */
#ifndef WQ_PG_SCHEMA_H
#define WQ_PG_SCHEMA_H

#include <libpq-fe.h>
#include <stddef.h>

#define WQ_PG_SCHEMA_VERSION 13
/* The first key of the runners' session advisory locks: pg_advisory_lock(WQ_PG_LOCK_CLASS, id). */
#define WQ_PG_LOCK_CLASS 0x77717275 /* "wqru" */

/*
 * Creates or upgrades schema (blocking; start-up and `wqrun migrate`), under a transaction
 * advisory lock so that concurrent starts are safe. 0 (out: "created", "upgraded from N",
 * "up to date"), or -1 with a message in err: a schema of that name that is not ours (no
 * meta row: refused, untouched), a newer schema, no permission.
 */
int wq_pg_migrate(PGconn *pg, const char *schema, char *out, size_t outlen, char *err,
                  size_t errlen);
/* Whether schema exists and is ours at this version: 1, 0 (absent), -1 (refused: err). */
int wq_pg_schema_ready(PGconn *pg, const char *schema, char *err, size_t errlen);

/*
 * sql with every "@S" replaced by the quoted schema identifier and "@L" by the schema name
 * as a string literal (malloc'd; NULL on OOM).
 */
char *wq_pg_sql(PGconn *pg, const char *schema, const char *sql);

/* The runner's statements (prepared by name on each connection). */
typedef struct wq_pg_stmt {
    const char *name;
    const char *sql; /* with @S */
} wq_pg_stmt;
enum {
    PGS_CLAIM,      /* $1 queue, $2 limit, $3 runner, $4 floor (epoch, -Infinity: none), $5 the
                     * queue's resets it holds for: key, payload, priority, token, requeues,
                     * enqueued_at, grp, run_at, seq, flow, deps (the last two NULL but for a
                     * flow's node) */
    PGS_FINISH,     /* $1 queue, $2 runner, arrays: keys, tokens, kinds, delays, requeues, errors,
                     * payloads, done results; $11 items wanted; $12 flow nodes' results: o_stale,
                     * then PGS_CLAIM's columns (the items handed over; o_stale NULL) and one row
                     * with o_stale */
    PGS_ADD_MANY,   /* $1 jsonb array of items: jsonb array of outcomes */
    PGS_HEARTBEAT,  /* $1 runner, $2 outcomes written: the row, or none when declared dead */
    PGS_REAP,       /* $1 lock class: items taken over */
    PGS_WAITING,    /* $1 queue, $2 runner, $3 bool: this runner waits for work on the queue */
    PGS_NEXT_AT,    /* $1 queue, $2 whether to look: whether it has rows (NULL: not looked);
                     * seconds until its next delayed item */
    PGS_RELOCK,     /* $1 lock class, $2 runner: re-take the runner's lock after a reconnect */
    PGS_DEFINE,     /* $1 queue, $2 max_retries, $3 keep_done, $4 runner, $5-$9 group_limit and
                     * rate, $10 unique, $11 history: the values replaced */
    PGS_QUEUES,     /* every queue: name, paused, max_retries, keep_done, defined_by, limited,
                     * q_rate */
    PGS_PRUNE_DONE, /* expired completed-job memories (at most 1000) */
    PGS_PRUNE_HISTORY, /* history rows past their queue's history seconds (at most 1000) */
    PGS_CLAIM_GROUPED, /* as PGS_CLAIM, counting group limits and the queue's rate */
    PGS_SWEEP,         /* $1 queue: held items of groups with room made claimable */
    PGS_VIEW_JOBS,     /* per queue and runner: queued, processing, waiting, held, retrying */
    PGS_VIEW_REST,     /* $1 schema: 'q' queues, 'r' runners, 'm' table health and counters */
    PGS_SIGNALS,       /* $1 runner: the cancels addressed to it (queue, key, token), consumed */
    PGS_CLAIM_FROM,    /* as PGS_CLAIM, from $4 priority, $5 run_at (epoch), $6 seq on; $7
                        * floor, $8 resets */
    PGS_FLOOR_CLOCK,   /* the database's clock (epoch) */
    PGS_FLOOR_XID,     /* $1 queue: this transaction's id, the oldest running, the resets */
    PGS_FLOOR_MIN,     /* $1 queue, $2 floor: earliest pending ready time, earliest held one */
    PGS_PRUNE_FLOWS,   /* flows finished longer than their keep ago (at most 1000) */
    PGS_COUNT
};
extern const wq_pg_stmt wq_pg_stmts[PGS_COUNT];

/* Finish kinds (PGS_FINISH). */
enum {
    WQ_PGF_DONE = 0,     /* done: failure count and dead letter unchanged */
    WQ_PGF_SUCCESS = 1,  /* success: failure count cleared, dead letter removed */
    WQ_PGF_RETRY = 2,    /* again after a delay (retry or wq.requeue), failure count as given */
    WQ_PGF_DEAD = 3,     /* dead-lettered with the error; attempts in requeues */
    WQ_PGF_RELEASE = 4,  /* handed back unstarted: nothing else changes */
    WQ_PGF_CANCELLED = 5 /* cancelled: as a success; a flow node's node dead ('cancelled') */
};

#endif
