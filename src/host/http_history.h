/*
 * GET /queues/NAME/history: a queue's finished runs, newest first (SPEC 11).
 */
#ifndef WQ_HTTP_HISTORY_H
#define WQ_HTTP_HISTORY_H

#include "host/host.h"

struct evhttp_request;

/* Answers GET /queues/NAME/history[?limit=N&before=ID] for hq. */
void wq_http_history(wq_host *h, struct evhttp_request *req, const wq_hqueue *hq,
                     const char *query);

#endif
