/*
 * One asynchronous PostgreSQL connection on a libevent loop: libpq in
 * non-blocking pipeline mode, its socket watched by the loop. It owns the
 * queue of statements sent and not yet answered, each with its callback,
 * the way evhttp_connection owns its requests. Statements between two
 * syncs form one implicit transaction (one commit). A lost connection
 * answers every pending statement with NULL and reconnects with backoff.
 */
#ifndef WQ_PGCONN_H
#define WQ_PGCONN_H

#include <libpq-fe.h>
#include <stddef.h>

struct event_base;
typedef struct wq_pgconn wq_pgconn;

/* A statement's answer: res is the result (owned by the connection: valid during the call),
 * NULL when the connection was lost before it came, or a PGRES_PIPELINE_ABORTED result. */
typedef void (*wq_pg_result_fn)(void *ud, PGresult *res);
/* A sync's answer: ok 1 when the transaction it closes committed, 0 when it failed or the
 * connection was lost (nothing of it is committed, or it is unknown: lost at commit). */
typedef void (*wq_pg_sync_fn)(void *ud, int ok);

typedef struct wq_pgconn_hooks {
    /* The connection is up again (after a loss; not for the first connect): re-prepare,
     * LISTEN again. */
    void (*up)(void *ud);
    /* The connection was lost (every pending statement was answered NULL first). */
    void (*down)(void *ud, const char *why);
    /* A notification arrived. */
    void (*notify)(void *ud, const char *channel, const char *payload);
    void *ud;
} wq_pgconn_hooks;

/*
 * Connects to conninfo (a URL) within timeout_s seconds, blocking (start-up only), and
 * enters pipeline mode. NULL with a message in err naming the host and libpq's reason
 * (never the password).
 */
wq_pgconn *wq_pgconn_open(struct event_base *base, const char *conninfo, double timeout_s,
                          const wq_pgconn_hooks *hooks, char *err, size_t errlen);
void wq_pgconn_free(wq_pgconn *c);
/* Whether the connection is up now. */
int wq_pgconn_up(const wq_pgconn *c);
/* The libpq connection (for escaping; never for blocking calls while the loop runs). */
PGconn *wq_pgconn_pg(wq_pgconn *c);
/* Statements sent and not yet answered. */
size_t wq_pgconn_pending(const wq_pgconn *c);

/* Sends a prepared statement (or, name NULL, sql as an unnamed one). 0, or -1 when the
 * connection is down (fn is not called). Values are text (NULL: SQL NULL), copied. */
int wq_pgconn_send(wq_pgconn *c, const char *name, const char *sql, int n,
                   const char *const *values, wq_pg_result_fn fn, void *ud);
/* Prepares statement name (answered like a statement). */
int wq_pgconn_prepare(wq_pgconn *c, const char *name, const char *sql, wq_pg_result_fn fn,
                      void *ud);
/* Called by a statement's callback: takes its result (the caller PQclears it), so that it
 * can be acted on once the transaction is known to have committed (the sync's answer). */
PGresult *wq_pgconn_keep(wq_pgconn *c);
/* Ends the transaction of the statements sent since the last sync. 0 or -1 (down). */
int wq_pgconn_sync(wq_pgconn *c, wq_pg_sync_fn fn, void *ud);

/* For tests: every Nth transaction that commits is reported lost instead (its sync
 * answered 0, the connection dropped and reconnected), as when a connection goes down
 * between a commit and its answer. 0: never (the default). */
void wq_pgconn_lose_at_commit(wq_pgconn *c, long every);
/* Blocks up to timeout_ms for answers (at close, after the loop ended); the number still
 * pending. */
size_t wq_pgconn_wait(wq_pgconn *c, int timeout_ms);

/* Copies libpq's message msg into dst (n bytes) without its trailing newline ("unknown
 * error" for NULL or empty). */
void wq_pg_msg(char *dst, size_t n, const char *msg);
/* 1 if res failed for a reason that says nothing of the statement: its transaction was a
 * deadlock's victim or could not be serialized. The same statement goes again. */
int wq_pg_transient(const PGresult *res);

/* A URL or conninfo for messages: host, port and database, never the password (static). */
const char *wq_pg_describe(PGconn *pg, const char *fallback);

#endif
