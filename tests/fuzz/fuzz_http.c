/*
 * libFuzzer target: the HTTP request path, end to end in one process. The
 * real server (src/host/http.c, http_ops.c, conns.c on libevent's evhttp)
 * listens on a loopback port of its own, with two queues behind a fake
 * wq_queue_ops; each input is sent raw on a new connection (so it may hold
 * several pipelined requests), the client then half-closes, and the loop
 * runs until the server has closed the connection. The server lives across
 * inputs, so state one request leaves behind meets the next.
 *
 * Checked for every answer that came back whole: it is an HTTP/1.x status
 * line and headers; an error answer (4xx, 5xx) has Content-Type
 * application/json and a body {"error": "<string>"}: Content-Length bytes
 * (or none: the answer to a HEAD), or up to the close without one (HTTP/1.0). The server must close
 * the connection after the client's end, within 5 s. Any miss aborts.
 */
#define _GNU_SOURCE
#include "engine/common.h"
#include "host/host.h"
#include "host/http_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <fcntl.h>
#include <json-c/json_tokener.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- a queue that keeps nothing: enough for every route to answer ---- */

typedef struct fake {
    const char *name;
    int paused;
    uint64_t adds;
} fake;

static void f_stats(void *q, wq_qstats *st)
{
    fake *f = q;
    memset(st, 0, sizeof *st);
    st->name = f->name;
    st->adds = f->adds;
    st->paused = f->paused;
}
static void f_ages(void *q, double *u, double *l)
{
    (void)q;
    *u = *l = 0;
}
static int64_t f_next(void *q)
{
    (void)q;
    return WQ_NEVER;
}
static void f_void(void *q)
{
    (void)q;
}
static int f_zero(void *q)
{
    (void)q;
    return 0;
}
static size_t f_processing(void *q)
{
    (void)q;
    return 0;
}
static int f_add(void *q, const wq_ext_item *it)
{
    fake *f = q;
    if (it->keylen == 1 && it->key[0] == '!') {
        snprintf(it->why, it->whysize, "group_of refused it");
        return WQ_EINVAL;
    }
    return ++f->adds % 3 ? 1 : 0;
}
static int f_pause(void *q, int p)
{
    fake *f = q;
    int changed = f->paused != p;
    f->paused = p;
    return changed;
}
static int f_paused(void *q)
{
    return ((fake *)q)->paused;
}
static int f_key(void *q, const char *key, size_t len)
{
    (void)q;
    return len == 1 && key[0] == 'b' ? WQ_EBUSY : len == 1 && key[0] == 'k' ? 0 : WQ_ENOENT;
}
static int f_items(void *q, const wq_items_query *qry, void (*fn)(void *, const wq_item_view *),
                   void *ud)
{
    (void)q;
    (void)qry;
    wq_item_view it = {.key = "k\x01/\xc3\xa9",
                       .keylen = 5,
                       .payload = "{\"a\":[1,2]}",
                       .paylen = 11,
                       .state = "queued",
                       .priority = 3,
                       .group = "g",
                       .grouplen = 1,
                       .attempt = 1,
                       .progress = "{\"step\":2}",
                       .progresslen = 10};
    fn(ud, &it);
    return 1;
}
static int f_dead(void *q, void (*fn)(void *, const wq_dead_view *), void *ud)
{
    (void)q;
    wq_dead_view d = {.key = "d",
                      .keylen = 1,
                      .error = "jobs.lua:1: boom",
                      .traceback = "stack traceback:\n\tjobs.lua:1: in function <jobs.lua:1>",
                      .attempts = 6,
                      .failed_at = 1.5e9};
    fn(ud, &d);
    return 1;
}

static const wq_queue_ops fake_ops = {
    .stats = f_stats,
    .work_ages = f_ages,
    .next_ready = f_next,
    .fire_due = f_void,
    .busy = f_zero,
    .awaited = f_zero,
    .processing = f_processing,
    .stop = f_void,
    .add = f_add,
    .pause = f_pause,
    .paused = f_paused,
    .remove = f_key,
    .cancel = f_key,
    .retry_dead = f_key,
    .purge_dead = f_zero,
    .items = f_items,
    .dead = f_dead,
};

/* ---- the server ---- */

static wq_host *host;
static struct sockaddr_in addr;

