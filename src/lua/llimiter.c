/*
 * wq.limiter.* and wq.backoff: Lua objects over the engine's rate limiters
 * and wait.Backoff. A composite limiter keeps its children alive through
 * its user value, since the engine only borrows them.
 */
#include "lua/llimiter.h"

#include "engine/backoff.h"
#include "lua/lwq.h"
#include "lua/sched.h"

#include <lauxlib.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

typedef struct llimiter {
    wq_limiter *l;
} llimiter;

static llimiter *push_limiter(lua_State *L, int nuv)
{
    llimiter *ll = lua_newuserdatauv(L, sizeof *ll, nuv);
    ll->l = NULL;
    luaL_setmetatable(L, "wq.Limiter");
    return ll;
}

static double backoff_rand(void *ud);

/*
 * The optional last argument of a constructor: {jitter = fraction}, checked
 * before anything is allocated (it raises). 0 when absent.
 */
static double check_jitter(lua_State *L, int idx, const char *fn)
{
    static const char *const names[] = {"jitter", NULL};
    if (lua_isnoneornil(L, idx))
        return 0;
    if (!lua_istable(L, idx))
        wq_argerror(L, fn, "opts",
                    lua_pushfstring(L, "table expected, got %s", luaL_typename(L, idx)));
    wq_checkopts(L, idx, fn, names);
    double j = 0;
    if (lua_getfield(L, idx, "jitter") != LUA_TNIL) {
        j = wq_checkfinite(L, -1, fn, "jitter", 1);
        if (j > 1)
            wq_argerror(L, fn, "jitter", "a fraction from 0 to 1 expected");
    }
    lua_pop(L, 1);
    return j;
}

/* Gives ll the engine limiter l (wrapped in jitter when asked); raises on OOM. */
static int set_limiter_j(lua_State *L, llimiter *ll, wq_limiter *l, const char *fn, double jitter)
{
    if (l && jitter > 0) {
        wq_limiter *w = wq_limiter_with_jitter(l, jitter, backoff_rand, NULL, 1);
        if (!w)
            wq_limiter_free(l);
        l = w;
    }
    if (!l)
        return luaL_error(L, "%s: out of memory", fn);
    ll->l = l;
    return 1;
}

static int set_limiter(lua_State *L, llimiter *ll, wq_limiter *l, const char *fn)
{
    return set_limiter_j(L, ll, l, fn, 0);
}

wq_limiter *wq_lua_checklimiter(lua_State *L, int idx, const char *fn, const char *arg)
{
    llimiter *ll = luaL_testudata(L, idx, "wq.Limiter");
    if (!ll || !ll->l)
        wq_argerror(L, fn, arg,
                    lua_pushfstring(L, "limiter expected, got %s", luaL_typename(L, idx)));
    return ll->l;
}

static int64_t check_ns(lua_State *L, int idx, const char *fn, const char *arg)
{
    return wq_seconds_to_ns(wq_checkduration(L, idx, fn, arg, 1));
}

static int lim_exponential(lua_State *L)
{
    int64_t base = check_ns(L, 1, "exponential", "base");
    int64_t max = check_ns(L, 2, "exponential", "max");
    double j = check_jitter(L, 3, "exponential");
    llimiter *ll = push_limiter(L, 0);
    return set_limiter_j(L, ll, wq_limiter_exponential(base, max), "exponential", j);
}

static int lim_fast_slow(lua_State *L)
{
    int64_t fast = check_ns(L, 1, "fast_slow", "fast");
    int64_t slow = check_ns(L, 2, "fast_slow", "slow");
    if (!lua_isinteger(L, 3) || lua_tointeger(L, 3) < 0)
        wq_argexpected(L, 3, "fast_slow", "max_fast", "integer >= 0");
    double j = check_jitter(L, 4, "fast_slow");
    llimiter *ll = push_limiter(L, 0);
    return set_limiter_j(L, ll, wq_limiter_fast_slow(fast, slow, lua_tointeger(L, 3)), "fast_slow",
                         j);
}

static int lim_bucket(lua_State *L)
{
    double qps = wq_checkfinite(L, 1, "bucket", "qps", 1);
    if (!lua_isinteger(L, 2) || lua_tointeger(L, 2) < 0)
        wq_argexpected(L, 2, "bucket", "burst", "integer >= 0");
    double j = check_jitter(L, 3, "bucket");
    llimiter *ll = push_limiter(L, 0);
    return set_limiter_j(L, ll, wq_limiter_bucket(&wq_host_of(L)->clock, qps, lua_tointeger(L, 2)),
                         "bucket", j);
}

