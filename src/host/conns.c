/*
 * HTTP connection guard. evhttp alone bounds nothing: a client that sends
 * a byte every few seconds keeps its connection forever (the timeout is
 * per read), connections are unlimited, and when accept() fails with
 * EMFILE the listener retries at once, forever (100% CPU, a log line per
 * try). Here:
 *
 * - every connection is created by wq_conns_bevcb (evhttp's bufferevent
 *   hook), so it is counted; an extra reference on its bufferevent lets us
 *   see when evhttp is done with it (its callbacks are cleared) and release
 *   it then;
 * - a connection must deliver a whole request within the deadline of its
 *   accept or of its previous answer, else its socket is shut down (evhttp
 *   then closes it as a client that went away);
 * - at the limit, a new connection evicts the one closest to its deadline
 *   (slow clients make room for new ones) unless every one is waiting for
 *   an answer;
 * - when accept() fails for lack of descriptors, one spare descriptor is
 *   given up to accept and drop the waiting connection, and the listener
 *   pauses (100 ms doubling to 1 s), so the loop, the jobs and wq.exec keep
 *   the descriptors they need.
 */
#define _GNU_SOURCE
#include "host/conns.h"

#include "engine/keymap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct conn {
    struct bufferevent *bev;
    int64_t deadline; /* real ns; WQ_NEVER while a request waits for its answer */
} conn;

struct wq_conns {
    wq_host *h;
    struct evconnlistener *lev;
    int max;
    int64_t deadline_ns;
    conn *v;
    int n, cap;
    wq_keymap *index; /* bev pointer -> position in v */
    struct event *tick;
    struct event *resume; /* re-enables the listener after a pause */
    int paused;
    int64_t pause_ns;
    int reserve_fd; /* given up to shed a connection when descriptors run out */
    int warned;
    int64_t last_error; /* real ns of the last accept failure */
};

#define TICK_MS 100

/* The guard of the one HTTP server (the listener's error callback gets
 * evhttp's argument, not ours). */
static wq_conns *guard;

static uint64_t *slot_of(const wq_conns *c, struct bufferevent *bev)
{
    return wq_keymap_get(c->index, (const char *)&bev, sizeof bev);
}

static void drop(wq_conns *c, int i)
{
    struct bufferevent *bev = c->v[i].bev;
    wq_keymap_del(c->index, (const char *)&bev, sizeof bev);
    c->v[i] = c->v[--c->n];
    if (i < c->n) {
        uint64_t *s = slot_of(c, c->v[i].bev);
        if (s)
            *s = (uint64_t)i;
    }
    bufferevent_decref(bev); /* evhttp is done with it: this frees it */
}

/* Releases the connections evhttp has closed (it clears their callbacks). */
static void reap(wq_conns *c)
{
    for (int i = c->n - 1; i >= 0; i--) {
        bufferevent_data_cb rd;
        bufferevent_event_cb ev;
        bufferevent_getcb(c->v[i].bev, &rd, NULL, &ev, NULL);
        if (!rd && !ev)
            drop(c, i);
    }
}

static void cut(conn *k)
{
    evutil_socket_t fd = bufferevent_getfd(k->bev);
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR);
    k->deadline = 0; /* not again */
}

static void set_paused(wq_conns *c, int paused)
{
    if (paused == c->paused)
        return;
    c->paused = paused;
    if (paused)
        evconnlistener_disable(c->lev);
    else
        evconnlistener_enable(c->lev);
}

/* Whether some connection could be cut to make room (it is not waiting for an answer). */
static int cuttable(const wq_conns *c)
{
    for (int i = 0; i < c->n; i++)
        if (c->v[i].deadline && c->v[i].deadline != WQ_NEVER)
            return 1;
    return 0;
}

/* After a pause: accept again if there is room, or a connection to make room with. */
static void maybe_resume(wq_conns *c)
{
    if (c->n < c->max || (c->n < 2 * c->max && cuttable(c)))
        set_paused(c, 0);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    wq_conns *c = arg;
    reap(c);
    int64_t now = wq_real_now();
    for (int i = 0; i < c->n; i++)
        if (c->v[i].deadline && c->v[i].deadline != WQ_NEVER && now > c->v[i].deadline)
            cut(&c->v[i]);
    if (c->paused && !evtimer_pending(c->resume, NULL))
        maybe_resume(c);
    /* Ten quiet seconds end an episode of accept failures. */
    if (c->warned && now - c->last_error > 10 * 1000000000LL) {
        c->warned = 0;
        c->pause_ns = 0;
    }
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    wq_conns *c = arg;
    reap(c);
    maybe_resume(c);
}

static void pause_for(wq_conns *c, int64_t ns)
{
    set_paused(c, 1);
    struct timeval tv = {(time_t)(ns / 1000000000), (suseconds_t)(ns % 1000000000 / 1000)};
    evtimer_add(c->resume, &tv);
}

