/*
 * The one interface between the runtime and persistence: a table of
 * function pointers, in the spirit of SQLite's sqlite3_vfs (a version,
 * then one method per operation). The runtime (src/lua, src/host) holds a
 * wq_backend and wq_bqueue handles and calls through these inline
 * wrappers; it never knows which implementation it holds.
 *
 * Two implementations, side by side:
 *   src/store/sqlite/  the embedded default: the in-memory engine is the
 *                      authority, the backend writes its state behind it
 *                      (group commit into one SQLite file);
 *   src/store/pg/      many runners, one PostgreSQL database: the database
 *                      is the authority, the local engine holds only what
 *                      this runner claimed.
 * What differs is who decides an add (add answers WQ_BACKEND_LOCAL when
 * the engine does) and where items come from (a backend that claims hands
 * them to the runtime through wq_bqueue_hooks.claimed); the vocabulary is
 * the same.
 */
#ifndef WQ_BACKEND_H
#define WQ_BACKEND_H

#include "engine/flow.h"
#include "engine/group.h"
#include "engine/metrics.h"
#include "engine/queue.h"

#include <stddef.h>
#include <stdint.h>

typedef struct wq_backend wq_backend;
typedef struct wq_bqueue wq_bqueue;
typedef struct wq_backend_ops wq_backend_ops;

/* Every implementation's handles start with these. */
struct wq_backend {
    const wq_backend_ops *ops;
};
struct wq_bqueue {
    wq_backend *b;
};

/* Converts between the engine's monotonic ns and Unix seconds (virtual time aware). */
typedef struct wq_timebase {
    double (*to_unix)(void *ud, int64_t mono_ns);
    int64_t (*to_mono)(void *ud, double unix_s);
    void *ud;
} wq_timebase;

typedef enum { WQ_SYNC_NORMAL, WQ_SYNC_FULL } wq_sync;

/* How a runner opens its backend (SPEC 2, 8.4). */
typedef struct wq_backend_opts {
    const char *where;       /* --db: a SQLite path or a postgres:// URL */
    wq_sync sync;            /* SQLite durability */
    const char *pg_schema;   /* PostgreSQL schema, NULL: "wqrun" */
    const char *runner_name; /* NULL: HOST:PID */
    double lease;            /* seconds; <= 0: the default (15) */
    void *event_base;        /* the host's libevent base (struct event_base *) */
    wq_timebase tb;
    /* A backend shared by runners relays their events (SPEC 11): another runner's event (one
     * JSON object, events.h) to relayed; relay(ud, 1) when what other runners listen for
     * changed (ask wq_backend_relays which queues, and wq_backend_publish their events),
     * relay(ud, 0) once none listens. NULL: not wanted. */
    void (*relayed)(void *ud, const char *json, size_t n);
    void (*relay)(void *ud, int on);
    void *relay_ud;
} wq_backend_opts;

/* One restored row, in queue order (priority, then FIFO), then waiting ones. */
typedef struct wq_restored {
    const char *key;
    size_t keylen;
    const char *payload; /* JSON text or NULL */
    size_t paylen;
    int32_t priority;
    int queued;  /* 'queued' or 'processing' before: run (again) */
    int waiting; /* a delayed add is pending at ready_at_mono */
    int64_t ready_at_mono;
    double enqueued_at; /* Unix seconds the pending item was first added; 0 when unknown */
    const char *grp;    /* the item's group (SPEC 7.4), NULL for none */
    size_t grplen;
} wq_restored;

/* What the runner keeps for a pending item beside the engine's record (SPEC 7.1, 7.4). */
typedef struct wq_item_meta {
    double enqueued_at; /* Unix seconds the pending item was first added; 0: unknown */
    const char *grp;    /* the item's group, NULL for none; valid until fn is called again */
    size_t grplen;
} wq_item_meta;

typedef enum { WQ_SCHED_UTC, WQ_SCHED_LOCAL } wq_sched_tz;
typedef enum { WQ_SCHED_CATCH_UP_ONCE, WQ_SCHED_CATCH_UP_SKIP } wq_sched_catch_up;

/* One schedule of a queue. Strings are borrowed for the call. */
typedef struct wq_schedule_row {
    const char *name; /* NUL-terminated, unique per queue */
    const char *spec; /* as given: "0 7 * * 1-5", "@daily", "@every 90s" */
    const char *key;  /* the key each run adds; NULL: name */
    size_t keylen;
    const char *payload; /* JSON text, or NULL for none */
    size_t paylen;
    wq_sched_tz tz;             /* column tz: 'utc' or 'local' */
    wq_sched_catch_up catch_up; /* column catch_up: 'once' or 'skip' */
    double next_at;             /* Unix seconds of the next run; 0: none (NULL) */
    double last_at;             /* Unix seconds of the last run; 0: never (NULL) */
} wq_schedule_row;

/* An operator command as the runner's poll offers it (strings borrowed for the call). */
typedef struct wq_command {
    int64_t id;
    const char *queue; /* NULL when the row has none */
    const char *op;    /* NULL when the row has none */
    const char *key;   /* NULL when the row has none */
    size_t keylen;
} wq_command;

