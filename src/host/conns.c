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
 *   the descriptors they need;
 * - libevent 2.1 answers the requests it cannot parse itself (400, 413,
 *   417, 501), with an HTML page and no hook to change it (evhttp's error
 *   callback is 2.2's). Those answers are written while no reply of ours
 *   is (wq_conns_reply marks ours), always close the connection, and are
 *   written in pieces (status line, headers, body): a callback on the
 *   connection's output takes each piece back out as it is added and, at
 *   the end of the headers, writes the same status with a JSON error body
 *   instead. A 100 Continue (libevent's other answer) passes. Our own
 *   answers cost one flag test per piece.
 * - libevent answers 413 for a malformed chunk size as for a body over the
 *   limit; only the line tells them apart, and evhttp has consumed it when
 *   it fails. A callback on the input keeps the start of the last two lines
 *   evhttp began to read, so the 413 for a malformed chunk size becomes a
 *   400.
 */
#define _GNU_SOURCE
#include "host/conns.h"

#include "engine/keymap.h"

#include <event2/buffer.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SNAP 48 /* bytes kept of a line's start */

/* The start of a line evhttp began to read: at byte offset `at` of the input. */
typedef struct snap {
    uint64_t at;
    size_t len;
    char text[SNAP];
} snap;

typedef struct conn {
    struct bufferevent *bev;
    int64_t deadline; /* real ns; WQ_NEVER while a request waits for its answer */
    struct evbuffer_cb_entry *incb, *outcb;
    uint64_t consumed; /* input bytes evhttp has taken */
    snap snaps[2];     /* the last two line starts, snaps[last] the newest */
    int last;
    int fixing;            /* in on_output: what it adds is its own */
    int foreign;           /* 0, 1 libevent is writing an answer, 2 it was replaced */
    struct evbuffer *held; /* the libevent answer's status line and headers so far */
    int nodelay;           /* TCP_NODELAY is set on its socket */
} conn;

struct wq_conns {
    wq_host *h;
    struct evconnlistener *lev;
    int max;
    int64_t deadline_ns;
    conn **v;
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
/* Set while evhttp writes an answer of ours (wq_conns_reply). */
static int replying;

static uint64_t *slot_of(const wq_conns *c, struct bufferevent *bev)
{
    return wq_keymap_get(c->index, (const char *)&bev, sizeof bev);
}

static void free_conn(conn *k)
{
    evbuffer_remove_cb_entry(bufferevent_get_input(k->bev), k->incb);
    evbuffer_remove_cb_entry(bufferevent_get_output(k->bev), k->outcb);
    bufferevent_decref(k->bev); /* evhttp is done with it: this frees it */
    if (k->held)
        evbuffer_free(k->held);
    free(k);
}

static void drop(wq_conns *c, int i)
{
    conn *k = c->v[i];
    wq_keymap_del(c->index, (const char *)&k->bev, sizeof k->bev);
    c->v[i] = c->v[--c->n];
    if (i < c->n) {
        uint64_t *s = slot_of(c, c->v[i]->bev);
        if (s)
            *s = (uint64_t)i;
    }
    free_conn(k);
}

/* Releases the connections evhttp has closed (it clears their callbacks). */
static void reap(wq_conns *c)
{
    for (int i = c->n - 1; i >= 0; i--) {
        bufferevent_data_cb rd;
        bufferevent_event_cb ev;
        bufferevent_getcb(c->v[i]->bev, &rd, NULL, &ev, NULL);
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
    if (paused == c->paused || !c->lev)
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
        if (c->v[i]->deadline && c->v[i]->deadline != WQ_NEVER)
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
        if (c->v[i]->deadline && c->v[i]->deadline != WQ_NEVER && now > c->v[i]->deadline)
            cut(c->v[i]);
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
            wq_host_logl(c->h, WQ_LOG_WARN,
                         "wqrun: HTTP: cannot accept connections (%s); pausing the listener",
                         strerror(err));
        }
        pause_for(c, c->pause_ns);
        return;
    }
    /* Anything else: say it once in a while, never spin on it. */
    if (!c->warned) {
        c->warned = 1;
        wq_host_logl(c->h, WQ_LOG_ERROR, "wqrun: HTTP: accept failed: %s", strerror(err));
    }
    pause_for(c, 100 * 1000000LL);
}

/* ---- the start of each line evhttp reads (for the chunked 413/400) ---- */

/* Keeps the start of what evhttp reads next, when it is the start of a line. */
static void take_snap(conn *k, struct evbuffer *in)
{
    snap *s = &k->snaps[!k->last];
    ev_ssize_t n = evbuffer_copyout(in, s->text, SNAP);
    if (n <= 0 || s->text[0] == '\r' || s->text[0] == '\n')
        return; /* nothing yet, or the end of the line just read */
    s->len = (size_t)n;
    s->at = k->consumed;
    k->last = !k->last;
}

static void on_input(struct evbuffer *in, const struct evbuffer_cb_info *info, void *arg)
{
    conn *k = arg;
    if (info->n_deleted) {
        k->consumed += info->n_deleted;
        take_snap(k, in);
    } else if (info->n_added) {
        snap *s = &k->snaps[k->last];
        if (info->orig_size == 0) {
            take_snap(k, in); /* a new line starts with these bytes */
        } else if (s->at == k->consumed && s->len < SNAP && !memchr(s->text, '\n', s->len)) {
            ev_ssize_t n = evbuffer_copyout(in, s->text, SNAP); /* more of the same line */
            s->len = n > 0 ? (size_t)n : s->len;
        }
    }
}

/*
 * The line evhttp read last, when it ended exactly where evhttp stopped
 * (the chunk size or trailer line it failed on), else NULL; *len its
 * length without the line end.
 */
static const char *last_line(const conn *k, size_t *len)
{
    for (int j = 0; j < 2; j++) {
        const snap *s = &k->snaps[j ? !k->last : k->last];
        const char *nl = s->len ? memchr(s->text, '\n', s->len) : NULL;
        size_t n = nl ? (size_t)(nl - s->text) : 0;
        if (nl && s->at + n + 1 == k->consumed) {
            *len = n && s->text[n - 1] == '\r' ? n - 1 : n;
            return s->text;
        }
    }
    return NULL;
}

/* Whether evhttp (2.1.12, evhttp_handle_chunked_read) takes line[0..n) as a chunk size. */
static int chunk_size_ok(const char *line, size_t n)
{
    char buf[SNAP + 1];
    memcpy(buf, line, n);
    buf[n] = '\0';
    char *end;
    long long v = strtoll(buf, &end, 16);
    return buf[0] != '\0' && (*end == '\0' || *end == ' ') && v >= 0;
}

/* ---- libevent's own answers, made JSON ---- */

/* Moves the last n bytes of out (the piece just added) to `to`, or drops them (to NULL). */
static void take_tail(struct evbuffer *out, size_t n, struct evbuffer *to)
{
    size_t keep = evbuffer_get_length(out) - n;
    struct evbuffer *front = keep ? evbuffer_new() : NULL;
    evbuffer_unfreeze(out, 1); /* a socket bufferevent's output only drains by writing */
    if (front)
        evbuffer_remove_buffer(out, front, keep); /* a 100 Continue not yet sent */
    if (to)
        evbuffer_add_buffer(to, out);
    else
        evbuffer_drain(out, evbuffer_get_length(out));
    if (front) {
        evbuffer_add_buffer(out, front);
        evbuffer_free(front);
    }
    evbuffer_freeze(out, 1);
}

/* Writes the answer that replaces libevent's (status line and headers in k->held). */
static void replace_answer(conn *k, struct evbuffer *out)
{
    size_t hl = evbuffer_get_length(k->held);
    char *head = (char *)evbuffer_pullup(k->held, -1);
    int code = 0;
    if (!head || sscanf(head, "HTTP/%*d.%*d %d", &code) != 1)
        code = 400;
    const char *reason, *msg;
    size_t n;
    const char *line = last_line(k, &n);
    switch (code) {
    case 413:
        if (line && !chunk_size_ok(line, n)) {
            code = 400;
            reason = "Bad Request";
            msg = "malformed chunked body (a chunk size or trailer line)";
        } else {
            reason = "Payload Too Large";
            msg = "body over 16 MiB";
        }
        break;
    case 417:
        reason = "Expectation Failed";
        msg = "unsupported Expect header (only 100-continue is)";
        break;
    case 501:
        reason = "Not Implemented";
        msg = "unknown method";
        break;
    case 400:
        reason = "Bad Request";
        msg = "malformed request line or header, or headers over 16 KiB";
        break;
    default:
        reason = "Error";
        msg = "request refused";
        break;
    }
    char body[128];
    int bl = snprintf(body, sizeof body, "{\"error\":\"%s\"}", msg);
    /* libevent leaves out Content-Length only when the answer has no body: HEAD */
    int has_body = head && hl && memmem(head, hl, "\r\nContent-Length:", 17) != NULL;
    const char *date = head ? memmem(head, hl, "\r\nDate: ", 8) : NULL;
    const char *date_end =
        date ? memmem(date + 2, hl - (size_t)(date + 2 - head), "\r\n", 2) : NULL;
    int dl = date && date_end ? (int)(date_end - date) : 0;
    evbuffer_add_printf(out,
                        "HTTP/1.1 %d %s%.*s\r\nContent-Type: application/json\r\n"
                        "Content-Length: %d\r\nConnection: close\r\n\r\n%s",
                        code, reason, dl, date ? date : "", bl, has_body ? body : "");
    evbuffer_drain(k->held, hl);
}

static void on_output(struct evbuffer *out, const struct evbuffer_cb_info *info, void *arg)
{
    conn *k = arg;
    if (replying || k->fixing || !info->n_added)
        return;
    size_t n = info->n_added, len = evbuffer_get_length(out);
    if (n > len)
        return;
    k->fixing = 1;
    if (k->foreign == 0) {
        /* The start of an answer of libevent's own: its status line. */
        char st[13] = {0};
        struct evbuffer_ptr at;
        evbuffer_ptr_set(out, &at, len - n, EVBUFFER_PTR_SET);
        evbuffer_copyout_from(out, &at, st, 12);
        if (memcmp(st, "HTTP/", 5) == 0 && memcmp(st + 8, " 100", 4) == 0) {
            k->fixing = 0; /* 100 Continue: not an answer */
            return;
        }
        if (k->held || (k->held = evbuffer_new()))
            k->foreign = 1;
    }
    if (k->foreign == 1) {
        take_tail(out, n, k->held);
        struct evbuffer_ptr end = evbuffer_search(k->held, "\r\n\r\n", 4, NULL);
        if (end.pos >= 0) {
            replace_answer(k, out);
            k->foreign = 2;
        }
    } else if (k->foreign == 2) {
        take_tail(out, n, NULL); /* its body, and anything after (it closes) */
    }
    k->fixing = 0;
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
                int64_t d = c->v[i]->deadline;
                if (d && d != WQ_NEVER && (victim < 0 || d < c->v[victim]->deadline))
                    victim = i;
            }
            if (victim >= 0)
                cut(c->v[victim]);
            else
                set_paused(c, 1); /* all wait for answers: take no more for now */
        }
    }
    if (c->n == c->cap) {
        int ncap = c->cap ? c->cap * 2 : 64;
        conn **nv = realloc(c->v, (size_t)ncap * sizeof *nv);
        if (!nv)
            return bev; /* untracked: still served, just not counted */
        c->v = nv;
        c->cap = ncap;
    }
    conn *k = calloc(1, sizeof *k);
    if (!k)
        return bev;
    k->bev = bev;
    k->deadline = wq_real_now() + c->deadline_ns;
    k->incb = evbuffer_add_cb(bufferevent_get_input(bev), on_input, k);
    k->outcb = evbuffer_add_cb(bufferevent_get_output(bev), on_output, k);
    uint64_t *s =
        k->incb && k->outcb ? wq_keymap_put(c->index, (const char *)&bev, sizeof bev, NULL) : NULL;
    if (!s) {
        if (k->incb)
            evbuffer_remove_cb_entry(bufferevent_get_input(bev), k->incb);
        if (k->outcb)
            evbuffer_remove_cb_entry(bufferevent_get_output(bev), k->outcb);
        free(k);
        return bev;
    }
    *s = (uint64_t)c->n;
    bufferevent_incref(bev);
    c->v[c->n++] = k;
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
    return s && *s < (uint64_t)c->n ? c->v[*s] : NULL;
}

