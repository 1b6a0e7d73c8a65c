/*
 * Internals shared by the store's modules (store.c: open, queues and the
 * Bloom filter; commit.c: the pending set and group commit; restore.c:
 * start-up restore and the inbox; jobs.c: completed-job memory and
 * schedules; checkpoint.c: the background checkpointer; schema.c: the file
 * format and migrations; cli.c: `wqrun add` and `wqrun status`). Nothing
 * outside src/store/sqlite (but its tests) includes this.
 */
#ifndef WQ_STORE_INT_H
#define WQ_STORE_INT_H

#include "engine/keymap.h"
#include "store/sqlite/store.h"

#include <sqlite3.h>
#include <stdio.h>
#include <sys/types.h>

/* PRAGMA application_id of a wqrun state file: "wqru". */
#define WQ_STORE_APP_ID 0x77717275
/* PRAGMA user_version this build writes and understands. */
#define WQ_STORE_VERSION 8

/* Ends the message refusing a damaged file: what the user can do about it. */
#define WQ_STORE_DAMAGED_HINT                                                                      \
    "refusing to touch it (restore a backup, or salvage what is left with the sqlite3 "            \
    "shell's .recover)"

/* SQL for "now" as Unix seconds (REAL), valid in SQLite 3.40. */
#define WQ_SQL_NOW "((julianday('now') - 2440587.5) * 86400.0)"

/* SQL: whether the file has seen queue ?1 (a runner defined it, or it holds items or dead
 * letters). */
#define WQ_SQL_QUEUE_KNOWN                                                                         \
    "SELECT EXISTS (SELECT 1 FROM queues WHERE name = ?1)"                                         \
    " OR EXISTS (SELECT 1 FROM items WHERE queue = ?1)"                                            \
    " OR EXISTS (SELECT 1 FROM dead WHERE queue = ?1)"

/* How a pending entry's seq is written (see write_item in store.c). */
enum { SEQ_INSERT, SEQ_FORCE, SEQ_IF_RAISED };
/* What a pending failures or dead-letter change does. */
enum { OP_NONE, OP_SET, OP_DEL };

/* The store's cached statements. */
enum {
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_UPSERT_ITEM,
    ST_DELETE_ITEM,
    ST_UPSERT_FAIL,
    ST_DELETE_FAIL,
    ST_UPSERT_DEAD,
    ST_DELETE_DEAD,
    ST_DELETE_INBOX,
    ST_QUEUE_SEEN,
    ST_DELETE_QUEUE_ITEMS,
    ST_UPSERT_DONE,
    ST_DELETE_DONE,
    ST_PRUNE_SEEK,
    ST_PRUNE_DONE,
    ST_PRUNE_TAIL,
    ST_UPSERT_SCHED,
    ST_DELETE_SCHED,
    ST_INSERT_ITEMS,     /* WQ_STORE_INSERT_BATCH new rows */
    ST_DELETE_ITEMS,     /* up to WQ_STORE_DELETE_BATCH keys of one queue */
    ST_INSERT_DONE,      /* WQ_STORE_INSERT_BATCH done rows */
    ST_DELETE_DONES,     /* up to WQ_STORE_DELETE_BATCH done keys of one queue */
    ST_PREPARED_AT_OPEN, /* the ones below are prepared on first use */
    ST_SELECT_INBOX = ST_PREPARED_AT_OPEN,
    ST_DATA_VERSION,
    ST_SELECT_COMMANDS, /* commands.c */
    ST_COMMAND_RESULT,
    ST_INBOX_PUT,
    ST_SET_PAUSED,
    ST_SET_HISTORY,
    ST_COUNT
};

/* Rows per multi-row INSERT and keys per multi-key DELETE of a flush: one statement step writes
 * many rows, which costs SQLite far less per row than one step each. */
#define WQ_STORE_INSERT_BATCH 32
#define WQ_STORE_DELETE_BATCH 64

