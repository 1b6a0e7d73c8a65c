/*
 * Events between the runners of one database (SPEC 11: "on PostgreSQL it
 * carries every runner's events"), on the channel every runner LISTENs to
 * already. Nothing is sent while nobody listens:
 *
 * - a runner with listeners (an event stream, a waiter) announces what it
 *   listens for, "!events:ID:QUEUES" (QUEUES "*" for every queue, or a
 *   comma-separated list), at once when that changes and every
 *   ANNOUNCE_MS while it lasts; a runner that hears another's announcement
 *   relays its own events of those queues for RELAY_MS from then (so they
 *   stop soon after the last listener went);
 * - relayed events are "~" then JSON lines (events.h's wq_life_json), as
 *   many as fit in one notification's 8000 bytes, sent when the loop's turn
 *   that told them ends, in a transaction of their own;
 * - every runner hears every "~" notification; one without listeners drops
 *   it at the first byte, one with listeners hands each line to the host,
 *   which drops its own.
 *
 * A notification is delivered when its transaction commits; the database
 * serializes notifying commits (POSTGRES.md), which is why events go in
 * batches and only while someone listens.
 */
#include "store/pg/pg_int.h"

#include "store/pg/pg_schema.h"
#include "store/pg/pgconn.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ANNOUNCE_MS 2000
#define RELAY_MS 5000
#define PAYLOAD_MAX 7990 /* bytes of one notification's payload (8000 is PostgreSQL's limit) */

/* A runner that listens, as its last announcement said. */
typedef struct listener {
    int64_t id;
    char *queues;  /* "*" or "a,b" */
    int64_t until; /* real ns: relayed to until then */
    struct listener *next;
} listener;

struct pg_relay {
    void (*relayed)(void *ud, const char *json, size_t n);
    void (*relay)(void *ud, int on);
    void *ud;
    char *want;            /* what this runner listens for (announced), NULL: nothing */
    int64_t last_announce; /* real ns */
    listener *others;      /* the runners that listen (whose events to relay) */
    char *buf;             /* "~" and the lines waiting to be sent */
    size_t len, cap;
    struct event *flush_ev;
};

int wq_pgb_events_open(pgb *b, const wq_backend_opts *opts)
{
    if (!opts->relayed)
        return 0;
    struct pg_relay *r = calloc(1, sizeof *r);
    if (!r)
        return -1;
    r->relayed = opts->relayed;
    r->relay = opts->relay;
    r->ud = opts->relay_ud;
    b->relay = r;
    return 0;
}

void wq_pgb_events_close(pgb *b)
{
    struct pg_relay *r = b->relay;
    if (!r)
        return;
    if (r->flush_ev)
        event_free(r->flush_ev);
    free(r->buf);
    free(r->want);
    while (r->others) {
        listener *l = r->others;
        r->others = l->next;
        free(l->queues);
        free(l);
    }
    free(r);
    b->relay = NULL;
}

/* Sends sql (with @L) and its one parameter in a transaction of its own; 0 or -1 (down). */
static int send1(pgb *b, const char *sql, const char *param)
{
    char *s = wq_pg_sql(wq_pgconn_pg(b->c), b->schema, sql);
    const char *v[1] = {param};
    int rc = s && wq_pgconn_send(b->c, NULL, s, param ? 1 : 0, v, NULL, NULL) == 0 &&
                     wq_pgconn_sync(b->c, NULL, NULL) == 0
                 ? 0
                 : -1;
    free(s);
    return rc;
}

static void announce(pgb *b)
{
    struct pg_relay *r = b->relay;
    char payload[PAYLOAD_MAX];
    snprintf(payload, sizeof payload, "!events:%lld:%s", (long long)b->runner_id, r->want);
    r->last_announce = wq_pgb_real_ns();
    if (wq_pgconn_up(b->c))
        send1(b, "SELECT pg_notify(@L, $1)", payload);
}

static void flush(pgb *b)
{
    struct pg_relay *r = b->relay;
    if (r->len > 1 && wq_pgconn_up(b->c)) {
        r->buf[r->len] = '\0';
        send1(b, "SELECT pg_notify(@L, $1)", r->buf);
    }
    r->len = 0; /* not sent while the database is away: events are not kept */
}

static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    flush(arg);
}

