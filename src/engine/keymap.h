/*
 * A hash map from byte-string keys (copied) to 64-bit values: open
 * addressing with linear probing and backward-shift deletion, so there are
 * no tombstones and lookups stay short. Used for per-key limiter counts and
 * the store's write-back set.
 */
#ifndef WQ_KEYMAP_H
#define WQ_KEYMAP_H

#include "engine/common.h"

typedef struct wq_keymap wq_keymap;

/* A new empty map, or NULL when out of memory. */
wq_keymap *wq_keymap_new(void);
/* Frees the map and its key copies. NULL is fine. */
void wq_keymap_free(wq_keymap *m);

/* Pointer to the value of key, or NULL if absent. Valid until the next put or del. */
uint64_t *wq_keymap_get(const wq_keymap *m, const char *key, size_t len);
/*
 * Pointer to the value of key, inserting it with value 0 if absent
 * (*created says which). NULL on out of memory; the map is then unchanged.
 */
uint64_t *wq_keymap_put(wq_keymap *m, const char *key, size_t len, int *created);
/* Removes key; returns 1 if it was there, else 0. */
int wq_keymap_del(wq_keymap *m, const char *key, size_t len);
/* Starts loading the slot a lookup of key reads first: a hint before a lookup that comes soon
 * (on a big map that slot is a cache miss). Changes nothing. */
void wq_keymap_prefetch(const wq_keymap *m, const char *key, size_t len);
/* Number of keys. */
size_t wq_keymap_count(const wq_keymap *m);
/* Removes every key (keeps the table's capacity). */
void wq_keymap_clear(wq_keymap *m);

/*
 * Iteration: *pos starts at 0; returns 1 and sets key/len/value for the next
 * entry, or 0 at the end. The map must not change during iteration.
 */
int wq_keymap_next(const wq_keymap *m, size_t *pos, const char **key, size_t *len, uint64_t *value);
/*
 * The same, looking at no more than limit slots from *pos (a sparse map's
 * empty slots cost as much to walk as full ones): 1 with the next entry,
 * 0 at the end, -1 when limit slots held none (*pos is then past them:
 * call again from there).
 */
int wq_keymap_next_upto(const wq_keymap *m, size_t *pos, size_t limit, const char **key,
                        size_t *len, uint64_t *value);

#endif
