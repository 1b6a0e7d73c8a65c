/*
 * The HTTP API on libevent's evhttp (SPEC section 6): GET /metrics,
 * GET /queues, POST /queues/NAME/items, GET /healthz; the operator routes
 * (SPEC 7.5) are in http_ops.c; the dashboard page at GET /
 * (web/dashboard.html). With a token, every route but /healthz and the
 * page needs it. evhttp enforces the
 * size limits (headers, body: 413) and slow-client timeouts; everything a
 * request asks for is validated before anything changes, so a malformed
 * request gets a 4xx and leaves the queues as they were.
 */
#include "host/http.h"

#include "host/conns.h"
#include "engine/queue.h"
#include "host/dashboard.h"
#include "host/http_int.h"
#include "host/http_workers.h"
#include "host/http_events.h"
#include "host/http_flows.h"
#include "host/http_ops.h"
#include "host/json.h"
#include "host/prom.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/http_struct.h> /* the request's HTTP version: no getter in 2.1 */
#include <event2/keyvalq_struct.h>
#include <json-c/json_object.h>
#include <json-c/json_util.h>
#include <json-c/linkhash.h>
#include <math.h>
#include <netdb.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BODY (1024 * 1024)            /* one item */
#define MAX_BATCH_BODY (16 * 1024 * 1024) /* a batch */
#define MAX_BATCH 10000                   /* items in a batch */
#define MAX_HEADERS (16 * 1024)

typedef struct http_server {
    struct evhttp *http;
    struct evhttp_bound_socket *bound; /* the listener, until wq_http_unlisten */
    wq_conns *conns;
    char *token;
    uint64_t requests;
} http_server;

/* The server's connection guard, for the reply paths (one server per process). */
static wq_conns *conns;

/*
 * Every answer goes out here. libevent 2.1 sends a HEAD answer's body
 * (and no Content-Length), which a keep-alive client would read as the
 * start of its next answer: a HEAD gets the length and no body.
 */
static void send_reply(struct evhttp_request *req, int code, const char *reason, struct evbuffer *b)
{
    if (b && evhttp_request_get_command(req) == EVHTTP_REQ_HEAD) {
        char n[24];
        snprintf(n, sizeof n, "%zu", evbuffer_get_length(b));
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Length", n);
        b = NULL;
    }
    wq_conns_reply(conns, req, code, reason, b);
}

static void reply(struct evhttp_request *req, int code, const char *reason, const char *type,
                  const char *body)
{
    struct evbuffer *b = evbuffer_new();
    if (b && body)
        evbuffer_add(b, body, strlen(body));
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", type);
    send_reply(req, code, reason, b);
    if (b)
        evbuffer_free(b);
}

/* 500 when memory runs out: a fixed body, nothing more to allocate. */
static void reply_oom(struct evhttp_request *req)
{
    reply(req, 500, "Internal Server Error", "application/json", "{\"error\":\"out of memory\"}");
}

#define TO_STRING_FLAGS (JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)

/* Replies with the JSON text of o (which it puts), or 500 when it cannot be made. */
static void reply_json(struct evhttp_request *req, int code, const char *reason, json_object *o)
{
    const char *text = o ? json_object_to_json_string_ext(o, TO_STRING_FLAGS) : NULL;
    if (text)
        reply(req, code, reason, "application/json", text);
    else
        reply_oom(req);
    json_object_put(o);
}

/* A JSON error body {"error": msg}. */
static void reply_error(struct evhttp_request *req, int code, const char *reason, const char *msg)
{
    json_object *o = json_object_new_object();
    if (o)
        json_object_object_add(o, "error", json_object_new_string(msg));
    reply_json(req, code, reason, o);
}

void wq_http_reply_json(struct evhttp_request *req, int code, const char *reason, json_object *o)
{
    reply_json(req, code, reason, o);
}

void wq_http_no_queue(struct evhttp_request *req, const char *name)
{
    char msg[128];
    snprintf(msg, sizeof msg, "no such queue '%.64s' in this runner", name);
    wq_http_reply_error(req, 404, "Not Found", msg);
}

void wq_http_reply_error(struct evhttp_request *req, int code, const char *reason, const char *msg)
{
    reply_error(req, code, reason, msg);
}

void wq_http_stream_start(struct evhttp_request *req, int code, const char *reason)
{
    wq_conns_stream_start(req, code, reason);
}

void wq_http_stream_chunk(struct evhttp_request *req, struct evbuffer *chunk)
{
    wq_conns_stream_chunk(req, chunk);
}

void wq_http_not_allowed(struct evhttp_request *req, const char *allow)
{
    evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", allow);
    char msg[96];
    snprintf(msg, sizeof msg, "method not allowed (this path takes %s)", allow);
    reply_error(req, 405, "Method Not Allowed", msg);
}

/* Compares the whole strings in time that depends only on their lengths. */
static int same_secret(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = (unsigned char)(la != lb);
    for (size_t i = 0; i < la; i++)
        diff |= (unsigned char)(a[i] ^ b[lb ? i % lb : 0]);
    return diff == 0;
}

