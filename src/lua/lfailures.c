/*
 * Per-key failure records of a queue (see lfailures.h). Counts live in
 * lq->failures; the last messages in lq->last_errors, as the addresses of
 * malloc'd copies cut to LFAIL_ERROR_MAX bytes: a queue whose keys all fail
 * with long output (a wq.exec's stderr) keeps a bounded part of each.
 * Without a shared database this memory is the only place the runner reads
 * them from (the SQLite file holds them for restarts and `wqrun items`).
 */
#include "lua/lfailures.h"

#include "engine/common.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

int lfail_open(lqueue *lq)
{
    lq->failures = wq_keymap_new();
    lq->last_errors = wq_keymap_new();
    if (lq->failures && lq->last_errors)
        return 0;
    lfail_close(lq);
    return WQ_ENOMEM;
}

static void free_message(uint64_t v)
{
    wq_free((void *)(uintptr_t)v);
}

void lfail_close(lqueue *lq)
{
    if (lq->last_errors) {
        size_t pos = 0, len;
        const char *key;
        uint64_t v;
        while (wq_keymap_next(lq->last_errors, &pos, &key, &len, &v))
            free_message(v);
    }
    wq_keymap_free(lq->last_errors);
    wq_keymap_free(lq->failures);
    lq->last_errors = NULL;
    lq->failures = NULL;
    lq->nfail_zero = 0;
}

int64_t lfail_count(const lqueue *lq, const char *key, size_t len)
{
    const uint64_t *v = wq_keymap_get(lq->failures, key, len);
    return v ? (int64_t)*v : 0;
}

const char *lfail_last_error(const lqueue *lq, const char *key, size_t len)
{
    const uint64_t *v = wq_keymap_get(lq->last_errors, key, len);
    return v ? (const char *)(uintptr_t)*v : NULL;
}

/* Drops key's kept message, if any. */
static void drop_message(lqueue *lq, const char *key, size_t len)
{
    uint64_t *v = wq_keymap_get(lq->last_errors, key, len);
    if (!v)
        return;
    free_message(*v);
    wq_keymap_del(lq->last_errors, key, len);
}

int lfail_set(lqueue *lq, const char *key, size_t len, int64_t count, const char *err)
{
    char *copy = NULL;
    if (err) {
        size_t n = wq_utf8_cut(err, strlen(err), LFAIL_ERROR_MAX);
        if (!(copy = wq_malloc(n + 1)))
            return WQ_ENOMEM;
        memcpy(copy, err, n);
        copy[n] = '\0';
    }
    int created;
    uint64_t *c = wq_keymap_put(lq->failures, key, len, &created);
    uint64_t *m = c && copy ? wq_keymap_put(lq->last_errors, key, len, NULL) : NULL;
    if (!c || (copy && !m)) {
        if (c && created)
            wq_keymap_del(lq->failures, key, len);
        wq_free(copy);
        return WQ_ENOMEM;
    }
    if (!created && *c == 0)
        lq->nfail_zero--;
    *c = (uint64_t)count;
    if (count == 0)
        lq->nfail_zero++;
    if (copy) {
        free_message(*m); /* 0 (NULL) for a new entry */
        *m = (uint64_t)(uintptr_t)copy;
    } else {
        drop_message(lq, key, len);
    }
    return 0;
}

int lfail_clear(lqueue *lq, const char *key, size_t len)
{
    drop_message(lq, key, len);
    const uint64_t *c = wq_keymap_get(lq->failures, key, len);
    if (c && *c == 0)
        lq->nfail_zero--;
    return wq_keymap_del(lq->failures, key, len);
}

size_t lfail_keys(const lqueue *lq)
{
    return wq_keymap_count(lq->failures) - lq->nfail_zero;
}

void lfail_log(lqueue *lq, const char *key, size_t len, int64_t attempt, const char *err,
               lfail_outcome how, int64_t retry_ns)
{
    if (how == LFAIL_RETRY && lq->host->opts.quiet)
        return;
    char shown[WQ_SHOWN_KEY], msg[LFAIL_LOG_MAX + 1];
    wq_show_key(shown, key, len);
    wq_show_line(msg, sizeof msg, err);
    long long n = (long long)attempt;
    double s = how == LFAIL_RETRY ? (double)retry_ns / (double)WQ_NS_PER_S : 0;
    /* JSON lines carry the parts as fields; text has them in the message. */
    wq_log_field f[] = {
        WQ_LOG_STR("queue", lq->name),
        WQ_LOG_BYTES("key", key, len),
        WQ_LOG_NUM("attempt", n),
        WQ_LOG_STR("error", msg),
        WQ_LOG_STR("outcome", how == LFAIL_RETRY ? "retry" : "dead"),
    };
    size_t nf = sizeof f / sizeof *f;
    if (how == LFAIL_RETRY) {
        wq_host_logf(lq->host, WQ_LOG_WARN, f, nf,
                     s < 100 ? "wqrun: %s: '%s' failed (attempt %lld), next try in %.3g s: %s"
                             : "wqrun: %s: '%s' failed (attempt %lld), next try in %.0f s: %s",
                     lq->name, shown, n, s, msg);
    } else if (how == LFAIL_PERMANENT) { /* a dead letter: error, as retries exhausted */
        wq_host_logf(lq->host, WQ_LOG_ERROR, f, nf,
                     "wqrun: %s: '%s' failed for good (wq.fail, attempt %lld), dead-lettered: %s",
                     lq->name, shown, n, msg);
    } else {
        wq_host_logf(lq->host, WQ_LOG_ERROR, f, nf,
                     "wqrun: %s: '%s' failed %lld time%s, dead-lettered: %s", lq->name, shown, n,
                     n == 1 ? "" : "s", msg);
    }
}
