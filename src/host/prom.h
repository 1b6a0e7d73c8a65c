/*
 * Prometheus text exposition of every queue's metrics (SPEC section 5)
 * and the runner's own extras.
 */
#ifndef WQ_PROM_H
#define WQ_PROM_H

#include "host/host.h"

struct evbuffer;

/* Appends the metrics text of every queue and of the state file to out. */
void wq_prom_render(wq_host *h, struct evbuffer *out);

#endif