/* An add that reached the backend from outside the script (SQLite's inbox table). */
typedef struct wq_inbox_row {
    const char *queue;
    const char *key;
    size_t keylen;
    const char *payload; /* JSON text or NULL */
    size_t paylen;
    double after;
    const char *grp; /* its group (SPEC 7.4), NULL for none */
    size_t grplen;
    int has_priority; /* 0: none (a new item gets 0, a pending one keeps its own) */
    int64_t priority; /* as written: outside the 32-bit range when it is not such an integer */
    int unique;       /* 1 unique (a key pending or processing is left as it is), -1 not, 0: as
                         the queue's unique option says */
} wq_inbox_row;

/* A dead letter as a backend writes or restores it (strings borrowed for the call). */
typedef struct wq_dead_row {
    const char *key;
    size_t keylen;
    const char *payload; /* JSON text or NULL */
    size_t paylen;
    const char *error;     /* the last failure's message */
    const char *traceback; /* its Lua traceback ("stack traceback:\n..."), NULL: none */
    int64_t attempts;
    double failed_at; /* Unix seconds */
} wq_dead_row;

/* A finished run, for the queue's history (SPEC 11; strings borrowed for the call). */
typedef enum { WQ_HIST_DONE, WQ_HIST_DEAD, WQ_HIST_CANCELLED, WQ_HIST_REMOVED } wq_hist_state;

typedef struct wq_history_row {
    const char *key;
    size_t keylen;
    wq_hist_state state;
    double added_at;    /* Unix seconds the item was first added, 0: unknown */
    double started_at;  /* its last run's start, 0: it never ran (removed) */
    double finished_at; /* when it finished */
    int64_t attempts;   /* its runs: the failed ones and the last */
    const char *result; /* a done run's result (JSON text), NULL: none */
    size_t rlen;
    const char *error; /* a dead run's error, NULL: none */
    double keep;       /* the queue's history option: seconds a row is kept */
} wq_history_row;

/* A history row as read back (strings valid for the call). */
typedef struct wq_history_view {
    int64_t id; /* in the order the runs finished */
    const char *key;
    size_t keylen;
    const char *state;                        /* "done", "dead", "cancelled" or "removed" */
    double added_at, started_at, finished_at; /* 0: unknown / never started */
    int64_t attempts;
    const char *runner;
    const char *result; /* JSON text or NULL */
    size_t rlen;
    const char *error;
} wq_history_view;

/* The longest traceback kept with a dead letter (bytes; cut at a character's end). */
#define WQ_TRACEBACK_MAX 4096

/* What a queue's add answers when it skipped a key that finished within keep_done. */
#define WQ_ADD_DONE 2
/* What an HTTP add answers when the runner is stopping: kept in the inbox for the next start. */
#define WQ_ADD_DEFERRED 3
/* What a unique add answers when it left the key alone: pending (queued, waiting) or running. */
#define WQ_ADD_PENDING 4
#define WQ_ADD_PROCESSING 5
/* What an add answers when the key is a flow's node waiting for its dependencies (SPEC 9.1). */
#define WQ_ADD_BLOCKED 6

/* Why an add left the key alone, as q:add and HTTP say it: "done", "pending", "processing",
 * "blocked", or NULL for another answer. */
static inline const char *wq_add_reason(int result)
{
    return result == WQ_ADD_DONE         ? "done"
           : result == WQ_ADD_PENDING    ? "pending"
           : result == WQ_ADD_PROCESSING ? "processing"
           : result == WQ_ADD_BLOCKED    ? "blocked"
                                         : NULL;
}

/* An add as the runtime asks the backend for it. */
typedef struct wq_badd {
    const char *key;
    size_t keylen;
    const char *payload; /* JSON text, NULL: keep the pending item's (or none) */
    size_t paylen;
    double after; /* seconds; <= 0: now */
    int has_priority;
    int32_t priority;
    const char *grp; /* NULL: none */
    size_t grplen;
    int force; /* add even if the key finished within keep_done */
    /* 1: a key pending or processing is left as it is (answers WQ_ADD_PENDING...); -1: not;
     * 0: as the queue's definition in a shared database says */
    int unique;
    /* Refuse (WQ_EIO) rather than hold it while the database is unreachable: a caller that
     * can answer "try again" (HTTP 503). Otherwise the backend buffers it (bounded). */
    int no_wait;
} wq_badd;

/* Add outcomes (besides WQ_E* codes). */
#define WQ_BACKEND_LOCAL 3 /* the engine is the authority: apply the add to it */
/*
 * Told what became of an add the backend decided: result 1 queued (or
 * follow-up / delayed), 0 deduplicated, WQ_ADD_DONE-like 2 skipped (done),
 * or a WQ_E* code (WQ_EIO: not stored, message in what); what is the text
 * SPEC 8.1 names ("queued", "deduplicated", "follow-up", ...).
 */
typedef void (*wq_badd_fn)(void *ud, int result, const char *what);

/*
 * An operator action (SPEC 7.5) on a backend that shares its queues (PostgreSQL): the database
 * applies it for every runner. Strings are borrowed for the call.
 */
