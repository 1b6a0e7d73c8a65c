/*
 * wqrun's command line: parses options and hands over to the host (run a
 * script) or to the command line of the backend --db names (add, status,
 * ...). Nothing else lives here.
 */
#include "engine/log.h"
#include "host/http.h"
#include "lua/runtime.h"
#include "store/backend.h"
#include "store/cli_flows.h"
#include "store/pg/pg_cli.h"
#include "store/sqlite/cli.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

static void usage(FILE *f)
{
    fputs("usage: wqrun [options] SCRIPT.lua [ARGS...]\n"
          "       wqrun add --db PATH|URL QUEUE KEY [PAYLOAD] [--after SECONDS] [--priority N]\n"
          "                 [--group GROUP] [--unique|--no-unique] [--wait [--timeout SECONDS]]\n"
          "       wqrun status --db PATH|URL\n"
          "       wqrun pause|resume --db PATH|URL QUEUE\n"
          "       wqrun remove|cancel --db PATH|URL QUEUE KEY\n"
          "       wqrun retry --db PATH|URL QUEUE (KEY | --all)\n"
          "       wqrun purge-dead --db PATH|URL QUEUE\n"
          "       wqrun trigger --db PATH|URL QUEUE SCHEDULE\n"
          "       wqrun history --db PATH|URL QUEUE [--limit N] [--before ID] [--json]\n"
          "       wqrun items --db PATH|URL QUEUE [--state S] [--limit N] [--json]\n"
          "       wqrun show --db PATH|URL QUEUE KEY [--json]\n"
          "       wqrun dead --db PATH|URL QUEUE [--limit N] [--json]\n"
          "       wqrun add-flow --db PATH|URL FILE.json\n"
          "       wqrun flows --db PATH|URL [--state running|finished] [--limit N] [--json]\n"
          "       wqrun flow show|cancel --db PATH|URL ID [--json]\n"
          "       wqrun migrate --db URL [--pg-schema NAME]\n"
          "       wqrun runners --db URL [--pg-schema NAME]\n"
          "       wqrun --help | --version\n"
          "\n"
          "pause ... dead operate a queue: through the runner that holds the state file\n"
          "(applied within 100 ms; the command waits up to 5 s), or directly when none does;\n"
          "with a postgres:// URL, in the database, for every runner sharing it.\n"
          "\n"
          "options:\n"
          "  --db PATH|URL         persist queues to this SQLite file (created if missing), or\n"
          "                        share them with other runners through the PostgreSQL\n"
          "                        database of a postgres:// URL (default: WQRUN_DB)\n"
          "  --pg-schema NAME      PostgreSQL schema (default wqrun)\n"
          "  --runner-name NAME    how this runner appears in `wqrun runners` (default HOST:PID)\n"
          "  --lease SECONDS       a silent runner's items are taken over after this (default 15)\n"
          "  --listen ADDR:PORT    serve the HTTP API (metrics, queues, enqueue, operator routes)\n"
          "                        and the dashboard, a web page at http://ADDR:PORT/\n"
          "                        (127.0.0.1:8080, 0.0.0.0:8080 for every interface, [::1]:8080)\n"
          "  --token TOKEN         require 'Authorization: Bearer TOKEN' on every HTTP route but\n"
          "                        /healthz and the dashboard page (or WQRUN_TOKEN)\n"
          "  --max-connections N   HTTP connections at once (default 1024, at most a quarter\n"
          "                        of the descriptor limit)\n"
          "  --grace SECONDS       how long a graceful shutdown waits for handlers (default 30)\n"
          "  --sync normal|full    SQLite durability (default normal)\n"
          "  --serve               keep running when idle, waiting for new items\n"
          "  --quiet               no progress display\n"
          "  --log-format text|json  log lines as text for people (default) or JSON lines\n"
          "                        (time in RFC 3339 UTC, level, msg, and fields such as\n"
          "                        queue, key, attempt)\n"
          "  --log-level LEVEL     debug, info (default), warn or error: lines below it are\n"
          "                        dropped\n"
          "  --virtual-time        for tests: the clock jumps to the next timer when all tasks "
          "wait\n"
          "\n"
          "Every option can also come from the environment: WQRUN_ and its name in upper\n"
          "case with '_' for '-' (WQRUN_DB, WQRUN_LISTEN, WQRUN_TOKEN, WQRUN_GRACE,\n"
          "WQRUN_SYNC, WQRUN_MAX_CONNECTIONS, WQRUN_PG_SCHEMA, WQRUN_RUNNER_NAME,\n"
          "WQRUN_LEASE, WQRUN_LOG_FORMAT, WQRUN_LOG_LEVEL; the flags WQRUN_SERVE,\n"
          "WQRUN_QUIET, WQRUN_VIRTUAL_TIME take 1/true/yes or 0/false/no); the command\n"
          "line wins.\n",
          f);
}

