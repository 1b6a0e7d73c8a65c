/*
 * The log writer (see log.h). Each line is built whole in a buffer and
 * written with one fwrite, so lines of concurrent writers (the store's
 * checkpointer thread, a child sharing stderr) never interleave mid-line.
 */
#include "engine/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int json_format;
static wq_log_level min_level = WQ_LOG_INFO;
static double (*clock_fn)(void *);
static void *clock_ud;
static void (*before_fn)(void *);
static void *before_ud;

static const char *const level_names[] = {"debug", "info", "warn", "error"};
static const char *const level_text[] = {"DEBUG", "INFO", "WARN", "ERROR"};

int wq_log_set_format(const char *name)
{
    if (strcmp(name, "text") == 0)
        json_format = 0;
    else if (strcmp(name, "json") == 0)
        json_format = 1;
    else
        return -1;
    return 0;
}

int wq_log_set_level(const char *name)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(name, level_names[i]) == 0) {
            min_level = (wq_log_level)i;
            return 0;
        }
    return -1;
}

wq_log_field wq_log_str(const char *name, const char *s)
{
    wq_log_field f = {name, s ? s : "", s ? strlen(s) : 0, 0};
    return f;
}

int wq_log_json(void)
{
    return json_format;
}

int wq_log_enabled(wq_log_level lv)
{
    return lv >= min_level;
}

void wq_log_set_clock(double (*now)(void *ud), void *ud)
{
    clock_fn = now;
    clock_ud = ud;
}

void wq_log_set_before(void (*fn)(void *ud), void *ud)
{
    before_fn = fn;
    before_ud = ud;
}

/* A growing line; on allocation failure it keeps what fits. */
typedef struct line {
    char *p;
    size_t len, cap;
    char small[1024];
} line;

static void put(line *l, const char *s, size_t n)
{
    if (l->len + n + 2 > l->cap) {
        size_t cap = l->cap * 2;
        while (cap < l->len + n + 2)
            cap *= 2;
        char *p = l->p == l->small ? malloc(cap) : realloc(l->p, cap);
        if (!p) {
            n = l->cap - l->len - 2; /* keep what fits */
        } else {
            if (l->p == l->small)
                memcpy(p, l->small, l->len);
            l->p = p;
            l->cap = cap;
        }
    }
    memcpy(l->p + l->len, s, n);
    l->len += n;
}

static void puts_(line *l, const char *s)
{
    put(l, s, strlen(s));
}

/* s as a JSON string (quotes included); bytes >= 0x80 pass as they are. */
static void put_json(line *l, const char *s, size_t n)
{
    put(l, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            put(l, esc, 2);
        } else if (c == '\n') {
            put(l, "\\n", 2);
        } else if (c == '\t') {
            put(l, "\\t", 2);
        } else if (c < 0x20 || c == 0x7f) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            put(l, esc, 6);
        } else {
            put(l, (const char *)&s[i], 1);
        }
    }
    put(l, "\"", 1);
}

static void stamp(line *l, double now)
{
    time_t secs = (time_t)now;
    int ms = (int)((now - (double)secs) * 1000);
    if (ms < 0)
        ms = 0;
    if (ms > 999)
        ms = 999;
    struct tm tm;
    char buf[64];
    if (json_format) { /* RFC 3339, UTC */
        gmtime_r(&secs, &tm);
        size_t n = strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(buf + n, sizeof buf - n, ".%03dZ", ms);
    } else { /* local time with its offset */
        localtime_r(&secs, &tm);
        size_t n = strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
        char off[8];
        strftime(off, sizeof off, "%z", &tm); /* +hhmm */
        snprintf(buf + n, sizeof buf - n, ".%03d%.3s:%.2s", ms, off, off + 3);
    }
    puts_(l, buf);
}

void wq_log_write(wq_log_level lv, const wq_log_field *fields, size_t nfields, const char *msg)
{
    if (lv < min_level)
        return;
    double now;
    if (clock_fn) {
        now = clock_fn(clock_ud);
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        now = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    }
    line l = {0};
    l.p = l.small;
    l.cap = sizeof l.small;
    if (json_format) {
        puts_(&l, "{\"time\":\"");
        stamp(&l, now);
        puts_(&l, "\",\"level\":\"");
        puts_(&l, level_names[lv]);
        puts_(&l, "\",\"msg\":");
        if (strncmp(msg, "wqrun: ", 7) == 0)
            msg += 7;
        put_json(&l, msg, strlen(msg));
        for (size_t i = 0; i < nfields; i++) {
            put(&l, ",", 1);
            put_json(&l, fields[i].name, strlen(fields[i].name));
            put(&l, ":", 1);
            if (fields[i].str) {
                put_json(&l, fields[i].str, fields[i].len);
            } else {
                char num[32];
                snprintf(num, sizeof num, "%lld", fields[i].num);
                puts_(&l, num);
            }
        }
        put(&l, "}", 1);
    } else {
        stamp(&l, now);
        put(&l, " ", 1);
        puts_(&l, level_text[lv]);
        put(&l, " ", 1);
        puts_(&l, msg);
    }
    put(&l, "\n", 1);
    if (before_fn)
        before_fn(before_ud);
    fwrite(l.p, 1, l.len, stderr);
    fflush(stderr);
    if (l.p != l.small)
        free(l.p);
}

void wq_log(wq_log_level lv, const char *fmt, ...)
{
    if (lv < min_level)
        return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    wq_log_write(lv, NULL, 0, buf);
}
