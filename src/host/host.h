/*
 * The wqrun host: one libevent loop, its clock (monotonic, or virtual with
 * --virtual-time), signals, the group commit of the state file and the
 * rule that decides when the process is done. It knows nothing of Lua: the
 * runtime (src/lua/runtime.c) plugs in through wq_host_hooks, and queues
 * through wq_queue_ops and the one stats struct, wq_qstats.
 */
#ifndef WQ_HOST_H
#define WQ_HOST_H

#include "engine/clock.h"
#include "engine/delay.h"
#include "engine/log.h"
#include "engine/metrics.h"
#include "host/opts.h"
#include "store/backend.h"

#include <event2/event.h>
#include <stddef.h>

typedef struct wq_host wq_host;

/* One queue's numbers: /metrics, /queues, the progress line and q:stats() all read this. */
typedef struct wq_qstats {
    const char *name;
    uint64_t depth;      /* dirty items (client-go depth) */
    uint64_t queued;     /* in the ready store (Len) */
    uint64_t processing; /* handed out, not done */
    uint64_t waiting;    /* delayed adds pending */
    uint64_t adds, retries;
    uint64_t done;      /* done calls that finished a key */
    uint64_t succeeded; /* handler runs that succeeded */
    uint64_t failures;  /* handler runs that failed */
    uint64_t dead;      /* keys in the dead-letter list */
    uint64_t requeued;  /* handler runs that returned wq.requeue */
    uint64_t timeouts;  /* handler runs stopped by their timeout */
    uint64_t retrying;  /* keys with a failure count */
    uint64_t workers;   /* handler workers, 0 without a handler */
    uint64_t cancelled; /* handler runs stopped by a cancel */
    int paused;         /* hands nothing out (SPEC 7.5; shown as a boolean, not a counter) */
    uint64_t groups;    /* groups with queued items (SPEC 7.4) */
    uint64_t throttled; /* queued items a limit holds back now */
    const wq_metrics *metrics;
} wq_qstats;

/* The numbers of wq_qstats by name, as /queues and q:stats() show them; ends with a NULL name. */
typedef struct wq_qstat_field {
    const char *name;
    size_t offset; /* of a uint64_t in wq_qstats */
} wq_qstat_field;
extern const wq_qstat_field wq_qstat_fields[];

/* The value of field f in st. */
static inline uint64_t wq_qstat_value(const wq_qstats *st, const wq_qstat_field *f)
{
    return *(const uint64_t *)((const char *)st + f->offset);
}

/* An add from outside the script (inbox row, HTTP request). */
typedef struct wq_ext_item {
    const char *key;
    size_t keylen;
    const char *payload; /* JSON text, NULL for none */
    size_t paylen;
    double after; /* seconds; <= 0 adds now */
    int has_priority;
    int32_t priority;
    int force; /* add even if the key finished within keep_done */
    /* 1: a key already pending or processing is left as it is (no follow-up); -1: not so,
     * whatever the queue says; 0: as the queue's unique option says */
    int unique;
    const char *group; /* its group (SPEC 7.4), NULL: the queue's group_of decides */
    size_t grouplen;
    char *why; /* when add answers WQ_EINVAL: the reason (whysize bytes), if given */
    size_t whysize;
    /* Set by a caller that can wait: a queue whose backend decides adds itself (PostgreSQL)
     * answers WQ_EAGAIN and later calls done(done_ud, result, what) once the add committed
     * (result as add's, or a WQ_E* code with what saying why). NULL: such a queue answers
     * WQ_EAGAIN all the same and never tells the outcome. */
    void (*done)(void *ud, int result, const char *what);
    void *done_ud;
} wq_ext_item;

/* WQ_ADD_DONE, WQ_ADD_DEFERRED, WQ_ADD_PENDING, WQ_ADD_PROCESSING: store/backend.h. */

/* A pending item as an operator sees it (q:items, GET /queues/NAME/items). */
typedef struct wq_item_view {
    const char *key;
    size_t keylen;
    const char *payload; /* JSON text, NULL for none */
    size_t paylen;
    const char *state; /* "queued", "processing" or "waiting" */
    int32_t priority;
    const char *group; /* NULL: none */
    size_t grouplen;
    double ready_at;        /* Unix seconds of a pending delayed add, 0: none */
    int64_t attempt;        /* the run it would be: failure count + 1 */
    const char *last_error; /* the message of its last failed run, NULL: none */
    const char *progress;   /* a processing item's latest job:progress (JSON text), NULL: none */
    size_t progresslen;
} wq_item_view;

