/*
 * The PostgreSQL backend (SPEC section 8): the database is the authority,
 * the local engine queue holds only what this runner claimed.
 *
 * - Adds go to the database (wqrun.add, the same function SQL producers
 *   call) and are answered once their transaction committed.
 * - Claims hand the runtime at most as many items as it asks for (free
 *   workers and waiting gets): no claim-ahead, so no reordering.
 * - Outcomes are read from the local engine at flush time, as the SQLite
 *   store reads it: a claimed key that is gone was finished, one with a
 *   delayed add pending is retried or requeued after that delay. They are
 *   written with their fencing token; a stale token matches nothing.
 * - Three kinds of transaction, at most one of each under way: the adds
 *   and the claims on the first connection, the outcomes on a second one,
 *   so that the server finishes one batch while it claims the next. What
 *   arrives meanwhile waits for the next of its kind (group commit).
 * - Liveness: a session advisory lock per runner (gone the moment its
 *   connection dies), a heartbeat row, and every runner reaping the dead.
 *
 * This file: the operations table, opening and closing, the operations on
 * one queue and the helpers; the cycle, liveness and control, the view and
 * the operator actions are in the files pg_int.h lists.
 */
#include "store/pg/pg.h"

#include "engine/common.h"
#include "engine/keymap.h"
#include "engine/log.h"
#include "store/pg/pg_int.h"
#include "store/pg/pg_schema.h"
#include "store/pg/pgconn.h"

#include <event2/event.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const wq_backend_ops pg_ops;

/* ---- helpers ---- */

int64_t wq_pgb_real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * WQ_NS_PER_S + ts.tv_nsec;
}

double wq_pgb_wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void wq_pgb_set_err(pgb *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->errmsg, sizeof b->errmsg, fmt, ap);
    va_end(ap);
}

void wq_pgb_logf(pgb *b, wq_log_level lv, const char *fmt, ...)
{
    (void)b;
    if (!wq_log_enabled(lv))
        return;
    char msg[600] = "wqrun: ";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + 7, sizeof msg - 7, fmt, ap);
    va_end(ap);
    for (char *p = msg; *p; p++) /* libpq's messages span lines: one log line each */
        if (*p == '\n' || *p == '\t')
            *p = ' ';
    wq_log_write(lv, NULL, 0, msg);
}

void wq_pgb_kick(pgb *b)
{
    if (b->cycle_ev)
        event_active(b->cycle_ev, EV_TIMEOUT, 0);
}

/* A delayed item of q is due at real ns when: claim then (not at the next poll). */
void wq_pgb_due(pgq *q, int64_t when)
{
    pgb *b = q->b;
    if (!q->due_at || when < q->due_at)
        q->due_at = when;
    if (!b->due_ev || (b->due_armed && b->due_armed <= when))
        return;
    int64_t d = when - wq_pgb_real_ns();
    if (d < 0)
        d = 0;
    struct timeval tv = {(time_t)(d / WQ_NS_PER_S), (suseconds_t)(d % WQ_NS_PER_S / 1000)};
    evtimer_add(b->due_ev, &tv);
    b->due_armed = when;
}

static void on_due(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    pgb *b = arg;
    b->due_armed = 0;
    int64_t now = wq_pgb_real_ns(), next = 0;
    for (pgq *q = b->queues; q; q = q->next)
        if (q->due_at && q->due_at > now && (!next || q->due_at < next))
            next = q->due_at;
    wq_pgb_kick(b);
    if (next) /* another queue's item comes later */
        for (pgq *q = b->queues; q; q = q->next)
            if (q->due_at == next)
                wq_pgb_due(q, next);
}

/* ---- the ops ---- */

static int busy(const pgb *b)
{
    if (b->adds_flight || b->claim_flight || b->out_flight || b->nadds || b->nadds_sent)
        return 1;
    for (const pgq *q = b->queues; q; q = q->next)
        if (q->ntouched || q->nsent)
            return 1;
    return 0;
}

