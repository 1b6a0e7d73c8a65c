/*
 * The SQLite store as a backend (backend.h): each method casts the handle
 * to the wq_store or wq_store_queue it starts and calls the store's own
 * function. The in-memory engine is the authority here, so an add is
 * always the engine's (WQ_BACKEND_LOCAL), a flush commits synchronously,
 * nothing is claimed and every option is honoured.
 */
#include "engine/common.h"
#include "store/sqlite/store_int.h"

static wq_store *S(wq_backend *b)
{
    return (wq_store *)(void *)b;
}
static const wq_store *CS(const wq_backend *b)
{
    return (const wq_store *)(const void *)b;
}
static wq_store_queue *Q(wq_bqueue *bq)
{
    return (wq_store_queue *)(void *)bq;
}

static void b_close(wq_backend *b)
{
    wq_store_close(S(b));
}
static const char *b_errmsg(const wq_backend *b)
{
    return wq_store_errmsg(CS(b));
}
static int b_check(wq_backend *b)
{
    return wq_store_check_path(S(b));
}
static int b_gone(const wq_backend *b)
{
    return wq_store_gone(CS(b));
}
static void b_set_busy_timeout(wq_backend *b, int ms)
{
    wq_store_set_busy_timeout(S(b), ms);
}
static const char *b_where(const wq_backend *b)
{
    return wq_store_path(CS(b));
}
static int b_dirty(const wq_backend *b)
{
    return wq_store_dirty(CS(b));
}
static int b_flush(wq_backend *b)
{
    return wq_store_flush(S(b)); /* synchronous: never WQ_EAGAIN */
}
static void b_set_commit_fn(wq_backend *b, void (*fn)(void *ud, int ok), void *ud)
{
    (void)b, (void)fn, (void)ud; /* flush commits before it returns */
}
static int b_poll_inbox(wq_backend *b, int (*fn)(void *ud, const wq_inbox_row *row), void *ud)
{
    return wq_store_poll_inbox(S(b), fn, ud);
}
static int b_poll_commands(wq_backend *b, void (*fn)(void *ud, const wq_command *c), void *ud)
{
    return wq_store_poll_commands(S(b), fn, ud);
}
static int b_inbox_put(wq_backend *b, const wq_inbox_row *row)
{
    return wq_store_inbox_put(S(b), row);
}
static void b_command_result(wq_backend *b, int64_t id, int ok, const char *text)
{
    wq_store_command_result(S(b), id, ok, text);
}
static void b_known_queue(wq_backend *b, const char *name)
{
    wq_store_known_queue(S(b), name);
}
static void b_get_stats(const wq_backend *b, wq_backend_stats *st)
{
    wq_store_get_stats(CS(b), st);
}
static void b_stop(wq_backend *b)
{
    (void)b; /* nothing claimed, nothing to hand back */
}
static wq_bqueue *q_attach(wq_backend *b, const char *name, wq_queue *q,
                           const wq_bqueue_hooks *hooks)
{
    (void)hooks; /* SQLite never claims */
    wq_store_queue *sq = wq_store_attach(S(b), name, q);
    return sq ? &sq->base : NULL;
}
static void q_detach(wq_bqueue *bq)
{
    wq_store_detach(Q(bq));
}
static int q_restore(wq_bqueue *bq, void (*item_fn)(void *ud, const wq_restored *r),
                     void (*fail_fn)(void *ud, const char *key, size_t len, int64_t requeues,
                                     const char *last_error),
                     void (*dead_fn)(void *ud, const wq_dead_row *d), void *ud)
{
    return wq_store_restore(Q(bq), item_fn, fail_fn, dead_fn, ud);
}
static void q_set_meta(wq_bqueue *bq,
                       void (*fn)(void *ud, const wq_item_info *info, wq_item_meta *out), void *ud)
{
    wq_store_set_meta(Q(bq), fn, ud);
}
static int q_add(wq_bqueue *bq, const wq_badd *a, wq_badd_fn fn, void *ud)
{
    (void)bq, (void)a, (void)fn, (void)ud;
    return WQ_BACKEND_LOCAL; /* the engine decides; its observer touches the store */
}
static void q_touch(wq_bqueue *bq, wq_event ev, const char *key, size_t len)
{
    wq_store_touch(Q(bq), ev, key, len);
}
static void q_failures(wq_bqueue *bq, const char *key, size_t len, int64_t requeues,
                       const char *last_error)
{
    wq_store_failures(Q(bq), key, len, requeues, last_error);
}
static void q_dead(wq_bqueue *bq, const wq_dead_row *d)
{
    wq_store_dead(Q(bq), d);
}
static void q_undead(wq_bqueue *bq, const char *key, size_t len)
{
    wq_store_undead(Q(bq), key, len);
}
static void q_progress(wq_bqueue *bq, const char *key, size_t len, const char *json, size_t n)
{
    wq_store_progress_put(Q(bq), key, len, json, n);
}