/* Which pending items to list: in key order (bytes), after after_key, at most limit. */
typedef struct wq_items_query {
    const char *state; /* "queued", "processing", "waiting", NULL: all */
    size_t limit;
    const char *after_key; /* NULL: from the first key */
    size_t after_len;
} wq_items_query;

/* A dead letter as an operator sees it (q:dead, GET /queues/NAME/dead). */
typedef struct wq_dead_view {
    const char *key;
    size_t keylen;
    const char *payload; /* JSON text, NULL for none */
    size_t paylen;
    const char *error;
    const char *traceback; /* the failure's Lua traceback, NULL: none */
    int64_t attempts;
    double failed_at; /* Unix seconds */
} wq_dead_view;

/* What a queue knows of one key (q:item, GET /queues/NAME/items/KEY, wqrun show): pending
 * wins over a dead letter or a done memory; of those two, the later one. */
typedef struct wq_key_view {
    const char *state; /* "queued", "processing", "waiting", "blocked", "done" or "dead" */
    wq_item_view item; /* pending: item.state == state */
    /* "blocked" (a flow's node waiting for others): key as for "done", its flow, the number
     * of dependencies not finished, its payload (JSON text, NULL: none) and priority */
    const char *flow;
    int64_t waits;
    const char *payload;
    size_t paylen;
    int32_t priority;
    wq_dead_view dead; /* "dead" */
    const char *key;   /* "done": the key, its time and result (JSON text, NULL: none) */
    size_t keylen;
    double finished_at;
    const char *result;
    size_t rlen;
} wq_key_view;

/* What the host may ask of a queue; q is the pointer given to wq_host_add_queue. */
/* An item handed to a remote worker (SPEC 10.2; strings valid for the call). */
typedef struct wq_claim_view {
    const char *key;
    size_t keylen;
    const char *payload; /* JSON text, NULL: none */
    size_t paylen;
    int64_t attempt;
    const char *token;  /* the claim's: its outcome and heartbeats name it */
    double lease_until; /* Unix seconds */
    const char *flow;   /* a flow node's: its flow's id, NULL: not a node */
    const char *deps; /* and its dependencies (JSON array of {queue, key, state, result, error}) */
    size_t depslen;
} wq_claim_view;

/* What a remote worker reports of a claimed item (strings borrowed for the call). */
typedef enum { WQ_REPORT_DONE, WQ_REPORT_FAIL, WQ_REPORT_HEARTBEAT } wq_report_kind;
typedef struct wq_report {
    wq_report_kind kind;
    const char *key;
    size_t keylen;
    const char *token;
    const char *result; /* DONE: JSON text, NULL: none */
    size_t rlen;
    const char *error; /* FAIL: the message */
    double retry_in;   /* FAIL: seconds, < 0: the queue's limiter decides */
    int permanent;     /* FAIL: dead-letter now */
    /* DONE, FAIL on a backend whose outcomes commit later (PostgreSQL): report answers
     * WQ_EAGAIN and calls kept(kept_ud, ok) once the outcome is committed (ok 0: it was not) */
    void (*kept)(void *ud, int ok);
    void *kept_ud;
    /* answered: */
    int cancelled;      /* HEARTBEAT: an operator cancelled the key (report an outcome now) */
    double lease_until; /* HEARTBEAT: the lease's new end (Unix seconds) */
} wq_report;