static void pg_drain(wq_backend *base, int timeout_ms)
{
    pgb *b = (pgb *)base;
    b->stopping = 1;
    int64_t end = wq_pgb_real_ns() + (int64_t)timeout_ms * 1000000;
    while (wq_pgconn_up(b->c) && b->registered && wq_pgb_real_ns() < end) {
        wq_pgb_on_cycle(-1, 0, b);
        if (!busy(b))
            break;
        wq_pgconn_wait(b->c, 50);
        if (b->c2)
            wq_pgconn_wait(b->c2, 50);
    }
}

static void pg_close(wq_backend *base)
{
    pgb *b = (pgb *)base;
    if (b->c && wq_pgconn_up(b->c) && b->registered) {
        /* Last outcomes, then leave: what still runs goes back to the queue. */
        pg_drain(base, 5000);
        char *sql = wq_pg_sql(wq_pgconn_pg(b->c), b->schema,
                              "WITH w AS (DELETE FROM @S.waiting WHERE runner = $1), "
                              "r AS (DELETE FROM @S.runners WHERE id = $1) "
                              "SELECT @S.release(ARRAY[$1::bigint], false)");
        const char *v[1] = {b->runner_id_s};
        if (sql && wq_pgconn_send(b->c, NULL, sql, 1, v, NULL, NULL) == 0 &&
            wq_pgconn_sync(b->c, NULL, NULL) == 0)
            wq_pgconn_wait(b->c, 5000);
        free(sql);
    }
    wq_pgconn_free(b->c2);
    b->c2 = NULL;
    wq_pgconn_free(b->c); /* adds still under way come back to b->adds */
    b->c = NULL;
    for (size_t i = 0; i < b->nadds; i++) {
        if (b->adds[i].fn)
            b->adds[i].fn(b->adds[i].ud, WQ_EIO, "the runner is stopping");
        wq_pgb_free_add(&b->adds[i]);
    }
    while (b->ops_waiting) {
        pop *o = b->ops_waiting;
        b->ops_waiting = o->next;
        o->fn(o->ud, WQ_EIO, "the runner is stopping");
        wq_pgb_pop_free(o);
    }
    free(b->adds);
    for (size_t i = 0; i < b->nout; i++)
        wq_pgb_pstmt_free(&b->outbox[i]);
    free(b->outbox);
    wq_pgb_view_free(b->view);
    wq_pgb_view_free(b->view_next_v);
    if (b->cycle_ev)
        event_free(b->cycle_ev);
    if (b->tick_ev)
        event_free(b->tick_ev);
    if (b->due_ev)
        event_free(b->due_ev);
    wq_pgb_events_close(b);
    pgq *q = b->queues;
    while (q) {
        pgq *next = q->next;
        for (uint32_t i = 0; i < q->nclaims; i++)
            if (q->claims[i].used) {
                free(q->claims[i].key);
                free(q->claims[i].err);
                free(q->claims[i].result);
                free(q->claims[i].nres);
            }
        for (size_t i = 0; i < q->nsent; i++) {
            free(q->sent[i].err);
            free(q->sent[i].payload);
            free(q->sent[i].done);
            free(q->sent[i].nres);
        }
        PQclear(q->claim_res);
        PQclear(q->finish_res);
        wq_keymap_free(q->keys);
        free(q->claims);
        free(q->free);
        free(q->touched);
        free(q->sent);
        free(q);
        q = next;
    }
    free(b->url);
    free(b);
}

static const char *pg_errmsg(const wq_backend *base)
{
    return ((const pgb *)base)->errmsg;
}

static int pg_check(wq_backend *base)
{
    (void)base;
    return 0; /* a lost connection is waited for, never fatal */
}

static int pg_gone(const wq_backend *base)
{
    (void)base;
    return 0;
}

static void pg_set_busy_timeout(wq_backend *base, int ms)
{
    (void)base;
    (void)ms;
}

static const char *pg_where(const wq_backend *base)
{
    return ((const pgb *)base)->where;
}

static int pg_dirty(const wq_backend *base)
{
    (void)base;
    return 0; /* adds carry their own acknowledgement; outcomes are written by the cycle */
}

static int pg_flush(wq_backend *base)
{
    wq_pgb_kick((pgb *)base);
    return 0;
}

