/*
 * Renders metrics in the Prometheus text format. Each family is written
 * once with its HELP and TYPE lines, then one sample per queue (label
 * `name`). Processing ages are computed now, at scrape time.
 */
#include "host/prom.h"

#include "engine/metrics.h"
#include "store/backend.h"

#include <event2/buffer.h>
#include <stdio.h>
#include <time.h>

typedef enum { COUNTER, GAUGE } kind;

/* A sample of one queue: from its stats, or (ages) asked at scrape time. */
typedef double (*value_fn)(const wq_hqueue *hq, const wq_qstats *st);

static void family(struct evbuffer *out, const char *name, kind k, const char *help)
{
    evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name,
                        k == COUNTER ? "counter" : "gauge");
}

static void per_queue(wq_host *h, struct evbuffer *out, const char *name, kind k, const char *help,
                      value_fn fn)
{
    family(out, name, k, help);
    for (int i = 0; i < h->nqueues; i++) {
        const wq_hqueue *hq = &h->queues[i];
        wq_qstats st;
        hq->ops->stats(hq->q, &st);
        evbuffer_add_printf(out, "%s{name=\"%s\"} %.17g\n", name, hq->name, fn(hq, &st));
    }
}

static void histogram_samples(struct evbuffer *out, const char *name, const char *labels,
                              const wq_histogram *hist)
{
    for (int b = 0; b < WQ_HIST_BOUNDS; b++)
        evbuffer_add_printf(out, "%s_bucket{%sle=\"%g\"} %llu\n", name, labels, wq_hist_bounds[b],
                            (unsigned long long)wq_histogram_cumulative(hist, b));
    evbuffer_add_printf(out, "%s_bucket{%sle=\"+Inf\"} %llu\n", name, labels,
                        (unsigned long long)hist->count);
    /* Strip the trailing comma of the label list for _sum and _count. */
    int n = 0;
    while (labels[n])
        n++;
    if (n)
        evbuffer_add_printf(out, "%s_sum{%.*s} %.17g\n%s_count{%.*s} %llu\n", name, n - 1, labels,
                            hist->sum, name, n - 1, labels, (unsigned long long)hist->count);
    else
        evbuffer_add_printf(out, "%s_sum %.17g\n%s_count %llu\n", name, hist->sum, name,
                            (unsigned long long)hist->count);
}

static void per_queue_histogram(wq_host *h, struct evbuffer *out, const char *name,
                                const char *help, int work)
{
    evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (int i = 0; i < h->nqueues; i++) {
        const wq_hqueue *hq = &h->queues[i];
        wq_qstats st;
        hq->ops->stats(hq->q, &st);
        const wq_metrics *m = st.metrics;
        char labels[96];
        snprintf(labels, sizeof labels, "name=\"%s\",", hq->name);
        histogram_samples(out, name, labels, work ? &m->work_duration : &m->queue_latency);
    }
}

#define STAT(field)                                                                                \
    static double v_##field(const wq_hqueue *hq, const wq_qstats *st)                              \
    {                                                                                              \
        (void)hq;                                                                                  \
        return (double)st->field;                                                                  \
    }
STAT(depth)
STAT(adds)
STAT(retries)
STAT(failures)
STAT(dead)
STAT(waiting)
STAT(processing)
STAT(queued)
STAT(done)
STAT(timeouts)
STAT(requeued)

static double v_unfinished(const wq_hqueue *hq, const wq_qstats *st)
{
    (void)st;
    double unfinished, longest;
    hq->ops->work_ages(hq->q, &unfinished, &longest);
    return unfinished;
}

static double v_longest(const wq_hqueue *hq, const wq_qstats *st)
{
    (void)st;
    double unfinished, longest;
    hq->ops->work_ages(hq->q, &unfinished, &longest);
    return longest;
}

/*
 * The database's numbers (a backend shared by runners): the same on every runner, a snapshot
 * at most a few seconds old, so a Prometheus server scraping every runner aggregates them
 * with max(), never sum().
 */
