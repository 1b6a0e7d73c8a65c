/*
 * wq.http(request): an HTTP request from a task, answered on the loop
 * (host/httpc.c); the response table, or nil and a message.
 */
#ifndef WQ_LHTTP_H
#define WQ_LHTTP_H

#include <lua.h>

/* Sets wq.http in the table at the top of L's stack. */
void wq_lua_open_http(lua_State *L);

#endif
