/*
 * The state-file commands of the command line: `wqrun add` and
 * `wqrun status` (they work on the file directly, with no runner), and
 * the operator commands (pause, remove, ...: with or without a runner).
 */
#ifndef WQ_CLI_H
#define WQ_CLI_H

#include <stdio.h>

/* `wqrun add --db PATH QUEUE KEY [PAYLOAD] [--after S] [--group G]`: argv after "add". Returns exit
 * code. */
int wq_store_cli_add(int argc, char **argv);
/* `wqrun status --db PATH`: argv after "status". Returns exit code. */
int wq_store_cli_status(int argc, char **argv);
/* As the two above, printing to out and err instead of stdout and stderr. */
int wq_store_cli_add_io(int argc, char **argv, FILE *out, FILE *err);
/* wqrun trigger --db PATH QUEUE SCHEDULE: the schedule's add now, as an inbox row (its next
 * time unchanged); exit status. */
int wq_store_cli_trigger_io(int argc, char **argv, FILE *out, FILE *err);
/* wqrun history --db PATH QUEUE [--limit N] [--before ID] [--json]: exit status. */
int wq_store_cli_history_io(int argc, char **argv, FILE *out, FILE *err);
int wq_store_cli_status_io(int argc, char **argv, FILE *out, FILE *err);

/* `wqrun CMD --db PATH QUEUE ...`: argv after CMD. Returns the exit code (0, 1, 2 bad usage). */
int wq_store_cli_op(const char *cmd, int argc, char **argv);
/* `wqrun add-flow|flows|flow show|flow cancel` on a state file (SPEC 9): the exit status. */
int wq_store_cli_flows_io(const char *cmd, int argc, char **argv, FILE *out, FILE *err);

int wq_store_cli_op_io(const char *cmd, int argc, char **argv, FILE *out, FILE *err);

#endif
