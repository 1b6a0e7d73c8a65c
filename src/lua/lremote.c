/*
 * Remote workers (SPEC 10.2): items handed out over HTTP to a worker in any
 * language on any machine, under the rules a handler's run obeys. A claim
 * takes items from the engine as a handler worker's get does (so
 * exclusivity, the follow-up rule, group limits, rates and pause hold as
 * they are) and leases each under a token; the worker's report ends the run
 * through the handler's own outcome paths (lworker_end_*): success, a
 * counted failure with its retry or dead letter, or, for a key cancelled
 * meanwhile, the cancel. A lease that runs out hands the item back: pending
 * again, no failure counted; LOST_MAX of them in a row dead-letter the key
 * (as a runner's deaths do on PostgreSQL). A report or heartbeat with a
 * token that is not the claim's changes nothing.
 */
#include "lua/lremote.h"

#include "engine/common.h"
#include "host/events.h"
#include "host/timer.h"
#include "lua/lflow.h"
#include "lua/ljson.h"
#include "lua/lworker.h"
#include "lua/lwq.h"

#include <event2/event.h>
#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define LOST_MAX 5 /* leases run out in a row before the key is dead-lettered */

typedef struct rjob {
    struct lremote *r;
    char *key;
    size_t keylen;
    char token[25];
    int64_t lease_ns; /* the claim's lease: a heartbeat extends it by as much */
    int64_t until;    /* host clock */
    uint64_t timer;
    int cancelled;
} rjob;

typedef struct rwait {
    struct lremote *r;
    size_t max;
    void (*fn)(void *ud);
    void *ud;
    struct rwait *next, *prev;
} rwait;

/* A report answered once its outcome is committed (a backend whose outcomes commit later). */
typedef struct rack {
    char *key;
    size_t keylen;
    void (*fn)(void *ud, int ok);
    void *ud;
    struct rack *next;
} rack;

struct lremote {
    lqueue *lq;
    rack *acks;
    wq_keymap *jobs; /* claimed key -> its rjob */
    wq_keymap *lost; /* key -> leases run out in a row */
    rwait *waits;
    size_t waiting;     /* the items the waiting claims ask for */
    struct event *poke; /* wakes the waits at the loop's next turn, NULL until needed */
    uint64_t lose;      /* the timer that ends every run after the claims were lost, 0: none */
    uint32_t seed;
    uint64_t seq;
};

static lremote *state(lqueue *lq)
{
    if (lq->remote)
        return lq->remote;
    lremote *r = calloc(1, sizeof *r);
    if (!r || !(r->jobs = wq_keymap_new()) || !(r->lost = wq_keymap_new())) {
        if (r)
            wq_keymap_free(r->jobs);
        free(r);
        return NULL;
    }
    r->lq = lq;
    if (getrandom(&r->seed, sizeof r->seed, 0) != (ssize_t)sizeof r->seed)
        r->seed = (uint32_t)wq_hash(&r, sizeof r);
    lq->remote = r;
    return r;
}

static rjob *find(lremote *r, const char *key, size_t len)
{
    uint64_t *v = r ? wq_keymap_get(r->jobs, key, len) : NULL;
    return v ? (rjob *)(uintptr_t)*v : NULL;
}

static void job_free(rjob *j)
{
    wq_host *h = j->r->lq->host;
    if (j->timer)
        wq_timer_stop(h, j->timer);
    wq_keymap_del(j->r->jobs, j->key, j->keylen);
    free(j->key);
    free(j);
}

/* ---- ending a run: the handler's outcome paths, protected (they raise on out of memory) ---- */

typedef struct end_args {
    lqueue *lq;
    const char *key;
    size_t len;
    int how; /* 0 done, 1 failed, 2 cancelled, 3 handed back */
    const char *result, *error;
    size_t rlen;
    int permanent;
    int64_t retry_in;
} end_args;

static int end_p(lua_State *L)
{
    end_args *a = lua_touserdata(L, 1);
    switch (a->how) {
    case 0: lworker_end_done(L, a->lq, a->key, a->len, a->result, a->rlen); break;
    case 1:
        lworker_end_failed(L, a->lq, a->key, a->len, a->error, a->permanent, a->retry_in);
        break;
    case 2: lworker_end_cancelled(L, a->lq, a->key, a->len); break;
    default: lworker_end_handed_back(L, a->lq, a->key, a->len); break;
    }
    return 0;
}

static int end_run(end_args *a)
{
    lua_State *L = a->lq->L;
    lua_pushcfunction(L, end_p);
    lua_pushlightuserdata(L, a);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
        wq_host_log(a->lq->host, "wqrun: %s: a remote worker's report: %s", a->lq->name,
                    lua_tostring(L, -1));
        lua_pop(L, 1);
        return WQ_ENOMEM;
    }
    return 0;
}

