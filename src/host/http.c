/*
 * The HTTP API on libevent's evhttp (SPEC section 6): GET /metrics,
 * GET /queues, POST /queues/NAME/items, GET /healthz. evhttp enforces the
 * size limits (headers, body: 413) and slow-client timeouts; everything a
 * request asks for is validated before anything changes, so a malformed
 * request gets a 4xx and leaves the queues as they were.
 */
#include "host/http.h"

#include "host/prom.h"
#include "lua/lqueue.h"
#include "lua/lwq.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <lauxlib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BODY (1024 * 1024)
#define MAX_HEADERS (16 * 1024)
#define CLIENT_TIMEOUT 10 /* seconds to send a request */

void lqueue_push_stats(lua_State *L, lqueue *lq);

typedef struct http_server {
    struct evhttp *http;
    char *token;
    uint64_t requests;
} http_server;

static void reply(struct evhttp_request *req, int code, const char *reason, const char *type,
                  const char *body)
{
    struct evbuffer *b = evbuffer_new();
    if (b && body)
        evbuffer_add(b, body, strlen(body));
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", type);
    evhttp_send_reply(req, code, reason, b);
    if (b)
        evbuffer_free(b);
}

/* A JSON error body {"error": msg}. */
static void reply_error(wq_host *h, struct evhttp_request *req, int code, const char *reason,
                        const char *msg)
{
    lua_State *L = h->L;
    lua_createtable(L, 0, 1);
    lua_pushstring(L, msg);
    lua_setfield(L, -2, "error");
    const char *json = wq_json_encode(L, -1) == 0 ? lua_tostring(L, -1) : "{\"error\":\"?\"}";
    reply(req, code, reason, "application/json", json);
    lua_pop(L, 2);
}

/* Compares the whole strings in time that depends only on their lengths. */
static int same_secret(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = (unsigned char)(la != lb);
    for (size_t i = 0; i < la; i++)
        diff |= (unsigned char)(a[i] ^ b[lb ? i % lb : 0]);
    return diff == 0;
}

static int authorized(http_server *s, struct evhttp_request *req)
{
    if (!s->token)
        return 1;
    const char *auth = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    if (!auth || strncmp(auth, "Bearer ", 7) != 0)
        return 0;
    return same_secret(auth + 7, s->token);
}

static void get_metrics(wq_host *h, struct evhttp_request *req)
{
    struct evbuffer *b = evbuffer_new();
    if (!b) {
        evhttp_send_error(req, 500, "Out of memory");
        return;
    }
    wq_prom_render(h, b);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; version=0.0.4; charset=utf-8");
    evhttp_send_reply(req, 200, "OK", b);
    evbuffer_free(b);
}

static void get_queues(wq_host *h, struct evhttp_request *req)
{
    lua_State *L = h->L;
    lua_createtable(L, h->nqueues, 0);
    for (int i = 0; i < h->nqueues; i++) {
        lqueue_push_stats(L, h->queues[i]);
        lua_rawseti(L, -2, i + 1);
    }
    /* cjson writes an empty table as {}: the answer is always an array. */
    const char *json = h->nqueues == 0              ? "[]"
                       : wq_json_encode(L, -1) == 0 ? lua_tostring(L, -1)
                                                    : NULL;
    if (json)
        reply(req, 200, "OK", "application/json", json);
    else
        evhttp_send_error(req, 500, "Cannot encode");
    lua_settop(L, 0);
}

/* POST /queues/NAME/items with {"key": "...", "payload": ..., "after": s, "priority": n}. */
static void post_item(wq_host *h, struct evhttp_request *req, const char *name)
{
    lqueue *lq = lqueue_find(h, name);
    if (!lq) {
        reply_error(h, req, 404, "Not Found", "no such queue");
        return;
    }
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    if (n > MAX_BODY) {
        reply_error(h, req, 413, "Payload Too Large", "body over 1 MiB");
        return;
    }
    lua_State *L = h->L;
    int base = lua_gettop(L);
    const char *body = (const char *)evbuffer_pullup(in, -1);
    if (!body || wq_json_decode(L, body, n) < 0 || !lua_istable(L, -1)) {
        lua_settop(L, base);
        reply_error(h, req, 400, "Bad Request", "body must be a JSON object");
        return;
    }
    int obj = lua_gettop(L);
    const char *err = NULL;
    size_t klen = 0;
    const char *key = NULL;
    double after = 0;
    int32_t prio = 0;
    int has_prio = 0;
    lua_pushnil(L);
    while (!err && lua_next(L, obj)) {
        const char *f = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "";
        if (strcmp(f, "key") == 0) {
            if (lua_type(L, -1) != LUA_TSTRING)
                err = "key must be a string";
            else
                key = lua_tolstring(L, -1, &klen);
        } else if (strcmp(f, "after") == 0) {
            if (lua_type(L, -1) != LUA_TNUMBER || !isfinite(lua_tonumber(L, -1)))
                err = "after must be a number of seconds";
            else
                after = lua_tonumber(L, -1);
        } else if (strcmp(f, "priority") == 0) {
            double p = lua_tonumber(L, -1);
            if (lua_type(L, -1) != LUA_TNUMBER || p != floor(p) || p < INT32_MIN || p > INT32_MAX)
                err = "priority must be a 32-bit integer";
            else {
                prio = (int32_t)p;
                has_prio = 1;
            }
        } else if (strcmp(f, "payload") != 0) {
            err = "unknown field (expected key, payload, after, priority)";
        }
        lua_pop(L, 1);
    }
    if (err || !key) {
        lua_settop(L, base);
        reply_error(h, req, 400, "Bad Request", err ? err : "missing key");
        return;
    }
    if (klen > WQ_KEY_MAX) {
        lua_settop(L, base);
        reply_error(h, req, 400, "Bad Request", "key too long");
        return;
    }
    const char *payload = NULL;
    size_t plen = 0;
    lua_getfield(L, obj, "payload");
    if (!lua_isnil(L, -1)) {
        if (wq_json_encode(L, -1) < 0) {
            lua_settop(L, base);
            reply_error(h, req, 400, "Bad Request", "payload cannot be stored");
            return;
        }
        payload = lua_tolstring(L, -1, &plen);
    }
    int r = lqueue_add_external(lq, key, klen, payload, plen, after, has_prio ? &prio : NULL);
    lua_settop(L, base);
    if (r == WQ_ESHUTDOWN)
        reply_error(h, req, 503, "Service Unavailable", "queue is shutting down");
    else if (r < 0)
        reply_error(h, req, 500, "Internal Server Error", wq_strerror(r));
    else
        reply(req, 202, "Accepted", "application/json",
              r ? "{\"queued\":true}" : "{\"queued\":false}");
}

