/*
 * The `wq` Lua module: registration of everything the scripts see.
 */
#ifndef WQ_LWQ_H
#define WQ_LWQ_H

#include "host/host.h"

/* Builds the wq table: global `wq`, package.loaded.wq, and preloads cjson. */
void wq_lua_open(lua_State *L);
/* Releases what the bindings hold outside Lua (before lua_close). */
void wq_lua_close(wq_host *h);

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

/*
 * JSON text of the value at idx pushed on the stack; 0, or -1 with a message
 * pushed. Numbers are exact (see ljson.h); cjson.null is null.
 */
int wq_json_encode(lua_State *L, int idx);
/* Decoded value of JSON text pushed (JSON null as nil); 0, or -1 with a message pushed. */
int wq_json_decode(lua_State *L, const char *json, size_t len);

#endif
