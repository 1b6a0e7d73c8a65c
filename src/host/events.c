/*
 * The queues' events to their listeners (events.h): stream subscriptions
 * grouped by the queue they follow (or all), and a hash of key waits with a
 * count per queue, so that a queue nobody listens for is told nothing
 * (wq_events_wanted_for). Listeners may come and go from inside a
 * listener's call (a stream cut off, a wait answered and another begun):
 * one gone during an emit is only marked, and freed after it. On a shared
 * database the backend is told which queues this runner listens for, and
 * this runner's events of the queues other runners listen for go to them.
 */
#include "host/events.h"

#include "engine/common.h"
#include "host/json.h"

#include <json-c/json_object.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The subscriptions to one queue (or, queue NULL, to all): an emit looks at each group once. */
typedef struct sgroup {
    char *queue;
    wq_events_sub *subs;
    struct sgroup *next;
} sgroup;

struct wq_events_sub {
    sgroup *g;
    void (*fn)(void *ud, const wq_life *e);
    void *ud;
    int gone;
    wq_events_sub *next;
};

struct wq_events_wait {
    uint64_t hash;
    char *queue, *key;
    size_t keylen;
    void (*fn)(void *ud, const wq_life *e);
    void *ud;
    int gone;
    wq_events_wait *next, *prev; /* in its bucket */
};

/* How many key waits a queue has (a short list: the queues of the waits). */
typedef struct qwaits {
    char queue[65];
    size_t n;
    struct qwaits *next;
} qwaits;

struct wq_events {
    sgroup *groups;
    qwaits *waited;
    char *announced;          /* what the backend was last told this runner listens for */
    wq_events_wait **buckets; /* nbuckets, a power of two */
    size_t nbuckets, nwaits;
    int emitting; /* an emit is under way: what goes is only marked */
    int swept;    /* something was marked gone meanwhile */
    uint64_t seq; /* events emitted */
};

static const char *const names[WQ_LIFE_NTYPES] = {"added",  "started", "progress",  "retrying",
                                                  "done",   "dead",    "cancelled", "removed",
                                                  "paused", "resumed"};

const char *wq_life_name(wq_life_type t)
{
    return (unsigned)t < WQ_LIFE_NTYPES ? names[t] : "?";
}

int wq_life_ends(wq_life_type t)
{
    return t == WQ_LIFE_DONE || t == WQ_LIFE_DEAD || t == WQ_LIFE_CANCELLED || t == WQ_LIFE_REMOVED;
}

static wq_events *state(wq_host *h)
{
    if (!h->events)
        h->events = calloc(1, sizeof *h->events);
    return h->events;
}

const char *wq_events_runner(wq_host *h)
{
    if (!h->runner[0]) {
        if (h->opts.runner_name) {
            snprintf(h->runner, sizeof h->runner, "%s", h->opts.runner_name);
        } else {
            char host[256] = "";
            gethostname(host, sizeof host - 1);
            snprintf(h->runner, sizeof h->runner, "%s:%ld", host, (long)getpid());
        }
    }
    return h->runner;
}

/* FNV-1a of queue, a NUL, and key. */
static uint64_t hash_of(const char *queue, const char *key, size_t len)
{
    uint64_t x = 1469598103934665603ULL;
    for (const char *p = queue; *p; p++)
        x = (x ^ (unsigned char)*p) * 1099511628211ULL;
    x *= 1099511628211ULL;
    for (size_t i = 0; i < len; i++)
        x = (x ^ (unsigned char)key[i]) * 1099511628211ULL;
    return x;
}

/* Who listens changed: the queues' cached answers (lqueue_told) are asked again. */
static void listeners_changed(wq_host *h)
{
    h->events_gen++;
}

/* Appends name to the comma-separated list in buf (n bytes used) unless it is there; 0, or -1
 * when it does not fit. */
static int add_name(char *buf, size_t size, size_t *n, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = buf; p < buf + *n;) {
        size_t l = strcspn(p, ",");
        if (l == len && memcmp(p, name, len) == 0)
            return 0;
        p += l + 1;
    }
    if (*n + len + 2 > size)
        return -1;
    if (*n)
        buf[(*n)++] = ',';
    memcpy(buf + *n, name, len + 1);
    *n += len;
    return 0;
}

