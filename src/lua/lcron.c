/*
 * Schedules (SPEC 7.3): q:schedule(name, spec [, opts]) adds opts.key with
 * opts.payload to the queue each time spec (engine/cron.c) fires. Each
 * schedule is a weak host timer (a pending schedule alone does not keep a
 * finished script alive) at its next time, converted from wall-clock
 * seconds to the host clock when armed. The add is an ordinary add, so
 * dedup keeps a slow job from piling up. A firing that comes late (the
 * loop was held, the process was down) adds once and the next time is
 * counted from now: catch_up = "once"; with catch_up = "skip", a time
 * missed while the process was down is not added at all. With a database
 * shared by runners (PostgreSQL), the database decides: each runner that
 * defines the schedule keeps its own timer, and a firing is a
 * compare-and-set on the schedule's row, so each time is added once,
 * by the first runner to fire (wq_bq_schedule_fire).
 */
#include "lua/lcron.h"

#include "engine/cron.h"
#include "host/timer.h"
#include "lua/lqueue.h"
#include "lua/lwq.h"
#include "store/backend.h"

#include <lauxlib.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct lcron {
    lqueue *lq;
    char *name, *spec, *key, *payload; /* payload: JSON text or NULL */
    size_t keylen, paylen;
    wq_cron *cron;
    int local;   /* opts.tz == "local" */
    int skip;    /* opts.catch_up == "skip" */
    double next; /* wall clock, -1 when it never fires again */
    double last; /* wall clock of the last add, 0 before the first */
    int defined; /* by this run's script (q:schedule); 0: restored from the file only */
    uint64_t timer;
    lcron *nextc;
};

static void free_one(lcron *c)
{
    wq_timer_stop(c->lq->host, c->timer);
    wq_cron_free(c->cron);
    free(c->name);
    free(c->spec);
    free(c->key);
    free(c->payload);
    free(c);
}

static double wall_now(const wq_host *h)
{
    return wq_host_unix(h, wq_host_now(h));
}

static void fire(wq_host *h, void *data, uint64_t id);

static void arm(lcron *c)
{
    wq_host *h = c->lq->host;
    wq_timer_stop(h, c->timer);
    c->timer = 0;
    if (c->next < 0)
        return;
    double in = c->next - wall_now(h);
    c->timer = wq_timer_start_weak(h, wq_add_sat(wq_host_now(h), wq_seconds_to_ns(in)), fire, c);
}

/* The schedule as a row of the schedules table (strings borrowed from c). */
static wq_schedule_row row_of(const lcron *c)
{
    return (wq_schedule_row){.name = c->name,
                             .spec = c->spec,
                             .key = c->key,
                             .keylen = c->keylen,
                             .payload = c->payload,
                             .paylen = c->paylen,
                             .tz = c->local ? WQ_SCHED_LOCAL : WQ_SCHED_UTC,
                             .catch_up = c->skip ? WQ_SCHED_CATCH_UP_SKIP : WQ_SCHED_CATCH_UP_ONCE,
                             .next_at = c->next > 0 ? c->next : 0,
                             .last_at = c->last};
}

static void persist(const lcron *c)
{
    if (!c->lq->bq)
        return;
    wq_schedule_row row = row_of(c);
    wq_bq_schedule_put(c->lq->bq, &row);
}