static int authorized(http_server *s, struct evhttp_request *req)
{
    if (!s->token)
        return 1;
    const char *auth = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    if (!auth || strncmp(auth, "Bearer ", 7) != 0)
        return 0;
    return same_secret(auth + 7, s->token);
}

static void get_metrics(wq_host *h, struct evhttp_request *req)
{
    struct evbuffer *b = evbuffer_new();
    if (!b) {
        reply_oom(req);
        return;
    }
    wq_prom_render(h, b);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; version=0.0.4; charset=utf-8");
    send_reply(req, 200, "OK", b);
    evbuffer_free(b);
}

static void add_uint(json_object *o, const char *k, uint64_t v)
{
    json_object_object_add(o, k, json_object_new_int64((int64_t)v));
}

/*
 * The dashboard page. It holds no data (every number comes from the API,
 * which checks the token), so it loads without the token; the page asks for
 * one when an API call answers 401. The policy keeps it self-contained:
 * nothing but its own inline code and calls back to this server.
 */
static void get_dashboard(struct evhttp_request *req)
{
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    const char *inm = evhttp_find_header(evhttp_request_get_input_headers(req), "If-None-Match");
    evhttp_add_header(out, "ETag", wq_dashboard_etag);
    evhttp_add_header(out, "Cache-Control", "no-cache");
    if (inm && strstr(inm, wq_dashboard_etag)) {
        send_reply(req, 304, "Not Modified", NULL);
        return;
    }
    struct evbuffer *b = evbuffer_new();
    if (!b) {
        reply_oom(req);
        return;
    }
    evbuffer_add_reference(b, wq_dashboard_html, wq_dashboard_html_len, NULL, NULL);
    evhttp_add_header(out, "Content-Type", "text/html; charset=utf-8");
    evhttp_add_header(out, "Content-Security-Policy",
                      "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                      "img-src data:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
                      "frame-ancestors 'none'");
    evhttp_add_header(out, "X-Content-Type-Options", "nosniff");
    evhttp_add_header(out, "X-Frame-Options", "DENY");
    evhttp_add_header(out, "Referrer-Policy", "no-referrer");
    send_reply(req, 200, "OK", b);
    evbuffer_free(b);
}

/* The database-wide numbers of queue name, when its backend is shared by runners. */
static const wq_db_queue *db_queue(wq_host *h, const wq_hqueue *hq)
{
    const wq_db_view *v = hq->persist && h->backend ? wq_backend_db_view(h->backend) : NULL;
    for (size_t i = 0; v && i < v->nqueues; i++)
        if (strcmp(v->queues[i].name, hq->name) == 0)
            return &v->queues[i];
    return NULL;
}

json_object *wq_http_queue_summary(wq_host *h, const wq_hqueue *hq)
{
    wq_qstats st;
    hq->ops->stats(hq->q, &st);
    /* Shared by runners: what is pending, running and dead is the database's (every runner's);
     * the counters of runs (adds, done, failures, ...) stay this runner's. */
    const wq_db_queue *d = db_queue(h, hq);
    if (d) {
        st.depth = st.queued = d->queued + d->held;
        st.processing = d->processing;
        st.waiting = d->waiting;
        st.dead = d->dead;
        st.retrying = d->retrying;
        st.throttled = d->held;
        /* paused stays this runner's own state: the database's signal keeps it in step
         * within a second, and a pause made here shows at once (the snapshot is older) */
    }
    json_object *o = json_object_new_object();
    if (!o)
        return NULL;
    json_object_object_add(o, "name", json_object_new_string(st.name));
    for (const wq_qstat_field *f = wq_qstat_fields; f->name; f++)
        add_uint(o, f->name, wq_qstat_value(&st, f));
    json_object_object_add(o, "paused", json_object_new_boolean(st.paused));
    /* This runner's items done over the last minute (sampled each second), for a
     * rate a page can show at once; done_window is the seconds it covers (< 60 while
     * the runner is younger than a minute). */
    int window;
    add_uint(o, "done_last_minute", wq_host_done_last_minute(hq, &window));
    add_uint(o, "done_window", (uint64_t)window);
    if (d)
        json_object_object_add(o, "scope", json_object_new_string("database"));
    return o;
}

