/*
 * wq.exec: run a program without a shell, waiting in the calling task.
 */
#ifndef WQ_LEXEC_H
#define WQ_LEXEC_H

#include <lua.h>

/* Registers the child record type and wq.exec in the table at the top of L. */
void wq_lua_open_exec(lua_State *L);

#endif
