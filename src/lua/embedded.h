/*
 * The Lua sources of lua/, compiled into the binary at build time
 * (scripts/embed-lua.cmake writes the array).
 */
#ifndef WQ_EMBEDDED_H
#define WQ_EMBEDDED_H

#include <stddef.h>

typedef struct wq_embedded {
    const char *name; /* file name without .lua; NULL ends the array */
    const char *src;
    size_t len;
} wq_embedded;

extern const wq_embedded wq_embedded_lua[];

#endif