typedef enum {
    WQ_BOP_PAUSE,
    WQ_BOP_RESUME,
    WQ_BOP_REMOVE,     /* key */
    WQ_BOP_CANCEL,     /* key */
    WQ_BOP_RETRY_DEAD, /* key, NULL: every dead letter */
    WQ_BOP_PURGE_DEAD,
    WQ_BOP_ITEMS,           /* state, limit, after_key */
    WQ_BOP_DEAD,            /* limit */
    WQ_BOP_DONE_INFO,       /* key (keep_done) */
    WQ_BOP_FORGET_DONE,     /* key (keep_done) */
    WQ_BOP_SET_GROUP_LIMIT, /* key: the group; limit (NULL: back to the queue's default) */
    WQ_BOP_GROUP_LIMIT,     /* key: the group */
    WQ_BOP_ITEM,            /* key: what the queue knows of it (q:item) */
    WQ_BOP_CANCEL_AFTER,    /* key: its pending delayed add (q:cancel_after) */
    WQ_BOP_STATS,           /* the queue's pending, running, waiting and dead items (JSON) */
    WQ_BOP_SCHEDULES,       /* the queue's schedules (GET /queues/NAME/schedules) */
    WQ_BOP_HELD_GROUPS,     /* limit: the groups holding back the most items */
    WQ_BOP_HISTORY,         /* before, limit: the queue's finished runs, newest first */
    WQ_BOP_LAST_RUN         /* key: its last finished run in the history (a backend whose
                               engine is the authority: asked once the engine knows nothing) */
} wq_bop_kind;

typedef struct wq_bop {
    wq_bop_kind kind;
    const char *key;
    size_t keylen;
    const char *state; /* ITEMS: "queued", "processing", "waiting"; NULL: all */
    size_t limit;      /* ITEMS, DEAD, HELD_GROUPS: at most this many */
    const char *after_key;
    size_t after_len;
    const wq_limit *glimit; /* SET_GROUP_LIMIT */
    int64_t before;         /* HISTORY: rows with a smaller id (0: from the newest) */
} wq_bop;

/*
 * What became of an operator action, once committed. result: PAUSE, RESUME 1 changed, 0 it
 * already was; REMOVE 0, WQ_ENOENT (no pending item), WQ_EBUSY (processing); CANCEL 0 (its
 * runner was told), WQ_ENOENT, WQ_EBUSY (not processing); RETRY_DEAD, PURGE_DEAD the number;
 * ITEMS the number listed and DEAD the total, with text a JSON array of objects (fields of
 * q:items() / q:dead(), absent when null; ITEMS in key order, DEAD oldest first); DONE_INFO 1
 * with text the JSON object {finished_at, result} of q:done_info(), 0 not remembered;
 * FORGET_DONE 1 forgotten, 0 not remembered; SET_GROUP_LIMIT 0; GROUP_LIMIT 1 (the group's
 * own) or 0 (the queue's default) with text the JSON object {concurrency, rate, burst}; ITEM 1
 * with text the JSON object of q:item(key) (fields absent when null), 0 the key is unknown;
 * LAST_RUN as ITEM, the object of a finished key {state, key, finished_at and result (done), or
 * attempts, failed_at and error};
 * SCHEDULES the number, with text a JSON array of objects {name, spec, key, tz, catch_up,
 * payload, next_at, last_at} (by name; payload, next_at and last_at absent when null);
 * HELD_GROUPS the number of groups holding items back, with text a JSON array of the first
 * `limit` of them, most held first, ties by name: {group, held, queued, running, own,
 * concurrency, rate, burst} (the limits absent when none); HISTORY the number of runs, with
 * text a JSON array of at most `limit` of them with an id below `before`, newest first: {id,
 * key, state, added_at, started_at, finished_at, attempts, runner, result, error} (null when
 * none); or WQ_EIO with text saying why.
 */
typedef void (*wq_bop_fn)(void *ud, int result, const char *text);

/*
 * Flows (SPEC 9) on a backend shared by runners: the database keeps the graph. Requests are
 * JSON; answers come through a wq_bop_fn once the database answered: FLOW_ADD result 0 with
 * text the flow's id, or WQ_EINVAL with text the error naming the node (nothing added);
 * FLOW_LIST the number, text a JSON array of flows ({id, created_at, finished_at, keep,
 * cancelled, nodes, blocked, pending, done, dead}); FLOW_SHOW 1 with text the flow's JSON
 * object (those fields and "nodes": [{queue, key, state, waits, attempt, error, result,
 * ignore_dead, after: [{queue, key}]}]), 0 no such flow; FLOW_CANCEL the number of nodes
 * cancelled or removed, WQ_ENOENT no such flow. WQ_EIO with text saying why, for any.
 */
typedef enum {
    WQ_FOP_ADD,    /* doc: the flow document of POST /flows ("id" always set) */
    WQ_FOP_LIST,   /* state: "running", "finished" or NULL; limit */
    WQ_FOP_SHOW,   /* id */
    WQ_FOP_CANCEL, /* id */
} wq_fop_kind;

typedef struct wq_fop {
    wq_fop_kind kind;
    const char *doc;
    size_t doclen;
    const char *id;
    const char *state;
    size_t limit;
} wq_fop;

/* The options of a queue that govern state runners share (SPEC 8.2), as one runner's script
 * defines them. */
