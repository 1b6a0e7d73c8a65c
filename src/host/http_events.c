/*
 * GET /events[?queue=NAME]: the queues' events (events.h) as a stream of
 * Server-Sent Events, one per event:
 *
 *   event: done
 *   data: {"event":"done","queue":"mail","key":"m-1","attempt":1,"runner":"h:42",...}
 *
 * The streams that follow the same thing (every queue, or one) share a
 * feed: the text of the loop turn's events, made once, which each of them
 * sends by reference (not copied) as one chunk when the turn ends (a chunk
 * per event costs more than the event).
 * A comment line every PING_S seconds keeps proxies from closing a quiet
 * stream.
 *
 * A client that does not read is cut off, never waited for: when what was
 * written to it and not yet taken stays above SOFT bytes for CUT_MS, or
 * passes HARD at once, its socket is shut down and it hears nothing more
 * (evhttp then closes the connection as one whose client went away). A
 * client that keeps up never has more than a turn's events waiting.
 */
#include "host/http_events.h"

#include "host/events.h"
#include "host/http_int.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define SOFT (1024 * 1024)      /* unread bytes a stream may have for a while */
#define HARD (16 * 1024 * 1024) /* ... and never more */
#define CUT_MS 1000             /* how long above SOFT before the cut */
#define PING_S 15
#define STREAM_TIMEOUT (24 * 3600) /* the connection's read/write timeout while it streams */

/* The events of this loop turn for the streams of one filter. */
typedef struct feed {
    char queue[65]; /* "": every queue */
    struct evbuffer *turn;
    uint64_t last_seq; /* the last event added */
    int nstreams;
    struct feed *next;
} feed;

typedef struct stream {
    wq_host *h;
    feed *f;
    struct evhttp_request *req;
    struct evhttp_connection *conn;
    wq_events_sub *sub;
    struct event *ping;
    struct evbuffer *pending; /* its own lines (pings), and the feed's turn when it sends */
    int64_t over_since;       /* real ns its unread bytes went above SOFT, 0: not above */
    int cut, queued;          /* queued: in the list of streams to send */
    struct stream *next, *prev;
    struct stream *qnext;
} stream;

static stream *streams; /* one server per process */
static feed *feeds;
static stream *to_send;      /* streams with something pending */
static struct event *sender; /* sends them when the turn ends */

/* The SSE text of e. */
static int make(struct evbuffer *b, const wq_life *e)
{
    evbuffer_add_printf(b, "event: %s\ndata: ", wq_life_name(e->type));
    if (wq_life_json(b, e, 0) < 0)
        return -1;
    return evbuffer_add(b, "\n\n", 2);
}

/* What is written to s's client and not yet taken by it. */
static size_t unread(const stream *s)
{
    struct bufferevent *bev = evhttp_connection_get_bufferevent(s->conn);
    return bev ? evbuffer_get_length(bufferevent_get_output(bev)) : 0;
}

static void cut_off(stream *s)
{
    if (s->cut)
        return;
    s->cut = 1;
    wq_events_unsubscribe(s->h, s->sub);
    s->sub = NULL;
    evbuffer_drain(s->pending, evbuffer_get_length(s->pending));
    struct bufferevent *bev = evhttp_connection_get_bufferevent(s->conn);
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR); /* evhttp closes it as a client that went away */
}

/* Sends what s gathered (and, turn set, its feed's turn), or cuts it off if its client does not
 * keep up. */
static void send_pending(stream *s, int turn)
{
    size_t own = evbuffer_get_length(s->pending);
    size_t n = own + (turn ? evbuffer_get_length(s->f->turn) : 0);
    if (s->cut || !n)
        return;
    size_t u = unread(s);
    if (u + n > SOFT) {
        int64_t now = wq_real_now();
        if (!s->over_since)
            s->over_since = now;
        if (u + n > HARD || now - s->over_since > (int64_t)CUT_MS * 1000000) {
            cut_off(s);
            return;
        }
    } else {
        s->over_since = 0;
    }
    if (turn && n > own && evbuffer_add_buffer_reference(s->pending, s->f->turn) < 0) {
        cut_off(s); /* out of memory: a gap it would not know of is worse */
        return;
    }
    wq_http_stream_chunk(s->req, s->pending); /* takes its contents */
}

static void on_send(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    while (to_send) {
        stream *s = to_send;
        to_send = s->qnext;
        s->queued = 0;
        send_pending(s, 1);
    }
    for (feed *f = feeds; f; f = f->next) /* sent (by reference) to every stream of it */
        evbuffer_drain(f->turn, evbuffer_get_length(f->turn));
}

/* s has something to send at the end of this turn. */
static void mark(stream *s)
{
    if (s->queued)
        return;
    s->queued = 1;
    s->qnext = to_send;
    to_send = s;
    if (sender)
        event_active(sender, 0, 0);
}