typedef struct wq_queue_ops {
    void (*stats)(void *q, wq_qstats *out);
    /* Sum of ages and the oldest age (seconds) of the processing items. */
    void (*work_ages)(void *q, double *unfinished, double *longest);
    int64_t (*next_ready)(void *q); /* earliest delayed item, WQ_NEVER when none */
    void (*fire_due)(void *q);      /* adds the delayed items that are due */
    int (*busy)(void *q);           /* work that keeps the process alive */
    /* Its delayed items keep the process alive: it has a handler, or a task
     * waits in its get (SPEC section 2). */
    int (*awaited)(void *q);
    size_t (*processing)(void *q); /* items handed out (a graceful stop waits for them) */
    void (*stop)(void *q);         /* a graceful stop began */
    /* Whether key is pending (queued, waiting or processing) in the queue's engine. */
    int (*has)(void *q, const char *key, size_t len);
    /* External add: 1 queued, 0 already pending, WQ_ESHUTDOWN or another WQ_E* code. */
    int (*add)(void *q, const wq_ext_item *it);

    /* Operator actions (SPEC 7.5); each change is written with the next commit. */
    /* Pauses (1) or resumes (0) dispatch: 1 changed, 0 it already was. */
    int (*pause)(void *q, int paused);
    int (*paused)(void *q);
    /* Removes a queued or delayed key: 0, WQ_ENOENT (nothing pending), WQ_EBUSY (processing). */
    int (*remove)(void *q, const char *key, size_t len);
    /* Cancels the handler run of key: 0 (the queue calls wq_host_cancelled once the run has
     * ended), WQ_ENOENT (nothing pending), WQ_EBUSY (pending, but no handler runs it). */
    int (*cancel)(void *q, const char *key, size_t len);
    /* Re-queues key's dead letter, every one with key NULL: the number re-queued or a WQ_E*. */
    int (*retry_dead)(void *q, const char *key, size_t len);
    /* Drops every dead letter: the number dropped. */
    int (*purge_dead)(void *q);
    /* Calls fn for the pending items qry selects; the number listed or a WQ_E* code. */
    int (*items)(void *q, const wq_items_query *qry, void (*fn)(void *ud, const wq_item_view *it),
                 void *ud);
    /* Calls fn for each dead letter, oldest first; the number or a WQ_E* code. */
    int (*dead)(void *q, void (*fn)(void *ud, const wq_dead_view *d), void *ud);
    /* Calls fn with what the queue knows of key (valid for the call): 1, or 0 when it knows
     * nothing of it, or a WQ_E* code. */
    int (*item)(void *q, const char *key, size_t len, void (*fn)(void *ud, const wq_key_view *v),
                void *ud);
    /* Calls fn for each schedule (SPEC 7.3), by name: its row (next_at 0: none, last_at 0:
     * never; valid for the call) and whether this run's script defines it (0: restored from the
     * state file only). The number, or a WQ_E* code. */
    int (*schedules)(void *q, void (*fn)(void *ud, const wq_schedule_row *s, int defined),
                     void *ud);
    /* Calls fn for the at most max groups holding back the most items (SPEC 7.4), most first;
     * how many groups hold items back, or a WQ_E* code. */
    int64_t (*held_groups)(void *q, size_t max, void (*fn)(void *ud, const wq_group_view *g),
                           void *ud);
    /* The queue's history newest first (below id before, 0: the newest; at most limit rows),
     * each to fn: the number, WQ_ENOENT when nothing keeps it, or another WQ_E* code. */
    int (*history)(void *q, int64_t before, size_t limit,
                   void (*fn)(void *ud, const wq_history_view *v), void *ud);
    /* Any of the actions above on a backend that applies them itself (wq_bq_op): 0 and fn is
     * called with the answer, WQ_BACKEND_LOCAL (use the members above), or a WQ_E* code. */
    int (*op)(void *q, const wq_bop *op, wq_bop_fn fn, void *ud);

    /* Remote workers (SPEC 10.2). Hands out up to max items leased for lease seconds, each to
     * fn: the number (0: none now), or WQ_ESHUTDOWN (stopping), or another WQ_E* code. */
    int (*claim)(void *q, size_t max, double lease, void (*fn)(void *ud, const wq_claim_view *c),
                 void *ud);
    /* Calls fn(ud) once (from the loop) when items may have come for a claim of up to max;
     * returns a handle for claim_unwait (NULL: out of memory). */
    void *(*claim_wait)(void *q, size_t max, void (*fn)(void *ud), void *ud);
    void (*claim_unwait)(void *q, void *w);
    /* A remote worker's report: 0 applied (written with the next commit), WQ_EAGAIN applied
     * and r->kept is called once committed, WQ_ENOENT (key is not claimed), WQ_EBUSY (the token
     * is not the claim's: nothing changed). */
    int (*report)(void *q, wq_report *r);
} wq_queue_ops;

/* A queue as the host knows it. */
/* Seconds of `done` history a queue keeps for its rate (GET /queues: done_last_minute). */
#define WQ_DONE_HISTORY 60