typedef struct wq_queue_def {
    int64_t max_retries;
    double keep_done; /* seconds; 0: finished keys are forgotten at once */
    /* group_limit (SPEC 7.4): per group, 0 for none */
    int64_t group_concurrency;
    double group_rate, group_burst;
    double rate, burst; /* the queue's own rate, 0 for none */
    int unique;         /* adds are unique unless they say otherwise (SPEC 12) */
    double history;     /* seconds a finished run is kept in the history (SPEC 11), 0: none */
} wq_queue_def;

/* An item this runner claimed, for the local engine (strings borrowed for the call). */
typedef struct wq_claimed {
    const char *key;
    size_t keylen;
    const char *payload; /* JSON text or NULL */
    size_t paylen;
    int32_t priority;
    int64_t requeues;   /* the failure count: job.attempt is requeues + 1 */
    double enqueued_at; /* Unix seconds */
    const char *grp;
    size_t grplen;
    /* A flow's node (SPEC 9): its flow's id (NULL for an item of no flow) and job.deps as a
     * JSON array of {queue, key, state, result, error} in its after's order ("[]" for none). */
    const char *flow;
    size_t flowlen;
    const char *deps;
    size_t depslen;
} wq_claimed;

/* The runtime's side of one queue, for a backend that claims (SQLite ignores them). */
typedef struct wq_bqueue_hooks {
    /* How many more items this runner wants now (free workers and waiting gets, less what it
     * holds queued); the backend may claim a few more (its documented claim-ahead). */
    size_t (*demand)(void *ud);
    /* A claimed item: the runtime adds it to its engine queue (0, or a WQ_E* code: the backend
     * hands it back). */
    int (*claimed)(void *ud, const wq_claimed *c);
    /* key's claim ended (outcome written, or handed back): forget what the runner kept for it
     * (failure count, limiter history). */
    void (*released)(void *ud, const char *key, size_t len);
    /* key's outcome this runner wrote is committed (told even when the same transaction made
     * the key pending again, and this runner holds a new claim of it; NULL: not wanted). */
    void (*committed)(void *ud, const char *key, size_t len);
    /* This runner lost its claims (lease lost, declared dead): cancel every running handler
     * with the error why; their outcomes will be discarded. */
    void (*lost)(void *ud, const char *why);
    /* What the backend holds for the queue changed (see pending): re-check whether the
     * process has work left. */
    void (*changed)(void *ud);
    /* The queue was paused (1) or resumed (0) for every runner (SPEC 8.2): no item of it
     * starts here from now on, or they start again. */
    void (*paused)(void *ud, int paused);
    /* An operator cancelled key, which this runner claimed: stop its handler run ("cancelled"),
     * or drop it if no handler has started it. */
    void (*cancel)(void *ud, const char *key, size_t len);
    /* Another runner started since with other options for the queue (the last one started
     * wins): use def from now on; by names that runner. */
    void (*redefined)(void *ud, const wq_queue_def *def, const char *by);
    /* An add the backend decided committed and made key pending (for its event; NULL: none
     * wanted). */
    void (*added)(void *ud, const char *key, size_t len);
    void *ud;
} wq_bqueue_hooks;

/* Backend counters for metrics. */
typedef struct wq_backend_stats {
    uint64_t commits;
    uint64_t rows_written; /* rows inserted, updated or deleted */
    uint64_t inbox_consumed;
    double last_commit_unix;
    double commit_seconds_sum;
    wq_histogram commit_latency; /* seconds per flush transaction */
    uint64_t last_commit_rows;
    uint64_t max_commit_rows;
    uint64_t deletes_skipped; /* keys that came and went within one window: no row at all */
    uint64_t flush_errors;
    uint64_t pending_keys; /* keys touched since the last commit */
    /* A backend shared by several runners (PostgreSQL; zero on SQLite) */
    int shared;                 /* these counters apply: the backend is shared */
    uint64_t claims;            /* items claimed */
    uint64_t stale_outcomes;    /* outcomes discarded: their claim had been taken over */
    uint64_t takeovers;         /* items this runner took back from dead runners */
    uint64_t reconnects;        /* connections re-established */
    int connected;              /* 1 while the database is reachable */
    wq_histogram claim_latency; /* seconds per claim round trip */
} wq_backend_stats;

/* What a backend shared by runners shows of the whole database (dashboards, /metrics): a
 * snapshot read in the background, at most a few seconds old. */
typedef struct wq_db_queue {
    const char *name;
    uint64_t queued;     /* due, not claimed, not held */
    uint64_t processing; /* claimed by a runner */
    uint64_t waiting;    /* delayed: not due yet */
    uint64_t held;       /* due, held back by their group's limits */
    uint64_t retrying;   /* with a failure count */
    uint64_t dead;
    int paused;
} wq_db_queue;

typedef struct wq_db_runner {
    int64_t id;
    const char *name, *host;
    int pid;
    double started_at;    /* Unix seconds */
    double heartbeat_age; /* seconds since its last heartbeat */
    uint64_t running;     /* items it holds now */
    uint64_t done;        /* outcomes it has written since it started */
    int self;             /* this runner */
} wq_db_runner;

typedef struct wq_db_view {
    double at; /* Unix seconds the snapshot was read */
    size_t nqueues;
    const wq_db_queue *queues;
    size_t nrunners;
    const wq_db_runner *runners;
    int64_t jobs_dead_tuples; /* of the hot table (pg_stat_user_tables.n_dead_tup) */
    uint64_t takeovers;       /* items taken back from dead runners, by every runner */
    uint64_t crash_dead;      /* items dead-lettered for killing their runners */
} wq_db_view;

