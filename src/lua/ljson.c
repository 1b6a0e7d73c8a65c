/*
 * The JSON codec behind payloads and HTTP bodies: Lua value -> json-c object
 * tree -> JSON text, and back.
 *
 * Each call works inside a lua_pcall, with the json-c tree it builds held in
 * a struct on the caller's C stack: whatever a Lua error interrupts, the
 * caller frees the tree afterwards, and a nested call (a finalizer running
 * during an allocation) has its own. Parsing is host/json.c's, shared with
 * the HTTP API.
 */
#include "lua/ljson.h"

#include "host/json.h"

#include <json-c/json_object.h>
#include <json-c/json_tokener.h>
#include <json-c/linkhash.h>
#include <lauxlib.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TO_STRING_FLAGS (JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)

/* ---- numbers ---- */

/*
 * The shortest of %.15g, %.16g and %.17g that reads back as d (finite), with
 * '.' as the decimal point whatever the locale; returns its length.
 */
static int format_double(char buf[40], double d)
{
    if (d == 0) {
        int n = 0;
        if (signbit(d))
            buf[n++] = '-';
        buf[n++] = '0';
        buf[n] = '\0';
        return n;
    }
    int prec = 15;
    char tmp[40];
    int n = 0;
    for (; prec <= 17; prec++) {
        n = snprintf(tmp, sizeof tmp, "%.*g", prec, d);
        if (prec == 17 || strtod(tmp, NULL) == d)
            break;
    }
    if (n < 0)
        n = 0;
    if (n >= (int)sizeof tmp)
        n = (int)sizeof tmp - 1;
    /* snprintf and strtod agree on the locale's decimal point; JSON wants '.'. */
    int j = 0, dot = 0;
    for (int i = 0; i < n; i++) {
        char c = tmp[i];
        if ((c >= '0' && c <= '9') || c == '-' || c == '+' || c == 'e')
            buf[j++] = c;
        else if (!dot) {
            buf[j++] = '.';
            dot = 1;
        }
    }
    buf[j] = '\0';
    return j;
}

/* ---- encoding ---- */

typedef struct encoder {
    int status;                  /* LUA_OK, LUA_ERRRUN (no JSON form) or LUA_ERRMEM */
    int open[WQ_JSON_MAX_DEPTH]; /* stack indices of the tables being encoded, by depth */
    char err[128];               /* the message when status != LUA_OK */
} encoder;

static int fail(encoder *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(encoder *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err, sizeof e->err, fmt, ap);
    va_end(ap);
    e->status = LUA_ERRRUN;
    return -1;
}

static int oom(encoder *e)
{
    snprintf(e->err, sizeof e->err, "not enough memory");
    e->status = LUA_ERRMEM;
    return -1;
}

static int encode_value(lua_State *L, encoder *e, int idx, int depth, json_object **out);

static int encode_array(lua_State *L, encoder *e, int idx, int depth, lua_Integer n,
                        json_object **out)
{
    if (n > INT_MAX)
        return fail(e, "table too large");
    json_object *arr = json_object_new_array_ext((int)n);
    if (!arr)
        return oom(e);
    for (lua_Integer i = 1; i <= n; i++) {
        json_object *v;
        lua_rawgeti(L, idx, i);
        int r = encode_value(L, e, lua_gettop(L), depth + 1, &v);
        lua_pop(L, 1);
        if (r == 0 && json_object_array_add(arr, v) != 0) {
            json_object_put(v);
            r = oom(e);
        }
        if (r != 0) {
            json_object_put(arr);
            return -1;
        }
    }
    *out = arr;
    return 0;
}

/* The refusal of a number key in a table that is not an array 1..n. */
static int number_key(lua_State *L, encoder *e, int kidx)
{
    char k[40];
    if (lua_isinteger(L, kidx))
        snprintf(k, sizeof k, LUA_INTEGER_FMT, lua_tointeger(L, kidx));
    else
        snprintf(k, sizeof k, "%.14g", (double)lua_tonumber(L, kidx));
    return fail(e,
                "number key %s not allowed: a table is either an array (keys 1..n) or an "
                "object (string keys)",
                k);
}

/*
 * Keys are strings: a number key would come back as a string, and could
 * collide with one ({[1] = "a", ["1"] = "b"}), so it is refused.
 */
