/*
 * The operator commands of the command line (SPEC 7.5, 8.4): `wqrun
 * pause|resume|remove|cancel|retry|purge-dead|items`. Their arguments are
 * the same on both backends, parsed here once; each backend's command
 * line (src/store/sqlite/cli_ops.c, src/store/pg/pg_cli.c) applies them.
 */
#ifndef WQ_CLI_OPS_H
#define WQ_CLI_OPS_H

#include <stdio.h>

typedef enum {
    WQ_CLI_PAUSE,
    WQ_CLI_RESUME,
    WQ_CLI_REMOVE,
    WQ_CLI_CANCEL,
    WQ_CLI_RETRY,
    WQ_CLI_RETRY_ALL,
    WQ_CLI_PURGE,
    WQ_CLI_ITEMS
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

/* Whether cmd is one of the operator commands. */
int wq_cli_is_op(const char *cmd);
/* The name of op in the SQLite commands table ("pause", "retry_all", ...; NULL for items). */
const char *wq_cli_op_name(wq_cli_op op);

/*
 * Parses argv (what follows the command name; --db defaults to WQRUN_DB): 0 parsed, or the exit
 * status after printing usage (2) or the help (0, with *done set).
 */
int wq_cli_parse(const char *cmd, int argc, char **argv, wq_cli_args *a, FILE *out, FILE *err,
                 int *done);

#endif
