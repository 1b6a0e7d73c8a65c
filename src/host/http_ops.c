/*
 * The operator routes of the HTTP API (SPEC 7.5), under /queues/NAME/:
 * pause and resume, listing and removing pending items, one key's state
 * (pending, done or dead: GET items/KEY), cancelling a
 * running one, listing, retrying and purging dead letters, and what the
 * dashboard shows of a queue: its schedules and the groups its limits hold
 * back the most (GET schedules, GET groups). Keys travel in
 * the path, percent-encoded (a key may hold '/', '%', spaces, any byte).
 * Every change is answered only once it is committed (as POST items is):
 * an acknowledged remove or retry survives a kill -9. A request that
 * names no queue or key, or asks the impossible, gets a 4xx JSON error
 * and changes nothing.
 */
#include "host/http_ops.h"
#include "store/backend.h"

#include "host/commands.h"
#include "host/events.h"
#include "host/http_history.h"
#include "host/http_wait.h"
#include "host/http_int.h"
#include "host/json.h"

#include "engine/common.h"
#include "engine/queue.h"

#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ITEMS_DEFAULT 100
#define ITEMS_MAX 1000
#define DEAD_DEFAULT 1000
#define DEAD_MAX 10000
#define GROUPS_DEFAULT 10
#define GROUPS_MAX 100

static void bad_request(struct evhttp_request *req, const char *msg)
{
    wq_http_reply_error(req, 400, "Bad Request", msg);
}

/* The percent-decoded bytes of s[0..n) (malloc'd, NUL-terminated; *len without it), or NULL. */
static char *decode(const char *s, size_t n, int plus, size_t *len)
{
    char *raw = malloc(n + 1);
    if (!raw)
        return NULL;
    memcpy(raw, s, n);
    raw[n] = 0;
    char *out = evhttp_uridecode(raw, plus, len);
    free(raw);
    return out;
}

/* A string value for JSON: the key's bytes as they are. */
static json_object *bytes(const char *s, size_t n)
{
    return json_object_new_string_len(s, (int)n);
}

/* A stored payload (JSON text) as a JSON value; text that does not parse as a string. */
static json_object *payload_value(const char *text, size_t n)
{
    if (!text)
        return NULL;
    json_object *v = NULL;
    if (wq_json_parse(text, n, &v) != NULL)
        return bytes(text, n);
    return v;
}

/* ---- GET /queues/NAME/items?state=&limit=&after_key= ---- */

struct items_ctx {
    json_object *items;
    size_t n, limit;
    char *last; /* key of the last item listed */
    size_t lastlen;
    int more, nomem;
};

/* The listing's object of a pending item, or NULL (out of memory). */
static json_object *item_json(const wq_item_view *it)
{
    json_object *o = json_object_new_object();
    if (!o)
        return NULL;
    json_object_object_add(o, "key", bytes(it->key, it->keylen));
    json_object_object_add(o, "payload", payload_value(it->payload, it->paylen));
    json_object_object_add(o, "state", json_object_new_string(it->state));
    json_object_object_add(o, "priority", json_object_new_int(it->priority));
    json_object_object_add(o, "group", it->group ? bytes(it->group, it->grouplen) : NULL);
    json_object_object_add(o, "ready_at",
                           it->ready_at > 0 ? json_object_new_double(it->ready_at) : NULL);
    json_object_object_add(o, "attempt", json_object_new_int64(it->attempt));
    json_object_object_add(o, "last_error",
                           it->last_error ? json_object_new_string(it->last_error) : NULL);
    if (it->progress) /* a processing item's latest job:progress */
        json_object_object_add(o, "progress", payload_value(it->progress, it->progresslen));
    return o;
}

static void on_item(void *ud, const wq_item_view *it)
{
    struct items_ctx *c = ud;
    if (c->n++ == c->limit) {
        c->more = 1; /* one beyond the page: there is a next one */
        return;
    }
    json_object *o = item_json(it);
    if (!o) {
        c->nomem = 1;
        return;
    }
    json_object_array_add(c->items, o);
    free(c->last);
    c->last = malloc(it->keylen + 1);
    if (c->last) {
        memcpy(c->last, it->key, it->keylen);
        c->lastlen = it->keylen;
    } else {
        c->nomem = 1;
    }
}

/* Reads the query of an items request; NULL, or what is wrong with it. */
static const char *read_query(const char *query, wq_items_query *qry, char **state, char **after)
{
    const char *p = query;
    while (p && *p) {
        const char *end = strchr(p, '&');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', n);
        size_t nlen = eq ? (size_t)(eq - p) : n;
        const char *v = eq ? eq + 1 : p + n;
        size_t vn = (size_t)(p + n - v), len;
        char *val = decode(v, vn, 1, &len);
        if (!val)
            return "out of memory";
        if (nlen == 5 && memcmp(p, "state", 5) == 0) {
            free(*state);
            *state = val;
            if (strcmp(val, "queued") != 0 && strcmp(val, "processing") != 0 &&
                strcmp(val, "waiting") != 0 && strcmp(val, "") != 0)
                return "state must be queued, processing or waiting";
            qry->state = *val ? val : NULL;
        } else if (nlen == 5 && memcmp(p, "limit", 5) == 0) {
            char *e;
            long l = strtol(val, &e, 10);
            int bad = !*val || *e || l < 1 || l > ITEMS_MAX;
            free(val);
            if (bad)
                return "limit must be an integer from 1 to 1000";
            qry->limit = (size_t)l;
        } else if (nlen == 9 && memcmp(p, "after_key", 9) == 0) {
            free(*after);
            *after = val;
            qry->after_key = val;
            qry->after_len = len;
        } else {
            free(val);
            return "unknown parameter (expected state, limit, after_key)";
        }
        p = end ? end + 1 : NULL;
    }
    return NULL;
}