static void on_event(void *ud, const wq_life *e)
{
    stream *s = ud;
    if (s->cut)
        return;
    feed *f = s->f;
    if (f->last_seq != e->seq) { /* the first of its streams told: the feed takes it */
        f->last_seq = e->seq;
        if (make(f->turn, e) < 0)
            return;
    }
    mark(s);
}

/* The feed for queue ("": every queue), made when none is; NULL on OOM. */
static feed *feed_for(const char *queue)
{
    feed *f = feeds;
    while (f && strcmp(f->queue, queue) != 0)
        f = f->next;
    if (f)
        return f;
    if (!(f = calloc(1, sizeof *f)) || !(f->turn = evbuffer_new())) {
        free(f);
        return NULL;
    }
    snprintf(f->queue, sizeof f->queue, "%s", queue);
    f->next = feeds;
    feeds = f;
    return f;
}

static void feed_release(feed *f)
{
    if (--f->nstreams > 0)
        return;
    for (feed **p = &feeds; *p; p = &(*p)->next)
        if (*p == f) {
            *p = f->next;
            break;
        }
    evbuffer_free(f->turn);
    free(f);
}

static void on_ping(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    stream *s = arg;
    evbuffer_add(s->pending, ": ping\n\n", 8);
    send_pending(s, 0);
}

static void stream_free(stream *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else if (streams == s)
        streams = s->next;
    if (s->next)
        s->next->prev = s->prev;
    if (s->queued) /* out of the list of streams to send */
        for (stream **p = &to_send; *p; p = &(*p)->qnext)
            if (*p == s) {
                *p = s->qnext;
                break;
            }
    wq_events_unsubscribe(s->h, s->sub);
    if (s->ping)
        event_free(s->ping);
    if (s->pending)
        evbuffer_free(s->pending);
    if (s->f)
        feed_release(s->f);
    free(s);
}

/* The connection is gone (the client left, it was cut off, the server stops). */
static void on_close(struct evhttp_connection *conn, void *arg)
{
    (void)conn;
    stream *s = arg;
    if (!evhttp_request_get_connection(s->req))
        evhttp_request_free(s->req); /* left to us by evhttp: nobody will end it */
    stream_free(s);
}

void wq_http_events(wq_host *h, struct evhttp_request *req, const char *query)
{
    char queue[65] = "";
    if (query && *query) {
        int n = 0;
        if (sscanf(query, "queue=%64[A-Za-z0-9_.-]%n", queue, &n) != 1 || query[n]) {
            wq_http_reply_error(req, 400, "Bad Request",
                                "the only parameter is queue, a queue's name");
            return;
        }
        if (!wq_host_find_queue(h, queue)) {
            wq_http_no_queue(req, queue);
            return;
        }
    }
    stream *s = calloc(1, sizeof *s);
    struct timeval every = {PING_S, 0};
    if (!sender)
        sender = event_new(h->base, -1, 0, on_send, NULL);
    if (!s || !sender || !(s->ping = event_new(h->base, -1, EV_PERSIST, on_ping, s)) ||
        !(s->pending = evbuffer_new()) || !(s->f = feed_for(queue)) || (s->f->nstreams++, 0) ||
        !(s->sub = wq_events_subscribe(h, queue[0] ? queue : NULL, on_event, s))) {
        if (s && s->ping)
            event_free(s->ping);
        if (s && s->pending)
            evbuffer_free(s->pending);
        if (s && s->f)
            feed_release(s->f);
        free(s);
        wq_http_reply_error(req, 500, "Internal Server Error", "out of memory");
        return;
    }
    s->h = h;
    s->req = req;
    s->conn = evhttp_request_get_connection(req);
    s->next = streams;
    if (streams)
        streams->prev = s;
    streams = s;
    evhttp_connection_set_timeout(s->conn, STREAM_TIMEOUT); /* a quiet stream is fine */
    evhttp_connection_set_closecb(s->conn, on_close, s);
    struct evkeyvalq *hdr = evhttp_request_get_output_headers(req);
    evhttp_add_header(hdr, "Content-Type", "text/event-stream");
    evhttp_add_header(hdr, "Cache-Control", "no-cache");
    evhttp_add_header(hdr, "X-Accel-Buffering", "no"); /* nginx: pass events on at once */
    wq_http_stream_start(req, 200, "OK");
    event_add(s->ping, &every);
    evbuffer_add(s->pending, ": wqrun events\n\n", 16); /* at once: the client knows it is on */
    send_pending(s, 0);
}

void wq_http_events_stop(void)
{
    /* The server frees the connections (each on_close frees its stream): nothing must be
     * told meanwhile. */
    for (stream *s = streams; s; s = s->next)
        s->cut = 1;
    to_send = NULL;
    for (stream *s = streams; s; s = s->next)
        s->queued = 0;
    if (sender)
        event_free(sender);
    sender = NULL;
}