static int lim_max_of(lua_State *L)
{
    int n = lua_gettop(L);
    for (int i = 1; i <= n; i++) {
        llimiter *c = luaL_testudata(L, i, "wq.Limiter");
        if (!c || !c->l)
            return wq_argerror(L, "max_of", lua_pushfstring(L, "limiter #%d", i),
                               lua_pushfstring(L, "limiter expected, got %s", luaL_typename(L, i)));
    }
    /* The Lua allocations first (they raise): then the C ones cannot leak. */
    llimiter *ll = push_limiter(L, 1);
    lua_createtable(L, n, 0); /* keeps the children alive */
    for (int i = 1; i <= n; i++) {
        lua_pushvalue(L, i);
        lua_rawseti(L, -2, i);
    }
    lua_setiuservalue(L, -2, 1);
    wq_limiter **ls = n ? malloc((size_t)n * sizeof *ls) : NULL;
    if (n && !ls)
        return luaL_error(L, "max_of: out of memory");
    for (int i = 1; i <= n; i++)
        ls[i - 1] = ((llimiter *)lua_touserdata(L, i))->l;
    wq_limiter *l = wq_limiter_max_of(ls, (size_t)n);
    free(ls);
    return set_limiter(L, ll, l, "max_of");
}

static int lim_with_max_wait(lua_State *L)
{
    wq_limiter *child = wq_lua_checklimiter(L, 1, "with_max_wait", "limiter");
    int64_t max = check_ns(L, 2, "with_max_wait", "max");
    double j = check_jitter(L, 3, "with_max_wait");
    llimiter *ll = push_limiter(L, 1);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1);
    return set_limiter_j(L, ll, wq_limiter_with_max_wait(child, max), "with_max_wait", j);
}

/* wq.limiter.with_jitter(limiter, fraction): any limiter's delays spread by +-fraction. */
static int lim_with_jitter(lua_State *L)
{
    wq_limiter *child = wq_lua_checklimiter(L, 1, "with_jitter", "limiter");
    double j = wq_checkfinite(L, 2, "with_jitter", "fraction", 1);
    if (j > 1)
        wq_argerror(L, "with_jitter", "fraction", "a fraction from 0 to 1 expected");
    llimiter *ll = push_limiter(L, 1);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1);
    return set_limiter(L, ll, wq_limiter_with_jitter(child, j, backoff_rand, NULL, 0),
                       "with_jitter");
}

wq_limiter *wq_lua_push_default_limiter(lua_State *L)
{
    llimiter *ll = push_limiter(L, 0);
    set_limiter(L, ll, wq_limiter_default(&wq_host_of(L)->clock), "default");
    return ll->l;
}

static int lim_default(lua_State *L)
{
    double j = check_jitter(L, 1, "default");
    llimiter *ll = push_limiter(L, 0);
    return set_limiter_j(L, ll, wq_limiter_default(&wq_host_of(L)->clock), "default", j);
}

/* self of limiter method fn. */
static wq_limiter *check_self(lua_State *L, const char *fn)
{
    llimiter *ll = wq_checkself(L, "wq.Limiter", "l", "limiter", fn);
    if (!ll->l)
        luaL_error(L, "l:%s: the limiter is freed", fn);
    return ll->l;
}

static int lim_when(lua_State *L)
{
    wq_limiter *l = check_self(L, "when");
    size_t len;
    const char *key = wq_checkkey(L, 2, "when", &len);
    int64_t d;
    if (wq_limiter_when(l, key, len, &d) < 0)
        return luaL_error(L, "when: out of memory");
    lua_pushnumber(L, d == WQ_NEVER ? HUGE_VAL : (double)d / 1e9);
    return 1;
}

static int lim_forget(lua_State *L)
{
    wq_limiter *l = check_self(L, "forget");
    size_t len;
    const char *key = wq_checkkey(L, 2, "forget", &len);
    wq_limiter_forget(l, key, len);
    return 0;
}

static int lim_num_requeues(lua_State *L)
{
    wq_limiter *l = check_self(L, "num_requeues");
    size_t len;
    const char *key = wq_checkkey(L, 2, "num_requeues", &len);
    lua_pushinteger(L, wq_limiter_num_requeues(l, key, len));
    return 1;
}

static int lim_gc(lua_State *L)
{
    llimiter *ll = luaL_checkudata(L, 1, "wq.Limiter");
    wq_limiter_free(ll->l);
    ll->l = NULL;
    return 0;
}

/* ---- wq.backoff ---- */

/*
 * Jitter draws from a file-local xoshiro256** seeded once per process from
 * getrandom(2), so two runs never share their "random" delays. libc's
 * rand() is left alone: it is unseeded (the same sequence in every process)
 * and belongs to whoever else calls srand().
 */
