/*
 * Digests for handlers that sign what they send: wq.sha256(data) and
 * wq.hmac_sha256(key, data), as lower-case hex, from OpenSSL's libcrypto
 * (the TLS library libcurl links).
 */
#ifndef WQ_LCRYPTO_H
#define WQ_LCRYPTO_H

#include <lua.h>

/* Sets wq.sha256 and wq.hmac_sha256 in the table at the top of L's stack. */
void wq_lua_open_crypto(lua_State *L);

#endif
