/*
 * A queue's failure record per key: the failure count (job.attempt, retries
 * and max_retries read it) and the message of its last failed run (the item
 * listings show it), and the log line each failed run writes.
 */
#ifndef WQ_LFAILURES_H
#define WQ_LFAILURES_H

#include "lua/lqueue.h"

/* The most of a message kept per key (bytes, cut at a UTF-8 boundary). */
#define LFAIL_ERROR_MAX 1024
/* The most of a message a log line shows (its first line). */
#define LFAIL_LOG_MAX 200

/* What became of a failed run, for its log line. */
typedef enum {
    LFAIL_RETRY,     /* tried again after a delay */
    LFAIL_DEAD,      /* max_retries reached: dead-lettered */
    LFAIL_PERMANENT, /* wq.fail: dead-lettered at once */
} lfail_outcome;

/* Creates lq's (empty) records: 0 or WQ_ENOMEM. */
int lfail_open(lqueue *lq);
/* Frees them (and every kept message). */
void lfail_close(lqueue *lq);
/* Key's failure count (0: none recorded). */
int64_t lfail_count(const lqueue *lq, const char *key, size_t len);
/* The message of key's last failed run, NULL for none; valid until key's record changes. */
const char *lfail_last_error(const lqueue *lq, const char *key, size_t len);
/* Records key's failure count and last message (copied, cut to LFAIL_ERROR_MAX; NULL: none);
 * a count of 0 is kept as a record too. 0, or WQ_ENOMEM with the record unchanged. */
int lfail_set(lqueue *lq, const char *key, size_t len, int64_t count, const char *err);
/* Drops key's record: 1 if it had one, else 0. */
int lfail_clear(lqueue *lq, const char *key, size_t len);
/* The number of keys with a failure count above 0 (q:stats().retrying): claimed items of a
 * shared database are kept at 0. */
size_t lfail_keys(const lqueue *lq);
/*
 * Logs a failed run of key: its queue, key, attempt, the first line of err (cut to
 * LFAIL_LOG_MAX bytes), and what follows: the next try in retry_ns (LFAIL_RETRY) or the dead
 * letter. --quiet leaves out the lines of runs that will be tried again.
 */
void lfail_log(lqueue *lq, const char *key, size_t len, int64_t attempt, const char *err,
               lfail_outcome how, int64_t retry_ns);

#endif
