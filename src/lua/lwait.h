/*
 * Waiting for a key's end: q:wait(key [, timeout]) (SPEC 11); see lwait.c.
 */
#ifndef WQ_LWAIT_H
#define WQ_LWAIT_H

#include <lauxlib.h>

/* The queue method wait (added to the queue's methods). */
extern const luaL_Reg lwait_methods[];

#endif