/* GET /runners: the runners sharing the database (404 when the backend is not shared). */
static void get_runners(wq_host *h, struct evhttp_request *req)
{
    const wq_db_view *v = h->backend ? wq_backend_db_view(h->backend) : NULL;
    if (!h->backend || !wq_backend_shared(h->backend)) {
        reply_error(req, 404, "Not Found", "no runners: this runner's --db is not shared");
        return;
    }
    json_object *body = json_object_new_object(), *a = json_object_new_array();
    for (size_t i = 0; v && a && i < v->nrunners; i++) {
        const wq_db_runner *r = &v->runners[i];
        json_object *o = json_object_new_object();
        if (!o)
            break;
        json_object_object_add(o, "id", json_object_new_int64(r->id));
        json_object_object_add(o, "name", json_object_new_string(r->name));
        json_object_object_add(o, "host", json_object_new_string(r->host));
        json_object_object_add(o, "pid", json_object_new_int(r->pid));
        json_object_object_add(o, "started_at", json_object_new_double(r->started_at));
        json_object_object_add(o, "heartbeat_age", json_object_new_double(r->heartbeat_age));
        add_uint(o, "running", r->running);
        add_uint(o, "done", r->done);
        json_object_object_add(o, "self", json_object_new_boolean(r->self));
        json_object_array_add(a, o);
    }
    if (body && a) {
        json_object_object_add(body, "runners", a);
        /* null until the first read, a moment after the first request */
        json_object_object_add(body, "at", v ? json_object_new_double(v->at) : NULL);
        reply_json(req, 200, "OK", body);
        return;
    }
    json_object_put(a);
    json_object_put(body);
    reply_error(req, 500, "Internal Server Error", "out of memory");
}

static void get_queues(wq_host *h, struct evhttp_request *req)
{
    json_object *a = json_object_new_array_ext(h->nqueues);
    for (int i = 0; a && i < h->nqueues; i++) {
        json_object *q = wq_http_queue_summary(h, &h->queues[i]);
        if (!q || json_object_array_add(a, q) < 0) {
            json_object_put(q);
            json_object_put(a);
            a = NULL;
        }
    }
    reply_json(req, 200, "OK", a);
}

/* "FIELD must be WHAT, got TYPE" (a static buffer: one answer at a time). */
static const char *bad_field(const char *field, const char *what, json_object *v)
{
    static char msg[160];
    snprintf(msg, sizeof msg, "%s must be %s, got %s", field, what,
             v ? json_type_to_name(json_object_get_type(v)) : "null");
    return msg;
}

/* Reads an add request object into *it: NULL, or what is wrong with it. */
static const char *read_item(json_object *body, wq_ext_item *it, json_object **payload)
{
    memset(it, 0, sizeof *it);
    *payload = NULL;
    if (!json_object_is_type(body, json_type_object))
        return "body must be a JSON object";
    int has_key = 0;
    for (struct lh_entry *e = lh_table_head(json_object_get_object(body)); e;
         e = lh_entry_next(e)) {
        const char *f = (const char *)lh_entry_k(e);
        json_object *v = (json_object *)lh_entry_v(e);
        if (strcmp(f, "key") == 0) {
            if (!json_object_is_type(v, json_type_string))
                return bad_field("key", "a string", v);
            it->key = json_object_get_string(v);
            it->keylen = (size_t)json_object_get_string_len(v);
            has_key = 1;
        } else if (strcmp(f, "after") == 0) {
            if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
                return bad_field("after", "a number of seconds", v);
            double a = json_object_get_double(v);
            if (!isfinite(a))
                return "after must be a number of seconds";
            it->after = a;
        } else if (strcmp(f, "priority") == 0) {
            double p = json_object_get_double(v);
            if ((!json_object_is_type(v, json_type_double) &&
                 !json_object_is_type(v, json_type_int)) ||
                p != floor(p) || p < INT32_MIN || p > INT32_MAX)
                return json_object_is_type(v, json_type_double) ||
                               json_object_is_type(v, json_type_int)
                           ? "priority must be a 32-bit integer"
                           : bad_field("priority", "a 32-bit integer", v);
            it->priority = (int32_t)p;
            it->has_priority = 1;
        } else if (strcmp(f, "payload") == 0) {
            *payload = v; /* NULL for null */
        } else if (strcmp(f, "force") == 0) {
            if (!json_object_is_type(v, json_type_boolean))
                return bad_field("force", "true or false", v);
            it->force = json_object_get_boolean(v);
        } else if (strcmp(f, "unique") == 0) {
            if (!json_object_is_type(v, json_type_boolean))
                return bad_field("unique", "true or false", v);
            it->unique = json_object_get_boolean(v) ? 1 : -1;
        } else if (strcmp(f, "group") == 0) {
            if (!json_object_is_type(v, json_type_string))
                return bad_field("group", "a string", v);
            it->group = json_object_get_string(v);
            it->grouplen = (size_t)json_object_get_string_len(v);
        } else { /* named, for a typo: "unknown field 'paylaod' (expected ...)" */
            static char msg[WQ_SHOWN_KEY + 100];
            char shown[WQ_SHOWN_KEY];
            wq_show_key(shown, f, strlen(f));
            snprintf(msg, sizeof msg,
                     "unknown field '%s' (expected key, payload, after, priority, force, unique, "
                     "group)",
                     shown);
            return msg;
        }
    }
    if (!has_key)
        return "missing key";
    if (it->keylen > WQ_KEY_MAX)
        return "key too long";
    if (it->grouplen > WQ_GROUP_MAX)
        return "group too long (at most 1024 bytes)";
    return NULL;
}

/* A reply held until the changes it acknowledges are committed. */
typedef struct held_reply {
    wq_host *h;
    struct evhttp_request *req;
    json_object *body; /* sent with code once durable */
    int code;
    const char *reason;
} held_reply;

