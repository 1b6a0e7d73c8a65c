/*
 * Persistence of queue state in one SQLite file (SPEC section 4). The
 * runner's loop is the only writer: it tells the store which keys changed
 * (touch), and the store writes their current state, read back from the
 * engine, in one transaction per flush (group commit). Changes to the same
 * key inside one window coalesce: a key added and done within it costs no
 * row at all. A thread of the store's own, with its own connection, copies
 * the WAL into the file (checkpoints), so that commits never wait for it;
 * nothing else runs outside the caller's thread.
 */
#ifndef WQ_STORE_H
#define WQ_STORE_H

#include "engine/queue.h"
#include "store/backend.h"

#include <stdio.h>

typedef struct wq_store wq_store;
typedef struct wq_store_queue wq_store_queue;

/*
 * The store as a backend (backend_sqlite.c): a wq_store starts with its
 * wq_backend (&s->base), a wq_store_queue with its wq_bqueue (&sq->base).
 */
extern const wq_backend_ops wq_sqlite_ops;

/*
 * Opens (creating if missing) the state file at path for running: checks it
 * is an undamaged (PRAGMA quick_check) wqrun state file of a schema version
 * this build knows (migrating an older one), takes exclusive ownership (a
 * second runner fails with WQ_EBUSY and a message naming the other
 * process), sets WAL, busy_timeout and the sync level. On failure returns a
 * WQ_E* code (WQ_EFORMAT: foreign, newer or damaged), writes a message
 * naming the file into err, and leaves a foreign or damaged file unmodified.
 */
int wq_store_open(wq_store **out, const char *path, wq_sync sync, const wq_timebase *tb, char *err,
                  size_t errlen);
/* Flushes pending changes and closes. Attached queues must be alive or detached. NULL is fine. */
void wq_store_close(wq_store *s);
/* The last error message (for WQ_EIO from flush and friends). */
const char *wq_store_errmsg(const wq_store *s);
/*
 * Cheap (one stat): 0 while the path still names the file the store has
 * open and nothing found that file damaged; else WQ_EIO ("state file X
 * was deleted or replaced while running") or WQ_EFORMAT (damaged), message
 * in errmsg. After a failure the store never writes to the file again:
 * flush fails the same way and close writes nothing. Call it periodically.
 */
int wq_store_check_path(wq_store *s);
/* Whether the store failed because its path no longer names its file (deleted or replaced). */
int wq_store_gone(const wq_store *s);

/* How long a commit waits for a lock another connection holds (SQLite
 * busy_timeout; WQ_STORE_BUSY_MS unless changed). */
#define WQ_STORE_BUSY_MS WQ_BACKEND_BUSY_MS
void wq_store_set_busy_timeout(wq_store *s, int ms);
/* The runner's loop (struct event_base *), for what the store answers later (a key's last run
 * in the history); NULL: none. */
struct event_base;
void wq_store_set_event_base(wq_store *s, struct event_base *base);
/* The path the store was opened with (owned by the store). */
const char *wq_store_path(const wq_store *s);

/*
 * Per-queue persistence: q is read at flush time to learn a touched key's
 * state. Attaching the same name again returns the same handle (now reading
 * q). Also counts as wq_store_known_queue. NULL on OOM (message in errmsg).
 * Call wq_store_restore right after: until then every removal is written
 * as a DELETE, since the store cannot know which rows the file holds.
 */
wq_store_queue *wq_store_attach(wq_store *s, const char *name, wq_queue *q);
/*
 * The engine queue is going away: the store stops reading it. Its rows stay
 * as last written; changes not yet flushed for it are dropped. Call before
 * freeing a queue that is attached while the store stays open.
 */
void wq_store_detach(wq_store_queue *sq);
/*
 * Records that the script defines queue name (shown by `wqrun status`) and
 * makes the next inbox poll offer every row again, including rows an
 * earlier poll left for an unknown queue.
 */
void wq_store_known_queue(wq_store *s, const char *name);