/* The lease of j ran out: hand the item back, or dead-letter it after LOST_MAX in a row. */
static void lease_out(wq_host *h, void *data, uint64_t id)
{
    (void)h, (void)id;
    rjob *j = data;
    lremote *r = j->r;
    lqueue *lq = r->lq;
    j->timer = 0;
    char shown[WQ_SHOWN_KEY];
    wq_show_key(shown, j->key, j->keylen);
    end_args a = {.lq = lq, .key = j->key, .len = j->keylen};
    if (j->cancelled) {
        a.how = 2;
    } else {
        int created;
        uint64_t *n = wq_keymap_put(r->lost, j->key, j->keylen, &created);
        uint64_t lost = n ? ++*n : 1;
        if (lost >= LOST_MAX) {
            wq_keymap_del(r->lost, j->key, j->keylen);
            a.how = 1;
            a.permanent = 1;
            a.error = "its lease ran out 5 times in a row (the remote worker went silent)";
        } else {
            a.how = 3;
            wq_host_log(lq->host,
                        "wqrun: %s: '%s': the remote worker's lease ran out (%llu in a row); "
                        "handed out again",
                        lq->name, shown, (unsigned long long)lost);
        }
    }
    end_run(&a); /* (the claims it may wake look from the loop, after this) */
    job_free(j);
}

/* ---- claims ---- */

/* A claim's token: this runner's seed, then the claim's number (24 hex digits). */
static void make_token(lremote *r, char *buf, size_t n)
{
    snprintf(buf, n, "%08x%016llx", r->seed, (unsigned long long)++r->seq);
}

/* Whether token is one this queue gave out (a claim that has ended since, or another's). */
static int ours(const lremote *r, const char *token)
{
    unsigned seed;
    unsigned long long seq;
    int end = 0;
    return r && strlen(token) == 24 && sscanf(token, "%8x%16llx%n", &seed, &seq, &end) == 2 &&
           end == 24 && seed == r->seed && seq >= 1 && seq <= r->seq;
}

/* A flow node's flow id and job.deps as JSON, left on the stack (args: the queue, the key). */
static int flow_p(lua_State *L)
{
    lqueue *lq = lua_touserdata(L, 1);
    size_t len;
    const char *key = lua_tolstring(L, 2, &len);
    lua_newtable(L); /* 3: a job table, as a handler's */
    lflow_push_job(L, lq, key, len);
    if (lua_getfield(L, 3, "flow") == LUA_TNIL) /* 4 */
        return 0;
    lua_getfield(L, 4, "id");   /* 5 */
    lua_getfield(L, 3, "deps"); /* 6 */
    if (!lua_istable(L, 6) || lua_rawlen(L, 6) == 0 || wq_ljson_encode(L, 6) != LUA_OK) {
        lua_settop(L, 6);
        lua_pushliteral(L, "[]");
    }
    lua_pushvalue(L, 5); /* the id, the deps' JSON text */
    lua_pushvalue(L, 7);
    return 2;
}

int lremote_claim(void *q, size_t max, double lease, void (*fn)(void *ud, const wq_claim_view *c),
                  void *ud)
{
    lqueue *lq = q;
    if (lq->stopping || !lq->q)
        return WQ_ESHUTDOWN;
    lremote *r = state(lq);
    if (!r)
        return WQ_ENOMEM;
    wq_host *h = lq->host;
    int64_t now = wq_host_now(h), lease_ns = wq_seconds_to_ns(lease);
    int n = 0;
    while ((size_t)n < max) {
        wq_item_info info;
        int rc = wq_queue_get(lq->q, &info);
        if (rc == WQ_EEMPTY || rc == WQ_ESHUTDOWN)
            break;
        if (rc < 0)
            return n > 0 ? n : rc;
        rjob *j = calloc(1, sizeof *j);
        int created = 0;
        uint64_t *slot = NULL;
        if (j && (j->key = malloc(info.keylen ? info.keylen : 1)) != NULL)
            slot = wq_keymap_put(r->jobs, info.key, info.keylen, &created);
        if (!slot) { /* out of memory: back to the queue, as it was */
            if (j)
                free(j->key);
            free(j);
            wq_queue_add_after(lq->q, info.key, info.keylen, 0, NULL);
            wq_queue_done(lq->q, info.key, info.keylen);
            return n > 0 ? n : WQ_ENOMEM;
        }
        *slot = (uint64_t)(uintptr_t)j;
        j->r = r;
        memcpy(j->key, info.key, info.keylen);
        j->keylen = info.keylen;
        make_token(r, j->token, sizeof j->token);
        j->lease_ns = lease_ns;
        j->until = wq_add_sat(now, lease_ns);
        j->timer = wq_timer_start(h, j->until, lease_out, j);
        int64_t attempt = lworker_failures(lq, info.key, info.keylen) + 1;
        if (lqueue_told(lq))
            lworker_event(lq, WQ_LIFE_STARTED, info.key, info.keylen, attempt, NULL, 0, NULL, 0);
        wq_claim_view c = {.key = j->key,
                           .keylen = j->keylen,
                           .payload = info.payload,
                           .paylen = info.paylen,
                           .attempt = attempt,
                           .token = j->token,
                           .lease_until = wq_host_unix(h, j->until)};
        lua_State *L = lq->L;
        int top = lua_gettop(L);
        if (lflow_is_node(lq, j->key, j->keylen)) {
            lua_pushcfunction(L, flow_p);
            lua_pushlightuserdata(L, lq);
            lua_pushlstring(L, j->key, j->keylen);
            if (lua_pcall(L, 2, 2, 0) == LUA_OK && lua_type(L, -2) == LUA_TSTRING) {
                c.flow = lua_tostring(L, -2);
                c.deps = lua_tolstring(L, -1, &c.depslen);
            }
        }
        fn(ud, &c);
        lua_settop(L, top);
        n++;
    }
    return n;
}