/* A held reply is written out: the end of the run waits for that (host.c). */
static void held_written(struct evhttp_request *req, void *arg)
{
    (void)req;
    ((wq_host *)arg)->replies_unsent--;
}

static void send_held(void *ud, int ok)
{
    held_reply *hr = ud;
    if (evhttp_request_get_connection(hr->req)) { /* else the client went away */
        hr->h->replies_unsent++;
        evhttp_request_set_on_complete_cb(hr->req, held_written, hr->h);
    }
    if (ok)
        reply_json(hr->req, hr->code, hr->reason, hr->body);
    else {
        json_object_put(hr->body);
        reply_error(hr->req, 503, "Service Unavailable", wq_host_ack_error(hr->h));
    }
    free(hr);
}

void wq_http_reply_durable(wq_host *h, struct evhttp_request *req, int code, const char *reason,
                           json_object *body)
{
    held_reply *hr = malloc(sizeof *hr);
    if (!hr || !body) {
        free(hr);
        json_object_put(body);
        reply_error(req, 500, "Internal Server Error", "out of memory");
        return;
    }
    hr->h = h;
    hr->req = req;
    hr->body = body;
    hr->code = code;
    hr->reason = reason;
    if (wq_host_when_durable(h, send_held, hr) < 0) {
        json_object_put(body);
        free(hr);
        reply_error(req, 500, "Internal Server Error", "out of memory");
    }
}

/* Answers 202 with body (which it takes) once the adds are durable (SPEC 7.6). */
static void reply_when_durable(wq_host *h, struct evhttp_request *req, json_object *body)
{
    wq_http_reply_durable(h, req, 202, "Accepted", body);
}

/* The body as JSON (the caller puts it), or NULL after replying 400/413. */
static json_object *read_body(struct evhttp_request *req, size_t max)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    if (n > max) {
        reply_error(req, 413, "Payload Too Large",
                    max == MAX_BODY ? "body over 1 MiB" : "body over 16 MiB");
        return NULL;
    }
    const char *body = n ? (const char *)evbuffer_pullup(in, -1) : "";
    json_object *root = NULL;
    const char *why = body ? wq_json_parse(body, n, &root) : "out of memory";
    if (why || !root) {
        json_object_put(root);
        char msg[160];
        snprintf(msg, sizeof msg, "body is not JSON: %s", why ? why : "null");
        reply_error(req, 400, "Bad Request", msg);
        return NULL;
    }
    return root;
}

/*
 * Adds one item object to hq: NULL and *queued, or why not (nothing
 * changed). *status is the HTTP status a single add answers with.
 */
static const char *add_one(const wq_host *h, const wq_hqueue *hq, json_object *item, int *queued,
                           int *status, void (*done)(void *ud, int result, const char *what),
                           void *done_ud)
{
    wq_ext_item it;
    json_object *payload;
    *status = 400;
    const char *err = read_item(item, &it, &payload);
    if (err)
        return err;
    it.done = done;
    it.done_ud = done_ud;
    if (payload) {
        it.payload = json_object_to_json_string_ext(payload, TO_STRING_FLAGS);
        if (!it.payload)
            return "payload cannot be stored";
        it.paylen = strlen(it.payload);
    }
    static char why[512];
    it.why = why;
    it.whysize = sizeof why;
    int r = hq->ops->add(hq->q, &it);
    if (r == WQ_EAGAIN) { /* the backend answers through done once committed */
        *queued = WQ_EAGAIN;
        return NULL;
    }
    if (r == WQ_EIO) { /* the backend cannot take it now (database unavailable) */
        *status = 503;
        return it.why && it.why[0] ? it.why : "not stored: database unavailable";
    }
    if (r == WQ_ESHUTDOWN && !h->store_failed && h->backend && hq->persist) {
        /* A graceful stop: the item goes to the state file's inbox with the next
         * commit (acknowledged after it, as any add) and the next start runs it. */
        wq_inbox_row row = {.queue = hq->name,
                            .key = it.key,
                            .keylen = it.keylen,
                            .payload = it.payload,
                            .paylen = it.paylen,
                            .after = it.after,
                            .grp = it.group,
                            .grplen = it.grouplen,
                            .has_priority = it.has_priority,
                            .priority = it.priority,
                            .unique = it.unique};
        r = wq_backend_inbox_put(h->backend, &row);
        if (r == 0) {
            *queued = WQ_ADD_DEFERRED;
            return NULL;
        }
    }
    if (r == WQ_ESHUTDOWN) {
        *status = 503;
        /* Stopping because the state file failed (or is gone): say so. */
        return h->store_failed ? wq_host_ack_error(h) : "queue is shutting down";
    }
    if (r == WQ_EINVAL) { /* the queue's group_of refused it */
        *status = 422;
        return why;
    }
    if (r < 0) {
        *status = 500;
        return wq_strerror(r);
    }
    *queued = r; /* 1 queued, 0 already pending, WQ_ADD_DONE finished within keep_done */
    return NULL;
}

