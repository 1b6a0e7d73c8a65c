/*
 * Histogram bookkeeping for the queue metrics. Buckets are stored
 * non-cumulatively so an observation touches one counter; exporters sum.
 */
#include "engine/metrics.h"

const double wq_hist_bounds[WQ_HIST_BOUNDS] = {1e-08, 1e-07, 1e-06, 1e-05, 1e-04,
                                               0.001, 0.01,  0.1,   1,     10};

void wq_histogram_observe(wq_histogram *h, double seconds)
{
    int i = 0;
    while (i < WQ_HIST_BOUNDS && seconds > wq_hist_bounds[i])
        i++;
    h->buckets[i]++;
    h->count++;
    h->sum += seconds;
}

uint64_t wq_histogram_cumulative(const wq_histogram *h, int i)
{
    uint64_t n = 0;
    for (int b = 0; b <= i && b <= WQ_HIST_BOUNDS; b++)
        n += h->buckets[b];
    return n;
}
