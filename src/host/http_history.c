/*
 * GET /queues/NAME/history?limit=N&before=ID: the queue's finished runs from
 * its state file, newest first, a page at a time: {"history": [RUN...],
 * "next": ID or null}; the next page is ?before=ID. On PostgreSQL the database
 * answers (any runner's runs). A runner without a state file or database
 * answers 404 saying so.
 */
#include "host/http_history.h"

#include "host/http_int.h"
#include "host/json.h"

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#define HISTORY_DEFAULT 50
#define HISTORY_MAX 1000

typedef struct page {
    json_object *runs;
    int64_t last_id;
    int nomem;
} page;

static json_object *time_or_null(double t)
{
    return t > 0 ? json_object_new_double(t) : NULL;
}

json_object *wq_http_run_json(const wq_history_view *v)
{
    json_object *o = json_object_new_object();
    if (!o)
        return NULL;
    json_object *result = NULL; /* stays NULL (null) when there is none, or it is not JSON */
    if (v->result && wq_json_parse(v->result, v->rlen, &result))
        result = NULL;
    if (v->id > 0)
        json_object_object_add(o, "id", json_object_new_int64(v->id));
    json_object_object_add(o, "key", json_object_new_string_len(v->key, (int)v->keylen));
    json_object_object_add(o, "state", json_object_new_string(v->state ? v->state : ""));
    json_object_object_add(o, "added_at", time_or_null(v->added_at));
    json_object_object_add(o, "started_at", time_or_null(v->started_at));
    json_object_object_add(o, "finished_at", time_or_null(v->finished_at));
    json_object_object_add(o, "attempts", json_object_new_int64(v->attempts));
    json_object_object_add(o, "runner", v->runner ? json_object_new_string(v->runner) : NULL);
    json_object_object_add(o, "result", result);
    json_object_object_add(o, "error", v->error ? json_object_new_string(v->error) : NULL);
    return o;
}

static void on_run(void *ud, const wq_history_view *v)
{
    page *p = ud;
    json_object *o = wq_http_run_json(v);
    if (!o || json_object_array_add(p->runs, o) < 0) {
        json_object_put(o);
        p->nomem = 1;
        return;
    }
    p->last_id = v->id;
}

/* limit and before from the query; 1, or 0 after answering 400. */
static int read_query(struct evhttp_request *req, const char *query, size_t *limit, int64_t *before)
{
    if (!query || !*query)
        return 1;
    struct evkeyvalq params;
    if (evhttp_parse_query_str(query, &params) != 0) {
        wq_http_reply_error(req, 400, "Bad Request", "malformed query");
        return 0;
    }
    int ok = 1;
    for (struct evkeyval *kv = params.tqh_first; kv && ok; kv = kv->next.tqe_next) {
        char *end = NULL;
        long long v = strtoll(kv->value, &end, 10);
        if (strcmp(kv->key, "limit") == 0 && *kv->value && !*end && v >= 1 && v <= HISTORY_MAX) {
            *limit = (size_t)v;
        } else if (strcmp(kv->key, "before") == 0 && *kv->value && !*end && v >= 1) {
            *before = v;
        } else {
            char msg[160];
            snprintf(msg, sizeof msg,
                     "bad parameter '%.40s' (limit: 1 to %d; before: a row id > 0)", kv->key,
                     HISTORY_MAX);
            wq_http_reply_error(req, 400, "Bad Request", msg);
            ok = 0;
        }
    }
    evhttp_clear_headers(&params);
    return ok;
}

void wq_http_history(wq_host *h, struct evhttp_request *req, const wq_hqueue *hq, const char *query)
{
    size_t limit = HISTORY_DEFAULT;
    int64_t before = 0;
    if (!read_query(req, query, &limit, &before))
        return;
    /* one more than the page: whether there is a next one */
    wq_bop op = {.kind = WQ_BOP_HISTORY, .before = before, .limit = limit + 1};
    if (wq_http_remote(h, req, hq, &op, limit))
        return;
    page p = {json_object_new_array(), 0, 0};
    /* one more than the page: whether there is a next one */
    int n = p.runs && hq->ops->history ? hq->ops->history(hq->q, before, limit + 1, on_run, &p)
                                       : WQ_ENOMEM;
    if (n == WQ_ENOENT) {
        json_object_put(p.runs);
        wq_http_reply_error(req, 404, "Not Found",
                            "no history: only a state file (--db FILE) keeps it, for the queue's "
                            "history seconds");
        return;
    }
    json_object *body = json_object_new_object();
    if (n < 0 || p.nomem || !body) {
        json_object_put(p.runs);
        json_object_put(body);
        wq_http_reply_error(req, 500, "Internal Server Error",
                            n == WQ_EIO ? "cannot read the state file" : "out of memory");
        return;
    }
    int64_t next = 0;
    if ((size_t)n > limit) { /* the extra row only says there is more */
        json_object_array_del_idx(p.runs, limit, 1);
        next = json_object_get_int64(
            json_object_object_get(json_object_array_get_idx(p.runs, limit - 1), "id"));
    }
    json_object_object_add(body, "history", p.runs);
    json_object_object_add(body, "next", next ? json_object_new_int64(next) : NULL);
    wq_http_reply_json(req, 200, "OK", body);
}