/* The schedule's time came: one add, then the next time after now. */
static void fire(wq_host *h, void *data, uint64_t id)
{
    (void)id;
    lcron *c = data;
    c->timer = 0;
    double now = wall_now(h);
    if (c->next > now + 0.0005) { /* woken early (clock adjustment): wait again */
        arm(c);
        return;
    }
    double next = wq_cron_next(c->cron, now, c->local);
    wq_schedule_row row = {.name = c->name, .last_at = c->next, .next_at = next > 0 ? next : 0};
    /* A database shared by runners adds it once for all of them (the first to fire). */
    int shared = c->lq->bq && c->lq->q && !wq_queue_shutting_down(c->lq->q) &&
                 wq_bq_schedule_fire(c->lq->bq, &row) != WQ_BACKEND_LOCAL;
    wq_ext_item it = {
        .key = c->key, .keylen = c->keylen, .payload = c->payload, .paylen = c->paylen};
    if (!shared && c->lq->q && !wq_queue_shutting_down(c->lq->q)) {
        const wq_hqueue *hq = wq_host_find_queue(h, c->lq->name);
        if (hq && hq->ops->add(hq->q, &it) < 0)
            wq_host_logl(h, WQ_LOG_ERROR, "wqrun: schedule '%s' of %s: the add failed", c->name,
                         c->lq->name);
    }
    c->last = c->next;
    c->next = next;
    if (!shared)
        persist(c);
    arm(c);
    wq_host_settle(h);
}

static lcron **find(lqueue *lq, const char *name)
{
    lcron **p = &lq->crons;
    while (*p && strcmp((*p)->name, name) != 0)
        p = &(*p)->nextc;
    return p;
}

