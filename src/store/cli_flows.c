/*
 * The flow commands' grammar and text layout, the same for a state file and
 * a PostgreSQL URL (see cli_flows.h).
 */
#include "store/cli_flows.h"

#include "store/cli_ops.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char flow_usage[] =
    "usage: wqrun add-flow --db PATH|URL FILE.json   (FILE - reads stdin; prints the flow's id)\n"
    "       wqrun flows --db PATH|URL [--state running|finished] [--limit N] [--json]\n"
    "       wqrun flow show --db PATH|URL ID [--json]\n"
    "       wqrun flow cancel --db PATH|URL ID\n"
    "       (with a postgres:// URL, also --pg-schema NAME)\n";

#define DOC_MAX (64u << 20)

int wq_cli_is_flow_cmd(const char *cmd)
{
    return strcmp(cmd, "add-flow") == 0 || strcmp(cmd, "flows") == 0 || strcmp(cmd, "flow") == 0;
}

static int usage(FILE *err, const char *what)
{
    fprintf(err, "wqrun: %s\n%s", what, flow_usage);
    return 2;
}

/* Reads path ("-": stdin) into a->doc: 0, or 1 after saying why. */
static int read_doc(wq_cli_flow_args *a, const char *path, FILE *err)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) {
        fprintf(err, "wqrun: add-flow: cannot open %s: %s\n", path, strerror(errno));
        return 1;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n == cap) {
            if (cap >= DOC_MAX) {
                fprintf(err, "wqrun: add-flow: %s is larger than %u bytes\n", path, DOC_MAX);
                free(buf);
                buf = NULL;
                break;
            }
            char *b = realloc(buf, cap * 2);
            if (!b) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    int bad = !buf || ferror(f);
    if (f != stdin)
        fclose(f);
    if (bad) {
        if (buf)
            fprintf(err, "wqrun: add-flow: cannot read %s\n", path);
        free(buf);
        return 1;
    }
    a->doc = buf;
    a->doclen = n;
    return 0;
}

