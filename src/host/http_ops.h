/*
 * The operator routes of the HTTP API (SPEC 7.5): pause, resume, items,
 * dead letters, retry, remove and cancel under /queues/NAME/.
 */
#ifndef WQ_HTTP_OPS_H
#define WQ_HTTP_OPS_H

#include "host/host.h"

#include <event2/http.h>

/*
 * Serves an authorized request for an operator route; path is the raw
 * (percent-encoded) path, query the raw query or NULL. Returns 1 when it
 * answered, 0 when path is none of them.
 */
int wq_http_ops(wq_host *h, struct evhttp_request *req, const char *path, const char *query,
                enum evhttp_cmd_type cmd);

/* Answers GET /queues/NAME/items/KEY now: what the queue knows of key. */
void wq_http_item_now(wq_host *h, struct evhttp_request *req, const wq_hqueue *hq, const char *key,
                      size_t len);

/* The server stops: replies still waiting for the database will answer nobody. */
void wq_http_ops_stop(void);

#endif
