/*
 * Group limits from Lua (SPEC 7.4): the queue options group_of,
 * group_limit and rate, opts.group of an add, q:set_group_limit and
 * q:group_limit. The dispatch itself is the engine's (engine/group.h).
 */
#ifndef WQ_LGROUP_H
#define WQ_LGROUP_H

#include "engine/queue.h"

#include <lauxlib.h>
#include <lua.h>

struct lqueue;

/* Queue methods: set_group_limit, group_limit (for luaL_setfuncs). */
extern const luaL_Reg lgroup_methods[];

/*
 * Reads the queue options group_of, group_limit and rate of the options
 * table at opts (raising on bad ones, before anything is made) into *out.
 */
typedef struct lgroup_opts {
    int has_limit, has_rate, has_group_of;
    wq_limit limit;
    double rate, burst;
} lgroup_opts;
void lgroup_read_options(lua_State *L, int opts, lgroup_opts *out);
/* Applies them to the queue (keeps group_of, at opts, in the registry). Raises on OOM. */
void lgroup_apply_options(lua_State *L, struct lqueue *lq, int opts, const lgroup_opts *o);

/* Checks a group name at idx (a string of at most WQ_GROUP_MAX bytes) for fn's argument arg. */
const char *lgroup_checkname(lua_State *L, int idx, const char *fn, const char *arg, size_t *len);

/*
 * The group of an add without opts.group: group_of(key, payload) of the key
 * at keyidx and the payload at payidx (0: none). Leaves the result on the
 * stack (it keeps the string alive) and sets o->group; raises the error of
 * a group_of that raises or returns neither a string nor nil.
 */
void lgroup_resolve(lua_State *L, struct lqueue *lq, int keyidx, int payidx, const char *fn,
                    wq_add_opts *o);

/*
 * The same for an add from outside the script (HTTP, inbox), run protected
 * on the main state: payload is JSON text (NULL: none). Returns 0 with
 * o->group set (the name is copied to buf, of WQ_GROUP_MAX + 1 bytes), or
 * -1 with the error message in buf.
 */
int lgroup_resolve_ext(struct lqueue *lq, const char *key, size_t keylen, const char *payload,
                       size_t paylen, wq_add_opts *o, char *buf, size_t bufsize);

#endif
