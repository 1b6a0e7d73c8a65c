/*
 * Waiting for idle queues (q:wait_idle, wq.wait_idle): see lidle.c.
 */
#ifndef WQ_LIDLE_H
#define WQ_LIDLE_H

#include "lua/lqueue.h"

#include <lauxlib.h>

/* The queue method wait_idle (added to the queue's methods). */
extern const luaL_Reg lidle_methods[];
/* wq.wait_idle (added to the wq table). */
extern const luaL_Reg lidle_funcs[];
/* The loop settled: wakes the tasks whose queues are idle now. */
void lidle_settled(wq_sched *s);

#endif
