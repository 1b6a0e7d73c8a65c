/*
 * Picks the backend a runner's --db names: a postgres:// or postgresql://
 * URL opens PostgreSQL (src/store/pg/), anything else is a SQLite state
 * file (src/store/sqlite/).
 */
#include "store/backend.h"

#include "store/pg/pg.h"
#include "store/sqlite/store.h"

#include <string.h>

int wq_backend_is_pg(const char *where)
{
    return where &&
           (strncmp(where, "postgres://", 11) == 0 || strncmp(where, "postgresql://", 13) == 0);
}

int wq_backend_open(wq_backend **out, const wq_backend_opts *opts, char *err, size_t errlen)
{
    *out = NULL;
    if (wq_backend_is_pg(opts->where))
        return wq_pg_open(out, opts, err, errlen);
    wq_store *s;
    int r = wq_store_open(&s, opts->where, opts->sync, &opts->tb, err, errlen);
    if (r < 0)
        return r;
    wq_store_set_event_base(s, opts->event_base);
    *out = (wq_backend *)(void *)s; /* a wq_store starts with its wq_backend */
    return 0;
}
