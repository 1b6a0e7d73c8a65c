/*
 * A slow name resolver for tests/e2e/test_wq_http.sh, loaded with
 * LD_PRELOAD: getaddrinfo() of a name ending in ".slow.test" sleeps 3
 * seconds, then resolves 127.0.0.1; every other name goes to the real
 * getaddrinfo. It shows whether stopping a transfer during its lookup waits
 * for the lookup (libcurl's resolver thread) and so stalls the event loop.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netdb.h>
#include <string.h>
#include <unistd.h>

typedef int (*gai_fn)(const char *, const char *, const struct addrinfo *, struct addrinfo **);

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                struct addrinfo **res)
{
    static const char suffix[] = ".slow.test";
    gai_fn real = (gai_fn)dlsym(RTLD_NEXT, "getaddrinfo");
    size_t n = node ? strlen(node) : 0, sn = sizeof suffix - 1;
    if (!real)
        return EAI_SYSTEM;
    if (n > sn && strcmp(node + n - sn, suffix) == 0) {
        sleep(3);
        node = "127.0.0.1";
    }
    return real(node, service, hints, res);
}