static void q_history(wq_bqueue *bq, const wq_history_row *r)
{
    wq_store_history_put(Q(bq), r);
}
static int64_t q_reran(wq_bqueue *bq, double since)
{
    return wq_store_history_reran(Q(bq), since);
}
static int q_history_list(wq_bqueue *bq, int64_t before, size_t limit,
                          void (*fn)(void *ud, const wq_history_view *v), void *ud)
{
    return wq_store_history_list(Q(bq), before, limit, fn, ud);
}
static void q_done_put(wq_bqueue *bq, const char *key, size_t len, double finished_at,
                       const char *result, size_t rlen)
{
    wq_store_done_put(Q(bq), key, len, finished_at, result, rlen);
}
static void q_done_del(wq_bqueue *bq, const char *key, size_t len)
{
    wq_store_done_del(Q(bq), key, len);
}
static int q_done_prune(wq_bqueue *bq, double older_than)
{
    return wq_store_done_prune(Q(bq), older_than);
}
static int q_restore_done(wq_bqueue *bq,
                          void (*fn)(void *ud, const char *key, size_t len, double finished_at,
                                     const char *result, size_t rlen),
                          void *ud)
{
    return wq_store_restore_done(Q(bq), fn, ud);
}
static void q_schedule_put(wq_bqueue *bq, const wq_schedule_row *row)
{
    wq_store_schedule_put(Q(bq), row);
}
static int q_schedule_fire(wq_bqueue *bq, const wq_schedule_row *row)
{
    (void)bq;
    (void)row;
    return WQ_BACKEND_LOCAL; /* one runner: its engine adds, the row is written behind */
}

static void q_schedule_del(wq_bqueue *bq, const char *name)
{
    wq_store_schedule_del(Q(bq), name);
}
static int q_restore_schedules(wq_bqueue *bq, void (*fn)(void *ud, const wq_schedule_row *row),
                               void *ud)
{
    return wq_store_restore_schedules(Q(bq), fn, ud);
}
static int q_paused(wq_bqueue *bq)
{
    return wq_store_paused(Q(bq));
}
static void q_set_paused(wq_bqueue *bq, int paused)
{
    wq_store_set_paused(Q(bq), paused);
}

/* Every item is in the engine: the file only mirrors it. */
/* Flushes are synchronous: nothing is ever under way. */
static void b_drain(wq_backend *b, int timeout_ms)
{
    (void)b;
    (void)timeout_ms;
}

static int q_pending(wq_bqueue *bq)
{
    (void)bq;
    return 0;
}

static void q_want(wq_bqueue *bq)
{
    (void)bq;
}

/* One runner per file: its script's options are the only ones, applied by the engine and the
 * bindings. The file keeps the history option alone, for `wqrun add --wait` (cli.c). */
static void q_define(wq_bqueue *bq, const wq_queue_def *def)
{
    wq_store_set_history(Q(bq), def->history);
}

/* The engine applies every op and the store writes the change behind it, but for the history of
 * a key the engine no longer knows, which the file alone keeps (answered from the loop). */
static int q_op(wq_bqueue *bq, const wq_bop *op, wq_bop_fn fn, void *ud)
{
    if (op->kind != WQ_BOP_LAST_RUN || !Q(bq)->s->event_base)
        return WQ_BACKEND_LOCAL;
    if (!fn) /* asked whether it would */
        return 0;
    return wq_store_history_last(Q(bq), op->key, op->keylen, fn, ud);
}

static void b_flows_attach(wq_backend *b, wq_flows *fs)
{
    wq_store_flows_attach(S(b), fs);
}

static void b_flow_touch(wq_backend *b, const char *flow, int64_t node, int created)
{
    wq_store_flow_touch(S(b), flow, node, created);
}

static int b_restore_flows(wq_backend *b, wq_flows *fs)
{
    return wq_store_restore_flows(S(b), fs);
}

const wq_backend_ops wq_sqlite_ops = {
    .version = WQ_BACKEND_VERSION,
    .name = "sqlite",
    .close = b_close,
    .errmsg = b_errmsg,
    .check = b_check,
    .gone = b_gone,
    .set_busy_timeout = b_set_busy_timeout,
    .where = b_where,
    .dirty = b_dirty,
    .flush = b_flush,
    .set_commit_fn = b_set_commit_fn,
    .poll_inbox = b_poll_inbox,
    .poll_commands = b_poll_commands,
    .command_result = b_command_result,
    .inbox_put = b_inbox_put,
    .known_queue = b_known_queue,
    .get_stats = b_get_stats,
    .stop = b_stop,
    .drain = b_drain,
    .attach = q_attach,
    .detach = q_detach,
    .restore = q_restore,
    .set_meta = q_set_meta,
    .add = q_add,
    .touch = q_touch,
    .failures = q_failures,
    .dead = q_dead,
    .history = q_history,
    .progress = q_progress,
    .reran = q_reran,
    .history_list = q_history_list,
    .undead = q_undead,
    .done_put = q_done_put,
    .done_del = q_done_del,
    .done_prune = q_done_prune,
    .restore_done = q_restore_done,
    .schedule_put = q_schedule_put,
    .schedule_del = q_schedule_del,
    .schedule_fire = q_schedule_fire,
    .restore_schedules = q_restore_schedules,
    .paused = q_paused,
    .set_paused = q_set_paused,
    .pending = q_pending,
    .want = q_want,
    .define = q_define,
    .op = q_op,
    .flows_attach = b_flows_attach,
    .flow_touch = b_flow_touch,
    .restore_flows = b_restore_flows,
};
