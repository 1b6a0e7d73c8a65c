/*
 * Inbox polling: rows any process inserted into the state file's inbox
 * table become adds on the named queue. Rows the runner cannot take (no
 * such queue, an in-memory queue, a group_of that refuses them, a key or
 * group too long) stay in the table, and each reason is reported once per
 * queue name.
 */
#include "host/inbox.h"

#include "engine/group.h"
#include "engine/queue.h"
#include "store/backend.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct poll_ctx {
    wq_host *h;
};

/* Says once per queue name and reason (for the first 16 names) why its rows stay. */
static void report_once(wq_host *h, char warned[16][65], const char *queue, const char *why)
{
    for (int i = 0; i < 16; i++) {
        if (strcmp(warned[i], queue) == 0)
            return;
        if (!warned[i][0]) {
            snprintf(warned[i], sizeof warned[i], "%s", queue);
            wq_host_logl(h, WQ_LOG_WARN, "wqrun: inbox rows for queue '%s' stay in the inbox: %s",
                         queue, why);
            return;
        }
    }
}

static int take(void *ud, const wq_inbox_row *row)
{
    struct poll_ctx *c = ud;
    const char *queue = row->queue;
    const wq_hqueue *hq = wq_host_find_queue(c->h, queue);
    static char unknown[16][65], memory[16][65];
    if (!hq) {
        report_once(c->h, unknown, queue, "no such queue");
        return 0;
    }
    if (!hq->persist) {
        /* A row that reached the inbox is never lost: an in-memory queue
         * could not keep that promise, so the row waits for one that can. */
        report_once(c->h, memory, queue, "the queue has persist = false");
        return 0;
    }
    if (row->has_priority && (row->priority < INT32_MIN || row->priority > INT32_MAX)) {
        static char badprio[16][65];
        report_once(c->h, badprio, queue, "a priority that is not a 32-bit integer");
        return 0;
    }
    /* After shutdown the add is refused (WQ_ESHUTDOWN): the row stays for the next run. */
    char why[256];
    wq_ext_item it = {.key = row->key,
                      .keylen = row->keylen,
                      .payload = row->payload,
                      .paylen = row->paylen,
                      .after = row->after,
                      .has_priority = row->has_priority,
                      .priority = (int32_t)row->priority,
                      .unique = row->unique,
                      .group = row->grp,
                      .grouplen = row->grplen,
                      .why = why,
                      .whysize = sizeof why};
    int r = hq->ops->add(hq->q, &it);
    if (r == WQ_EINVAL) { /* group_of refused it: the row stays, for a fixed script */
        static char refused[16][65];
        report_once(c->h, refused, queue, why);
    } else if (r == WQ_E2BIG) { /* no queue could take it: the row stays for the user to see */
        static char big[16][65];
        char what[128];
        if (row->keylen > WQ_KEY_MAX)
            snprintf(what, sizeof what, "a key of %zu bytes (at most %u)", row->keylen,
                     (unsigned)WQ_KEY_MAX);
        else if (row->grp && row->grplen > WQ_GROUP_MAX)
            snprintf(what, sizeof what, "a group of %zu bytes (at most %d)", row->grplen,
                     WQ_GROUP_MAX);
        else
            snprintf(what, sizeof what, "a payload of %zu bytes (too large)", row->paylen);
        report_once(c->h, big, queue, what);
    } else if (r < 0 && r != WQ_ESHUTDOWN) {
        static char failed[16][65];
        report_once(c->h, failed, queue, wq_strerror(r));
    }
    return r >= 0;
}

void wq_inbox_poll(wq_host *h)
{
    if (!h->backend || h->exiting)
        return;
    struct poll_ctx c = {h};
    int r = wq_backend_poll_inbox(h->backend, take, &c);
    if (r < 0 && r != WQ_EBUSY)
        wq_host_logl(h, WQ_LOG_ERROR, "wqrun: cannot read the inbox: %s",
                     wq_backend_errmsg(h->backend));
}
