/*
 * wq.sha256 and wq.hmac_sha256: one-shot digests of Lua strings (any
 * bytes), returned as lower-case hex — the form webhook signatures take
 * ("sha256=" .. wq.hmac_sha256(secret, body)).
 */
#include "lua/lcrypto.h"

#include "lua/lwq.h"

#include <lauxlib.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

static void push_hex(lua_State *L, const unsigned char *d, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    char out[2 * EVP_MAX_MD_SIZE];
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[d[i] >> 4];
        out[2 * i + 1] = digits[d[i] & 15];
    }
    lua_pushlstring(L, out, 2 * n);
}

static const char *check_bytes(lua_State *L, int idx, const char *fn, const char *arg, size_t *len)
{
    if (lua_type(L, idx) != LUA_TSTRING)
        wq_argerror(L, fn, arg,
                    lua_pushfstring(L, "string expected, got %s", luaL_typename(L, idx)));
    return lua_tolstring(L, idx, len);
}

static int sha256_lua(lua_State *L)
{
    size_t len;
    const char *data = check_bytes(L, 1, "sha256", "data", &len);
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)data, len, md);
    push_hex(L, md, sizeof md);
    return 1;
}

static int hmac_sha256_lua(lua_State *L)
{
    size_t klen, len;
    const char *key = check_bytes(L, 1, "hmac_sha256", "key", &klen);
    const char *data = check_bytes(L, 2, "hmac_sha256", "data", &len);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (klen > INT_MAX ||
        !HMAC(EVP_sha256(), key, (int)klen, (const unsigned char *)data, len, md, &mdlen))
        return luaL_error(L, "hmac_sha256: cannot compute the digest");
    push_hex(L, md, mdlen);
    return 1;
}

void wq_lua_open_crypto(lua_State *L)
{
    lua_pushcfunction(L, sha256_lua);
    lua_setfield(L, -2, "sha256");
    lua_pushcfunction(L, hmac_sha256_lua);
    lua_setfield(L, -2, "hmac_sha256");
}