static void on_accept_error(struct evconnlistener *lev, void *arg)
{
    (void)arg;
    wq_conns *c = guard;
    int err = errno;
    if (!c)
        return;
    c->last_error = wq_real_now();
    if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
        /* Take the waiting connection and drop it, with the spare descriptor. */
        if (c->reserve_fd >= 0) {
            close(c->reserve_fd);
            int fd = accept(evconnlistener_get_fd(lev), NULL, NULL);
            if (fd >= 0)
                close(fd);
            c->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        }
        c->pause_ns = c->pause_ns ? c->pause_ns * 2 : 100 * 1000000LL;
        if (c->pause_ns > 1000 * 1000000LL)
            c->pause_ns = 1000 * 1000000LL;
        if (!c->warned) {
            c->warned = 1;
            wq_host_log(c->h, "wqrun: HTTP: cannot accept connections (%s); pausing the listener",
                        strerror(err));
        }
        pause_for(c, c->pause_ns);
        return;
    }
    /* Anything else: say it once in a while, never spin on it. */
    if (!c->warned) {
        c->warned = 1;
        wq_host_log(c->h, "wqrun: HTTP: accept failed: %s", strerror(err));
    }
    pause_for(c, 100 * 1000000LL);
}

struct bufferevent *wq_conns_bevcb(struct event_base *base, void *arg)
{
    wq_conns *c = arg;
    struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (!bev)
        return NULL;
    if (c->n >= c->max) {
        reap(c);
        if (c->n >= c->max) {
            /* Make room: the connection nearest its deadline goes. */
            int victim = -1;
            for (int i = 0; i < c->n; i++) {
                int64_t d = c->v[i].deadline;
                if (d && d != WQ_NEVER && (victim < 0 || d < c->v[victim].deadline))
                    victim = i;
            }
            if (victim >= 0)
                cut(&c->v[victim]);
            else
                set_paused(c, 1); /* all wait for answers: take no more for now */
        }
    }
    if (c->n == c->cap) {
        int ncap = c->cap ? c->cap * 2 : 64;
        conn *nv = realloc(c->v, (size_t)ncap * sizeof *nv);
        if (!nv)
            return bev; /* untracked: still served, just not counted */
        c->v = nv;
        c->cap = ncap;
    }
    uint64_t *s = wq_keymap_put(c->index, (const char *)&bev, sizeof bev, NULL);
    if (!s)
        return bev;
    *s = (uint64_t)c->n;
    bufferevent_incref(bev);
    c->v[c->n++] = (conn){bev, wq_real_now() + c->deadline_ns};
    /* Cut connections count until evhttp has closed them: do not run ahead. */
    if (c->n >= 2 * c->max)
        set_paused(c, 1);
    return bev;
}

static conn *find(wq_conns *c, struct evhttp_request *req)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    if (!evcon)
        return NULL;
    uint64_t *s = slot_of(c, evhttp_connection_get_bufferevent(evcon));
    return s && *s < (uint64_t)c->n ? &c->v[*s] : NULL;
}

void wq_conns_request(wq_conns *c, struct evhttp_request *req, int held)
{
    if (!c)
        return;
    conn *k = find(c, req);
    if (k && k->deadline)
        k->deadline = held ? WQ_NEVER : wq_real_now() + c->deadline_ns;
}

void wq_conns_answered(wq_conns *c, struct evhttp_request *req)
{
    if (!c)
        return;
    conn *k = find(c, req);
    if (k && k->deadline)
        k->deadline = wq_real_now() + c->deadline_ns;
}

int wq_conns_count(const wq_conns *c)
{
    return c->n;
}

wq_conns *wq_conns_new(wq_host *h, struct evconnlistener *lev, int max, int64_t deadline_ns)
{
    wq_conns *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->h = h;
    c->lev = lev;
    c->max = max;
    c->deadline_ns = deadline_ns;
    c->index = wq_keymap_new();
    c->tick = event_new(h->base, -1, EV_PERSIST, on_tick, c);
    c->resume = evtimer_new(h->base, on_resume, c);
    c->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    struct timeval tv = {0, TICK_MS * 1000};
    if (!c->index || !c->tick || !c->resume || event_add(c->tick, &tv) < 0) {
        wq_conns_free(c);
        return NULL;
    }
    guard = c;
    evconnlistener_set_error_cb(lev, on_accept_error);
    return c;
}

void wq_conns_free(wq_conns *c)
{
    if (!c)
        return;
    if (guard == c)
        guard = NULL;
    if (c->tick)
        event_free(c->tick);
    if (c->resume)
        event_free(c->resume);
    /* evhttp frees the connections themselves; give back our references
     * after it did (the caller frees evhttp first). */
    for (int i = 0; i < c->n; i++)
        bufferevent_decref(c->v[i].bev);
    free(c->v);
    wq_keymap_free(c->index);
    if (c->reserve_fd >= 0)
        close(c->reserve_fd);
    free(c);
}
