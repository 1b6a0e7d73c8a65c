/*
 * `wqrun add --wait` on PostgreSQL (SPEC 11): the end of the key's run
 * comes from the runner that finishes it, on any machine, as the events
 * the runners relay (pg_events.c): this command LISTENs on their channel
 * and announces itself as a listener of the queue (with minus its
 * session's pid as its id: no runner has that one)
 * before it adds, so the run that follows is told; every ANNOUNCE_S it
 * says so again while it waits. A key that is no longer pending once the
 * add committed has ended already: its last run is read from the history.
 * One more look at the database LOOK_S after the add (a runner that had
 * not heard the announcement yet when the run ended), and one every
 * SAFETY_S after that (a notification lost with a runner's connection),
 * are the only reads while it waits.
 */
#include "store/pg/pg_cli.h"

#include "store/cli_ops.h"
#include "store/pg/pg_schema.h"
#include "store/pg/pgconn.h"

#include <json-c/json.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ANNOUNCE_S 2.0
#define LOOK_S 1.0
#define SAFETY_S 10.0

/* The key's last run in the history after row since, into *e (strings in *hold); 1 found, 0
 * not (still pending, or nothing kept), -1 on error. */
static int last_run(PGconn *pg, const char *schema, const char *queue, const char *key,
                    const char *since, wq_cli_end *e, PGresult **hold)
{
    char *sql =
        wq_pg_sql(pg, schema,
                  "SELECT h.state, h.result::text, h.error, h.attempts FROM @S.history h"
                  " WHERE h.queue = $1 AND h.key = $2 AND h.id > $3::bigint"
                  " AND NOT EXISTS (SELECT 1 FROM @S.jobs j WHERE j.queue = $1 AND j.key = $2)"
                  " ORDER BY h.id LIMIT 1");
    const char *v[3] = {queue, key, since};
    PGresult *r = sql ? PQexecParams(pg, sql, 3, NULL, v, NULL, NULL, 0) : NULL;
    free(sql);
    if (!r || PQresultStatus(r) != PGRES_TUPLES_OK) {
        PQclear(r);
        return -1;
    }
    if (PQntuples(r) == 0) {
        PQclear(r);
        return 0;
    }
    *e =
        (wq_cli_end){PQgetvalue(r, 0, 0), PQgetisnull(r, 0, 1) ? NULL : PQgetvalue(r, 0, 1),
                     PQgetisnull(r, 0, 2) ? NULL : PQgetvalue(r, 0, 2), atoll(PQgetvalue(r, 0, 3))};
    *hold = r;
    return 1;
}

/* The history's last row id (as text) before the add, "0" for none. */
static void history_mark(PGconn *pg, const char *schema, const char *queue, char *out, size_t n)
{
    char *sql =
        wq_pg_sql(pg, schema, "SELECT coalesce(max(id), 0) FROM @S.history WHERE queue = $1");
    const char *v[1] = {queue};
    PGresult *r = sql ? PQexecParams(pg, sql, 1, NULL, v, NULL, NULL, 0) : NULL;
    free(sql);
    snprintf(out, n, "%s",
             r && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 ? PQgetvalue(r, 0, 0)
                                                                            : "0");
    PQclear(r);
}

static int exec_ok(PGconn *pg, const char *schema, const char *sql)
{
    char *s = wq_pg_sql(pg, schema, sql);
    PGresult *r = s ? PQexec(pg, s) : NULL;
    free(s);
    int ok = r && PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    return ok;
}

/* Says that this command listens for queue's events, as a runner would. */
static int announce(PGconn *pg, const char *schema, const char *queue)
{
    char payload[96]; /* its id: minus its session's pid (runners' ids are positive) */
    snprintf(payload, sizeof payload, "!events:-%d:%s", PQbackendPID(pg), queue);
    char *sql = wq_pg_sql(pg, schema, "SELECT pg_notify(@L, $1)");
    const char *v[1] = {payload};
    PGresult *r = sql ? PQexecParams(pg, sql, 1, NULL, v, NULL, NULL, 0) : NULL;
    free(sql);
    int ok = r && PQresultStatus(r) == PGRES_TUPLES_OK;
    PQclear(r);
    return ok;
}

int wq_pg_cli_wait_begin(PGconn *pg, const char *schema, const char *queue, char *mark, size_t n)
{
    history_mark(pg, schema, queue, mark, n);
    return exec_ok(pg, schema, "LISTEN @S") && announce(pg, schema, queue) ? 0 : -1;
}

