/*
 * The JSON codec behind payloads and HTTP bodies: Lua value -> json-c object
 * tree -> JSON text, and back.
 *
 * Each call works inside a lua_pcall, with the json-c tree it builds held in
 * a struct on the caller's C stack: whatever a Lua error interrupts, the
 * caller frees the tree afterwards, and a nested call (a finalizer running
 * during an allocation) has its own. The parser (json_tokener) is made once
 * per Lua state and reused; it is only used by pure C code, never across a
 * Lua call.
 */
#include "lua/ljson.h"

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
    int status;    /* LUA_OK, LUA_ERRRUN (no JSON form) or LUA_ERRMEM */
    char err[112]; /* the message when status != LUA_OK */
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

static int encode_object(lua_State *L, encoder *e, int idx, int depth, json_object **out)
{
    json_object *obj = json_object_new_object();
    if (!obj)
        return oom(e);
    /* String keys are unique; once a number key is in, an equal key may follow. */
    int check_dups = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        char kbuf[40];
        const char *k = kbuf;
        size_t klen = 0;
        int r = 0;
        if (lua_type(L, -2) == LUA_TSTRING) {
            k = lua_tolstring(L, -2, &klen);
        } else if (lua_isinteger(L, -2)) {
            klen = (size_t)snprintf(kbuf, sizeof kbuf, LUA_INTEGER_FMT, lua_tointeger(L, -2));
            check_dups = 1;
        } else if (lua_type(L, -2) == LUA_TNUMBER) {
            double d = lua_tonumber(L, -2);
            if (isfinite(d))
                klen = (size_t)format_double(kbuf, d);
            else
                r = fail(e, "inf and nan not allowed");
            check_dups = 1;
        } else {
            r = fail(e, "table key of type %s not allowed", luaL_typename(L, -2));
        }
        if (r == 0 && memchr(k, '\0', klen))
            r = fail(e, "table key with a NUL byte not allowed");
        json_object *v = NULL;
        if (r == 0)
            r = encode_value(L, e, lua_gettop(L), depth + 1, &v);
        if (r == 0 &&
            json_object_object_add_ex(obj, k, v, check_dups ? 0 : JSON_C_OBJECT_ADD_KEY_IS_NEW)) {
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
    if (depth >= WQ_JSON_MAX_DEPTH)
        return fail(e, "tables nested too deeply (over %d levels)", WQ_JSON_MAX_DEPTH);
    if (!lua_checkstack(L, 4))
        return oom(e);
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
    if (array && n > 0 && max == n)
        return encode_array(L, e, idx, depth, n, out);
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

static char tokener_key;

static int tokener_gc(lua_State *L)
{
    json_tokener **t = lua_touserdata(L, 1);
    if (*t)
        json_tokener_free(*t);
    *t = NULL;
    return 0;
}

/* The Lua state's parser, made on first use. */
static json_tokener *tokener(lua_State *L)
{
    json_tokener **t;
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &tokener_key) == LUA_TUSERDATA) {
        t = lua_touserdata(L, -1);
        lua_pop(L, 1);
        return *t;
    }
    lua_pop(L, 1);
    t = lua_newuserdatauv(L, sizeof *t, 0);
    *t = NULL;
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, tokener_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    *t = json_tokener_new_ex(WQ_JSON_MAX_DEPTH + 1); /* + 1: counts from 0 */
    if (!*t)
        luaL_error(L, "not enough memory");
    /* RFC 8259 syntax: no trailing commas, comments, single quotes, True... */
    json_tokener_set_flags(*t, JSON_TOKENER_STRICT);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &tokener_key);
    return *t;
}

/*
 * Parses the whole text into *out (NULL for null): NULL, or why the text is
 * not JSON. Pure C: the tokener is reset before it returns.
 */
static const char *parse(json_tokener *tok, const char *s, size_t len, json_object **out)
{
    *out = NULL;
    if (len >= INT_MAX)
        return "text too long";
    json_object *o = json_tokener_parse_ex(tok, s, (int)len);
    enum json_tokener_error err = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    if (err == json_tokener_continue) {
        /* A number, true, false or null ends the text: a NUL byte ends it. */
        o = json_tokener_parse_ex(tok, "", 1);
        err = json_tokener_get_error(tok);
        end = len;
    }
    json_tokener_reset(tok);
    if (err != json_tokener_success) {
        json_object_put(o);
        return json_tokener_error_desc(err);
    }
    for (; end < len; end++) {
        char c = s[end];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
            json_object_put(o);
            return "unexpected data after the value";
        }
    }
    *out = o;
    return NULL;
}

/* Whether the integer literal s[0..n) (an optional '-', digits) is outside int64. */
static int int_overflows(const char *s, size_t n)
{
    int neg = n > 0 && s[0] == '-';
    s += neg;
    n -= (size_t)neg;
    while (n > 1 && s[0] == '0') {
        s++;
        n--;
    }
    if (n != 19)
        return n > 19;
    return memcmp(s, neg ? "9223372036854775808" : "9223372036854775807", 19) > 0;
}

