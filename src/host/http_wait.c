/*
 * GET /queues/NAME/items/KEY?wait=SECONDS: a long poll for a key's end
 * (SPEC 11). A key pending in this runner is waited for (events.h): the
 * answer comes when its run ends (done, dead, cancelled, removed: the run
 * as the history shows it, with "state") or at the deadline with its
 * current state, as GET items/KEY gives it. A key not pending is answered
 * at once. No poll: the end's event answers, a timer the deadline; a
 * client that leaves meanwhile takes its wait with it.
 */
#include "host/http_wait.h"

#include "host/events.h"
#include "host/http_history.h"
#include "host/http_int.h"
#include "host/http_ops.h"
#include "host/json.h"
#include "host/timer.h"

#include <json-c/json_object.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAIT_MAX 3600.0 /* seconds a request may wait at most */

typedef struct waiter {
    wq_host *h;
    struct evhttp_request *req;
    struct evhttp_connection *conn;
    char queue[65];
    char *key;
    size_t keylen;
    wq_events_wait *w;
    uint64_t timer;
    int asking;   /* a shared database is asked whether the key is pending: free after it */
    int answered; /* the request is answered (or its client left): nothing more to do */
} waiter;

static void waiter_free(waiter *x)
{
    if (x->asking) { /* the database's answer frees it */
        x->answered = 1;
        if (x->w)
            wq_events_unwait(x->h, x->w);
        x->w = NULL;
        if (x->timer)
            wq_timer_stop(x->h, x->timer);
        x->timer = 0;
        return;
    }
    if (x->w)
        wq_events_unwait(x->h, x->w);
    if (x->timer)
        wq_timer_stop(x->h, x->timer);
    free(x->key);
    free(x);
}

/* The connection is no longer told about (the answer is given). */
static void release(waiter *x)
{
    struct evhttp_connection *c = evhttp_request_get_connection(x->req);
    if (c) {
        evhttp_connection_set_closecb(c, NULL, NULL);
        evhttp_connection_set_timeout(c, WQ_HTTP_CLIENT_TIMEOUT);
    }
}

/* The end's answer: the run as the history keeps it. */
static json_object *end_json(const wq_life *e)
{
    wq_history_view v = {.key = e->key,
                         .keylen = e->keylen,
                         .state = wq_life_name(e->type),
                         .added_at = e->added_at,
                         .started_at = e->started_at,
                         .finished_at = e->at,
                         .attempts = e->attempt,
                         .runner = e->runner,
                         .result = e->data,
                         .rlen = e->datalen,
                         .error = e->error};
    return wq_http_run_json(&v);
}

static void on_end(void *ud, const wq_life *e)
{
    waiter *x = ud;
    x->w = NULL; /* told once: gone */
    release(x);
    wq_http_reply_durable(x->h, x->req, 200, "OK", end_json(e)); /* once the end is kept */
    waiter_free(x);
}

static void on_deadline(wq_host *h, void *data, uint64_t id)
{
    (void)id;
    waiter *x = data;
    x->timer = 0;
    release(x);
    const wq_hqueue *hq = wq_host_find_queue(h, x->queue);
    if (hq)
        wq_http_item_now(h, x->req, hq, x->key, x->keylen);
    else
        wq_http_no_queue(x->req, x->queue);
    waiter_free(x);
}

/* The client left (or the server stops): the wait goes, and a request evhttp let go of. */
static void on_close(struct evhttp_connection *conn, void *arg)
{
    (void)conn;
    waiter *x = arg;
    if (!evhttp_request_get_connection(x->req))
        evhttp_request_free(x->req); /* left to us by evhttp: nobody will answer it */
    waiter_free(x);
}

/* Whether the database's answer (a KEYSTATE object) is a pending state. */
static int pending(const char *text)
{
    json_object *o = NULL, *st;
    int p = text && !wq_json_parse(text, strlen(text), &o) &&
            json_object_object_get_ex(o, "state", &st) &&
            (strcmp(json_object_get_string(st), "queued") == 0 ||
             strcmp(json_object_get_string(st), "processing") == 0 ||
             strcmp(json_object_get_string(st), "waiting") == 0 ||
             strcmp(json_object_get_string(st), "blocked") == 0);
    json_object_put(o);
    return p;
}

/* The shared database said what it holds of the key (the wait registered before it asked). */
static void on_asked(void *ud, int result, const char *text)
{
    waiter *x = ud;
    x->asking = 0;
    if (x->answered) { /* ended, timed out or left meanwhile */
        waiter_free(x);
        return;
    }
    if (result > 0 && pending(text))
        return; /* the end or the deadline answers */
    release(x); /* not pending (or unknown): its state now */
    const wq_hqueue *hq = wq_host_find_queue(x->h, x->queue);
    if (hq)
        wq_http_item_now(x->h, x->req, hq, x->key, x->keylen);
    else
        wq_http_no_queue(x->req, x->queue);
    waiter_free(x);
}

int wq_http_item_wait(wq_host *h, struct evhttp_request *req, const wq_hqueue *hq, const char *key,
                      size_t len, const char *query)
{
    if (!query || !*query)
        return 0;
    char *end = NULL;
    double s = strncmp(query, "wait=", 5) == 0 ? strtod(query + 5, &end) : NAN;
    if (!(s >= 0 && s <= WAIT_MAX) || end == query + 5 || *end) {
        char msg[120];
        snprintf(msg, sizeof msg, "the only parameter is wait, seconds from 0 to %.0f", WAIT_MAX);
        wq_http_reply_error(req, 400, "Bad Request", msg);
        return 1;
    }
    /* On a database shared by runners any runner may run it: the database says. */
    int shared = h->backend && wq_backend_shared(h->backend) && hq->persist && hq->ops->op;
    if (s == 0 || (!shared && (!hq->ops->has || !hq->ops->has(hq->q, key, len))))
        return 0; /* not pending here: its state now */
    waiter *x = calloc(1, sizeof *x);
    if (!x || !(x->key = malloc(len ? len : 1))) {
        free(x);
        wq_http_reply_error(req, 500, "Internal Server Error", "out of memory");
        return 1;
    }
    memcpy(x->key, key, len);
    x->keylen = len;
    x->h = h;
    x->req = req;
    snprintf(x->queue, sizeof x->queue, "%s", hq->name);
    x->w = wq_events_wait_key(h, hq->name, key, len, on_end, x);
    x->timer =
        x->w ? wq_timer_start_weak(h, wq_host_now(h) + (int64_t)(s * 1e9), on_deadline, x) : 0;
    if (!x->timer) {
        waiter_free(x);
        wq_http_reply_error(req, 500, "Internal Server Error", "out of memory");
        return 1;
    }
    x->conn = evhttp_request_get_connection(req);
    evhttp_connection_set_timeout(x->conn, (int)s + WQ_HTTP_CLIENT_TIMEOUT);
    evhttp_connection_set_closecb(x->conn, on_close, x);
    if (shared && !hq->ops->has(hq->q, key, len)) { /* registered first: no end is missed */
        wq_bop op = {.kind = WQ_BOP_ITEM, .key = key, .keylen = len};
        x->asking = 1;
        if (hq->ops->op(hq->q, &op, on_asked, x) != 0) {
            x->asking = 0;
            release(x);
            waiter_free(x);
            return 0; /* answered now, the usual way */
        }
    }
    return 1;
}
