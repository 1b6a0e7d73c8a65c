/*
 * The HTTP server's connections: a bounded number of them, each with a
 * deadline for delivering a whole request, and an accept that backs off
 * instead of spinning when the process runs out of file descriptors.
 */
#ifndef WQ_CONNS_H
#define WQ_CONNS_H

#include "host/host.h"

#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/listener.h>

typedef struct wq_conns wq_conns;

/*
 * Guards listener lev (evhttp's, bound with evhttp_bind_listener): at most
 * max connections, deadline_ns to send a request. NULL on OOM.
 */
wq_conns *wq_conns_new(wq_host *h, struct evconnlistener *lev, int max, int64_t deadline_ns);
/* Stops guarding (before evhttp_free) and releases what it holds. NULL is fine. */
void wq_conns_free(wq_conns *c);
/* The listener is about to be freed (no more connections come): forget it. */
void wq_conns_unlisten(wq_conns *c);
/* evhttp_set_bevcb callback (arg: the wq_conns): a tracked bufferevent per connection. */
struct bufferevent *wq_conns_bevcb(struct event_base *base, void *arg);
/* A whole request arrived on req's connection: held (1) until answered, or answered now (0). */
void wq_conns_request(wq_conns *c, struct evhttp_request *req, int held);
/* A held request was answered: its connection's deadline starts again. */
void wq_conns_answered(wq_conns *c, struct evhttp_request *req);
/* Answers req (evhttp_send_reply) as ours: wq_conns_answered, and libevent's own answers are
 * told apart from it. c may be NULL. */
void wq_conns_reply(wq_conns *c, struct evhttp_request *req, int code, const char *reason,
                    struct evbuffer *body);
/* Starts a streamed answer (evhttp_send_reply_start) as ours: the connection stays held. */
void wq_conns_stream_start(struct evhttp_request *req, int code, const char *reason);
/* A chunk of a streamed answer, as ours. */
void wq_conns_stream_chunk(struct evhttp_request *req, struct evbuffer *chunk);
/* Open connections now. */
int wq_conns_count(const wq_conns *c);

#endif