static void db_view(wq_host *h, struct evbuffer *out)
{
    const wq_db_view *v = wq_backend_db_view(h->backend);
    if (!v)
        return; /* the first read is under way */
    family(out, "wqrun_db_queue_items", GAUGE,
           "Items of the queue in the database by state, every runner's (use max() across "
           "runners).");
    for (size_t i = 0; i < v->nqueues; i++) {
        const wq_db_queue *q = &v->queues[i];
        static const char *const state[] = {"queued", "processing", "waiting", "held"};
        uint64_t n[] = {q->queued, q->processing, q->waiting, q->held};
        for (int k = 0; k < 4; k++)
            evbuffer_add_printf(out, "wqrun_db_queue_items{queue=\"%s\",state=\"%s\"} %llu\n",
                                q->name, state[k], (unsigned long long)n[k]);
    }
    family(out, "wqrun_db_queue_dead", GAUGE, "Dead letters of the queue in the database.");
    for (size_t i = 0; i < v->nqueues; i++)
        evbuffer_add_printf(out, "wqrun_db_queue_dead{queue=\"%s\"} %llu\n", v->queues[i].name,
                            (unsigned long long)v->queues[i].dead);
    family(out, "wqrun_db_queue_retrying", GAUGE, "Items of the queue with a failure count.");
    for (size_t i = 0; i < v->nqueues; i++)
        evbuffer_add_printf(out, "wqrun_db_queue_retrying{queue=\"%s\"} %llu\n", v->queues[i].name,
                            (unsigned long long)v->queues[i].retrying);
    family(out, "wqrun_db_queue_paused", GAUGE, "1 while the queue is paused for every runner.");
    for (size_t i = 0; i < v->nqueues; i++)
        evbuffer_add_printf(out, "wqrun_db_queue_paused{queue=\"%s\"} %d\n", v->queues[i].name,
                            v->queues[i].paused);
    family(out, "wqrun_db_runners", GAUGE, "Runners registered in the database.");
    evbuffer_add_printf(out, "wqrun_db_runners %zu\n", v->nrunners);
    family(out, "wqrun_db_takeovers_total", COUNTER,
           "Items taken back from dead runners, by every runner.");
    evbuffer_add_printf(out, "wqrun_db_takeovers_total %llu\n", (unsigned long long)v->takeovers);
    family(out, "wqrun_db_crash_dead_total", COUNTER,
           "Items dead-lettered because their runners died running them too often.");
    evbuffer_add_printf(out, "wqrun_db_crash_dead_total %llu\n", (unsigned long long)v->crash_dead);
    family(out, "wqrun_db_jobs_dead_tuples", GAUGE,
           "Dead row versions in the hot table (pg_stat_user_tables.n_dead_tup of jobs).");
    evbuffer_add_printf(out, "wqrun_db_jobs_dead_tuples %lld\n", (long long)v->jobs_dead_tuples);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    family(out, "wqrun_db_view_age_seconds", GAUGE, "How old these wqrun_db_* numbers are.");
    evbuffer_add_printf(out, "wqrun_db_view_age_seconds %.3f\n",
                        (double)ts.tv_sec + (double)ts.tv_nsec / 1e9 - v->at);
}

