/*
 * The flow commands of the command line (SPEC 9): `wqrun add-flow`, `wqrun flows`, `wqrun flow
 * show|cancel`. One grammar and one text layout for both backends, parsed and printed here;
 * each backend's command line (src/store/sqlite/cli_flows.c, src/store/pg/pg_cli_flows.c)
 * reads and changes its own tables.
 */
#ifndef WQ_CLI_FLOWS_H
#define WQ_CLI_FLOWS_H

#include <stddef.h>
#include <stdio.h>

typedef enum { WQ_CLI_ADD_FLOW, WQ_CLI_FLOWS, WQ_CLI_FLOW_SHOW, WQ_CLI_FLOW_CANCEL } wq_cli_flow_op;

typedef struct wq_cli_flow_args {
    wq_cli_flow_op op;
    const char *cmd; /* "add-flow", "flows", "flow show", "flow cancel" */
    const char *db, *pg_schema;
    const char *id;    /* show, cancel */
    const char *state; /* flows: "running", "finished" or NULL */
    long limit;        /* flows */
    int json;
    char *doc; /* add-flow: the document read from FILE (or stdin for -), malloc'd */
    size_t doclen;
} wq_cli_flow_args;

/* Whether cmd is one of the flow commands ("add-flow", "flows", "flow"). */
int wq_cli_is_flow_cmd(const char *cmd);
/* Parses argv (after cmd; --db defaults to WQRUN_DB) and reads add-flow's document: 0, or the
 * exit status after printing usage (2), the help (0, *done set) or why the file cannot be read
 * (1). */
int wq_cli_flow_parse(const char *cmd, int argc, char **argv, wq_cli_flow_args *a, FILE *out,
                      FILE *err, int *done);
void wq_cli_flow_args_free(wq_cli_flow_args *a);

/* One flow of `wqrun flows` (counts as text). */
typedef struct wq_cli_flow_row {
    const char *id, *created, *finished, *nodes, *blocked, *pending, *done, *dead;
    int cancelled;
} wq_cli_flow_row;
void wq_cli_flows_head(FILE *out);
void wq_cli_flows_row(FILE *out, const wq_cli_flow_row *r);

/* One node of `wqrun flow show` (NULL: none). after: "q/k, q/k" */
typedef struct wq_cli_node_row {
    const char *queue, *key, *state, *waits, *attempt, *error, *result, *after;
} wq_cli_node_row;
void wq_cli_nodes_head(FILE *out);
void wq_cli_nodes_row(FILE *out, const wq_cli_node_row *r);

#endif
