/*
 * client-go's per-queue workqueue metrics: plain counters and fixed-bucket
 * histograms owned by each queue (no global registry). The host reads them
 * to render Prometheus text.
 */
#ifndef WQ_METRICS_H
#define WQ_METRICS_H

#include <stdint.h>

#define WQ_HIST_BOUNDS 10 /* finite upper bounds; +Inf is implicit */

/* Upper bounds in seconds: 1e-8 ... 10. */
extern const double wq_hist_bounds[WQ_HIST_BOUNDS];

typedef struct wq_histogram {
    uint64_t buckets[WQ_HIST_BOUNDS + 1]; /* non-cumulative; last is (10, +Inf) */
    uint64_t count;
    double sum; /* seconds */
} wq_histogram;

typedef struct wq_metrics {
    int64_t depth;              /* dirty items not yet handed out */
    uint64_t adds;              /* +1 exactly when depth +1 */
    uint64_t retries;           /* AddAfter / AddRateLimited calls before shutdown */
    wq_histogram queue_latency; /* add -> get */
    wq_histogram work_duration; /* get -> done */
} wq_metrics;

/* Records one observation of the given number of seconds. */
void wq_histogram_observe(wq_histogram *h, double seconds);
/* Cumulative count of observations <= wq_hist_bounds[i] (i == WQ_HIST_BOUNDS: all). */
uint64_t wq_histogram_cumulative(const wq_histogram *h, int i);

#endif
