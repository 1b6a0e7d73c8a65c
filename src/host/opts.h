/*
 * The options of a run, as the command line gives them (SPEC section 2).
 * Kept apart so main.c needs nothing else of the host.
 */
#ifndef WQ_OPTS_H
#define WQ_OPTS_H

typedef struct wq_host_opts {
    const char *db_path;     /* --db, NULL: in memory */
    const char *listen;      /* --listen ADDR:PORT, NULL: no HTTP */
    const char *token;       /* --token / WQRUN_TOKEN, NULL: none */
    double grace;            /* --grace seconds */
    int sync_full;           /* --sync full */
    int serve;               /* --serve */
    int quiet;               /* --quiet */
    int virtual_time;        /* --virtual-time */
    int max_connections;     /* --max-connections, 0: the default */
    const char *pg_schema;   /* PostgreSQL schema, NULL: the default */
    const char *runner_name; /* PostgreSQL runner name, NULL: HOST:PID */
    double lease;            /* PostgreSQL lease seconds, <= 0: the default */
} wq_host_opts;

#endif