/* ---- a backend that applies the actions itself (PostgreSQL): answered later ---- */

typedef struct remote_reply {
    wq_host *h;
    struct evhttp_request *req;
    wq_bop_kind kind;
    size_t limit; /* ITEMS: the page (one more was asked for); DEAD: the limit */
    char queue[65];
    char *key; /* for messages */
    size_t keylen;
    int orphaned; /* the server is gone: answer nobody */
    struct remote_reply *next, *prev;
} remote_reply;

/* The replies waiting for the database (one server per process; see wq_http_ops_stop). */
static remote_reply *remote_waiting;

static void remote_unlink(remote_reply *rr)
{
    if (rr->prev)
        rr->prev->next = rr->next;
    else if (remote_waiting == rr)
        remote_waiting = rr->next;
    if (rr->next)
        rr->next->prev = rr->prev;
}

void wq_http_ops_stop(void)
{
    for (remote_reply *rr = remote_waiting; rr; rr = rr->next)
        rr->orphaned = 1;
}

/* The objects of a listing with the fields the engine's listing has, null when absent. */
static void fill_nulls(json_object *arr, const char *const *fields)
{
    for (size_t i = 0; i < json_object_array_length(arr); i++) {
        json_object *o = json_object_array_get_idx(arr, i);
        for (const char *const *f = fields; *f && json_object_is_type(o, json_type_object); f++)
            if (!json_object_object_get_ex(o, *f, NULL))
                json_object_object_add(o, *f, NULL);
    }
}

/* The fields of a pending item, a dead letter and a done memory that are null when absent. */
static const char *const pending_fields[] = {"payload", "group", "ready_at", "last_error", NULL};
static const char *const dead_fields[] = {"payload", "error", NULL};
static const char *const done_fields[] = {"result", NULL};
static const char *const schedule_fields[] = {"payload", "next_at", "last_at", NULL};
static const char *const group_fields[] = {"concurrency", "rate", "burst", NULL};

static void mark_defined(remote_reply *rr, json_object *arr);

static void key_error(struct evhttp_request *req, int code, const char *pre, const char *key,
                      size_t len, const char *post, const char *queue, const char *tail);

static void reply_listing(remote_reply *rr, int result, const char *text)
{
    json_object *arr = NULL, *body = json_object_new_object();
    if (!body || wq_json_parse(text, strlen(text), &arr) != NULL ||
        !json_object_is_type(arr, json_type_array)) {
        json_object_put(arr);
        json_object_put(body);
        wq_http_reply_error(rr->req, 500, "Internal Server Error",
                            "the database's answer could not be read");
        return;
    }
    if (rr->kind == WQ_BOP_DEAD || rr->kind == WQ_BOP_HELD_GROUPS) {
        int dead = rr->kind == WQ_BOP_DEAD;
        fill_nulls(arr, dead ? dead_fields : group_fields);
        json_object_object_add(body, dead ? "dead" : "groups", arr);
        json_object_object_add(body, "total", json_object_new_int64(result));
    } else if (rr->kind == WQ_BOP_HISTORY) { /* as http_history.c answers */
        json_object *next = NULL;
        if (json_object_array_length(arr) > rr->limit) { /* one beyond the page */
            json_object_array_del_idx(arr, rr->limit, json_object_array_length(arr) - rr->limit);
            json_object *id;
            if (json_object_object_get_ex(json_object_array_get_idx(arr, rr->limit - 1), "id", &id))
                next = json_object_get(id);
        }
        json_object_object_add(body, "history", arr);
        json_object_object_add(body, "next", next);
    } else if (rr->kind == WQ_BOP_SCHEDULES) {
        fill_nulls(arr, schedule_fields);
        mark_defined(rr, arr);
        json_object_object_add(body, "schedules", arr);
    } else {
        json_object *next = NULL;
        if (json_object_array_length(arr) > rr->limit) { /* one beyond the page */
            json_object_array_del_idx(arr, rr->limit, json_object_array_length(arr) - rr->limit);
            json_object *key;
            if (json_object_object_get_ex(json_object_array_get_idx(arr, rr->limit - 1), "key",
                                          &key))
                next = json_object_get(key);
        }
        fill_nulls(arr, pending_fields);
        json_object_object_add(body, "items", arr);
        json_object_object_add(body, "next_after_key", next);
    }
    wq_http_reply_json(rr->req, 200, "OK", body);
}

