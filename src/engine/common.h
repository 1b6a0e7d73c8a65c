/*
 * Shared definitions of the engine: error codes, the allocator hook, the
 * "never" time and a few small helpers. Every engine module includes this.
 */
#ifndef WQ_COMMON_H
#define WQ_COMMON_H

#include <stddef.h>
#include <stdint.h>

/* Error codes: functions return 0 (or a count) on success, a negative WQ_E*. */
enum {
    WQ_ENOMEM = -1,    /* allocation failed; the structure is unchanged */
    WQ_EINVAL = -2,    /* invalid argument */
    WQ_EEMPTY = -3,    /* nothing to hand out right now */
    WQ_ESHUTDOWN = -4, /* the queue is shut down */
    WQ_ENOENT = -5,    /* no such key */
    WQ_E2BIG = -6,     /* key or payload too large */
    WQ_EIO = -7,       /* storage failed */
    WQ_EBUSY = -8,     /* resource held by someone else */
    WQ_EFORMAT = -9,   /* not a file we understand */
    WQ_EAGAIN = -10    /* under way: the outcome comes later (an asynchronous backend) */
};

/* A human-readable message for a WQ_E* code; never NULL, static storage. */
const char *wq_strerror(int err);

/* Nanoseconds; WQ_NEVER is the "no deadline" value. */
#define WQ_NEVER INT64_MAX
#define WQ_NS_PER_S 1000000000LL

/* Adds two nanosecond values, saturating at WQ_NEVER / INT64_MIN. */
static inline int64_t wq_add_sat(int64_t a, int64_t b)
{
    if (b > 0 && a > INT64_MAX - b)
        return INT64_MAX;
    if (b < 0 && a < INT64_MIN - b)
        return INT64_MIN;
    return a + b;
}

/*
 * Allocation goes through one hook so tests can inject failures.
 * fn(ud, ptr, size): size 0 frees ptr and returns NULL; otherwise behaves
 * like realloc. Passing fn == NULL restores the C library allocator.
 */
typedef void *(*wq_realloc_fn)(void *ud, void *ptr, size_t size);
void wq_set_allocator(wq_realloc_fn fn, void *ud);
void *wq_malloc(size_t size);             /* NULL on failure (or size 0) */
void *wq_realloc(void *ptr, size_t size); /* NULL on failure; ptr untouched */
void wq_free(void *ptr);                  /* NULL is fine */

/* 64-bit hash of a byte string (not cryptographic; good spread). */
uint64_t wq_hash(const void *data, size_t len);

/* Size of a key shown by wq_show_key. */
#define WQ_SHOWN_KEY (4 * 64 + 4)
/*
 * A key for a message or log line: at most its first 64 bytes, with control
 * bytes, bytes past ASCII, quotes and backslashes as \xNN, "..." if cut.
 */
void wq_show_key(char out[WQ_SHOWN_KEY], const char *key, size_t len);
/* The length of the longest prefix of s[0..len) that is at most max bytes and does not end
 * inside a UTF-8 sequence (len itself when len <= max). */
size_t wq_utf8_cut(const char *s, size_t len, size_t max);
/*
 * A message for a log line or a table cell: the first non-blank line of s (NULL: ""), control
 * bytes as spaces, cut at a UTF-8 boundary and ending in "..." when it does not fit in size
 * bytes (size >= 4). Returns out.
 */
char *wq_show_line(char *out, size_t size, const char *s);

#endif
