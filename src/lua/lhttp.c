/*
 * wq.http, the Lua half: checks the request table, builds the URL and the
 * header lines, hands the transfer to the host's HTTP client
 * (host/httpc.c) and waits. As with wq.exec, the response table is built
 * in the continuation, inside the task, never from the loop's callback; a
 * handler's timeout or a cancel abandons the transfer at once.
 */
#include "lua/lhttp.h"

#include "host/httpc.h"
#include "lua/ljson.h"
#include "lua/lwq.h"
#include "lua/sched.h"

#include <curl/curl.h>
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_TIMEOUT 30.0         /* seconds, the whole request */
#define DEFAULT_CONNECT_TIMEOUT 10.0 /* seconds */
#define DEFAULT_MAX_BODY (16 << 20)  /* bytes */
#define REDIRECTS_ON 10              /* redirects = true */

typedef struct box {
    wq_httpc_req *r;
} box;

static int box_gc(lua_State *L)
{
    box *b = lua_touserdata(L, 1);
    if (b->r) {
        wq_httpc_abandon(b->r);
        b->r = NULL;
    }
    return 0;
}

static void on_ended(void *ud, wq_httpc_req *r)
{
    (void)r;
    wq_task_wake((wq_task *)ud, 0);
}

static void http_cancel(wq_task *t)
{
    box *b = t->wait;
    if (b && b->r) {
        wq_httpc_abandon(b->r);
        b->r = NULL;
    }
}

static int argerr(lua_State *L, const char *arg, const char *msg)
{
    return wq_argerror(L, "http", arg, msg);
}

/* ---- the response ---- */

/* r:json(): the body decoded, or nil and a message. */
static int response_json(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_getfield(L, 1, "body");
    size_t len;
    const char *body = lua_tolstring(L, -1, &len);
    if (!body)
        return luaL_error(L, "response:json: the response has no body string");
    return wq_ljson_decode_results(L, body, len);
}

static int http_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    wq_task_check_interrupt(L, wq_task_of(L));
    box *b = (box *)ctx;
    const wq_httpc_result *res = wq_httpc_output(b->r);
    if (res->error) {
        lua_pushnil(L);
        lua_pushfstring(L, "http: %s: %s", lua_tostring(L, 5), res->error); /* 5: "GET url" */
        wq_httpc_free(b->r);
        b->r = NULL;
        return 2;
    }
    lua_createtable(L, 0, 4);
    luaL_setmetatable(L, "wq.HttpResponse");
    lua_pushinteger(L, res->status);
    lua_setfield(L, -2, "status");
    lua_pushlstring(L, res->body, res->bodylen);
    lua_setfield(L, -2, "body");
    lua_pushstring(L, res->url);
    lua_setfield(L, -2, "url");
    /* Names lower-cased; a repeated header's values joined with ", " (RFC 9110 5.3). */
    lua_createtable(L, 0, (int)(res->nheaders < 64 ? res->nheaders : 64));
    for (size_t i = 0; i < res->nheaders; i++) {
        const wq_httpc_header *hd = &res->headers[i];
        if (lua_getfield(L, -1, hd->name) == LUA_TSTRING) {
            lua_pushfstring(L, "%s, %s", lua_tostring(L, -1), hd->value);
            lua_remove(L, -2);
        } else {
            lua_pop(L, 1);
            lua_pushstring(L, hd->value);
        }
        lua_setfield(L, -2, hd->name);
    }
    lua_setfield(L, -2, "headers");
    wq_httpc_free(b->r);
    b->r = NULL;
    return 1;
}

/* ---- the request ---- */

static int is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int is_token(const char *s, size_t len)
{
    if (len == 0)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!is_tchar((unsigned char)s[i]))
            return 0;
    return 1;
}

/* The method: a token, upper-cased as given ("GET" when absent). */
static const char *check_method(lua_State *L, int req)
{
    if (lua_getfield(L, req, "method") == LUA_TNIL) {
        lua_pop(L, 1);
        return "GET";
    }
    /* The type first: lua_tolstring would turn a number into a string. */
    size_t len = 0;
    const char *m = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &len) : NULL;
    if (!m || !is_token(m, len))
        argerr(L, "method", "a method name such as \"GET\" or \"POST\" expected");
    for (size_t i = 0; i < len; i++)
        if (m[i] >= 'a' && m[i] <= 'z')
            argerr(L, "method", lua_pushfstring(L, "'%s' must be upper case", m));
    return m; /* anchored in the request table */
}

