/*
 * Schedules of a queue (SPEC 7.3): q:schedule, q:unschedule, q:schedules,
 * persisted in the state file's schedules table.
 */
#ifndef WQ_LCRON_H
#define WQ_LCRON_H

#include <lauxlib.h>
#include <lua.h>

struct lqueue;
struct wq_schedule_row;
struct wq_host;
typedef struct lcron lcron;

/* Queue methods: schedule, unschedule, schedules (for luaL_setfuncs). */
extern const luaL_Reg lcron_methods[];
/* A schedule read from the state file: kept, armed when the script defines it again. */
void lcron_restore(struct lqueue *lq, const struct wq_schedule_row *row);
/* wq_queue_ops.schedules: calls fn for each schedule of the queue (an lqueue), by name. */
int lcron_list(void *q, void (*fn)(void *ud, const struct wq_schedule_row *s, int defined),
               void *ud);
/* Frees the queue's schedules (at close). */
void lcron_free_all(struct lqueue *lq);
/* The main chunk ended: warns once of each schedule restored from the state file that the
 * script did not define again (it does not fire). */
void lcron_report_undefined(struct wq_host *h);

#endif
