/*
 * The HTTP client: libcurl's multi-socket API on the host's event base.
 * libcurl tells us which sockets to watch (on_socket) and when to call it
 * back (on_timer_set); libevent tells libcurl when a socket is ready or the
 * timer is due (curl_multi_socket_action), and every finished transfer is
 * handed to its owner from drain(). Nothing here blocks: DNS runs in
 * libcurl's resolver thread, TLS in the same sockets.
 */
#include "host/httpc.h"

#include <ctype.h>
#include <curl/curl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPARE_MAX 64 /* easy handles kept for reuse */

typedef struct buf {
    char *data;
    size_t len, cap;
} buf;

typedef struct client {
    wq_host *h;
    CURLM *multi;
    struct event *timer;
    int active;
    CURL *spare[SPARE_MAX];
    int nspare;
    wq_httpc_req *reqs; /* in flight */
} client;

struct wq_httpc_req {
    client *c; /* NULL once the client is gone (shutdown) */
    CURL *easy;
    wq_httpc_fn fn;
    void *ud;
    struct curl_slist *hdrs;
    char errbuf[CURL_ERROR_SIZE];
    buf body;
    size_t max_body;
    int too_big;
    buf hraw; /* the last response's headers: name NUL value NUL ... */
    size_t nh;
    wq_httpc_header *harr;
    char *url;
    char *errmsg;
    int ended;
    wq_httpc_result res;
    wq_httpc_req *next, *prev;
};

static int buf_add(buf *b, const char *p, size_t n)
{
    if (n > SIZE_MAX - b->len - 1)
        return -1;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap = cap > SIZE_MAX / 2 ? b->len + n + 1 : cap * 2;
        char *d = realloc(b->data, cap);
        if (!d)
            return -1;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

/* ---- libcurl's callbacks ---- */

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    wq_httpc_req *r = ud;
    size_t len = size * n;
    if (len > r->max_body - r->body.len) {
        r->too_big = 1;
        return 0; /* CURLE_WRITE_ERROR */
    }
    return buf_add(&r->body, p, len) ? 0 : len;
}

/* One header line: a status line starts a new response (redirects, 1xx),
 * "Name: value" is kept with the name lower-cased and the value trimmed. */
static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
    wq_httpc_req *r = ud;
    size_t len = size * n;
    if (len >= 5 && memcmp(p, "HTTP/", 5) == 0) {
        r->hraw.len = 0;
        r->nh = 0;
        return len;
    }
    const char *colon = memchr(p, ':', len);
    if (!colon || colon == p || isspace((unsigned char)p[0]))
        return len; /* the blank line, or an obsolete folded line */
    size_t nlen = (size_t)(colon - p);
    const char *v = colon + 1, *end = p + len;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
        end--;
    size_t at = r->hraw.len;
    if (buf_add(&r->hraw, p, nlen) || buf_add(&r->hraw, "", 1) ||
        buf_add(&r->hraw, v, (size_t)(end - v)) || buf_add(&r->hraw, "", 1))
        return 0;
    for (size_t i = 0; i < nlen; i++)
        r->hraw.data[at + i] = (char)tolower((unsigned char)r->hraw.data[at + i]);
    r->nh++;
    return len;
}

typedef struct sock {
    struct event *ev;
    client *c;
} sock;

static void drain(client *c);

static void on_ready(evutil_socket_t fd, short what, void *arg)
{
    client *c = arg;
    int flags = (what & EV_READ ? CURL_CSELECT_IN : 0) | (what & EV_WRITE ? CURL_CSELECT_OUT : 0);
    int running;
    curl_multi_socket_action(c->multi, fd, flags, &running);
    drain(c);
}

