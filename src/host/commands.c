/*
 * The runner's side of `wqrun pause|resume|remove|cancel|retry|purge-dead`
 * (SPEC 7.5). The command line writes a row into the state file's
 * commands table; the tick (every 50 ms) offers new rows here, each is
 * applied through the queue's wq_queue_ops, and its outcome is written
 * with the same commit as the changes it made (wq_backend_command_result):
 * a crash before that commit loses both, and the next runner applies the
 * row again. A cancel is answered once the cancelled run has ended, so
 * its outcome commits with the removal of the item. A row that makes no
 * sense (hand-written garbage) is logged once and marked failed.
 */
#include "host/commands.h"

#include "host/flows.h"

#include "engine/common.h"
#include "store/backend.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cancel_waiter {
    void *q;
    char *key;
    size_t len;
    wq_durable_fn fn;
    void *ud;
    struct cancel_waiter *next;
};

int wq_host_when_cancelled(wq_host *h, void *q, const char *key, size_t len, wq_durable_fn fn,
                           void *ud)
{
    struct cancel_waiter *w = malloc(sizeof *w);
    char *k = malloc(len + 1);
    if (!w || !k) {
        free(w);
        free(k);
        return -1;
    }
    if (len)
        memcpy(k, key, len);
    *w = (struct cancel_waiter){q, k, len, fn, ud, h->cancel_waiters};
    h->cancel_waiters = w;
    return 0;
}

void wq_host_cancelled(wq_host *h, void *q, const char *key, size_t len)
{
    /* Take the matching ones first: a callback may register again. */
    struct cancel_waiter *done = NULL, **pp = &h->cancel_waiters;
    while (*pp) {
        struct cancel_waiter *w = *pp;
        if (w->q == q && w->len == len && (len == 0 || memcmp(w->key, key, len) == 0)) {
            *pp = w->next;
            w->next = done;
            done = w;
        } else {
            pp = &w->next;
        }
    }
    while (done) {
        struct cancel_waiter *w = done;
        done = w->next;
        w->fn(w->ud, 1);
        free(w->key);
        free(w);
    }
}

void wq_commands_abandon(wq_host *h)
{
    while (h->cancel_waiters) {
        struct cancel_waiter *w = h->cancel_waiters;
        h->cancel_waiters = w->next;
        w->fn(w->ud, 0);
        free(w->key);
        free(w);
    }
}

/* A cancel waits for the run to end: then its outcome is written. */
struct pending_cancel {
    wq_host *h;
    int64_t id;
    char text[WQ_SHOWN_KEY + 160];
};

static void cancel_ended(void *ud, int ok)
{
    struct pending_cancel *p = ud;
    /* Not ok: the process ends first. The row stays 'new' for the next runner, which finds the
     * key no longer running (it runs again after a restart) and says so. */
    if (ok && p->h->backend) {
        wq_backend_command_result(p->h->backend, p->id, 1, p->text);
        wq_host_log(p->h, "wqrun: command %lld: %s", (long long)p->id, p->text);
    }
    free(p);
}

static const char ops_list[] =
    "pause, resume, remove, cancel, retry, retry_all, purge_dead, add_flow, cancel_flow";

/* add_flow's answer from the runner's own flow set (given before wq_host_flow_add returns). */
struct flow_answer {
    int result;
    char text[512];
};

static void flow_answered(void *ud, int result, const char *text)
{
    struct flow_answer *a = ud;
    a->result = result;
    snprintf(a->text, sizeof a->text, "%s", text ? text : "");
}

/* The flow commands (`wqrun add-flow`, `wqrun flow cancel`): key holds the document or the id. */
static int apply_flow(wq_host *h, const wq_command *c, char *msg, size_t len)
{
    if (!c->key) {
        snprintf(msg, len, "%s needs a key (the flow document or id)", c->op);
        return 0;
    }
    if (strcmp(c->op, "add_flow") == 0) {
        struct flow_answer a = {WQ_EIO, "not answered"};
        int r = wq_host_flow_add(h, c->key, c->keylen, flow_answered, &a);
        if (r < 0)
            snprintf(msg, len, "%s", wq_strerror(r));
        else if (a.result < 0)
            snprintf(msg, len, "%s", a.text);
        else
            snprintf(msg, len, "added flow %.200s", a.text);
        return r == 0 && a.result == 0;
    }
    char id[201];
    snprintf(id, sizeof id, "%.*s", (int)(c->keylen < 200 ? c->keylen : 200), c->key);
    int n = wq_host_flow_cancel(h, id);
    if (n < 0)
        snprintf(msg, len, "no flow '%s' in this runner", id);
    else
        snprintf(msg, len, "cancelled flow '%s': %d unfinished node%s", id, n, n == 1 ? "" : "s");
    return n >= 0;
}

/*
 * For the crash tests: WQ_TEST_KILL_AT_COMMAND=received kills the process
 * (SIGKILL, as kill -9 does) once a command row is read, =applied once it
 * is applied, before anything of it is committed.
 */
static void test_kill(const char *at)
{
    const char *e = getenv("WQ_TEST_KILL_AT_COMMAND");
    if (e && strcmp(e, at) == 0)
        raise(SIGKILL);
}

