/*
 * Parsing the operator commands' arguments (see cli_ops.h): one grammar
 * for both backends, so that `wqrun retry --db X queue --all` means the
 * same with a file or a URL.
 */
#include "store/cli_ops.h"

#include "engine/common.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char ops_usage[] =
    "usage: wqrun pause|resume --db PATH|URL QUEUE\n"
    "       wqrun remove|cancel --db PATH|URL QUEUE KEY\n"
    "       wqrun retry --db PATH|URL QUEUE (KEY | --all)\n"
    "       wqrun purge-dead --db PATH|URL QUEUE\n"
    "       wqrun items --db PATH|URL QUEUE [--state S] [--limit N] [--json]\n"
    "       wqrun show --db PATH|URL QUEUE KEY [--json]\n"
    "       wqrun dead --db PATH|URL QUEUE [--limit N] [--json]\n"
    "       (with a postgres:// URL, also --pg-schema NAME)\n";

/* Command-line name, commands-table name, and whether it takes a key; in wq_cli_op order. */
static const struct {
    const char *cli, *op;
    int key;
} ops[] = {
    {"pause", "pause", 0},
    {"resume", "resume", 0},
    {"remove", "remove", 1},
    {"cancel", "cancel", 1},
    {"retry", "retry", 1},
    {"retry", "retry_all", 0},
    {"purge-dead", "purge_dead", 0},
    {"items", NULL, 0},
    {"show", NULL, 1},
    {"dead", NULL, 0},
};

int wq_cli_option(int argc, char **argv, int *i, const char *name, const char **value)
{
    size_t n = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, n) != 0)
        return 0;
    if (a[n] == '=') {
        *value = a + n + 1;
        return 1;
    }
    if (a[n] != 0)
        return 0;
    if (*i + 1 >= argc)
        return -1;
    *value = argv[++*i];
    return 1;
}

int wq_cli_priority(const char *s, int32_t *out, FILE *err, const char *usage_line)
{
    char *end;
    errno = 0;
    long long p = strtoll(s, &end, 10);
    if (!*s || *end || errno == ERANGE || p < INT32_MIN || p > INT32_MAX) {
        fprintf(err,
                "wqrun: add: bad argument '--priority' (32-bit integer expected, got '%s')\n%s", s,
                usage_line);
        return -1;
    }
    *out = (int32_t)p;
    return 0;
}

void wq_cli_warn_unknown_queue(FILE *err, const char *queue, const char *where)
{
    fprintf(err,
            "wqrun: add: warning: no runner has defined queue '%s' in %s: the item waits "
            "until a script defines it (a misspelled name?)\n",
            queue, where);
}

int wq_cli_is_op(const char *cmd)
{
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        if (strcmp(ops[i].cli, cmd) == 0)
            return 1;
    return 0;
}

const char *wq_cli_op_name(wq_cli_op op)
{
    return ops[op].op;
}

