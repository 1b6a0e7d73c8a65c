/*
 * GET /queues/NAME/items/KEY?wait=SECONDS: the long poll for a key's end
 * (SPEC 11).
 */
#ifndef WQ_HTTP_WAIT_H
#define WQ_HTTP_WAIT_H

#include "host/host.h"

#include <event2/http.h>

/* With query "wait=S": answers (400, or holds req until key's end or S seconds), 1; 0 when the
 * item is to be answered now (no query, S = 0, or key not pending here). */
int wq_http_item_wait(wq_host *h, struct evhttp_request *req, const wq_hqueue *hq, const char *key,
                      size_t len, const char *query);

#endif