/* Appends "name=value" (both percent-encoded) to the URL's query. */
static void add_query_pair(lua_State *L, CURLU *u, const char *name, size_t nlen, int vidx)
{
    int t = lua_type(L, vidx);
    if (t != LUA_TSTRING && t != LUA_TNUMBER)
        argerr(L, "query",
               lua_pushfstring(L, "the value of '%s' must be a string or a number, got %s", name,
                               luaL_typename(L, vidx)));
    size_t vlen;
    lua_pushvalue(L, vidx);
    const char *v = lua_tolstring(L, -1, &vlen);
    char *en = curl_easy_escape(NULL, name, (int)nlen);
    char *ev = curl_easy_escape(NULL, v, (int)vlen);
    lua_pop(L, 1);
    if (!en || !ev) {
        curl_free(en);
        curl_free(ev);
        luaL_error(L, "http: out of memory");
    }
    lua_pushfstring(L, "%s=%s", en, ev);
    curl_free(en);
    curl_free(ev);
    CURLUcode uc = curl_url_set(u, CURLUPART_QUERY, lua_tostring(L, -1), CURLU_APPENDQUERY);
    lua_pop(L, 1);
    if (uc != CURLUE_OK)
        argerr(L, "query", curl_url_strerror(uc));
}

/* query = {name = value or {value, ...}}: appended in name order (reproducible URLs). */
static void add_query(lua_State *L, CURLU *u, int qidx)
{
    if (!lua_istable(L, qidx))
        argerr(L, "query", lua_pushfstring(L, "table expected, got %s", luaL_typename(L, qidx)));
    lua_newtable(L); /* the names, sorted */
    int names = lua_gettop(L);
    int n = 0;
    lua_pushnil(L);
    while (lua_next(L, qidx)) {
        if (lua_type(L, -2) != LUA_TSTRING)
            argerr(L, "query", "names must be strings");
        lua_pop(L, 1);
        lua_pushvalue(L, -1);
        lua_rawseti(L, names, ++n);
    }
    lua_getglobal(L, "table");
    lua_getfield(L, -1, "sort");
    lua_pushvalue(L, names);
    lua_call(L, 1, 0);
    lua_pop(L, 1);
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, names, i);
        size_t nlen;
        const char *name = lua_tolstring(L, -1, &nlen);
        lua_pushvalue(L, -1);
        lua_rawget(L, qidx);
        int v = lua_gettop(L);
        if (lua_istable(L, v)) {
            lua_Integer len = (lua_Integer)lua_rawlen(L, v);
            for (lua_Integer j = 1; j <= len; j++) {
                lua_rawgeti(L, v, j);
                add_query_pair(L, u, name, nlen, lua_gettop(L));
                lua_pop(L, 1);
            }
        } else {
            add_query_pair(L, u, name, nlen, v);
        }
        lua_pop(L, 2);
    }
    lua_pop(L, 1);
}

/* The URL with the query added, pushed; an http:// or https:// URL or an argument error. */
static const char *check_url(lua_State *L, int req)
{
    if (lua_getfield(L, req, "url") != LUA_TSTRING)
        argerr(L, "url", lua_pushfstring(L, "string expected, got %s", luaL_typename(L, -1)));
    size_t len;
    const char *s = lua_tolstring(L, -1, &len);
    if (memchr(s, '\0', len))
        argerr(L, "url", "contains a NUL byte");
    CURLU *u = curl_url();
    if (!u)
        luaL_error(L, "http: out of memory");
    /* A userdata that frees u if an argument error unwinds us. */
    CURLU **anchor = lua_newuserdatauv(L, sizeof *anchor, 0);
    *anchor = u;
    luaL_setmetatable(L, "wq.HttpUrl");
    CURLUcode uc = curl_url_set(u, CURLUPART_URL, s, 0);
    if (uc != CURLUE_OK)
        argerr(L, "url",
               lua_pushfstring(L, "'%s': %s (an absolute http:// or https:// URL expected)", s,
                               curl_url_strerror(uc)));
    char *scheme = NULL;
    if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0)) {
        lua_pushfstring(L, "'%s': scheme must be http or https", s);
        curl_free(scheme);
        argerr(L, "url", lua_tostring(L, -1));
    }
    curl_free(scheme);
    if (lua_getfield(L, req, "query") != LUA_TNIL)
        add_query(L, u, lua_gettop(L));
    lua_pop(L, 1);
    char *full = NULL;
    if (curl_url_get(u, CURLUPART_URL, &full, 0) != CURLUE_OK)
        luaL_error(L, "http: out of memory");
    lua_pushstring(L, full);
    curl_free(full);
    lua_replace(L, -3); /* over the given url; the anchor stays until the call returns */
    return lua_tostring(L, -2);
}