static int encode_object(lua_State *L, encoder *e, int idx, int depth, json_object **out)
{
    json_object *obj = json_object_new_object();
    if (!obj)
        return oom(e);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        int r = 0;
        size_t klen = 0;
        const char *k = NULL;
        if (lua_type(L, -2) == LUA_TSTRING) {
            k = lua_tolstring(L, -2, &klen);
            if (memchr(k, '\0', klen))
                r = fail(e, "table key with a NUL byte not allowed");
        } else if (lua_type(L, -2) == LUA_TNUMBER) {
            r = number_key(L, e, -2);
        } else {
            r = fail(e, "table key of type %s not allowed", luaL_typename(L, -2));
        }
        json_object *v = NULL;
        if (r == 0)
            r = encode_value(L, e, lua_gettop(L), depth + 1, &v);
        if (r == 0 && json_object_object_add_ex(obj, k, v, JSON_C_OBJECT_ADD_KEY_IS_NEW)) {
            json_object_put(v);
            r = oom(e);
        }
        if (r != 0) {
            lua_pop(L, 2);
            json_object_put(obj);
            return -1;
        }
        lua_pop(L, 1);
    }
    *out = obj;
    return 0;
}

static int encode_table(lua_State *L, encoder *e, int idx, int depth, json_object **out)
{
    if (depth >= WQ_JSON_MAX_DEPTH) {
        for (int d = 0; d < depth; d++)
            if (lua_rawequal(L, e->open[d], idx))
                return fail(e, "table inside itself (a cycle)");
        return fail(e, "tables nested too deeply (over %d levels)", WQ_JSON_MAX_DEPTH);
    }
    if (!lua_checkstack(L, 4))
        return oom(e);
    e->open[depth] = idx;
    /* An array when the keys are exactly 1..n (n >= 1), else an object. */
    lua_Integer n = 0, max = 0;
    int array = 1;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        lua_Integer k = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : 0;
        if (k < 1) {
            lua_pop(L, 1);
            array = 0;
            break;
        }
        n++;
        if (k > max)
            max = k;
    }
    if (array && n > 0) {
        if (max == n)
            return encode_array(L, e, idx, depth, n, out);
        lua_pushinteger(L, max); /* a hole: name the key past it */
        int r = number_key(L, e, -1);
        lua_pop(L, 1);
        return r;
    }
    return encode_object(L, e, idx, depth, out);
}

/* The json-c object of the value at idx in *out (NULL for null); 0, or -1 with e set. */
static int encode_value(lua_State *L, encoder *e, int idx, int depth, json_object **out)
{
    json_object *o;
    *out = NULL;
    switch (lua_type(L, idx)) {
    case LUA_TSTRING: {
        size_t len;
        const char *s = lua_tolstring(L, idx, &len);
        if (len > INT_MAX)
            return fail(e, "string too long");
        o = json_object_new_string_len(s, (int)len);
        break;
    }
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx)) {
            o = json_object_new_int64(lua_tointeger(L, idx));
        } else {
            double d = lua_tonumber(L, idx);
            if (!isfinite(d))
                return fail(e, "inf and nan not allowed");
            char buf[40];
            int n = format_double(buf, d);
            if (!strpbrk(buf, ".e"))
                memcpy(buf + n, ".0", 3); /* stays a float when read back */
            o = json_object_new_double_s(d, buf);
        }
        break;
    case LUA_TBOOLEAN: o = json_object_new_boolean(lua_toboolean(L, idx)); break;
    case LUA_TNIL: return 0;
    case LUA_TLIGHTUSERDATA:
        if (lua_touserdata(L, idx) == NULL) /* cjson.null */
            return 0;
        return fail(e, "userdata not allowed");
    case LUA_TTABLE: return encode_table(L, e, idx, depth, out);
    default: return fail(e, "%s not allowed", luaL_typename(L, idx));
    }
    if (!o)
        return oom(e);
    *out = o;
    return 0;
}

typedef struct enc_call {
    json_object *root; /* freed by wq_ljson_encode, however encode_p ends */
    encoder e;
} enc_call;

/* (call, value) -> JSON text, or the message with c->e.status set. */
static int encode_p(lua_State *L)
{
    enc_call *c = lua_touserdata(L, 1);
    if (encode_value(L, &c->e, 2, 0, &c->root) == 0) {
        size_t len = 0;
        const char *s = json_object_to_json_string_length(c->root, TO_STRING_FLAGS, &len);
        if (s) {
            lua_pushlstring(L, s, len);
            return 1;
        }
        oom(&c->e);
    }
    lua_pushstring(L, c->e.err);
    return 1;
}