/*
 * json-c saturates integer literals outside int64 (to INT64_MIN, or to
 * UINT64_MAX above it). Counts those literals outside strings (the parser is
 * strict: there are no comments or single quotes to skip), and when out is
 * not NULL writes the text there with ".0" after each, so that they parse as
 * the nearest double. out needs len + 2 * count bytes.
 */
static size_t widen_big_ints(const char *s, size_t len, char *out)
{
    size_t i = 0, copied = 0, o = 0, count = 0;
    while (i < len) {
        char c = s[i];
        if (c == '"') {
            for (i++; i < len && s[i] != '"'; i++)
                if (s[i] == '\\')
                    i++;
            i++;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t j = i + (c == '-');
            while (j < len && s[j] >= '0' && s[j] <= '9')
                j++;
            if (j < len && (s[j] == '.' || s[j] == 'e' || s[j] == 'E')) {
                while (j < len && ((s[j] >= '0' && s[j] <= '9') || s[j] == '.' || s[j] == 'e' ||
                                   s[j] == 'E' || s[j] == '+' || s[j] == '-'))
                    j++;
            } else if (int_overflows(s + i, j - i)) {
                if (out) {
                    memcpy(out + o, s + copied, j - copied);
                    o += j - copied;
                    memcpy(out + o, ".0", 2);
                    o += 2;
                }
                copied = j;
                count++;
            }
            i = j;
        } else {
            i++;
        }
    }
    if (out)
        memcpy(out + o, s + copied, len - copied);
    return count;
}

/*
 * Pushes the Lua value of o; returns 1 instead (with values left on the
 * stack) when an integer may have been saturated by json-c and exact is 0.
 */
static int push_value(lua_State *L, json_object *o, int exact)
{
    switch (json_object_get_type(o)) {
    case json_type_null: lua_pushlightuserdata(L, NULL); return 0; /* cjson.null */
    case json_type_boolean: lua_pushboolean(L, json_object_get_boolean(o)); return 0;
    case json_type_double: lua_pushnumber(L, json_object_get_double(o)); return 0;
    case json_type_int: {
        int64_t v = json_object_get_int64(o);
        if (v == INT64_MAX) {
            uint64_t u = json_object_get_uint64(o);
            if (u > (uint64_t)INT64_MAX) {
                if (u == UINT64_MAX && !exact)
                    return 1;
                lua_pushnumber(L, (lua_Number)u);
                return 0;
            }
        } else if (v == INT64_MIN && !exact) {
            return 1;
        }
        lua_pushinteger(L, (lua_Integer)v);
        return 0;
    }
    case json_type_string:
        lua_pushlstring(L, json_object_get_string(o), (size_t)json_object_get_string_len(o));
        return 0;
    case json_type_array: {
        size_t n = json_object_array_length(o);
        luaL_checkstack(L, 3, "JSON nested too deeply");
        lua_createtable(L, n > INT_MAX ? INT_MAX : (int)n, 0);
        for (size_t i = 0; i < n; i++) {
            if (push_value(L, json_object_array_get_idx(o, i), exact))
                return 1;
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
        return 0;
    }
    case json_type_object: {
        luaL_checkstack(L, 3, "JSON nested too deeply");
        lua_createtable(L, 0, json_object_object_length(o));
        for (struct lh_entry *ent = lh_table_head(json_object_get_object(o)); ent;
             ent = lh_entry_next(ent)) {
            lua_pushstring(L, (const char *)lh_entry_k(ent));
            if (push_value(L, (json_object *)lh_entry_v(ent), exact))
                return 1;
            lua_rawset(L, -3);
        }
        return 0;
    }
    }
    lua_pushnil(L);
    return 0;
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
    json_tokener *tok = tokener(L);
    const char *why = parse(tok, c->json, c->len, &c->root);
    if (why) {
        c->status = LUA_ERRSYNTAX;
        lua_pushfstring(L, "invalid JSON: %s", why);
        return 1;
    }
    if (!c->root) {
        lua_pushnil(L);
        return 1;
    }
    int top = lua_gettop(L);
    if (push_value(L, c->root, 0) == 0)
        return 1;
    /* An integer literal may lie outside int64: make those doubles, parse again. */
    lua_settop(L, top);
    size_t count = widen_big_ints(c->json, c->len, NULL);
    if (count > 0) {
        size_t n = c->len + 2 * count;
        char *wide = malloc(n);
        if (!wide) {
            c->status = LUA_ERRMEM;
            lua_pushliteral(L, "not enough memory");
            return 1;
        }
        widen_big_ints(c->json, c->len, wide);
        json_object_put(c->root);
        why = parse(tok, wide, n, &c->root);
        free(wide);
        if (why) {
            c->status = LUA_ERRSYNTAX;
            lua_pushfstring(L, "invalid JSON: %s", why);
            return 1;
        }
    }
    push_value(L, c->root, 1);
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