/* An end event of queue/key in one relayed line: 1 (and *e, strings in *hold) or 0. */
static int end_in(const char *line, size_t len, const char *queue, const char *key, wq_cli_end *e,
                  json_object **hold, int *truncated)
{
    json_tokener *tok = json_tokener_new();
    json_object *o = tok ? json_tokener_parse_ex(tok, line, (int)len) : NULL;
    json_tokener_free(tok);
    json_object *v;
    const char *type = NULL;
    if (!o || !json_object_object_get_ex(o, "event", &v) || !(type = json_object_get_string(v)) ||
        (strcmp(type, "done") && strcmp(type, "dead") && strcmp(type, "cancelled") &&
         strcmp(type, "removed")) ||
        !json_object_object_get_ex(o, "queue", &v) || strcmp(json_object_get_string(v), queue) ||
        !json_object_object_get_ex(o, "key", &v) || strcmp(json_object_get_string(v), key)) {
        json_object_put(o);
        return 0;
    }
    e->state = type;
    e->result = json_object_object_get_ex(o, "result", &v)
                    ? json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN |
                                                            JSON_C_TO_STRING_NOSLASHESCAPE)
                    : NULL;
    e->error = json_object_object_get_ex(o, "error", &v) ? json_object_get_string(v) : NULL;
    e->attempts = json_object_object_get_ex(o, "attempt", &v) ? json_object_get_int64(v) : 0;
    *truncated = json_object_object_get_ex(o, "truncated", &v);
    *hold = o;
    return 1;
}

int wq_pg_cli_wait_end(PGconn *pg, const char *schema, const char *queue, const char *key,
                       const char *mark, double timeout, FILE *out, FILE *err)
{
    double start = wq_cli_now(), announced = start, next_look = start;
    int looks = 0;
    for (;;) {
        double now = wq_cli_now();
        if (now >= next_look) { /* ended before the runners heard us, or a notification lost */
            wq_cli_end e;
            PGresult *hold = NULL;
            int found = last_run(pg, schema, queue, key, mark, &e, &hold);
            if (found < 0) {
                char msg[600];
                wq_pg_msg(msg, sizeof msg, PQerrorMessage(pg));
                fprintf(err, "wqrun: add: %s\n", msg);
                return 1;
            }
            if (found) { /* jsonb's text has spaces: printed as the relayed result is */
                json_object *res = e.result ? json_tokener_parse(e.result) : NULL;
                if (res)
                    e.result = json_object_to_json_string_ext(
                        res, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
                int st = wq_cli_wait_end(queue, key, &e, out, err);
                json_object_put(res);
                PQclear(hold);
                return st;
            }
            next_look = now + (looks++ == 0 ? LOOK_S : SAFETY_S);
        }
        if (timeout >= 0 && now - start >= timeout)
            return wq_cli_wait_timeout_end(queue, key, timeout, err);
        if (now - announced >= ANNOUNCE_S) {
            announced = now;
            announce(pg, schema, queue);
        }
        double until = next_look < announced + ANNOUNCE_S ? next_look : announced + ANNOUNCE_S;
        if (timeout >= 0 && start + timeout < until)
            until = start + timeout;
        struct pollfd p = {PQsocket(pg), POLLIN, 0};
        int ms = (int)((until - now) * 1000) + 1;
        if (poll(&p, 1, ms > 0 ? ms : 0) < 0)
            continue;
        if (!PQconsumeInput(pg)) {
            char msg[600];
            wq_pg_msg(msg, sizeof msg, PQerrorMessage(pg));
            fprintf(err, "wqrun: add: lost the connection while waiting: %s\n", msg);
            return 1;
        }
        PGnotify *n;
        while ((n = PQnotifies(pg))) {
            int status = -1;
            /* relayed events: "~" then JSON lines (the channel carries other signals too) */
            for (const char *line = n->extra + 1; n->extra[0] == '~' && *line;) {
                size_t len = strcspn(line, "\n");
                wq_cli_end e;
                json_object *hold = NULL;
                int truncated = 0;
                if (end_in(line, len, queue, key, &e, &hold, &truncated)) {
                    if (truncated) /* a result too long to relay: the history has it */
                        next_look = 0;
                    else
                        status = wq_cli_wait_end(queue, key, &e, out, err);
                    json_object_put(hold);
                    break;
                }
                line += len + (line[len] == '\n');
            }
            PQfreemem(n);
            if (status >= 0)
                return status;
        }
    }
}