static void wake(lremote *r)
{
    /* One shot each: the woken claim looks, and waits again (on the new list) if another took
     * the items. */
    rwait *w = r->waits;
    r->waits = NULL;
    while (w) {
        rwait *next = w->next;
        r->waiting -= w->max;
        void (*fn)(void *) = w->fn;
        void *ud = w->ud;
        free(w);
        fn(ud);
        w = next;
    }
}

static void on_poke(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    lremote *r = arg;
    wake(r);
    wq_host_settle(r->lq->host); /* the leases' timers just started, the answers' commits */
}

void lremote_ready(lqueue *lq)
{
    /* From the loop, not from inside the engine's observer; an event of the loop's own, not a
     * host timer (whose clock may be virtual, and which is armed only when the host settles). */
    static const struct timeval now = {0, 0};
    lremote *r = lq->remote;
    if (!r || !r->waits)
        return;
    if (!r->poke && !(r->poke = event_new(lq->host->base, -1, 0, on_poke, r)))
        wake(r); /* out of memory: now, then */
    else if (!event_pending(r->poke, EV_TIMEOUT, NULL))
        event_add(r->poke, &now);
}

size_t lremote_demand(const lqueue *lq)
{
    return lq->remote ? lq->remote->waiting : 0;
}

void *lremote_claim_wait(void *q, size_t max, void (*fn)(void *ud), void *ud)
{
    lqueue *lq = q;
    lremote *r = state(lq);
    rwait *w = r ? calloc(1, sizeof *w) : NULL;
    if (!w)
        return NULL;
    w->r = r;
    w->max = max;
    w->fn = fn;
    w->ud = ud;
    w->next = r->waits;
    if (w->next)
        w->next->prev = w;
    r->waits = w;
    r->waiting += max;
    if (lq->bq) /* a backend that claims (PostgreSQL): these count as wanted */
        wq_bq_want(lq->bq);
    return w;
}

void lremote_claim_unwait(void *q, void *handle)
{
    (void)q;
    rwait *w = handle;
    lremote *r = w->r;
    if (w->prev)
        w->prev->next = w->next;
    else
        r->waits = w->next;
    if (w->next)
        w->next->prev = w->prev;
    r->waiting -= w->max;
    free(w);
}

/* ---- reports ---- */

