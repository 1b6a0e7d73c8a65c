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
/* A number argument that must be finite (and >= 0 when nonneg). */
double wq_checkduration(lua_State *L, int idx, const char *fn, const char *arg, int nonneg);
/* Seconds to ns, saturating; negative and NaN give 0. */
int64_t wq_seconds_to_ns(double s);
/* A key argument: a string, or a number converted with tostring. */
const char *wq_checkkey(lua_State *L, int idx, const char *fn, size_t *len);
/*
 * Encodes the payload at idx (nil, string or JSON-representable table) as
 * JSON text pushed on the stack; raises a named argument error otherwise.
 */
void wq_encode_payload(lua_State *L, int idx, const char *fn);
/* Pushes the decoded payload of JSON text (nil for NULL or null; text that is not JSON as is). */
void wq_push_payload(lua_State *L, const char *json, size_t len);

#endif