static void apply(void *ud, const wq_command *c)
{
    wq_host *h = ud;
    test_kill("received");
    char msg[WQ_SHOWN_KEY + 256], key[WQ_SHOWN_KEY];
    int ok = 0;
    const wq_hqueue *hq = NULL;
    const char *op = c->op ? c->op : "";
    int needs_key =
        strcmp(op, "remove") == 0 || strcmp(op, "cancel") == 0 || strcmp(op, "retry") == 0;
    if (c->key)
        wq_show_key(key, c->key, c->keylen);
    if (c->op && (strcmp(op, "add_flow") == 0 || strcmp(op, "cancel_flow") == 0)) {
        ok = apply_flow(h, c, msg, sizeof msg);
    } else if (!c->queue || !c->op) {
        snprintf(msg, sizeof msg, "a command needs a queue and an op (%s)", ops_list);
    } else if (!(hq = wq_host_find_queue(h, c->queue))) {
        snprintf(msg, sizeof msg, "no such queue '%.64s' in this runner", c->queue);
    } else if (needs_key && !c->key) {
        snprintf(msg, sizeof msg, "%.16s needs a key", op);
    } else if (strcmp(op, "pause") == 0 || strcmp(op, "resume") == 0) {
        int pause = op[0] == 'p';
        int changed = hq->ops->pause(hq->q, pause);
        snprintf(msg, sizeof msg, changed ? "%s queue '%s'" : "queue '%s' was %s already",
                 changed ? (pause ? "paused" : "resumed") : hq->name,
                 changed ? hq->name : (pause ? "paused" : "running"));
        ok = 1;
    } else if (strcmp(op, "remove") == 0) {
        int r = hq->ops->remove(hq->q, c->key, c->keylen);
        if (r == 0)
            snprintf(msg, sizeof msg, "removed '%s' from queue '%s'", key, hq->name);
        else if (r == WQ_EBUSY)
            snprintf(msg, sizeof msg, "'%s' is processing in queue '%s' (cancel it instead)", key,
                     hq->name);
        else
            snprintf(msg, sizeof msg, "no queued or delayed item '%s' in queue '%s'", key,
                     hq->name);
        ok = r == 0;
    } else if (strcmp(op, "cancel") == 0) {
        int r = hq->ops->cancel(hq->q, c->key, c->keylen);
        if (r == 0) {
            struct pending_cancel *p = malloc(sizeof *p);
            if (p) {
                p->h = h;
                p->id = c->id;
                snprintf(p->text, sizeof p->text, "cancelled '%s' in queue '%s'", key, hq->name);
                if (wq_host_when_cancelled(h, hq->q, c->key, c->keylen, cancel_ended, p) == 0)
                    return; /* answered when the run has ended */
                free(p);
            }
            snprintf(msg, sizeof msg, "out of memory");
        } else if (r == WQ_EBUSY) {
            snprintf(msg, sizeof msg, "'%s' is not processing in queue '%s'", key, hq->name);
        } else {
            snprintf(msg, sizeof msg, "no item '%s' in queue '%s'", key, hq->name);
        }
    } else if (strcmp(op, "retry") == 0 || strcmp(op, "retry_all") == 0) {
        int all = strcmp(op, "retry_all") == 0;
        int n = hq->ops->retry_dead(hq->q, all ? NULL : c->key, all ? 0 : c->keylen);
        if (n < 0)
            snprintf(msg, sizeof msg, "%s", wq_strerror(n));
        else if (all)
            snprintf(msg, sizeof msg, "re-queued %d dead letter%s of queue '%s'", n,
                     n == 1 ? "" : "s", hq->name);
        else if (n)
            snprintf(msg, sizeof msg, "re-queued dead letter '%s' of queue '%s'", key, hq->name);
        else
            snprintf(msg, sizeof msg, "no dead letter '%s' in queue '%s'", key, hq->name);
        ok = n > 0 || (all && n == 0);
    } else if (strcmp(op, "purge_dead") == 0) {
        int n = hq->ops->purge_dead(hq->q);
        if (n < 0)
            snprintf(msg, sizeof msg, "%s", wq_strerror(n));
        else
            snprintf(msg, sizeof msg, "purged %d dead letter%s of queue '%s'", n, n == 1 ? "" : "s",
                     hq->name);
        ok = n >= 0;
    } else {
        snprintf(msg, sizeof msg, "unknown op '%.32s' (expected %s)", op, ops_list);
    }
    test_kill("applied");
    wq_backend_command_result(h->backend, c->id, ok, msg);
    wq_host_logl(h, ok ? WQ_LOG_INFO : WQ_LOG_WARN, "wqrun: command %lld%s: %s", (long long)c->id,
                 ok ? "" : " failed", msg);
}

void wq_commands_poll(wq_host *h)
{
    static int failed; /* said once: a failing read would say it every tick */
    if (!h->backend || h->exiting || h->store_failed)
        return;
    int r = wq_backend_poll_commands(h->backend, apply, h);
    if (r < 0 && r != WQ_EBUSY && !failed) {
        failed = 1;
        wq_host_logl(h, WQ_LOG_ERROR, "wqrun: cannot read the commands: %s",
                     wq_backend_errmsg(h->backend));
    } else if (r >= 0) {
        failed = 0;
    }
}