static void pg_set_commit_fn(wq_backend *base, void (*fn)(void *ud, int ok), void *ud)
{
    (void)base;
    (void)fn;
    (void)ud;
}

static int pg_poll_inbox(wq_backend *base, int (*fn)(void *ud, const wq_inbox_row *row), void *ud)
{
    (void)base;
    (void)fn;
    (void)ud;
    return 0; /* producers call wqrun.add() instead */
}

static int pg_poll_commands(wq_backend *base, void (*fn)(void *ud, const wq_command *c), void *ud)
{
    (void)base;
    (void)fn;
    (void)ud;
    return 0;
}

static void pg_command_result(wq_backend *base, int64_t id, int ok, const char *text)
{
    (void)base;
    (void)id;
    (void)ok;
    (void)text;
}

static void pg_known_queue(wq_backend *base, const char *name)
{
    (void)base;
    (void)name;
}

static void pg_get_stats(const wq_backend *base, wq_backend_stats *st)
{
    const pgb *b = (const pgb *)base;
    *st = b->st;
    st->shared = 1;
    st->connected = wq_pgconn_up(b->c);
}

static void pg_stop(wq_backend *base)
{
    pgb *b = (pgb *)base;
    b->stopping = 1;
    wq_pgb_kick(b);
}

static wq_bqueue *pg_attach(wq_backend *base, const char *name, wq_queue *eq,
                            const wq_bqueue_hooks *hooks)
{
    pgb *b = (pgb *)base;
    for (pgq *q = b->queues; q; q = q->next)
        if (strcmp(q->name, name) == 0) {
            q->q = eq;
            if (hooks)
                q->hooks = *hooks;
            return &q->base;
        }
    pgq *q = calloc(1, sizeof *q);
    if (!q || !(q->keys = wq_keymap_new())) {
        free(q);
        wq_pgb_set_err(b, "out of memory");
        return NULL;
    }
    q->base.b = base;
    q->b = b;
    snprintf(q->name, sizeof q->name, "%s", name);
    q->q = eq;
    if (hooks)
        q->hooks = *hooks;
    q->waiting_db = -1;
    q->more = 1;
    q->db_rows = 1; /* until a claim finds none */
    q->floor_at = -INFINITY;
    q->floor_resets = -1;
    q->next = b->queues;
    b->queues = q;
    wq_pgb_kick(b);
    return &q->base;
}

static void pg_detach(wq_bqueue *bq)
{
    pgq *q = (pgq *)bq;
    q->stopped = 1;
    q->q = NULL; /* being freed: outcomes not built by now are left to the release at close */
    q->ntouched = 0;
    memset(&q->hooks, 0, sizeof q->hooks);
}

static int pg_restore(wq_bqueue *bq, void (*item_fn)(void *ud, const wq_restored *r),
                      void (*fail_fn)(void *ud, const char *key, size_t len, int64_t requeues,
                                      const char *last_error),
                      void (*dead_fn)(void *ud, const wq_dead_row *d), void *ud)
{
    (void)bq;
    (void)item_fn;
    (void)fail_fn;
    (void)dead_fn;
    (void)ud;
    return 0; /* nothing is local: items come by claims */
}

static void pg_set_meta(wq_bqueue *bq,
                        void (*fn)(void *ud, const wq_item_info *info, wq_item_meta *out), void *ud)
{
    (void)bq;
    (void)fn;
    (void)ud;
}

/* Whether s is valid UTF-8 without NUL bytes (PostgreSQL text holds nothing else). */
int wq_pgb_text_ok(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c == 0)
            return 0;
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n)
            return 0;
        for (size_t j = 1; j < k; j++)
            if (((unsigned char)s[i + j] >> 6) != 2)
                return 0;
        i += k;
    }
    return 1;
}

/* Whether JSON text holds the escape \u0000 (jsonb refuses it). */
static int json_nul(const char *s, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++) {
        if (s[i] != '\\')
            continue;
        if (s[i + 1] == 'u' && i + 5 < n && memcmp(s + i + 2, "0000", 4) == 0)
            return 1;
        i++; /* the escaped character */
    }
    return 0;
}