static void handle(struct evhttp_request *req, void *arg)
{
    wq_host *h = arg;
    http_server *s = h->http;
    s->requests++;
    const char *uri = evhttp_request_get_uri(req);
    struct evhttp_uri *u = uri ? evhttp_uri_parse(uri) : NULL;
    const char *path = u ? evhttp_uri_get_path(u) : NULL;
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    int get = cmd == EVHTTP_REQ_GET || cmd == EVHTTP_REQ_HEAD;
    char name[65];
    int nlen = 0;
    if (!path) {
        reply(req, 400, "Bad Request", "text/plain", "bad request\n");
    } else if (strcmp(path, "/healthz") == 0) {
        if (get)
            reply(req, 200, "OK", "text/plain", "ok\n");
        else
            reply(req, 405, "Method Not Allowed", "text/plain", "method not allowed\n");
    } else if (strcmp(path, "/metrics") == 0) {
        if (get)
            get_metrics(h, req);
        else
            reply(req, 405, "Method Not Allowed", "text/plain", "method not allowed\n");
    } else if (strcmp(path, "/queues") == 0 || strcmp(path, "/queues/") == 0) {
        if (get)
            get_queues(h, req);
        else
            reply(req, 405, "Method Not Allowed", "text/plain", "method not allowed\n");
    } else if (sscanf(path, "/queues/%64[A-Za-z0-9_.-]/items%n", name, &nlen) == 1 &&
               path[nlen] == '\0') {
        if (cmd != EVHTTP_REQ_POST)
            reply(req, 405, "Method Not Allowed", "text/plain", "method not allowed\n");
        else if (!authorized(s, req)) {
            evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate",
                              "Bearer realm=\"wqrun\"");
            reply_error(h, req, 401, "Unauthorized", "missing or wrong bearer token");
        } else
            post_item(h, req, name);
    } else {
        reply(req, 404, "Not Found", "text/plain", "not found\n");
    }
    if (u)
        evhttp_uri_free(u);
    wq_host_settle(h);
}

int wq_http_start(wq_host *h, const char *addr)
{
    char host[256];
    const char *colon = strrchr(addr, ':');
    size_t hl = colon ? (size_t)(colon - addr) : 0;
    char *end;
    long port = colon ? strtol(colon + 1, &end, 10) : -1;
    if (!colon || hl == 0 || hl >= sizeof host || *end || port < 0 || port > 65535 ||
        colon[1] == '\0') {
        fprintf(stderr, "wqrun: --listen %s: expected ADDR:PORT, e.g. 127.0.0.1:8080\n", addr);
        return -1;
    }
    memcpy(host, addr, hl);
    host[hl] = '\0';
    if (host[0] == '[' && host[hl - 1] == ']') { /* [::1]:8080 */
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    }
    http_server *s = calloc(1, sizeof *s);
    if (!s || !(s->http = evhttp_new(h->base))) {
        free(s);
        fprintf(stderr, "wqrun: --listen: out of memory\n");
        return -1;
    }
    if (h->opts.token && !(s->token = strdup(h->opts.token))) {
        evhttp_free(s->http);
        free(s);
        fprintf(stderr, "wqrun: --listen: out of memory\n");
        return -1;
    }
    evhttp_set_max_body_size(s->http, MAX_BODY);
    evhttp_set_max_headers_size(s->http, MAX_HEADERS);
    evhttp_set_timeout(s->http, CLIENT_TIMEOUT);
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST |
                                            EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE);
    evhttp_set_gencb(s->http, handle, h);
    if (!evhttp_bind_socket_with_handle(s->http, host, (ev_uint16_t)port)) {
        fprintf(stderr,
                "wqrun: --listen %s: cannot listen there (in use, or not a local address)\n", addr);
        evhttp_free(s->http);
        free(s->token);
        free(s);
        return -1;
    }
    h->http = s;
    return 0;
}

void wq_http_stop(wq_host *h)
{
    http_server *s = h->http;
    if (!s)
        return;
    evhttp_free(s->http);
    free(s->token);
    free(s);
    h->http = NULL;
}
