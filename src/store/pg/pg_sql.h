/*
 * The PostgreSQL schema's SQL, written in src/store/pg/sql/ and compiled
 * into the binary at build time (scripts/embed-sql.cmake writes the arrays).
 * Every "@S" stands for the quoted schema, every "@L" for its name as a
 * literal (wq_pg_sql() fills them in).
 */
#ifndef WQ_PG_SQL_H
#define WQ_PG_SQL_H

#include <stddef.h>

typedef struct wq_pg_sqlfile {
    const char *name; /* file name without .sql; NULL ends the array */
    const char *sql;  /* NUL-terminated */
    size_t len;
} wq_pg_sqlfile;

/* migrations/vN.sql, in N's order: the one named "vN" takes version N - 1 to N. */
extern const wq_pg_sqlfile wq_pg_migrations[];
/* functions/NN-*.sql in name order: every function, as this version of wqrun defines them. */
extern const wq_pg_sqlfile wq_pg_functions[];

#endif