static json_object *queued_body(int queued)
{
    json_object *o = json_object_new_object();
    if (o) {
        json_object_object_add(o, "queued",
                               json_object_new_boolean(queued == 1 || queued == WQ_ADD_DEFERRED));
        if (wq_add_reason(queued))
            json_object_object_add(o, "reason", json_object_new_string(wq_add_reason(queued)));
        if (queued == WQ_ADD_DEFERRED) /* stopping: kept in the inbox for the next start */
            json_object_object_add(o, "deferred", json_object_new_boolean(1));
    }
    return o;
}

/*
 * Adds a backend decides after its commit (PostgreSQL): the answer waits for
 * every one of them. results is the batch's array (NULL for a single add).
 */
typedef struct async_reply {
    wq_host *h;
    struct evhttp_request *req;
    json_object *body; /* the batch's body; a single add's is made at the end */
    json_object *results;
    size_t outstanding;
    int started; /* every add was handed out: answer once outstanding is 0 */
    int single_result;
    char single_error[512];
    struct async_slot {
        struct async_reply *ar;
        size_t idx;
    } * slots;
    struct async_reply *next, *prev; /* every reply still waiting (see wq_http_stop) */
    int orphaned;                    /* the server is gone: answer nobody, only free */
} async_reply;

/* The replies waiting for a backend's answers: the server stopping orphans them (a backend
 * closing later answers them into nothing). One server per process. */
static async_reply *async_waiting;

static void async_unlink(async_reply *ar)
{
    if (ar->prev)
        ar->prev->next = ar->next;
    else if (async_waiting == ar)
        async_waiting = ar->next;
    if (ar->next)
        ar->next->prev = ar->prev;
    ar->next = ar->prev = NULL;
}

static void async_finish(async_reply *ar)
{
    if (!ar->started || ar->outstanding)
        return;
    async_unlink(ar);
    if (ar->orphaned) {
        json_object_put(ar->body);
        free(ar->slots);
        free(ar);
        return;
    }
    if (!ar->results) { /* a single add */
        if (ar->single_error[0])
            reply_error(ar->req, 503, "Service Unavailable", ar->single_error);
        else
            reply_when_durable(ar->h, ar->req, queued_body(ar->single_result));
    } else {
        reply_when_durable(ar->h, ar->req, ar->body);
    }
    free(ar->slots);
    free(ar);
}

static void async_done(void *ud, int result, const char *what)
{
    struct async_slot *slot = ud;
    async_reply *ar = slot->ar;
    if (!ar->results) {
        if (result < 0)
            snprintf(ar->single_error, sizeof ar->single_error, "not stored: %s",
                     what ? what : wq_strerror(result));
        else
            ar->single_result = result;
    } else {
        json_object *r;
        if (result < 0) {
            char msg[512];
            snprintf(msg, sizeof msg, "not stored: %s", what ? what : wq_strerror(result));
            r = json_object_new_object();
            if (r)
                json_object_object_add(r, "error", json_object_new_string(msg));
        } else {
            r = queued_body(result);
        }
        json_object_array_put_idx(ar->results, slot->idx, r);
    }
    ar->outstanding--;
    async_finish(ar);
}

static async_reply *async_new(wq_host *h, struct evhttp_request *req, size_t n)
{
    async_reply *ar = calloc(1, sizeof *ar);
    if (ar && !(ar->slots = calloc(n ? n : 1, sizeof *ar->slots))) {
        free(ar);
        return NULL;
    }
    if (ar) {
        ar->h = h;
        ar->req = req;
        for (size_t i = 0; i < (n ? n : 1); i++)
            ar->slots[i] = (struct async_slot){ar, i};
        ar->next = async_waiting;
        if (ar->next)
            ar->next->prev = ar;
        async_waiting = ar;
    }
    return ar;
}

/* Adds the item object root (which it takes) to hq and answers: 202 once durable, or why not. */
static void add_and_reply(wq_host *h, struct evhttp_request *req, const wq_hqueue *hq,
                          json_object *root)
{
    async_reply *ar = async_new(h, req, 1);
    if (!ar) {
        json_object_put(root);
        reply_error(req, 500, "Internal Server Error", "out of memory");
        return;
    }
    int queued = 0, status;
    ar->outstanding = 1; /* done may be called at once */
    const char *err = add_one(h, hq, root, &queued, &status, async_done, &ar->slots[0]);
    if (err || queued != WQ_EAGAIN) {
        async_unlink(ar);
        free(ar->slots);
        free(ar);
        ar = NULL;
    }
    if (ar) {
        json_object_put(root);
        ar->started = 1;
        async_finish(ar);
        return;
    }
    if (err) {
        /* err may point into root: answer first */
        reply_error(req, status,
                    status == 503   ? "Service Unavailable"
                    : status == 500 ? "Internal Server Error"
                                    : "Bad Request",
                    err);
        json_object_put(root);
        return;
    }
    json_object_put(root);
    reply_when_durable(h, req, queued_body(queued));
}