#define WQ_BACKEND_VERSION 1

/* How long a commit waits for a lock another connection holds, unless set_busy_timeout says. */
#define WQ_BACKEND_BUSY_MS 5000

/* wq_backend_ops.flags */
#define WQ_BACKEND_SHARED                                                                          \
    1u /* several runners share it: the database decides adds, keep_done                           \
        * and operator actions; the engine holds only what was claimed */

struct wq_backend_ops {
    int version;      /* WQ_BACKEND_VERSION */
    const char *name; /* "sqlite", "postgres" */
    unsigned flags;   /* WQ_BACKEND_* */

    /* ---- the backend ---- */
    /* Flushes what it can and closes. */
    void (*close)(wq_backend *b);
    /* The last error message. */
    const char *(*errmsg)(const wq_backend *b);
    /* Cheap periodic health check: 0, or WQ_EIO / WQ_EFORMAT (message in errmsg; nothing is
     * written any more). */
    int (*check)(wq_backend *b);
    /* Whether the backend failed because its file is gone (deleted or replaced). */
    int (*gone)(const wq_backend *b);
    /* How long a commit may wait for a lock another connection holds (WQ_BACKEND_BUSY_MS unless
     * changed). */
    void (*set_busy_timeout)(wq_backend *b, int ms);
    /* Where it is, for messages: a path, or a URL without its password (owned by b). */
    const char *(*where)(const wq_backend *b);
    /* Whether anything is waiting to be written. */
    int (*dirty)(const wq_backend *b);
    /*
     * Writes every pending change. 0 committed (PostgreSQL: 0 at once, it only starts a cycle;
     * its adds carry their own acknowledgement); WQ_EBUSY locked, nothing written, try again;
     * WQ_EIO, WQ_EFORMAT, WQ_ENOMEM as SQLite's store says. Message in errmsg.
     */
    int (*flush)(wq_backend *b);
    /* Reserved for a backend whose flush answers later (WQ_EAGAIN): it would call fn(ud, ok)
     * once committed. Neither backend does today; both accept and ignore it. */
    void (*set_commit_fn)(wq_backend *b, void (*fn)(void *ud, int ok), void *ud);
    /* Offers each new inbox row to fn (1: taken); the number taken or a WQ_E* code. */
    int (*poll_inbox)(wq_backend *b, int (*fn)(void *ud, const wq_inbox_row *row), void *ud);
    /* Offers each new operator command to fn; the number offered or a WQ_E* code. */
    int (*poll_commands)(wq_backend *b, void (*fn)(void *ud, const wq_command *c), void *ud);
    /* Records command id's outcome with the next commit. */
    void (*command_result)(wq_backend *b, int64_t id, int ok, const char *text);
    /* Writes an add this runner cannot take now (a graceful stop) for the next start to take,
     * with the next commit: 0 or WQ_ENOMEM. NULL: the backend cannot (WQ_ESHUTDOWN). */
    int (*inbox_put)(wq_backend *b, const wq_inbox_row *row);
    /* Makes the next inbox poll offer every row again (a queue was defined). */
    void (*known_queue)(wq_backend *b, const char *name);
    void (*get_stats)(const wq_backend *b, wq_backend_stats *st);
    /* A graceful stop began: stop claiming, hand back claimed items no handler started. */
    void (*stop)(wq_backend *b);
    /* The loop has ended: write what is under way, blocking up to timeout_ms (an
     * asynchronous backend answers its adds' callbacks now). */
    void (*drain)(wq_backend *b, int timeout_ms);