static json_object *one(const char *field, json_object *v);

/* The database's answer about one key: its object with its state's fields, or 404. */
static void reply_key(remote_reply *rr, int result, const char *text)
{
    if (result <= 0) {
        key_error(rr->req, 404, "no item ", rr->key ? rr->key : "", rr->keylen, " in queue ",
                  rr->queue, " (not pending, done or dead)");
        return;
    }
    json_object *o = NULL, *st;
    if (wq_json_parse(text, strlen(text), &o) != NULL ||
        !json_object_object_get_ex(o, "state", &st)) {
        json_object_put(o);
        wq_http_reply_error(rr->req, 500, "Internal Server Error",
                            "the database's answer could not be read");
        return;
    }
    const char *state = json_object_get_string(st);
    json_object *wrap = json_object_new_array();
    if (wrap) { /* fill_nulls walks an array */
        json_object_array_add(wrap, json_object_get(o));
        int ended = strcmp(state, "dead") == 0 || strcmp(state, "cancelled") == 0 ||
                    strcmp(state, "removed") == 0; /* (the last two from the history) */
        fill_nulls(wrap, strcmp(state, "done") == 0 ? done_fields
                         : ended                    ? dead_fields
                                                    : pending_fields);
        json_object_put(wrap);
    }
    wq_http_reply_json(rr->req, 200, "OK", o);
}

static void remote_answered(void *ud, int result, const char *text)
{
    remote_reply *rr = ud;
    remote_unlink(rr);
    struct evhttp_request *req = rr->req;
    const char *k = rr->key ? rr->key : "";
    if (rr->orphaned) {
        /* nobody to answer */
    } else if (result == WQ_EIO) {
        wq_http_reply_error(req, 503, "Service Unavailable", text ? text : "database unavailable");
    } else {
        switch (rr->kind) {
        case WQ_BOP_PAUSE:
        case WQ_BOP_RESUME: {
            /* This runner follows at once (GET /queues/NAME says so now); the others when
             * the database's signal reaches them. */
            const wq_hqueue *hq = result >= 0 ? wq_host_find_queue(rr->h, rr->queue) : NULL;
            if (hq)
                hq->ops->pause(hq->q, rr->kind == WQ_BOP_PAUSE);
            json_object *o = one("paused", json_object_new_boolean(rr->kind == WQ_BOP_PAUSE));
            if (o)
                json_object_object_add(o, "changed", json_object_new_boolean(result == 1));
            wq_http_reply_json(req, 200, "OK", o);
            break;
        }
        case WQ_BOP_REMOVE:
            if (result == WQ_EBUSY)
                key_error(req, 409, "", k, rr->keylen, " is processing in queue ", rr->queue,
                          " (cancel it instead)");
            else if (result < 0)
                key_error(req, 404, "no queued or delayed item ", k, rr->keylen, " in queue ",
                          rr->queue, "");
            else {
                wq_life e = {.type = WQ_LIFE_REMOVED,
                             .queue = rr->queue,
                             .key = k,
                             .keylen = rr->keylen}; /* the database removed it: its event */
                if (wq_events_wanted(rr->h))
                    wq_events_emit(rr->h, &e);
                wq_http_reply_json(req, 200, "OK", one("removed", json_object_new_boolean(1)));
            }
            break;
        case WQ_BOP_CANCEL:
            if (result == WQ_EBUSY)
                key_error(req, 409, "", k, rr->keylen, " is not processing in queue ", rr->queue,
                          "");
            else if (result < 0)
                key_error(req, 404, "no item ", k, rr->keylen, " in queue ", rr->queue, "");
            else /* its runner was told: the run ends within a second */
                wq_http_reply_json(req, 202, "Accepted",
                                   one("cancelled", json_object_new_boolean(1)));
            break;
        case WQ_BOP_RETRY_DEAD:
            if (result <= 0)
                key_error(req, 404, "no dead letter ", k, rr->keylen, " in queue ", rr->queue, "");
            else
                wq_http_reply_json(req, 200, "OK", one("retried", json_object_new_boolean(1)));
            break;
        case WQ_BOP_PURGE_DEAD:
            wq_http_reply_json(req, 200, "OK", one("purged", json_object_new_int(result)));
            break;
        case WQ_BOP_ITEMS:
        case WQ_BOP_DEAD:
        case WQ_BOP_SCHEDULES:
        case WQ_BOP_HELD_GROUPS:
        case WQ_BOP_HISTORY: reply_listing(rr, result, text ? text : "[]"); break;
        case WQ_BOP_ITEM:
        case WQ_BOP_LAST_RUN: reply_key(rr, result, text ? text : "null"); break;
        case WQ_BOP_DONE_INFO:
        case WQ_BOP_FORGET_DONE:
        case WQ_BOP_CANCEL_AFTER:
        case WQ_BOP_STATS:
        case WQ_BOP_SET_GROUP_LIMIT:
        case WQ_BOP_GROUP_LIMIT: /* not HTTP routes */
            wq_http_reply_error(req, 500, "Internal Server Error", "unexpected answer");
            break;
        }
    }
    free(rr->key);
    free(rr);
}

