/*
 * The flow routes of the HTTP API (SPEC 9, docs/http.md): POST /flows
 * commits a flow document (202 {"id"} once it is durable, 400 naming the
 * bad node), GET /flows lists flows with their counts per state (?state=
 * running|finished, ?limit=N), GET /flows/ID shows every node, POST
 * /flows/ID/cancel cancels what is unfinished. On the runner's own flow set
 * they are answered at once (a change once committed); on a database shared
 * by runners once the database answered, the request waiting meanwhile
 * (orphaned, never answered, if the server stops first).
 */
#include "host/http_flows.h"

#include "host/flows.h"
#include "host/http_int.h"
#include "host/json.h"

#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIST_DEFAULT 100
#define LIST_MAX 1000
#define FLOW_BODY_MAX (16 * 1024 * 1024)

typedef struct flow_reply {
    wq_host *h;
    struct evhttp_request *req;
    wq_fop_kind kind;
    int orphaned;
    struct flow_reply *next, *prev;
} flow_reply;

static flow_reply *waiting;

void wq_http_flows_stop(void)
{
    for (flow_reply *r = waiting; r; r = r->next)
        r->orphaned = 1;
}

static void unlink_reply(flow_reply *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else if (waiting == r)
        waiting = r->next;
    if (r->next)
        r->next->prev = r->prev;
}

static void bad_request(struct evhttp_request *req, const char *msg)
{
    wq_http_reply_error(req, 400, "Bad Request", msg);
}

/* Answers an error of the flow functions: 400 for a refused flow, 503, 500. */
static void reply_failure(struct evhttp_request *req, int result, const char *text)
{
    if (result == WQ_EINVAL)
        bad_request(req, text && *text ? text : "invalid flow");
    else if (result == WQ_EIO)
        wq_http_reply_error(req, 503, "Service Unavailable",
                            text && *text ? text : "database unavailable");
    else if (result == WQ_ENOENT)
        wq_http_reply_error(req, 404, "Not Found", "no such flow");
    else
        wq_http_reply_error(req, 500, "Internal Server Error",
                            text && *text ? text : wq_strerror(result));
}

/* The database's answer to a request (or, for an add on the runner's own set, the set's). */
static void answered(void *ud, int result, const char *text)
{
    flow_reply *r = ud;
    unlink_reply(r);
    if (r->orphaned) {
        free(r);
        return;
    }
    struct evhttp_request *req = r->req;
    wq_host *h = r->h;
    wq_fop_kind kind = r->kind;
    free(r);
    if (result < 0 || (kind == WQ_FOP_SHOW && result == 0)) {
        reply_failure(req, result < 0 ? result : WQ_ENOENT, text);
        return;
    }
    if (kind == WQ_FOP_ADD) {
        json_object *o = json_object_new_object();
        if (o)
            json_object_object_add(o, "id", json_object_new_string(text ? text : ""));
        /* the runner's own set: committed with the next commit; a database: committed now */
        wq_http_reply_durable(h, req, 202, "Accepted", o);
        return;
    }
    if (kind == WQ_FOP_CANCEL) {
        json_object *o = json_object_new_object();
        if (o)
            json_object_object_add(o, "cancelled", json_object_new_int(result));
        wq_http_reply_durable(h, req, 200, "OK", o);
        return;
    }
    json_object *o = NULL;
    const char *why = text ? wq_json_parse(text, strlen(text), &o) : "no answer";
    if (why) {
        json_object_put(o);
        wq_http_reply_error(req, 500, "Internal Server Error", why);
        return;
    }
    if (kind == WQ_FOP_LIST) {
        json_object *w = json_object_new_object();
        if (w)
            json_object_object_add(w, "flows", o);
        wq_http_reply_json(req, 200, "OK", w);
        return;
    }
    wq_http_reply_json(req, 200, "OK", o);
}

static flow_reply *reply_new(wq_host *h, struct evhttp_request *req, wq_fop_kind kind)
{
    flow_reply *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->h = h;
    r->req = req;
    r->kind = kind;
    r->next = waiting;
    if (waiting)
        waiting->prev = r;
    waiting = r;
    return r;
}

/* Runs op on the shared database, or answers why it cannot. */
static void remote(wq_host *h, struct evhttp_request *req, const wq_fop *op)
{
    flow_reply *r = reply_new(h, req, op->kind);
    if (!r) {
        wq_http_reply_error(req, 500, "Internal Server Error", "out of memory");
        return;
    }
    int rc = wq_backend_flow_op(h->backend, op, answered, r);
    if (rc < 0) {
        unlink_reply(r);
        free(r);
        reply_failure(req, rc, NULL);
    }
}

