/*
 * Remote workers over HTTP (SPEC 10.2): the routes a worker in any language
 * uses. POST /queues/NAME/claim {"max", "wait", "lease"} hands out leased
 * items (a long poll up to "wait" seconds; [] when none came); POST
 * /queues/NAME/items/KEY/done {"token", "result"}, .../fail {"token",
 * "error", "retry_in", "permanent"} and .../heartbeat {"token"} report on
 * one, and POST /queues/NAME/done|fail|heartbeat take an array of the same
 * objects with their "key" (answered in order). A report's answer comes once
 * its outcome is committed; a token that is not the claim's answers 409 and
 * changes nothing. A claim may carry the reports of the items before
 * ({"done": [...], "fail": [...]}): they are applied first, the claim's
 * demand goes with them (on PostgreSQL one transaction commits the outcomes
 * and claims the next items), and the answer is {"results", "items"}. The
 * queue's side (leases, outcomes) is lua/lremote.c.
 */
#include "host/http_workers.h"

#include "engine/common.h"
#include "host/http_int.h"
#include "host/json.h"
#include "host/timer.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <json-c/json.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define CLAIM_MAX 1000        /* items a claim asks for at most */
#define WAIT_MAX 600.0        /* seconds a claim waits at most */
#define LEASE_MAX 86400.0     /* seconds a lease lasts at most */
#define LEASE_DEFAULT 30.0    /* seconds, when a claim does not say */
#define BODY_MAX (16u << 20)  /* bytes of a request body */
#define RESULT_MAX (1u << 20) /* bytes of a result's JSON text */

__attribute__((format(printf, 2, 3))) static void bad(struct evhttp_request *req, const char *fmt,
                                                      ...)
{
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    wq_http_reply_error(req, 400, "Bad Request", msg);
}

/* The request's JSON body in *out (NULL for an empty one): 0, or -1 answered. */
static int body_json(struct evhttp_request *req, json_object **out)
{
    *out = NULL;
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    if (n > BODY_MAX) {
        wq_http_reply_error(req, 413, "Payload Too Large", "body over 16 MiB");
        return -1;
    }
    if (n == 0)
        return 0;
    const char *text = (const char *)evbuffer_pullup(in, -1);
    const char *err = text ? wq_json_parse(text, n, out) : "out of memory";
    if (err) {
        bad(req, "the body is not JSON: %s", err);
        return -1;
    }
    return 0;
}

/* ---- claims ---- */

typedef struct claimer {
    wq_host *h;
    struct evhttp_request *req;
    char queue[65];
    size_t max;
    double lease;
    void *wait; /* the queue's wait handle, NULL: not waiting */
    uint64_t timer;
    /* A claim that carried reports ("done", "fail"): their answers, in order; the claim is
     * made once every outcome is committed, and answered {"results", "items"}. */
    json_object *results;
    size_t outstanding; /* outcomes not yet committed */
    int reporting;      /* still in that first phase */
    int closed;         /* the client went away meanwhile */
    int64_t deadline;   /* of the wait, in host time */
} claimer;

static void on_claimed(void *ud, const wq_claim_view *c)
{
    json_object *arr = ud, *o = json_object_new_object(), *p = NULL;
    if (!o)
        return;
    json_object_object_add(o, "key", json_object_new_string_len(c->key, (int)c->keylen));
    if (c->payload && wq_json_parse(c->payload, c->paylen, &p) != NULL)
        p = json_object_new_string_len(c->payload, (int)c->paylen); /* kept as the text it is */
    json_object_object_add(o, "payload", p);
    json_object_object_add(o, "attempt", json_object_new_int64(c->attempt));
    json_object_object_add(o, "token", json_object_new_string(c->token));
    json_object_object_add(o, "lease_until", json_object_new_double(c->lease_until));
    json_object *deps = NULL;
    if (c->flow && wq_json_parse(c->deps, c->depslen, &deps) == NULL) { /* a flow's node */
        json_object_object_add(o, "flow", json_object_new_string(c->flow));
        json_object_object_add(o, "deps", deps);
    }
    json_object_array_add(arr, o);
}