/* Pending entry flags. */
enum {
    PE_ITEM = 1,    /* the key's items row must be rewritten from the engine */
    PE_GONE = 2,    /* the key's last event was WQ_EV_GONE: the engine has no record of it */
    PE_READDED = 4, /* the key became dirty in this window: refresh added_at */
    PE_RENEW = 8    /* the key's record was dropped in this window: a record now is a new item */
};

/* One (queue, key) changed in the current window; 40 bytes, so a window of a million adds is cheap.
 */
struct pend {
    int64_t seq;      /* sequence number for FIFO order (see seq_mode) */
    uint64_t key_off; /* the key's bytes in the store's arena */
    uint32_t keylen;
    int32_t prio_seen; /* priority when seq was assigned (detects raises) */
    uint32_t qidx;     /* the queue's index in the store */
    uint32_t extra;    /* 1 + index into the extras array, 0 when none */
    uint32_t hash;     /* wq_store_key_hash, for the index and the Bloom filter */
    uint8_t flags;     /* PE_* */
    uint8_t seq_mode;  /* SEQ_* */
};

/* Failure-count, dead-letter and done changes of a pending entry (rarer than touches, so kept
 * apart). */
struct extra {
    uint8_t fail_op, dead_op, done_op; /* OP_* */
    int64_t requeues;
    char *last_error;
    char *dpayload; /* NULL: no payload */
    size_t dpaylen;
    char *derror;
    char *dtrace; /* NULL: no traceback */
    int64_t attempts;
    double failed_at;
    double finished_at; /* the done row */
    char *result;       /* NULL: none */
    size_t rlen;
};

/* A pending write or delete of a schedule row (few: a list searched by name). */
struct sched_op {
    uint32_t qidx;
    uint8_t op;                        /* OP_SET or OP_DEL */
    char *name, *spec, *key, *payload; /* copies; payload NULL: none */
    size_t keylen, paylen;
    wq_sched_tz tz;
    wq_sched_catch_up catch_up;
    double next_at, last_at;
};

struct wq_store_queue {
    wq_bqueue base; /* first: the backend's handle (backend_sqlite.c) */
    wq_store *s;
    char *name;
    size_t namelen;
    uint32_t idx;
    wq_queue *q;
    wq_keymap *fail_set; /* keys with a failures row in the file (when complete) */
    int complete;        /* every file row of this queue is known to the filter and fail_set */
    int restoring;       /* inside wq_store_restore: touches are ignored */
    int resync;          /* a touch was lost: rewrite all of the queue's rows at the next flush */
    void (*meta_fn)(void *ud, const wq_item_info *info, wq_item_meta *out);
    void *meta_ud;
    int prune; /* a sweep deleting done rows older than prune_before is under way */
    double prune_before;
    char *prune_from; /* the sweep's next slice starts at this key (NULL: at the first) */
    size_t prune_fromlen;
    char *prune_next; /* during a flush: where the slice after this one starts */
    size_t prune_nextlen;
    int prune_end;                       /* during a flush: this slice ends the sweep */
    uint32_t del[WQ_STORE_DELETE_BATCH]; /* during a flush: entries whose rows to delete */
    uint32_t ndel;
    uint32_t ddel[WQ_STORE_DELETE_BATCH]; /* the same for done rows */
    uint32_t nddel;
    int set_paused; /* write queues.paused = paused at the next flush */
    int paused;
    int set_history; /* write queues.history = history at the next flush */
    double history;  /* the runner's history option (wq_store_set_history) */
};

/* An operator command's outcome, written with the next flush (commands.c). */
/* An inbox row the runner itself writes (an add it cannot take now: a graceful stop). */
struct inbox_put {
    char *queue, *key, *payload, *grp; /* owned; payload and grp may be NULL */
    size_t keylen, paylen, grplen;
    double after;
    int has_priority;
    int64_t priority;
    int unique;
};

struct cmd_result {
    int64_t id;
    int ok;
    char *text;
};