char *wq_pgb_dupn(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

static int pg_add(wq_bqueue *bq, const wq_badd *a, wq_badd_fn fn, void *ud)
{
    pgq *q = (pgq *)bq;
    pgb *b = q->b;
    if (!wq_pgb_text_ok(a->key, a->keylen)) {
        wq_pgb_set_err(b, "bad argument 'key' (PostgreSQL text holds UTF-8 without NUL bytes)");
        return WQ_EINVAL;
    }
    if (a->grp && !wq_pgb_text_ok(a->grp, a->grplen)) {
        wq_pgb_set_err(b, "bad argument 'group' (PostgreSQL text holds UTF-8 without NUL bytes)");
        return WQ_EINVAL;
    }
    if (a->payload && (!wq_pgb_text_ok(a->payload, a->paylen) || json_nul(a->payload, a->paylen))) {
        wq_pgb_set_err(b, "bad argument 'payload' (PostgreSQL's jsonb holds UTF-8 text without NUL "
                          "characters, \\u0000)");
        return WQ_EINVAL;
    }
    if (a->keylen > 65536)
        return WQ_E2BIG;
    if (!wq_pgconn_up(b->c) && (a->no_wait || b->nadds >= ADD_BUFFER_MAX)) {
        wq_pgb_set_err(b, "database unavailable");
        return WQ_EIO;
    }
    if (b->nadds == b->acap) {
        size_t ncap = b->acap ? b->acap * 2 : 64;
        padd *na = realloc(b->adds, ncap * sizeof *na);
        if (!na)
            return WQ_ENOMEM;
        b->adds = na;
        b->acap = ncap;
    }
    padd *p = &b->adds[b->nadds];
    memset(p, 0, sizeof *p);
    p->q = q;
    p->fn = fn;
    p->ud = ud;
    char num[40];
    p->params[0] = strdup(q->name);
    p->params[1] = wq_pgb_dupn(a->key, a->keylen);
    int oom = !p->params[0] || !p->params[1];
    if (a->payload && !(p->params[2] = wq_pgb_dupn(a->payload, a->paylen)))
        oom = 1;
    if (a->after > 0) {
        snprintf(num, sizeof num, "%.9f", a->after);
        if (!(p->params[3] = strdup(num)))
            oom = 1;
    }
    if (a->has_priority) {
        snprintf(num, sizeof num, "%d", (int)a->priority);
        if (!(p->params[4] = strdup(num)))
            oom = 1;
    }
    if (a->grp && !(p->params[5] = wq_pgb_dupn(a->grp, a->grplen)))
        oom = 1;
    if (a->force && !(p->params[6] = strdup("true")))
        oom = 1;
    /* not said (0): the queue's definition in the database decides */
    if (a->unique && !(p->params[7] = strdup(a->unique > 0 ? "true" : "false")))
        oom = 1;
    if (oom) {
        wq_pgb_free_add(p);
        return WQ_ENOMEM;
    }
    b->nadds++;
    q->adds_out++;
    wq_pgb_kick(b);
    return 0;
}

static void pg_touch(wq_bqueue *bq, wq_event ev, const char *key, size_t len)
{
    pgq *q = (pgq *)bq;
    if (ev == WQ_EV_QUEUED || ev == WQ_EV_PROCESSING)
        return; /* a claim arriving, or a handler taking it: nothing to write */
    uint32_t slot;
    if (!wq_pgb_slot_of(q, key, len, &slot))
        return;
    wq_pgb_touch_slot(q, slot);
    wq_pgb_kick(q->b);
}

static void pg_failures(wq_bqueue *bq, const char *key, size_t len, int64_t requeues,
                        const char *last_error)
{
    pgq *q = (pgq *)bq;
    uint32_t slot;
    claim *c = wq_pgb_slot_of(q, key, len, &slot);
    if (!c)
        return;
    c->new_requeues = requeues;
    if (last_error) {
        free(c->err);
        c->err = strdup(last_error);
    }
}

static void pg_dead(wq_bqueue *bq, const wq_dead_row *d)
{
    pgq *q = (pgq *)bq;
    uint32_t slot;
    claim *c = wq_pgb_slot_of(q, d->key, d->keylen, &slot);
    if (!c)
        return;
    c->dead = 1;
    c->attempts = d->attempts;
    free(c->err);
    c->err = NULL;
    /* The traceback travels after the message, as Lua writes it: finish() keeps it in
     * dead.traceback (see 40-finish.sql). */
    const char *err = d->error ? d->error : "";
    size_t n = strlen(err), m = d->traceback ? strlen(d->traceback) : 0;
    if ((c->err = malloc(n + m + 2))) {
        memcpy(c->err, err, n);
        if (m) {
            c->err[n] = '\n';
            memcpy(c->err + n + 1, d->traceback, m);
        }
        c->err[n + (m ? m + 1 : 0)] = '\0';
    }
}

static void pg_undead(wq_bqueue *bq, const char *key, size_t len)
{
    (void)bq;
    (void)key;
    (void)len; /* a success clears the dead letter in the database (finish) */
}

/* What a success leaves (finish's p_done): its result, "null" for none. */
static void set_result(claim *c, const char *result, size_t rlen)
{
    free(c->result);
    c->result = result && wq_pgb_text_ok(result, rlen) && !json_nul(result, rlen)
                    ? wq_pgb_dupn(result, rlen)
                    : strdup("null");
}

static void pg_done_put(wq_bqueue *bq, const char *key, size_t len, double finished_at,
                        const char *result, size_t rlen)
{
    (void)finished_at; /* the database's clock decides (finish) */
    pgq *q = (pgq *)bq;
    uint32_t slot;
    claim *c = wq_pgb_slot_of(q, key, len, &slot);
    if (!c)
        return; /* not a claim of this runner (a q:get() done of another's?) */
    set_result(c, result, rlen);
    c->keep = 1;
}

/* A running job's progress (SPEC 11): on the job's row while this runner holds its claim (at most
 * once a second per job; the value as it is now, so nothing waits to go again if lost). */
static void pg_progress(wq_bqueue *bq, const char *key, size_t len, const char *json, size_t n)
{
    pgq *q = (pgq *)bq;
    pgb *b = q->b;
    uint32_t slot;
    claim *c = wq_pgb_slot_of(q, key, len, &slot);
    if (!c || c->sent || !wq_pgconn_up(b->c))
        return;
    char token[24];
    snprintf(token, sizeof token, "%lld", (long long)c->token);
    char *value = json ? wq_pgb_dupn(json, n) : NULL;
    const char *v[4] = {q->name, c->key, token, value};
    char *sql = wq_pg_sql(wq_pgconn_pg(b->c), b->schema,
                          "UPDATE @S.jobs SET progress = $4::jsonb WHERE queue = $1 AND key = $2"
                          " AND token = $3::bigint AND running");
    if (sql && (!json || value) && wq_pgconn_send(b->c, NULL, sql, 4, v, NULL, NULL) == 0)
        wq_pgconn_sync(b->c, NULL, NULL);
    free(sql);
    free(value);
}

/* A finished run for the history (SPEC 11): finish() writes the row in the outcome's
 * transaction, from what the database holds (times, attempts, runner); a success brings its
 * result (as done_put does), a cancel makes the outcome one. Dead letters come through dead(),
 * removes through remove(). */
static void pg_history(wq_bqueue *bq, const wq_history_row *r)
{
    pgq *q = (pgq *)bq;
    uint32_t slot;
    claim *c = wq_pgb_slot_of(q, r->key, r->keylen, &slot);
    if (!c || c->sent)
        return;
    if (r->state == WQ_HIST_CANCELLED)
        c->hcancel = 1;
    else if (r->state == WQ_HIST_DONE && r->result && !c->result)
        set_result(c, r->result, r->rlen); /* none: nothing to send (a NULL in p_done) */
}

/* The queue's history (GET /queues/NAME/history) is read through op (WQ_BOP_HISTORY). */
static int pg_history_list(wq_bqueue *bq, int64_t before, size_t limit,
                           void (*fn)(void *ud, const wq_history_view *v), void *ud)
{
    (void)bq;
    (void)before;
    (void)limit;
    (void)fn;
    (void)ud;
    return WQ_ENOENT;
}

/* A flow node's handler succeeded (SPEC 9): its result goes with its outcome, whatever the
 * queue's keep_done (finish's p_results). */
static void pg_node_result(wq_bqueue *bq, const char *key, size_t len, const char *result,
                           size_t rlen)
{
    pgq *q = (pgq *)bq;
    uint32_t slot;
    claim *c = wq_pgb_slot_of(q, key, len, &slot);
    if (!c || c->sent)
        return;
    c->node_ok = 1;
    free(c->nres);
    c->nres = result && wq_pgb_text_ok(result, rlen) && !json_nul(result, rlen)
                  ? wq_pgb_dupn(result, rlen)
                  : NULL;
}

static void pg_done_del(wq_bqueue *bq, const char *key, size_t len)
{
    (void)bq;
    (void)key;
    (void)len;
}

static int pg_done_prune(wq_bqueue *bq, double older_than)
{
    (void)bq;
    (void)older_than;
    return 0;
}

static int pg_restore_done(wq_bqueue *bq,
                           void (*fn)(void *ud, const char *key, size_t len, double finished_at,
                                      const char *result, size_t rlen),
                           void *ud)
{
    (void)bq;
    (void)fn;
    (void)ud;
    return 0;
}

static void pg_schedule_put(wq_bqueue *bq, const wq_schedule_row *row)
{
    pgq *q = (pgq *)bq;
    char next[40];
    snprintf(next, sizeof next, "%.6f", row->next_at);
    char *key = row->key ? wq_pgb_dupn(row->key, row->keylen) : NULL;
    char *payload = row->payload ? wq_pgb_dupn(row->payload, row->paylen) : NULL;
    const char *v[8] = {q->name,
                        row->name,
                        row->spec,
                        key,
                        payload,
                        row->tz == WQ_SCHED_LOCAL ? "local" : "utc",
                        row->catch_up == WQ_SCHED_CATCH_UP_SKIP ? "skip" : "once",
                        next};
    if ((row->key && !key) || (row->payload && !payload) ||
        wq_pgb_outbox_put(
            q->b, "schedule",
            "SELECT @S.define_schedule($1, $2, $3, $4, $5::jsonb, $6, $7, $8::float8)", 8, v) < 0)
        wq_pgb_logf(q->b, WQ_LOG_ERROR, "schedule '%s' of %s: out of memory: not stored", row->name,
                    q->name);
    free(key);
    free(payload);
}

static void pg_schedule_del(wq_bqueue *bq, const char *name)
{
    pgq *q = (pgq *)bq;
    const char *v[2] = {q->name, name};
    if (wq_pgb_outbox_put(q->b, "schedule",
                          "DELETE FROM @S.schedules WHERE queue = $1 AND name = $2", 2, v) < 0)
        wq_pgb_logf(q->b, WQ_LOG_ERROR, "schedule '%s' of %s: out of memory: not deleted", name,
                    q->name);
}

static int pg_schedule_fire(wq_bqueue *bq, const wq_schedule_row *row)
{
    pgq *q = (pgq *)bq;
    char at[40], next[40];
    snprintf(at, sizeof at, "%.6f", row->last_at);
    snprintf(next, sizeof next, "%.6f", row->next_at);
    const char *v[4] = {q->name, row->name, at, next};
    return wq_pgb_outbox_put(q->b, "schedule", "SELECT @S.fire($1, $2, $3::float8, $4::float8)", 4,
                             v);
}

static int pg_restore_schedules(wq_bqueue *bq, void (*fn)(void *ud, const wq_schedule_row *row),
                                void *ud)
{
    (void)bq;
    (void)fn;
    (void)ud;
    return 0;
}

static int pg_paused(wq_bqueue *bq)
{
    (void)bq;
    return 0;
}

static void pg_set_paused(wq_bqueue *bq, int paused)
{
    (void)bq;
    (void)paused;
}

static void pg_define(wq_bqueue *bq, const wq_queue_def *def)
{
    pgq *q = (pgq *)bq;
    q->def = *def;
    if (def->keep_done > 0)
        q->b->keeps_done = 1;
    if (def->history > 0)
        q->b->keeps_history = 1;
    q->limited = def->group_concurrency > 0 || def->group_rate > 0 || def->rate > 0;
    q->has_def = 1;
    q->def_sent = 0;
    wq_pgb_kick(q->b);
}

static int pg_pending(wq_bqueue *bq)
{
    pgq *q = (pgq *)bq;
    q->rows_wanted = 1;
    return q->db_rows || q->adds_out || q->nsent || q->ntouched;
}

static void pg_want(wq_bqueue *bq)
{
    wq_pgb_kick(((pgq *)bq)->b);
}

static const wq_backend_ops pg_ops = {
    .version = WQ_BACKEND_VERSION,
    .name = "postgres",
    .flags = WQ_BACKEND_SHARED,
    .close = pg_close,
    .errmsg = pg_errmsg,
    .check = pg_check,
    .gone = pg_gone,
    .set_busy_timeout = pg_set_busy_timeout,
    .where = pg_where,
    .dirty = pg_dirty,
    .flush = pg_flush,
    .set_commit_fn = pg_set_commit_fn,
    .poll_inbox = pg_poll_inbox,
    .poll_commands = pg_poll_commands,
    .command_result = pg_command_result,
    .known_queue = pg_known_queue,
    .get_stats = pg_get_stats,
    .stop = pg_stop,
    .drain = pg_drain,
    .attach = pg_attach,
    .detach = pg_detach,
    .restore = pg_restore,
    .set_meta = pg_set_meta,
    .add = pg_add,
    .touch = pg_touch,
    .failures = pg_failures,
    .dead = pg_dead,
    .undead = pg_undead,
    .done_put = pg_done_put,
    .done_del = pg_done_del,
    .done_prune = pg_done_prune,
    .restore_done = pg_restore_done,
    .schedule_put = pg_schedule_put,
    .schedule_del = pg_schedule_del,
    .schedule_fire = pg_schedule_fire,
    .restore_schedules = pg_restore_schedules,
    .paused = pg_paused,
    .set_paused = pg_set_paused,
    .pending = pg_pending,
    .want = pg_want,
    .db_view = wq_pgb_db_view,
    .define = pg_define,
    .op = wq_pgb_op,
    .flow_op = wq_pgb_flow_op,
    .node_result = pg_node_result,
    .listen = wq_pgb_listen,
    .relays = wq_pgb_relays,
    .publish = wq_pgb_publish,
    .history = pg_history,
    .history_list = pg_history_list,
    .progress = pg_progress,
};

/* Inserts the runners row and takes its session lock, in one transaction (blocking). */
static int register_runner(pgb *b, PGconn *pg, char *err, size_t errlen)
{
    char *sql = wq_pg_sql(pg, b->schema,
                          "WITH r AS (INSERT INTO @S.runners (name, host, pid, lease, version) "
                          "VALUES ($1, $2, $3, $4, $5) RETURNING id) "
                          "SELECT id, pg_advisory_lock($6, id::integer) FROM r");
    char pid[24], lease[32], cls[24];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    snprintf(lease, sizeof lease, "%.3f", b->lease);
    snprintf(cls, sizeof cls, "%d", WQ_PG_LOCK_CLASS);
    const char *v[6] = {b->runner_name, b->host, pid, lease, WQ_VERSION, cls};
    PGresult *r = sql ? PQexecParams(pg, sql, 6, NULL, v, NULL, NULL, 0) : NULL;
    free(sql);
    if (!r || PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
        snprintf(err, errlen, "cannot register this runner in %s: %s", b->where,
                 r ? PQresultErrorMessage(r) : "out of memory");
        PQclear(r);
        return -1;
    }
    b->runner_id = atoll(PQgetvalue(r, 0, 0));
    snprintf(b->runner_id_s, sizeof b->runner_id_s, "%lld", (long long)b->runner_id);
    PQclear(r);
    b->registered = 1;
    b->last_heartbeat = wq_pgb_real_ns();
    b->control_again = 1; /* the paused queues, at once */
    return 0;
}

int wq_pg_open(wq_backend **out, const wq_backend_opts *opts, char *err, size_t errlen)
{
    *out = NULL;
    pgb *b = calloc(1, sizeof *b);
    if (!b || !(b->url = strdup(opts->where))) {
        free(b);
        snprintf(err, errlen, "out of memory");
        return WQ_ENOMEM;
    }
    b->base.ops = &pg_ops;
    b->evb = opts->event_base;
    b->tb = opts->tb;
    b->lease = opts->lease > 0 ? opts->lease : 15;
    snprintf(b->schema, sizeof b->schema, "%s", opts->pg_schema ? opts->pg_schema : "wqrun");
    gethostname(b->host, sizeof b->host - 1);
    if (opts->runner_name)
        snprintf(b->runner_name, sizeof b->runner_name, "%s", opts->runner_name);
    else
        snprintf(b->runner_name, sizeof b->runner_name, "%s:%d", b->host, (int)getpid());
    wq_pgconn_hooks hooks = {wq_pgb_on_up, wq_pgb_on_down, wq_pgb_on_notify, b};
    b->c = wq_pgconn_open(b->evb, b->url, 10, &hooks, err, errlen);
    if (!b->c) {
        free(b->url);
        free(b);
        return WQ_EIO;
    }
    PGconn *pg = wq_pgconn_pg(b->c);
    snprintf(b->where, sizeof b->where, "%s", wq_pg_describe(pg, NULL));
    /* Start-up is blocking: leave pipeline mode for it. */
    PQexitPipelineMode(pg);
    PQsetnonblocking(pg, 0);
    char done[200], e[512];
    int rc = WQ_EIO;
    if (wq_pg_migrate(pg, b->schema, done, sizeof done, e, sizeof e) < 0) {
        snprintf(err, errlen, "PostgreSQL at %s: %s", b->where, e);
        rc = WQ_EFORMAT;
        goto fail;
    }
    if (register_runner(b, pg, err, errlen) < 0)
        goto fail;
    if (PQsetnonblocking(pg, 1) != 0 || PQenterPipelineMode(pg) != 1) {
        snprintf(err, errlen, "cannot enter pipeline mode on %s", b->where);
        goto fail;
    }
    b->cycle_ev = event_new(b->evb, -1, 0, wq_pgb_on_cycle, b);
    b->tick_ev = event_new(b->evb, -1, EV_PERSIST, wq_pgb_on_tick, b);
    b->due_ev = evtimer_new(b->evb, on_due, b);
    if (!b->cycle_ev || !b->tick_ev || !b->due_ev || wq_pgb_events_open(b, opts) < 0) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    struct timeval tv = {0, 100000};
    event_add(b->tick_ev, &tv);
    wq_pgb_prepare_all(b, b->c, 1);
    /* Outcomes get a connection of their own: the database claims and finishes at once. */
    wq_pgconn_hooks hooks2 = {wq_pgb_on_up2, wq_pgb_on_down2, NULL, b};
    char err2[512];
    b->c2 = wq_pgconn_open(b->evb, b->url, 10, &hooks2, err2, sizeof err2);
    /* For the tests of outcomes lost at commit (tests/e2e/test_pg_lost_commit.sh):
     * WQ_TEST_PG_LOSE_AT_COMMIT=N reports every Nth outcomes' transaction lost. */
    const char *lose = getenv("WQ_TEST_PG_LOSE_AT_COMMIT");
    if (b->c2 && lose)
        wq_pgconn_lose_at_commit(b->c2, atol(lose));
    if (b->c2)
        wq_pgb_prepare_all(b, b->c2, 0);
    else
        wq_pgb_logf(b, WQ_LOG_WARN, "one connection only (outcomes share it with claims): %s",
                    err2);
    b->st.connected = 1;
    *out = &b->base;
    return 0;
fail:
    wq_pgconn_free(b->c);
    b->c = NULL;
    if (b->cycle_ev)
        event_free(b->cycle_ev);
    if (b->tick_ev)
        event_free(b->tick_ev);
    if (b->due_ev)
        event_free(b->due_ev);
    wq_pgb_events_close(b);
    free(b->url);
    free(b);
    return rc;
}
