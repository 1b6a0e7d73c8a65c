/*
 * Remote workers over HTTP (SPEC 10.2): POST /queues/NAME/claim, POST
 * /queues/NAME/items/KEY/done|fail|heartbeat and their batched forms
 * POST /queues/NAME/done|fail|heartbeat.
 */
#ifndef WQ_HTTP_WORKERS_H
#define WQ_HTTP_WORKERS_H

#include "host/host.h"

#include <event2/http.h>

/* Serves path if it is one of these routes: 1 answered (now or later), 0 not one of them. */
int wq_http_workers(wq_host *h, struct evhttp_request *req, const char *path,
                    enum evhttp_cmd_type cmd);

#endif