#include <stdarg.h>

__attribute__((format(printf, 1, 2))) static int bad_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("wqrun: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    /* One line, not sixty: the help is one option away. */
    fputs(" (wqrun --help lists the commands and options)\n", stderr);
    return 2;
}

/* The value of an option written "--name VALUE" or "--name=VALUE". */
static const char *opt_value(int argc, char **argv, int *i, const char *name)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0)
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n] != '\0')
        return NULL;
    if (*i + 1 >= argc)
        return "";
    return argv[++*i];
}

/* The --db a subcommand's arguments give, else WQRUN_DB, else NULL. */
static const char *db_of(int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            break;
        if (strcmp(argv[i], "--db") == 0)
            return i + 1 < argc ? argv[i + 1] : NULL;
        if (strncmp(argv[i], "--db=", 5) == 0)
            return argv[i] + 5;
    }
    return getenv("WQRUN_DB");
}

/* Runs subcommand cmd (add, status, an operator command) on the backend its --db names. */
static int subcommand(const char *cmd, int argc, char **argv)
{
    const char *db = db_of(argc, argv);
    if (db && wq_backend_is_pg(db)) {
        if (wq_cli_is_flow_cmd(cmd))
            return wq_pg_cli_flows(cmd, argc, argv, stdout, stderr);
        if (strcmp(cmd, "add") == 0)
            return wq_pg_cli_add(argc, argv, stdout, stderr);
        if (strcmp(cmd, "trigger") == 0)
            return wq_pg_cli_trigger(argc, argv, stdout, stderr);
        if (strcmp(cmd, "history") == 0)
            return wq_pg_cli_history(argc, argv, stdout, stderr);
        if (strcmp(cmd, "status") == 0)
            return wq_pg_cli_status(argc, argv, stdout, stderr);
        return wq_pg_cli_op(cmd, argc, argv, stdout, stderr);
    }
    /* WQRUN_DB stands for a --db the arguments do not give. */
    char **args = argv;
    char *with_db[argc + 3];
    if (db && db == getenv("WQRUN_DB")) {
        with_db[0] = "--db";
        with_db[1] = (char *)db;
        for (int i = 0; i < argc; i++)
            with_db[i + 2] = argv[i];
        with_db[argc + 2] = NULL;
        args = with_db;
        argc += 2;
    }
    if (wq_cli_is_flow_cmd(cmd))
        return wq_store_cli_flows_io(cmd, argc, args, stdout, stderr);
    if (strcmp(cmd, "add") == 0)
        return wq_store_cli_add(argc, args);
    if (strcmp(cmd, "trigger") == 0)
        return wq_store_cli_trigger_io(argc, args, stdout, stderr);
    if (strcmp(cmd, "history") == 0)
        return wq_store_cli_history_io(argc, args, stdout, stderr);
    if (strcmp(cmd, "status") == 0)
        return wq_store_cli_status(argc, args);
    return wq_store_cli_op(cmd, argc, args);
}

static int migrate_cmd(const char *cmd, int argc, char **argv)
{
    (void)cmd;
    return wq_pg_cli_migrate(argc, argv, stdout, stderr);
}

static int runners_cmd(const char *cmd, int argc, char **argv)
{
    (void)cmd;
    return wq_pg_cli_runners(argc, argv, stdout, stderr);
}

/*
 * The subcommands: argv[1] names one of these, or it is a script. A new
 * subcommand is one more line here (the unknown-command message lists
 * them).
 */
static const struct command {
    const char *name;
    int (*run)(const char *cmd, int argc, char **argv); /* argv after the name */
} commands[] = {
    {"add", subcommand},
    {"status", subcommand},
    {"pause", subcommand},
    {"resume", subcommand},
    {"remove", subcommand},
    {"cancel", subcommand},
    {"retry", subcommand},
    {"purge-dead", subcommand},
    {"items", subcommand},
    {"show", subcommand},
    {"dead", subcommand},
    {"trigger", subcommand},
    {"history", subcommand},
    {"migrate", migrate_cmd},
    {"runners", runners_cmd},
    {"add-flow", subcommand},
    {"flows", subcommand},
    {"flow", subcommand},
    {NULL, NULL},
};