/*
 * Hands op to a backend that applies it itself: 1 when the request is taken care of (answered
 * later, or answered now with an error), 0 when the runtime applies it (go on as usual).
 */
static int remote(wq_host *h, struct evhttp_request *req, const wq_hqueue *hq, const wq_bop *op,
                  size_t limit)
{
    if (!hq->persist || !hq->ops->op || hq->ops->op(hq->q, op, NULL, NULL) == WQ_BACKEND_LOCAL)
        return 0;
    remote_reply *rr = calloc(1, sizeof *rr);
    if (rr && op->key && !(rr->key = malloc(op->keylen + 1))) {
        free(rr);
        rr = NULL;
    }
    if (!rr) {
        wq_http_reply_error(req, 500, "Internal Server Error", "out of memory");
        return 1;
    }
    rr->h = h;
    rr->req = req;
    rr->kind = op->kind;
    rr->limit = limit;
    snprintf(rr->queue, sizeof rr->queue, "%s", hq->name);
    if (op->key) {
        memcpy(rr->key, op->key, op->keylen);
        rr->key[op->keylen] = 0;
        rr->keylen = op->keylen;
    }
    int r = hq->ops->op(hq->q, op, remote_answered, rr);
    if (r == 0) {
        rr->next = remote_waiting;
        if (rr->next)
            rr->next->prev = rr;
        remote_waiting = rr;
        return 1;
    }
    if (r == WQ_EINVAL) { /* a parameter the database cannot take */
        remote_unlink(rr);
        free(rr->key);
        free(rr);
        bad_request(req, "after_key: PostgreSQL holds UTF-8 keys only");
        return 1;
    }
    /* answered at once: unreachable, or a key the database cannot hold */
    remote_answered(rr, r, r == WQ_EIO ? "database unavailable" : NULL);
    return 1;
}

int wq_http_remote(wq_host *h, struct evhttp_request *req, const wq_hqueue *hq, const wq_bop *op,
                   size_t limit)
{
    return remote(h, req, hq, op, limit);
}

static void get_items(wq_host *h, struct evhttp_request *req, const wq_hqueue *hq,
                      const char *query)
{
    wq_items_query qry = {NULL, ITEMS_DEFAULT, NULL, 0};
    char *state = NULL, *after = NULL;
    const char *err = read_query(query, &qry, &state, &after);
    if (err) {
        bad_request(req, err);
        free(state);
        free(after);
        return;
    }
    wq_bop op = {.kind = WQ_BOP_ITEMS,
                 .state = qry.state,
                 .limit = qry.limit + 1, /* one more: is there a next page? */
                 .after_key = qry.after_key,
                 .after_len = qry.after_len};
    if (remote(h, req, hq, &op, qry.limit)) {
        free(state);
        free(after);
        return;
    }
    struct items_ctx c = {json_object_new_array(), 0, qry.limit, NULL, 0, 0, 0};
    qry.limit++; /* one more: is there a next page? */
    int n = c.items ? hq->ops->items(hq->q, &qry, on_item, &c) : WQ_ENOMEM;
    free(state);
    free(after);
    json_object *body = json_object_new_object();
    if (n < 0 || c.nomem || !body) {
        json_object_put(c.items);
        json_object_put(body);
        free(c.last);
        wq_http_reply_error(req, 500, "Internal Server Error", "out of memory");
        return;
    }
    json_object_object_add(body, "items", c.items);
    json_object_object_add(body, "next_after_key",
                           c.more && c.last ? bytes(c.last, c.lastlen) : NULL);
    free(c.last);
    wq_http_reply_json(req, 200, "OK", body);
}

/* ---- dead letters ---- */

struct dead_ctx {
    json_object *dead;
    size_t n, limit;
    int nomem;
};

/* The listing's object of a dead letter, or NULL (out of memory). */
static json_object *dead_json(const wq_dead_view *d)
{
    json_object *o = json_object_new_object();
    if (!o)
        return NULL;
    json_object_object_add(o, "key", bytes(d->key, d->keylen));
    json_object_object_add(o, "payload", payload_value(d->payload, d->paylen));
    json_object_object_add(o, "error", d->error ? json_object_new_string(d->error) : NULL);
    json_object_object_add(o, "attempts", json_object_new_int64(d->attempts));
    json_object_object_add(o, "failed_at", json_object_new_double(d->failed_at));
    if (d->traceback)
        json_object_object_add(o, "traceback", json_object_new_string(d->traceback));
    return o;
}

static void on_dead(void *ud, const wq_dead_view *d)
{
    struct dead_ctx *c = ud;
    if (c->n++ >= c->limit)
        return;
    json_object *o = dead_json(d);
    if (!o) {
        c->nomem = 1;
        return;
    }
    json_object_array_add(c->dead, o);
}

/* ---- GET /queues/NAME/items/KEY: what the queue knows of one key ---- */