static void start(void)
{
    static fake q1 = {"q", 0, 0}, q2 = {"misc", 0, 0};
    wq_host_opts o = {0};
    o.serve = 1;
    o.quiet = 1;
    setenv("WQ_TEST_HTTP_DEADLINE_MS", "2000", 1);
    host = wq_host_new(&o);
    if (!host || wq_host_add_queue(host, &fake_ops, &q1, q1.name, 0) < 0 ||
        wq_host_add_queue(host, &fake_ops, &q2, q2.name, 0) < 0) {
        fprintf(stderr, "fuzz_http: cannot make a host\n");
        exit(1);
    }
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct evconnlistener *lev =
        evconnlistener_new_bind(host->base, NULL, NULL, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE,
                                -1, (struct sockaddr *)&addr, sizeof addr);
    socklen_t len = sizeof addr;
    if (!lev || getsockname(evconnlistener_get_fd(lev), (struct sockaddr *)&addr, &len) < 0 ||
        wq_http_serve(host, lev) < 0) {
        fprintf(stderr, "fuzz_http: cannot listen on 127.0.0.1\n");
        exit(1);
    }
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* ---- the answers ---- */

static void bad(const char *what, const char *ans, size_t n)
{
    fprintf(stderr, "fuzz_http: %s\n--- answer (%zu bytes) ---\n%.*s\n", what, n,
            (int)(n > 2000 ? 2000 : n), ans);
    abort();
}

/* The value of header name in head[0..n) (after "\r\n"), or NULL; *len its length. */
static const char *header(const char *head, size_t n, const char *name, size_t *len)
{
    size_t nl = strlen(name);
    for (const char *p = head; p && p < head + n;) {
        const char *eol = memmem(p, (size_t)(head + n - p), "\r\n", 2);
        if (!eol)
            break;
        const char *line = eol + 2;
        if ((size_t)(head + n - line) > nl + 1 && strncasecmp(line, name, nl) == 0 &&
            line[nl] == ':') {
            const char *v = line + nl + 1;
            while (*v == ' ')
                v++;
            const char *e = memmem(v, (size_t)(head + n - v), "\r\n", 2);
            *len = e ? (size_t)(e - v) : (size_t)(head + n - v);
            return v;
        }
        p = line;
    }
    return NULL;
}

static int is_error_body(const char *b, size_t n)
{
    json_tokener *tok = json_tokener_new();
    json_object *o = tok && n < INT32_MAX ? json_tokener_parse_ex(tok, b, (int)n) : NULL;
    if (o && json_tokener_get_parse_end(tok) != n) {
        json_object_put(o);
        o = NULL;
    }
    json_tokener_free(tok);
    int ok = json_object_is_type(o, json_type_object) && json_object_object_length(o) == 1 &&
             json_object_is_type(json_object_object_get(o, "error"), json_type_string) &&
             json_object_get_string_len(json_object_object_get(o, "error")) > 0;
    json_object_put(o);
    return ok;
}

static void check(const char *ans, size_t n)
{
    size_t at = 0;
    while (at < n) {
        const char *a = ans + at;
        size_t left = n - at;
        const char *end = memmem(a, left, "\r\n\r\n", 4);
        if (!end)
            return; /* cut short: the server closed while the client still sent */
        size_t hl = (size_t)(end - a) + 2;
        int code = 0;
        if (left < 13 || (memcmp(a, "HTTP/1.1 ", 9) != 0 && memcmp(a, "HTTP/1.0 ", 9) != 0) ||
            sscanf(a + 9, "%3d", &code) != 1 || code < 100 || code > 599)
            bad("not an HTTP status line", a, left);
        size_t cl_len, ct_len;
        const char *cl = header(a, hl, "Content-Length", &cl_len);
        const char *ct = header(a, hl, "Content-Type", &ct_len);
        at += hl + 2;
        if (code == 100)
            continue;
        if (code >= 400 && !(ct && ct_len == 16 && memcmp(ct, "application/json", 16) == 0))
            bad("an error answer that is not application/json", a, left);
        if (!cl) { /* HTTP/1.0 framing: the body runs to the close */
            if (code >= 400 && n > at && !is_error_body(ans + at, n - at))
                bad("an error body that is not {\"error\": \"...\"}", a, left);
            return;
        }
        size_t blen = (size_t)strtoull(cl, NULL, 10);
        const char *b = ans + at;
        if (n - at >= 5 && memcmp(b, "HTTP/", 5) == 0)
            continue; /* no body: the answer to a HEAD */
        if (n - at < blen)
            return; /* cut short */
        if (code >= 400 && !is_error_body(b, blen))
            bad("an error body that is not {\"error\": \"...\"}", a, left);
        at += blen;
    }
}

/* ---- one input ---- */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!host)
        start();
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0 && errno != EINPROGRESS))
        abort();
    size_t sent = 0, cap = 1 << 16, got = 0;
    char *ans = malloc(cap);
    int closed = 0, shut = 0;
    double t0 = now();
    struct timeval tick = {0, 20000};
    while (!closed) {
        if (!shut) {
            ssize_t w = sent < size ? send(fd, data + sent, size - sent, MSG_NOSIGNAL) : 0;
            if (w > 0)
                sent += (size_t)w;
            else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOTCONN)
                sent = size; /* the server closed first */
            if (sent == size) {
                shutdown(fd, SHUT_WR);
                shut = 1;
            }
        }
        event_base_loopexit(host->base, &tick);
        event_base_loop(host->base, EVLOOP_ONCE);
        for (;;) {
            if (got == cap)
                ans = realloc(ans, cap *= 2);
            ssize_t r = recv(fd, ans + got, cap - got, 0);
            if (r > 0) {
                got += (size_t)r;
                continue;
            }
            if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOTCONN &&
                           errno != EINPROGRESS))
                closed = 1; /* closed, or reset with input unread */
            break;
        }
        if (!closed && now() - t0 > 5)
            bad("the server kept the connection 5 s after the client's end", ans, got);
    }
    close(fd);
    check(ans, got);
    free(ans);
    return 0;
}