static const struct command *find_command(const char *name)
{
    for (const struct command *c = commands; c->name; c++)
        if (strcmp(c->name, name) == 0)
            return c;
    return NULL;
}

/*
 * Whether name can be the script: it ends in .lua or is a file that exists.
 * Otherwise it is a misspelled command (`wqrun dead ...`), refused with
 * the list of commands rather than "cannot open": exit 2.
 */
static int check_script(const char *name)
{
    size_t n = strlen(name);
    struct stat sb;
    if ((n > 4 && strcmp(name + n - 4, ".lua") == 0) || stat(name, &sb) == 0)
        return 0;
    if (find_command(name))
        fprintf(stderr, "wqrun: the command '%s' comes first, before any option\n", name);
    else
        fprintf(stderr, "wqrun: unknown command '%s'\n", name);
    fputs("commands:", stderr);
    for (const struct command *c = commands; c->name; c++)
        fprintf(stderr, " %s", c->name);
    fputs("\n(a script's name ends in .lua, or it is an existing file; wqrun --help says more)\n",
          stderr);
    return 2;
}

/* The options of a run: each also read from its environment variable (the command line wins). */
typedef struct optdef {
    const char *name; /* "--db" */
    const char *env;  /* "WQRUN_DB" */
    int flag;         /* takes no value (the variable: 1/true/yes or 0/false/no) */
} optdef;

static const optdef optdefs[] = {
    {"--db", "WQRUN_DB", 0},
    {"--pg-schema", "WQRUN_PG_SCHEMA", 0},
    {"--runner-name", "WQRUN_RUNNER_NAME", 0},
    {"--lease", "WQRUN_LEASE", 0},
    {"--listen", "WQRUN_LISTEN", 0},
    {"--token", "WQRUN_TOKEN", 0},
    {"--max-connections", "WQRUN_MAX_CONNECTIONS", 0},
    {"--grace", "WQRUN_GRACE", 0},
    {"--sync", "WQRUN_SYNC", 0},
    {"--log-format", "WQRUN_LOG_FORMAT", 0},
    {"--log-level", "WQRUN_LOG_LEVEL", 0},
    {"--serve", "WQRUN_SERVE", 1},
    {"--quiet", "WQRUN_QUIET", 1},
    {"--virtual-time", "WQRUN_VIRTUAL_TIME", 1},
    {NULL, NULL, 0},
};

/* The edit distance of a and b (both short), for "did you mean". */
static size_t distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[64];
    if (la >= 64 || lb >= 64)
        return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* The option a misspells (at most two edits away, the option part of "--x=v"), or NULL. */
static const char *nearest_option(const char *a)
{
    char name[64];
    size_t n = strcspn(a, "=");
    if (n >= sizeof name)
        return NULL;
    memcpy(name, a, n);
    name[n] = '\0';
    const char *best = NULL;
    size_t bd = 3;
    for (const optdef *d = optdefs; d->name; d++) {
        size_t dd = distance(name, d->name);
        if (dd < bd)
            bd = dd, best = d->name;
    }
    return best;
}

