/*
 * The operator commands of the command line (SPEC 7.5, 8.4): `wqrun
 * pause|resume|remove|cancel|retry|purge-dead|items|show|dead`. Their arguments are
 * the same on both backends, parsed here once; each backend's command
 * line (src/store/sqlite/cli_ops.c, src/store/pg/pg_cli.c) applies them.
 */
#ifndef WQ_CLI_OPS_H
#define WQ_CLI_OPS_H

#include <stdint.h>
#include <stdio.h>

typedef enum {
    WQ_CLI_PAUSE,
    WQ_CLI_RESUME,
    WQ_CLI_REMOVE,
    WQ_CLI_CANCEL,
    WQ_CLI_RETRY,
    WQ_CLI_RETRY_ALL,
    WQ_CLI_PURGE,
    WQ_CLI_ITEMS,
    WQ_CLI_SHOW, /* one key's state (read only, as ITEMS) */
    WQ_CLI_DEAD  /* the dead letters: `wqrun dead`, `wqrun items --state dead` */
} wq_cli_op;

typedef struct wq_cli_args {
    wq_cli_op op;
    const char *cmd; /* as typed */
    const char *db, *queue, *key, *state;
    const char *pg_schema; /* --pg-schema, "wqrun" unless given */
    long limit;
    int json;
} wq_cli_args;

/* Matches "--name VALUE" or "--name=VALUE" at argv[*i], advancing *i past the value: 1 matched,
 * 0 another argument, -1 the value is missing. */
int wq_cli_option(int argc, char **argv, int *i, const char *name, const char **value);

/* `wqrun add --priority N`: parses N into *out; 0, or -1 after printing why (as q:add says it,
 * then usage_line) to err. */
int wq_cli_priority(const char *s, int32_t *out, FILE *err, const char *usage_line);

/* `wqrun add` to a queue the database has never seen (no runner defined it, no items, no dead
 * letters): warns on err that the item waits until a script defines the queue. */
void wq_cli_warn_unknown_queue(FILE *err, const char *queue, const char *where);

/* `wqrun add --wait --timeout S`: parses S (seconds > 0, needs --wait); 0, or -1 after printing
 * why and usage_line to err. */
int wq_cli_wait_timeout(const char *s, int wait, double *out, FILE *err, const char *usage_line);
/* A run's end as `wqrun add --wait` reports it: state ("done", "dead", "cancelled", "removed"),
 * a done run's result (JSON, NULL: none), a dead run's error, its attempts. */
typedef struct wq_cli_end {
    const char *state, *result, *error;
    int64_t attempts;
} wq_cli_end;
/* Prints the end (a done run's result on out, else what happened on err): the exit status, 0
 * done, 1 not. */
int wq_cli_wait_end(const char *queue, const char *key, const wq_cli_end *e, FILE *out, FILE *err);
/* The timeout came first: says so on err; the exit status (124, as timeout(1)'s). */
int wq_cli_wait_timeout_end(const char *queue, const char *key, double timeout, FILE *err);
/* Monotonic seconds. */
double wq_cli_now(void);

/* Whether cmd is one of the operator commands. */
int wq_cli_is_op(const char *cmd);
/* The name of op in the SQLite commands table ("pause", "retry_all", ...; NULL for the ones that
 * only read: items, show, dead). */
const char *wq_cli_op_name(wq_cli_op op);

/*
 * Parses argv (what follows the command name; --db defaults to WQRUN_DB): 0 parsed, or the exit
 * status after printing usage (2) or the help (0, with *done set).
 */
int wq_cli_parse(const char *cmd, int argc, char **argv, wq_cli_args *a, FILE *out, FILE *err,
                 int *done);

/* One row of `wqrun items` as text (NULL ready, payload or last_error: none), and its JSON
 * object. A dead letter (`wqrun dead`) fills key, attempt (its attempts), ready (failed at),
 * last_error (its error) and json. */
typedef struct wq_cli_item {
    const char *key, *state, *priority, *attempt, *ready, *payload, *json, *last_error;
    const char *traceback; /* a dead letter's, NULL: none */
    const char *progress;  /* a processing item's job:progress (JSON), NULL: none */
} wq_cli_item;

/* The listing of `wqrun items` or `wqrun dead`, the same for both backends (a text table, or
 * --json): the head, then row i (0-based) of the rows read (at most --limit + 1: 1 when i is
 * the one past the limit, which says so and ends the listing, else 0), then the tail (printed:
 * rows shown). */
void wq_cli_items_head(const wq_cli_args *a, FILE *out);
int wq_cli_items_row(const wq_cli_args *a, FILE *out, long i, const wq_cli_item *it);
void wq_cli_items_tail(const wq_cli_args *a, FILE *out, long printed);

/* What `wqrun show` found of a key, as text (NULL: the state has no such field; times in UTC),
 * and its JSON object (the fields of its state, null when absent). */
typedef struct wq_cli_key {
    const char *state, *key, *payload, *priority, *group, *attempt, *last_error, *ready_at,
        *finished_at, *result, *error, *attempts, *failed_at, *json;
    const char *waits, *flow; /* a flow's node: blocked (dependencies left), its flow */
    const char *traceback;    /* a dead letter's last traceback */
    const char *progress;     /* a processing item's job:progress (JSON) */
} wq_cli_key;

/* Prints `wqrun show`'s answer: k as a block of "name  value" lines (or its JSON with --json);
 * k NULL: "no such key" on err. The exit status: 0 found, 1 not. */
int wq_cli_show(const wq_cli_args *a, FILE *out, FILE *err, const wq_cli_key *k);

#endif