void wq_conns_request(wq_conns *c, struct evhttp_request *req, int held)
{
    if (!c)
        return;
    conn *k = find(c, req);
    if (k && k->deadline)
        k->deadline = held ? WQ_NEVER : wq_real_now() + c->deadline_ns;
    if (k && !k->nodelay) {
        /* An answer goes out in pieces when the socket is full (a claim of many items): without
         * it, a small last piece waits for the client's delayed ACK (40 ms) under Nagle. */
        int one = 1;
        evutil_socket_t fd = bufferevent_getfd(k->bev);
        k->nodelay = 1;
        if (fd >= 0)
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
}

void wq_conns_answered(wq_conns *c, struct evhttp_request *req)
{
    if (!c)
        return;
    conn *k = find(c, req);
    if (k && k->deadline)
        k->deadline = wq_real_now() + c->deadline_ns;
}

void wq_conns_reply(wq_conns *c, struct evhttp_request *req, int code, const char *reason,
                    struct evbuffer *body)
{
    wq_conns_answered(c, req); /* before: the reply may free req */
    replying = 1;
    evhttp_send_reply(req, code, reason, body);
    replying = 0;
}

void wq_conns_stream_start(struct evhttp_request *req, int code, const char *reason)
{
    replying = 1;
    evhttp_send_reply_start(req, code, reason);
    replying = 0;
}

void wq_conns_stream_chunk(struct evhttp_request *req, struct evbuffer *chunk)
{
    replying = 1;
    evhttp_send_reply_chunk(req, chunk);
    replying = 0;
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
        free_conn(c->v[i]);
    free(c->v);
    wq_keymap_free(c->index);
    if (c->reserve_fd >= 0)
        close(c->reserve_fd);
    free(c);
}

void wq_conns_unlisten(wq_conns *c)
{
    if (c)
        c->lev = NULL;
}