static void on_key(void *ud, const wq_key_view *v)
{
    json_object **out = ud;
    json_object *o;
    if (v->item.key) {
        o = item_json(&v->item);
    } else if (strcmp(v->state, "dead") == 0) {
        o = dead_json(&v->dead);
        if (o)
            json_object_object_add(o, "state", json_object_new_string("dead"));
    } else if (strcmp(v->state, "blocked") == 0) {
        o = json_object_new_object();
        if (o) {
            json_object_object_add(o, "key", bytes(v->key, v->keylen));
            json_object_object_add(o, "state", json_object_new_string("blocked"));
            json_object_object_add(o, "flow", json_object_new_string(v->flow));
            json_object_object_add(o, "waits", json_object_new_int64(v->waits));
            json_object_object_add(o, "priority", json_object_new_int(v->priority));
            json_object_object_add(o, "payload", payload_value(v->payload, v->paylen));
        }
    } else {
        o = json_object_new_object();
        if (o) {
            json_object_object_add(o, "key", bytes(v->key, v->keylen));
            json_object_object_add(o, "state", json_object_new_string("done"));
            json_object_object_add(o, "finished_at", json_object_new_double(v->finished_at));
            json_object_object_add(o, "result", payload_value(v->result, v->rlen));
        }
    }
    *out = o;
}

char *wq_http_decode_key(const char *s, size_t n, size_t *len)
{
    return decode(s, n, 0, len);
}

static void get_item(wq_host *h, struct evhttp_request *req, const wq_hqueue *hq, const char *key,
                     size_t len);

/* A query of one parameter, limit=N (1 to max), into *limit: 1, or 0 after answering 400. */
static int read_limit(struct evhttp_request *req, const char *query, size_t max, size_t *limit)
{
    if (!query || !*query)
        return 1;
    char *e = NULL;
    long l = strncmp(query, "limit=", 6) == 0 ? strtol(query + 6, &e, 10) : -1;
    if (l < 1 || (size_t)l > max || *e) {
        char msg[80];
        snprintf(msg, sizeof msg, "the only parameter is limit, an integer from 1 to %zu", max);
        bad_request(req, msg);
        return 0;
    }
    *limit = (size_t)l;
    return 1;
}

static void get_dead(wq_host *h, struct evhttp_request *req, const wq_hqueue *hq, const char *query)
{
    size_t limit = DEAD_DEFAULT;
    if (!read_limit(req, query, DEAD_MAX, &limit))
        return;
    wq_bop op = {.kind = WQ_BOP_DEAD, .limit = limit};
    if (remote(h, req, hq, &op, limit))
        return;
    struct dead_ctx c = {json_object_new_array(), 0, limit, 0};
    int n = c.dead ? hq->ops->dead(hq->q, on_dead, &c) : WQ_ENOMEM;
    json_object *body = json_object_new_object();
    if (n < 0 || c.nomem || !body) {
        json_object_put(c.dead);
        json_object_put(body);
        wq_http_reply_error(req, 500, "Internal Server Error", "out of memory");
        return;
    }
    json_object_object_add(body, "dead", c.dead);
    json_object_object_add(body, "total", json_object_new_int64((int64_t)c.n));
    wq_http_reply_json(req, 200, "OK", body);
}

/* ---- GET /queues/NAME/schedules ---- */

/* A JSON number, or null for 0 (a time never set, a limit not set). */
static json_object *num_or_null(double v)
{
    return v > 0 ? json_object_new_double(v) : NULL;
}

static json_object *schedule_json(const wq_schedule_row *s, int defined)
{
    json_object *o = json_object_new_object();
    if (!o)
        return NULL;
    json_object_object_add(o, "name", json_object_new_string(s->name));
    json_object_object_add(o, "spec", json_object_new_string(s->spec));
    json_object_object_add(o, "key",
                           s->key ? bytes(s->key, s->keylen) : json_object_new_string(s->name));
    json_object_object_add(o, "tz",
                           json_object_new_string(s->tz == WQ_SCHED_LOCAL ? "local" : "utc"));
    json_object_object_add(
        o, "catch_up",
        json_object_new_string(s->catch_up == WQ_SCHED_CATCH_UP_SKIP ? "skip" : "once"));
    json_object_object_add(o, "payload", payload_value(s->payload, s->paylen));
    json_object_object_add(o, "next_at", num_or_null(s->next_at));
    json_object_object_add(o, "last_at", num_or_null(s->last_at));
    json_object_object_add(o, "defined", json_object_new_boolean(defined));
    return o;
}

/* A listing being built from a queue's callbacks (schedules, groups). */
struct listing {
    json_object *arr;
    int nomem;
};

static void listing_add(struct listing *c, json_object *o)
{
    if (!o || json_object_array_add(c->arr, o) < 0) {
        json_object_put(o);
        c->nomem = 1;
    }
}