static int usage(FILE *err, const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int usage(FILE *err, const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(err, "wqrun: %s: ", cmd);
    vfprintf(err, fmt, ap);
    fputc('\n', err);
    fputs(ops_usage, err);
    va_end(ap);
    return 2;
}

static int valid_queue(const char *s)
{
    size_t n = strlen(s);
    return n >= 1 && n <= 64 &&
           strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") == n;
}

int wq_cli_parse(const char *cmd, int argc, char **argv, wq_cli_args *a, FILE *out, FILE *err,
                 int *done)
{
    memset(a, 0, sizeof *a);
    a->cmd = cmd;
    a->limit = 100;
    a->db = getenv("WQRUN_DB");
    a->pg_schema = "wqrun";
    int found = 0, all = 0;
    for (size_t i = 0; i < sizeof ops / sizeof *ops && !found; i++)
        if (strcmp(ops[i].cli, cmd) == 0) {
            a->op = (wq_cli_op)i;
            found = 1;
        }
    const char *pos[3];
    int npos = 0, opts_done = 0;
    const char *limit = NULL;
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i], *v = NULL;
        if (!opts_done && (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0)) {
            fputs(ops_usage, out);
            *done = 1;
            return 0;
        }
        if (!opts_done && strcmp(arg, "--") == 0) {
            opts_done = 1;
            continue;
        }
        int m = 0;
        if (!opts_done && arg[0] == '-' && arg[1]) {
            if ((m = wq_cli_option(argc, argv, &i, "--db", &v)) > 0)
                a->db = v;
            else if (m == 0 && (m = wq_cli_option(argc, argv, &i, "--pg-schema", &v)) > 0)
                a->pg_schema = v;
            else if (m == 0 && a->op == WQ_CLI_ITEMS &&
                     (m = wq_cli_option(argc, argv, &i, "--state", &v)) > 0)
                a->state = v;
            else if (m == 0 && (a->op == WQ_CLI_ITEMS || a->op == WQ_CLI_DEAD) &&
                     (m = wq_cli_option(argc, argv, &i, "--limit", &v)) > 0)
                limit = v;
            else if (m == 0 && a->op >= WQ_CLI_ITEMS && strcmp(arg, "--json") == 0)
                m = a->json = 1;
            else if (m == 0 && a->op == WQ_CLI_RETRY && strcmp(arg, "--all") == 0)
                m = all = 1;
            if (m < 0)
                return usage(err, cmd, "option %s needs a value", arg);
            if (m == 0)
                return usage(err, cmd, "unknown option %s", arg);
            continue;
        }
        if (npos == 2)
            return usage(err, cmd, "unexpected argument '%s'", arg);
        pos[npos++] = arg;
    }
    if (!a->db || !*a->db)
        return usage(err, cmd, "%s", "--db PATH (or a postgres:// URL) is required");
    if (all)
        a->op = WQ_CLI_RETRY_ALL;
    int wants_key = ops[a->op].key;
    if (npos < 1)
        return usage(err, cmd, "%s", "missing QUEUE");
    if (wants_key && npos < 2)
        return usage(err, cmd, "%s",
                     a->op == WQ_CLI_RETRY ? "missing KEY (or --all for every dead letter)"
                                           : "missing KEY");
    if (!wants_key && npos > 1)
        return usage(err, cmd, "unexpected argument '%s'%s", pos[1],
                     all ? " (--all retries every dead letter)" : "");
    a->queue = pos[0];
    a->key = wants_key ? pos[1] : NULL;
    if (!valid_queue(a->queue))
        return usage(err, cmd, "bad queue name '%s' (1-64 characters of [A-Za-z0-9_.-])", a->queue);
    if (a->state && strcmp(a->state, "queued") != 0 && strcmp(a->state, "processing") != 0 &&
        strcmp(a->state, "waiting") != 0 && strcmp(a->state, "dead") != 0)
        return usage(err, cmd, "--state takes queued, processing, waiting or dead, got '%s'",
                     a->state);
    if (a->state && strcmp(a->state, "dead") == 0) { /* the dead letters, as `wqrun dead` */
        a->op = WQ_CLI_DEAD;
        a->state = NULL;
    }
    if (limit) {
        char *end;
        a->limit = strtol(limit, &end, 10);
        if (!*limit || *end || a->limit < 1 || a->limit > 1000000)
            return usage(err, cmd, "--limit needs a number from 1 to 1000000, got '%s'", limit);
    }
    return 0;
}

/* The LAST ERROR column: the first line of the message, cut to fit. */
#define ERROR_WIDTH 32

void wq_cli_items_head(const wq_cli_args *a, FILE *out)
{
    if (a->json)
        fputs("[", out);
    else if (a->op == WQ_CLI_DEAD)
        fprintf(out, "%-24s  %8s  %-19s  %s\n", "KEY", "ATTEMPTS", "FAILED AT (UTC)", "ERROR");
    else
        fprintf(out, "%-24s  %-10s  %8s  %7s  %-19s  %-*s  %s\n", "KEY", "STATE", "PRIORITY",
                "ATTEMPT", "READY AT (UTC)", ERROR_WIDTH, "LAST ERROR", "PAYLOAD");
}

int wq_cli_items_row(const wq_cli_args *a, FILE *out, long i, const wq_cli_item *it)
{
    if (i >= a->limit) {
        if (!a->json)
            fprintf(out, "... more (--limit %ld shows %ld)\n", a->limit, a->limit);
        return 1;
    }
    if (a->json) {
        fprintf(out, "%s\n%s", i ? "," : "", it->json);
        return 0;
    }
    char key[WQ_SHOWN_KEY];
    wq_show_key(key, it->key ? it->key : "", it->key ? strlen(it->key) : 0);
    if (a->op == WQ_CLI_DEAD) {
        char line[ERROR_WIDTH * 4 + 1];
        wq_show_line(line, sizeof line, it->last_error ? it->last_error : "-");
        fprintf(out, "%-24s  %8s  %-19s  %s\n", key, it->attempt, it->ready ? it->ready : "-",
                line);
        /* its traceback under it, indented: where the handler failed */
        for (const char *p = it->traceback; p && *p;) {
            size_t n = strcspn(p, "\n");
            fprintf(out, "    %.*s\n", (int)n, p);
            p += n + (p[n] == '\n');
        }
        return 0;
    }
    char error[ERROR_WIDTH + 1];
    wq_show_line(error, sizeof error, it->last_error ? it->last_error : "-");
    const char *payload = it->payload ? it->payload : "-";
    fprintf(out, "%-24s  %-10s  %8s  %7s  %-19s  %-*s  %.60s%s", key, it->state, it->priority,
            it->attempt, it->ready ? it->ready : "-", ERROR_WIDTH, error, payload,
            strlen(payload) > 60 ? "..." : "");
    if (it->progress) /* the job's own account of how far it is */
        fprintf(out, "  progress %.60s%s", it->progress, strlen(it->progress) > 60 ? "..." : "");
    fputc('\n', out);
    return 0;
}

