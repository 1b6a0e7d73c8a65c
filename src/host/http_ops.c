/*
 * The operator routes of the HTTP API (SPEC 7.5), under /queues/NAME/:
 * pause and resume, listing and removing pending items, cancelling a
 * running one, listing, retrying and purging dead letters. Keys travel in
 * the path, percent-encoded (a key may hold '/', '%', spaces, any byte).
 * Every change is answered only once it is committed (as POST items is):
 * an acknowledged remove or retry survives a kill -9. A request that
 * names no queue or key, or asks the impossible, gets a 4xx JSON error
 * and changes nothing.
 */
#include "host/http_ops.h"
#include "store/backend.h"

#include "host/commands.h"
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

static void on_item(void *ud, const wq_item_view *it)
{
    struct items_ctx *c = ud;
    if (c->n++ == c->limit) {
        c->more = 1; /* one beyond the page: there is a next one */
        return;
    }
    json_object *o = json_object_new_object();
    if (!o) {
        c->nomem = 1;
        return;
    }
    json_object_object_add(o, "key", bytes(it->key, it->keylen));
    json_object_object_add(o, "payload", payload_value(it->payload, it->paylen));
    json_object_object_add(o, "state", json_object_new_string(it->state));
    json_object_object_add(o, "priority", json_object_new_int(it->priority));
    json_object_object_add(o, "group", it->group ? bytes(it->group, it->grouplen) : NULL);
    json_object_object_add(o, "ready_at",
                           it->ready_at > 0 ? json_object_new_double(it->ready_at) : NULL);
    json_object_object_add(o, "attempt", json_object_new_int64(it->attempt));
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

static void get_items(struct evhttp_request *req, const wq_hqueue *hq, const char *query)
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

static void on_dead(void *ud, const wq_dead_view *d)
{
    struct dead_ctx *c = ud;
    if (c->n++ >= c->limit)
        return;
    json_object *o = json_object_new_object();
    if (!o) {
        c->nomem = 1;
        return;
    }
    json_object_object_add(o, "key", bytes(d->key, d->keylen));
    json_object_object_add(o, "payload", payload_value(d->payload, d->paylen));
    json_object_object_add(o, "error", d->error ? json_object_new_string(d->error) : NULL);
    json_object_object_add(o, "attempts", json_object_new_int64(d->attempts));
    json_object_object_add(o, "failed_at", json_object_new_double(d->failed_at));
    json_object_array_add(c->dead, o);
}

static void get_dead(struct evhttp_request *req, const wq_hqueue *hq, const char *query)
{
    size_t limit = DEAD_DEFAULT;
    if (query && *query) {
        char *e;
        long l = strncmp(query, "limit=", 6) == 0 ? strtol(query + 6, &e, 10) : -1;
        if (l < 1 || l > DEAD_MAX || *e) {
            bad_request(req, "the only parameter is limit, an integer from 1 to 10000");
            return;
        }
        limit = (size_t)l;
    }
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
    enum { R_QUEUE, R_PAUSE, R_RESUME, R_ITEMS, R_CANCEL, R_REMOVE, R_DEAD, R_RETRY } route;
    if (!*rest || strcmp(rest, "/") == 0)
        route = R_QUEUE;
    else if (strcmp(rest, "/pause") == 0)
        route = R_PAUSE;
    else if (strcmp(rest, "/resume") == 0)
        route = R_RESUME;
    else if (strcmp(rest, "/items") == 0)
        route = R_ITEMS;
    else if (post && keyed(rest, "/items/", "/cancel", &k, &kn))
        route = R_CANCEL;
    else if (keyed(rest, "/items/", "", &k, &kn))
        route = R_REMOVE; /* any other method: 405 below */
    else if (strcmp(rest, "/dead") == 0)
        route = R_DEAD;
    else if (keyed(rest, "/dead/", "/retry", &k, &kn))
        route = R_RETRY;
    else
        return 0;
    int allowed;
    const char *allow;
    switch (route) {
    case R_QUEUE: allowed = get, allow = "GET, HEAD"; break;
    case R_PAUSE:
    case R_RESUME:
    case R_CANCEL:
    case R_RETRY: allowed = post, allow = "POST"; break;
    case R_ITEMS: allowed = get, allow = "GET, HEAD, POST"; break; /* POST: http.c */
    case R_REMOVE: allowed = del, allow = "DELETE"; break;
    case R_DEAD: allowed = get || del, allow = "GET, HEAD, DELETE"; break;
    default: allowed = 0, allow = ""; break;
    }
    if (!allowed) {
        wq_http_not_allowed(req, allow);
        return 1;
    }
    const wq_hqueue *hq = wq_host_find_queue(h, qname);
    if (!hq) {
        wq_http_reply_error(req, 404, "Not Found", "no such queue");
        return 1;
    }
    /* Operations the backend cannot do yet answer so, instead of acting on this runner alone. */
    const char *op = route == R_PAUSE || route == R_RESUME ? "pause"
                     : route == R_ITEMS                    ? "items"
                     : route == R_CANCEL                   ? "cancel"
                     : route == R_REMOVE                   ? "remove"
                     : route == R_DEAD                     ? "dead"
                     : route == R_RETRY                    ? "retry_dead"
                                                           : NULL;
    const char *refused =
        op && hq->persist && h->backend ? wq_backend_refuse(h->backend, op) : NULL;
    if (refused) {
        wq_http_reply_error(req, 501, "Not Implemented", refused);
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
    case R_QUEUE: wq_http_reply_json(req, 200, "OK", wq_http_queue_summary(hq)); break;
    case R_PAUSE:
    case R_RESUME: {
        int pause = route == R_PAUSE;
        int changed = hq->ops->pause(hq->q, pause);
        json_object *o = one("paused", json_object_new_boolean(pause));
        if (o)
            json_object_object_add(o, "changed", json_object_new_boolean(changed));
        wq_http_reply_durable(h, req, 200, "OK", o);
        break;
    }
    case R_ITEMS: get_items(req, hq, query); break;
    case R_CANCEL: cancel(h, req, hq, key, keylen); break;
    case R_REMOVE: remove_item(h, req, hq, key, keylen); break;
    case R_DEAD:
        if (get) {
            get_dead(req, hq, query);
        } else {
            int n = hq->ops->purge_dead(hq->q);
            if (n < 0)
                wq_http_reply_error(req, 500, "Internal Server Error", wq_strerror(n));
            else
                wq_http_reply_durable(h, req, 200, "OK", one("purged", json_object_new_int(n)));
        }
        break;
    case R_RETRY: retry(h, req, hq, key, keylen); break;
    }
    free(key);
    return 1;
}