/* Sets option d to v (a flag: v is "1" or "0"); 0, or bad_usage's status. */
static int apply(wq_host_opts *o, const optdef *d, const char *v)
{
    const char *a = d->name;
    if (strcmp(a, "--serve") == 0) {
        o->serve = *v == '1';
    } else if (strcmp(a, "--quiet") == 0) {
        o->quiet = *v == '1';
    } else if (strcmp(a, "--virtual-time") == 0) {
        o->virtual_time = *v == '1';
    } else if (strcmp(a, "--db") == 0) {
        if (!*v)
            return bad_usage("%s needs a path", "--db");
        o->db_path = v;
    } else if (strcmp(a, "--pg-schema") == 0) {
        if (!*v || strlen(v) > 63)
            return bad_usage("--pg-schema needs a name of 1-63 characters");
        o->pg_schema = v;
    } else if (strcmp(a, "--runner-name") == 0) {
        if (!*v)
            return bad_usage("%s needs a value", "--runner-name");
        o->runner_name = v;
    } else if (strcmp(a, "--lease") == 0) {
        char *end;
        double l = strtod(v, &end);
        if (!*v || *end || !isfinite(l) || l < 1 || l > 86400)
            return bad_usage("--lease needs seconds from 1 to 86400, got '%s'", v);
        o->lease = l;
    } else if (strcmp(a, "--listen") == 0) {
        char host[256];
        int port;
        const char *why = wq_http_parse_listen(v, host, sizeof host, &port);
        if (why)
            return bad_usage("--listen '%s': %s", v, why);
        o->listen = v;
    } else if (strcmp(a, "--token") == 0) {
        o->token = v; /* an empty one is none (an unset WQRUN_TOKEN) */
    } else if (strcmp(a, "--max-connections") == 0) {
        char *end;
        long n = strtol(v, &end, 10);
        if (!*v || *end || n < 1 || n > 1000000)
            return bad_usage("--max-connections needs a number from 1 to 1000000, got '%s'", v);
        o->max_connections = (int)n;
    } else if (strcmp(a, "--grace") == 0) {
        char *end;
        double g = strtod(v, &end);
        if (!*v || *end || !isfinite(g) || g < 0)
            return bad_usage("--grace needs seconds >= 0, got '%s'", v);
        o->grace = g;
    } else if (strcmp(a, "--sync") == 0) {
        if (strcmp(v, "normal") == 0)
            o->sync_full = 0;
        else if (strcmp(v, "full") == 0)
            o->sync_full = 1;
        else
            return bad_usage("--sync takes normal or full, got '%s'", v);
    } else if (strcmp(a, "--log-format") == 0) {
        if (wq_log_set_format(v) < 0)
            return bad_usage("--log-format takes text or json, got '%s'", v);
    } else if (strcmp(a, "--log-level") == 0) {
        if (wq_log_set_level(v) < 0)
            return bad_usage("--log-level takes debug, info, warn or error, got '%s'", v);
    }
    return 0;
}

/* Options from the environment, before the command line overrides them. */
static int apply_env(wq_host_opts *o)
{
    for (const optdef *d = optdefs; d->name; d++) {
        const char *v = getenv(d->env);
        if (!v || (!*v && strcmp(d->name, "--token") != 0))
            continue; /* an empty variable is unset (an empty --db is not a path) */
        if (d->flag) {
            if (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes"))
                v = "1";
            else if (!strcmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no"))
                v = "0";
            else
                return bad_usage("%s takes 1, true, yes, 0, false or no, got '%s'", d->env, v);
        }
        int rc = apply(o, d, v);
        if (rc) {
            fprintf(stderr, "wqrun: (from the environment variable %s)\n", d->env);
            return rc;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    const struct command *cmd = argc > 1 ? find_command(argv[1]) : NULL;
    if (cmd)
        return cmd->run(argv[1], argc - 2, argv + 2);

    wq_host_opts o = {0};
    o.grace = 30;
    int i = 1;
    for (; i < argc; i++) { /* --help and --version whatever the environment says */
        if (strcmp(argv[i], "--") == 0 || argv[i][0] != '-' || argv[i][1] == '\0')
            break;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--version") == 0 || strcmp(argv[i], "-v") == 0) {
            printf("wqrun %s\n", WQ_VERSION);
            return 0;
        }
    }
    int rc = apply_env(&o);
    if (rc)
        return rc;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-' || a[1] == '\0')
            break;
        const optdef *d = optdefs;
        if (strcmp(a, "-q") == 0)
            a = "--quiet";
        for (; d->name; d++) {
            if (d->flag ? strcmp(a, d->name) == 0
                        : (v = opt_value(argc, argv, &i, d->name)) != NULL)
                break;
        }
        if (!d->name) {
            const char *near = nearest_option(a);
            if (near)
                return bad_usage("unknown option '%s'; did you mean %s?", a, near);
            return bad_usage("unknown option '%s'", a);
        }
        if ((rc = apply(&o, d, d->flag ? "1" : v)))
            return rc;
    }
    if (i >= argc)
        return bad_usage("%s", "missing SCRIPT.lua");
    if ((rc = check_script(argv[i])))
        return rc;
    if (o.virtual_time && o.db_path && wq_backend_is_pg(o.db_path))
        return bad_usage("%s", "--virtual-time cannot be used with a PostgreSQL --db (the database "
                               "keeps real time)");
    if (o.token && !*o.token)
        o.token = NULL;
    return wq_runtime_main(&o, argv[i], argc - i - 1, argv + i + 1);
}
