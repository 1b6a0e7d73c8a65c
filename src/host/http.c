/*
 * The HTTP API. Not implemented yet: --listen is refused with a message.
 */
#include "host/http.h"

#include <stdio.h>

int wq_http_start(wq_host *h, const char *addr)
{
    (void)h;
    fprintf(stderr, "wqrun: --listen %s: the HTTP API is not available in this build yet\n", addr);
    return -1;
}

void wq_http_stop(wq_host *h)
{
    (void)h;
}