/* Answers {field: the listing} (and "total": n when total), or 500 when n says it failed. */
static void reply_list(struct evhttp_request *req, int64_t n, struct listing *c, const char *field,
                       int total)
{
    json_object *body = json_object_new_object();
    if (n < 0 || c->nomem || !body) {
        json_object_put(c->arr);
        json_object_put(body);
        wq_http_reply_error(req, 500, "Internal Server Error", "out of memory");
        return;
    }
    json_object_object_add(body, field, c->arr);
    if (total)
        json_object_object_add(body, "total", json_object_new_int64(n));
    wq_http_reply_json(req, 200, "OK", body);
}

static void on_schedule(void *ud, const wq_schedule_row *s, int defined)
{
    listing_add(ud, schedule_json(s, defined));
}

static void on_local_schedule(void *ud, const wq_schedule_row *s, int defined)
{
    json_object *arr = ud, *name;
    for (size_t i = 0; defined && i < json_object_array_length(arr); i++) {
        json_object *o = json_object_array_get_idx(arr, i);
        if (json_object_object_get_ex(o, "name", &name) &&
            strcmp(json_object_get_string(name), s->name) == 0)
            json_object_object_add(o, "defined", json_object_new_boolean(1));
    }
}

/* The schedules of arr (the database's listing) this runner's script defines get "defined":
 * true, the others false. */
static void mark_defined(remote_reply *rr, json_object *arr)
{
    for (size_t i = 0; i < json_object_array_length(arr); i++)
        json_object_object_add(json_object_array_get_idx(arr, i), "defined",
                               json_object_new_boolean(0));
    const wq_hqueue *hq = wq_host_find_queue(rr->h, rr->queue);
    if (hq && hq->ops->schedules)
        hq->ops->schedules(hq->q, on_local_schedule, arr);
}

static void get_schedules(wq_host *h, struct evhttp_request *req, const wq_hqueue *hq,
                          const char *query)
{
    if (query && *query) {
        bad_request(req, "GET /queues/NAME/schedules takes no parameter");
        return;
    }
    wq_bop op = {.kind = WQ_BOP_SCHEDULES};
    if (remote(h, req, hq, &op, 0))
        return;
    struct listing c = {json_object_new_array(), 0};
    int n = !c.arr               ? WQ_ENOMEM
            : hq->ops->schedules ? hq->ops->schedules(hq->q, on_schedule, &c)
                                 : 0;
    reply_list(req, n, &c, "schedules", 0);
}

/* ---- GET /queues/NAME/groups?limit=N: the groups held back the most ---- */

static void on_group(void *ud, const wq_group_view *g)
{
    json_object *o = json_object_new_object();
    if (o) {
        json_object_object_add(o, "group", bytes(g->name, g->namelen));
        json_object_object_add(o, "held", json_object_new_int64(g->held));
        json_object_object_add(o, "queued", json_object_new_int64(g->queued));
        json_object_object_add(o, "running", json_object_new_int64(g->active));
        json_object_object_add(o, "own", json_object_new_boolean(g->own));
        json_object_object_add(o, "concurrency",
                               g->lim.concurrency ? json_object_new_int64(g->lim.concurrency)
                                                  : NULL);
        json_object_object_add(o, "rate", num_or_null(g->lim.rate));
        json_object_object_add(o, "burst", g->lim.rate > 0 ? num_or_null(g->lim.burst) : NULL);
    }
    listing_add(ud, o);
}

static void get_groups(wq_host *h, struct evhttp_request *req, const wq_hqueue *hq,
                       const char *query)
{
    size_t limit = GROUPS_DEFAULT;
    if (!read_limit(req, query, GROUPS_MAX, &limit))
        return;
    wq_bop op = {.kind = WQ_BOP_HELD_GROUPS, .limit = limit};
    if (remote(h, req, hq, &op, limit))
        return;
    struct listing c = {json_object_new_array(), 0};
    int64_t n = !c.arr                 ? WQ_ENOMEM
                : hq->ops->held_groups ? hq->ops->held_groups(hq->q, limit, on_group, &c)
                                       : 0;
    reply_list(req, n, &c, "groups", 1);
}

/* ---- changes ---- */

static json_object *one(const char *field, json_object *v)
{
    json_object *o = json_object_new_object();
    if (o)
        json_object_object_add(o, field, v);
    else
        json_object_put(v);
    return o;
}

/* Answers code with "<pre>'<key>'<post>'<queue>'<tail>". */
static void key_error(struct evhttp_request *req, int code, const char *pre, const char *key,
                      size_t len, const char *post, const char *queue, const char *tail)
{
    char shown[WQ_SHOWN_KEY], msg[WQ_SHOWN_KEY + 200];
    wq_show_key(shown, key, len);
    snprintf(msg, sizeof msg, "%s'%s'%s'%s'%s", pre, shown, post, queue, tail);
    wq_http_reply_error(req, code, code == 404 ? "Not Found" : "Conflict", msg);
}

/* A cancel request waits for the run to end, then for the commit. */
struct held_cancel {
    wq_host *h;
    struct evhttp_request *req;
};

static void cancel_ended(void *ud, int ok)
{
    struct held_cancel *hc = ud;
    if (ok)
        wq_http_reply_durable(hc->h, hc->req, 200, "OK",
                              one("cancelled", json_object_new_boolean(1)));
    else
        wq_http_reply_error(hc->req, 503, "Service Unavailable",
                            "the runner stopped before the cancelled run ended");
    free(hc);
}

