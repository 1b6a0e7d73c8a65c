/*
 * Placeholder until the PostgreSQL backend lands: refuses to open.
 */
#include "store/pg/pg.h"

#include "engine/common.h"

#include <stdio.h>

int wq_pg_open(wq_backend **out, const wq_backend_opts *opts, char *err, size_t errlen)
{
    (void)opts;
    *out = NULL;
    snprintf(err, errlen, "PostgreSQL is not supported by this build yet");
    return WQ_EINVAL;
}