    /* ---- one queue ---- */
    /* Attaches queue name with its engine queue (read at flush time); NULL on OOM. */
    wq_bqueue *(*attach)(wq_backend *b, const char *name, wq_queue *q,
                         const wq_bqueue_hooks *hooks);
    /* The engine queue is going away: the backend stops reading it. */
    void (*detach)(wq_bqueue *bq);
    /* Restores the queue's rows into its engine queue (SQLite); the number or a WQ_E* code. */
    int (*restore)(wq_bqueue *bq, void (*item_fn)(void *ud, const wq_restored *r),
                   void (*fail_fn)(void *ud, const char *key, size_t len, int64_t requeues,
                                   const char *last_error),
                   void (*dead_fn)(void *ud, const wq_dead_row *d), void *ud);
    /* Installs the per-item metadata reader (see SQLite's store.h). */
    void (*set_meta)(wq_bqueue *bq,
                     void (*fn)(void *ud, const wq_item_info *info, wq_item_meta *out), void *ud);
    /*
     * An add: WQ_BACKEND_LOCAL (apply it to the engine: the engine is the authority), or the
     * backend decides and calls fn(ud, result, what) once it is committed (returns 0), or a
     * WQ_E* code at once (WQ_EIO: unavailable, its local buffer is full).
     */
    int (*add)(wq_bqueue *bq, const wq_badd *a, wq_badd_fn fn, void *ud);
    /* Key changed in the engine queue (from the queue observer). */
    void (*touch)(wq_bqueue *bq, wq_event ev, const char *key, size_t len);
    /* The queue's failure count for key (0 clears it) and the error that raised it. */
    void (*failures)(wq_bqueue *bq, const char *key, size_t len, int64_t requeues,
                     const char *last_error);
    /* A dead letter for key (replaces an earlier one). */
    void (*dead)(wq_bqueue *bq, const wq_dead_row *d);
    /* Removes key's dead letter. */
    void (*undead)(wq_bqueue *bq, const char *key, size_t len);
    /* A finished run for the queue's history (NULL: the backend keeps none yet). */
    void (*history)(wq_bqueue *bq, const wq_history_row *r);
    /* How many keys of the queue finished (done) since `since` (Unix seconds) and also before
     * it: a batch run again that redid finished work. -1 when unknown (NULL: not kept). */
    int64_t (*reran)(wq_bqueue *bq, double since);
    /* The queue's history, newest first: at most limit rows with an id below before (0: the
     * newest), each to fn. The number, or a WQ_E* code (NULL: not kept). */
    int (*history_list)(wq_bqueue *bq, int64_t before, size_t limit,
                        void (*fn)(void *ud, const wq_history_view *v), void *ud);
    /* The latest progress of running key (JSON text; at most once a second per job), NULL:
     * the backend keeps none. */
    void (*progress)(wq_bqueue *bq, const char *key, size_t len, const char *json, size_t n);
    /* Completed-job memory (SPEC 7.2). */
    void (*done_put)(wq_bqueue *bq, const char *key, size_t len, double finished_at,
                     const char *result, size_t rlen);
    void (*done_del)(wq_bqueue *bq, const char *key, size_t len);
    int (*done_prune)(wq_bqueue *bq, double older_than);
    int (*restore_done)(wq_bqueue *bq,
                        void (*fn)(void *ud, const char *key, size_t len, double finished_at,
                                   const char *result, size_t rlen),
                        void *ud);
    /* Schedules (SPEC 7.3). */
    void (*schedule_put)(wq_bqueue *bq, const wq_schedule_row *row);
    void (*schedule_del)(wq_bqueue *bq, const char *name);
    /* The time row->last_at of schedule row->name came (row->next_at the one after): a backend
     * shared by runners adds row's key at most once per time, whichever runner fires first,
     * and returns 0; WQ_BACKEND_LOCAL: the runtime adds it itself. */
    int (*schedule_fire)(wq_bqueue *bq, const wq_schedule_row *row);
    int (*restore_schedules)(wq_bqueue *bq, void (*fn)(void *ud, const wq_schedule_row *row),
                             void *ud);
    /* Paused flag (SPEC 7.5): 1, 0 or a WQ_E* code; set with the next commit. */
    int (*paused)(wq_bqueue *bq);
    void (*set_paused)(wq_bqueue *bq, int paused);
    /* Whether the backend holds items of the queue the engine does not (PostgreSQL: rows
     * in the database, adds not yet committed); 0 when the engine holds them all. */
    int (*pending)(wq_bqueue *bq);
    /* A task began waiting for an item of the queue: a backend that claims claims now. */
    void (*want)(wq_bqueue *bq);
    /* The database-wide view: NULL for a backend not shared by runners, or before the first
     * read (a call starts reading it in the background, every few seconds until nobody has
     * asked for a minute); valid until the loop runs again. */
    const wq_db_view *(*db_view)(wq_backend *b);
    /* The script defines the queue's shared options (SPEC 8.2): stored with the queue, the
     * last runner started winning; a runner whose value differs logs a warning naming both. */
    void (*define)(wq_bqueue *bq, const wq_queue_def *def);
    /* An operator action: WQ_BACKEND_LOCAL (the engine is the authority: the runtime applies
     * it), or 0 and fn is called once the database answered, or a WQ_E* code at once (WQ_EIO:
     * unreachable; WQ_ENOENT: a key the database cannot hold). With fn NULL it only answers
     * which: WQ_BACKEND_LOCAL or 0, doing nothing. */
    int (*op)(wq_bqueue *bq, const wq_bop *op, wq_bop_fn fn, void *ud);

    /* ---- flows (SPEC 9) ---- */
    /* A flow request (wq_fop): WQ_BACKEND_LOCAL (the runtime's flow set is the authority), or 0
     * and fn is called once the database answered, or a WQ_E* code at once. */
    int (*flow_op)(wq_backend *b, const wq_fop *op, wq_bop_fn fn, void *ud);
    /* Events between runners (a shared backend; NULL for SQLite): listen(b, queues) while this
     * runner wants every runner's events of queues ("*": all; a comma-separated list of names;
     * NULL: none any more), which come to opts.relayed; relays(b, queue): whether another
     * runner listens for queue's events; publish one of this runner's (JSON) to them. */
    void (*listen)(wq_backend *b, const char *queues);
    int (*relays)(wq_backend *b, const char *queue);
    void (*publish)(wq_backend *b, const char *json, size_t n);
    /* The result of a claimed flow node that succeeded (JSON text, NULL for none): written with
     * its outcome, whatever the queue's keep_done (a shared backend; NULL for SQLite). */
    void (*node_result)(wq_bqueue *bq, const char *key, size_t len, const char *result,
                        size_t rlen);
    /* The runtime's flow set, written behind (SQLite: read at flush time, like the engine
     * queues); NULL for a shared backend. */
    void (*flows_attach)(wq_backend *b, wq_flows *fs);
    /* A flow (node_id 0) or node of the attached set changed, was created (with its edges) or
     * went: written with the next commit. */
    void (*flow_touch)(wq_backend *b, const char *flow_id, int64_t node_id, int created);
    /* Restores the flows of the state file into fs: the number of nodes or a WQ_E* code. */
    int (*restore_flows)(wq_backend *b, wq_flows *fs);
};