void wq_prom_render(wq_host *h, struct evbuffer *out)
{
    per_queue(h, out, "workqueue_depth", GAUGE, "Current depth of the workqueue.", v_depth);
    per_queue(h, out, "workqueue_adds_total", COUNTER,
              "Total number of adds handled by the workqueue.", v_adds);
    per_queue_histogram(
        h, out, "workqueue_queue_duration_seconds",
        "How long in seconds an item stays in the workqueue before being requested.", 0);
    per_queue_histogram(h, out, "workqueue_work_duration_seconds",
                        "How long in seconds processing an item from the workqueue takes.", 1);
    per_queue(h, out, "workqueue_unfinished_work_seconds", GAUGE,
              "Seconds of work in progress not yet observed by work_duration.", v_unfinished);
    per_queue(h, out, "workqueue_longest_running_processor_seconds", GAUGE,
              "How many seconds the longest running processor has been running.", v_longest);
    per_queue(h, out, "workqueue_retries_total", COUNTER,
              "Total number of retries handled by the workqueue.", v_retries);

    per_queue(h, out, "wqrun_queued_items", GAUGE, "Items waiting to be handed out (Len).",
              v_queued);
    per_queue(h, out, "wqrun_processing_items", GAUGE, "Items handed out and not done.",
              v_processing);
    per_queue(h, out, "wqrun_waiting_items", GAUGE, "Delayed items not yet due.", v_waiting);
    per_queue(h, out, "wqrun_done_total", COUNTER, "Items marked done.", v_done);
    per_queue(h, out, "wqrun_failures_total", COUNTER, "Failed handler runs.", v_failures);
    per_queue(h, out, "wqrun_dead_letters", GAUGE, "Keys in the dead-letter list.", v_dead);
    per_queue(h, out, "wqrun_handler_timeouts_total", COUNTER,
              "Handler runs stopped by their timeout.", v_timeouts);
    per_queue(h, out, "wqrun_requeues_total", COUNTER, "Handler runs that returned wq.requeue.",
              v_requeued);

    evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s histogram\n", "wqrun_loop_lag_seconds",
                        "How late timers fired: time the loop was held by code that did not yield.",
                        "wqrun_loop_lag_seconds");
    histogram_samples(out, "wqrun_loop_lag_seconds", "", &h->loop_lag);

    if (h->backend) {
        wq_backend_stats st;
        wq_backend_get_stats(h->backend, &st);
        family(out, "wqrun_store_commits_total", COUNTER, "State file transactions committed.");
        evbuffer_add_printf(out, "wqrun_store_commits_total %llu\n",
                            (unsigned long long)st.commits);
        family(out, "wqrun_store_rows_written_total", COUNTER,
               "Rows inserted, updated or deleted.");
        evbuffer_add_printf(out, "wqrun_store_rows_written_total %llu\n",
                            (unsigned long long)st.rows_written);
        family(out, "wqrun_store_last_commit_rows", GAUGE, "Rows written by the last commit.");
        evbuffer_add_printf(out, "wqrun_store_last_commit_rows %llu\n",
                            (unsigned long long)st.last_commit_rows);
        family(out, "wqrun_store_inbox_consumed_total", COUNTER, "Inbox rows moved into queues.");
        evbuffer_add_printf(out, "wqrun_store_inbox_consumed_total %llu\n",
                            (unsigned long long)st.inbox_consumed);
        family(out, "wqrun_store_flush_errors_total", COUNTER, "Failed state file transactions.");
        evbuffer_add_printf(out, "wqrun_store_flush_errors_total %llu\n",
                            (unsigned long long)st.flush_errors);
        family(out, "wqrun_store_last_commit_age_seconds", GAUGE, "Seconds since the last commit.");
        /* The store stamps commits with the real wall clock (also under --virtual-time). */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double age =
            st.commits ? (double)ts.tv_sec + (double)ts.tv_nsec / 1e9 - st.last_commit_unix : 0;
        evbuffer_add_printf(out, "wqrun_store_last_commit_age_seconds %.17g\n", age < 0 ? 0 : age);
        evbuffer_add_printf(
            out, "# HELP %s %s\n# TYPE %s histogram\n", "wqrun_store_commit_duration_seconds",
            "Duration of state file commits.", "wqrun_store_commit_duration_seconds");
        histogram_samples(out, "wqrun_store_commit_duration_seconds", "", &st.commit_latency);
        if (st.shared) {
            /* This runner's own view: summing them over runners counts each item once. */
            family(out, "wqrun_pg_connected", GAUGE, "1 while the database is reachable.");
            evbuffer_add_printf(out, "wqrun_pg_connected %d\n", st.connected);
            family(out, "wqrun_pg_claims_total", COUNTER, "Items this runner claimed.");
            evbuffer_add_printf(out, "wqrun_pg_claims_total %llu\n", (unsigned long long)st.claims);
            family(out, "wqrun_pg_stale_outcomes_total", COUNTER,
                   "Outcomes discarded: their items had been taken over (fencing).");
            evbuffer_add_printf(out, "wqrun_pg_stale_outcomes_total %llu\n",
                                (unsigned long long)st.stale_outcomes);
            family(out, "wqrun_pg_takeovers_total", COUNTER,
                   "Items this runner's reaper gave back from dead runners.");
            evbuffer_add_printf(out, "wqrun_pg_takeovers_total %llu\n",
                                (unsigned long long)st.takeovers);
            family(out, "wqrun_pg_reconnects_total", COUNTER, "Connections re-established.");
            evbuffer_add_printf(out, "wqrun_pg_reconnects_total %llu\n",
                                (unsigned long long)st.reconnects);
            evbuffer_add_printf(
                out, "# HELP %s %s\n# TYPE %s histogram\n", "wqrun_pg_claim_duration_seconds",
                "Round trips of this runner's claims.", "wqrun_pg_claim_duration_seconds");
            histogram_samples(out, "wqrun_pg_claim_duration_seconds", "", &st.claim_latency);
            db_view(h, out);
        }
    }
}