static int on_socket(CURL *e, curl_socket_t fd, int what, void *cp, void *sp)
{
    (void)e;
    client *c = cp;
    sock *s = sp;
    if (what == CURL_POLL_REMOVE) {
        if (s) {
            event_free(s->ev);
            free(s);
            curl_multi_assign(c->multi, fd, NULL);
        }
        return 0;
    }
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s)
            return -1;
        s->c = c;
        curl_multi_assign(c->multi, fd, s);
    } else if (s->ev) {
        event_free(s->ev);
        s->ev = NULL;
    }
    short kind =
        EV_PERSIST | (what & CURL_POLL_IN ? EV_READ : 0) | (what & CURL_POLL_OUT ? EV_WRITE : 0);
    s->ev = event_new(c->h->base, fd, kind, on_ready, c);
    if (!s->ev || event_add(s->ev, NULL) < 0)
        return -1;
    return 0;
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    client *c = arg;
    int running;
    curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    drain(c);
}

static int on_timer_set(CURLM *m, long ms, void *cp)
{
    (void)m;
    client *c = cp;
    if (ms < 0)
        return evtimer_del(c->timer);
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return evtimer_add(c->timer, &tv);
}

/* ---- transfers ---- */

static void unlink_req(wq_httpc_req *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else if (r->c)
        r->c->reqs = r->next;
    if (r->next)
        r->next->prev = r->prev;
    r->next = r->prev = NULL;
}

/* Takes r out of the multi handle and fills its result from code. */
static void end_transfer(wq_httpc_req *r, CURLcode code)
{
    client *c = r->c;
    curl_multi_remove_handle(c->multi, r->easy);
    unlink_req(r);
    c->active--;
    r->ended = 1;
    const char *url = NULL;
    curl_easy_getinfo(r->easy, CURLINFO_EFFECTIVE_URL, &url);
    r->url = strdup(url ? url : "");
    long status = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
    if (code != CURLE_OK) {
        char msg[CURL_ERROR_SIZE + 64];
        if (r->too_big || code == CURLE_FILESIZE_EXCEEDED)
            snprintf(msg, sizeof msg, "response body over the limit of %zu bytes", r->max_body);
        else
            snprintf(msg, sizeof msg, "%s", r->errbuf[0] ? r->errbuf : curl_easy_strerror(code));
        r->errmsg = strdup(msg);
        r->res.error = r->errmsg ? r->errmsg : "out of memory";
    } else {
        r->res.status = status;
        r->harr = calloc(r->nh ? r->nh : 1, sizeof *r->harr);
        if (!r->harr || !r->url) {
            r->res.error = "out of memory";
        } else {
            const char *p = r->hraw.data;
            for (size_t i = 0; i < r->nh; i++) {
                r->harr[i].name = p;
                p += strlen(p) + 1;
                r->harr[i].value = p;
                p += strlen(p) + 1;
            }
            r->res.headers = r->harr;
            r->res.nheaders = r->nh;
        }
    }
    r->res.body = r->body.data ? r->body.data : "";
    r->res.bodylen = r->body.len;
    r->res.url = r->url ? r->url : "";
}

static void drain(client *c)
{
    CURLMsg *m;
    int left, ended = 0;
    while ((m = curl_multi_info_read(c->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        wq_httpc_req *r = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
        end_transfer(r, m->data.result);
        r->fn(r->ud, r);
        ended = 1;
    }
    if (ended)
        wq_host_settle(c->h);
}

static client *get_client(wq_host *h)
{
    if (h->httpc)
        return h->httpc;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return NULL;
    client *c = calloc(1, sizeof *c);
    if (!c)
        goto fail;
    c->h = h;
    c->multi = curl_multi_init();
    c->timer = evtimer_new(h->base, on_timeout, c);
    if (!c->multi || !c->timer)
        goto fail;
    curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
    curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, on_timer_set);
    curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
    /* Keep idle connections for reuse: libcurl's default (4 per transfer in the
     * multi handle) shrinks the cache as finished transfers leave, and a burst's
     * next requests then connect anew (bench/RESULTS.md, "wq.http"). */
    curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, 1024L);
    h->httpc = c;
    return c;
fail:
    if (c) {
        if (c->multi)
            curl_multi_cleanup(c->multi);
        if (c->timer)
            event_free(c->timer);
        free(c);
    }
    curl_global_cleanup();
    return NULL;
}