void wq_cli_items_tail(const wq_cli_args *a, FILE *out, long printed)
{
    if (a->json)
        fputs(printed ? "\n]\n" : "]\n", out);
}

/* Prints "name  value" for a value the key has; a value of several lines goes on indented. */
static void field(FILE *out, const char *name, const char *v)
{
    if (!v)
        return;
    fprintf(out, "%-12s ", name);
    for (const char *p = v; *p; p++) {
        fputc(*p, out);
        if (*p == '\n' && p[1])
            fprintf(out, "%-12s ", "");
    }
    fputc('\n', out);
}

int wq_cli_show(const wq_cli_args *a, FILE *out, FILE *err, const wq_cli_key *k)
{
    char key[WQ_SHOWN_KEY];
    if (!k) {
        wq_show_key(key, a->key, strlen(a->key));
        fprintf(err, "wqrun: show: no such key '%s' in queue '%s' (not pending, done or dead)\n",
                key, a->queue);
        return 1;
    }
    if (a->json) {
        fprintf(out, "%s\n", k->json);
        return 0;
    }
    wq_show_key(key, k->key, strlen(k->key));
    static const char *const names[] = {
        "key",        "state",     "payload",     "priority",  "group",    "attempt",
        "last error", "ready at",  "finished at", "result",    "attempts", "failed at",
        "error",      "waits for", "flow",        "traceback", "progress"};
    char waits[64];
    if (k->waits)
        snprintf(waits, sizeof waits, "%s dependencies", k->waits);
    const char *values[] = {key,
                            k->state,
                            k->payload,
                            k->priority,
                            k->group,
                            k->attempt,
                            k->last_error,
                            k->ready_at,
                            k->finished_at,
                            k->result,
                            k->attempts,
                            k->failed_at,
                            k->error,
                            k->waits ? waits : NULL,
                            k->flow,
                            k->traceback,
                            k->progress};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        field(out, names[i], values[i]);
    return 0;
}

/* ---- wqrun add --wait ---- */

int wq_cli_wait_timeout(const char *s, int wait, double *out, FILE *err, const char *usage_line)
{
    char *end;
    double t = strtod(s, &end);
    if (!wait) {
        fprintf(err, "wqrun: add: --timeout needs --wait\n%s", usage_line);
        return -1;
    }
    if (end == s || *end || !(t > 0) || !isfinite(t)) {
        fprintf(err, "wqrun: add: --timeout needs a number of seconds > 0, not '%s'\n%s", s,
                usage_line);
        return -1;
    }
    *out = t;
    return 0;
}

int wq_cli_wait_end(const char *queue, const char *key, const wq_cli_end *e, FILE *out, FILE *err)
{
    char shown[WQ_SHOWN_KEY];
    wq_show_key(shown, key, strlen(key));
    if (strcmp(e->state, "done") == 0) {
        if (e->result)
            fprintf(out, "%s\n", e->result);
        return 0;
    }
    if (strcmp(e->state, "dead") == 0)
        fprintf(err, "wqrun: add: %s '%s' is dead after %lld attempt%s: %s\n", queue, shown,
                (long long)e->attempts, e->attempts == 1 ? "" : "s", e->error ? e->error : "?");
    else
        fprintf(err, "wqrun: add: %s '%s' was %s\n", queue, shown, e->state);
    return 1;
}

int wq_cli_wait_timeout_end(const char *queue, const char *key, double timeout, FILE *err)
{
    char shown[WQ_SHOWN_KEY];
    wq_show_key(shown, key, strlen(key));
    fprintf(err, "wqrun: add: %s '%s' did not finish within %g s\n", queue, shown, timeout);
    return 124;
}

double wq_cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}