/* Claims for x now: 1 answered (items, an error, or none when it may not wait), 0 none came. */
static int try_claim(claimer *x, int may_wait)
{
    const wq_hqueue *hq = wq_host_find_queue(x->h, x->queue);
    if (!hq) {
        wq_http_no_queue(x->req, x->queue);
        return 1;
    }
    json_object *arr = json_object_new_array();
    int n = arr ? hq->ops->claim(hq->q, x->max, x->lease, on_claimed, arr) : WQ_ENOMEM;
    if (n < 0 && x->results) { /* the reports' answers still go back, with no items */
        json_object_put(arr);
        arr = json_object_new_array();
        n = 0;
        may_wait = 0;
    }
    if (n == WQ_ESHUTDOWN) {
        json_object_put(arr);
        wq_http_reply_error(x->req, 503, "Service Unavailable", "the runner is stopping");
        return 1;
    }
    if (n < 0) {
        json_object_put(arr);
        wq_http_reply_error(x->req, 500, "Internal Server Error", wq_strerror(n));
        return 1;
    }
    if (n == 0 && may_wait) {
        json_object_put(arr);
        return 0;
    }
    if (x->results) {
        json_object *body = json_object_new_object();
        if (body) {
            json_object_object_add(body, "results", json_object_get(x->results));
            json_object_object_add(body, "items", arr);
        } else {
            json_object_put(arr);
        }
        wq_http_reply_durable(x->h, x->req, 200, "OK", body); /* the reports are kept */
        return 1;
    }
    wq_http_reply_json(x->req, 200, "OK", arr);
    return 1;
}

static void unwait(claimer *x)
{
    const wq_hqueue *hq = x->wait ? wq_host_find_queue(x->h, x->queue) : NULL;
    if (hq)
        hq->ops->claim_unwait(hq->q, x->wait);
    x->wait = NULL;
}

static void claimer_free(claimer *x)
{
    unwait(x);
    if (x->timer)
        wq_timer_stop(x->h, x->timer);
    json_object_put(x->results);
    free(x);
}

/* The answer is given: the connection is no longer watched for us. */
static void release(claimer *x)
{
    struct evhttp_connection *c = evhttp_request_get_connection(x->req);
    if (c) {
        evhttp_connection_set_closecb(c, NULL, NULL);
        evhttp_connection_set_timeout(c, WQ_HTTP_CLIENT_TIMEOUT);
    }
}

static void on_items(void *ud);

static int wait_again(claimer *x)
{
    const wq_hqueue *hq = wq_host_find_queue(x->h, x->queue);
    x->wait = hq ? hq->ops->claim_wait(hq->q, x->max, on_items, x) : NULL;
    return x->wait != NULL;
}

/*
 * Whether the client of req has closed its connection (evhttp does not watch a connection whose
 * request waits for its answer): items handed to it would wait for their lease to run out.
 */
