/*
 * Error strings, the allocator hook and the byte-string hash shared by the
 * engine's tables.
 */
#include "engine/common.h"

#include <stdlib.h>
#include <string.h>

static void *libc_realloc(void *ud, void *ptr, size_t size)
{
    (void)ud;
    if (size == 0) {
        free(ptr);
        return NULL;
    }
    return realloc(ptr, size);
}

static wq_realloc_fn alloc_fn = libc_realloc;
static void *alloc_ud;

void wq_set_allocator(wq_realloc_fn fn, void *ud)
{
    alloc_fn = fn ? fn : libc_realloc;
    alloc_ud = fn ? ud : NULL;
}

void *wq_malloc(size_t size)
{
    return size ? alloc_fn(alloc_ud, NULL, size) : NULL;
}

void *wq_realloc(void *ptr, size_t size)
{
    if (size == 0)
        return NULL;
    return alloc_fn(alloc_ud, ptr, size);
}

void wq_free(void *ptr)
{
    if (ptr)
        alloc_fn(alloc_ud, ptr, 0);
}

const char *wq_strerror(int err)
{
    switch (err) {
    case 0: return "success";
    case WQ_ENOMEM: return "out of memory";
    case WQ_EINVAL: return "invalid argument";
    case WQ_EEMPTY: return "queue is empty";
    case WQ_ESHUTDOWN: return "queue is shut down";
    case WQ_ENOENT: return "no such key";
    case WQ_E2BIG: return "key or payload too large";
    case WQ_EIO: return "storage error";
    case WQ_EBUSY: return "resource busy";
    case WQ_EFORMAT: return "unrecognized file format";
    case WQ_EAGAIN: return "under way";
    default: return "unknown error";
    }
}

static inline uint64_t mix(uint64_t a, uint64_t b)
{
    /* 64x64 -> 128 multiply, folded: a fast, well-spread mixer. */
    __uint128_t r = (__uint128_t)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

uint64_t wq_hash(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (len * 0xa0761d6478bd642fULL);
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = mix(h ^ w, 0xe7037ed1a0b428dbULL);
        p += 8;
        len -= 8;
    }
    /* The last 0-7 bytes without a variable-length copy: two overlapping
     * loads of 4 bytes, or the 1-3 bytes picked one by one. */
    uint64_t tail = 0;
    if (len >= 4) {
        uint32_t a, b;
        memcpy(&a, p, 4);
        memcpy(&b, p + len - 4, 4);
        tail = (uint64_t)a << 32 | b;
    } else if (len > 0) {
        tail = (uint64_t)p[0] << 16 | (uint64_t)p[len >> 1] << 8 | p[len - 1];
    }
    h = mix(h ^ tail ^ ((uint64_t)len << 56), 0x8ebc6af09c88c6e3ULL);
    return mix(h, 0x589965cc75374cc3ULL);
}

void wq_show_key(char out[WQ_SHOWN_KEY], const char *key, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    char *o = out;
    for (size_t i = 0; i < len && i < 64; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
            *o++ = (char)c;
        } else {
            *o++ = '\\';
            *o++ = 'x';
            *o++ = hex[c >> 4];
            *o++ = hex[c & 15];
        }
    }
    if (len > 64) {
        memcpy(o, "...", 3);
        o += 3;
    }
    *o = '\0';
}

size_t wq_utf8_cut(const char *s, size_t len, size_t max)
{
    if (len <= max)
        return len;
    size_t n = max;
    /* s[n] is the first byte left out: back up over the sequence it continues */
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    return n;
}

/* The next line of s with something on it (not only blanks), or NULL; *len its length. */
static const char *next_line(const char *s, size_t *len)
{
    while (*s) {
        size_t l = strcspn(s, "\r\n");
        if (strspn(s, " \t") < l) {
            *len = l;
            return s;
        }
        s += l;
        s += strspn(s, "\r\n");
    }
    return NULL;
}

/* Appends s[0..len) to out, n bytes used of size: the bytes taken, control bytes as spaces;
 * when all would not fit, at most size - 4 bytes in all (room for "..." and NUL) and *cut. */
static size_t put_line(char *out, size_t n, size_t size, const char *s, size_t len, int *cut)
{
    size_t take = len;
    if (n + len >= size) {
        *cut = 1;
        take = n + 4 < size ? wq_utf8_cut(s, len, size - 4 - n) : 0;
    }
    for (size_t i = 0; i < take; i++) {
        unsigned char c = (unsigned char)s[i];
        out[n + i] = c < 0x20 || c == 0x7f ? ' ' : (char)c;
    }
    return take;
}

char *wq_show_line(char *out, size_t size, const char *s)
{
    size_t len = 0, n = 0;
    int cut = 0;
    /* The first line with something on it: gzip's "\ngzip: x: not in gzip format" */
    const char *line = next_line(s ? s : "", &len);
    if (line) {
        /* "file:3: " then the message on the next line: one line of both */
        size_t l = len;
        while (l > 0 && (line[l - 1] == ' ' || line[l - 1] == '\t'))
            l--;
        size_t len2 = 0;
        const char *more = l > 0 && line[l - 1] == ':' ? next_line(line + len, &len2) : NULL;
        n = put_line(out, 0, size, line, more ? l : len, &cut);
        if (more && !cut) {
            if (n + 1 + len2 < size) {
                out[n++] = ' ';
                n += put_line(out, n, size, more, len2, &cut);
            } else { /* the second line does not fit whole: the first, cut to make room */
                cut = 1;
                if (n + 4 < size) {
                    out[n++] = ' ';
                    n += put_line(out, n, size, more, len2, &cut);
                } else {
                    n = wq_utf8_cut(out, n, size - 4);
                }
            }
        }
    }
    if (cut) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = '\0';
    return out;
}
