/*
 * Feeding queues from the state file's inbox table (SPEC section 4).
 */
#ifndef WQ_INBOX_H
#define WQ_INBOX_H

#include "host/host.h"

/* Moves new inbox rows into their queues; reports rows of unknown queues once. */
void wq_inbox_poll(wq_host *h);

#endif