int wq_cli_flow_parse(const char *cmd, int argc, char **argv, wq_cli_flow_args *a, FILE *out,
                      FILE *err, int *done)
{
    memset(a, 0, sizeof *a);
    a->cmd = cmd;
    a->limit = 100;
    a->pg_schema = "wqrun";
    int i = 0;
    if (strcmp(cmd, "add-flow") == 0) {
        a->op = WQ_CLI_ADD_FLOW;
    } else if (strcmp(cmd, "flows") == 0) {
        a->op = WQ_CLI_FLOWS;
    } else if (argc > 0 && strcmp(argv[0], "show") == 0) {
        a->op = WQ_CLI_FLOW_SHOW;
        a->cmd = "flow show";
        i = 1;
    } else if (argc > 0 && strcmp(argv[0], "cancel") == 0) {
        a->op = WQ_CLI_FLOW_CANCEL;
        a->cmd = "flow cancel";
        i = 1;
    } else if (argc > 0 && (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0)) {
        fputs(flow_usage, out);
        *done = 1;
        return 0;
    } else {
        return usage(err, "flow: show or cancel expected");
    }
    const char *file = NULL, *v;
    for (; i < argc; i++) {
        int r;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(flow_usage, out);
            *done = 1;
            return 0;
        } else if ((r = wq_cli_option(argc, argv, &i, "--db", &v)) != 0) {
            if (r < 0)
                return usage(err, "--db needs a value");
            a->db = v;
        } else if ((r = wq_cli_option(argc, argv, &i, "--pg-schema", &v)) != 0) {
            if (r < 0)
                return usage(err, "--pg-schema needs a value");
            a->pg_schema = v;
        } else if (a->op == WQ_CLI_FLOWS &&
                   (r = wq_cli_option(argc, argv, &i, "--state", &v)) != 0) {
            if (r < 0 || (strcmp(v, "running") != 0 && strcmp(v, "finished") != 0))
                return usage(err, "--state must be running or finished");
            a->state = v;
        } else if (a->op == WQ_CLI_FLOWS &&
                   (r = wq_cli_option(argc, argv, &i, "--limit", &v)) != 0) {
            char *end;
            long l = r > 0 ? strtol(v, &end, 10) : 0;
            if (r < 0 || *v == '\0' || *end || l < 1 || l > 100000)
                return usage(err, "--limit must be an integer from 1 to 100000");
            a->limit = l;
        } else if (strcmp(argv[i], "--json") == 0 && a->op != WQ_CLI_ADD_FLOW &&
                   a->op != WQ_CLI_FLOW_CANCEL) {
            a->json = 1;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            char msg[160];
            snprintf(msg, sizeof msg, "%s: unknown option %.64s", a->cmd, argv[i]);
            return usage(err, msg);
        } else if (a->op == WQ_CLI_ADD_FLOW && !file) {
            file = argv[i];
        } else if ((a->op == WQ_CLI_FLOW_SHOW || a->op == WQ_CLI_FLOW_CANCEL) && !a->id) {
            a->id = argv[i];
        } else {
            char msg[160];
            snprintf(msg, sizeof msg, "%s: unexpected argument %.64s", a->cmd, argv[i]);
            return usage(err, msg);
        }
    }
    if (!a->db && !(a->db = getenv("WQRUN_DB")))
        return usage(err, "--db is required (or WQRUN_DB)");
    if (a->op == WQ_CLI_ADD_FLOW && !file)
        return usage(err, "add-flow: the flow document (FILE.json, or - for stdin) is required");
    if ((a->op == WQ_CLI_FLOW_SHOW || a->op == WQ_CLI_FLOW_CANCEL) && (!a->id || !*a->id))
        return usage(err, "flow: the flow's ID is required");
    if (a->op == WQ_CLI_ADD_FLOW)
        return read_doc(a, file, err);
    return 0;
}

void wq_cli_flow_args_free(wq_cli_flow_args *a)
{
    free(a->doc);
    a->doc = NULL;
}

static const char *or_dash(const char *s)
{
    return s && *s ? s : "-";
}

void wq_cli_flows_head(FILE *out)
{
    fprintf(out, "%-24s %-9s %6s %7s %7s %6s %6s  %-19s %s\n", "ID", "STATE", "NODES", "BLOCKED",
            "PENDING", "DONE", "DEAD", "CREATED", "FINISHED");
}

void wq_cli_flows_row(FILE *out, const wq_cli_flow_row *r)
{
    const char *state =
        r->cancelled ? "cancelled" : (r->finished && *r->finished ? "finished" : "running");
    fprintf(out, "%-24s %-9s %6s %7s %7s %6s %6s  %-19s %s\n", r->id, state, or_dash(r->nodes),
            or_dash(r->blocked), or_dash(r->pending), or_dash(r->done), or_dash(r->dead),
            or_dash(r->created), or_dash(r->finished));
}

void wq_cli_nodes_head(FILE *out)
{
    fprintf(out, "%-10s %-24s %-8s %5s %7s  %-30s %s\n", "QUEUE", "KEY", "STATE", "WAITS",
            "ATTEMPT", "AFTER", "RESULT / ERROR");
}

void wq_cli_nodes_row(FILE *out, const wq_cli_node_row *r)
{
    char shown[64];
    const char *what = r->error && *r->error ? r->error : or_dash(r->result);
    snprintf(shown, sizeof shown, "%s", what);
    for (char *p = shown; *p; p++)
        if (*p == '\n' || *p == '\r' || *p == '\t')
            *p = ' ';
    fprintf(out, "%-10s %-24s %-8s %5s %7s  %-30s %s\n", r->queue, r->key, r->state,
            or_dash(r->waits), or_dash(r->attempt), or_dash(r->after), shown);
}
