/*
 * The flow routes of the HTTP API (SPEC 9): POST /flows, GET /flows, GET /flows/ID,
 * POST /flows/ID/cancel.
 */
#ifndef WQ_HTTP_FLOWS_H
#define WQ_HTTP_FLOWS_H

#include "host/host.h"

#include <event2/http.h>

/* Serves path when it is a flow route: 1 (answered, now or once the database answers), else 0. */
int wq_http_flows(wq_host *h, struct evhttp_request *req, const char *path, const char *query,
                  enum evhttp_cmd_type cmd);
/* The server is stopping: requests still waiting for the database are never answered. */
void wq_http_flows_stop(void);

#endif