int wq_ljson_encode(lua_State *L, int idx)
{
    enc_call c;
    c.root = NULL;
    c.e.status = LUA_OK;
    idx = lua_absindex(L, idx);
    lua_pushcfunction(L, encode_p);
    lua_pushlightuserdata(L, &c);
    lua_pushvalue(L, idx);
    int status = lua_pcall(L, 2, 1, 0);
    json_object_put(c.root);
    return status != LUA_OK ? status : c.e.status;
}

/* ---- decoding ---- */

/* Pushes the Lua value of o (integers are exact: wq_json_parse widened the big ones). */
static void push_value(lua_State *L, json_object *o)
{
    switch (json_object_get_type(o)) {
    case json_type_null: lua_pushlightuserdata(L, NULL); return; /* cjson.null */
    case json_type_boolean: lua_pushboolean(L, json_object_get_boolean(o)); return;
    case json_type_double: lua_pushnumber(L, json_object_get_double(o)); return;
    case json_type_int: {
        int64_t v = json_object_get_int64(o);
        if (v == INT64_MAX) {
            uint64_t u = json_object_get_uint64(o);
            if (u > (uint64_t)INT64_MAX) {
                lua_pushnumber(L, (lua_Number)u);
                return;
            }
        }
        lua_pushinteger(L, (lua_Integer)v);
        return;
    }
    case json_type_string:
        lua_pushlstring(L, json_object_get_string(o), (size_t)json_object_get_string_len(o));
        return;
    case json_type_array: {
        size_t n = json_object_array_length(o);
        luaL_checkstack(L, 3, "JSON nested too deeply");
        lua_createtable(L, n > INT_MAX ? INT_MAX : (int)n, 0);
        for (size_t i = 0; i < n; i++) {
            push_value(L, json_object_array_get_idx(o, i));
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
        return;
    }
    case json_type_object: {
        luaL_checkstack(L, 3, "JSON nested too deeply");
        lua_createtable(L, 0, json_object_object_length(o));
        for (struct lh_entry *ent = lh_table_head(json_object_get_object(o)); ent;
             ent = lh_entry_next(ent)) {
            /* a C string: wq_json_parse refused keys holding \u0000 */
            lua_pushstring(L, (const char *)lh_entry_k(ent));
            push_value(L, (json_object *)lh_entry_v(ent));
            lua_rawset(L, -3);
        }
        return;
    }
    }
    lua_pushnil(L);
}

void wq_ljson_push(lua_State *L, struct json_object *o)
{
    if (!o)
        lua_pushlightuserdata(L, NULL); /* a reply of null: cjson.null */
    else
        push_value(L, o);
}

typedef struct dec_call {
    const char *json;
    size_t len;
    json_object *root; /* freed by wq_ljson_decode, however decode_p ends */
    int status;
} dec_call;

/* (call) -> the value, or the message with c->status set. */
static int decode_p(lua_State *L)
{
    dec_call *c = lua_touserdata(L, 1);
    const char *why = wq_json_parse(c->json, c->len, &c->root);
    if (why) {
        c->status = strcmp(why, "out of memory") == 0 ? LUA_ERRMEM : LUA_ERRSYNTAX;
        lua_pushfstring(L, "invalid JSON: %s", why);
        return 1;
    }
    if (!c->root)
        lua_pushnil(L);
    else
        push_value(L, c->root);
    return 1;
}

int wq_ljson_decode(lua_State *L, const char *json, size_t len)
{
    dec_call c = {json, len, NULL, LUA_OK};
    lua_pushcfunction(L, decode_p);
    lua_pushlightuserdata(L, &c);
    int status = lua_pcall(L, 1, 1, 0);
    json_object_put(c.root);
    return status != LUA_OK ? status : c.status;
}

int wq_ljson_decode_results(lua_State *L, const char *json, size_t len)
{
    int status = wq_ljson_decode(L, json, len);
    if (status == LUA_ERRMEM)
        return lua_error(L);
    if (status != LUA_OK) {
        lua_pushnil(L);
        lua_insert(L, -2);
        return 2;
    }
    return 1;
}