/* POST /queues/NAME/items with {"key": "...", "payload": ..., "after": s, "priority": n}. */
static void post_item(wq_host *h, struct evhttp_request *req, const wq_hqueue *hq)
{
    json_object *root = read_body(req, MAX_BODY);
    if (root)
        add_and_reply(h, req, hq, root);
}

/* The percent-decoded s[0..n) (malloc'd, NUL-terminated), or NULL. */
static char *uridecode_n(const char *s, size_t n)
{
    char *raw = malloc(n + 1);
    if (!raw)
        return NULL;
    memcpy(raw, s, n);
    raw[n] = '\0';
    char *out = evhttp_uridecode(raw, 0, NULL);
    free(raw);
    return out;
}

/* The add a schedule makes, as an item object: {"key": ..., "payload": ...}. */
typedef struct trigger_find {
    const char *name;
    json_object *item;
    int found, oom;
} trigger_find;

static void on_schedule(void *ud, const wq_schedule_row *s, int defined)
{
    (void)defined;
    trigger_find *f = ud;
    if (f->found || strcmp(s->name, f->name) != 0)
        return;
    f->found = 1;
    json_object *item = json_object_new_object();
    const char *key = s->key ? s->key : s->name;
    size_t keylen = s->key ? s->keylen : strlen(s->name);
    json_object *payload = NULL;
    if (s->payload && wq_json_parse(s->payload, s->paylen, &payload) && !payload)
        payload = json_object_new_string_len(s->payload, (int)s->paylen);
    if (!item ||
        json_object_object_add(item, "key", json_object_new_string_len(key, (int)keylen)) < 0 ||
        (payload && json_object_object_add(item, "payload", payload) < 0)) {
        json_object_put(item);
        f->oom = 1;
        return;
    }
    f->item = item;
}

/*
 * POST /queues/NAME/schedules/SCHEDULE/trigger: the schedule's add now (its key and payload,
 * through dedup, unique and keep_done as any add); its next time is left as it is.
 */
static void post_trigger(wq_host *h, struct evhttp_request *req, const wq_hqueue *hq,
                         const char *sched, size_t len)
{
    char *name = uridecode_n(sched, len);
    trigger_find f = {.name = name};
    int n = name && hq->ops->schedules ? hq->ops->schedules(hq->q, on_schedule, &f) : WQ_ENOMEM;
    if (n < 0 || f.oom) {
        free(name);
        json_object_put(f.item);
        reply_error(req, 500, "Internal Server Error", wq_strerror(n < 0 ? n : WQ_ENOMEM));
        return;
    }
    if (!f.found) {
        char msg[300];
        char shown[WQ_SHOWN_KEY];
        wq_show_key(shown, name, strlen(name));
        snprintf(msg, sizeof msg, "no such schedule '%s' in queue '%s'", shown, hq->name);
        free(name);
        reply_error(req, 404, "Not Found", msg);
        return;
    }
    free(name);
    add_and_reply(h, req, hq, f.item);
}

/* POST /queues/NAME/items:batch with [item, ...]: one result per item, in order. */
static void post_batch(wq_host *h, struct evhttp_request *req, const wq_hqueue *hq)
{
    json_object *root = read_body(req, MAX_BATCH_BODY);
    if (!root)
        return;
    if (!json_object_is_type(root, json_type_array)) {
        json_object_put(root);
        reply_error(req, 400, "Bad Request", "body must be a JSON array of items");
        return;
    }
    size_t n = json_object_array_length(root);
    if (n > MAX_BATCH) {
        json_object_put(root);
        reply_error(req, 413, "Payload Too Large", "more than 10000 items");
        return;
    }
    json_object *results = json_object_new_array_ext((int)n);
    json_object *body = json_object_new_object();
    if (!results || !body) {
        json_object_put(results);
        json_object_put(body);
        json_object_put(root);
        reply_error(req, 500, "Internal Server Error", "out of memory");
        return;
    }
    json_object_object_add(body, "results", results);
    async_reply *ar = async_new(h, req, n);
    if (!ar) {
        json_object_put(body);
        json_object_put(root);
        reply_error(req, 500, "Internal Server Error", "out of memory");
        return;
    }
    ar->body = body;
    ar->results = results;
    for (size_t i = 0; i < n; i++) {
        int queued = 0, status;
        ar->outstanding++;
        const char *err = add_one(h, hq, json_object_array_get_idx(root, i), &queued, &status,
                                  async_done, &ar->slots[i]);
        if (!err && queued == WQ_EAGAIN) {
            json_object_array_add(results, NULL); /* filled in by async_done */
            continue;
        }
        ar->outstanding--;
        json_object *r = err ? json_object_new_object() : queued_body(queued);
        if (r && err)
            json_object_object_add(r, "error", json_object_new_string(err));
        json_object_array_put_idx(results, i, r);
    }
    json_object_put(root);
    ar->started = 1;
    async_finish(ar);
}

