/*
 * The command line on a PostgreSQL database (SPEC 8.4): each returns the exit status (0, 1,
 * 2 bad usage) and prints to out and err. argv is what follows the subcommand.
 */
#ifndef WQ_PG_CLI_H
#define WQ_PG_CLI_H

#include <libpq-fe.h>
#include <stdio.h>

/* `wqrun migrate --db URL [--pg-schema NAME]`: creates or upgrades the schema. */
int wq_pg_cli_migrate(int argc, char **argv, FILE *out, FILE *err);
/* `wqrun add --db URL QUEUE KEY [PAYLOAD] [--after S] [--priority N] [--group G]`. */
int wq_pg_cli_add(int argc, char **argv, FILE *out, FILE *err);
/* wqrun trigger --db URL QUEUE SCHEDULE: the schedule's add now (next_at unchanged). */
int wq_pg_cli_trigger(int argc, char **argv, FILE *out, FILE *err);
/* `wqrun status --db URL`: per-queue counts and the runners. */
int wq_pg_cli_status(int argc, char **argv, FILE *out, FILE *err);
/* `wqrun runners --db URL`: the runners sharing the database. */
int wq_pg_cli_runners(int argc, char **argv, FILE *out, FILE *err);

/* `wqrun pause|resume|remove|cancel|retry|purge-dead|items|show|dead --db URL QUEUE ...`:
 * applied in the database; a cancel waits up to 5 s for its runner to end the run. */
int wq_pg_cli_op(const char *cmd, int argc, char **argv, FILE *out, FILE *err);
/* Connects to url for command cmd and makes sure the schema is there (creating or upgrading
 * it); NULL after printing why. */
PGconn *wq_pg_cli_connect(const char *cmd, const char *url, const char *schema, FILE *err);
/* `wqrun history --db URL QUEUE [--limit N] [--before ID] [--json]` (SPEC 11):
 * pg_cli_history.c. */
int wq_pg_cli_history(int argc, char **argv, FILE *out, FILE *err);
/* `wqrun add-flow|flows|flow show|flow cancel --db URL ...` (SPEC 9): pg_cli_flows.c. */
int wq_pg_cli_flows(const char *cmd, int argc, char **argv, FILE *out, FILE *err);

/* `wqrun add --wait` (pg_cli_wait.c): before the add, LISTEN, announce a listener and note the
 * history's last row (into mark); 0 or -1. After it: waits for the key's end, prints it and
 * returns the exit status (0 done, 1 not, 124 at the timeout; timeout < 0: none). */
int wq_pg_cli_wait_begin(PGconn *pg, const char *schema, const char *queue, char *mark, size_t n);
int wq_pg_cli_wait_end(PGconn *pg, const char *schema, const char *queue, const char *key,
                       const char *mark, double timeout, FILE *out, FILE *err);

#endif
