/*
 * Outgoing HTTP requests (wq.http): libcurl's multi-socket interface driven
 * by the host's libevent loop, so a thousand transfers cost a thousand
 * sockets and no thread or process each. One multi handle per host keeps
 * the connection cache (keep-alive, HTTP/2 multiplexing where the server
 * offers it) and the DNS cache; finished easy handles are kept for reuse.
 */
#ifndef WQ_HTTPC_H
#define WQ_HTTPC_H

#include "host/host.h"

#include <stddef.h>

typedef struct wq_httpc_req wq_httpc_req;

typedef struct wq_httpc_spec {
    const char *method;         /* "GET", "POST", ... (checked by the caller) */
    const char *url;            /* absolute http:// or https:// URL, query included */
    const char *const *headers; /* "Name: value" lines, nheaders of them */
    size_t nheaders;
    const char *body; /* copied; NULL: none */
    size_t bodylen;
    long connect_timeout_ms; /* 0: libcurl's default */
    long timeout_ms;         /* whole transfer, 0: none */
    long max_redirects;      /* 0: redirects are not followed */
    int insecure;            /* skip TLS peer and host verification */
    size_t max_body;         /* response bodies larger than this fail the request */
} wq_httpc_spec;

/* One response header (name lower-cased). */
typedef struct wq_httpc_header {
    const char *name, *value;
} wq_httpc_header;

typedef struct wq_httpc_result {
    const char *error; /* NULL: a response arrived; else why not (transport failure) */
    long status;
    const char *body;
    size_t bodylen;
    const wq_httpc_header *headers; /* of the last response (after redirects) */
    size_t nheaders;
    const char *url; /* the URL that answered (after redirects) */
} wq_httpc_result;

/* Called once from the loop when the transfer has ended (response or failure). */
typedef void (*wq_httpc_fn)(void *ud, wq_httpc_req *r);

/*
 * Starts a transfer; fn(ud, r) is called from the loop when it has ended.
 * 0 and *out set, or -1 with msg (msgsize bytes) saying why (nothing to free).
 */
int wq_httpc_start(wq_host *h, const wq_httpc_spec *spec, wq_httpc_fn fn, void *ud,
                   wq_httpc_req **out, char *msg, size_t msgsize);
/* The result of an ended transfer; valid until wq_httpc_free. */
const wq_httpc_result *wq_httpc_output(wq_httpc_req *r);
/* Frees an ended transfer (after its callback). */
void wq_httpc_free(wq_httpc_req *r);
/* The waiter is gone: stops the transfer at once and frees it; no callback. */
void wq_httpc_abandon(wq_httpc_req *r);
/* Transfers in flight (they keep the process alive and run in real time). */
int wq_httpc_active(const wq_host *h);
/* Stops every transfer and frees the client (at exit). */
void wq_httpc_shutdown(wq_host *h);

#endif
