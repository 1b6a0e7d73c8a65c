/*
 * The PostgreSQL backend (SPEC section 8): many runners share queues
 * through one database, which is the authority; the local engine holds
 * only what this runner claimed. Asynchronous on the host's libevent loop
 * (libpq non-blocking, pipeline mode).
 */
#ifndef WQ_PG_H
#define WQ_PG_H

#include "store/backend.h"

#include <stddef.h>

/* Opens the database of opts->where for running (migrating the schema under an advisory
 * lock, registering this runner); WQ_E* code and a message in err on failure. */
int wq_pg_open(wq_backend **out, const wq_backend_opts *opts, char *err, size_t errlen);

#endif
