/*
 * What http.c shares with the files that serve more of its routes
 * (http_ops.c): replies and queue summaries.
 */
#ifndef WQ_HTTP_INT_H
#define WQ_HTTP_INT_H

#include "host/host.h"

#include <event2/http.h>
#include <event2/listener.h>
#include <json-c/json_object.h>

/* Seconds a client has to send a request (and the read/write timeout of a connection). */
#define WQ_HTTP_CLIENT_TIMEOUT 10

/* Flags for json_object_to_json_string_ext in every reply. */
#define WQ_HTTP_JSON_FLAGS (JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)

/* Replies with the JSON text of o (which it puts), or 500 when it cannot be made. */
void wq_http_reply_json(struct evhttp_request *req, int code, const char *reason, json_object *o);
/* A JSON error body {"error": msg}. */
void wq_http_reply_error(struct evhttp_request *req, int code, const char *reason, const char *msg);
/* 404 for a queue this runner does not define: the one text every route gives. */
void wq_http_no_queue(struct evhttp_request *req, const char *name);
/* 405 with an Allow header (allow: "GET, HEAD") and a JSON error. */
void wq_http_not_allowed(struct evhttp_request *req, const char *allow);
/* Replies code with body (which it takes) once every change made so far is committed (503 if it
 * cannot be). */
void wq_http_reply_durable(wq_host *h, struct evhttp_request *req, int code, const char *reason,
                           json_object *body);

/* A streamed answer (GET /events): its status and headers, then chunks of body as they come;
 * the connection stays held (no request deadline) for as long as it streams. */
void wq_http_stream_start(struct evhttp_request *req, int code, const char *reason);
void wq_http_stream_chunk(struct evhttp_request *req, struct evbuffer *chunk);

/* Serves HTTP on listener lev (which it takes; wq_http_start binds --listen, the fuzz target a
 * port of its own). 0, or -1 after printing why. */
/* Hands op to a backend that applies it itself (PostgreSQL), answered once the database has:
 * 1 taken care of (answered now or later), 0 the runtime answers it (http_ops.c). limit: the
 * page of a listing that asked for one row more. */
int wq_http_remote(wq_host *h, struct evhttp_request *req, const wq_hqueue *hq, const wq_bop *op,
                   size_t limit);
int wq_http_serve(wq_host *h, struct evconnlistener *lev);
/* A key from a path segment, percent-decoded (malloc'd, its length in *len; NULL: out of
 * memory). */
char *wq_http_decode_key(const char *s, size_t n, size_t *len);

/* One queue's summary: name, the q:stats() fields, paused; with a backend shared by runners,
 * the pending, running and dead counts of the whole database (and "scope": "database"). NULL
 * on OOM. */
json_object *wq_http_queue_summary(wq_host *h, const wq_hqueue *hq);

#endif
