/*
 * GET /events[?queue=NAME]: the queues' events (events.h) as a stream of
 * Server-Sent Events, one per event:
 *
 *   event: done
 *   data: {"queue":"mail","key":"m-1","attempt":1,"runner":"h:42","at":1795714201.5,...}
 *
 * A comment line every PING_S seconds keeps proxies from closing a quiet
 * stream. A client that does not read is cut off, never waited for: once
 * what is written to it and not yet taken passes LIMIT bytes, its socket
 * is shut down and it hears nothing more (evhttp then closes it as a
 * client that went away). The text of an event is made once for all the
 * streams that carry it.
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

#define LIMIT (1024 * 1024) /* bytes a stream may have unread before it is cut off */
#define PING_S 15
#define STREAM_TIMEOUT (24 * 3600) /* the connection's read/write timeout while it streams */

typedef struct stream {
    wq_host *h;
    struct evhttp_request *req;
    struct evhttp_connection *conn;
    wq_events_sub *sub;
    struct event *ping;
    int cut;
    struct stream *next, *prev;
} stream;

static stream *streams; /* one server per process */

/* The text of the event being carried, made once per emit (at its first stream). */
static struct {
    uint64_t seq; /* 0: none */
    struct evbuffer *text;
} made;

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
    struct bufferevent *bev = evhttp_connection_get_bufferevent(s->conn);
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR); /* evhttp closes it as a client that went away */
}

static void send_text(stream *s, struct evbuffer *text)
{
    if (s->cut)
        return;
    if (unread(s) > LIMIT) {
        cut_off(s);
        return;
    }
    struct evbuffer *b = evbuffer_new();
    if (!b || evbuffer_add_buffer_reference(b, text) < 0) {
        if (b)
            evbuffer_free(b);
        cut_off(s); /* out of memory: a gap it would not know of is worse */
        return;
    }
    wq_http_stream_chunk(s->req, b);
    evbuffer_free(b);
}

static void on_event(void *ud, const wq_life *e)
{
    stream *s = ud;
    if (made.seq != e->seq || !made.text) {
        if (!made.text && !(made.text = evbuffer_new()))
            return;
        evbuffer_drain(made.text, evbuffer_get_length(made.text));
        made.seq = 0;
        if (make(made.text, e) < 0)
            return;
        made.seq = e->seq;
    }
    send_text(s, made.text);
}

static void on_ping(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    stream *s = arg;
    struct evbuffer *b = evbuffer_new();
    if (!b)
        return;
    evbuffer_add(b, ": ping\n\n", 8);
    send_text(s, b);
    evbuffer_free(b);
}

static void stream_free(stream *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else if (streams == s)
        streams = s->next;
    if (s->next)
        s->next->prev = s->prev;
    wq_events_unsubscribe(s->h, s->sub);
    if (s->ping)
        event_free(s->ping);
    free(s);
}

/* The connection is gone (the client left, it was cut off, the server stops). */
static void on_close(struct evhttp_connection *conn, void *arg)
{
    (void)conn;
    stream_free(arg);
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
    if (!s || !(s->ping = event_new(h->base, -1, EV_PERSIST, on_ping, s)) ||
        !(s->sub = wq_events_subscribe(h, queue[0] ? queue : NULL, on_event, s))) {
        if (s && s->ping)
            event_free(s->ping);
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
    struct evbuffer *b = evbuffer_new(); /* something at once: the client knows it is on */
    if (b) {
        evbuffer_add(b, ": wqrun events\n\n", 16);
        send_text(s, b);
        evbuffer_free(b);
    }
}

void wq_http_events_stop(void)
{
    /* The server frees the connections (each on_close frees its stream): nothing must be
     * told meanwhile. */
    for (stream *s = streams; s; s = s->next)
        s->cut = 1;
    if (made.text)
        evbuffer_free(made.text);
    made.text = NULL;
    made.seq = 0;
}