static void free_req(wq_httpc_req *r)
{
    if (r->easy) {
        client *c = r->c;
        if (c && c->nspare < SPARE_MAX) {
            curl_easy_reset(r->easy);
            c->spare[c->nspare++] = r->easy;
        } else {
            curl_easy_cleanup(r->easy);
        }
    }
    curl_slist_free_all(r->hdrs);
    free(r->body.data);
    free(r->hraw.data);
    free(r->harr);
    free(r->url);
    free(r->errmsg);
    free(r);
}

/* Sets the options of spec on r's easy handle; 0 or -1 with msg. */
static int configure(wq_httpc_req *r, const wq_httpc_spec *s, char *msg, size_t msgsize)
{
    CURL *e = r->easy;
    int has_expect = 0, has_agent = 0;
    for (size_t i = 0; i < s->nheaders; i++) {
        struct curl_slist *l = curl_slist_append(r->hdrs, s->headers[i]);
        if (!l)
            goto oom;
        r->hdrs = l;
        has_expect |= strncasecmp(s->headers[i], "expect:", 7) == 0;
        has_agent |= strncasecmp(s->headers[i], "user-agent:", 11) == 0;
    }
    /* No 100-continue round trip before a body (a server that ignores it costs a second). */
    if (!has_expect) {
        struct curl_slist *l = curl_slist_append(r->hdrs, "Expect:");
        if (!l)
            goto oom;
        r->hdrs = l;
    }
    CURLcode rc = CURLE_OK;
#define SET(opt, val)                                                                              \
    if (rc == CURLE_OK)                                                                            \
    rc = curl_easy_setopt(e, opt, val)
    SET(CURLOPT_PRIVATE, (void *)r);
    SET(CURLOPT_ERRORBUFFER, r->errbuf);
    SET(CURLOPT_NOSIGNAL, 1L);
    /* A transfer stopped while its name is being resolved does not wait for
     * the resolver thread (libcurl otherwise joins it, and the loop stands
     * still until getaddrinfo returns): the thread is left to end alone. */
    SET(CURLOPT_QUICK_EXIT, 1L);
    SET(CURLOPT_URL, s->url);
    SET(CURLOPT_PROTOCOLS_STR, "http,https");
    SET(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    SET(CURLOPT_HTTPHEADER, r->hdrs);
    SET(CURLOPT_WRITEFUNCTION, on_body);
    SET(CURLOPT_WRITEDATA, (void *)r);
    SET(CURLOPT_HEADERFUNCTION, on_header);
    SET(CURLOPT_HEADERDATA, (void *)r);
    SET(CURLOPT_ACCEPT_ENCODING, ""); /* every encoding libcurl decodes */
    /* HTTP/2: one connection, many streams. Only for https://, where TLS
     * (ALPN) tells at once whether the server multiplexes: over http://
     * libcurl would keep every other request to the host waiting for the
     * first one's response, and a server that never answers it would hold
     * them all (they time out unsent). */
    if (strncasecmp(s->url, "https:", 6) == 0)
        SET(CURLOPT_PIPEWAIT, 1L);
    SET(CURLOPT_TCP_KEEPALIVE, 1L);
    SET(CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)(s->max_body > INT64_MAX ? INT64_MAX : s->max_body));
    if (!has_agent)
        SET(CURLOPT_USERAGENT, "wqrun/" WQ_VERSION);
    if (s->connect_timeout_ms > 0)
        SET(CURLOPT_CONNECTTIMEOUT_MS, s->connect_timeout_ms);
    if (s->timeout_ms > 0)
        SET(CURLOPT_TIMEOUT_MS, s->timeout_ms);
    if (s->max_redirects > 0) {
        SET(CURLOPT_FOLLOWLOCATION, 1L);
        SET(CURLOPT_MAXREDIRS, s->max_redirects);
    }
    if (s->insecure) {
        SET(CURLOPT_SSL_VERIFYPEER, 0L);
        SET(CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (strcmp(s->method, "HEAD") == 0) {
        SET(CURLOPT_NOBODY, 1L);
    } else if (strcmp(s->method, "GET") == 0 && !s->body) {
        SET(CURLOPT_HTTPGET, 1L);
    } else {
        if (strcmp(s->method, "POST") != 0)
            SET(CURLOPT_CUSTOMREQUEST, s->method);
        SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(s->body ? s->bodylen : 0));
        SET(CURLOPT_COPYPOSTFIELDS, s->body ? s->body : "");
    }
#undef SET
    if (rc == CURLE_OUT_OF_MEMORY)
        goto oom;
    if (rc != CURLE_OK) {
        snprintf(msg, msgsize, "%s", curl_easy_strerror(rc));
        return -1;
    }
    return 0;
oom:
    snprintf(msg, msgsize, "out of memory");
    return -1;
}

int wq_httpc_start(wq_host *h, const wq_httpc_spec *spec, wq_httpc_fn fn, void *ud,
                   wq_httpc_req **out, char *msg, size_t msgsize)
{
    client *c = get_client(h);
    if (!c) {
        snprintf(msg, msgsize, "cannot start the HTTP client (out of memory)");
        return -1;
    }
    wq_httpc_req *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(msg, msgsize, "out of memory");
        return -1;
    }
    r->c = c;
    r->fn = fn;
    r->ud = ud;
    r->max_body = spec->max_body;
    r->easy = c->nspare ? c->spare[--c->nspare] : curl_easy_init();
    if (!r->easy) {
        snprintf(msg, msgsize, "out of memory");
        free_req(r);
        return -1;
    }
    if (configure(r, spec, msg, msgsize) < 0) {
        free_req(r);
        return -1;
    }
    CURLMcode mc = curl_multi_add_handle(c->multi, r->easy);
    if (mc != CURLM_OK) {
        snprintf(msg, msgsize, "%s", curl_multi_strerror(mc));
        free_req(r);
        return -1;
    }
    r->next = c->reqs;
    if (c->reqs)
        c->reqs->prev = r;
    c->reqs = r;
    c->active++;
    *out = r;
    return 0;
}