static uint64_t rng[4];
static int rng_seeded;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static void rng_seed(void)
{
    uint64_t seed;
    /* GRND_NONBLOCK: early at boot, fall back rather than hang the runner. */
    if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != (ssize_t)sizeof seed)
        seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    /* splitmix64 spreads any seed (even 0) into a non-zero state. */
    for (int i = 0; i < 4; i++)
        rng[i] = splitmix64(&seed);
    rng_seeded = 1;
}

static double backoff_rand(void *ud)
{
    (void)ud;
    if (!rng_seeded)
        rng_seed();
    uint64_t r = rotl(rng[1] * 5, 7) * 9;
    uint64_t t = rng[1] << 17;
    rng[2] ^= rng[0];
    rng[3] ^= rng[1];
    rng[1] ^= rng[2];
    rng[0] ^= rng[3];
    rng[2] ^= t;
    rng[3] = rotl(rng[3], 45);
    /* The top 53 bits as a double in [0, 1). */
    return (double)(r >> 11) * 0x1.0p-53;
}

/* Field name of wq.backoff's opts: a duration, or a plain number >= 0 (factor, jitter). */
static double opt_field(lua_State *L, const char *name, int duration)
{
    double v = 0;
    if (lua_getfield(L, 1, name) != LUA_TNIL)
        v = duration ? wq_checkduration(L, -1, "backoff", name, 1)
                     : wq_checkfinite(L, -1, "backoff", name, 1);
    lua_pop(L, 1);
    return v;
}

static const char *const backoff_opts[] = {"duration", "factor", "jitter", "steps", "cap", NULL};

static int backoff_new(lua_State *L)
{
    if (!lua_istable(L, 1))
        wq_argerror(L, "backoff", "opts",
                    lua_pushfstring(L, "table expected, got %s", luaL_typename(L, 1)));
    wq_checkopts(L, 1, "backoff", backoff_opts);
    wq_backoff b = {0};
    b.duration_ns = wq_seconds_to_ns(opt_field(L, "duration", 1));
    b.factor = opt_field(L, "factor", 0);
    b.jitter = opt_field(L, "jitter", 0);
    b.cap_ns = wq_seconds_to_ns(opt_field(L, "cap", 1));
    if (lua_getfield(L, 1, "steps") != LUA_TNIL) {
        if (!lua_isinteger(L, -1))
            wq_argexpected(L, -1, "backoff", "steps", "integer");
        b.steps = lua_tointeger(L, -1);
        if (b.steps < 0)
            wq_argerror(L, "backoff", "steps", "must be >= 0");
    }
    lua_pop(L, 1);
    b.rand = backoff_rand;
    wq_backoff *ub = lua_newuserdatauv(L, sizeof *ub, 0);
    *ub = b;
    luaL_setmetatable(L, "wq.Backoff");
    return 1;
}

static int backoff_step(lua_State *L)
{
    wq_backoff *b = wq_checkself(L, "wq.Backoff", "b", "backoff", "step");
    lua_pushnumber(L, (double)wq_backoff_step(b) / 1e9);
    return 1;
}

static int backoff_index(lua_State *L)
{
    wq_backoff *b = luaL_checkudata(L, 1, "wq.Backoff");
    const char *k = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "";
    if (!strcmp(k, "step"))
        lua_pushcfunction(L, backoff_step);
    else if (!strcmp(k, "duration"))
        lua_pushnumber(L, (double)b->duration_ns / 1e9);
    else if (!strcmp(k, "steps"))
        lua_pushinteger(L, b->steps);
    else
        lua_pushnil(L);
    return 1;
}

static const luaL_Reg limiter_funcs[] = {{"exponential", lim_exponential},
                                         {"fast_slow", lim_fast_slow},
                                         {"bucket", lim_bucket},
                                         {"max_of", lim_max_of},
                                         {"with_max_wait", lim_with_max_wait},
                                         {"with_jitter", lim_with_jitter},
                                         {"default", lim_default},
                                         {NULL, NULL}};

static const luaL_Reg limiter_methods[] = {
    {"when", lim_when}, {"forget", lim_forget}, {"num_requeues", lim_num_requeues}, {NULL, NULL}};

void wq_lua_open_limiter(lua_State *L)
{
    luaL_newmetatable(L, "wq.Limiter");
    luaL_newlib(L, limiter_methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, lim_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    luaL_newmetatable(L, "wq.Backoff");
    lua_pushcfunction(L, backoff_index);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
    luaL_newlib(L, limiter_funcs);
    lua_setfield(L, -2, "limiter");
    lua_pushcfunction(L, backoff_new);
    lua_setfield(L, -2, "backoff");
}