static int url_gc(lua_State *L)
{
    CURLU **u = lua_touserdata(L, 1);
    curl_url_cleanup(*u);
    *u = NULL;
    return 0;
}

/*
 * headers = {Name = "value"}: "Name: value" lines in a table pushed on the
 * stack, with content_type added when the caller gave none. Returns the count.
 */
static size_t check_headers(lua_State *L, int req, const char *content_type, int *lines)
{
    lua_newtable(L);
    *lines = lua_gettop(L);
    size_t n = 0;
    int has_type = 0;
    if (lua_getfield(L, req, "headers") != LUA_TNIL) {
        int hidx = lua_gettop(L);
        if (!lua_istable(L, hidx))
            argerr(L, "headers",
                   lua_pushfstring(L, "table expected, got %s", luaL_typename(L, hidx)));
        lua_pushnil(L);
        while (lua_next(L, hidx)) {
            size_t nlen, vlen;
            if (lua_type(L, -2) != LUA_TSTRING)
                argerr(L, "headers", "names must be strings");
            const char *name = lua_tolstring(L, -2, &nlen);
            if (!is_token(name, nlen))
                argerr(L, "headers", lua_pushfstring(L, "'%s' is not a header name", name));
            if (lua_type(L, -1) != LUA_TSTRING)
                argerr(L, "headers",
                       lua_pushfstring(L, "the value of '%s' must be a string, got %s", name,
                                       luaL_typename(L, -1)));
            const char *v = lua_tolstring(L, -1, &vlen);
            if (strcspn(v, "\r\n") < vlen || memchr(v, '\0', vlen))
                argerr(L, "headers",
                       lua_pushfstring(L, "the value of '%s' contains a line break or NUL", name));
            has_type |= strcasecmp(name, "content-type") == 0;
            /* libcurl sends an empty header for "Name;" ("Name:" would remove it). */
            if (vlen == 0)
                lua_pushfstring(L, "%s;", name);
            else
                lua_pushfstring(L, "%s: %s", name, v);
            lua_rawseti(L, *lines, (lua_Integer)++n);
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    if (content_type && !has_type) {
        lua_pushfstring(L, "Content-Type: %s", content_type);
        lua_rawseti(L, *lines, (lua_Integer)++n);
    }
    return n;
}

static long to_ms(double s)
{
    double ms = s * 1000.0;
    if (ms > 0 && ms < 1)
        return 1;
    return ms > 2e9 ? 2000000000L : (long)ms;
}

static const char *const http_opts[] = {
    "method",          "url",       "headers", "body",     "query", "timeout",
    "connect_timeout", "redirects", "verify",  "max_body", NULL};

static int http_lua(lua_State *L)
{
    lua_settop(L, 1);
    if (!lua_istable(L, 1))
        argerr(L, "request", lua_pushfstring(L, "table expected, got %s", luaL_typename(L, 1)));
    wq_checkopts(L, 1, "http", http_opts);
    wq_httpc_spec spec = {0};
    spec.method = check_method(L, 1); /* 2 */
    lua_settop(L, 1);
    lua_pushstring(L, spec.method); /* 2: the method */
    spec.method = lua_tostring(L, 2);
    spec.url = check_url(L, 1);                         /* 3: url, 4: anchor */
    lua_pushfstring(L, "%s %s", spec.method, spec.url); /* 5: what, for messages */

    const char *content_type = NULL;
    switch (lua_getfield(L, 1, "body")) { /* 6: the body */
    case LUA_TNIL: break;
    case LUA_TSTRING: spec.body = lua_tolstring(L, -1, &spec.bodylen); break;
    case LUA_TTABLE: {
        int rc = wq_ljson_encode(L, 6);
        if (rc == LUA_ERRMEM)
            return lua_error(L);
        if (rc != LUA_OK)
            argerr(L, "body", lua_tostring(L, -1));
        lua_replace(L, 6);
        spec.body = lua_tolstring(L, 6, &spec.bodylen);
        content_type = "application/json";
        break;
    }
    default:
        argerr(L, "body",
               lua_pushfstring(L, "string or table expected, got %s", luaL_typename(L, -1)));
    }
    if (spec.body && strcmp(spec.method, "HEAD") == 0)
        argerr(L, "body", "a HEAD request has no body");

    double timeout = DEFAULT_TIMEOUT, connect = DEFAULT_CONNECT_TIMEOUT;
    if (lua_getfield(L, 1, "timeout") != LUA_TNIL)
        timeout = wq_checkduration(L, -1, "http", "timeout", 1);
    if (lua_getfield(L, 1, "connect_timeout") != LUA_TNIL)
        connect = wq_checkduration(L, -1, "http", "connect_timeout", 1);
    spec.timeout_ms = to_ms(timeout);
    spec.connect_timeout_ms = to_ms(connect);
    switch (lua_getfield(L, 1, "redirects")) {
    case LUA_TNIL: break;
    case LUA_TBOOLEAN: spec.max_redirects = lua_toboolean(L, -1) ? REDIRECTS_ON : 0; break;
    default:
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 0 || lua_tointeger(L, -1) > 1000)
            argerr(L, "redirects", "a boolean or a count from 0 to 1000 expected");
        spec.max_redirects = (long)lua_tointeger(L, -1);
    }
    if (lua_getfield(L, 1, "verify") != LUA_TNIL) {
        if (!lua_isboolean(L, -1))
            argerr(L, "verify", "boolean expected");
        spec.insecure = !lua_toboolean(L, -1);
    }
    spec.max_body = DEFAULT_MAX_BODY;
    if (lua_getfield(L, 1, "max_body") != LUA_TNIL) {
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 0)
            argerr(L, "max_body", "a byte count (integer >= 0) expected");
        spec.max_body = (size_t)lua_tointeger(L, -1);
    }
    lua_settop(L, 6);
    int lines;
    spec.nheaders = check_headers(L, 1, content_type, &lines); /* 7: the lines */
    const char **hv = lua_newuserdatauv(L, (spec.nheaders + 1) * sizeof *hv, 0);
    for (size_t i = 0; i < spec.nheaders; i++) {
        lua_rawgeti(L, lines, (lua_Integer)i + 1);
        hv[i] = lua_tostring(L, -1); /* anchored in the lines table */
        lua_pop(L, 1);
    }
    spec.headers = hv;

    wq_task *t = wq_task_require(L, "http");
    box *b = lua_newuserdatauv(L, sizeof *b, 0);
    b->r = NULL;
    luaL_setmetatable(L, "wq.Http");
    char msg[256];
    if (wq_httpc_start(t->host, &spec, on_ended, t, &b->r, msg, sizeof msg) < 0) {
        lua_pushnil(L);
        lua_pushfstring(L, "http: %s: %s", lua_tostring(L, 5), msg);
        return 2;
    }
    /* The stack stays as it is while the task waits (http_k reads 5). */
    t->wait = b;
    return wq_task_wait(L, t, http_cancel, (lua_KContext)b, http_k);
}

void wq_lua_open_http(lua_State *L)
{
    luaL_newmetatable(L, "wq.Http");
    lua_pushcfunction(L, box_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    luaL_newmetatable(L, "wq.HttpUrl");
    lua_pushcfunction(L, url_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    luaL_newmetatable(L, "wq.HttpResponse");
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, response_json);
    lua_setfield(L, -2, "json");
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
    lua_pushcfunction(L, http_lua);
    lua_setfield(L, -2, "http");
}