const wq_httpc_result *wq_httpc_output(wq_httpc_req *r)
{
    return &r->res;
}

void wq_httpc_free(wq_httpc_req *r)
{
    if (r)
        free_req(r);
}

void wq_httpc_abandon(wq_httpc_req *r)
{
    if (!r->ended && r->c) {
        client *c = r->c;
        curl_multi_remove_handle(c->multi, r->easy);
        unlink_req(r);
        c->active--;
        /* Its connection was cut mid-transfer: not one to reuse. */
        curl_easy_cleanup(r->easy);
        r->easy = NULL;
    }
    free_req(r);
}

int wq_httpc_active(const wq_host *h)
{
    const client *c = h->httpc;
    return c ? c->active : 0;
}

void wq_httpc_shutdown(wq_host *h)
{
    client *c = h->httpc;
    if (!c)
        return;
    /* Transfers still running end as failures their owners free later. */
    while (c->reqs) {
        wq_httpc_req *r = c->reqs;
        curl_multi_remove_handle(c->multi, r->easy);
        unlink_req(r);
        curl_easy_cleanup(r->easy);
        r->easy = NULL;
        r->c = NULL;
        r->ended = 1;
        r->res.error = "the runner is stopping";
        r->res.body = "";
    }
    while (c->nspare)
        curl_easy_cleanup(c->spare[--c->nspare]);
    curl_multi_cleanup(c->multi);
    event_free(c->timer);
    free(c);
    h->httpc = NULL;
    curl_global_cleanup();
}