static char *dup(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static const char *const schedule_opts[] = {"key", "tz", "catch_up", "payload", NULL};

/* q:schedule(name, spec [, opts]) */
static int schedule(lua_State *L)
{
    lqueue *lq = lqueue_check(L, "schedule");
    size_t nlen, slen;
    if (lua_type(L, 2) != LUA_TSTRING)
        wq_argerror(L, "schedule", "name",
                    lua_pushfstring(L, "string expected, got %s", luaL_typename(L, 2)));
    const char *name = lua_tolstring(L, 2, &nlen);
    if (nlen == 0 || nlen > 200 || memchr(name, '\0', nlen))
        wq_argerror(L, "schedule", "name", "1-200 bytes without NUL expected");
    if (lua_type(L, 3) != LUA_TSTRING)
        wq_argerror(L, "schedule", "spec",
                    lua_pushfstring(L, "string expected, got %s", luaL_typename(L, 3)));
    const char *spec = lua_tolstring(L, 3, &slen);
    lua_settop(L, 4);
    if (!lua_isnil(L, 4) && !lua_istable(L, 4))
        wq_argerror(L, "schedule", "opts",
                    lua_pushfstring(L, "table expected, got %s", luaL_typename(L, 4)));
    /* Every option is read (and may raise) before anything is allocated. */
    lua_pushnil(L);      /* 5: payload JSON */
    lua_pushvalue(L, 2); /* 6: key */
    int local = 0, skip = 0;
    if (!lua_isnil(L, 4)) {
        wq_checkopts(L, 4, "schedule", schedule_opts);
        if (lua_getfield(L, 4, "key") != LUA_TNIL) {
            size_t klen;
            wq_checkkeyarg(L, -1, "schedule", "key", &klen);
            lua_replace(L, 6);
        } else {
            lua_pop(L, 1);
        }
        if (lua_getfield(L, 4, "tz") != LUA_TNIL) {
            const char *tz = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
            if (strcmp(tz, "utc") != 0 && strcmp(tz, "local") != 0)
                wq_argexpected(L, -1, "schedule", "tz", "\"utc\" or \"local\"");
            local = strcmp(tz, "local") == 0;
        }
        lua_pop(L, 1);
        if (lua_getfield(L, 4, "catch_up") != LUA_TNIL) {
            const char *cu = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
            if (strcmp(cu, "once") != 0 && strcmp(cu, "skip") != 0)
                wq_argexpected(L, -1, "schedule", "catch_up", "\"once\" or \"skip\"");
            skip = strcmp(cu, "skip") == 0;
        }
        lua_pop(L, 1);
        lua_getfield(L, 4, "payload");
        wq_encode_payload(L, -1, "schedule"); /* JSON text or nil */
        lua_replace(L, 5);
        lua_pop(L, 1);
    }
    size_t keylen, plen = 0;
    const char *key = lua_tolstring(L, 6, &keylen);
    if (keylen > WQ_KEY_MAX)
        wq_argerror(L, "schedule", "key", "too long");
    const char *payload = lua_isnil(L, 5) ? NULL : lua_tolstring(L, 5, &plen);
    char err[200];
    wq_cron *cron;
    int r = wq_cron_parse(spec, &cron, err, sizeof err);
    if (r == WQ_ENOMEM)
        return luaL_error(L, "schedule: out of memory");
    if (r < 0)
        return wq_argerror(L, "schedule", "spec", lua_pushstring(L, err));
    lcron *c = calloc(1, sizeof *c);
    if (c) {
        c->lq = lq;
        c->cron = cron;
        c->name = dup(name, nlen);
        c->spec = dup(spec, slen);
        c->key = dup(key, keylen);
        c->keylen = keylen;
        c->payload = payload ? dup(payload, plen) : NULL;
        c->paylen = plen;
        c->local = local;
        c->skip = skip;
    }
    if (!c || !c->name || !c->spec || !c->key || (payload && !c->payload)) {
        if (c)
            free_one(c);
        else
            wq_cron_free(cron);
        return luaL_error(L, "schedule: out of memory");
    }
    double now = wall_now(lq->host);
    lcron **p = find(lq, c->name);
    lcron *old = *p;
    /* The same schedule again (the script run again on its state file):
     * keep its times, so a time missed while the process was down is added
     * once now, or skipped with catch_up = "skip". */
    if (old && strcmp(old->spec, c->spec) == 0 && old->local == c->local && old->next > 0) {
        c->next = old->next;
        c->last = old->last;
        if (c->next <= now && c->skip)
            c->next = wq_cron_next(c->cron, now, c->local);
    } else {
        c->next = wq_cron_next(c->cron, now, c->local);
    }
    if (old) {
        c->nextc = old->nextc;
        free_one(old);
    }
    *p = c;
    c->defined = 1;
    persist(c);
    /* A time missed while the process was down is added now, in this call:
     * a script that defines its schedules and ends would exit before a
     * timer got its turn, and the missed time would stay in the file. */
    if (c->next > 0 && c->next <= now)
        fire(lq->host, c, 0);
    else
        arm(c);
    return 0;
}

/* q:unschedule(name) -> whether there was one */
static int unschedule(lua_State *L)
{
    lqueue *lq = lqueue_check(L, "unschedule");
    if (lua_type(L, 2) != LUA_TSTRING)
        wq_argerror(L, "unschedule", "name",
                    lua_pushfstring(L, "string expected, got %s", luaL_typename(L, 2)));
    const char *name = lua_tostring(L, 2);
    lcron **p = find(lq, name);
    if (!*p) {
        lua_pushboolean(L, 0);
        return 1;
    }
    lcron *c = *p;
    *p = c->nextc;
    if (lq->bq)
        wq_bq_schedule_del(lq->bq, c->name);
    free_one(c);
    lua_pushboolean(L, 1);
    return 1;
}

/* q:schedules() -> {{name=, spec=, key=, next_at=, last_at=}, ...} */
static int schedules(lua_State *L)
{
    lqueue *lq = lqueue_check(L, "schedules");
    lua_newtable(L);
    int n = 0;
    for (lcron *c = lq->crons; c; c = c->nextc) {
        lua_createtable(L, 0, 7);
        lua_pushstring(L, c->name);
        lua_setfield(L, -2, "name");
        lua_pushstring(L, c->spec);
        lua_setfield(L, -2, "spec");
        lua_pushlstring(L, c->key, c->keylen);
        lua_setfield(L, -2, "key");
        if (c->next >= 0) {
            lua_pushnumber(L, c->next);
            lua_setfield(L, -2, "next_at");
        }
        if (c->last > 0) {
            lua_pushnumber(L, c->last);
            lua_setfield(L, -2, "last_at");
        }
        lua_pushstring(L, c->local ? "local" : "utc");
        lua_setfield(L, -2, "tz");
        lua_pushstring(L, c->skip ? "skip" : "once");
        lua_setfield(L, -2, "catch_up");
        lua_pushboolean(L, c->defined);
        lua_setfield(L, -2, "defined");
        lua_rawseti(L, -2, ++n);
    }
    return 1;
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(const lcron *const *)a)->name, (*(const lcron *const *)b)->name);
}