/* ---- calls through the table ---- */

static inline const char *wq_backend_name(const wq_backend *b)
{
    return b->ops->name;
}
static inline int wq_backend_shared(const wq_backend *b)
{
    return b && (b->ops->flags & WQ_BACKEND_SHARED) != 0;
}
static inline void wq_backend_close(wq_backend *b)
{
    if (b)
        b->ops->close(b);
}
static inline const char *wq_backend_errmsg(const wq_backend *b)
{
    return b->ops->errmsg(b);
}
static inline int wq_backend_check(wq_backend *b)
{
    return b->ops->check(b);
}
static inline int wq_backend_gone(const wq_backend *b)
{
    return b->ops->gone(b);
}
static inline void wq_backend_set_busy_timeout(wq_backend *b, int ms)
{
    b->ops->set_busy_timeout(b, ms);
}
static inline const char *wq_backend_where(const wq_backend *b)
{
    return b->ops->where(b);
}
static inline int wq_backend_dirty(const wq_backend *b)
{
    return b->ops->dirty(b);
}
static inline int wq_backend_flush(wq_backend *b)
{
    return b->ops->flush(b);
}
static inline void wq_backend_set_commit_fn(wq_backend *b, void (*fn)(void *ud, int ok), void *ud)
{
    b->ops->set_commit_fn(b, fn, ud);
}
static inline int wq_backend_poll_inbox(wq_backend *b, int (*fn)(void *ud, const wq_inbox_row *row),
                                        void *ud)
{
    return b->ops->poll_inbox(b, fn, ud);
}
static inline int wq_backend_poll_commands(wq_backend *b, void (*fn)(void *ud, const wq_command *c),
                                           void *ud)
{
    return b->ops->poll_commands(b, fn, ud);
}
static inline void wq_backend_command_result(wq_backend *b, int64_t id, int ok, const char *text)
{
    b->ops->command_result(b, id, ok, text);
}
static inline int wq_backend_inbox_put(wq_backend *b, const wq_inbox_row *row)
{
    return b->ops->inbox_put ? b->ops->inbox_put(b, row) : WQ_ESHUTDOWN;
}
static inline void wq_backend_known_queue(wq_backend *b, const char *name)
{
    b->ops->known_queue(b, name);
}
static inline void wq_backend_get_stats(const wq_backend *b, wq_backend_stats *st)
{
    b->ops->get_stats(b, st);
}
static inline void wq_backend_stop(wq_backend *b)
{
    b->ops->stop(b);
}
static inline void wq_backend_drain(wq_backend *b, int timeout_ms)
{
    b->ops->drain(b, timeout_ms);
}