/*
 * Restores the queue's rows into its engine queue (the store ignores the
 * resulting touches): queued and processing rows in order, then waiting
 * ones with their absolute time. Calls fail_fn for each failures row and
 * dead_fn for each dead row so the caller can rebuild its maps.
 * Returns the number of items restored or a WQ_E* code: WQ_EFORMAT when
 * SQLite finds the file damaged (the rows passed to item_fn are then not
 * all of them, and the store writes nothing more to the file).
 */
int wq_store_restore(wq_store_queue *sq, void (*item_fn)(void *ud, const wq_restored *r),
                     void (*fail_fn)(void *ud, const char *key, size_t len, int64_t requeues,
                                     const char *last_error),
                     void (*dead_fn)(void *ud, const wq_dead_row *d), void *ud);

/* Key changed in the engine queue (call from the queue observer with its event). */
void wq_store_touch(wq_store_queue *sq, wq_event ev, const char *key, size_t len);

/*
 * wq_item_meta (backend.h) is what the runner keeps for a pending item
 * beside the engine's record (SPEC 7.1, 7.4): items.enqueued_at and
 * items.grp. The store reads it when it writes the item's row, as it
 * reads payload and priority from the engine: at flush, nothing per add.
 *
 * Installs fn (NULL: none): each flush calls fn(ud, info, out) for every
 * items row of the queue it writes, with the engine's record in info and
 * *out zeroed; fn fills *out and must not change the queue. enqueued_at
 * > 0 is written as it is; 0 keeps the row's value, or for a new pending
 * item (a new row, or a key that was done and added again since the last
 * flush) stamps to_unix(info->added_at) when queued, else the commit's
 * wall time. The group is written as given. Without fn new rows get that
 * stamp and no group. A change fn would report without an engine event
 * (a new group only) needs wq_store_touch(sq, WQ_EV_UPDATED, key, len).
 */
void wq_store_set_meta(wq_store_queue *sq,
                       void (*fn)(void *ud, const wq_item_info *info, wq_item_meta *out), void *ud);
/* The queue's failure count for key (0 deletes the row). */
void wq_store_failures(wq_store_queue *sq, const char *key, size_t len, int64_t requeues,
                       const char *last_error);
/* A dead letter for key (replaces an earlier one). */
void wq_store_dead(wq_store_queue *sq, const wq_dead_row *d);
/* Removes key's dead letter. */
void wq_store_undead(wq_store_queue *sq, const char *key, size_t len);

/* ---- completed-job memory (SPEC 7.2): table done ---- */

/* Remembers that key succeeded at finished_at (Unix seconds) with result (JSON text, copied; NULL:
 * none), replacing an earlier row; written with the next flush. */
void wq_store_done_put(wq_store_queue *sq, const char *key, size_t len, double finished_at,
                       const char *result, size_t rlen);
/* Forgets key's done row (q:forget_done, a forced add), with the next flush. */
void wq_store_done_del(wq_store_queue *sq, const char *key, size_t len);
/*
 * Deletes the queue's done rows with finished_at < older_than (Unix
 * seconds), also rows put before the flush that reaches them. The table
 * has no index on the time, so the rows are swept in key order, at most
 * 1,024 of them per flush (a table of a million rows would otherwise hold
 * one commit for tens of ms): a big table takes several flushes, and the
 * store stays dirty until the sweep is through. A call while a sweep is
 * under way goes on with it (the latest bound wins). The runner's memory
 * deletes rows key by key as they expire; this is for rows no memory
 * knows of. 0, or WQ_EINVAL (sq NULL, older_than not finite).
 */
int wq_store_done_prune(wq_store_queue *sq, double older_than);
/*
 * Calls fn for each of the queue's done rows in the file, oldest first
 * (key, result: SQLite's buffers, valid during the call; result NULL for
 * none). Returns the number of rows or a WQ_E* code (WQ_EFORMAT: damaged,
 * the store is broken). Reads the file: call at start-up, after
 * wq_store_restore.
 */
int wq_store_restore_done(wq_store_queue *sq,
                          void (*fn)(void *ud, const char *key, size_t len, double finished_at,
                                     const char *result, size_t rlen),
                          void *ud);

