/*
 * Operating a queue (SPEC 7.5): q:pause, q:resume, q:paused, q:remove,
 * q:cancel, q:items, q:item, q:purge_dead, and the same actions as wq_queue_ops
 * for the host (HTTP, the commands table).
 */
#ifndef WQ_LQOPS_H
#define WQ_LQOPS_H

#include "host/host.h"

#include <lauxlib.h>
#include <lua.h>

struct lqueue;

/* Queue methods: pause, resume, paused, remove, cancel, items, item, purge_dead (for
 * luaL_setfuncs). */
extern const luaL_Reg lqops_methods[];
/* After the restore: applies the paused flag the state file holds. 0, or -1 (message in the
 * store). */
int lqops_restore(struct lqueue *lq);
/* Re-queues key's dead letter with a clean failure count: 1, 0 not dead; raises on OOM. */
int lqops_retry_dead(lua_State *L, struct lqueue *lq, const char *key, size_t len);

/* The queue was paused or resumed for every runner (PostgreSQL): the engine follows, nothing
 * is written. */
void lqops_pause_local(struct lqueue *lq, int paused);

/* The wq_queue_ops members (q is the lqueue). */
int lqops_op(void *q, const wq_bop *op, wq_bop_fn fn, void *ud);
int lqops_pause(void *q, int paused);
int lqops_paused(void *q);
int lqops_remove(void *q, const char *key, size_t len);
int lqops_cancel(void *q, const char *key, size_t len);
int lqops_retry(void *q, const char *key, size_t len);
int lqops_purge_dead(void *q);
/* The queue's history from its backend (wq_queue_ops.history). */
int lqops_history(void *q, int64_t before, size_t limit,
                  void (*fn)(void *ud, const wq_history_view *v), void *ud);
int lqops_items(void *q, const wq_items_query *qry, void (*fn)(void *ud, const wq_item_view *it),
                void *ud);
int lqops_dead(void *q, void (*fn)(void *ud, const wq_dead_view *d), void *ud);
int lqops_item(void *q, const char *key, size_t len, void (*fn)(void *ud, const wq_key_view *v),
               void *ud);

#endif