/* On a shared database, tells the backend what this runner listens for now (when it changed):
 * every queue, a list of them, or nothing; the other runners relay those events. */
static void wanted_changed(wq_host *h)
{
    wq_events *ev = h->events;
    if (!ev || !h->backend || !wq_backend_shared(h->backend))
        return;
    char buf[4096];
    size_t n = 0;
    int all = 0;
    buf[0] = '\0';
    for (sgroup *g = ev->groups; g && !all; g = g->next) {
        int live = 0;
        for (wq_events_sub *s = g->subs; s && !live; s = s->next)
            live = !s->gone;
        if (live && (!g->queue || add_name(buf, sizeof buf, &n, g->queue) < 0))
            all = 1; /* a stream of every queue (or too many names: all of them) */
    }
    for (qwaits *c = ev->waited; c && !all; c = c->next)
        if (add_name(buf, sizeof buf, &n, c->queue) < 0)
            all = 1;
    const char *want = all ? "*" : n ? buf : NULL;
    if ((!want && !ev->announced) || (want && ev->announced && strcmp(want, ev->announced) == 0))
        return;
    free(ev->announced);
    ev->announced = want ? strdup(want) : NULL;
    wq_backend_listen(h->backend, want);
}

/* A wait of queue goes (told, or given up). */
static void qwaits_drop(wq_events *ev, const char *queue)
{
    for (qwaits **p = &ev->waited; *p; p = &(*p)->next)
        if (strcmp((*p)->queue, queue) == 0) {
            qwaits *c = *p;
            if (--c->n == 0) {
                *p = c->next;
                free(c);
            }
            return;
        }
}

/* ---- subscriptions ---- */