void wq_pgb_listen(wq_backend *base, const char *queues)
{
    pgb *b = (pgb *)base;
    struct pg_relay *r = b->relay;
    if (!r || (!queues && !r->want) || (queues && r->want && strcmp(queues, r->want) == 0))
        return;
    free(r->want);
    r->want = queues ? strdup(queues) : NULL;
    if (r->want && strlen(r->want) > PAYLOAD_MAX - 48) { /* too many names to say: all */
        free(r->want);
        r->want = strdup("*");
    }
    if (r->want)
        announce(b); /* at once: the others relay what it now wants before its first end */
}

/* Whether the comma-separated list holds name. */
static int listed(const char *list, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = list; *p;) {
        size_t l = strcspn(p, ",");
        if (l == len && memcmp(p, name, len) == 0)
            return 1;
        p += l + (p[l] == ',');
    }
    return 0;
}

int wq_pgb_relays(wq_backend *base, const char *queue)
{
    struct pg_relay *r = ((pgb *)base)->relay;
    for (listener *l = r ? r->others : NULL; l; l = l->next)
        if (strcmp(l->queues, "*") == 0 || listed(l->queues, queue))
            return 1;
    return 0;
}

void wq_pgb_publish(wq_backend *base, const char *json, size_t n)
{
    pgb *b = (pgb *)base;
    struct pg_relay *r = b->relay;
    if (!r || !r->others || n + 2 > PAYLOAD_MAX)
        return;
    if (r->len + n + 1 > PAYLOAD_MAX)
        flush(b);
    if (r->cap < PAYLOAD_MAX + 1) {
        char *nb = realloc(r->buf, PAYLOAD_MAX + 1);
        if (!nb)
            return;
        r->buf = nb;
        r->cap = PAYLOAD_MAX + 1;
    }
    if (r->len == 0)
        r->buf[r->len++] = '~';
    else
        r->buf[r->len++] = '\n';
    memcpy(r->buf + r->len, json, n);
    r->len += n;
    if (!r->flush_ev && !(r->flush_ev = event_new(b->evb, -1, 0, on_flush, b)))
        return;
    event_active(r->flush_ev, 0, 0); /* at the end of this turn (once however many) */
}

int wq_pgb_events_notified(pgb *b, const char *payload)
{
    struct pg_relay *r = b->relay;
    if (payload[0] == '~') {
        if (!r || !r->want)
            return 1;
        const char *p = payload + 1;
        while (*p) {
            const char *nl = strchr(p, '\n');
            size_t n = nl ? (size_t)(nl - p) : strlen(p);
            r->relayed(r->ud, p, n);
            p += n + (nl ? 1 : 0);
        }
        return 1;
    }
    if (strncmp(payload, "!events:", 8) == 0) {
        char *end;
        int64_t id = strtoll(payload + 8, &end, 10);
        if (!r || id == b->runner_id)
            return 1;
        const char *queues = *end == ':' ? end + 1 : "*"; /* "!events:ID": every queue */
        listener *l = r->others;
        while (l && l->id != id)
            l = l->next;
        int changed = !l || strcmp(l->queues, queues) != 0;
        if (!l && (l = calloc(1, sizeof *l))) {
            l->id = id;
            l->next = r->others;
            r->others = l;
        }
        if (l && changed) {
            free(l->queues);
            if (!(l->queues = strdup(queues)))
                l->queues = strdup("*");
        }
        if (l && l->queues)
            l->until = wq_pgb_real_ns() + (int64_t)RELAY_MS * 1000000;
        if (changed && r->relay) /* another runner listens (for other queues now) */
            r->relay(r->ud, 1);
        return 1;
    }
    return 0;
}

void wq_pgb_events_tick(pgb *b, int64_t now)
{
    struct pg_relay *r = b->relay;
    if (!r)
        return;
    if (r->want && now - r->last_announce > (int64_t)ANNOUNCE_MS * 1000000)
        announce(b);
    int gone = 0;
    for (listener **p = &r->others; *p;) {
        listener *l = *p;
        if (now > l->until || !l->queues) { /* it did not say so again: it listens no more */
            *p = l->next;
            free(l->queues);
            free(l);
            gone = 1;
        } else {
            p = &l->next;
        }
    }
    if (gone) {
        if (!r->others)
            flush(b);
        if (r->relay)
            r->relay(r->ud, r->others != NULL);
    }
}
