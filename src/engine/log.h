/*
 * The process's log: one line per event on stderr, as text for people
 * ("2026-11-26 16:49:00.123+01:00 WARN wqrun: ...") or as JSON lines for
 * collectors ({"time":"2026-11-26T15:49:00.123Z","level":"warn","msg":...,
 * "queue":...}), with a minimum level. A leaf utility: stdio only, used by
 * the store, the host and the Lua bindings alike (it lives beside common.c
 * so every layer can reach it). The host plugs in its clock (virtual time)
 * and a hook that clears the progress line before a line is written.
 */
#ifndef WQ_LOG_H
#define WQ_LOG_H

#include <stddef.h>

typedef enum { WQ_LOG_DEBUG, WQ_LOG_INFO, WQ_LOG_WARN, WQ_LOG_ERROR } wq_log_level;

/* A structured field of a line: a string (str, len) or, with str NULL, a number. */
typedef struct wq_log_field {
    const char *name;
    const char *str;
    size_t len;
    long long num;
} wq_log_field;

/* A string field (NULL: an empty string). */
wq_log_field wq_log_str(const char *name, const char *s);
#define WQ_LOG_STR(n, s) wq_log_str((n), (s))
#define WQ_LOG_BYTES(n, s, l) ((wq_log_field){(n), (s), (l), 0})
#define WQ_LOG_NUM(n, v) ((wq_log_field){(n), NULL, 0, (long long)(v)})

/* "text" or "json": 0, or -1 for another name. */
int wq_log_set_format(const char *name);
/* "debug", "info", "warn" or "error": lines below it are dropped. 0 or -1. */
int wq_log_set_level(const char *name);
int wq_log_json(void);
int wq_log_enabled(wq_log_level lv);
/* The wall clock of the lines (Unix seconds); NULL: the real clock. */
void wq_log_set_clock(double (*now)(void *ud), void *ud);
/* Called before each line is written (the progress line clears itself); NULL: none. */
void wq_log_set_before(void (*fn)(void *ud), void *ud);
/*
 * Writes one line: msg (a leading "wqrun: " is kept in text and dropped in
 * JSON, where the source is implied) and the fields (JSON only; text shows
 * them in msg already).
 */
void wq_log_write(wq_log_level lv, const wq_log_field *fields, size_t nfields, const char *msg);
void wq_log(wq_log_level lv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
