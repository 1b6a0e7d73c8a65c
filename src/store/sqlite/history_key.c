/*
 * A key's last finished run, from the history (SPEC 11: q:item and GET
 * /queues/NAME/items/KEY once the engine no longer knows the key). The
 * table has no index on the key (history.c says why), so the runner walks
 * it newest first by id in slices of SLICE rows, one slice per loop turn:
 * a lookup in a day of history takes as many turns as it needs and never
 * holds the loop for more than one slice. Rows not yet committed are looked
 * at first. The answer is a WQ_BOP_LAST_RUN one (backend.h).
 */
#include "store/sqlite/store_int.h"

#include <event2/event.h>
#include <json-c/json.h>
#include <string.h>

#define SLICE 16384 /* rows a slice walks: about a millisecond */

/* A timer of no delay runs after the loop's next poll (event_active would run it in this pass). */
static const struct timeval next_turn = {0, 0};

struct wq_store_lookup {
    wq_store_queue *sq;
    char *key;
    size_t keylen;
    int64_t hi; /* the next slice walks the ids below it */
    wq_bop_fn fn;
    void *ud;
    struct event *ev;
    struct wq_store_lookup *next, *prev;
};

static void unlink_lookup(wq_store_lookup *l)
{
    wq_store *s = l->sq->s;
    if (l->prev)
        l->prev->next = l->next;
    else
        s->lookups = l->next;
    if (l->next)
        l->next->prev = l->prev;
}

static void lookup_free(wq_store_lookup *l)
{
    if (l->ev)
        event_free(l->ev);
    wq_free(l->key);
    wq_free(l);
}

static void add_time(json_object *o, const char *name, double t)
{
    json_object_object_add(o, name, json_object_new_double(t));
}

/* The q:item object of run v of l's key (NULL: out of memory). */
static json_object *run_json(const wq_store_lookup *l, const wq_history_view *v)
{
    /* the fields of a finished key in q:item, as the PostgreSQL backend answers them */
    json_object *o = json_object_new_object(), *r;
    if (!o)
        return NULL;
    const char *state = v->state ? v->state : "done";
    json_object_object_add(o, "state", json_object_new_string(state));
    json_object_object_add(o, "key", json_object_new_string_len(l->key, (int)l->keylen));
    if (strcmp(state, "done") == 0) {
        add_time(o, "finished_at", v->finished_at);
        if (v->result && (r = json_tokener_parse(v->result)) != NULL)
            json_object_object_add(o, "result", r);
        else if (v->result) /* not JSON: kept as the text it is */
            json_object_object_add(o, "result",
                                   json_object_new_string_len(v->result, (int)v->rlen));
    } else {
        json_object_object_add(o, "attempts", json_object_new_int64(v->attempts));
        add_time(o, "failed_at", v->finished_at);
    }
    if (v->error)
        json_object_object_add(o, "error", json_object_new_string(v->error));
    return o;
}

/*
 * Answers l and frees it: 1 with run o (taken), or result with text when o is NULL (found 1: out
 * of memory). The answer may run the waiter at once, which may look up again: nothing of the
 * store's statements may be in use.
 */
static void answer(wq_store_lookup *l, int found, json_object *o, int result, const char *text)
{
    unlink_lookup(l);
    const char *json = o ? json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN) : NULL;
    if (json)
        l->fn(l->ud, 1, json);
    else if (found)
        l->fn(l->ud, WQ_ENOMEM, "out of memory");
    else
        l->fn(l->ud, result, text);
    json_object_put(o);
    lookup_free(l);
}