typedef struct wq_ckpt wq_ckpt;

struct event_base;
typedef struct wq_store_lookup wq_store_lookup;

struct wq_store {
    wq_backend base; /* first: the backend's handle (backend_sqlite.c) */
    sqlite3 *db;
    wq_ckpt *ckpt; /* the background checkpointer, NULL when not running */
    char *path;
    int lock_fd;
    dev_t dev;
    ino_t ino;
    pid_t pid;                  /* the process that opened it (a forked child is another runner) */
    struct wq_store *next_open; /* process-wide list of open stores */
    wq_sync sync;
    wq_timebase tb;
    int64_t tb_mono0; /* default timebase: CLOCK_MONOTONIC ns and ... */
    double tb_unix0;  /* ... CLOCK_REALTIME seconds at open */

    sqlite3_stmt *st[ST_COUNT]; /* prepared once, kept for the whole session */

    wq_store_queue **queues;
    uint32_t nqueues;
    size_t capqueues;

    struct pend *ents; /* the pending set, in touch order */
    size_t nents, capents;
    struct extra *extras;
    size_t nextras, capextras;
    char *arena; /* key bytes of the pending entries */
    size_t arena_len, arena_cap;
    uint64_t *index; /* open addressing over ents: hash << 32 | (1 + entry index), 0 empty */
    size_t index_mask;

    struct sched_op *sched; /* schedule changes of the window */
    size_t nsched, capsched;

    char **announce; /* queue names to record in the queues table */
    size_t nannounce, capannounce;

    int64_t *inbox_del; /* inbox ids taken, deleted at the next flush (sorted) */
    size_t ninbox_del, capinbox_del;
    int64_t inbox_mark; /* highest inbox id offered so far */
    int64_t data_version;
    int inbox_polled; /* a first poll happened */
    int inbox_rescan; /* offer every row again at the next poll (a queue was added, or a
                         poll stopped early) */

    struct cmd_result *cmd_results; /* outcomes of commands applied in this window */
    size_t ncmd_results, capcmd_results;
    struct inbox_put *inbox_puts; /* rows for the inbox, written with the next commit */
    size_t ninbox_puts, capinbox_puts;
    int64_t cmd_mark;         /* highest command id offered so far */
    int64_t cmd_data_version; /* PRAGMA data_version at the last command poll */
    int cmd_polled;           /* a first command poll happened */

    int64_t next_seq;
    uint64_t *bloom; /* which items rows may exist in the file (64-byte aligned blocks) */
    void *bloom_mem; /* the allocation bloom lies in */
    size_t bloom_set;
    uint64_t lost_updates; /* failures/dead changes dropped for lack of memory */

    wq_store_stats stats;
    char errmsg[512];
    int broken; /* a WQ_E* code once the file cannot be trusted: nothing more is written to it */
    char broken_msg[512];
    int gone;                     /* broken because the path names another file, or none */
    struct wq_store_flows *flows; /* the flow set written behind (flows.c), NULL until used */
    struct wq_store_history
        *history;                    /* finished runs written behind (history.c), NULL until used */
    struct event_base *event_base;   /* the runner's loop, NULL: none (a command) */
    struct wq_store_lookup *lookups; /* a key's last run being looked up (history_key.c) */
    sqlite3_stmt *st_last_run;
    struct wq_store_progress *progress; /* progress written behind (progress.c), NULL: none */
};

/* ---- schema.c ---- */

/*
 * Checks that path is usable without modifying it: missing, empty, an empty
 * SQLite database, or a wqrun state file of a version this build knows.
 * 0, WQ_EFORMAT (foreign, newer) or WQ_EIO, with a message naming path.
 */
