/*
 * wq.pool: process pools (SPEC 10.1), the Lua half: the wq.Pool object,
 * pool:call, and a pool as a queue's handler.
 */
#ifndef WQ_LPOOL_H
#define WQ_LPOOL_H

#include <lua.h>

/* Registers the pool types and wq.pool in the table at the top of L. */
void wq_lua_open_pool(lua_State *L);
/*
 * If the value at idx is a pool, replaces it with the handler function
 * that runs queue's jobs on it and returns the pool's size; else returns 0
 * and changes nothing. The function takes (key, payload JSON text or nil,
 * attempt) and returns what a Lua handler would: the result on success,
 * wq.fail / wq.retry_in outcomes or false and a message on failure.
 */
int wq_lpool_handler(lua_State *L, int idx, const char *queue);

#endif