typedef struct wq_hqueue {
    const wq_queue_ops *ops;
    void *q;
    const char *name; /* owned by the queue */
    int persist;      /* its items live in the state file */
    /* Its `done` counter once a second (real clock), for the rate over the last minute. */
    uint64_t done_hist[WQ_DONE_HISTORY + 1];
    int hist_len, hist_at; /* samples kept; the index of the next one */
} wq_hqueue;

/*
 * Items done by queue hq over the last minute (or since the runner started,
 * when it is younger) as of its latest sample, and the seconds that covers
 * in *window (0: no history yet).
 */
uint64_t wq_host_done_last_minute(const wq_hqueue *hq, int *window);

/* The runtime's side of the loop. */
typedef struct wq_host_hooks {
    int (*runnable)(void *ud); /* tasks are ready to run */
    /* From a signal handler (async-signal-safe): make running script code
     * give control back to the loop soon. */
    void (*preempt)(void);
    /* From a signal handler, every WQ_WATCH_MS while the process runs: lets
     * the runtime notice script code that holds the loop. */
    void (*watch)(void);
    /* A graceful stop began: start what should run meanwhile (on_shutdown hooks). */
    void (*stopping)(void *ud);
    /* Whether that still runs: the stop waits for it (within --grace). */
    int (*holding)(void *ud);
    /* The loop settles (after every event): wake the tasks waiting for idle queues. */
    void (*settled)(void *ud);
    /* The run is over (its last changes written): a last word before the stop line. */
    void (*ending)(void *ud);
    void *ud;
} wq_host_hooks;

/* A one-shot run's exit status when its handlers dead-lettered anything (1 is a script's
 * error, 2 a refused option combination). */
#define WQ_EXIT_DEAD 3

#define WQ_WATCH_MS 50 /* a stall is reported after 1.00-1.05 s */

/* What a timer does when it fires; id is the timer's id. */
typedef void (*wq_timer_fn)(wq_host *h, void *data, uint64_t id);

typedef struct wq_timer_slot {
    wq_timer_fn fn; /* NULL: free slot */
    void *data;
    uint32_t gen;
    uint32_t next_free;
    int weak; /* in weak_timers: does not keep the process alive */
} wq_timer_slot;

struct wq_host {
    struct event_base *base;
    wq_host_opts opts;
    wq_clock clock;
    int64_t vnow;       /* virtual clock, ns */
    int64_t start_mono; /* clock at start */
    double start_unix;  /* wall clock at start */
    wq_host_hooks hooks;

    struct event *timer_ev;            /* fires due timers and delayed items */
    struct event *sig_ev, *sigchld_ev; /* SIGINT/SIGTERM (through a pipe), SIGCHLD */
    struct event *tick_ev;             /* periodic: inbox poll, progress */
    struct event *flush_ev;            /* ends a group-commit window */
    int64_t last_flush;                /* real ns of the last commit */
    int64_t busy_since;                /* real ns the state file became locked, 0 when not */
    int64_t flush_backoff;             /* wait before the next attempt while locked */

    wq_delay timers;      /* pending timers that keep the process alive */
    wq_delay weak_timers; /* housekeeping timers that do not */
    wq_timer_slot *slots;
    uint32_t nslots, free_slot;
    int64_t armed;         /* deadline timer_ev is armed for, WQ_NEVER when none */
    wq_histogram loop_lag; /* how late timer_ev fired */

    wq_hqueue *queues;
    int nqueues, queues_cap;

    int64_t last_sample; /* real ns of the last done sample (sample_done) */
    int children;        /* running child processes */
    void *procs;         /* list of running child process records (proc.c) */
    void *pools;         /* list of process pools (pool.c) */
    void *httpc;         /* the HTTP client of wq.http, once used (httpc.c) */

    int store_failed;               /* a commit failed: no more writes, exit 1 */
    char ack_error[512];            /* why the last waiters released with 0 were not acknowledged */
    int loop_over;                  /* the last commit is made: waiters are refused at once */
    int replies_unsent;             /* HTTP answers given but not yet written out (http.c) */
    int failed;                     /* something failed during a graceful stop: exit 1 at the end */
    int flush_now;                  /* flush_ev is active for waiting acknowledgements */
    struct durable_waiter *waiters; /* wq_host_when_durable callers */
    int nwaiters, waiters_cap;
    struct cancel_waiter *cancel_waiters; /* wq_host_when_cancelled callers (commands.c) */
    int inbox_checked;                    /* settle is looking at the inbox before exiting */
    int stopping;                         /* a signal asked for a graceful stop */
    int exiting;                          /* the loop is breaking */
    int exit_code;
    int exit_chosen;    /* the script set the status (wq.exit) */
    uint64_t ndead_run; /* keys this run's handlers dead-lettered */
    uint64_t grace_timer;