static int same_queue(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

/* Unlinks s from its group (and an empty group from the list) and frees it. */
static void sub_free(wq_events *ev, wq_events_sub *s)
{
    sgroup *g = s->g;
    for (wq_events_sub **p = &g->subs; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    free(s);
    if (g->subs)
        return;
    for (sgroup **p = &ev->groups; *p; p = &(*p)->next)
        if (*p == g) {
            *p = g->next;
            break;
        }
    free(g->queue);
    free(g);
}

wq_events_sub *wq_events_subscribe(wq_host *h, const char *queue,
                                   void (*fn)(void *ud, const wq_life *e), void *ud)
{
    wq_events *ev = state(h);
    if (!ev)
        return NULL;
    sgroup *g = ev->groups;
    while (g && !same_queue(g->queue, queue))
        g = g->next;
    if (!g) {
        if (!(g = calloc(1, sizeof *g)) || (queue && !(g->queue = strdup(queue)))) {
            free(g);
            return NULL;
        }
        g->next = ev->groups;
        ev->groups = g;
    }
    wq_events_sub *s = calloc(1, sizeof *s);
    if (!s) {
        if (!g->subs) { /* made for it: unlinked again */
            ev->groups = g->next;
            free(g->queue);
            free(g);
        }
        return NULL;
    }
    s->g = g;
    s->fn = fn;
    s->ud = ud;
    s->next = g->subs;
    g->subs = s;
    h->listeners++;
    listeners_changed(h);
    wanted_changed(h);
    return s;
}

void wq_events_unsubscribe(wq_host *h, wq_events_sub *s)
{
    if (!s || s->gone)
        return;
    s->gone = 1;
    h->listeners--;
    listeners_changed(h);
    wq_events *ev = h->events;
    if (ev->emitting)
        ev->swept = 1;
    else
        sub_free(ev, s);
    wanted_changed(h);
}

/* ---- key waits ---- */

static int grow(wq_events *ev)
{
    size_t n = ev->nbuckets ? ev->nbuckets * 2 : 64;
    wq_events_wait **b = calloc(n, sizeof *b);
    if (!b)
        return -1;
    for (size_t i = 0; i < ev->nbuckets; i++) {
        wq_events_wait *w = ev->buckets[i];
        while (w) {
            wq_events_wait *next = w->next;
            size_t j = w->hash & (n - 1);
            w->prev = NULL;
            w->next = b[j];
            if (b[j])
                b[j]->prev = w;
            b[j] = w;
            w = next;
        }
    }
    free(ev->buckets);
    ev->buckets = b;
    ev->nbuckets = n;
    return 0;
}

wq_events_wait *wq_events_wait_key(wq_host *h, const char *queue, const char *key, size_t len,
                                   void (*fn)(void *ud, const wq_life *e), void *ud)
{
    wq_events *ev = state(h);
    if (!ev)
        return NULL;
    /* not while an emit walks a bucket (a longer chain for a while is fine) */
    if (ev->nwaits + 1 > ev->nbuckets * 2 && (!ev->emitting || !ev->nbuckets) && grow(ev) < 0 &&
        !ev->nbuckets)
        return NULL;
    wq_events_wait *w = calloc(1, sizeof *w);
    if (!w || !(w->queue = strdup(queue)) || !(w->key = malloc(len ? len : 1))) {
        if (w)
            free(w->queue);
        free(w);
        return NULL;
    }
    memcpy(w->key, key, len);
    w->keylen = len;
    w->hash = hash_of(queue, key, len);
    w->fn = fn;
    w->ud = ud;
    size_t j = w->hash & (ev->nbuckets - 1);
    w->next = ev->buckets[j];
    if (w->next)
        w->next->prev = w;
    ev->buckets[j] = w;
    ev->nwaits++;
    qwaits *c = ev->waited;
    while (c && strcmp(c->queue, queue) != 0)
        c = c->next;
    if (!c && (c = calloc(1, sizeof *c))) {
        snprintf(c->queue, sizeof c->queue, "%s", queue);
        c->next = ev->waited;
        ev->waited = c;
    }
    if (c)
        c->n++;
    h->listeners++;
    listeners_changed(h);
    wanted_changed(h);
    return w;
}

static void wait_free(wq_events *ev, wq_events_wait *w)
{
    size_t j = w->hash & (ev->nbuckets - 1);
    if (w->prev)
        w->prev->next = w->next;
    else
        ev->buckets[j] = w->next;
    if (w->next)
        w->next->prev = w->prev;
    ev->nwaits--;
    free(w->queue);
    free(w->key);
    free(w);
}

void wq_events_unwait(wq_host *h, wq_events_wait *w)
{
    if (!w || w->gone)
        return;
    w->gone = 1;
    h->listeners--;
    listeners_changed(h);
    wq_events *ev = h->events;
    qwaits_drop(ev, w->queue);
    if (ev->emitting)
        ev->swept = 1;
    else
        wait_free(ev, w);
    wanted_changed(h);
}

/* ---- as JSON (the event streams, the relay between runners) ---- */

static void put_string(struct evbuffer *b, const char *s, size_t n)
{
    evbuffer_add(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        evbuffer_add(b, s + run, i - run);
        run = i + 1;
        if (c == '"')
            evbuffer_add(b, "\\\"", 2);
        else if (c == '\\')
            evbuffer_add(b, "\\\\", 2);
        else if (c == '\n')
            evbuffer_add(b, "\\n", 2);
        else if (c == '\t')
            evbuffer_add(b, "\\t", 2);
        else
            evbuffer_add_printf(b, "\\u%04x", c);
    }
    evbuffer_add(b, s + run, n - run);
    evbuffer_add(b, "\"", 1);
}

static void put_time(struct evbuffer *b, const char *name, double t)
{
    if (t > 0)
        evbuffer_add_printf(b, ",\"%s\":%.6f", name, t);
}

int wq_life_json(struct evbuffer *b, const wq_life *e, size_t max)
{
    size_t at = evbuffer_get_length(b);
    evbuffer_add_printf(b, "{\"event\":\"%s\",\"queue\":", wq_life_name(e->type));
    put_string(b, e->queue, strlen(e->queue));
    if (e->key) {
        evbuffer_add(b, ",\"key\":", 7);
        put_string(b, e->key, e->keylen);
    }
    if (e->attempt > 0)
        evbuffer_add_printf(b, ",\"attempt\":%lld", (long long)e->attempt);
    evbuffer_add(b, ",\"runner\":", 10);
    put_string(b, e->runner, strlen(e->runner));
    put_time(b, "at", e->at);
    put_time(b, "added_at", e->added_at);
    put_time(b, "started_at", e->started_at);
    if (e->error) {
        evbuffer_add(b, ",\"error\":", 9);
        put_string(b, e->error, strlen(e->error));
    }
    if (e->type == WQ_LIFE_RETRYING && isfinite(e->retry_in))
        evbuffer_add_printf(b, ",\"retry_in\":%.3f", e->retry_in);
    if (e->data) {
        size_t len = evbuffer_get_length(b) - at;
        if (max && len + e->datalen + 14 > max) {
            evbuffer_add(b, ",\"truncated\":true", 17);
        } else {
            evbuffer_add_printf(b, ",\"%s\":", e->type == WQ_LIFE_PROGRESS ? "progress" : "result");
            evbuffer_add(b, e->data, e->datalen);
        }
    }
    return evbuffer_add(b, "}", 1);
}

/* ---- the relay between the runners of a shared database ---- */

#define RELAY_MAX 7900 /* bytes of one event as relayed (a notification holds 8000) */

static void publish(wq_host *h, const wq_life *e)
{
    struct evbuffer *b = evbuffer_new();
    if (!b)
        return;
    if (wq_life_json(b, e, RELAY_MAX) == 0 && evbuffer_get_length(b) <= RELAY_MAX) {
        size_t n = evbuffer_get_length(b);
        wq_backend_publish(h->backend, (const char *)evbuffer_pullup(b, -1), n);
    }
    evbuffer_free(b);
}

/* A pause or resume: every runner of a shared database applies it itself (the database tells
 * each), and tells its own listeners: a relayed copy would be told twice. */
static int queue_wide(wq_life_type t)
{
    return t == WQ_LIFE_PAUSED || t == WQ_LIFE_RESUMED;
}

void wq_events_relay(void *ud, int on)
{
    wq_host *h = ud;
    h->relaying = on;
    h->events_gen++;
}

static const char *str_of(json_object *o, const char *k, size_t *n)
{
    json_object *v;
    if (!json_object_object_get_ex(o, k, &v) || !json_object_is_type(v, json_type_string))
        return NULL;
    if (n)
        *n = (size_t)json_object_get_string_len(v);
    return json_object_get_string(v);
}

static double num_of(json_object *o, const char *k)
{
    json_object *v;
    return json_object_object_get_ex(o, k, &v) ? json_object_get_double(v) : 0;
}

void wq_events_relayed(void *ud, const char *json, size_t n)
{
    wq_host *h = ud;
    if (h->listeners <= 0)
        return;
    json_object *o = NULL;
    if (wq_json_parse(json, n, &o) != NULL || !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        return;
    }
    const char *type = str_of(o, "event", NULL), *runner = str_of(o, "runner", NULL);
    wq_life e = {.queue = str_of(o, "queue", NULL)};
    int t = 0;
    while (type && t < WQ_LIFE_NTYPES && strcmp(wq_life_name((wq_life_type)t), type) != 0)
        t++;
    /* one of its own comes back too: it was told here already */
    if (!type || t == WQ_LIFE_NTYPES || queue_wide((wq_life_type)t) || !e.queue || !runner ||
        strcmp(runner, wq_events_runner(h)) == 0) {
        json_object_put(o);
        return;
    }
    e.type = (wq_life_type)t;
    e.runner = runner;
    e.key = str_of(o, "key", &e.keylen);
    e.attempt = (int64_t)num_of(o, "attempt");
    e.error = str_of(o, "error", NULL);
    e.retry_in = num_of(o, "retry_in");
    e.at = num_of(o, "at");
    e.added_at = num_of(o, "added_at");
    e.started_at = num_of(o, "started_at");
    json_object *v;
    if (json_object_object_get_ex(o, e.type == WQ_LIFE_PROGRESS ? "progress" : "result", &v)) {
        e.data = json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN |
                                                       JSON_C_TO_STRING_NOSLASHESCAPE);
        e.datalen = strlen(e.data);
    }
    wq_events_emit(h, &e);
    json_object_put(o);
}

int wq_events_wanted_for(wq_host *h, const char *queue)
{
    wq_events *ev = h->events;
    if (h->relaying && wq_backend_relays(h->backend, queue))
        return 1;
    if (!ev || h->listeners <= 0)
        return 0;
    for (sgroup *g = ev->groups; g; g = g->next)
        if (!g->queue || strcmp(g->queue, queue) == 0)
            return 1;
    for (qwaits *c = ev->waited; c; c = c->next)
        if (strcmp(c->queue, queue) == 0)
            return 1;
    return 0;
}

/* ---- emitting ---- */

/* Frees what was marked gone during an emit. */
static void sweep(wq_events *ev)
{
    ev->swept = 0;
    for (sgroup *g = ev->groups, *gnext; g; g = gnext) {
        gnext = g->next; /* g goes with its last subscription */
        for (wq_events_sub *s = g->subs, *next; s; s = next) {
            next = s->next;
            if (s->gone)
                sub_free(ev, s);
        }
    }
    for (size_t i = 0; i < ev->nbuckets; i++) {
        wq_events_wait *w = ev->buckets[i];
        while (w) {
            wq_events_wait *next = w->next;
            if (w->gone)
                wait_free(ev, w);
            w = next;
        }
    }
}

void wq_events_emit(wq_host *h, const wq_life *e)
{
    wq_life x = *e;
    if (!x.at)
        x.at = wq_host_unix(h, wq_host_now(h));
    if (!x.runner) { /* this runner's own */
        x.runner = wq_events_runner(h);
        if (h->relaying && !queue_wide(x.type) && wq_backend_relays(h->backend, x.queue))
            publish(h, &x);
    }
    wq_events *ev = h->events;
    if (!ev || h->listeners <= 0)
        return;
    x.seq = ++ev->seq;
    int outer = !ev->emitting;
    ev->emitting = 1;
    for (sgroup *g = ev->groups; g; g = g->next)
        if (!g->queue || strcmp(g->queue, x.queue) == 0)
            for (wq_events_sub *s = g->subs; s; s = s->next)
                if (!s->gone)
                    s->fn(s->ud, &x);
    if (x.key && wq_life_ends(x.type) && ev->nwaits) {
        uint64_t hash = hash_of(x.queue, x.key, x.keylen);
        for (wq_events_wait *w = ev->buckets[hash & (ev->nbuckets - 1)]; w; w = w->next) {
            if (w->gone || w->hash != hash || w->keylen != x.keylen ||
                memcmp(w->key, x.key, x.keylen) != 0 || strcmp(w->queue, x.queue) != 0)
                continue;
            w->gone = 1; /* told once: gone before its call */
            h->listeners--;
            listeners_changed(h);
            qwaits_drop(ev, w->queue);
            ev->swept = 1;
            w->fn(w->ud, &x);
        }
    }
    if (outer) {
        ev->emitting = 0;
        if (ev->swept) {
            sweep(ev);
            wanted_changed(h);
        }
    }
}

void wq_events_free(wq_host *h)
{
    wq_events *ev = h->events;
    if (!ev)
        return;
    while (ev->groups) {
        sgroup *g = ev->groups;
        ev->groups = g->next;
        while (g->subs) {
            wq_events_sub *s = g->subs;
            g->subs = s->next;
            free(s);
        }
        free(g->queue);
        free(g);
    }
    for (size_t i = 0; i < ev->nbuckets; i++)
        while (ev->buckets[i])
            wait_free(ev, ev->buckets[i]);
    free(ev->buckets);
    free(ev->announced);
    while (ev->waited) {
        qwaits *c = ev->waited;
        ev->waited = c->next;
        free(c);
    }
    free(ev);
    h->events = NULL;
    h->listeners = 0;
}
