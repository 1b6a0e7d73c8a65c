/*
 * Plain SQLite reference for the persistence benchmark (issue 4): how fast
 * this machine's SQLite writes rows shaped like wqrun's `items` table when
 * nothing but SQLite runs. Rows go in as batches of 1000 per transaction
 * (BEGIN; 1000 x INSERT; COMMIT), in WAL mode, once with synchronous=NORMAL
 * and once with synchronous=FULL, with the pragmas wqrun itself sets. Then
 * the same rows are deleted by primary key, 1000 per transaction, since a
 * job that runs costs wqrun one row written and one row deleted.
 *
 * One result per line as "<name> <value> <unit>", machine and date first as
 * '#' comment lines. Each case runs REPEAT times on a fresh file in a
 * temporary directory (removed at exit) and reports the best run.
 *
 *   bench_sqlite [--rows N] [--dir DIR] [normal] [full]
 */
#define BENCH_NAME "bench_sqlite"
#include "bench_header.h"

#include <sqlite3.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_ROWS 1000000u
#define BATCH 1000u
#define REPEAT 3
#define KEY_LEN 16

static char tmpdir[4096]; /* removed by cleanup() */
static char dbpath[4200];

static void remove_db(void)
{
    static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
    char p[4300];
    if (!dbpath[0])
        return;
    for (size_t i = 0; i < sizeof suffix / sizeof *suffix; i++) {
        snprintf(p, sizeof p, "%s%s", dbpath, suffix[i]);
        unlink(p);
    }
}

static void cleanup(void)
{
    remove_db();
    if (tmpdir[0])
        rmdir(tmpdir);
}

static double unix_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void exec_sql(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK)
        bench_die("%s: %s", sql, err ? err : sqlite3_errmsg(db));
}

static sqlite3_stmt *prepare(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) != SQLITE_OK)
        bench_die("cannot prepare %s: %s", sql, sqlite3_errmsg(db));
    return st;
}

static void step(sqlite3 *db, sqlite3_stmt *st)
{
    if (sqlite3_step(st) != SQLITE_DONE)
        bench_die("step: %s", sqlite3_errmsg(db));
    sqlite3_reset(st);
}

/* The items table exactly as src/store/sqlite/schema.c creates it (schema version 1). */
static const char items_ddl[] = "CREATE TABLE items("
                                "  queue TEXT NOT NULL,"
                                "  key TEXT NOT NULL,"
                                "  payload TEXT,"
                                "  state TEXT NOT NULL,"
                                "  ready_at REAL,"
                                "  priority INTEGER NOT NULL DEFAULT 0,"
                                "  seq INTEGER NOT NULL DEFAULT 0,"
                                "  added_at REAL,"
                                "  updated_at REAL,"
                                "  PRIMARY KEY (queue, key)"
                                ") WITHOUT ROWID";

/* A fresh database in WAL mode with wqrun's pragmas (src/store/sqlite/store.c). */
static sqlite3 *open_db(const char *sync)
{
    sqlite3 *db;
    char pragmas[256];
    remove_db();
    if (sqlite3_open(dbpath, &db) != SQLITE_OK)
        bench_die("cannot open %s: %s", dbpath, sqlite3_errmsg(db));
    exec_sql(db, "PRAGMA journal_mode = WAL");
    snprintf(pragmas, sizeof pragmas,
             "PRAGMA synchronous = %s; PRAGMA cache_size = -65536;"
             " PRAGMA wal_autocheckpoint = 10000; PRAGMA journal_size_limit = 67108864",
             sync);
    exec_sql(db, pragmas);
    exec_sql(db, items_ddl);
    return db;
}

struct result {
    double insert_s, delete_s;
};