/* ---- schedules (SPEC 7.3): table schedules ---- */

/* Inserts or replaces the queue's schedule row->name with the next flush (row is copied). */
void wq_store_schedule_put(wq_store_queue *sq, const wq_schedule_row *row);
/* Deletes the queue's schedule name with the next flush. */
void wq_store_schedule_del(wq_store_queue *sq, const char *name);
/*
 * Calls fn for each of the queue's schedules in the file, by name (row's
 * strings are valid during the call; an unknown tz or catch_up text reads
 * as utc, once). Returns the number of rows or a WQ_E* code, as
 * wq_store_restore_done.
 */
int wq_store_restore_schedules(wq_store_queue *sq, void (*fn)(void *ud, const wq_schedule_row *row),
                               void *ud);

/* ---- operating a live runner (SPEC 7.5): queues.paused, table commands ---- */

/* Whether the file says the queue is paused (queues.paused): 1, 0, or a WQ_E* code. */
int wq_store_paused(wq_store_queue *sq);
/* Writes the queue's paused flag with the next flush. */
void wq_store_set_paused(wq_store_queue *sq, int paused);
/* Writes the queue's history option (seconds, 0: none kept) to queues.history with the next
 * flush: what `wqrun add --wait` reads. */
void wq_store_set_history(wq_store_queue *sq, double history);

/*
 * Commands: if another connection changed the file since the last call
 * (or on the first call), offers each new row of state 'new' to fn, once,
 * in id order. fn applies it and reports the outcome with
 * wq_store_command_result, then or later. Returns the number of rows
 * offered or a WQ_E* code.
 */
int wq_store_poll_commands(wq_store *s, void (*fn)(void *ud, const wq_command *c), void *ud);
/*
 * Records command id's outcome (state 'done' when ok, else 'failed', and
 * the text, copied), written with the next flush: in the same transaction
 * as the changes the command made, so a crash loses both or neither (the
 * row stays 'new' and the next runner applies it again).
 */
void wq_store_command_result(wq_store *s, int64_t id, int ok, const char *text);
/*
 * Writes row into the inbox with the next commit (copied): an add this
 * runner cannot take now (it is stopping) that the next start will. 0 or
 * WQ_ENOMEM.
 */
int wq_store_inbox_put(wq_store *s, const wq_inbox_row *row);

/* Whether anything is waiting to be written. */
int wq_store_dirty(const wq_store *s);
/*
 * Writes every pending change in one transaction. 0, WQ_EIO (disk full, I/O
 * error: rolled back; or the path no longer names the file, see
 * wq_store_check_path), WQ_EFORMAT (the file is damaged), WQ_EBUSY (another
 * connection held the write lock past the 5 s busy timeout: nothing
 * written), or WQ_ENOMEM (some failure-count, dead-letter, done or
 * schedule changes were lost; the rest is written). Message in errmsg.
 * After an error the pending set is kept, so a later flush writes it all
 * (except after WQ_EFORMAT or a moved path: nothing is written any more).
 */
int wq_store_flush(wq_store *s);

/*
 * Inbox: if another connection changed the file since the last call (or on
 * the first call), reads the inbox rows in id order and offers each to
 * fn; fn returns 1 when it took the row (the store deletes it with the
 * next flush), 0 to leave it (e.g. unknown queue). Returns the number of
 * rows taken or a WQ_E* code.
 *
 * A row is offered once; a row left by fn is offered again only after a
 * queue is attached or announced (wq_store_known_queue). payload is JSON
 * text (a row whose payload is not valid JSON arrives as a JSON string) or
 * NULL. after is the delay left, in seconds: the row's `after` counts from
 * its created_at, so a row whose time has passed arrives with after <= 0.
 */
int wq_store_poll_inbox(wq_store *s, int (*fn)(void *ud, const wq_inbox_row *row), void *ud);

/* Store counters for metrics: the backend's (its PostgreSQL fields stay zero). */
typedef wq_backend_stats wq_store_stats;
void wq_store_get_stats(const wq_store *s, wq_store_stats *st);

#endif
