/*
 * GET /events[?queue=NAME]: the queues' events as Server-Sent Events
 * (SPEC 11; events.h).
 */
#ifndef WQ_HTTP_EVENTS_H
#define WQ_HTTP_EVENTS_H

#include "host/host.h"

#include <event2/http.h>

/* Answers GET /events (query: NULL or "queue=NAME") with a stream that lasts. */
void wq_http_events(wq_host *h, struct evhttp_request *req, const char *query);
/* The server stops: its connections, and the streams on them, go. */
void wq_http_events_stop(void);

#endif