static void handle(struct evhttp_request *req, void *arg)
{
    wq_host *h = arg;
    http_server *s = h->http;
    s->requests++;
    /* A whole request is in: no deadline until it is answered. */
    wq_conns_request(s->conns, req, 1);
    if (req->major == 1 && req->minor > 1)
        req->minor = 1; /* HTTP/1.2 and up: answered as 1.1 (RFC 9110 6.2) */
    const char *uri = evhttp_request_get_uri(req);
    struct evhttp_uri *u = uri ? evhttp_uri_parse(uri) : NULL;
    const char *path = u ? evhttp_uri_get_path(u) : NULL;
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    int get = cmd == EVHTTP_REQ_GET || cmd == EVHTTP_REQ_HEAD;
    char name[65];
    int nlen = 0, snlen = 0;
    if (req->major != 1 || req->minor < 0) {
        /* evhttp takes any HTTP/0.x or HTTP/1.-1 and would answer in it */
        req->major = req->minor = 1;
        evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
        reply_error(req, 505, "HTTP Version Not Supported", "HTTP/1.0 or HTTP/1.1 only");
    } else if (!path) {
        reply_error(req, 400, "Bad Request", "malformed request target");
    } else if (strcmp(path, "/") == 0) {
        if (get)
            get_dashboard(req);
        else
            wq_http_not_allowed(req, "GET, HEAD");
    } else if (strcmp(path, "/healthz") == 0) {
        if (get)
            reply(req, 200, "OK", "text/plain", "ok\n");
        else
            wq_http_not_allowed(req, "GET, HEAD");
    } else if (!authorized(s, req)) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate",
                          "Bearer realm=\"wqrun\"");
        reply_error(req, 401, "Unauthorized", "missing or wrong bearer token");
    } else if (strcmp(path, "/metrics") == 0) {
        if (get)
            get_metrics(h, req);
        else
            wq_http_not_allowed(req, "GET, HEAD");
    } else if (strcmp(path, "/events") == 0) {
        if (cmd == EVHTTP_REQ_GET)
            wq_http_events(h, req, evhttp_uri_get_query(u));
        else
            wq_http_not_allowed(req, "GET");
    } else if (strcmp(path, "/runners") == 0) {
        if (get)
            get_runners(h, req);
        else
            wq_http_not_allowed(req, "GET, HEAD");
    } else if (strcmp(path, "/queues") == 0 || strcmp(path, "/queues/") == 0) {
        if (get)
            get_queues(h, req);
        else
            wq_http_not_allowed(req, "GET, HEAD");
    } else if (sscanf(path, "/queues/%64[A-Za-z0-9_.-]/items%n", name, &nlen) == 1 &&
               (path[nlen] == '\0' || strcmp(path + nlen, ":batch") == 0) &&
               (cmd == EVHTTP_REQ_POST || path[nlen] != '\0')) {
        const wq_hqueue *hq;
        if (cmd != EVHTTP_REQ_POST)
            wq_http_not_allowed(req, "POST");
        else if (!(hq = wq_host_find_queue(h, name)))
            wq_http_no_queue(req, name);
        else if (path[nlen] == '\0')
            post_item(h, req, hq);
        else
            post_batch(h, req, hq);
    } else if ((snlen = 0, sscanf(path, "/queues/%64[A-Za-z0-9_.-]/schedules/%n", name, &snlen)) ==
                   1 &&
               snlen > 0 && strlen(path + snlen) > 8 &&
               strcmp(path + strlen(path) - 8, "/trigger") == 0 &&
               !memchr(path + snlen, '/', strlen(path + snlen) - 8)) {
        const wq_hqueue *hq;
        if (cmd != EVHTTP_REQ_POST)
            wq_http_not_allowed(req, "POST");
        else if (!(hq = wq_host_find_queue(h, name)))
            wq_http_no_queue(req, name);
        else
            post_trigger(h, req, hq, path + snlen, strlen(path + snlen) - 8);
    } else if (wq_http_workers(h, req, path, cmd)) {
        /* answered */
    } else if (wq_http_ops(h, req, path, evhttp_uri_get_query(u), cmd)) {
        /* answered */
    } else if (wq_http_flows(h, req, path, evhttp_uri_get_query(u), cmd)) {
        /* answered */
    } else {
        reply_error(req, 404, "Not Found", "no such path");
    }
    if (u)
        evhttp_uri_free(u);
    wq_host_settle(h);
}

/* A listening socket on host:port (numeric or a name), or NULL. */
static struct evconnlistener *listen_on(wq_host *h, const char *host, int port)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    if (getaddrinfo(host, service, &hints, &res) != 0 || !res)
        return NULL;
    struct evconnlistener *lev = NULL;
    for (struct addrinfo *ai = res; ai && !lev; ai = ai->ai_next)
        lev = evconnlistener_new_bind(
            h->base, NULL, NULL, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
            -1, ai->ai_addr, (int)ai->ai_addrlen);
    freeaddrinfo(res);
    return lev;
}

