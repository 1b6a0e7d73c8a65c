/*
 * The HTTP API (--listen): metrics, queue summaries, enqueueing.
 */
#ifndef WQ_HTTP_H
#define WQ_HTTP_H

#include "host/host.h"

#include <stddef.h>

/*
 * Splits a --listen value "HOST:PORT" ("[V6]:PORT") into host (size bytes)
 * and port (1-65535). NULL, or what is wrong with it.
 */
const char *wq_http_parse_listen(const char *addr, char *host, size_t size, int *port);
/* Binds addr ("HOST:PORT") and serves. 0, or -1 after printing why. */
int wq_http_start(wq_host *h, const char *addr);
/* Stops listening: connections from now on are refused; those open are still served (until
 * wq_http_stop). For the end of the loop: a connection the kernel accepted that the server
 * would never read would be reset at exit. Fine when not serving. */
void wq_http_unlisten(wq_host *h);
/* Stops serving and frees the server. Fine when not serving. */
void wq_http_stop(wq_host *h);

#endif