int lcron_list(void *q, void (*fn)(void *ud, const wq_schedule_row *s, int defined), void *ud)
{
    const lqueue *lq = q;
    size_t n = 0;
    for (const lcron *c = lq->crons; c; c = c->nextc)
        n++;
    const lcron **v = n ? malloc(n * sizeof *v) : NULL;
    if (n && !v)
        return WQ_ENOMEM;
    n = 0;
    for (const lcron *c = lq->crons; c; c = c->nextc)
        v[n++] = c;
    if (n)
        qsort(v, n, sizeof *v, by_name);
    for (size_t i = 0; i < n; i++) {
        wq_schedule_row row = row_of(v[i]);
        fn(ud, &row, v[i]->defined);
    }
    free(v);
    return (int)n;
}

void lcron_restore(lqueue *lq, const wq_schedule_row *row)
{
    wq_cron *cron;
    if (wq_cron_parse(row->spec, &cron, NULL, 0) < 0)
        return; /* a spec this build cannot read: the script defines it again */
    lcron *c = calloc(1, sizeof *c);
    if (!c) {
        wq_cron_free(cron);
        return;
    }
    c->lq = lq;
    c->cron = cron;
    c->name = dup(row->name, strlen(row->name));
    c->spec = dup(row->spec, strlen(row->spec));
    c->key = row->key ? dup(row->key, row->keylen) : dup(row->name, strlen(row->name));
    c->keylen = row->key ? row->keylen : strlen(row->name);
    c->payload = row->payload ? dup(row->payload, row->paylen) : NULL;
    c->paylen = row->paylen;
    c->local = row->tz == WQ_SCHED_LOCAL;
    c->skip = row->catch_up == WQ_SCHED_CATCH_UP_SKIP;
    c->next = row->next_at > 0 ? row->next_at : -1;
    c->last = row->last_at;
    if (!c->name || !c->spec || !c->key || (row->payload && !c->payload)) {
        free_one(c);
        return;
    }
    lcron **p = find(lq, c->name);
    if (*p) {
        c->nextc = (*p)->nextc;
        free_one(*p);
    }
    *p = c;
    /* Armed only when the script defines it again (q:schedule): a schedule
     * the script no longer has stays in the file, inert, until unscheduled. */
}

void lcron_report_undefined(wq_host *h)
{
    /* On a shared database another runner's script may define it: nothing to say. */
    if (!h->backend || wq_backend_shared(h->backend))
        return;
    for (int i = 0; i < h->nqueues; i++) {
        lqueue *lq = h->queues[i].q;
        for (lcron *c = lq->crons; c; c = c->nextc) {
            if (c->defined)
                continue;
            char name[WQ_SHOWN_KEY];
            wq_show_key(name, c->name, strlen(c->name));
            wq_host_logl(h, WQ_LOG_WARN,
                         "wqrun: warning: schedule '%s' of queue '%s' (%s) is in the state file, "
                         "but this script does not define it: it does not fire; define it again "
                         "with q:schedule, or remove it with q:unschedule('%s') (or, while no "
                         "runner runs: sqlite3 FILE \"DELETE FROM schedules WHERE queue = '%s' AND "
                         "name = '%s'\")",
                         name, lq->name, c->spec, name, lq->name, name);
        }
    }
}

void lcron_free_all(lqueue *lq)
{
    while (lq->crons) {
        lcron *c = lq->crons;
        lq->crons = c->nextc;
        free_one(c);
    }
}

const luaL_Reg lcron_methods[] = {
    {"schedule", schedule}, {"unschedule", unschedule}, {"schedules", schedules}, {NULL, NULL}};