/* One slice: the ids in [hi - SLICE, hi). 1 when l is answered (and freed), 0 to go on. */
static int slice(wq_store_lookup *l)
{
    wq_store *s = l->sq->s;
    char err[200];
    if (!s->st_last_run &&
        sqlite3_prepare_v3(s->db,
                           "SELECT state, finished_at, attempts, result, error FROM history"
                           " WHERE id < ?1 AND id >= ?2 AND queue = ?3 AND key = ?4"
                           " ORDER BY id DESC LIMIT 1",
                           -1, SQLITE_PREPARE_PERSISTENT, &s->st_last_run, NULL) != SQLITE_OK) {
        snprintf(err, sizeof err, "%s", sqlite3_errmsg(s->db));
        answer(l, 0, NULL, WQ_EIO, err);
        return 1;
    }
    sqlite3_stmt *st = s->st_last_run;
    int64_t lo = l->hi > SLICE ? l->hi - SLICE : 0;
    sqlite3_bind_int64(st, 1, l->hi);
    sqlite3_bind_int64(st, 2, lo);
    sqlite3_bind_text(st, 3, l->sq->name, (int)l->sq->namelen, SQLITE_STATIC);
    sqlite3_bind_text64(st, 4, l->key, l->keylen, SQLITE_STATIC, SQLITE_UTF8);
    int rc = sqlite3_step(st);
    json_object *o = NULL;
    if (rc == SQLITE_ROW) {
        const char *result = (const char *)sqlite3_column_text(st, 3);
        wq_history_view v = {.state = (const char *)sqlite3_column_text(st, 0),
                             .finished_at = sqlite3_column_double(st, 1),
                             .attempts = sqlite3_column_int64(st, 2),
                             .result = result,
                             .rlen = result ? (size_t)sqlite3_column_bytes(st, 3) : 0,
                             .error = (const char *)sqlite3_column_text(st, 4)};
        o = run_json(l, &v);
    } else if (rc != SQLITE_DONE) {
        snprintf(err, sizeof err, "%s", sqlite3_errmsg(s->db));
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (rc == SQLITE_ROW)
        answer(l, 1, o, 0, NULL);
    else if (rc != SQLITE_DONE)
        answer(l, 0, NULL, WQ_EIO, err);
    else if (lo == 0)
        answer(l, 0, NULL, 0, "null");
    else
        l->hi = lo;
    return rc != SQLITE_DONE || lo == 0;
}

/* The largest id of the history, +1 (0 when empty), or -1. */
static int64_t top(wq_store *s)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, "SELECT coalesce(max(id), -1) + 1 FROM history", -1, &st, NULL) !=
        SQLITE_OK)
        return -1;
    int64_t n = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    return n;
}

static void on_turn(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    wq_store_lookup *l = arg;
    if (l->hi < 0) { /* the first turn: the rows not committed yet, then the file's below them */
        wq_history_view v;
        if (wq_store_history_uncommitted(l->sq, l->key, l->keylen, &v)) {
            answer(l, 1, run_json(l, &v), 0, NULL);
            return;
        }
        if ((l->hi = top(l->sq->s)) < 0) {
            answer(l, 0, NULL, WQ_EIO, "cannot read the history");
            return;
        }
    }
    if (!slice(l))
        event_add(l->ev, &next_turn);
}

int wq_store_history_last(wq_store_queue *sq, const char *key, size_t len, wq_bop_fn fn, void *ud)
{
    wq_store *s = sq->s;
    wq_store_lookup *l = wq_malloc(sizeof *l);
    if (!l)
        return WQ_ENOMEM;
    memset(l, 0, sizeof *l);
    l->sq = sq;
    l->fn = fn;
    l->ud = ud;
    l->keylen = len;
    l->hi = -1;
    l->key = wq_store_dup(key, len);
    if (!l->key || !(l->ev = event_new(s->event_base, -1, 0, on_turn, l))) {
        lookup_free(l);
        return WQ_ENOMEM;
    }
    l->next = s->lookups;
    if (l->next)
        l->next->prev = l;
    s->lookups = l;
    event_add(l->ev, &next_turn); /* answered from the loop, never before this returns */
    return 0;
}

void wq_store_lookups_free(wq_store *s)
{
    while (s->lookups) {
        wq_store_lookup *l = s->lookups;
        s->lookups = l->next;
        lookup_free(l); /* at close: nobody waits for the answer any more */
    }
    sqlite3_finalize(s->st_last_run);
    s->st_last_run = NULL;
}