static int client_gone(struct evhttp_request *req)
{
    struct evhttp_connection *c = evhttp_request_get_connection(req);
    if (!c)
        return 1;
    struct bufferevent *bev = evhttp_connection_get_bufferevent(c);
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    if (fd < 0)
        return 0;
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void on_items(void *ud)
{
    claimer *x = ud;
    x->wait = NULL;            /* one shot: used */
    if (client_gone(x->req)) { /* nobody to hand items to: answered, into the void */
        release(x);
        wq_http_reply_json(x->req, 200, "OK", json_object_new_array());
        claimer_free(x);
        return;
    }
    if (!try_claim(x, 1)) {
        if (wait_again(x))
            return;
        wq_http_reply_error(x->req, 500, "Internal Server Error", "out of memory");
    }
    release(x);
    claimer_free(x);
}

static void on_deadline(wq_host *h, void *data, uint64_t id)
{
    (void)h, (void)id;
    claimer *x = data;
    x->timer = 0;
    release(x);
    try_claim(x, 0); /* a last look: what came, or [] */
    claimer_free(x);
}

static void on_close(struct evhttp_connection *conn, void *arg)
{
    (void)conn;
    claimer *x = arg;
    if (!evhttp_request_get_connection(x->req))
        evhttp_request_free(x->req); /* left to us by evhttp: nobody will answer it */
    claimer_free(x);
}

/* A number field of o in *v (absent: unchanged): 0, or -1 when it is not a number in [lo, hi]. */
static int number(json_object *o, const char *name, double lo, double hi, double *v)
{
    json_object *f;
    if (!json_object_object_get_ex(o, name, &f))
        return 0;
    if (!json_object_is_type(f, json_type_int) && !json_object_is_type(f, json_type_double))
        return -1;
    double d = json_object_get_double(f);
    if (!(d >= lo && d <= hi))
        return -1;
    *v = d;
    return 0;
}

/* Whether every field of o is one of names (NULL-terminated); the first other one in *other. */
static int only(json_object *o, const char *const *names, const char **other)
{
    json_object_object_foreach(o, k, v)
    {
        (void)v;
        int ok = 0;
        for (const char *const *n = names; *n && !ok; n++)
            ok = strcmp(k, *n) == 0;
        if (!ok) {
            *other = k;
            return 0;
        }
    }
    return 1;
}

static int reports_read(struct evhttp_request *req, json_object *o);
static void claim_reporting(claimer *x, const wq_hqueue *hq, json_object *o);

/* Starts the claim x (its wait in seconds): answered now, or a long poll. */
static void claim_start(claimer *x, double wait)
{
    if (try_claim(x, wait > 0)) {
        release(x);
        claimer_free(x);
        return;
    }
    x->timer = wq_timer_start_weak(x->h, x->deadline, on_deadline, x);
    if (!x->timer || !wait_again(x)) {
        wq_http_reply_error(x->req, 500, "Internal Server Error", "out of memory");
        release(x);
        claimer_free(x);
        return;
    }
    struct evhttp_connection *conn = evhttp_request_get_connection(x->req);
    evhttp_connection_set_timeout(conn, (int)wait + WQ_HTTP_CLIENT_TIMEOUT);
    evhttp_connection_set_closecb(conn, on_close, x);
}

static void post_claim(wq_host *h, struct evhttp_request *req, const wq_hqueue *hq)
{
    json_object *o;
    if (body_json(req, &o) < 0)
        return;
    static const char *const fields[] = {"max", "wait", "lease", "done", "fail", NULL};
    const char *other = NULL;
    double max = 1, wait = 0, lease = LEASE_DEFAULT;
    int reports =
        o && json_object_is_type(o, json_type_object) &&
        (json_object_object_get_ex(o, "done", NULL) || json_object_object_get_ex(o, "fail", NULL));
    if (o && !json_object_is_type(o, json_type_object)) {
        bad(req, "%s", "the body is a JSON object: {\"max\", \"wait\", \"lease\"}");
    } else if (o && !only(o, fields, &other)) {
        bad(req, "unknown field '%s' (a claim has max, wait, lease, done and fail)", other);
    } else if (o && (number(o, "max", 1, CLAIM_MAX, &max) < 0 || max != floor(max))) {
        bad(req, "%s", "bad field 'max' (an integer from 1 to 1000)");
    } else if (o && number(o, "wait", 0, WAIT_MAX, &wait) < 0) {
        bad(req, "%s", "bad field 'wait' (seconds from 0 to 600)");
    } else if (o && (number(o, "lease", 0, LEASE_MAX, &lease) < 0 || lease <= 0)) {
        bad(req, "%s", "bad field 'lease' (seconds above 0, at most 86400)");
    } else if (!reports || reports_read(req, o) == 0) {
        claimer *x = calloc(1, sizeof *x);
        if (!x) {
            wq_http_reply_error(req, 500, "Internal Server Error", "out of memory");
            json_object_put(o);
            return;
        }
        x->h = h;
        x->req = req;
        snprintf(x->queue, sizeof x->queue, "%s", hq->name);
        x->max = (size_t)max;
        x->lease = lease;
        x->deadline = wq_host_now(h) + (int64_t)(wait * 1e9);
        if (reports)
            claim_reporting(x, hq, o);
        else
            claim_start(x, wait);
    }
    json_object_put(o);
}

/* ---- reports ---- */

static const char *const kind_names[] = {"done", "fail", "heartbeat"};

/*
 * Reads report o of kind into *r (strings borrowed from o; *text owns a result's JSON text):
 * NULL, or what is wrong. key: the route's (NULL: o's "key" field).
 */
static const char *read_report(json_object *o, wq_report_kind kind, const char *key, size_t keylen,
                               wq_report *r, char **text)
{
    static const char *const done_f[] = {"key", "token", "result", NULL};
    static const char *const fail_f[] = {"key", "token", "error", "retry_in", "permanent", NULL};
    static const char *const beat_f[] = {"key", "token", NULL};
    static char why[160];
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->retry_in = -1;
    *text = NULL;
    const char *other = NULL;
    json_object *f;
    if (!o || !json_object_is_type(o, json_type_object))
        return "a report is a JSON object with its token";
    if (!only(o,
              kind == WQ_REPORT_DONE   ? done_f
              : kind == WQ_REPORT_FAIL ? fail_f
                                       : beat_f,
              &other)) {
        snprintf(why, sizeof why, "unknown field '%s' in a %s report", other, kind_names[kind]);
        return why;
    }
    if (key) {
        r->key = key;
        r->keylen = keylen;
    } else if (json_object_object_get_ex(o, "key", &f) &&
               json_object_is_type(f, json_type_string)) {
        r->key = json_object_get_string(f);
        r->keylen = (size_t)json_object_get_string_len(f);
        if (r->keylen == 0 || r->keylen > WQ_KEY_MAX)
            return "bad field 'key' (1 to 4096 bytes)";
    } else {
        return "missing field 'key' (a string)";
    }
    if (!json_object_object_get_ex(o, "token", &f) || !json_object_is_type(f, json_type_string))
        return "missing field 'token' (the claim's, a string)";
    r->token = json_object_get_string(f);
    if (kind == WQ_REPORT_DONE && json_object_object_get_ex(o, "result", &f) && f) {
        const char *t = json_object_to_json_string_ext(f, WQ_HTTP_JSON_FLAGS);
        size_t n = t ? strlen(t) : 0;
        if (n > RESULT_MAX)
            return "bad field 'result' (its JSON text is over 1 MiB)";
        if (!t || !(*text = strdup(t)))
            return "out of memory";
        r->result = *text;
        r->rlen = n;
    }
    if (kind == WQ_REPORT_FAIL) {
        if (json_object_object_get_ex(o, "error", &f) && f) {
            if (!json_object_is_type(f, json_type_string))
                return "bad field 'error' (a string)";
            r->error = json_object_get_string(f);
        }
        if (number(o, "retry_in", 0, 31536000, &r->retry_in) < 0)
            return "bad field 'retry_in' (seconds from 0 to a year)";
        if (json_object_object_get_ex(o, "permanent", &f) && f) {
            if (!json_object_is_type(f, json_type_boolean))
                return "bad field 'permanent' (true or false)";
            r->permanent = json_object_get_boolean(f);
        }
    }
    return NULL;
}

/* Applies r: its HTTP status and, for an error, the message in msg. */
static int apply(const wq_host *h, const wq_hqueue *hq, wq_report *r, char *msg, size_t n)
{
    int rc = hq->ops->report(hq->q, r);
    char shown[WQ_SHOWN_KEY];
    wq_show_key(shown, r->key, r->keylen);
    if (rc == WQ_ENOENT) {
        snprintf(msg, n,
                 "no claim of '%s' in queue '%s' (its lease ran out, or it was handed back or "
                 "never claimed%s): nothing changed",
                 shown, hq->name,
                 wq_backend_shared(h->backend)
                     ? ", or it was claimed through another runner: a report goes to the runner "
                       "its claim came from"
                     : "");
        return 404;
    }
    if (rc == WQ_EAGAIN)
        return 202;
    if (rc == WQ_EBUSY) {
        snprintf(msg, n,
                 "token is not the current claim of '%s' in queue '%s' (its lease ran out and "
                 "it was handed out again): nothing changed",
                 shown, hq->name);
        return 409;
    }
    if (rc < 0) {
        snprintf(msg, n, "%s", wq_strerror(rc));
        return 500;
    }
    return 200;
}

static json_object *report_answer(const wq_report *r)
{
    json_object *o = json_object_new_object();
    if (!o)
        return NULL;
    if (r->kind == WQ_REPORT_HEARTBEAT) {
        json_object_object_add(o, "cancelled", json_object_new_boolean(r->cancelled));
        json_object_object_add(o, "lease_until", json_object_new_double(r->lease_until));
    } else {
        json_object_object_add(o, "ok", json_object_new_boolean(1));
    }
    return o;
}

/*
 * Reads report o of kind (checked by read_report before) and applies it, adding its answer to
 * results ({"ok"}, a heartbeat's, or {"error", "status"}). With ud, kept(ud, ok) is told when
 * an outcome that commits later (PostgreSQL) is committed: 1 then; 0 when answered now (ud is
 * not kept).
 */
static int apply_into(const wq_host *h, const wq_hqueue *hq, json_object *o, wq_report_kind kind,
                      json_object *results, void (*kept)(void *ud, int ok), void *ud)
{
    wq_report r;
    char *text = NULL, msg[640];
    read_report(o, kind, NULL, 0, &r, &text);
    if (ud) {
        r.kept = kept;
        r.kept_ud = ud;
    }
    int code = apply(h, hq, &r, msg, sizeof msg);
    json_object *a = code == 200 || code == 202 ? report_answer(&r) : json_object_new_object();
    if (a && code != 200 && code != 202) {
        json_object_object_add(a, "error", json_object_new_string(msg));
        json_object_object_add(a, "status", json_object_new_int(code));
    }
    json_object_array_add(results, a);
    free(text);
    return code == 202;
}

/* A report waiting for its outcome's commit. */
typedef struct kept_one {
    wq_host *h;
    struct evhttp_request *req;
} kept_one;

static void one_kept(void *ud, int ok)
{
    kept_one *k = ud;
    json_object *o = json_object_new_object();
    if (o)
        json_object_object_add(o, "ok", json_object_new_boolean(1));
    if (ok) {
        wq_http_reply_json(k->req, 200, "OK", o);
    } else {
        json_object_put(o);
        wq_http_reply_error(k->req, 503, "Service Unavailable",
                            "not stored: the runner lost its claims (the item runs again)");
    }
    free(k);
}

/* A batch waiting for its outcomes' commits: answered when the last one is. */
typedef struct kept_batch {
    wq_host *h;
    struct evhttp_request *req;
    json_object *body, *results;
    size_t outstanding;
    int started, failed;
} kept_batch;

typedef struct kept_slot {
    kept_batch *b;
    size_t i;
} kept_slot;

static void batch_answer(kept_batch *b)
{
    if (!b->started || b->outstanding > 0)
        return;
    if (b->failed) {
        json_object_put(b->body);
        wq_http_reply_error(b->req, 503, "Service Unavailable",
                            "not stored: the runner lost its claims (the items run again)");
    } else {
        wq_http_reply_durable(b->h, b->req, 200, "OK", b->body);
    }
    free(b);
}

static void slot_kept(void *ud, int ok)
{
    kept_slot *s = ud;
    kept_batch *b = s->b;
    if (!ok)
        b->failed = 1;
    b->outstanding--;
    free(s);
    batch_answer(b);
}

static void post_report(wq_host *h, struct evhttp_request *req, const wq_hqueue *hq,
                        wq_report_kind kind, const char *key, size_t keylen)
{
    json_object *o;
    if (body_json(req, &o) < 0)
        return;
    wq_report r;
    char *text = NULL, msg[640];
    const char *err = read_report(o, kind, key, keylen, &r, &text);
    if (err) {
        bad(req, "%s", err);
    } else {
        kept_one *k = kind == WQ_REPORT_HEARTBEAT ? NULL : calloc(1, sizeof *k);
        if (k) {
            k->h = h;
            k->req = req;
            r.kept = one_kept;
            r.kept_ud = k;
        }
        int code = apply(h, hq, &r, msg, sizeof msg);
        if (code == 202) { /* answered once the outcome is committed */
            free(text);
            json_object_put(o);
            return;
        }
        free(k);
        if (code != 200)
            wq_http_reply_error(req, code,
                                code == 404   ? "Not Found"
                                : code == 409 ? "Conflict"
                                              : "Internal Server Error",
                                msg);
        else if (kind == WQ_REPORT_HEARTBEAT)
            wq_http_reply_json(req, 200, "OK", report_answer(&r));
        else
            wq_http_reply_durable(h, req, 200, "OK", report_answer(&r));
    }
    free(text);
    json_object_put(o);
}

/* An array of reports: each answered in order ({"ok"}, a heartbeat's, or {"error", "status"}). */
static void post_reports(wq_host *h, struct evhttp_request *req, const wq_hqueue *hq,
                         wq_report_kind kind)
{
    json_object *o;
    if (body_json(req, &o) < 0)
        return;
    if (!o || !json_object_is_type(o, json_type_array)) {
        bad(req, "the body is a JSON array of %s reports, each with its key and token",
            kind_names[kind]);
        json_object_put(o);
        return;
    }
    size_t n = json_object_array_length(o);
    /* every report read first: a malformed one changes nothing */
    for (size_t i = 0; i < n; i++) {
        wq_report r;
        char *text = NULL, msg[220];
        const char *err = read_report(json_object_array_get_idx(o, i), kind, NULL, 0, &r, &text);
        free(text);
        if (err) {
            snprintf(msg, sizeof msg, "report %zu: %s", i, err);
            wq_http_reply_error(req, 400, "Bad Request", msg);
            json_object_put(o);
            return;
        }
    }
    kept_batch *b = calloc(1, sizeof *b);
    json_object *results = b ? json_object_new_array_ext((int)n) : NULL;
    json_object *body = results ? json_object_new_object() : NULL;
    if (!body) {
        json_object_put(results);
        free(b);
        json_object_put(o);
        wq_http_reply_error(req, 500, "Internal Server Error", "out of memory");
        return;
    }
    json_object_object_add(body, "results", results);
    b->h = h;
    b->req = req;
    b->body = body;
    b->results = results;
    for (size_t i = 0; i < n; i++) {
        kept_slot *ks = kind == WQ_REPORT_HEARTBEAT ? NULL : calloc(1, sizeof *ks);
        if (ks) {
            ks->b = b;
            ks->i = i;
        }
        if (apply_into(h, hq, json_object_array_get_idx(o, i), kind, results, slot_kept, ks))
            b->outstanding++;
        else
            free(ks);
    }
    json_object_put(o);
    b->started = 1;
    batch_answer(b);
}

/* ---- a claim that carries reports ---- */

/* Reads every report of claim o ("done", "fail": arrays): 0, or -1 answered 400. */
static int reports_read(struct evhttp_request *req, json_object *o)
{
    for (int k = WQ_REPORT_DONE; k <= WQ_REPORT_FAIL; k++) {
        json_object *a;
        if (!json_object_object_get_ex(o, kind_names[k], &a))
            continue;
        if (!json_object_is_type(a, json_type_array)) {
            bad(req, "bad field '%s' (an array of %s reports, each with its key and token)",
                kind_names[k], kind_names[k]);
            return -1;
        }
        size_t n = json_object_array_length(a);
        for (size_t i = 0; i < n; i++) {
            wq_report r;
            char *text = NULL;
            const char *err =
                read_report(json_object_array_get_idx(a, i), (wq_report_kind)k, NULL, 0, &r, &text);
            free(text);
            if (err) {
                bad(req, "%s report %zu: %s", kind_names[k], i, err);
                return -1;
            }
        }
    }
    return 0;
}

typedef struct claim_slot {
    claimer *x;
    size_t i;
} claim_slot;

/* Every outcome is committed (or refused): the claim itself now, for what is left of its wait.
 * The claim's demand was registered with the reports, so on PostgreSQL the transaction that
 * committed them claimed for it too: its items are at hand. */
static void reported(claimer *x)
{
    if (x->reporting || x->outstanding > 0)
        return;
    unwait(x);
    if (x->closed) {
        claimer_free(x);
        return;
    }
    struct evhttp_connection *conn = evhttp_request_get_connection(x->req);
    if (conn)
        evhttp_connection_set_closecb(conn, NULL, NULL);
    int64_t left = x->deadline - wq_host_now(x->h);
    claim_start(x, left > 0 ? (double)left / 1e9 : 0);
}

static void claim_slot_kept(void *ud, int ok)
{
    claim_slot *s = ud;
    claimer *x = s->x;
    if (!ok) {
        json_object *e = json_object_new_object();
        if (e) {
            json_object_object_add(e, "error",
                                   json_object_new_string("not stored: the runner lost its claims "
                                                          "(the item runs again)"));
            json_object_object_add(e, "status", json_object_new_int(503));
        }
        json_object_array_put_idx(x->results, s->i, e);
    }
    free(s);
    x->outstanding--;
    reported(x);
}

static void on_early(void *ud)
{
    ((claimer *)ud)->wait = NULL; /* one shot: the items wait in the queue for the claim */
}

static void on_close_reporting(struct evhttp_connection *conn, void *arg)
{
    (void)conn;
    claimer *x = arg;
    if (!evhttp_request_get_connection(x->req))
        evhttp_request_free(x->req); /* left to us by evhttp: nobody will answer it */
    x->closed = 1;                   /* freed once the outcomes are committed */
}

/* Applies the reports of claim o (read by reports_read), then claims (see reported). */
static void claim_reporting(claimer *x, const wq_hqueue *hq, json_object *o)
{
    x->results = json_object_new_array();
    if (!x->results) {
        wq_http_reply_error(x->req, 500, "Internal Server Error", "out of memory");
        claimer_free(x);
        return;
    }
    x->reporting = 1;
    if (x->deadline > wq_host_now(x->h)) /* the claim's demand, with the outcomes */
        x->wait = hq->ops->claim_wait(hq->q, x->max, on_early, x);
    for (int k = WQ_REPORT_DONE; k <= WQ_REPORT_FAIL; k++) {
        json_object *a;
        if (!json_object_object_get_ex(o, kind_names[k], &a))
            continue;
        size_t n = json_object_array_length(a);
        for (size_t i = 0; i < n; i++) {
            claim_slot *cs = calloc(1, sizeof *cs);
            if (cs) {
                cs->x = x;
                cs->i = json_object_array_length(x->results);
            }
            if (apply_into(x->h, hq, json_object_array_get_idx(a, i), (wq_report_kind)k, x->results,
                           claim_slot_kept, cs))
                x->outstanding++;
            else
                free(cs);
        }
    }
    x->reporting = 0;
    if (x->outstanding > 0)
        evhttp_connection_set_closecb(evhttp_request_get_connection(x->req), on_close_reporting, x);
    reported(x);
}

/* ---- routing ---- */

/* Whether s (n bytes) ends with "/done", "/fail" or "/heartbeat": the kind, else -1. */
static int report_suffix(const char *s, size_t n, size_t *cut)
{
    for (int k = 0; k < 3; k++) {
        size_t l = strlen(kind_names[k]) + 1;
        if (n >= l && s[n - l] == '/' && memcmp(s + n - l + 1, kind_names[k], l - 1) == 0) {
            *cut = l;
            return k;
        }
    }
    return -1;
}

int wq_http_workers(wq_host *h, struct evhttp_request *req, const char *path,
                    enum evhttp_cmd_type cmd)
{
    if (strncmp(path, "/queues/", 8) != 0)
        return 0;
    const char *name = path + 8;
    size_t nl = strcspn(name, "/");
    if (nl == 0 || nl > 64)
        return 0;
    const char *rest = name + nl;
    size_t rn = strlen(rest), cut = 0;
    int kind = -1, claim = strcmp(rest, "/claim") == 0;
    const char *k = NULL;
    size_t kn = 0;
    if (!claim) {
        kind = report_suffix(rest, rn, &cut);
        if (kind < 0)
            return 0;
        if (rn == cut) { /* /queues/NAME/done: a batch */
        } else if (strncmp(rest, "/items/", 7) == 0 && rn > 7 + cut) {
            if (cmd != EVHTTP_REQ_POST) /* GET items/KEY with a '/' in KEY: http_ops.c */
                return 0;
            k = rest + 7;
            kn = rn - 7 - cut;
        } else {
            return 0;
        }
    }
    if (cmd != EVHTTP_REQ_POST) {
        wq_http_not_allowed(req, "POST");
        return 1;
    }
    char qname[65];
    memcpy(qname, name, nl);
    qname[nl] = 0;
    const wq_hqueue *hq = wq_host_find_queue(h, qname);
    if (!hq) {
        wq_http_no_queue(req, qname);
        return 1;
    }
    if (!hq->ops->claim) {
        wq_http_reply_error(req, 404, "Not Found", "this queue takes no remote workers");
        return 1;
    }
    if (claim) {
        post_claim(h, req, hq);
    } else if (!k) {
        post_reports(h, req, hq, (wq_report_kind)kind);
    } else {
        size_t keylen;
        char *key = wq_http_decode_key(k, kn, &keylen);
        if (!key)
            wq_http_reply_error(req, 500, "Internal Server Error", "out of memory");
        else if (keylen > WQ_KEY_MAX)
            bad(req, "%s", "key too long");
        else
            post_report(h, req, hq, (wq_report_kind)kind, key, keylen);
        free(key);
    }
    return 1;
}