int wq_schema_check(const char *path, char *err, size_t errlen);
/*
 * Opens path read-write (creating it), creates the schema of a new file or,
 * with upgrade, migrates an older one, in one transaction (re-checking the
 * file under the write lock), and switches it to WAL. Without upgrade an
 * older file keeps its version (`wqrun add` only writes the inbox, the
 * same in every version; the runner migrates, under its lock). The
 * connection skips SQLite's mutex: no two threads may use it at once. *out
 * is NULL on failure. 0, WQ_EFORMAT or WQ_EIO (a failed migration rolled
 * back: the file is as it was).
 */
int wq_schema_open_rw(const char *path, int upgrade, sqlite3 **out, char *err, size_t errlen);
/* The schema version of an open state file (PRAGMA user_version), or -1. */
int wq_schema_version(sqlite3 *db);
/* Opens a checked file for reading (read-write when permitted, so closing tidies the WAL). 0 or
 * WQ_EIO. */
int wq_schema_open_ro(const char *path, sqlite3 **out, char *err, size_t errlen);
/* Reads the owner recorded in meta ("pid 123 on host, since ..."); "" when unknown. */
void wq_schema_owner(sqlite3 *db, char *buf, size_t len);
/* Whether an SQLite result code says the file is damaged (SQLITE_CORRUPT, SQLITE_NOTADB). */
int wq_schema_damaged(int rc);
/* Whether name is a valid queue name: 1-64 chars of [A-Za-z0-9_.-]. */
int wq_schema_valid_queue(const char *name, size_t len);

/* ---- store.c (used by the other modules) ---- */

