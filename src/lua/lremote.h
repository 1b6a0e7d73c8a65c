/*
 * Remote workers (SPEC 10.2): claims, leases and reports of items handed
 * out over HTTP (the routes are host/http_workers.c); the queue's face for
 * them in wq_queue_ops (claim, claim_wait, claim_unwait, report).
 */
#ifndef WQ_LREMOTE_H
#define WQ_LREMOTE_H

#include "lua/lqueue.h"

typedef struct lremote lremote;

int lremote_claim(void *q, size_t max, double lease, void (*fn)(void *ud, const wq_claim_view *c),
                  void *ud);
void *lremote_claim_wait(void *q, size_t max, void (*fn)(void *ud), void *ud);
void lremote_claim_unwait(void *q, void *handle);
int lremote_report(void *q, wq_report *r);

/* Items may have come (or the queue resumed, or began to stop): the waiting claims look again. */
void lremote_ready(lqueue *lq);
/* The items the waiting claims ask for (a backend that claims counts them as wanted). */
size_t lremote_demand(const lqueue *lq);
/* Cancels the remote run of key: 0 (its worker is told at its next heartbeat, and its report
 * or the lease's end finishes it as cancelled), WQ_EBUSY (no remote worker holds it). */
int lremote_cancel(lqueue *lq, const char *key, size_t len);
/* This runner lost its claims (PostgreSQL: declared dead): every remote run ends here, as a
 * handler's does (its outcome discarded by the database); their tokens answer 409 from now. */
void lremote_lost(lqueue *lq);
/* How many items remote workers hold. */
size_t lremote_held(const lqueue *lq);
/* key's outcome is committed (ok 1), or every report waiting for its commit is not (key NULL,
 * ok 0: the runner lost its claims): their answers go. */
void lremote_committed(lqueue *lq, const char *key, size_t len, int ok);
/* Frees what the queue keeps for remote workers; waiting claims are answered first. */
void lremote_close(lqueue *lq);

#endif
