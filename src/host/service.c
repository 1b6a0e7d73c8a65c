/*
 * Start-up and stop lines, systemd notifications (see service.h).
 */
#include "host/service.h"

#include "store/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

typedef struct service {
    struct event *ready_ev;    /* the loop's first turn */
    struct event *watchdog_ev; /* every half WatchdogSec */
    int ready;
} service;

void wq_service_redact_db(const char *db, char *out, size_t n)
{
    snprintf(out, n, "%s", db);
    /* URL form: scheme://user:password@host... */
    char *scheme = strstr(out, "://");
    if (scheme) {
        char *auth = scheme + 3;
        char *at = strchr(auth, '@');
        char *slash = strchr(auth, '/');
        char *colon = strchr(auth, ':');
        if (at && (!slash || at < slash) && colon && colon < at) {
            char rest[1024];
            snprintf(rest, sizeof rest, "%s", at);
            snprintf(colon, n - (size_t)(colon - out), ":***%s", rest);
        }
    }
    /* Key-value form, or a URL parameter: password=... up to a space or '&'. */
    char *p = out;
    while ((p = strstr(p, "password="))) {
        char *v = p + 9;
        size_t len = strcspn(v, " &");
        if (len == 3 && strncmp(v, "***", 3) == 0) {
            p = v + 3;
            continue;
        }
        char rest[1024];
        snprintf(rest, sizeof rest, "%s", v + len);
        snprintf(v, n - (size_t)(v - out), "***%s", rest);
        p = v + 3;
    }
}

static void on_ready(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    wq_host *h = arg;
    service *s = h->service;
    if (s->ready || h->exiting)
        return;
    s->ready = 1;
    sd_notifyf(0, "READY=1\nSTATUS=running: %d queue(s)%s%s\nMAINPID=%d", h->nqueues,
               h->opts.listen ? ", listening on " : "", h->opts.listen ? h->opts.listen : "",
               (int)getpid());
    if (h->opts.quiet)
        return;
    char db[512], queues[512];
    if (h->opts.db_path) {
        char red[400];
        wq_service_redact_db(h->opts.db_path, red, sizeof red);
        snprintf(db, sizeof db, "%s %s",
                 wq_backend_is_pg(h->opts.db_path) ? "postgresql" : "sqlite", red);
    } else {
        snprintf(db, sizeof db, "memory (no --db)");
    }
    size_t len = 0;
    queues[0] = '\0';
    for (int i = 0; i < h->nqueues && len < sizeof queues; i++)
        len += (size_t)snprintf(queues + len, sizeof queues - len, "%s%s", i ? ", " : "",
                                h->queues[i].name);
    if (len >= sizeof queues)
        snprintf(queues + sizeof queues - 5, 5, "...");
    wq_log_field f[] = {
        WQ_LOG_STR("version", WQ_VERSION),
        WQ_LOG_STR("db", db),
        WQ_LOG_STR("listen", h->opts.listen ? h->opts.listen : ""),
        WQ_LOG_NUM("pid", getpid()),
        WQ_LOG_STR("queues", queues),
    };
    wq_host_logf(h, WQ_LOG_INFO, f, sizeof f / sizeof *f,
                 "wqrun: wqrun %s started (pid %d): state in %s; %s%s; queues: %s", WQ_VERSION,
                 (int)getpid(), db, h->opts.listen ? "listening on " : "no HTTP listener",
                 h->opts.listen ? h->opts.listen : "", *queues ? queues : "none");
}

static void on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    sd_notify(0, "WATCHDOG=1");
}

void wq_service_start(wq_host *h)
{
    service *s = calloc(1, sizeof *s);
    if (!s)
        return; /* no start-up line: nothing else depends on it */
    h->service = s;
    struct timeval now = {0, 0};
    s->ready_ev = evtimer_new(h->base, on_ready, h);
    if (s->ready_ev)
        evtimer_add(s->ready_ev, &now);
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
        struct timeval half = {(time_t)(usec / 2 / 1000000), (suseconds_t)(usec / 2 % 1000000)};
        s->watchdog_ev = event_new(h->base, -1, EV_PERSIST, on_watchdog, h);
        if (s->watchdog_ev)
            event_add(s->watchdog_ev, &half);
    }
}

void wq_service_stopping(wq_host *h, const char *why)
{
    (void)h;
    sd_notifyf(0, "STOPPING=1\nSTATUS=stopping (%s): finishing running handlers", why);
}

void wq_service_stopped(wq_host *h, int status)
{
    if (h->opts.quiet && status == 0)
        return;
    double up = wq_host_unix(h, wq_host_now(h)) - h->start_unix;
    wq_log_field f[] = {WQ_LOG_NUM("status", status)};
    char dead[64] = "";
    if (h->ndead_run)
        snprintf(dead, sizeof dead, " (%llu dead-lettered)", (unsigned long long)h->ndead_run);
    wq_host_logf(h, status ? WQ_LOG_WARN : WQ_LOG_INFO, f, 1,
                 "wqrun: wqrun stopped after %.1f s, exit status %d%s", up, status, dead);
}

void wq_service_free(wq_host *h)
{
    service *s = h->service;
    if (!s)
        return;
    if (s->ready_ev)
        event_free(s->ready_ev);
    if (s->watchdog_ev)
        event_free(s->watchdog_ev);
    free(s);
    h->service = NULL;
}
