/*
 * wq.limiter.* and wq.backoff: Lua objects over the engine's rate limiters
 * and wait.Backoff.
 */
#ifndef WQ_LLIMITER_H
#define WQ_LLIMITER_H

#include "engine/ratelimit.h"

#include <lua.h>

/* Registers wq.limiter and wq.backoff in the table at the top of L. */
void wq_lua_open_limiter(lua_State *L);
/* Pushes a new wq.limiter.default() object and returns its limiter. */
wq_limiter *wq_lua_push_default_limiter(lua_State *L);
/* The limiter inside the Lua limiter object at idx (raises if not one). */
wq_limiter *wq_lua_checklimiter(lua_State *L, int idx, const char *fn, const char *arg);

#endif