    wq_backend *backend; /* NULL: no --db (in memory) */
    wq_flows *flows;     /* the runner's own flow set (host/flows.c); NULL on a shared database */
    uint64_t flow_prune_timer;
    void *http;     /* the HTTP server, when listening */
    void *progress; /* the progress line, when shown */
    void *service;  /* start-up line, systemd notifications (service.c) */
    uint64_t handler_timeouts;

    struct wq_events *events; /* who listens for the queues' events (events.c), NULL: none yet */
    int listeners;            /* streams and key waits listening (wq_events_wanted) */
    int relaying;             /* another runner listens for this one's events (shared db) */
    uint64_t events_gen;      /* bumped whenever who listens changes (wq_events_wanted_for) */
    char runner[300];         /* this runner's name in events ("HOST:PID"), "" until asked */

    /* Kills the wq.exec children's groups if we die (keeper.c); NULL: none. */
    struct wq_keeper *keeper;
};

/*
 * A host for opts: the loop, signals and (with opts->db_path) the open
 * state file. NULL after printing why to stderr.
 */
wq_host *wq_host_new(const wq_host_opts *opts);
/* Frees the host (closing the state file). NULL is fine. */
void wq_host_free(wq_host *h);
/* Installs the runtime's hooks. */
void wq_host_set_hooks(wq_host *h, const wq_host_hooks *hooks);
/* Starts the HTTP listener and the progress line if asked; 0, or -1 after printing why. */
int wq_host_start(wq_host *h);
/* Runs the loop until the process is done, writes the last changes; returns the exit status. */
int wq_host_run(wq_host *h);
/* Stops serving HTTP and kills running children (before the runtime closes). */
void wq_host_shutdown(wq_host *h);

/* Monotonic ns of the real clock, whatever the host clock is. */
int64_t wq_real_now(void);
/* Current time in ns on the host clock (virtual or monotonic). */
int64_t wq_host_now(const wq_host *h);
/* Wall-clock Unix seconds for a host-clock time. */
double wq_host_unix(const wq_host *h, int64_t mono);
/* Ends the loop with the given status (after the current callback). */
void wq_host_exit(wq_host *h, int code);
/* Writes an info line to the log (stderr, above the progress line; engine/log.h). */
void wq_host_log(wq_host *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same at level lv. */
void wq_host_logl(wq_host *h, wq_log_level lv, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same with structured fields (JSON lines show them; text has them in the message). */
void wq_host_logf(wq_host *h, wq_log_level lv, const wq_log_field *fields, size_t nfields,
                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Begins a graceful stop, as the first SIGINT/SIGTERM does (why names the cause in the log). */
void wq_host_stop(wq_host *h, const char *why);
/* Re-arms the timer and checks for idle/virtual-time jumps; call after state changes. */
void wq_host_settle(wq_host *h);

/* Told whether what it waited for is committed (1) or cannot be (0). */
typedef void (*wq_durable_fn)(void *ud, int ok);
/*
 * Calls fn(ud, 1) once every change made so far is committed to the state
 * file (with --sync full, on disk), fn(ud, 0) if it cannot be (the file
 * failed, or the process ends first) or is not within 5 s while another
 * connection holds the write lock. At once when there is no state file
 * or nothing is pending. 0, or -1 on OOM (fn not called).
 */
int wq_host_when_durable(wq_host *h, wq_durable_fn fn, void *ud);
/*
 * Why the waiters just told 0 are not acknowledged, for their 503 answer:
 * the state file cannot be written (and why), it stayed locked for 5 s (the
 * change may still be written later), or the runner stopped first.
 */
const char *wq_host_ack_error(const wq_host *h);

/* Registers a queue (ops and q borrowed for the host's life). 0, or -1 on OOM. */
int wq_host_add_queue(wq_host *h, const wq_queue_ops *ops, void *q, const char *name, int persist);
/* The queue named name, or NULL. */
const wq_hqueue *wq_host_find_queue(const wq_host *h, const char *name);

#endif