static inline wq_bqueue *wq_bq_attach(wq_backend *b, const char *name, wq_queue *q,
                                      const wq_bqueue_hooks *hooks)
{
    return b->ops->attach(b, name, q, hooks);
}
static inline void wq_bq_detach(wq_bqueue *bq)
{
    bq->b->ops->detach(bq);
}
static inline int wq_bq_restore(wq_bqueue *bq, void (*item_fn)(void *ud, const wq_restored *r),
                                void (*fail_fn)(void *ud, const char *key, size_t len,
                                                int64_t requeues, const char *last_error),
                                void (*dead_fn)(void *ud, const wq_dead_row *d), void *ud)
{
    return bq->b->ops->restore(bq, item_fn, fail_fn, dead_fn, ud);
}
static inline void wq_bq_set_meta(wq_bqueue *bq,
                                  void (*fn)(void *ud, const wq_item_info *info, wq_item_meta *out),
                                  void *ud)
{
    bq->b->ops->set_meta(bq, fn, ud);
}
static inline int wq_bq_add(wq_bqueue *bq, const wq_badd *a, wq_badd_fn fn, void *ud)
{
    return bq->b->ops->add(bq, a, fn, ud);
}
static inline void wq_bq_touch(wq_bqueue *bq, wq_event ev, const char *key, size_t len)
{
    bq->b->ops->touch(bq, ev, key, len);
}
static inline void wq_bq_failures(wq_bqueue *bq, const char *key, size_t len, int64_t requeues,
                                  const char *last_error)
{
    bq->b->ops->failures(bq, key, len, requeues, last_error);
}
static inline void wq_bq_dead(wq_bqueue *bq, const wq_dead_row *d)
{
    bq->b->ops->dead(bq, d);
}
static inline void wq_bq_history(wq_bqueue *bq, const wq_history_row *r)
{
    if (bq->b->ops->history)
        bq->b->ops->history(bq, r);
}
static inline void wq_bq_progress(wq_bqueue *bq, const char *key, size_t len, const char *json,
                                  size_t n)
{
    if (bq->b->ops->progress)
        bq->b->ops->progress(bq, key, len, json, n);
}
/* WQ_ENOENT when the backend keeps no history. */
static inline int wq_bq_history_list(wq_bqueue *bq, int64_t before, size_t limit,
                                     void (*fn)(void *ud, const wq_history_view *v), void *ud)
{
    return bq->b->ops->history_list ? bq->b->ops->history_list(bq, before, limit, fn, ud)
                                    : WQ_ENOENT;
}
static inline int64_t wq_bq_reran(wq_bqueue *bq, double since)
{
    return bq->b->ops->reran ? bq->b->ops->reran(bq, since) : -1;
}
static inline void wq_bq_undead(wq_bqueue *bq, const char *key, size_t len)
{
    bq->b->ops->undead(bq, key, len);
}
static inline void wq_bq_done_put(wq_bqueue *bq, const char *key, size_t len, double finished_at,
                                  const char *result, size_t rlen)
{
    bq->b->ops->done_put(bq, key, len, finished_at, result, rlen);
}
static inline void wq_bq_done_del(wq_bqueue *bq, const char *key, size_t len)
{
    bq->b->ops->done_del(bq, key, len);
}
static inline int wq_bq_done_prune(wq_bqueue *bq, double older_than)
{
    return bq->b->ops->done_prune(bq, older_than);
}
static inline int wq_bq_restore_done(wq_bqueue *bq,
                                     void (*fn)(void *ud, const char *key, size_t len,
                                                double finished_at, const char *result,
                                                size_t rlen),
                                     void *ud)
{
    return bq->b->ops->restore_done(bq, fn, ud);
}
static inline void wq_bq_schedule_put(wq_bqueue *bq, const wq_schedule_row *row)
{
    bq->b->ops->schedule_put(bq, row);
}
static inline void wq_bq_schedule_del(wq_bqueue *bq, const char *name)
{
    bq->b->ops->schedule_del(bq, name);
}
static inline int wq_bq_schedule_fire(wq_bqueue *bq, const wq_schedule_row *row)
{
    return bq->b->ops->schedule_fire(bq, row);
}
static inline int
wq_bq_restore_schedules(wq_bqueue *bq, void (*fn)(void *ud, const wq_schedule_row *row), void *ud)
{
    return bq->b->ops->restore_schedules(bq, fn, ud);
}
static inline int wq_bq_paused(wq_bqueue *bq)
{
    return bq->b->ops->paused(bq);
}
static inline void wq_bq_set_paused(wq_bqueue *bq, int paused)
{
    bq->b->ops->set_paused(bq, paused);
}
static inline int wq_bq_pending(wq_bqueue *bq)
{
    return bq->b->ops->pending(bq);
}
static inline void wq_bq_want(wq_bqueue *bq)
{
    bq->b->ops->want(bq);
}

static inline const wq_db_view *wq_backend_db_view(wq_backend *b)
{
    return b->ops->db_view ? b->ops->db_view(b) : NULL;
}
static inline void wq_bq_define(wq_bqueue *bq, const wq_queue_def *def)
{
    bq->b->ops->define(bq, def);
}
static inline int wq_bq_op(wq_bqueue *bq, const wq_bop *op, wq_bop_fn fn, void *ud)
{
    return bq->b->ops->op(bq, op, fn, ud);
}

static inline void wq_backend_listen(wq_backend *b, const char *queues)
{
    if (b && b->ops->listen)
        b->ops->listen(b, queues);
}
static inline int wq_backend_relays(wq_backend *b, const char *queue)
{
    return b && b->ops->relays && b->ops->relays(b, queue);
}
static inline void wq_backend_publish(wq_backend *b, const char *json, size_t n)
{
    if (b && b->ops->publish)
        b->ops->publish(b, json, n);
}
static inline int wq_backend_flow_op(wq_backend *b, const wq_fop *op, wq_bop_fn fn, void *ud)
{
    return b->ops->flow_op ? b->ops->flow_op(b, op, fn, ud) : WQ_BACKEND_LOCAL;
}
static inline void wq_bq_node_result(wq_bqueue *bq, const char *key, size_t len, const char *result,
                                     size_t rlen)
{
    if (bq->b->ops->node_result)
        bq->b->ops->node_result(bq, key, len, result, rlen);
}
static inline void wq_backend_flows_attach(wq_backend *b, wq_flows *fs)
{
    if (b->ops->flows_attach)
        b->ops->flows_attach(b, fs);
}
static inline void wq_backend_flow_touch(wq_backend *b, const char *flow_id, int64_t node_id,
                                         int created)
{
    if (b->ops->flow_touch)
        b->ops->flow_touch(b, flow_id, node_id, created);
}
static inline int wq_backend_restore_flows(wq_backend *b, wq_flows *fs)
{
    return b->ops->restore_flows ? b->ops->restore_flows(b, fs) : 0;
}

/*
 * Opens the backend where names: a postgres:// or postgresql:// URL selects PostgreSQL,
 * anything else is a SQLite path (src/store/open.c). On failure returns a WQ_E* code and a
 * message in err (a URL's password never appears in it).
 */
int wq_backend_open(wq_backend **out, const wq_backend_opts *opts, char *err, size_t errlen);
/* Whether where names a PostgreSQL database (a postgres:// or postgresql:// URL). */
int wq_backend_is_pg(const char *where);

#endif
