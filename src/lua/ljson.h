/*
 * Lua values <-> JSON text, through json-c, exactly: what is encoded decodes
 * to an equal value, and what could not is refused. Numbers: integers are
 * 64-bit both ways, and a float is written with the shortest text that reads
 * back as the same double (an integral one keeps a ".0"). Strings may hold
 * any bytes. A table is an array (keys 1..n) or an object (string keys
 * without NUL). JSON null is cjson.null (the light userdata NULL).
 */
#ifndef WQ_LJSON_H
#define WQ_LJSON_H

#include <lua.h>
#include <stddef.h>

/* Tables nested deeper than this are refused (and not decoded). */
#define WQ_JSON_MAX_DEPTH 100

/*
 * Pushes the JSON text of the value at idx and returns LUA_OK. A value that
 * has no exact JSON form pushes a message ("function not allowed", "number
 * key 3 not allowed: ...") and returns LUA_ERRRUN; LUA_ERRMEM when out of
 * memory. Never raises.
 */
int wq_ljson_encode(lua_State *L, int idx);

/*
 * Pushes the value of JSON text (a top-level null as nil, null inside a
 * table as cjson.null) and returns LUA_OK. Text that is not JSON, or that
 * wq_json_parse refuses (a duplicate key, ...), pushes "invalid JSON: why"
 * and returns LUA_ERRSYNTAX; LUA_ERRMEM when out of memory. Never raises.
 */
int wq_ljson_decode(lua_State *L, const char *json, size_t len);

/*
 * The Lua convention over wq_ljson_decode, for a lua_CFunction to return:
 * pushes the value (returns 1), or nil and the message (returns 2); raises
 * when out of memory.
 */
int wq_ljson_decode_results(lua_State *L, const char *json, size_t len);
/*
 * Pushes the Lua value of a parsed JSON value (wq_json_parse's; NULL, a
 * top-level null, as cjson.null). Raises when out of memory or nested too
 * deeply for the stack; o stays the caller's.
 */
struct json_object;
void wq_ljson_push(lua_State *L, struct json_object *o);

#endif
