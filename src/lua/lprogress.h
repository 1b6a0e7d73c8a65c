/*
 * A running job's progress: job:progress(value) (SPEC 11), kept per running
 * key for the queue's views, told on to the backend and the event
 * listeners at most once a second per job.
 */
#ifndef WQ_LPROGRESS_H
#define WQ_LPROGRESS_H

#include "lua/lqueue.h"

#include <lua.h>

#define LPROGRESS_MAX 1024 /* bytes of a progress value as JSON */

/* Sets the job table's metatable (job:progress) on the table at the top of L. */
void lprogress_set_meta(lua_State *L);
/* The run of key ended: its progress goes (with what was not told on yet). */
void lprogress_end(lqueue *lq, const char *key, size_t len);
/* The latest progress of running key (JSON text, *n bytes), NULL: none. */
const char *lprogress_get(const lqueue *lq, const char *key, size_t len, size_t *n);
/* Frees the queue's progress entries (at its close). */
void lprogress_close(lqueue *lq);

#endif