/* One run: rows inserted in batches of BATCH, then deleted the same way. */
static struct result run_once(const char *sync, unsigned rows, char (*keys)[KEY_LEN])
{
    sqlite3 *db = open_db(sync);
    sqlite3_stmt *begin = prepare(db, "BEGIN IMMEDIATE");
    sqlite3_stmt *commit = prepare(db, "COMMIT");
    sqlite3_stmt *ins = prepare(db, "INSERT INTO items(queue, key, payload, state, ready_at,"
                                    " priority, seq, added_at, updated_at)"
                                    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
    sqlite3_stmt *del = prepare(db, "DELETE FROM items WHERE queue = ?1 AND key = ?2");
    struct result r;
    double now = unix_now();

    double t0 = bench_wall();
    for (unsigned i = 0; i < rows;) {
        step(db, begin);
        for (unsigned end = i + BATCH < rows ? i + BATCH : rows; i < end; i++) {
            sqlite3_bind_text(ins, 1, "persist", -1, SQLITE_STATIC);
            sqlite3_bind_text(ins, 2, keys[i], -1, SQLITE_STATIC);
            sqlite3_bind_null(ins, 3);
            sqlite3_bind_text(ins, 4, "queued", -1, SQLITE_STATIC);
            sqlite3_bind_null(ins, 5);
            sqlite3_bind_int(ins, 6, 0);
            sqlite3_bind_int64(ins, 7, (sqlite3_int64)i + 1);
            sqlite3_bind_double(ins, 8, now);
            sqlite3_bind_double(ins, 9, now);
            step(db, ins);
        }
        step(db, commit);
    }
    double t1 = bench_wall();
    for (unsigned i = 0; i < rows;) {
        step(db, begin);
        for (unsigned end = i + BATCH < rows ? i + BATCH : rows; i < end; i++) {
            sqlite3_bind_text(del, 1, "persist", -1, SQLITE_STATIC);
            sqlite3_bind_text(del, 2, keys[i], -1, SQLITE_STATIC);
            step(db, del);
        }
        step(db, commit);
    }
    double t2 = bench_wall();
    r.insert_s = t1 - t0;
    r.delete_s = t2 - t1;

    sqlite3_finalize(begin);
    sqlite3_finalize(commit);
    sqlite3_finalize(ins);
    sqlite3_finalize(del);
    sqlite3_close(db);
    remove_db();
    return r;
}

static void report(const char *name, double value, const char *unit, const double *runs)
{
    printf("%s %.0f %s\n", name, value, unit);
    printf("#   %s runs:", name);
    for (int i = 0; i < REPEAT; i++)
        printf(" %.0f", runs[i]);
    printf("\n");
}

static void run_case(const char *mode, const char *sync, unsigned rows, char (*keys)[KEY_LEN])
{
    double ins[REPEAT], del[REPEAT], both[REPEAT];
    double best_ins = 0, best_del = 0, best_both = 0;
    char name[128];
    for (int i = 0; i < REPEAT; i++) {
        struct result r = run_once(sync, rows, keys);
        ins[i] = rows / r.insert_s;
        del[i] = rows / r.delete_s;
        both[i] = rows / (r.insert_s + r.delete_s);
        best_ins = ins[i] > best_ins ? ins[i] : best_ins;
        best_del = del[i] > best_del ? del[i] : best_del;
        best_both = both[i] > best_both ? both[i] : best_both;
    }
    snprintf(name, sizeof name, "sqlite_insert_batch%u_%s", BATCH, mode);
    report(name, best_ins, "rows/s", ins);
    snprintf(name, sizeof name, "sqlite_delete_batch%u_%s", BATCH, mode);
    report(name, best_del, "rows/s", del);
    snprintf(name, sizeof name, "sqlite_insert_then_delete_batch%u_%s", BATCH, mode);
    report(name, best_both, "rows/s", both);
    fflush(stdout);
}

static void print_machine(unsigned rows)
{
    bench_print_header("bench_sqlite (plain SQLite reference for the persistence benchmark)");
    printf("# sqlite %s; file in %s\n", sqlite3_libversion(), tmpdir);
    printf("# %u rows shaped like wqrun's items table (WITHOUT ROWID, key = decimal 1..N),"
           " %u rows per transaction, WAL, wqrun's pragmas\n",
           rows, BATCH);
    printf("# repeat: each case runs %d times on a fresh file; best run reported\n", REPEAT);
}

int main(int argc, char **argv)
{
    unsigned rows = DEFAULT_ROWS;
    const char *dir = getenv("TMPDIR");
    char **cases = argv + 1;
    int ncases = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            printf("usage: bench_sqlite [--rows N] [--dir DIR] [case...]\n"
                   "cases: normal (WAL, synchronous=NORMAL), full (WAL, synchronous=FULL);"
                   " default: both\n"
                   "Other arguments are ignored (scripts/bench.sh passes its own to every"
                   " bench program).\n");
            return 0;
        }
        if (strcmp(argv[i], "--rows") == 0 && i + 1 < argc) {
            char *end;
            unsigned long v = strtoul(argv[++i], &end, 10);
            if (*end || v == 0 || v > 100000000ul)
                bench_die("--rows needs a count between 1 and 100000000");
            rows = (unsigned)v;
        } else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) {
            dir = argv[++i];
        } else if (argv[i][0] == '-') {
            bench_die("unknown option or missing value: %s (see --help)", argv[i]);
        } else {
            cases[ncases++] = argv[i];
        }
    }
    /* Case names of other bench programs select nothing here, as in bench_engine. */
    int want_normal = bench_selected(ncases, cases, "normal");
    int want_full = bench_selected(ncases, cases, "full");
    if (!want_normal && !want_full)
        return 0;

    snprintf(tmpdir, sizeof tmpdir, "%s/wq-bench-sqlite.XXXXXX", dir && *dir ? dir : "/tmp");
    if (!mkdtemp(tmpdir)) {
        tmpdir[0] = '\0';
        bench_die("cannot create a temporary directory under %s", dir && *dir ? dir : "/tmp");
    }
    atexit(cleanup);
    snprintf(dbpath, sizeof dbpath, "%s/items.db", tmpdir);

    char(*keys)[KEY_LEN] = malloc((size_t)rows * KEY_LEN);
    if (!keys)
        bench_die("out of memory");
    for (unsigned i = 0; i < rows; i++)
        snprintf(keys[i], KEY_LEN, "%u", i + 1);

    print_machine(rows);
    if (want_normal)
        run_case("normal", "NORMAL", rows, keys);
    if (want_full)
        run_case("full", "FULL", rows, keys);
    free(keys);
    return 0;
}
