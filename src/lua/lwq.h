/*
 * The `wq` Lua module: registration of everything the scripts see, and the
 * argument checks and payload helpers every binding shares.
 */
#ifndef WQ_LWQ_H
#define WQ_LWQ_H

#include <lua.h>
#include <stddef.h>
#include <stdint.h>

/* Builds the wq table: global `wq`, package.loaded.wq, and preloads cjson. */
void wq_lua_open(lua_State *L);
/* Pushes the value lua/wq.lua left under name in the internals table; returns its type. */
int wq_lua_internal(lua_State *L, const char *name);

/* Argument errors in the documented form: "fn: bad argument 'name' (msg)". */
int wq_argerror(lua_State *L, const char *fn, const char *arg, const char *msg);
/* The same for the value at idx that is not what: "(what expected, got T)" (a number shows
 * itself: "got 0", "got 2.5"). */
int wq_argexpected(lua_State *L, int idx, const char *fn, const char *arg, const char *what);
/*
 * self of method obj:fn, a userdata of metatable tname (what names it):
 * raises "obj:fn: bad argument 'self' (what expected, got T; call it as
 * obj:fn(...))", the form of the queue's methods.
 */
void *wq_checkself(lua_State *L, const char *tname, const char *obj, const char *what,
                   const char *fn);
/* The longest duration, in seconds: 2^63 ns is about 9.22e9 s (292 years). */
#define WQ_MAX_SECONDS 9.2e9
/* A number argument that must be finite (and >= 0 when nonneg). */
double wq_checkfinite(lua_State *L, int idx, const char *fn, const char *arg, int nonneg);
/* A duration in seconds: finite, at most WQ_MAX_SECONDS (and >= 0 when nonneg). */
double wq_checkduration(lua_State *L, int idx, const char *fn, const char *arg, int nonneg);
/* Seconds to ns: <= 0 and NaN give 0, any positive value at least 1 ns; saturating. */
int64_t wq_seconds_to_ns(double s);
/* A key argument: a string, or a finite number converted with tostring. */
const char *wq_checkkey(lua_State *L, int idx, const char *fn, size_t *len);
/* The same for an argument named arg (e.g. an option that holds a key). */
const char *wq_checkkeyarg(lua_State *L, int idx, const char *fn, const char *arg, size_t *len);
/*
 * The options table at idx of fn: every key one of names (NULL-terminated);
 * an unknown one is a typo and raises "fn: bad argument 'opts' (unknown
 * option 'x')".
 */
void wq_checkopts(lua_State *L, int idx, const char *fn, const char *const names[]);
/*
 * Encodes the payload at idx (nil, string or JSON-representable table) as
 * JSON text pushed on the stack; raises a named argument error otherwise.
 */
void wq_encode_payload(lua_State *L, int idx, const char *fn);
/* Pushes the decoded payload of JSON text (nil for NULL or null; text that is not JSON as is). */
void wq_push_payload(lua_State *L, const char *json, size_t len);
/* Pushes the outcome wq.fail(msg) makes (a permanent failure). */
void wq_push_fail(lua_State *L, const char *msg);
/* Pushes the outcome wq.retry_in(seconds, msg) makes (seconds: a checked duration). */
void wq_push_retry(lua_State *L, double seconds, const char *msg);

#endif