/* Formats the store's error message; returns code. */
int wq_store_fail(wq_store *s, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/*
 * Stops the store from ever writing to its file again (it is damaged, or
 * deleted or replaced): every later flush, restore, inbox poll and check
 * fails with code and this message, and close neither writes nor
 * checkpoints. The first break's message stays. Returns code.
 */
int wq_store_break(wq_store *s, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The code of a broken store (its message put back into errmsg), or 0. */
int wq_store_broken(wq_store *s);
/*
 * Fails with SQLite result rc met while trying to do what (e.g. "restore
 * queue 'jobs'"): breaks the store and returns WQ_EFORMAT when rc says the
 * file is damaged, else returns WQ_EIO. The message names the file.
 */
int wq_store_sqlite_fail(wq_store *s, int rc, const char *what);
/* Wall-clock Unix seconds. */
double wq_store_wall(void);
/* Monotonic nanoseconds of the real clock (for measuring commits). */
int64_t wq_store_mono_ns(void);
/* A NUL-terminated copy of len bytes (wq_malloc), or NULL. */
char *wq_store_dup(const char *p, size_t len);
/* Grows *arr to hold need elements of elem bytes (doubling). 0 or -1. */
int wq_store_grow(void **arr, size_t *cap, size_t need, size_t elem);
/* Binds a Unix time to parameter i: NULL for none (<= 0, not finite). */
void wq_store_bind_time(sqlite3_stmt *st, int i, double t);
/* Steps a statement that returns no rows and resets it. SQLite result code. */
int wq_store_run(sqlite3_stmt *st);
/* The hash of (queue, key) that the pending set's index and the Bloom filter use. */
uint32_t wq_store_key_hash(const wq_store_queue *sq, const char *key, size_t len);
/* Notes that the key of hash h (wq_store_key_hash) may have an items row in the file. */
void wq_store_bloom_add(wq_store *s, uint32_t h);
/* Whether the key of hash h may have an items row in the file (no false negatives). */
int wq_store_bloom_test(const wq_store *s, uint32_t h);
/*
 * After a successful flush every attached queue's engine records are
 * exactly its rows in the file, so a crowded filter is rebuilt from them.
 */
void wq_store_bloom_rebuild(wq_store *s);
/* Bits in the filter; it is rebuilt when half of them are set. */
#define WQ_STORE_BLOOM_BITS (1u << 23)
/* A key's bits all lie in one block of this many bits (one cache line): one miss per lookup. */
#define WQ_STORE_BLOOM_BLOCK 512

/* ---- commit.c ---- */

/* Forgets the pending set (after a successful flush: committed 1, or at close: 0). */
void wq_store_clear_pending(wq_store *s, int committed);

/* Prepares a statement; 0 or WQ_EIO with the message set. */
int wq_store_prepare(wq_store *s, sqlite3_stmt **st, const char *sql);
/*
 * PRAGMA data_version of this connection (changes when another connection
 * commits to the file); 0, or a WQ_E* whose message names <what>.
 */
int wq_store_data_version(wq_store *s, int64_t *version, const char *what);
/* Prepares the multi-row statements (ST_INSERT_ITEMS ... ST_DELETE_DONES); 0 or WQ_EIO. */
int wq_store_prepare_batches(wq_store *s);
/* The queue reads another engine queue now: what its pending entries say about records is void. */
void wq_store_forget_gone(wq_store_queue *sq);
/* Records key as re-queued by the restore (state and seq rewritten at the next flush). */
void wq_store_touch_requeued(wq_store_queue *sq, const char *key, size_t len);
/* Whether the process already has path open as a store (same file). */
int wq_store_open_here(const char *path);

/* ---- commands.c ---- */

/* Writes the window's paused flags and command outcomes (inside the flush's transaction). SQLite
 * result code; adds the rows written to *rows. */
int wq_store_write_ops(wq_store *s, double now, uint64_t *rows);
/* Forgets them (after a successful flush, or at close). */
void wq_store_clear_ops(wq_store *s);
/* Whether any is waiting to be written. */
int wq_store_ops_dirty(const wq_store *s);
/* Frees the inbox rows not written (at close). */
void wq_store_free_inbox_puts(wq_store *s);

/* ---- checkpoint.c ---- */

/*
 * Starts the background checkpointer (a thread with its own connection
 * that copies the WAL into the file, so that the loop's commits never
 * wait for a checkpoint) and stops the store's connection from
 * checkpointing in its commits. 0, or -1 when it cannot start (the
 * connection then checkpoints in its commits, as SQLite does by default).
 */
int wq_ckpt_start(wq_store *s);
/* Stops the checkpointer, waiting for a checkpoint under way to end. Does nothing when none runs.
 */
void wq_ckpt_stop(wq_store *s);
/* Before a commit: once the WAL passed 256 MiB with the checkpointer always busy, holds the
 * checkpointer and copies the rest of the WAL itself, so that the commit starts the WAL over. */
void wq_ckpt_before_commit(wq_store *s);

/* ---- jobs.c ---- */

/* Done rows a flush's prune slice looks at, at most (wq_store_done_prune). */
#define WQ_STORE_PRUNE_STEP 1024

/* Writes the window's schedule changes and a slice of each done prune (inside the flush's
 * transaction). SQLite result code; adds the rows written to *rows. */
int wq_store_write_jobs(wq_store *s, double now, uint64_t *rows);
/*
 * After a successful flush (committed 1): forgets the window's schedule
 * changes and moves each prune past its slice (ending a prune that is
 * through). At close (committed 0): forgets schedule changes and prunes.
 */
void wq_store_clear_jobs(wq_store *s, int committed);

/* ---- cli_ops.c ---- */

/* Opens the state file at path for command cmd: 0 with *db and *fd (a descriptor for the owner's
 * lock: close it last) and *ours (it is a wqrun state file, else an empty file or database), or
 * 1 after saying why. */
int wq_store_cli_open(const char *cmd, const char *path, sqlite3 **db, int *fd, int *ours,
                      FILE *err);
/* A change the command line makes to a state file (cli_ops.c). */
typedef struct wq_cli_change {
    const char *cmd;        /* as typed, for messages */
    const char *queue, *op; /* the commands row a runner applies */
    const char *key;
    size_t keylen;
    /* Applies it when no runner owns the file (inside a write transaction; id: the command row
     * written for a runner that went away, 0 for none): 1 done, 0 refused, -1 failed, 2 left
     * for the next runner (the row stays new); msg says what happened. */
    int (*apply)(sqlite3 *db, const char *path, int64_t id, void *ud, char *msg, size_t len);
    void *ud;
} wq_cli_change;

/*
 * Makes change c to the state file at path (db open on it, fd a descriptor of it for the
 * owner's lock): applied here when nobody owns the file, else written into the commands table
 * and its outcome waited for (5 s) from the runner. Prints the outcome; the exit status.
 */
int wq_store_cli_change(sqlite3 *db, int fd, const char *path, const wq_cli_change *c, FILE *out,
                        FILE *err);

/* ---- flows.c ---- */

/* The runner's flow set, read at each flush (backend flows_attach). */
void wq_store_flows_attach(wq_store *s, wq_flows *fs);
/* A flow (node 0) or node changed, or was created: written with the next commit. */
void wq_store_flow_touch(wq_store *s, const char *flow, int64_t node, int created);
/* Whether flow changes wait to be written. */
int wq_store_flows_dirty(const wq_store *s);
/* Writes the window's flow changes (inside the flush's transaction): SQLite result code. */
int wq_store_write_flows(wq_store *s, uint64_t *rows);
/* After a successful flush (committed 1): forgets the window's changes. */
void wq_store_clear_flows(wq_store *s, int committed);
/* Frees what flows.c keeps (at close, before the connection closes). */
void wq_store_flows_free(wq_store *s);
/* Reads the flow tables into fs: the number of nodes, or a WQ_E* code. */
int wq_store_restore_flows(wq_store *s, wq_flows *fs);

/* ---- progress.c ---- */
/* The latest progress of processing key (JSON text; NULL: none any more), written with the next
 * commit after the item's own row. */
void wq_store_progress_put(wq_store_queue *sq, const char *key, size_t len, const char *json,
                           size_t n);
int wq_store_progress_dirty(const wq_store *s);
int wq_store_write_progress(wq_store *s, uint64_t *rows);
/* After the commit (committed) or a failed one (the values wait for the next). */
void wq_store_clear_progress(wq_store *s, int committed);
void wq_store_progress_free(wq_store *s);

/* ---- history.c ---- */

/* A finished run of the queue (r->keep <= 0: none kept): written with the next commit. */
void wq_store_history_put(wq_store_queue *sq, const wq_history_row *r);
/* Whether history rows wait to be written. */
int wq_store_history_dirty(const wq_store *s);
/* Writes them and prunes a slice (inside the flush's transaction): SQLite result code. */
int wq_store_write_history(wq_store *s, double now, uint64_t *rows);
/* After a flush (committed 1): forgets the rows written; else keeps them for the next. */
void wq_store_clear_history(wq_store *s, int committed);
/* Frees what history.c keeps (at close, before the connection closes). */
void wq_store_history_free(wq_store *s);
/* Keys of the queue done since `since` that were done before it too; -1 when unknown. */
int64_t wq_store_history_reran(wq_store_queue *sq, double since);
/* The queue's rows newest first, below id before (0: from the newest): the number or WQ_EIO. */
int wq_store_history_list(wq_store_queue *sq, int64_t before, size_t limit,
                          void (*fn)(void *ud, const wq_history_view *v), void *ud);
/* The newest row of key not committed yet, in *v (valid until the next flush): 1, or 0. */
int wq_store_history_uncommitted(wq_store_queue *sq, const char *key, size_t len,
                                 wq_history_view *v);

/* ---- history_key.c ---- */

/* Key's last finished run, answered from the loop as WQ_BOP_LAST_RUN (backend.h) says: 0, or
 * WQ_ENOMEM (nothing will be answered). Needs the store's event base. */
int wq_store_history_last(wq_store_queue *sq, const char *key, size_t len, wq_bop_fn fn, void *ud);
/* Drops the lookups under way, unanswered (at close). */
void wq_store_lookups_free(wq_store *s);

#endif
