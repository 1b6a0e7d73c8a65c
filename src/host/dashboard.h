/*
 * The dashboard page served at GET / (web/dashboard.html), compiled into the
 * binary at build time by scripts/embed-web.cmake.
 */
#ifndef WQ_DASHBOARD_H
#define WQ_DASHBOARD_H

#include <stddef.h>

/* The page's bytes (UTF-8 HTML, not NUL-terminated), static. */
extern const unsigned char wq_dashboard_html[];
/* Its length in bytes. */
extern const size_t wq_dashboard_html_len;
/* Its ETag, a quoted hash of the bytes, e.g. "\"3f2a...\"". */
extern const char wq_dashboard_etag[];

#endif