static void cancel(wq_host *h, struct evhttp_request *req, const wq_hqueue *hq, const char *key,
                   size_t len)
{
    wq_bop op = {.kind = WQ_BOP_CANCEL, .key = key, .keylen = len};
    if (remote(h, req, hq, &op, 0))
        return;
    int r = hq->ops->cancel(hq->q, key, len);
    if (r == WQ_ENOENT) {
        key_error(req, 404, "no item ", key, len, " in queue ", hq->name, "");
        return;
    }
    if (r == WQ_EBUSY) {
        key_error(req, 409, "", key, len, " is not processing in queue ", hq->name, "");
        return;
    }
    struct held_cancel *hc = malloc(sizeof *hc);
    if (hc) {
        hc->h = h;
        hc->req = req;
        if (wq_host_when_cancelled(h, hq->q, key, len, cancel_ended, hc) == 0)
            return;
        free(hc);
    }
    /* The cancel stands; only the wait for its end could not be arranged. */
    wq_http_reply_durable(h, req, 202, "Accepted", one("cancelled", json_object_new_boolean(1)));
}

static void remove_item(wq_host *h, struct evhttp_request *req, const wq_hqueue *hq,
                        const char *key, size_t len)
{
    wq_bop op = {.kind = WQ_BOP_REMOVE, .key = key, .keylen = len};
    if (remote(h, req, hq, &op, 0))
        return;
    int r = hq->ops->remove(hq->q, key, len);
    if (r == WQ_EBUSY)
        key_error(req, 409, "", key, len, " is processing in queue ", hq->name,
                  " (cancel it instead)");
    else if (r < 0)
        key_error(req, 404, "no queued or delayed item ", key, len, " in queue ", hq->name, "");
    else
        wq_http_reply_durable(h, req, 200, "OK", one("removed", json_object_new_boolean(1)));
}

static void retry(wq_host *h, struct evhttp_request *req, const wq_hqueue *hq, const char *key,
                  size_t len)
{
    wq_bop op = {.kind = WQ_BOP_RETRY_DEAD, .key = key, .keylen = len};
    if (remote(h, req, hq, &op, 0))
        return;
    int n = hq->ops->retry_dead(hq->q, key, len);
    if (n < 0)
        wq_http_reply_error(req, n == WQ_ENOMEM ? 500 : 503,
                            n == WQ_ENOMEM ? "Internal Server Error" : "Service Unavailable",
                            wq_strerror(n));
    else if (n == 0)
        key_error(req, 404, "no dead letter ", key, len, " in queue ", hq->name, "");
    else
        wq_http_reply_durable(h, req, 200, "OK", one("retried", json_object_new_boolean(1)));
}

static void get_item(wq_host *h, struct evhttp_request *req, const wq_hqueue *hq, const char *key,
                     size_t len)
{
    wq_bop op = {.kind = WQ_BOP_ITEM, .key = key, .keylen = len};
    if (remote(h, req, hq, &op, 0))
        return;
    json_object *o = NULL;
    int r = hq->ops->item ? hq->ops->item(hq->q, key, len, on_key, &o) : 0;
    if (r == 0) { /* unknown to the engine: its last run, where the history is the file's */
        op.kind = WQ_BOP_LAST_RUN;
        if (remote(h, req, hq, &op, 0))
            return;
    }
    if (r < 0 || (r > 0 && !o)) {
        json_object_put(o);
        wq_http_reply_error(req, 500, "Internal Server Error", "out of memory");
    } else if (r == 0) {
        key_error(req, 404, "no item ", key, len, " in queue ", hq->name,
                  " (not pending, done or dead)");
    } else {
        wq_http_reply_json(req, 200, "OK", o);
    }
}

void wq_http_item_now(wq_host *h, struct evhttp_request *req, const wq_hqueue *hq, const char *key,
                      size_t len)
{
    get_item(h, req, hq, key, len);
}

/* ---- routing ---- */

/* Whether rest is prefix + KEY + suffix; the raw key's bounds in *k, *kn. */
static int keyed(const char *rest, const char *prefix, const char *suffix, const char **k,
                 size_t *kn)
{
    size_t pl = strlen(prefix), sl = strlen(suffix), n = strlen(rest);
    if (n < pl + sl || strncmp(rest, prefix, pl) != 0 || strcmp(rest + n - sl, suffix) != 0)
        return 0;
    *k = rest + pl;
    *kn = n - pl - sl;
    return 1;
}

