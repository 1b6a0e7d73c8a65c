/*
 * Byte-string keyed hash map. Each slot holds the key's hash, its length, a
 * pointer to a private copy of the key and the value; an empty slot has a
 * NULL key pointer only when its length is also the empty marker, so the
 * empty string is a valid key (it gets a one-byte allocation).
 */
#include "engine/keymap.h"

#include <string.h>

struct slot {
    char *key; /* NULL: empty slot */
    uint64_t hash;
    size_t len;
    uint64_t value;
};

struct wq_keymap {
    struct slot *slots;
    size_t mask; /* capacity - 1; capacity is a power of two */
    size_t count;
};

#define MIN_CAP 16

wq_keymap *wq_keymap_new(void)
{
    wq_keymap *m = wq_malloc(sizeof *m);
    if (!m)
        return NULL;
    m->slots = wq_malloc(MIN_CAP * sizeof *m->slots);
    if (!m->slots) {
        wq_free(m);
        return NULL;
    }
    memset(m->slots, 0, MIN_CAP * sizeof *m->slots);
    m->mask = MIN_CAP - 1;
    m->count = 0;
    return m;
}

void wq_keymap_clear(wq_keymap *m)
{
    for (size_t i = 0; i <= m->mask; i++) {
        wq_free(m->slots[i].key);
        m->slots[i].key = NULL;
    }
    m->count = 0;
}

void wq_keymap_free(wq_keymap *m)
{
    if (!m)
        return;
    wq_keymap_clear(m);
    wq_free(m->slots);
    wq_free(m);
}

static size_t find(const wq_keymap *m, const char *key, size_t len, uint64_t h)
{
    size_t i = h & m->mask;
    for (;;) {
        const struct slot *s = &m->slots[i];
        if (!s->key || (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0))
            return i;
        i = (i + 1) & m->mask;
    }
}

uint64_t *wq_keymap_get(const wq_keymap *m, const char *key, size_t len)
{
    if (m->count == 0)
        return NULL;
    size_t i = find(m, key, len, wq_hash(key, len));
    return m->slots[i].key ? &m->slots[i].value : NULL;
}

static int grow(wq_keymap *m)
{
    size_t ncap = (m->mask + 1) * 2;
    struct slot *ns = wq_malloc(ncap * sizeof *ns);
    if (!ns)
        return WQ_ENOMEM;
    memset(ns, 0, ncap * sizeof *ns);
    for (size_t i = 0; i <= m->mask; i++) {
        struct slot *s = &m->slots[i];
        if (!s->key)
            continue;
        size_t j = s->hash & (ncap - 1);
        while (ns[j].key)
            j = (j + 1) & (ncap - 1);
        ns[j] = *s;
    }
    wq_free(m->slots);
    m->slots = ns;
    m->mask = ncap - 1;
    return 0;
}

uint64_t *wq_keymap_put(wq_keymap *m, const char *key, size_t len, int *created)
{
    uint64_t h = wq_hash(key, len);
    size_t i = find(m, key, len, h);
    if (m->slots[i].key) {
        if (created)
            *created = 0;
        return &m->slots[i].value;
    }
    if ((m->count + 1) * 4 > (m->mask + 1) * 3) { /* keep load <= 3/4 */
        if (grow(m) < 0)
            return NULL;
        i = find(m, key, len, h);
    }
    char *copy = wq_malloc(len ? len : 1);
    if (!copy)
        return NULL;
    memcpy(copy, key, len);
    m->slots[i] = (struct slot){copy, h, len, 0};
    m->count++;
    if (created)
        *created = 1;
    return &m->slots[i].value;
}

int wq_keymap_del(wq_keymap *m, const char *key, size_t len)
{
    if (m->count == 0) /* the common case on a success path: nothing to hash */
        return 0;
    size_t i = find(m, key, len, wq_hash(key, len));
    if (!m->slots[i].key)
        return 0;
    wq_free(m->slots[i].key);
    m->slots[i].key = NULL;
    m->count--;
    /* Backward shift: pull later members of the probe run into the hole. */
    size_t hole = i;
    for (size_t j = (i + 1) & m->mask; m->slots[j].key; j = (j + 1) & m->mask) {
        size_t home = m->slots[j].hash & m->mask;
        /* j may move to hole if home is not cyclically within (hole, j]. */
        if (((j - home) & m->mask) >= ((j - hole) & m->mask)) {
            m->slots[hole] = m->slots[j];
            m->slots[j].key = NULL;
            hole = j;
        }
    }
    return 1;
}

void wq_keymap_prefetch(const wq_keymap *m, const char *key, size_t len)
{
    __builtin_prefetch(&m->slots[wq_hash(key, len) & m->mask]);
}

size_t wq_keymap_count(const wq_keymap *m)
{
    return m->count;
}

int wq_keymap_next_upto(const wq_keymap *m, size_t *pos, size_t limit, const char **key,
                        size_t *len, uint64_t *value)
{
    size_t end = *pos < m->mask + 1 && limit < m->mask + 1 - *pos ? *pos + limit : m->mask + 1;
    for (size_t i = *pos; i < end; i++) {
        if (m->slots[i].key) {
            *key = m->slots[i].key;
            *len = m->slots[i].len;
            if (value)
                *value = m->slots[i].value;
            *pos = i + 1;
            return 1;
        }
    }
    if (end <= m->mask) {
        *pos = end;
        return -1;
    }
    *pos = m->mask + 1;
    return 0;
}

int wq_keymap_next(const wq_keymap *m, size_t *pos, const char **key, size_t *len, uint64_t *value)
{
    return wq_keymap_next_upto(m, pos, SIZE_MAX, key, len, value);
}
