/*
 * Flows from Lua (wq.flow, wq.Flow, job.flow, job.deps) and what a queue's
 * workers report about the items of flows' nodes (docs/flows.md).
 */
#ifndef WQ_LFLOW_H
#define WQ_LFLOW_H

#include "lua/lqueue.h"

#include <lua.h>

/* The kinds of a stashed outcome (lqueue.flow_stash). */
enum { LFLOW_DONE = 1, LFLOW_DEAD = 2 };

/* Registers wq.Flow and sets wq.flow in the table at index wq. */
void wq_lua_open_flow(lua_State *L, int wq);

/* A shared database handed lq a claimed item: keeps its flow and deps for its handler. 0 or
 * WQ_ENOMEM. */
int lflow_claimed(lqueue *lq, const wq_claimed *c);
/* The claim of key ended: forgets what lflow_claimed kept. */
void lflow_released(lqueue *lq, const char *key, size_t len);
/* Frees what the queue keeps for flows (at close). */
void lflow_close(lqueue *lq);

/* Whether key is an item of a flow's node (its outcome is wanted). */
int lflow_is_node(lqueue *lq, const char *key, size_t len);
/* Sets job.flow and job.deps on the job table at the top, when key is a node's item. */
void lflow_push_job(lua_State *L, lqueue *lq, const char *key, size_t len);
/* The node's run succeeded with the nres results from idx: its result (a string or
 * JSON-representable table; anything else is none). */
void lflow_result(lua_State *L, lqueue *lq, const char *key, size_t len, int idx, int nres);
/* The same with the result as JSON text (NULL: none). */
void lflow_result_json(lqueue *lq, const char *key, size_t len, const char *r, size_t rlen);
/* The node's item is dead-lettered (or cancelled) with error. */
void lflow_dead(lqueue *lq, const char *error);
/* After done: if key left the queue, its node finished with what was stashed (no stash: done
 * without a result). */
void lflow_after_done(lqueue *lq, const char *key, size_t len);

#endif
