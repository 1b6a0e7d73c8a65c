/*
 * The HTTP API (--listen): metrics, queue summaries, enqueueing.
 */
#ifndef WQ_HTTP_H
#define WQ_HTTP_H

#include "host/host.h"

/* Binds addr ("HOST:PORT") and serves. 0, or -1 after printing why. */
int wq_http_start(wq_host *h, const char *addr);
/* Stops serving and frees the server. Fine when not serving. */
void wq_http_stop(wq_host *h);

#endif