int wq_http_ops(wq_host *h, struct evhttp_request *req, const char *path, const char *query,
                enum evhttp_cmd_type cmd)
{
    if (strncmp(path, "/queues/", 8) != 0)
        return 0;
    const char *name = path + 8;
    size_t nl = strcspn(name, "/");
    if (nl == 0 || nl > 64 ||
        strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                     "0123456789_.-") < nl)
        return 0;
    const char *rest = name + nl;
    char qname[65];
    memcpy(qname, name, nl);
    qname[nl] = 0;
    int get = cmd == EVHTTP_REQ_GET || cmd == EVHTTP_REQ_HEAD;
    int post = cmd == EVHTTP_REQ_POST, del = cmd == EVHTTP_REQ_DELETE;
    const char *k = NULL;
    size_t kn = 0;
    enum {
        R_QUEUE,
        R_PAUSE,
        R_RESUME,
        R_ITEMS,
        R_CANCEL,
        R_KEY,
        R_DEAD,
        R_RETRY,
        R_SCHEDULES,
        R_GROUPS,
        R_HISTORY
    } route;
    if (!*rest || strcmp(rest, "/") == 0)
        route = R_QUEUE;
    else if (strcmp(rest, "/pause") == 0)
        route = R_PAUSE;
    else if (strcmp(rest, "/resume") == 0)
        route = R_RESUME;
    else if (strcmp(rest, "/items") == 0)
        route = R_ITEMS;
    else if (!del && keyed(rest, "/items/", "/cancel", &k, &kn)) /* GET KEY: encode its '/' */
        route = R_CANCEL;
    else if (keyed(rest, "/items/", "", &k, &kn))
        route = R_KEY; /* GET: the key's state; DELETE: remove; any other method: 405 below */
    else if (strcmp(rest, "/dead") == 0)
        route = R_DEAD;
    else if (keyed(rest, "/dead/", "/retry", &k, &kn))
        route = R_RETRY;
    else if (strcmp(rest, "/schedules") == 0)
        route = R_SCHEDULES;
    else if (strcmp(rest, "/groups") == 0)
        route = R_GROUPS;
    else if (strcmp(rest, "/history") == 0)
        route = R_HISTORY;
    else
        return 0;
    int allowed;
    const char *allow;
    switch (route) {
    case R_QUEUE:
    case R_SCHEDULES:
    case R_GROUPS:
    case R_HISTORY: allowed = get, allow = "GET, HEAD"; break;
    case R_PAUSE:
    case R_RESUME:
    case R_CANCEL:
    case R_RETRY: allowed = post, allow = "POST"; break;
    case R_ITEMS: allowed = get, allow = "GET, HEAD, POST"; break; /* POST: http.c */
    case R_KEY: allowed = get || del, allow = "GET, HEAD, DELETE"; break;
    case R_DEAD: allowed = get || del, allow = "GET, HEAD, DELETE"; break;
    default: allowed = 0, allow = ""; break;
    }
    if (!allowed) {
        wq_http_not_allowed(req, allow);
        return 1;
    }
    const wq_hqueue *hq = wq_host_find_queue(h, qname);
    if (!hq) {
        wq_http_no_queue(req, qname);
        return 1;
    }
    char *key = NULL;
    size_t keylen = 0;
    if (k) {
        key = decode(k, kn, 0, &keylen);
        if (!key) {
            wq_http_reply_error(req, 500, "Internal Server Error", "out of memory");
            return 1;
        }
        if (keylen > WQ_KEY_MAX) {
            free(key);
            bad_request(req, "key too long");
            return 1;
        }
    }
    switch (route) {
    case R_QUEUE: wq_http_reply_json(req, 200, "OK", wq_http_queue_summary(h, hq)); break;
    case R_PAUSE:
    case R_RESUME: {
        int pause = route == R_PAUSE;
        wq_bop pop = {.kind = pause ? WQ_BOP_PAUSE : WQ_BOP_RESUME};
        if (remote(h, req, hq, &pop, 0))
            break;
        int changed = hq->ops->pause(hq->q, pause);
        json_object *o = one("paused", json_object_new_boolean(pause));
        if (o)
            json_object_object_add(o, "changed", json_object_new_boolean(changed));
        wq_http_reply_durable(h, req, 200, "OK", o);
        break;
    }
    case R_ITEMS: get_items(h, req, hq, query); break;
    case R_CANCEL: cancel(h, req, hq, key, keylen); break;
    case R_KEY:
        if (!get)
            remove_item(h, req, hq, key, keylen);
        else if (!wq_http_item_wait(h, req, hq, key, keylen, query)) /* ?wait=S */
            get_item(h, req, hq, key, keylen);
        break;
    case R_DEAD:
        if (get) {
            get_dead(h, req, hq, query);
        } else {
            wq_bop pop = {.kind = WQ_BOP_PURGE_DEAD};
            if (remote(h, req, hq, &pop, 0))
                break;
            int n = hq->ops->purge_dead(hq->q);
            if (n < 0)
                wq_http_reply_error(req, 500, "Internal Server Error", wq_strerror(n));
            else
                wq_http_reply_durable(h, req, 200, "OK", one("purged", json_object_new_int(n)));
        }
        break;
    case R_RETRY: retry(h, req, hq, key, keylen); break;
    case R_SCHEDULES: get_schedules(h, req, hq, query); break;
    case R_GROUPS: get_groups(h, req, hq, query); break;
    case R_HISTORY: wq_http_history(h, req, hq, query); break;
    }
    free(key);
    return 1;
}
