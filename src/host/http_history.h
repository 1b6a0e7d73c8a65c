/*
 * GET /queues/NAME/history: a queue's finished runs, newest first (SPEC 11).
 */
#ifndef WQ_HTTP_HISTORY_H
#define WQ_HTTP_HISTORY_H

#include "host/host.h"

#include <json-c/json_object.h>

struct evhttp_request;

/* A finished run as GET history lists it and a ?wait= answer gives it (with "id" first when
 * v->id > 0); NULL on OOM. */
json_object *wq_http_run_json(const wq_history_view *v);

/* Answers GET /queues/NAME/history[?limit=N&before=ID] for hq. */
void wq_http_history(wq_host *h, struct evhttp_request *req, const wq_hqueue *hq,
                     const char *query);

#endif