/*
 * At most --max-connections at once, and never more than a quarter of the
 * descriptors the process may open (the rest are for the state file,
 * wq.exec's pipes and the scripts' own files).
 */
static int max_connections(const wq_host *h)
{
    int max = h->opts.max_connections > 0 ? h->opts.max_connections : 1024;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        (rlim_t)max > rl.rlim_cur / 4)
        max = rl.rlim_cur / 4 > 4 ? (int)(rl.rlim_cur / 4) : 4;
    return max;
}

/* Seconds a client has to send a whole request (WQ_TEST_HTTP_DEADLINE_MS for tests). */
static int64_t client_deadline(void)
{
    const char *e = getenv("WQ_TEST_HTTP_DEADLINE_MS");
    if (e && atoi(e) > 0)
        return (int64_t)atoi(e) * 1000000;
    return (int64_t)WQ_HTTP_CLIENT_TIMEOUT * 1000000000;
}

const char *wq_http_parse_listen(const char *addr, char *host, size_t size, int *port)
{
    const char *colon = strrchr(addr, ':');
    if (!colon)
        return "expected ADDR:PORT, e.g. 127.0.0.1:8080";
    size_t hl = (size_t)(colon - addr);
    const char *p = colon + 1;
    size_t digits = strspn(p, "0123456789");
    long n = digits && digits <= 5 && !p[digits] ? strtol(p, NULL, 10) : -1;
    if (n < 1 || n > 65535)
        return "the port must be a number from 1 to 65535";
    if (hl == 0)
        return "no address: 127.0.0.1:PORT serves this machine only, 0.0.0.0:PORT every "
               "interface";
    if (addr[0] == '[') { /* [::1]:8080 */
        if (hl < 3 || addr[hl - 1] != ']')
            return "an IPv6 address goes in brackets, e.g. [::1]:8080";
        addr++;
        hl -= 2;
    } else if (memchr(addr, ':', hl) || memchr(addr, ']', hl)) {
        return "an IPv6 address goes in brackets, e.g. [::1]:8080";
    }
    if (hl >= size)
        return "the address is too long";
    memcpy(host, addr, hl);
    host[hl] = '\0';
    *port = (int)n;
    return NULL;
}

int wq_http_serve(wq_host *h, struct evconnlistener *lev)
{
    http_server *s = calloc(1, sizeof *s);
    if (!s || !(s->http = evhttp_new(h->base)) ||
        (h->opts.token && !(s->token = strdup(h->opts.token))) ||
        !(s->bound = evhttp_bind_listener(s->http, lev))) {
        if (s && s->http)
            evhttp_free(s->http);
        if (s)
            free(s->token);
        free(s);
        evconnlistener_free(lev);
        fprintf(stderr, "wqrun: --listen: out of memory\n");
        return -1;
    }
    evhttp_set_max_body_size(s->http, MAX_BATCH_BODY);
    evhttp_set_max_headers_size(s->http, MAX_HEADERS);
    evhttp_set_timeout(s->http, WQ_HTTP_CLIENT_TIMEOUT);
    /* Every method evhttp knows reaches the routes, which answer 405 and Allow. */
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST |
                                            EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                            EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
                                            EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
    evhttp_set_gencb(s->http, handle, h);
    s->conns = wq_conns_new(h, lev, max_connections(h), client_deadline());
    if (!s->conns) {
        fprintf(stderr, "wqrun: --listen: out of memory\n");
        evhttp_free(s->http); /* and lev, bound to it */
        free(s->token);
        free(s);
        return -1;
    }
    conns = s->conns;
    evhttp_set_bevcb(s->http, wq_conns_bevcb, s->conns);
    h->http = s;
    return 0;
}

int wq_http_start(wq_host *h, const char *addr)
{
    char host[256];
    int port;
    const char *why = wq_http_parse_listen(addr, host, sizeof host, &port);
    if (why) {
        fprintf(stderr, "wqrun: --listen %s: %s\n", addr, why);
        return -1;
    }
    struct evconnlistener *lev = listen_on(h, host, port);
    if (!lev) {
        fprintf(stderr,
                "wqrun: --listen %s: cannot listen there (in use, or not a local address)\n", addr);
        return -1;
    }
    return wq_http_serve(h, lev);
}

void wq_http_unlisten(wq_host *h)
{
    http_server *s = h->http;
    if (!s || !s->bound)
        return;
    wq_conns_unlisten(s->conns);
    evhttp_del_accept_socket(s->http, s->bound); /* closes the listening socket */
    s->bound = NULL;
}

void wq_http_stop(wq_host *h)
{
    http_server *s = h->http;
    if (!s)
        return;
    for (async_reply *ar = async_waiting; ar; ar = ar->next)
        ar->orphaned = 1; /* their requests go with the server */
    wq_http_ops_stop();
    wq_http_flows_stop();
    wq_http_events_stop();
    evhttp_free(s->http); /* first: it closes the connections the guard holds */
    wq_conns_free(s->conns);
    conns = NULL;
    free(s->token);
    free(s);
    h->http = NULL;
}
