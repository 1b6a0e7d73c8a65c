/*
 * Schedules of a queue (SPEC 7.3): q:schedule, q:unschedule, q:schedules,
 * persisted in the state file's schedules table.
 */
#ifndef WQ_LCRON_H
#define WQ_LCRON_H

#include <lua.h>

struct lqueue;
struct wq_schedule_row;
typedef struct lcron lcron;

/* Adds schedule, unschedule and schedules to the queue method table at methods. */
void lcron_register(lua_State *L, int methods);
/* A schedule read from the state file: kept, armed when the script defines it again. */
void lcron_restore(struct lqueue *lq, const struct wq_schedule_row *row);
/* Frees the queue's schedules (at close). */
void lcron_free_all(struct lqueue *lq);

#endif