static void post_flow(wq_host *h, struct evhttp_request *req)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    if (n > FLOW_BODY_MAX) {
        wq_http_reply_error(req, 413, "Payload Too Large", "body over 16 MiB");
        return;
    }
    const char *body = n ? (const char *)evbuffer_pullup(in, -1) : "";
    flow_reply *r = body ? reply_new(h, req, WQ_FOP_ADD) : NULL;
    if (!r) {
        wq_http_reply_error(req, 500, "Internal Server Error", "out of memory");
        return;
    }
    int rc = wq_host_flow_add(h, body, n, answered, r);
    if (rc < 0) { /* answered was not called */
        unlink_reply(r);
        free(r);
        reply_failure(req, rc, NULL);
    }
}

/* ?state=running|finished&limit=N into *state, *limit: NULL, or what is wrong. */
static const char *list_query(const char *query, const char **state, size_t *limit)
{
    *state = NULL;
    *limit = LIST_DEFAULT;
    if (!query || !*query)
        return NULL;
    struct evkeyvalq q;
    if (evhttp_parse_query_str(query, &q) != 0)
        return "malformed query";
    const char *err = NULL;
    for (struct evkeyval *kv = q.tqh_first; kv && !err; kv = kv->next.tqe_next) {
        if (strcmp(kv->key, "state") == 0) {
            if (strcmp(kv->value, "running") == 0)
                *state = "running";
            else if (strcmp(kv->value, "finished") == 0)
                *state = "finished";
            else
                err = "state must be running or finished";
        } else if (strcmp(kv->key, "limit") == 0) {
            char *end;
            long l = strtol(kv->value, &end, 10);
            if (*kv->value == '\0' || *end || l < 1 || l > LIST_MAX)
                err = "limit must be an integer from 1 to 1000";
            else
                *limit = (size_t)l;
        } else {
            err = "unknown parameter (expected state, limit)";
        }
    }
    evhttp_clear_headers(&q);
    return err;
}

static void get_flows(wq_host *h, struct evhttp_request *req, const char *query)
{
    const char *state;
    size_t limit;
    const char *err = list_query(query, &state, &limit);
    if (err) {
        bad_request(req, err);
        return;
    }
    if (!h->flows) {
        wq_fop op = {.kind = WQ_FOP_LIST, .state = state, .limit = limit};
        remote(h, req, &op);
        return;
    }
    json_object *o = json_object_new_object();
    if (o)
        json_object_object_add(o, "flows", wq_host_flow_list(h, state, limit));
    wq_http_reply_json(req, 200, "OK", o);
}

static void get_flow(wq_host *h, struct evhttp_request *req, const char *id)
{
    if (!h->flows) {
        wq_fop op = {.kind = WQ_FOP_SHOW, .id = id};
        remote(h, req, &op);
        return;
    }
    json_object *o = wq_host_flow_show(h, id);
    if (!o)
        wq_http_reply_error(req, 404, "Not Found", "no such flow");
    else
        wq_http_reply_json(req, 200, "OK", o);
}

static void cancel_flow(wq_host *h, struct evhttp_request *req, const char *id)
{
    if (!h->flows) {
        wq_fop op = {.kind = WQ_FOP_CANCEL, .id = id};
        remote(h, req, &op);
        return;
    }
    int n = wq_host_flow_cancel(h, id);
    if (n < 0) {
        reply_failure(req, n, NULL);
        return;
    }
    json_object *o = json_object_new_object();
    if (o)
        json_object_object_add(o, "cancelled", json_object_new_int(n));
    wq_http_reply_durable(h, req, 200, "OK", o);
}

int wq_http_flows(wq_host *h, struct evhttp_request *req, const char *path, const char *query,
                  enum evhttp_cmd_type cmd)
{
    int get = cmd == EVHTTP_REQ_GET || cmd == EVHTTP_REQ_HEAD;
    if (strcmp(path, "/flows") == 0 || strcmp(path, "/flows/") == 0) {
        if (get)
            get_flows(h, req, query);
        else if (cmd == EVHTTP_REQ_POST)
            post_flow(h, req);
        else
            wq_http_not_allowed(req, "GET, HEAD, POST");
        return 1;
    }
    if (strncmp(path, "/flows/", 7) != 0)
        return 0;
    const char *rest = path + 7;
    size_t n = strlen(rest);
    int cancel = n > 7 && strcmp(rest + n - 7, "/cancel") == 0;
    size_t idlen = cancel ? n - 7 : n;
    size_t len;
    char *raw = malloc(idlen + 1);
    if (!raw) {
        wq_http_reply_error(req, 500, "Internal Server Error", "out of memory");
        return 1;
    }
    memcpy(raw, rest, idlen);
    raw[idlen] = '\0';
    char *id = evhttp_uridecode(raw, 0, &len);
    free(raw);
    if (!id || len == 0 || len > 200 || memchr(id, '\0', len) || memchr(id, '/', len)) {
        free(id);
        wq_http_reply_error(req, 404, "Not Found", "no such flow");
        return 1;
    }
    if (cancel) {
        if (cmd == EVHTTP_REQ_POST)
            cancel_flow(h, req, id);
        else
            wq_http_not_allowed(req, "POST");
    } else if (get) {
        get_flow(h, req, id);
    } else {
        wq_http_not_allowed(req, "GET, HEAD");
    }
    free(id);
    return 1;
}
