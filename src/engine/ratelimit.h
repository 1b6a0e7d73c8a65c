/*
 * Rate limiters with client-go's semantics (see WORKQUEUE.md): each answers
 * "how long should this key wait before its next try" and keeps per-key
 * failure counts where the kind has them. All durations are nanoseconds.
 */
#ifndef WQ_RATELIMIT_H
#define WQ_RATELIMIT_H

#include "engine/backoff.h"
#include "engine/clock.h"
#include "engine/common.h"

typedef struct wq_limiter wq_limiter;

typedef enum {
    WQ_LIMITER_EXPONENTIAL,
    WQ_LIMITER_FAST_SLOW,
    WQ_LIMITER_BUCKET,
    WQ_LIMITER_MAX_OF,
    WQ_LIMITER_MAX_WAIT,
    WQ_LIMITER_JITTER
} wq_limiter_kind;

/* base * 2^failures capped at max (>= 2^63 ns or non-finite gives max). NULL on OOM. */
wq_limiter *wq_limiter_exponential(int64_t base_ns, int64_t max_ns);
/* fast for the first max_fast failures of a key, slow after. NULL on OOM. */
wq_limiter *wq_limiter_fast_slow(int64_t fast_ns, int64_t slow_ns, int64_t max_fast);
/*
 * Token bucket shared by all keys on the given clock (borrowed, must outlive
 * the limiter): starts with burst tokens, refills qps per second. A request
 * that can never be served answers WQ_NEVER. NULL on OOM.
 */
wq_limiter *wq_limiter_bucket(const wq_clock *clock, double qps, int64_t burst);
/* Largest delay of all children (borrowed, must outlive it); 0 with none. NULL on OOM. */
wq_limiter *wq_limiter_max_of(wq_limiter *const *children, size_t n);
/* child's delay capped at max (child borrowed). NULL on OOM. */
wq_limiter *wq_limiter_with_max_wait(wq_limiter *child, int64_t max_ns);
/*
 * child's delay spread at random by up to +-fraction of itself (0 < fraction
 * <= 1; "never" stays never), so keys that failed together do not retry in
 * lockstep. rand (NULL: the C library's rand()) gives uniform [0, 1). The
 * child is freed with it when owns is set, else borrowed. NULL on OOM.
 */
wq_limiter *wq_limiter_with_jitter(wq_limiter *child, double fraction, wq_rand_fn rand,
                                   void *rand_ud, int owns);
/* max_of(exponential(5 ms, 1000 s), bucket(10, 100)); owns its children. NULL on OOM. */
wq_limiter *wq_limiter_default(const wq_clock *clock);
/* Frees the limiter (and the children it owns, never borrowed ones). NULL is fine. */
void wq_limiter_free(wq_limiter *l);

wq_limiter_kind wq_limiter_kind_of(const wq_limiter *l);

/*
 * Delay for key's next try, in *delay_ns (>= 0, WQ_NEVER for "never"); counts
 * one more failure. Returns 0, or WQ_ENOMEM with nothing changed.
 */
int wq_limiter_when(wq_limiter *l, const char *key, size_t len, int64_t *delay_ns);
/* Clears key's failure history. */
void wq_limiter_forget(wq_limiter *l, const char *key, size_t len);
/* key's failure count (0 for the bucket). */
int64_t wq_limiter_num_requeues(const wq_limiter *l, const char *key, size_t len);
/*
 * Sets key's failure count (restore after a restart) on every per-key
 * limiter inside l. Returns 0 or WQ_ENOMEM.
 */
int wq_limiter_set_requeues(wq_limiter *l, const char *key, size_t len, int64_t count);

#endif