int lremote_report(void *q, wq_report *rep)
{
    lqueue *lq = q;
    rjob *j = find(lq->remote, rep->key, rep->keylen);
    if (!j) /* a token of ours whose claim ended: no longer current */
        return ours(lq->remote, rep->token) ? WQ_EBUSY : WQ_ENOENT;
    if (strcmp(j->token, rep->token) != 0)
        return WQ_EBUSY;
    wq_host *h = lq->host;
    if (rep->kind == WQ_REPORT_HEARTBEAT) {
        j->until = wq_add_sat(wq_host_now(h), j->lease_ns);
        wq_timer_stop(h, j->timer);
        j->timer = wq_timer_start(h, j->until, lease_out, j);
        rep->cancelled = j->cancelled;
        rep->lease_until = wq_host_unix(h, j->until);
        return 0;
    }
    wq_keymap_del(j->r->lost, j->key, j->keylen); /* it answered: not silent */
    end_args a = {.lq = lq, .key = rep->key, .len = rep->keylen};
    if (j->cancelled) {
        a.how = 2;
    } else if (rep->kind == WQ_REPORT_DONE) {
        a.how = 0;
        a.result = rep->result;
        a.rlen = rep->rlen;
    } else {
        a.how = 1;
        a.error = rep->error ? rep->error : "failed";
        a.permanent = rep->permanent;
        a.retry_in = rep->retry_in < 0 ? -1 : wq_seconds_to_ns(rep->retry_in);
    }
    job_free(j);
    int later = lq->bq && wq_backend_shared(lq->host->backend) && rep->kept;
    rack *k = later ? calloc(1, sizeof *k) : NULL;
    if (later && (!k || !(k->key = malloc(rep->keylen ? rep->keylen : 1)))) {
        free(k);
        return WQ_ENOMEM;
    }
    int rc = end_run(&a);
    wq_item_info info;
    if (later && rc >= 0 && wq_queue_lookup(lq->q, rep->key, rep->keylen, &info) == 1 &&
        (info.state & (WQ_ST_PROCESSING | WQ_ST_QUEUED)))
        later = 0; /* retried at once under the same claim: no outcome to commit yet */
    if (rc < 0 || !later) {
        if (k)
            free(k->key);
        free(k);
        return rc;
    }
    memcpy(k->key, rep->key, rep->keylen);
    k->keylen = rep->keylen;
    k->fn = rep->kept;
    k->ud = rep->kept_ud;
    k->next = lq->remote->acks;
    lq->remote->acks = k;
    return WQ_EAGAIN;
}

void lremote_committed(lqueue *lq, const char *key, size_t len, int ok)
{
    lremote *r = lq->remote;
    if (!r)
        return;
    rack **pp = &r->acks, *told = NULL;
    while (*pp) {
        rack *k = *pp;
        if (key && (k->keylen != len || memcmp(k->key, key, len) != 0)) {
            pp = &k->next;
            continue;
        }
        *pp = k->next;
        k->next = told;
        told = k;
    }
    while (told) { /* taken off the list first: an answer may report again */
        rack *k = told;
        told = k->next;
        k->fn(k->ud, ok);
        free(k->key);
        free(k);
    }
}

int lremote_cancel(lqueue *lq, const char *key, size_t len)
{
    rjob *j = find(lq->remote, key, len);
    if (!j)
        return WQ_EBUSY;
    j->cancelled = 1; /* told at its next heartbeat; its report ends it as cancelled */
    return 0;
}

static void lost_now(wq_host *h, void *data, uint64_t id)
{
    (void)h, (void)id;
    lremote *r = data;
    lqueue *lq = r->lq;
    r->lose = 0;
    size_t n = wq_keymap_count(r->jobs);
    rjob **all = n ? malloc(n * sizeof *all) : NULL;
    if (!all)
        return;
    size_t pos = 0, i = 0;
    const char *k;
    size_t kl;
    uint64_t v;
    while (i < n && wq_keymap_next(r->jobs, &pos, &k, &kl, &v))
        all[i++] = (rjob *)(uintptr_t)v;
    for (size_t x = 0; x < i; x++) {
        /* as a handler's run is: ended here (the database discards the outcome), its token no
         * longer current (409) */
        end_args a = {.lq = lq, .key = all[x]->key, .len = all[x]->keylen, .how = 2};
        end_run(&a);
        job_free(all[x]);
    }
    free(all);
}

void lremote_lost(lqueue *lq)
{
    lremote *r = lq->remote;
    if (r && !r->lose) /* from the loop: not inside the backend's call */
        r->lose = wq_timer_start(lq->host, wq_host_now(lq->host), lost_now, r);
}

size_t lremote_held(const lqueue *lq)
{
    return lq->remote ? wq_keymap_count(lq->remote->jobs) : 0;
}

void lremote_close(lqueue *lq)
{
    lremote *r = lq->remote;
    if (!r)
        return;
    size_t pos = 0;
    const char *k;
    size_t kl;
    uint64_t v;
    while (wq_keymap_next(r->jobs, &pos, &k, &kl, &v)) {
        rjob *j = (rjob *)(uintptr_t)v;
        if (j->timer)
            wq_timer_stop(lq->host, j->timer);
        free(j->key);
        free(j);
    }
    if (r->poke)
        event_free(r->poke);
    r->poke = NULL;
    if (r->lose)
        wq_timer_stop(lq->host, r->lose);
    wake(r); /* the waiting claims answer now (the queue is stopping) */
    lremote_committed(lq, NULL, 0, 0);
    wq_keymap_free(r->jobs);
    wq_keymap_free(r->lost);
    free(r);
    lq->remote = NULL;
}
