/*
 * The store against real SQLite files in a temporary directory, with a
 * fake engine clock and a fake timebase: open and refusal (foreign, newer
 * and damaged files), ownership, a file deleted or replaced while open,
 * group commit and coalescing, restore order and times, failures and dead
 * letters, the inbox, the add/status command lines, the migration of a
 * real version-1 file (fixtures/v1.db, made by fixtures/make_v1.lua), and
 * the version-2 rows: enqueued_at and groups, done rows, schedules.
 */
#include "store/sqlite/cli.h"
#include "store/sqlite/store.h"
#include "store/sqlite/store_int.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define UNIX0 1700000000.0

static char dir[64];
static char path[128];
static int64_t fake_ns;
static double unix_offset; /* added to the fake timebase: a "later run" */

static int64_t fake_now(void *ud)
{
    (void)ud;
    return fake_ns;
}

static const wq_clock clk = {fake_now, NULL};

static double tb_unix(void *ud, int64_t mono)
{
    (void)ud;
    return UNIX0 + unix_offset + (double)mono / 1e9;
}

static int64_t tb_mono(void *ud, double u)
{
    (void)ud;
    return (int64_t)llround((u - UNIX0 - unix_offset) * 1e9);
}

static const wq_timebase tb = {tb_unix, tb_mono, NULL};

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/wqstore-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/state.db", dir);
    fake_ns = 0;
    unix_offset = 0;
}

static void teardown(void)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

TestSuite(store, .init = setup, .fini = teardown);

/* ---- helpers ---- */

static wq_store *open_ok(void)
{
    wq_store *s = NULL;
    char err[512];
    int r = wq_store_open(&s, path, WQ_SYNC_NORMAL, &tb, err, sizeof err);
    cr_assert_eq(r, 0, "open failed: %s", err);
    return s;
}

/* An engine queue whose observer feeds the store. */
struct pq {
    wq_queue *q;
    wq_store_queue *sq;
};

static void observe(void *ud, wq_queue *q, wq_event ev, const char *key, size_t len)
{
    (void)q;
    struct pq *p = ud;
    if (key)
        wq_store_touch(p->sq, ev, key, len);
}

static void pq_attach(struct pq *p, wq_store *s, const char *name)
{
    p->q = wq_queue_new(&clk);
    cr_assert_not_null(p->q);
    p->sq = wq_store_attach(s, name, p->q);
    cr_assert_not_null(p->sq);
    wq_queue_set_observer(p->q, observe, p);
}

static void add(struct pq *p, const char *key, const char *payload, int prio)
{
    wq_add_opts o = {.payload = payload,
                     .paylen = payload ? strlen(payload) : 0,
                     .set_payload = payload != NULL,
                     .set_priority = 1,
                     .priority = prio};
    cr_assert_geq(wq_queue_add(p->q, key, strlen(key), &o), 0);
}

static void add_after(struct pq *p, const char *key, double seconds)
{
    cr_assert_geq(wq_queue_add_after(p->q, key, strlen(key), (int64_t)(seconds * 1e9), NULL), 0);
}

static const char *get(struct pq *p)
{
    static char buf[64];
    wq_item_info info;
    if (wq_queue_get(p->q, &info) < 0)
        return NULL;
    snprintf(buf, sizeof buf, "%.*s", (int)info.keylen, info.key);
    return buf;
}

static void done(struct pq *p, const char *key)
{
    cr_assert_eq(wq_queue_done(p->q, key, strlen(key)), 0);
}

static sqlite3 *peek(void)
{
    sqlite3 *db;
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    return db;
}

static int64_t qint(const char *sql)
{
    sqlite3 *db = peek();
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(db));
    int64_t v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

static double qdouble(const char *sql)
{
    sqlite3 *db = peek();
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s", sql);
    double v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_double(st, 0) : NAN;
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/* The first column of the first row as text ("NULL" for NULL), in a static buffer. */
static const char *qtext(const char *sql)
{
    static char buf[1024];
    sqlite3 *db = peek();
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s", sql);
    snprintf(buf, sizeof buf, "(no row)");
    if (sqlite3_step(st) == SQLITE_ROW) {
        const unsigned char *t = sqlite3_column_text(st, 0);
        snprintf(buf, sizeof buf, "%s", t ? (const char *)t : "NULL");
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return buf;
}

static void sql(const char *s)
{
    sqlite3 *db = peek();
    char *err = NULL;
    cr_assert_eq(sqlite3_exec(db, s, NULL, NULL, &err), SQLITE_OK, "%s: %s", s, err);
    sqlite3_close(db);
}

static char *slurp(const char *p, size_t *len)
{
    struct stat st;
    cr_assert_eq(stat(p, &st), 0, "%s", p);
    FILE *f = fopen(p, "rb");
    cr_assert_not_null(f);
    char *buf = malloc((size_t)st.st_size + 1);
    cr_assert_not_null(buf);
    *len = fread(buf, 1, (size_t)st.st_size, f);
    cr_assert_eq(*len, (size_t)st.st_size);
    fclose(f);
    return buf;
}

/* Whether the file at p holds exactly len bytes of want. */
static int same_bytes(const char *p, const char *want, size_t len)
{
    size_t n;
    char *now = slurp(p, &n);
    int same = n == len && memcmp(now, want, len) == 0;
    free(now);
    return same;
}

static int exists(const char *suffix)
{
    char p[256];
    snprintf(p, sizeof p, "%s%s", path, suffix);
    return access(p, F_OK) == 0;
}

static void make_foreign_db(const char *setup_sql)
{
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db, setup_sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
}

static int cli(int (*fn)(int, char **, FILE *, FILE *), char *out, size_t outlen, int argc, ...);

/* Opening path must fail with code, name the file, and leave its bytes alone. */
static void assert_refused_unchanged(int code, const char *needle)
{
    size_t n0, n1;
    char *before = slurp(path, &n0);
    wq_store *s = NULL;
    char err[512] = "";
    cr_assert_eq(wq_store_open(&s, path, WQ_SYNC_NORMAL, &tb, err, sizeof err), code, "%s", err);
    cr_assert_null(s);
    cr_assert(strstr(err, path), "message should name the file: %s", err);
    if (needle)
        cr_assert(strstr(err, needle), "message should say '%s': %s", needle, err);
    char *after = slurp(path, &n1);
    cr_assert_eq(n0, n1);
    cr_assert(memcmp(before, after, n0) == 0, "the refused file was modified");
    cr_assert(!exists("-wal") && !exists("-journal"), "a journal was created next to it");
    free(before);
    free(after);
}

/* ---- open, format, ownership ---- */

Test(store, open_creates_the_schema_with_version_application_id_and_wal)
{
    wq_store *s = open_ok();
    cr_assert_eq(qint("PRAGMA user_version"), WQ_STORE_VERSION);
    cr_assert_eq(qint("PRAGMA application_id"), WQ_STORE_APP_ID);
    cr_assert_str_eq(qtext("PRAGMA journal_mode"), "wal");
    cr_assert_eq(qint("SELECT count(*) FROM sqlite_master WHERE name IN"
                      " ('items', 'failures', 'dead', 'inbox', 'meta', 'queues', 'pending',"
                      " 'done', 'schedules')"),
                 9);
    cr_assert_eq(qint("SELECT value FROM meta WHERE name = 'owner_pid'"), getpid());
    wq_store_close(s);
    cr_assert_eq(qint("SELECT count(*) FROM meta WHERE name = 'owner_pid'"), 0);
    /* Reopening an existing file works and keeps the version. */
    s = open_ok();
    cr_assert_eq(qint("PRAGMA user_version"), WQ_STORE_VERSION);
    wq_store_close(s);
}

static int synchronous_of(wq_store *s)
{
    sqlite3_stmt *st;
    int v = -1;
    sqlite3_prepare_v2(s->db, "PRAGMA synchronous", -1, &st, NULL);
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return v;
}

Test(store, sync_levels_map_to_sqlite_synchronous_normal_and_full)
{
    wq_store *s = open_ok();
    cr_assert_eq(synchronous_of(s), 1); /* NORMAL */
    wq_store_close(s);
    char err[256];
    cr_assert_eq(wq_store_open(&s, path, WQ_SYNC_FULL, NULL, err, sizeof err), 0, "%s", err);
    cr_assert_eq(synchronous_of(s), 2); /* FULL */
    wq_store_close(s);
}

Test(store, a_garbage_file_is_refused_and_left_unchanged)
{
    FILE *f = fopen(path, "wb");
    for (int i = 0; i < 5000; i++)
        fputc((i * 7919) % 251, f);
    fclose(f);
    assert_refused_unchanged(WQ_EFORMAT, "not a wqrun state file");
}

Test(store, a_text_file_is_refused_and_left_unchanged)
{
    FILE *f = fopen(path, "wb");
    fputs("this is my shopping list\n", f);
    fclose(f);
    assert_refused_unchanged(WQ_EFORMAT, "not a wqrun state file");
}

Test(store, another_applications_database_is_refused_and_left_unchanged)
{
    make_foreign_db("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT);"
                    "INSERT INTO notes(body) VALUES ('keep me');");
    assert_refused_unchanged(WQ_EFORMAT, "another application");
    cr_assert_str_eq(qtext("PRAGMA journal_mode"), "delete");
}

Test(store, another_applications_wal_database_is_refused_without_a_trace)
{
    make_foreign_db("PRAGMA journal_mode = WAL; CREATE TABLE t(x); INSERT INTO t VALUES (1);");
    assert_refused_unchanged(WQ_EFORMAT, "another application");
    cr_assert(!exists("-shm"), "no -shm file is left next to it");
}

Test(store, a_database_with_a_foreign_application_id_is_refused)
{
    make_foreign_db("PRAGMA application_id = 1234;");
    assert_refused_unchanged(WQ_EFORMAT, "application_id 1234");
}

Test(store, a_newer_schema_version_is_refused_and_left_unchanged)
{
    char setup_sql[128];
    snprintf(setup_sql, sizeof setup_sql,
             "PRAGMA application_id = %d; PRAGMA user_version = %d; CREATE TABLE items(x);",
             WQ_STORE_APP_ID, WQ_STORE_VERSION + 1);
    make_foreign_db(setup_sql);
    assert_refused_unchanged(WQ_EFORMAT, "newer");
    /* What a version-1 wqrun says of a version-2 file, one version later. */
    char want[128];
    snprintf(want, sizeof want, "state file of version %d, newer than this wqrun understands (%d)",
             WQ_STORE_VERSION + 1, WQ_STORE_VERSION);
    assert_refused_unchanged(WQ_EFORMAT, want);
    char out[1024];
    cr_assert_eq(cli(wq_store_cli_add_io, out, sizeof out, 4, "--db", path, "jobs", "k"), 1);
    cr_assert(strstr(out, want), "%s", out);
    cr_assert_eq(cli(wq_store_cli_status_io, out, sizeof out, 2, "--db", path), 1);
    cr_assert(strstr(out, want), "%s", out);
}

Test(store, an_empty_file_is_adopted)
{
    FILE *f = fopen(path, "wb");
    fclose(f);
    wq_store *s = open_ok();
    wq_store_close(s);
    cr_assert_eq(qint("PRAGMA application_id"), WQ_STORE_APP_ID);
}

Test(store, an_unwritable_location_is_an_io_error_naming_the_file)
{
    snprintf(path, sizeof path, "%s/no/such/dir/state.db", dir);
    wq_store *s = NULL;
    char err[512] = "";
    cr_assert_eq(wq_store_open(&s, path, WQ_SYNC_NORMAL, &tb, err, sizeof err), WQ_EIO);
    cr_assert(strstr(err, path), "%s", err);
    cr_assert(strstr(err, "No such file"), "%s", err);
}

Test(store, a_second_open_in_the_same_process_is_busy_and_names_the_pid)
{
    wq_store *s = open_ok();
    wq_store *s2 = NULL;
    char err[512] = "", pid[32];
    cr_assert_eq(wq_store_open(&s2, path, WQ_SYNC_NORMAL, &tb, err, sizeof err), WQ_EBUSY);
    cr_assert_null(s2);
    snprintf(pid, sizeof pid, "pid %d", (int)getpid());
    cr_assert(strstr(err, pid) && strstr(err, path), "%s", err);
    wq_store_close(s);
    s = open_ok(); /* released at close */
    wq_store_close(s);
}

/*
 * The second process of the test below: the test binary run again with
 * WQ_TEST_OPEN_CHILD=FD:PATH, before Criterion's main. A plain fork() child
 * of this multi-threaded process (the store's checkpointer thread) could
 * deadlock on a lock a thread held at the fork (seen under ASan); an exec'd
 * one starts clean.
 */
__attribute__((constructor)) static void open_child(void)
{
    const char *spec = getenv("WQ_TEST_OPEN_CHILD");
    if (!spec)
        return;
    int fd = atoi(spec);
    const char *p = strchr(spec, ':');
    wq_store *s2 = NULL;
    char err[512] = "";
    int r = p ? wq_store_open(&s2, p + 1, WQ_SYNC_NORMAL, &tb, err, sizeof err) : -1;
    dprintf(fd, "%d %s", r, err);
    _exit(0);
}

Test(store, a_second_runner_process_is_busy_and_names_the_owner_pid)
{
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "jobs");
    add(&p, "a", NULL, 0);
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    char spec[256];
    snprintf(spec, sizeof spec, "WQ_TEST_OPEN_CHILD=%d:%s", fds[1], path);
    pid_t child = fork();
    cr_assert_geq(child, 0);
    if (child == 0) { /* only async-signal-safe calls until the exec */
        close(fds[0]);
        char *argv[] = {"store_test_store", NULL};
        char *envp[] = {spec, NULL};
        execve("/proc/self/exe", argv, envp);
        _exit(127);
    }
    close(fds[1]);
    char buf[600] = "";
    ssize_t n = read(fds[0], buf, sizeof buf - 1);
    close(fds[0]);
    waitpid(child, NULL, 0);
    cr_assert_gt(n, 0);
    buf[n] = 0;
    char want[64];
    snprintf(want, sizeof want, "%d ", WQ_EBUSY);
    cr_assert(strncmp(buf, want, strlen(want)) == 0, "%s", buf);
    snprintf(want, sizeof want, "pid %d on ", (int)getpid());
    cr_assert(strstr(buf, want) && strstr(buf, path), "%s", buf);
    /* The owner is unharmed, and other connections still read and write. */
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_eq(qint("SELECT count(*) FROM items"), 1);
    sql("INSERT INTO inbox(queue, key) VALUES ('jobs', 'from-shell')");
    wq_store_close(s);
    wq_queue_free(p.q);
}

/* ---- damaged files ---- */

/* Writes a state file holding n items of queue "jobs" through the store, and closes it. */
static void fill_file(int n)
{
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "jobs");
    for (int i = 0; i < n; i++) {
        char key[32], payload[64];
        snprintf(key, sizeof key, "key-%06d", i);
        snprintf(payload, sizeof payload, "{\"n\":%d,\"pad\":\"%s\"}", i, "xxxxxxxxxxxxxxxxxxxx");
        add(&p, key, payload, 0);
    }
    cr_assert_eq(wq_store_flush(s), 0, "%s", wq_store_errmsg(s));
    wq_store_close(s);
    wq_queue_free(p.q);
    cr_assert(!exists("-wal") && !exists("-shm"), "a clean close leaves the file alone");
}

/* The first row of sql run on path without locks or side files (the file may be damaged). */
static const char *qtext_immutable(const char *sql_text)
{
    static char buf[1024];
    char uri[256];
    snprintf(uri, sizeof uri, "file:%s?immutable=1", path);
    sqlite3 *db;
    cr_assert_eq(sqlite3_open_v2(uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL),
                 SQLITE_OK);
    sqlite3_stmt *st;
    snprintf(buf, sizeof buf, "(error)");
    if (sqlite3_prepare_v2(db, sql_text, -1, &st, NULL) == SQLITE_OK) {
        int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW)
            snprintf(buf, sizeof buf, "%s", (const char *)sqlite3_column_text(st, 0));
        else
            snprintf(buf, sizeof buf, "(error %d: %s)", rc, sqlite3_errmsg(db));
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return buf;
}

/*
 * A leaf page of the items b-tree, found from its root page (sqlite_schema)
 * by following the middle child of each interior page: items is WITHOUT
 * ROWID, so its pages are index b-tree pages (0x02 interior, 0x0a leaf).
 */
static long items_leaf_page(long *page_size)
{
    *page_size = (long)qint("PRAGMA page_size");
    long pg = (long)qint("SELECT rootpage FROM sqlite_schema WHERE name = 'items'");
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    unsigned char *page = malloc((size_t)*page_size);
    for (int depth = 0; depth < 10; depth++) {
        cr_assert_eq(fseek(f, (pg - 1) * *page_size, SEEK_SET), 0);
        cr_assert_eq(fread(page, 1, (size_t)*page_size, f), (size_t)*page_size);
        if (page[0] == 0x0a)
            break;
        cr_assert_eq(page[0], 0x02, "page %ld of items has type %d", pg, page[0]);
        unsigned ncells = (unsigned)page[3] << 8 | page[4];
        unsigned at = 12 + 2 * (ncells / 2);
        unsigned cell = (unsigned)page[at] << 8 | page[at + 1];
        pg = (long)page[cell] << 24 | (long)page[cell + 1] << 16 | (long)page[cell + 2] << 8 |
             page[cell + 3];
    }
    cr_assert_eq(page[0], 0x0a, "found no leaf page of items");
    free(page);
    fclose(f);
    return pg;
}

/* Overwrites n bytes at offset off of page pg with byte b. */
static void damage(long pg, long page_size, long off, int n, int b)
{
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f);
    cr_assert_eq(fseek(f, (pg - 1) * page_size + off, SEEK_SET), 0);
    for (int i = 0; i < n; i++)
        fputc(b, f);
    fclose(f);
}

Test(store, a_damaged_state_file_is_refused_at_open_and_left_unchanged)
{
    fill_file(3000);
    long page_size, pg = items_leaf_page(&page_size);
    cr_assert_gt(pg, 2);
    cr_assert_str_eq(qtext_immutable("PRAGMA integrity_check"), "ok");
    /* Six bytes of the leaf's cell pointer array now point past the end of the page. */
    damage(pg, page_size, 8, 6, 0xff);
    const char *ic = qtext_immutable("PRAGMA integrity_check");
    cr_assert_str_neq(ic, "ok", "integrity_check sees the damage");

    assert_refused_unchanged(WQ_EFORMAT, "damaged");
    cr_assert(!exists("-shm"), "no -shm file is left next to it");
    char err[512] = "";
    wq_store *s = NULL;
    wq_store_open(&s, path, WQ_SYNC_NORMAL, &tb, err, sizeof err);
    cr_assert(strstr(err, "quick_check") && strstr(err, "out of range"), "says what: %s", err);
}

Test(store, cli_add_and_status_refuse_a_damaged_file_with_status_1_and_leave_it_alone)
{
    fill_file(3000);
    long page_size, pg = items_leaf_page(&page_size);
    damage(pg, page_size, 8, 6, 0xff);
    size_t n0;
    char *before = slurp(path, &n0);
    char out[2048];
    cr_assert_eq(cli(wq_store_cli_add_io, out, sizeof out, 4, "--db", path, "jobs", "k"), 1, "%s",
                 out);
    cr_assert(strstr(out, path) && strstr(out, "damaged"), "%s", out);
    cr_assert_eq(cli(wq_store_cli_status_io, out, sizeof out, 2, "--db", path), 1, "%s", out);
    cr_assert(strstr(out, path) && strstr(out, "damaged"), "%s", out);
    cr_assert(same_bytes(path, before, n0), "the damaged file was modified");
    cr_assert(!exists("-wal") && !exists("-shm") && !exists("-journal"));
    free(before);
}

static void count_item(void *ud, const wq_restored *r)
{
    (void)r;
    ++*(int *)ud;
}

static int take_nothing(void *ud, const wq_inbox_row *row)
{
    (void)ud, (void)row;
    return 0;
}

Test(store, damage_met_by_the_restore_fails_it_and_nothing_more_is_written)
{
    fill_file(3000);
    long page_size, pg = items_leaf_page(&page_size);
    wq_store *s = open_ok(); /* the file is sound now: its check passes */
    struct pq p;
    pq_attach(&p, s, "jobs");
    /* Damaged behind the store's back (an invalid page type: reading the page fails), and a
     * write by another connection so that the store reads the items pages again. */
    damage(pg, page_size, 0, 1, 0x00);
    sql("INSERT INTO inbox(queue, key) VALUES ('other', 'x')");
    size_t n0;
    char *before = slurp(path, &n0);

    int items = 0;
    cr_assert_eq(wq_store_restore(p.sq, count_item, NULL, NULL, &items), WQ_EFORMAT);
    cr_assert_lt(items, 3000);
    const char *msg = wq_store_errmsg(s);
    cr_assert(strstr(msg, path) && strstr(msg, "damaged") && strstr(msg, "restore queue 'jobs'"),
              "%s", msg);
    /* From now on the store refuses everything, with the same message. */
    cr_assert_eq(wq_store_check_path(s), WQ_EFORMAT);
    add(&p, "new", NULL, 0);
    cr_assert_eq(wq_store_flush(s), WQ_EFORMAT);
    cr_assert(strstr(wq_store_errmsg(s), "damaged"), "%s", wq_store_errmsg(s));
    cr_assert_eq(wq_store_poll_inbox(s, take_nothing, NULL), WQ_EFORMAT);
    wq_store_close(s); /* no flush, no owner cleanup, no checkpoint */
    wq_queue_free(p.q);
    cr_assert(same_bytes(path, before, n0), "the damaged file was written to");
    free(before);
}

/* ---- the file deleted or replaced while open ---- */

Test(store, a_state_file_deleted_while_open_fails_the_check_and_every_flush)
{
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "jobs");
    add(&p, "a", NULL, 0);
    cr_assert_eq(wq_store_check_path(s), 0);
    cr_assert_eq(wq_store_flush(s), 0);

    cr_assert_eq(unlink(path), 0);
    add(&p, "b", NULL, 0);
    cr_assert_eq(wq_store_flush(s), WQ_EIO, "a commit into the deleted file is no success");
    const char *msg = wq_store_errmsg(s);
    cr_assert(strstr(msg, path) && strstr(msg, "was deleted or replaced while running"), "%s", msg);
    cr_assert(strstr(msg, "no file at that path"), "%s", msg);
    cr_assert_eq(wq_store_check_path(s), WQ_EIO, "it stays failed");
    cr_assert(strstr(wq_store_errmsg(s), "was deleted or replaced while running"), "%s",
              wq_store_errmsg(s));
    wq_store_close(s);
    wq_queue_free(p.q);
    cr_assert(!exists(""), "closing does not bring the file back");
}

Test(store, the_check_alone_notices_a_deleted_state_file)
{
    wq_store *s = open_ok();
    cr_assert_eq(wq_store_check_path(s), 0);
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(wq_store_check_path(s), WQ_EIO);
    const char *msg = wq_store_errmsg(s);
    cr_assert(strstr(msg, path) && strstr(msg, "was deleted or replaced while running"), "%s", msg);
    wq_store_close(s);
    cr_assert(!exists(""), "closing does not bring the file back");
}

Test(store, a_state_file_replaced_while_open_fails_the_check_and_the_new_file_is_left_alone)
{
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "jobs");
    add(&p, "a", NULL, 0);
    cr_assert_eq(wq_store_flush(s), 0);

    char other[256];
    snprintf(other, sizeof other, "%s/other.db", dir);
    FILE *f = fopen(other, "wb");
    fputs("someone else's file\n", f);
    fclose(f);
    cr_assert_eq(rename(other, path), 0);
    add(&p, "b", NULL, 0);
    cr_assert_eq(wq_store_flush(s), WQ_EIO);
    cr_assert(strstr(wq_store_errmsg(s), "was deleted or replaced while running") &&
                  strstr(wq_store_errmsg(s), path),
              "%s", wq_store_errmsg(s));
    cr_assert_eq(wq_store_check_path(s), WQ_EIO);
    cr_assert(strstr(wq_store_errmsg(s), "another file is at that path"), "%s", wq_store_errmsg(s));
    wq_store_close(s);
    wq_queue_free(p.q);
    const char *want = "someone else's file\n";
    cr_assert(same_bytes(path, want, strlen(want)), "the file now at the path was touched");
}

/* ---- group commit ---- */

Test(store, flush_writes_state_payload_priority_seq_and_ready_at)
{
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "jobs");
    fake_ns = 5 * WQ_NS_PER_S;
    add(&p, "a", "{\"n\":1}", 0);
    add(&p, "b", "\"text\"", 5);
    add(&p, "c", NULL, 0);
    add_after(&p, "w", 10);
    cr_assert_str_eq(get(&p), "b");
    cr_assert(wq_store_dirty(s));
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert(!wq_store_dirty(s));

    cr_assert_str_eq(qtext("SELECT state FROM items WHERE key = 'a'"), "queued");
    cr_assert_str_eq(qtext("SELECT payload FROM items WHERE key = 'a'"), "{\"n\":1}");
    cr_assert_str_eq(qtext("SELECT json_extract(payload, '$.n') FROM items WHERE key = 'a'"), "1");
    cr_assert_str_eq(qtext("SELECT state FROM items WHERE key = 'b'"), "processing");
    cr_assert_eq(qint("SELECT priority FROM items WHERE key = 'b'"), 5);
    cr_assert_str_eq(qtext("SELECT payload FROM items WHERE key = 'c'"), "NULL");
    cr_assert_str_eq(qtext("SELECT state FROM items WHERE key = 'w'"), "waiting");
    cr_assert_float_eq(qdouble("SELECT ready_at FROM items WHERE key = 'w'"), UNIX0 + 15, 1e-6);
    cr_assert_str_eq(qtext("SELECT ready_at FROM items WHERE key = 'a'"), "NULL");
    cr_assert_float_eq(qdouble("SELECT added_at FROM items WHERE key = 'a'"), UNIX0 + 5, 1e-6);
    cr_assert(qint("SELECT seq FROM items WHERE key = 'a'") <
                  qint("SELECT seq FROM items WHERE key = 'c'"),
              "FIFO order is recorded by seq");
    cr_assert_str_eq(qtext("SELECT name FROM queues"), "jobs");

    /* Re-added while processing: 'queued' (it runs again), as SPEC section 4 says. */
    add(&p, "b", NULL, 9);
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_str_eq(qtext("SELECT state FROM items WHERE key = 'b'"), "queued");
    /* Done: the row leaves only now. */
    done(&p, "b");
    cr_assert_eq(qint("SELECT count(*) FROM items WHERE key = 'b'"), 1);
    cr_assert_str_eq(get(&p), "b"); /* the re-add */
    done(&p, "b");
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_eq(qint("SELECT count(*) FROM items WHERE key = 'b'"), 0);

    wq_store_stats st;
    wq_store_get_stats(s, &st);
    cr_assert_eq(st.commits, 3);
    cr_assert_eq(st.commit_latency.count, 3);
    cr_assert_gt(st.rows_written, 0);
    wq_store_close(s);
    wq_queue_free(p.q);
}

Test(store, a_key_added_and_done_within_one_window_costs_no_row)
{
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "jobs");
    add(&p, "keep", NULL, 0);
    cr_assert_eq(wq_store_flush(s), 0);
    wq_store_stats st0, st1;
    wq_store_get_stats(s, &st0);

    add(&p, "x", "{}", 0);
    add(&p, "y", "{}", 0);
    cr_assert_str_eq(get(&p), "keep");
    done(&p, "keep");
    cr_assert_str_eq(get(&p), "x");
    done(&p, "x");
    cr_assert_str_eq(get(&p), "y");
    done(&p, "y");
    cr_assert_eq(wq_store_flush(s), 0);
    wq_store_get_stats(s, &st1);
    /* Only the row that existed is deleted; x and y never touch the file. */
    cr_assert_eq(st1.rows_written - st0.rows_written, 1);
    cr_assert_eq(st1.deletes_skipped - st0.deletes_skipped, 2);
    cr_assert_eq(qint("SELECT count(*) FROM items"), 0);
    wq_store_close(s);
    wq_queue_free(p.q);
}

Test(store, many_changes_to_one_key_coalesce_into_one_row_write)
{
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "jobs");
    char payload[32];
    for (int i = 0; i < 100; i++) {
        snprintf(payload, sizeof payload, "{\"v\":%d}", i);
        add(&p, "k", payload, 0);
    }
    cr_assert_eq(wq_store_flush(s), 0);
    wq_store_stats st;
    wq_store_get_stats(s, &st);
    cr_assert_eq(st.rows_written, 1);
    cr_assert_str_eq(qtext("SELECT payload FROM items WHERE key = 'k'"), "{\"v\":99}");
    wq_store_close(s);
    wq_queue_free(p.q);
}

Test(store, clearing_a_failure_count_that_was_never_written_costs_nothing)
{
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "jobs");
    cr_assert_eq(wq_store_flush(s), 0); /* the queue's name */
    wq_store_failures(p.sq, "k", 1, 0, NULL);
    cr_assert(!wq_store_dirty(s));
    wq_store_failures(p.sq, "k", 1, 2, "boom");
    wq_store_failures(p.sq, "k", 1, 0, NULL);
    cr_assert_eq(wq_store_flush(s), 0);
    wq_store_stats st;
    wq_store_get_stats(s, &st);
    cr_assert_eq(st.rows_written, 0);
    wq_store_close(s);
    wq_queue_free(p.q);
}

Test(store, a_failed_flush_keeps_the_pending_set_and_a_later_flush_writes_it)
{
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "jobs");
    cr_assert_eq(wq_store_flush(s), 0);
    /* Make the file full: no page may be added. */
    int64_t pages = 0;
    sqlite3_stmt *st;
    sqlite3_prepare_v2(s->db, "PRAGMA page_count", -1, &st, NULL);
    if (sqlite3_step(st) == SQLITE_ROW)
        pages = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    char pragma[64];
    snprintf(pragma, sizeof pragma, "PRAGMA max_page_count = %lld", (long long)pages);
    sqlite3_exec(s->db, pragma, NULL, NULL, NULL);
    char big[2000];
    memset(big, 'x', sizeof big - 3);
    big[0] = '"';
    big[sizeof big - 2] = '"';
    big[sizeof big - 1] = 0;
    for (int i = 0; i < 50; i++) {
        char key[16];
        snprintf(key, sizeof key, "k%d", i);
        add(&p, key, big, 0);
    }
    cr_assert_eq(wq_store_flush(s), WQ_EIO);
    cr_assert(strstr(wq_store_errmsg(s), "full") && strstr(wq_store_errmsg(s), path), "%s",
              wq_store_errmsg(s));
    cr_assert(wq_store_dirty(s));
    cr_assert_eq(qint("SELECT count(*) FROM items"), 0);
    sqlite3_exec(s->db, "PRAGMA max_page_count = 1000000", NULL, NULL, NULL);
    cr_assert_eq(wq_store_flush(s), 0, "%s", wq_store_errmsg(s));
    cr_assert_eq(qint("SELECT count(*) FROM items"), 50);
    wq_store_stats sst;
    wq_store_get_stats(s, &sst);
    cr_assert_eq(sst.flush_errors, 1);
    wq_store_close(s);
    wq_queue_free(p.q);
}

Test(store, a_write_lock_held_elsewhere_makes_flush_busy_and_nothing_is_lost)
{
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "jobs");
    sqlite3_busy_timeout(s->db, 10); /* the real budget is 5 s */
    sqlite3 *other = peek();
    cr_assert_eq(sqlite3_exec(other, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    add(&p, "a", NULL, 0);
    cr_assert_eq(wq_store_flush(s), WQ_EBUSY);
    cr_assert(strstr(wq_store_errmsg(s), "locked"), "%s", wq_store_errmsg(s));
    cr_assert(wq_store_dirty(s));
    cr_assert_eq(sqlite3_exec(other, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(other);
    cr_assert_eq(wq_store_flush(s), 0, "%s", wq_store_errmsg(s));
    cr_assert_eq(qint("SELECT count(*) FROM items"), 1);
    wq_store_close(s);
    wq_queue_free(p.q);
}

Test(store, a_detached_queue_keeps_its_rows)
{
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "jobs");
    add(&p, "a", NULL, 0);
    cr_assert_eq(wq_store_flush(s), 0);
    add(&p, "b", NULL, 0);
    wq_store_detach(p.sq);
    wq_queue_free(p.q);
    cr_assert_eq(wq_store_flush(s), 0);
    wq_store_close(s);
    cr_assert_eq(qint("SELECT count(*) FROM items"), 1);
}

Test(store, a_big_window_writes_and_deletes_rows_in_batches_as_one_at_a_time_would)
{
    wq_store *s = open_ok();
    struct pq a, b;
    pq_attach(&a, s, "a");
    pq_attach(&b, s, "b");
    char key[64], payload[32];
    fake_ns = 3 * WQ_NS_PER_S;
    /* More keys than a batch holds, of two queues in turn, and a remainder. */
    for (int i = 0; i < 3 * WQ_STORE_INSERT_BATCH + 5; i++) {
        snprintf(key, sizeof key, "k%03d", i);
        snprintf(payload, sizeof payload, "{\"i\":%d}", i);
        add(&a, key, payload, i % 3);
        add(&b, key, NULL, 0);
    }
    add_after(&a, "w", 10);
    cr_assert_eq(wq_store_flush(s), 0, "%s", wq_store_errmsg(s));
    int n = 3 * WQ_STORE_INSERT_BATCH + 5;
    wq_store_stats st;
    wq_store_get_stats(s, &st);
    cr_assert_eq(st.rows_written, (uint64_t)(2 * n + 1));
    cr_assert_eq(qint("SELECT count(*) FROM items WHERE queue = 'a' AND state = 'queued'"), n);
    cr_assert_eq(qint("SELECT count(*) FROM items WHERE queue = 'b' AND payload IS NULL"), n);
    cr_assert_str_eq(qtext("SELECT payload FROM items WHERE queue = 'a' AND key = 'k077'"),
                     "{\"i\":77}");
    cr_assert_eq(qint("SELECT priority FROM items WHERE queue = 'a' AND key = 'k077'"), 2);
    cr_assert_float_eq(qdouble("SELECT added_at FROM items WHERE queue = 'a' AND key = 'k077'"),
                       UNIX0 + 3, 1e-6);
    cr_assert_float_eq(qdouble("SELECT ready_at FROM items WHERE key = 'w'"), UNIX0 + 13, 1e-6);
    cr_assert_eq(qint("SELECT count(*) FROM items x JOIN items y ON x.queue = y.queue"
                      " AND x.key < y.key AND x.seq > y.seq WHERE x.key <> 'w' AND y.key <> 'w'"),
                 0, "seq follows the order of the adds");

    /* Finish most keys of both queues in turn, leaving a few processing: batched DELETEs per
     * queue, and a queue with fewer than a batch. */
    int finished_a = 0, finished_b = 0;
    for (int i = 0; i < n - 3; i++) {
        const char *k = get(&a);
        cr_assert_not_null(k);
        snprintf(key, sizeof key, "%s", k);
        done(&a, key);
        finished_a++;
        if (i < 5) {
            k = get(&b);
            snprintf(key, sizeof key, "%s", k);
            done(&b, key);
            finished_b++;
        }
    }
    cr_assert_not_null(get(&a));
    cr_assert_eq(wq_store_flush(s), 0, "%s", wq_store_errmsg(s));
    cr_assert_eq(qint("SELECT count(*) FROM items WHERE queue = 'a'"), n - finished_a + 1);
    cr_assert_eq(qint("SELECT count(*) FROM items WHERE queue = 'a' AND state = 'processing'"), 1);
    cr_assert_eq(qint("SELECT count(*) FROM items WHERE queue = 'b'"), n - finished_b);
    cr_assert_eq(qint("SELECT count(*) FROM items WHERE queue = 'b' AND key < 'k005'"), 0);
    wq_store_close(s);
    wq_queue_free(a.q);
    wq_queue_free(b.q);
}

Test(store, a_row_written_behind_the_runners_back_does_not_fail_a_batch_of_new_rows)
{
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "jobs");
    cr_assert_eq(wq_store_flush(s), 0);
    /* Against the rules (a runner owns the file), but it must not stop the runner. */
    sql("INSERT INTO items(queue, key, payload, state, seq) VALUES ('jobs', 'k5', '\"theirs\"',"
        " 'queued', 0)");
    char key[16];
    for (int i = 0; i < 2 * WQ_STORE_INSERT_BATCH; i++) {
        snprintf(key, sizeof key, "k%d", i);
        add(&p, key, "\"ours\"", 0);
    }
    cr_assert_eq(wq_store_flush(s), 0, "%s", wq_store_errmsg(s));
    cr_assert_eq(qint("SELECT count(*) FROM items"), 2 * WQ_STORE_INSERT_BATCH);
    cr_assert_eq(qint("SELECT count(*) FROM items WHERE payload = '\"ours\"'"),
                 2 * WQ_STORE_INSERT_BATCH);
    wq_store_close(s);
    wq_queue_free(p.q);
}

/* Checks that info's row holds what the engine says. */
static int row_matches(void *ud, const wq_item_info *info)
{
    sqlite3_stmt *st = ud;
    sqlite3_bind_text(st, 2, info->key, (int)info->keylen, SQLITE_STATIC);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "no row for %.*s", (int)info->keylen, info->key);
    const char *state = (const char *)sqlite3_column_text(st, 0);
    const char *want = info->state & WQ_ST_DIRTY        ? "queued"
                       : info->state & WQ_ST_PROCESSING ? "processing"
                                                        : "waiting";
    cr_assert_str_eq(state, want, "%.*s", (int)info->keylen, info->key);
    const char *payload = (const char *)sqlite3_column_text(st, 1);
    if (info->payload)
        cr_assert(payload && strlen(payload) == info->paylen &&
                  memcmp(payload, info->payload, info->paylen) == 0);
    else
        cr_assert_null(payload);
    cr_assert_eq(sqlite3_column_int(st, 2), info->priority);
    sqlite3_reset(st);
    return 0;
}

Test(store, a_random_run_keeps_the_items_table_equal_to_the_engine_after_every_flush)
{
    wq_store *s = open_ok();
    struct pq qs[2];
    pq_attach(&qs[0], s, "a");
    pq_attach(&qs[1], s, "b");
    uint64_t rng = 42;
    char key[64], payload[16];
    for (int round = 0; round < 60; round++) {
        int ops = (int)(rng % 3 == 0 ? 400 : 40);
        for (int op = 0; op < ops; op++) {
            rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
            uint32_t r = (uint32_t)(rng >> 33);
            struct pq *p = &qs[r & 1];
            snprintf(key, sizeof key, "k%u", (r >> 1) % 300);
            snprintf(payload, sizeof payload, "%u", r % 1000);
            switch ((r >> 12) % 8) {
            case 0:
            case 1: add(p, key, payload, (int)((r >> 16) % 3)); break;
            case 2: add(p, key, NULL, 0); break;
            case 3: add_after(p, key, (double)((r >> 16) % 5)); break;
            case 4: wq_queue_cancel_after(p->q, key, strlen(key)); break;
            case 5:
                fake_ns += WQ_NS_PER_S;
                wq_queue_fire_due(p->q);
                break;
            default: {
                const char *k = get(p);
                if (k && (r >> 16) % 4) {
                    snprintf(key, sizeof key, "%s", k);
                    done(p, key);
                }
            }
            }
        }
        cr_assert_eq(wq_store_flush(s), 0, "%s", wq_store_errmsg(s));
        sqlite3 *db = peek();
        sqlite3_stmt *st;
        cr_assert_eq(sqlite3_prepare_v2(db,
                                        "SELECT state, payload, priority FROM items"
                                        " WHERE queue = ?1 AND key = ?2",
                                        -1, &st, NULL),
                     SQLITE_OK);
        for (int i = 0; i < 2; i++) {
            char q[64];
            snprintf(q, sizeof q, "SELECT count(*) FROM items WHERE queue = '%s'", i ? "b" : "a");
            cr_assert_eq(qint(q), (int64_t)wq_queue_records(qs[i].q), "round %d", round);
            sqlite3_bind_text(st, 1, i ? "b" : "a", -1, SQLITE_STATIC);
            wq_queue_foreach(qs[i].q, row_matches, st);
        }
        sqlite3_finalize(st);
        sqlite3_close(db);
    }
    wq_store_close(s);
    wq_queue_free(qs[0].q);
    wq_queue_free(qs[1].q);
}

static void restore_into(void *ud, const wq_restored *r)
{
    struct pq *p = ud;
    wq_add_opts o = {.payload = r->payload,
                     .paylen = r->paylen,
                     .set_payload = r->payload != NULL,
                     .set_priority = 1,
                     .priority = r->priority};
    cr_assert_geq(wq_queue_add(p->q, r->key, r->keylen, &o), 0);
}

Test(store, a_queue_attached_again_is_read_from_its_new_engine_queue)
{
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "jobs");
    add(&p, "a", NULL, 0);
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_str_eq(get(&p), "a");
    done(&p, "a"); /* gone from this engine queue, not yet written */
    wq_store_detach(p.sq);
    wq_queue_free(p.q);

    /* The same name again: the new engine queue restores "a" from the file, so it stays. */
    struct pq p2;
    p2.q = wq_queue_new(&clk);
    p2.sq = wq_store_attach(s, "jobs", p2.q);
    cr_assert_eq(p2.sq, p.sq);
    wq_queue_set_observer(p2.q, observe, &p2);
    cr_assert_eq(wq_store_restore(p2.sq, restore_into, NULL, NULL, &p2), 1);
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_eq(qint("SELECT count(*) FROM items WHERE key = 'a'"), 1);
    wq_store_close(s);
    wq_queue_free(p2.q);
}

static int fail_alloc;
static void *failing_realloc(void *ud, void *ptr, size_t size)
{
    (void)ud;
    if (size == 0) {
        free(ptr);
        return NULL;
    }
    return fail_alloc ? NULL : realloc(ptr, size);
}

Test(store, a_touch_lost_to_out_of_memory_is_repaired_by_rewriting_the_queue)
{
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "jobs");
    add(&p, "a", NULL, 0);
    cr_assert_eq(wq_store_flush(s), 0);
    wq_queue_set_observer(p.q, NULL, NULL);
    add(&p, "b", "[1]", 0);
    wq_set_allocator(failing_realloc, NULL);
    fail_alloc = 1;
    wq_store_touch(p.sq, WQ_EV_QUEUED, "b", 1);
    fail_alloc = 0;
    wq_set_allocator(NULL, NULL);
    cr_assert(wq_store_dirty(s));
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_eq(qint("SELECT count(*) FROM items"), 2);
    cr_assert_str_eq(qtext("SELECT payload FROM items WHERE key = 'b'"), "[1]");
    wq_store_close(s);
    wq_queue_free(p.q);
}

/* ---- restore ---- */

struct restored {
    char keys[64][16];
    int queued[64], waiting[64];
    int64_t ready[64];
    int n;
    struct pq *into;
    char fail_key[16];
    int64_t requeues;
    char last_error[64];
    char dead_key[16], dead_payload[64], dead_error[64], dead_trace[64];
    int64_t attempts;
    double failed_at;
};

static void on_item(void *ud, const wq_restored *r)
{
    struct restored *c = ud;
    snprintf(c->keys[c->n], sizeof c->keys[0], "%.*s", (int)r->keylen, r->key);
    c->queued[c->n] = r->queued;
    c->waiting[c->n] = r->waiting;
    c->ready[c->n] = r->ready_at_mono;
    c->n++;
    if (!c->into)
        return;
    wq_add_opts o = {.payload = r->payload,
                     .paylen = r->paylen,
                     .set_payload = r->payload != NULL,
                     .set_priority = 1,
                     .priority = r->priority};
    if (r->queued)
        wq_queue_add(c->into->q, r->key, r->keylen, &o);
    if (r->waiting)
        wq_queue_add_at(c->into->q, r->key, r->keylen, r->ready_at_mono, &o);
}

static void on_fail(void *ud, const char *key, size_t len, int64_t requeues, const char *err)
{
    struct restored *c = ud;
    snprintf(c->fail_key, sizeof c->fail_key, "%.*s", (int)len, key);
    c->requeues = requeues;
    snprintf(c->last_error, sizeof c->last_error, "%s", err ? err : "NULL");
}

static void on_dead(void *ud, const wq_dead_row *d)
{
    struct restored *c = ud;
    snprintf(c->dead_key, sizeof c->dead_key, "%.*s", (int)d->keylen, d->key);
    snprintf(c->dead_payload, sizeof c->dead_payload, "%s", d->payload ? d->payload : "NULL");
    snprintf(c->dead_error, sizeof c->dead_error, "%s", d->error ? d->error : "NULL");
    snprintf(c->dead_trace, sizeof c->dead_trace, "%s", d->traceback ? d->traceback : "NULL");
    c->attempts = d->attempts;
    c->failed_at = d->failed_at;
}

/* Reopens the file as a new run and restores "jobs" into a fresh engine queue. */
static wq_store *rerun(struct pq *p, struct restored *c, int *n)
{
    wq_store *s = open_ok();
    pq_attach(p, s, "jobs");
    memset(c, 0, sizeof *c);
    c->into = p;
    *n = wq_store_restore(p->sq, on_item, on_fail, on_dead, c);
    cr_assert_geq(*n, 0, "%s", wq_store_errmsg(s));
    return s;
}

Test(store, restore_keeps_priority_and_fifo_order)
{
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "jobs");
    add(&p, "a", "{\"i\":1}", 0);
    add(&p, "b", NULL, 0);
    add(&p, "c", NULL, 0);
    add(&p, "d", NULL, 2);
    cr_assert_eq(wq_store_flush(s), 0);
    add(&p, "e", NULL, 2);
    add(&p, "f", NULL, 0);
    add(&p, "b", NULL, 3); /* raised: the back of level 3 */
    add(&p, "g", NULL, 3);
    cr_assert_eq(wq_store_flush(s), 0);
    add(&p, "a", NULL, 2);        /* raised in a later window: behind d and e */
    add(&p, "c", "{\"i\":3}", 0); /* only the payload changes: keeps its place */
    cr_assert_eq(wq_store_flush(s), 0);
    wq_store_close(s);
    wq_queue_free(p.q);

    struct restored c;
    int n;
    s = rerun(&p, &c, &n);
    cr_assert_eq(n, 7);
    const char *want[] = {"b", "g", "d", "e", "a", "c", "f"};
    for (int i = 0; i < 7; i++) {
        cr_assert_str_eq(c.keys[i], want[i], "restore call %d", i);
        cr_assert(c.queued[i] && !c.waiting[i]);
    }
    wq_store_stats st;
    cr_assert_eq(wq_store_flush(s), 0);
    wq_store_get_stats(s, &st);
    cr_assert_eq(st.rows_written, 0, "the restore itself writes no rows back");
    for (int i = 0; i < 7; i++)
        cr_assert_str_eq(get(&p), want[i], "get %d", i);
    wq_store_close(s);
    wq_queue_free(p.q);
    cr_assert_str_eq(qtext("SELECT payload FROM items WHERE key = 'c'"), "{\"i\":3}");
}

Test(store, processing_rows_are_restored_as_queued_and_rewritten)
{
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "jobs");
    add(&p, "a", NULL, 0);
    add(&p, "b", NULL, 0);
    cr_assert_str_eq(get(&p), "a");
    wq_store_close(s); /* as if killed while a ran: the close flushes 'processing' */
    wq_queue_free(p.q);
    cr_assert_str_eq(qtext("SELECT state FROM items WHERE key = 'a'"), "processing");

    struct restored c;
    int n;
    s = rerun(&p, &c, &n);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(c.keys[0], "a");
    cr_assert(c.queued[0]);
    cr_assert_str_eq(qtext("SELECT state FROM items WHERE key = 'a'"), "queued");
    cr_assert_str_eq(get(&p), "a");
    wq_store_close(s);
    wq_queue_free(p.q);
}

Test(store, waiting_rows_keep_their_absolute_ready_time)
{
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "jobs");
    fake_ns = 1 * WQ_NS_PER_S;
    add_after(&p, "later", 100); /* ready at UNIX0 + 101 */
    add_after(&p, "soon", 20);   /* ready at UNIX0 + 21 */
    add(&p, "both", NULL, 0);
    add_after(&p, "both", 60); /* queued and also delayed: ready_at set, state queued */
    wq_store_close(s);
    wq_queue_free(p.q);
    cr_assert_str_eq(qtext("SELECT state FROM items WHERE key = 'both'"), "queued");
    cr_assert_float_eq(qdouble("SELECT ready_at FROM items WHERE key = 'both'"), UNIX0 + 61, 1e-6);

    /* The next run starts 50 s later, its monotonic clock at 0 again. */
    unix_offset = 50;
    fake_ns = 0;
    struct restored c;
    int n;
    s = rerun(&p, &c, &n);
    cr_assert_eq(n, 3);
    cr_assert_str_eq(c.keys[0], "both");
    cr_assert(c.queued[0] && c.waiting[0]);
    cr_assert_eq(c.ready[0], 11 * WQ_NS_PER_S);
    /* "soon" was due at UNIX0 + 21, before this run began: queued at once, and rewritten. */
    int si = strcmp(c.keys[1], "soon") == 0 ? 1 : 2, li = 3 - si;
    cr_assert_str_eq(c.keys[si], "soon");
    cr_assert(!c.queued[si] && c.waiting[si]);
    cr_assert_str_eq(c.keys[li], "later");
    cr_assert_eq(c.ready[li], 51 * WQ_NS_PER_S);
    cr_assert_eq(wq_queue_next_ready(p.q), 11 * WQ_NS_PER_S);
    cr_assert(wq_store_dirty(s));
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_str_eq(qtext("SELECT state FROM items WHERE key = 'soon'"), "queued");
    cr_assert_str_eq(qtext("SELECT ready_at FROM items WHERE key = 'soon'"), "NULL");
    cr_assert_str_eq(qtext("SELECT state FROM items WHERE key = 'later'"), "waiting");
    cr_assert_float_eq(qdouble("SELECT ready_at FROM items WHERE key = 'later'"), UNIX0 + 101,
                       1e-6);
    cr_assert_str_eq(get(&p), "both");
    cr_assert_str_eq(get(&p), "soon");
    wq_store_close(s);
    wq_queue_free(p.q);
}

Test(store, failures_and_dead_letters_round_trip)
{
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "jobs");
    wq_store_failures(p.sq, "f", 1, 3, "boom");
    wq_dead_row d = {.key = "d",
                     .keylen = 1,
                     .payload = "{\"x\":1}",
                     .paylen = 7,
                     .error = "it broke",
                     .traceback = "stack traceback:\n\tjobs.lua:3: in main chunk",
                     .attempts = 6,
                     .failed_at = UNIX0 + 5};
    wq_store_dead(p.sq, &d);
    cr_assert_eq(wq_store_flush(s), 0);
    wq_store_close(s);
    wq_queue_free(p.q);
    cr_assert_eq(qint("SELECT requeues FROM failures WHERE key = 'f'"), 3);
    cr_assert_eq(qint("SELECT attempts FROM dead WHERE key = 'd'"), 6);

    struct restored c;
    int n;
    s = rerun(&p, &c, &n);
    cr_assert_eq(n, 0);
    cr_assert_str_eq(c.fail_key, "f");
    cr_assert_eq(c.requeues, 3);
    cr_assert_str_eq(c.last_error, "boom");
    cr_assert_str_eq(c.dead_key, "d");
    cr_assert_str_eq(c.dead_payload, "{\"x\":1}");
    cr_assert_str_eq(c.dead_error, "it broke");
    cr_assert_str_eq(c.dead_trace, "stack traceback:\n\tjobs.lua:3: in main chunk",
                     "the traceback is kept with the dead letter");
    cr_assert_eq(c.attempts, 6);
    cr_assert_float_eq(c.failed_at, UNIX0 + 5, 1e-6);

    /* A cleared count and a retried dead letter leave the file. */
    wq_store_failures(p.sq, "f", 1, 0, NULL);
    wq_store_undead(p.sq, "d", 1);
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_eq(qint("SELECT count(*) FROM failures"), 0);
    cr_assert_eq(qint("SELECT count(*) FROM dead"), 0);
    wq_store_close(s);
    wq_queue_free(p.q);
}

Test(store, restored_rows_are_deleted_when_done_in_the_first_window)
{
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "jobs");
    add(&p, "a", NULL, 0);
    wq_store_close(s);
    wq_queue_free(p.q);

    struct restored c;
    int n;
    s = rerun(&p, &c, &n);
    cr_assert_str_eq(get(&p), "a");
    done(&p, "a");
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_eq(qint("SELECT count(*) FROM items"), 0);
    wq_store_close(s);
    wq_queue_free(p.q);
}

/* ---- inbox ---- */

struct inbox_ctx {
    char got[16][80];
    double after[16];
    int n;
    const char *accept; /* queue name taken; others left */
};

static int on_inbox(void *ud, const wq_inbox_row *r)
{
    struct inbox_ctx *c = ud;
    snprintf(c->got[c->n], sizeof c->got[0], "%s/%.*s=%.*s%s%.*s", r->queue, (int)r->keylen, r->key,
             (int)r->paylen, r->payload ? r->payload : "", r->grp ? " group " : "", (int)r->grplen,
             r->grp ? r->grp : "");
    c->after[c->n] = r->after;
    c->n++;
    return strcmp(r->queue, c->accept) == 0;
}

Test(store, the_inbox_is_taken_in_id_order_and_deleted_with_the_next_flush)
{
    wq_store *s = open_ok();
    sql("INSERT INTO inbox(queue, key, payload) VALUES ('jobs', 'k1', '{\"a\":1}'),"
        " ('jobs', 'k3', 'plain words')");
    sql("INSERT INTO inbox(queue, key, payload, grp) VALUES ('jobs', 'k2', NULL, 'host-a')");
    sql("UPDATE inbox SET id = 10 + id");
    sql("UPDATE inbox SET id = CASE key WHEN 'k1' THEN 1 WHEN 'k2' THEN 2 ELSE 3 END");
    struct inbox_ctx c = {.accept = "jobs"};
    cr_assert_eq(wq_store_poll_inbox(s, on_inbox, &c), 3);
    cr_assert_str_eq(c.got[0], "jobs/k1={\"a\":1}");
    cr_assert_str_eq(c.got[1], "jobs/k2= group host-a", "the group column comes along");
    cr_assert_str_eq(c.got[2], "jobs/k3=\"plain words\"");
    cr_assert_float_eq(c.after[0], 0, 1e-9);
    /* Not offered twice, nothing changed: the rows wait for the flush. */
    cr_assert_eq(wq_store_poll_inbox(s, on_inbox, &c), 0);
    cr_assert_eq(c.n, 3);
    cr_assert_eq(qint("SELECT count(*) FROM inbox"), 3);
    sql("INSERT INTO inbox(queue, key) VALUES ('jobs', 'k4')");
    cr_assert_eq(wq_store_poll_inbox(s, on_inbox, &c), 1);
    cr_assert_str_eq(c.got[3], "jobs/k4=");
    cr_assert(wq_store_dirty(s));
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_eq(qint("SELECT count(*) FROM inbox"), 0);
    wq_store_stats st;
    wq_store_get_stats(s, &st);
    cr_assert_eq(st.inbox_consumed, 4);
    wq_store_close(s);
}

Test(store, inbox_rows_for_unknown_queues_stay_until_a_queue_is_defined)
{
    wq_store *s = open_ok();
    sql("INSERT INTO inbox(queue, key) VALUES ('mail', 'm1'), ('jobs', 'j1')");
    struct inbox_ctx c = {.accept = "jobs"};
    cr_assert_eq(wq_store_poll_inbox(s, on_inbox, &c), 1);
    cr_assert_eq(c.n, 2);
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_eq(qint("SELECT count(*) FROM inbox WHERE queue = 'mail'"), 1);
    sql("INSERT INTO inbox(queue, key) VALUES ('jobs', 'j2')");
    cr_assert_eq(wq_store_poll_inbox(s, on_inbox, &c), 1);
    cr_assert_eq(c.n, 3, "the left row is not offered again");
    wq_store_known_queue(s, "mail");
    c.accept = "mail";
    cr_assert_eq(wq_store_poll_inbox(s, on_inbox, &c), 1);
    cr_assert_str_eq(c.got[3], "mail/m1=");
    cr_assert_eq(c.n, 4);
    wq_store_close(s);
    cr_assert_eq(qint("SELECT count(*) FROM inbox"), 0);
}

Test(store, an_inbox_poll_out_of_memory_adds_nothing_and_the_next_poll_offers_every_row)
{
    wq_store *s = open_ok();
    sql("INSERT INTO inbox(queue, key) VALUES ('jobs', 'k1'), ('jobs', 'k2')");
    struct inbox_ctx c = {.accept = "jobs"};
    wq_set_allocator(failing_realloc, NULL);
    fail_alloc = 1;
    int r = wq_store_poll_inbox(s, on_inbox, &c);
    fail_alloc = 0;
    wq_set_allocator(NULL, NULL);
    cr_assert_eq(r, WQ_ENOMEM);
    cr_assert_eq(c.n, 0, "no row added that could not be remembered for deletion");
    /* Nobody else wrote to the file, and yet the rows are read again. */
    cr_assert_eq(wq_store_poll_inbox(s, on_inbox, &c), 2);
    cr_assert_str_eq(c.got[0], "jobs/k1=");
    cr_assert_str_eq(c.got[1], "jobs/k2=");
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_eq(qint("SELECT count(*) FROM inbox"), 0);
    wq_store_close(s);
}

Test(store, inbox_after_counts_from_the_rows_creation)
{
    wq_store *s = open_ok();
    double now = wq_store_wall();
    char q[256];
    snprintf(q, sizeof q,
             "INSERT INTO inbox(queue, key, after, created_at) VALUES ('jobs', 'old', 30, %.3f),"
             " ('jobs', 'new', 30, %.3f), ('jobs', 'past', 5, %.3f)",
             now - 10, now, now - 60);
    sql(q);
    struct inbox_ctx c = {.accept = "jobs"};
    cr_assert_eq(wq_store_poll_inbox(s, on_inbox, &c), 3);
    cr_assert_float_eq(c.after[0], 20, 1);
    cr_assert_float_eq(c.after[1], 30, 1);
    cr_assert_lt(c.after[2], 0);
    wq_store_close(s);
}

/* ---- command line ---- */

static int cli(int (*fn)(int, char **, FILE *, FILE *), char *out, size_t outlen, int argc, ...)
{
    char *argv[16];
    va_list ap;
    va_start(ap, argc);
    for (int i = 0; i < argc; i++)
        argv[i] = va_arg(ap, char *);
    va_end(ap);
    argv[argc] = NULL;
    char *obuf = NULL, *ebuf = NULL;
    size_t olen = 0, elen = 0;
    FILE *o = open_memstream(&obuf, &olen), *e = open_memstream(&ebuf, &elen);
    int r = fn(argc, argv, o, e);
    fclose(o);
    fclose(e);
    if (out)
        snprintf(out, outlen, "%s%s", obuf, ebuf);
    free(obuf);
    free(ebuf);
    return r;
}

Test(store, cli_add_writes_inbox_rows_keeping_json_and_quoting_plain_strings)
{
    char out[1024];
    cr_assert_eq(
        cli(wq_store_cli_add_io, out, sizeof out, 5, "--db", path, "jobs", "k1", "{\"a\": [1, 2]}"),
        0, "%s", out);
    cr_assert_eq(cli(wq_store_cli_add_io, out, sizeof out, 7, "jobs", "k2", "hello world",
                     "--after", "5", "--db", path),
                 0, "%s", out);
    cr_assert_eq(cli(wq_store_cli_add_io, out, sizeof out, 3, "--db=" /* joined */ "", "x", "y"),
                 2);
    char dbopt[200];
    snprintf(dbopt, sizeof dbopt, "--db=%s", path);
    cr_assert_eq(cli(wq_store_cli_add_io, out, sizeof out, 4, dbopt, "jobs", "k3", "--after=-1"), 0,
                 "%s", out);
    cr_assert_eq(cli(wq_store_cli_add_io, out, sizeof out, 4, dbopt, "jobs", "k4", "-12.5"), 0,
                 "%s", out);
    cr_assert_eq(qint("PRAGMA application_id"), WQ_STORE_APP_ID);
    cr_assert_str_eq(qtext("SELECT payload FROM inbox WHERE key = 'k1'"), "{\"a\": [1, 2]}");
    cr_assert_str_eq(qtext("SELECT payload FROM inbox WHERE key = 'k2'"), "\"hello world\"");
    cr_assert_str_eq(qtext("SELECT json_extract(payload, '$') FROM inbox WHERE key = 'k2'"),
                     "hello world");
    cr_assert_float_eq(qdouble("SELECT after FROM inbox WHERE key = 'k2'"), 5, 1e-9);
    cr_assert_str_eq(qtext("SELECT after FROM inbox WHERE key = 'k1'"), "NULL");
    cr_assert_str_eq(qtext("SELECT payload FROM inbox WHERE key = 'k3'"), "NULL");
    cr_assert_str_eq(qtext("SELECT payload FROM inbox WHERE key = 'k4'"), "-12.5");
    cr_assert_lt(fabs(qdouble("SELECT created_at FROM inbox WHERE key = 'k1'") - wq_store_wall()),
                 60);
    cr_assert_eq(qint("SELECT min(id) < max(id) FROM inbox"), 1);
}

Test(store, cli_add_rejects_bad_usage_with_status_2)
{
    char out[1024];
    cr_assert_eq(cli(wq_store_cli_add_io, out, sizeof out, 2, "jobs", "k"), 2);
    cr_assert(strstr(out, "--db") && strstr(out, "usage: wqrun add"), "%s", out);
    cr_assert_eq(cli(wq_store_cli_add_io, out, sizeof out, 3, "--db", path, "jobs"), 2);
    cr_assert_eq(cli(wq_store_cli_add_io, out, sizeof out, 4, "--db", path, "bad name!", "k"), 2);
    cr_assert(strstr(out, "bad name!"), "%s", out);
    cr_assert_eq(
        cli(wq_store_cli_add_io, out, sizeof out, 6, "--db", path, "jobs", "k", "--after", "soon"),
        2);
    cr_assert_eq(cli(wq_store_cli_add_io, out, sizeof out, 5, "--db", path, "jobs", "k", "--frob"),
                 2);
    cr_assert_eq(cli(wq_store_cli_add_io, out, sizeof out, 5, "--db", path, "jobs", "k", "--after"),
                 2);
    cr_assert_eq(cli(wq_store_cli_add_io, out, sizeof out, 6, "--db", path, "q", "k", "p", "extra"),
                 2);
    cr_assert(!exists(""), "nothing was created");
}

Test(store, cli_add_refuses_a_foreign_file_with_status_1_and_leaves_it_alone)
{
    make_foreign_db("CREATE TABLE t(x); INSERT INTO t VALUES (1);");
    size_t n0, n1;
    char *before = slurp(path, &n0);
    char out[1024];
    cr_assert_eq(cli(wq_store_cli_add_io, out, sizeof out, 4, "--db", path, "jobs", "k"), 1);
    cr_assert(strstr(out, path) && strstr(out, "not a wqrun state file"), "%s", out);
    char *after = slurp(path, &n1);
    cr_assert(n0 == n1 && memcmp(before, after, n0) == 0);
    free(before);
    free(after);
    snprintf(path, sizeof path, "%s/missing/dir/x.db", dir);
    cr_assert_eq(cli(wq_store_cli_add_io, out, sizeof out, 4, "--db", path, "jobs", "k"), 1);
    cr_assert(strstr(out, path), "%s", out);
}

Test(store, cli_add_and_status_work_while_a_runner_owns_the_file)
{
    unix_offset = wq_store_wall() - UNIX0; /* status compares with the real clock */
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "jobs");
    add(&p, "q1", NULL, 0);
    add(&p, "q2", NULL, 0);
    add(&p, "p1", NULL, 0);
    add_after(&p, "w1", 30);
    cr_assert_str_eq(get(&p), "q1");
    wq_dead_row d1 = {.key = "d1", .keylen = 2, .error = "bad", .attempts = 3, .failed_at = UNIX0};
    wq_store_dead(p.sq, &d1);
    cr_assert_eq(wq_store_flush(s), 0);

    char out[4096];
    for (int i = 0; i < 3; i++) {
        char key[8];
        snprintf(key, sizeof key, "m%d", i);
        cr_assert_eq(cli(wq_store_cli_add_io, out, sizeof out, 4, "--db", path, "mail", key), 0,
                     "%s", out);
    }
    struct inbox_ctx c = {.accept = "jobs"};
    cr_assert_eq(wq_store_poll_inbox(s, on_inbox, &c), 0);
    cr_assert_eq(c.n, 3, "the runner sees rows added meanwhile");

    cr_assert_eq(cli(wq_store_cli_status_io, out, sizeof out, 2, "--db", path), 0, "%s", out);
    cr_assert(strstr(out, "running"), "%s", out);
    /* jobs: 2 queued, 1 processing, 1 waiting, 1 dead */
    const char *line = strstr(out, "\njobs");
    cr_assert_not_null(line, "%s", out);
    int queued, processing, waiting, dead, failing, inbox;
    cr_assert_eq(sscanf(line, "\njobs %d %d %d %d %d %d", &queued, &processing, &waiting, &dead,
                        &failing, &inbox),
                 6, "%s", out);
    cr_assert_eq(queued, 2);
    cr_assert_eq(processing, 1);
    cr_assert_eq(waiting, 1);
    cr_assert_eq(dead, 1);
    cr_assert_eq(inbox, 0);
    line = strstr(out, "\nmail");
    cr_assert_not_null(line, "%s", out);
    cr_assert(strstr(line, " 3*"), "unknown-queue inbox rows are marked: %s", out);
    cr_assert(strstr(out, "3 inbox rows (3 for queues no runner has defined)"), "%s", out);
    cr_assert(strstr(out, "in 30s") || strstr(out, "in 29s"), "next ready time: %s", out);
    wq_store_close(s);
    wq_queue_free(p.q);

    cr_assert_eq(cli(wq_store_cli_status_io, out, sizeof out, 2, "--db", path), 0, "%s", out);
    cr_assert(strstr(out, "runner      none"), "%s", out);
}

Test(store, cli_status_of_a_missing_or_foreign_file_fails_with_status_1)
{
    char out[1024];
    cr_assert_eq(cli(wq_store_cli_status_io, out, sizeof out, 2, "--db", path), 1);
    cr_assert(strstr(out, path), "%s", out);
    cr_assert(!exists(""), "status creates nothing");
    FILE *f = fopen(path, "wb");
    fputs("garbage garbage garbage garbage garbage garbage garbage garbage garbage garbage", f);
    fclose(f);
    cr_assert_eq(cli(wq_store_cli_status_io, out, sizeof out, 2, "--db", path), 1);
    cr_assert(strstr(out, "not a wqrun state file"), "%s", out);
    cr_assert_eq(cli(wq_store_cli_status_io, out, sizeof out, 1, "--db"), 2);
    cr_assert_eq(cli(wq_store_cli_status_io, out, sizeof out, 0), 2);
}

/* ---- schema version 2: migrating a real version-1 file ---- */

/*
 * Finds fixtures/v1.db. __FILE__ is relative to the source tree (the build
 * maps the path away), so the tree is found from the test binary: a build
 * directory inside it, or the one its CMakeCache.txt names.
 */
static void fixture_path(char *out, size_t len)
{
    static const char rel[] = "tests/store/fixtures/v1.db";
    const char *env = getenv("WQ_SOURCE_DIR");
    if (env && *env) {
        snprintf(out, len, "%s/%s", env, rel);
        if (access(out, R_OK) == 0)
            return;
    }
    char up[1024];
    ssize_t n = readlink("/proc/self/exe", up, sizeof up - 1);
    cr_assert_gt(n, 0);
    up[n] = 0;
    char *slash;
    while ((slash = strrchr(up, '/')) != NULL) {
        *slash = 0;
        snprintf(out, len, "%s/%s", up, rel);
        if (access(out, R_OK) == 0)
            return;
        char cache[1100], line[1200];
        snprintf(cache, sizeof cache, "%s/CMakeCache.txt", up);
        FILE *f = fopen(cache, "r");
        if (!f)
            continue;
        static const char key[] = "CMAKE_HOME_DIRECTORY:INTERNAL=";
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, key, sizeof key - 1) == 0) {
                line[strcspn(line, "\n")] = 0;
                snprintf(out, len, "%s/%s", line + sizeof key - 1, rel);
                break;
            }
        }
        fclose(f);
        if (access(out, R_OK) == 0)
            return;
    }
    cr_assert_fail("cannot find %s (set WQ_SOURCE_DIR)", rel);
}

/* Copies fixtures/v1.db (written by the wqrun of schema version 1) to path. */
static void copy_fixture(void)
{
    char src[1200];
    fixture_path(src, sizeof src);
    size_t n;
    char *bytes = slurp(src, &n);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(bytes, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
    free(bytes);
}

/* Every row of a query as text, "a|b|NULL" one per line (malloc'd). */
static char *dump(const char *q)
{
    sqlite3 *db = peek();
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, q, -1, &st, NULL), SQLITE_OK, "%s: %s", q,
                 sqlite3_errmsg(db));
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    while (sqlite3_step(st) == SQLITE_ROW) {
        for (int c = 0; c < sqlite3_column_count(st); c++) {
            const unsigned char *t = sqlite3_column_text(st, c);
            fprintf(m, "%s%s", c ? "|" : "", t ? (const char *)t : "NULL");
        }
        fputc('\n', m);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    fclose(m);
    return buf;
}

/* Everything a version-1 file holds, in the columns version 1 has. */
static const char *const v1_queries[] = {
    "SELECT queue, key, payload, state, ready_at, priority, seq, added_at, updated_at FROM items"
    " ORDER BY queue, key",
    "SELECT queue, key, requeues, last_error, updated_at FROM failures ORDER BY queue, key",
    "SELECT queue, key, payload, error, attempts, failed_at FROM dead ORDER BY queue, key",
    "SELECT id, queue, key, payload, after, created_at FROM inbox ORDER BY id",
    "SELECT name, value FROM meta ORDER BY name",
    "SELECT name, seen_at FROM queues ORDER BY name",
};
#define NV1 (sizeof v1_queries / sizeof *v1_queries)

static int has_column(const char *table, const char *column)
{
    char q[256];
    snprintf(q, sizeof q, "SELECT count(*) FROM pragma_table_info('%s') WHERE name = '%s'", table,
             column);
    return qint(q) == 1;
}

/* The fake clock at the fixture's making: its delayed rows are all still ahead. */
static void at_fixture_time(void)
{
    unix_offset = qdouble("SELECT value FROM meta WHERE name = 'created_at'") - UNIX0;
    cr_assert_gt(unix_offset, 0);
    fake_ns = 0;
}

Test(store, a_version_1_file_of_the_previous_wqrun_is_migrated_in_place_keeping_every_row)
{
    copy_fixture();
    cr_assert_eq(qint("PRAGMA user_version"), 1);
    cr_assert(!has_column("items", "enqueued_at"));
    char *before[NV1];
    for (size_t i = 0; i < NV1; i++)
        before[i] = dump(v1_queries[i]);
    char *added = dump("SELECT queue, key, added_at FROM items ORDER BY queue, key");
    cr_assert_eq(qint("SELECT count(*) FROM items"), 12);

    wq_store *s = open_ok();
    cr_assert_eq(qint("PRAGMA user_version"), 8);
    cr_assert(has_column("inbox", "priority"), "version 3: the inbox has priority");
    cr_assert(has_column("inbox", "unique_add"), "version 4: the inbox has unique_add");
    cr_assert(has_column("queues", "history"), "version 8: queues has history");
    cr_assert_eq(qint("PRAGMA application_id"), WQ_STORE_APP_ID);
    cr_assert_str_eq(qtext("PRAGMA journal_mode"), "wal");
    wq_store_close(s);

    for (size_t i = 0; i < NV1; i++) {
        char *after = dump(v1_queries[i]);
        cr_assert_str_eq(after, before[i], "%s changed", v1_queries[i]);
        free(after);
        free(before[i]);
    }
    /* The new columns and tables. */
    cr_assert(has_column("items", "enqueued_at") && has_column("items", "grp"));
    const char *const done_cols[] = {"queue", "key", "finished_at", "result"};
    for (size_t i = 0; i < 4; i++)
        cr_assert(has_column("done", done_cols[i]), "done.%s", done_cols[i]);
    const char *const sched_cols[] = {"queue",   "name",    "spec", "key",      "payload",
                                      "next_at", "last_at", "tz",   "catch_up", "updated_at"};
    for (size_t i = 0; i < 10; i++)
        cr_assert(has_column("schedules", sched_cols[i]), "schedules.%s", sched_cols[i]);
    cr_assert_eq(qint("SELECT count(*) FROM done") + qint("SELECT count(*) FROM schedules"), 0);
    /* enqueued_at of a version-1 row: its added_at, the closest version 1 kept; no group. */
    char *enq = dump("SELECT queue, key, enqueued_at FROM items ORDER BY queue, key");
    cr_assert_str_eq(enq, added);
    cr_assert_eq(qint("SELECT count(*) FROM items WHERE grp IS NOT NULL"), 0);
    free(enq);
    free(added);
    /* The pending view: the version-1 columns as they were, then the group and enqueued_at. */
    char *view = dump("SELECT key, state, priority, requeues, grp, enqueued_at = datetime("
                      "(SELECT added_at FROM items WHERE items.key = pending.key), 'unixepoch')"
                      " FROM pending WHERE queue = 'mail' LIMIT 3");
    cr_assert_str_eq(view,
                     "top|queued|9|0|NULL|1\nhi|processing|5|0|NULL|1\na|queued|0|0|NULL|1\n");
    free(view);

    /* Opening it again changes nothing more. */
    char *v2 = dump("SELECT * FROM items ORDER BY queue, key");
    s = open_ok();
    wq_store_close(s);
    char *again = dump("SELECT * FROM items ORDER BY queue, key");
    cr_assert_str_eq(again, v2);
    free(v2);
    free(again);
}

/* What a restore of the fixture hands back, per queue. */
struct fx {
    struct pq *into;
    char keys[16][16], payloads[16][96];
    int32_t prio[16];
    int queued[16], waiting[16];
    double ready[16], enqueued[16];
    int grp_null[16];
    int n;
    char fails[4][128], deads[4][160];
    int nfail, ndead;
};

static void fx_item(void *ud, const wq_restored *r)
{
    struct fx *c = ud;
    int i = c->n++;
    snprintf(c->keys[i], sizeof c->keys[0], "%.*s", (int)r->keylen, r->key);
    snprintf(c->payloads[i], sizeof c->payloads[0], "%.*s", r->payload ? (int)r->paylen : 4,
             r->payload ? r->payload : "NULL");
    c->prio[i] = r->priority;
    c->queued[i] = r->queued;
    c->waiting[i] = r->waiting;
    c->ready[i] = r->waiting ? tb_unix(NULL, r->ready_at_mono) : 0;
    c->enqueued[i] = r->enqueued_at;
    c->grp_null[i] = r->grp == NULL;
    on_item(&(struct restored){.into = c->into}, r);
}

static void fx_fail(void *ud, const char *key, size_t len, int64_t requeues, const char *err)
{
    struct fx *c = ud;
    snprintf(c->fails[c->nfail++], sizeof c->fails[0], "%.*s %lld %s", (int)len, key,
             (long long)requeues, err ? err : "NULL");
}

static void fx_dead(void *ud, const wq_dead_row *d)
{
    struct fx *c = ud;
    snprintf(c->deads[c->ndead++], sizeof c->deads[0], "%.*s %s %s %lld %d", (int)d->keylen, d->key,
             d->payload ? d->payload : "NULL", d->error ? d->error : "NULL", (long long)d->attempts,
             d->failed_at > UNIX0);
}

static double fixture_time(const char *col, const char *queue, const char *key)
{
    char q[256];
    snprintf(q, sizeof q, "SELECT %s FROM items WHERE queue = '%s' AND key = '%s'", col, queue,
             key);
    return qdouble(q);
}

Test(store, a_migrated_version_1_file_restores_every_item_failure_dead_letter_and_inbox_row)
{
    copy_fixture();
    at_fixture_time();
    wq_store *s = open_ok();
    struct pq mail, flaky, doomed;
    pq_attach(&mail, s, "mail");
    struct fx m = {.into = &mail};
    cr_assert_eq(wq_store_restore(mail.sq, fx_item, fx_fail, fx_dead, &m), 10, "%s",
                 wq_store_errmsg(s));
    /* Run order: priority, then FIFO ('hi' ran: again; 'top' was re-added while running), then
     * the rows that only wait. */
    static const struct {
        const char *key, *payload;
        int32_t prio;
        int queued, waiting;
    } want[10] = {
        {"top", "{\"rank\":2}", 9, 1, 0},
        {"hi", "{\"urgent\":true}", 5, 1, 0},
        {"a", "{\"f\":0.1,\"to\":\"alice\",\"big\":123456789012345678,\"n\":1}", 0, 1, 0},
        {"b", "\"just a string\"", 0, 1, 0},
        {"c", "NULL", 0, 1, 0},
        {"d", "{\"list\":[1,2,3]}", 0, 1, 0},
        {"both", "\"queued and delayed\"", 0, 1, 1},
        {"lo", "NULL", -2, 1, 0},
        {"later", "{\"when\":\"in an hour\"}", 0, 0, 1},
        {"much-later", "NULL", 0, 0, 1},
    };
    for (int i = 0; i < 10; i++) {
        cr_assert_str_eq(m.keys[i], want[i].key, "item %d", i);
        cr_assert_str_eq(m.payloads[i], want[i].payload, "payload of %s", want[i].key);
        cr_assert_eq(m.prio[i], want[i].prio, "priority of %s", want[i].key);
        cr_assert_eq(m.queued[i], want[i].queued, "queued of %s", want[i].key);
        cr_assert_eq(m.waiting[i], want[i].waiting, "waiting of %s", want[i].key);
        if (want[i].waiting)
            cr_assert_float_eq(m.ready[i], fixture_time("ready_at", "mail", want[i].key), 1e-5,
                               "ready_at of %s", want[i].key);
        cr_assert_float_eq(m.enqueued[i], fixture_time("added_at", "mail", want[i].key), 1e-9,
                           "enqueued_at of %s", want[i].key);
        cr_assert(m.grp_null[i]);
    }
    cr_assert_eq(m.nfail + m.ndead, 0);
    /* The queue as the engine has it now. */
    cr_assert_eq(wq_queue_len(mail.q), 8);
    cr_assert_eq(wq_queue_waiting(mail.q), 3);
    const char *order[] = {"top", "hi", "a", "b", "c", "d", "both", "lo"};
    for (int i = 0; i < 8; i++)
        cr_assert_str_eq(get(&mail), order[i]);

    pq_attach(&flaky, s, "flaky");
    struct fx f = {.into = &flaky};
    cr_assert_eq(wq_store_restore(flaky.sq, fx_item, fx_fail, fx_dead, &f), 2);
    cr_assert_str_eq(f.keys[0], "f1");
    cr_assert_str_eq(f.payloads[0], "{\"attempt\":\"first\"}");
    cr_assert_str_eq(f.keys[1], "f2");
    for (int i = 0; i < 2; i++) {
        cr_assert(!f.queued[i] && f.waiting[i]);
        cr_assert_float_eq(f.ready[i], fixture_time("ready_at", "flaky", f.keys[i]), 1e-5);
    }
    cr_assert_eq(f.nfail, 2);
    cr_assert_str_eq(f.fails[0], "f1 1 tests/store/fixtures/make_v1.lua:28: flaky failure of f1");
    cr_assert_str_eq(f.fails[1], "f2 1 tests/store/fixtures/make_v1.lua:28: flaky failure of f2");

    pq_attach(&doomed, s, "doomed");
    struct fx d = {.into = &doomed};
    cr_assert_eq(wq_store_restore(doomed.sq, fx_item, fx_fail, fx_dead, &d), 0);
    cr_assert_eq(d.ndead, 2);
    cr_assert_str_eq(d.deads[0],
                     "d1 {\"why\":\"error\"} tests/store/fixtures/make_v1.lua:38: doomed d1 1 1");
    cr_assert_str_eq(d.deads[1], "d2 NULL returned false 1 1");

    struct inbox_ctx in = {.accept = "mail"};
    cr_assert_eq(wq_store_poll_inbox(s, on_inbox, &in), 2);
    cr_assert_eq(in.n, 3);
    cr_assert_str_eq(in.got[0], "mail/inbox-1={\"to\":\"carol\"}");
    cr_assert_leq(in.after[0], 0);
    cr_assert_str_eq(in.got[1], "mail/inbox-2=\"plain text\"");
    cr_assert_leq(in.after[1], 7200);
    cr_assert_str_eq(in.got[2], "nosuch/orphan=");

    /* Nothing restored is written back but what changed: 'hi' is no longer processing. */
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_eq(qint("SELECT count(*) FROM inbox"), 1);
    wq_store_close(s);
    wq_queue_free(mail.q);
    wq_queue_free(flaky.q);
    wq_queue_free(doomed.q);
    cr_assert_eq(qint("SELECT count(*) FROM items"), 12);
    cr_assert_eq(qint("SELECT count(*) FROM failures"), 2);
    cr_assert_eq(qint("SELECT count(*) FROM dead"), 2);
}

Test(store, a_migration_that_fails_half_way_leaves_the_version_1_file_as_it_was)
{
    copy_fixture();
    /* A table in the way of the migration's CREATE TABLE done, after its ALTER TABLEs. */
    sql("CREATE TABLE done(x)");
    char *before = dump("SELECT * FROM items ORDER BY queue, key");
    wq_store *s = NULL;
    char err[512] = "";
    cr_assert_eq(wq_store_open(&s, path, WQ_SYNC_NORMAL, &tb, err, sizeof err), WQ_EIO);
    cr_assert_null(s);
    cr_assert(strstr(err, path) && strstr(err, "cannot migrate") &&
                  strstr(err, "from schema version 1 to 8") && strstr(err, "left at version 1"),
              "%s", err);
    cr_assert_eq(qint("PRAGMA user_version"), 1);
    cr_assert(!has_column("items", "enqueued_at") && !has_column("items", "grp"),
              "the ALTER TABLEs were rolled back");
    cr_assert_eq(qint("SELECT count(*) FROM sqlite_master WHERE name = 'schedules'"), 0);
    char *after = dump("SELECT * FROM items ORDER BY queue, key");
    cr_assert_str_eq(after, before);
    free(after);
    free(before);
    cr_assert_eq(qint("SELECT count(*) FROM meta WHERE name LIKE 'owner%'"), 0);
    /* Once the obstacle is gone the next open migrates. */
    sql("DROP TABLE done");
    s = open_ok();
    wq_store_close(s);
    cr_assert_eq(qint("PRAGMA user_version"), 8);
    cr_assert_eq(qint("SELECT count(*) FROM items"), 12);
}

Test(store, a_new_file_has_exactly_the_schema_of_a_migrated_one)
{
    static const char q[] = "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name";
    wq_store *s = open_ok();
    wq_store_close(s);
    char *fresh = dump(q);
    cr_assert_eq(qint("PRAGMA user_version"), 8);
    unlink(path);
    copy_fixture();
    s = open_ok();
    wq_store_close(s);
    char *migrated = dump(q);
    cr_assert_str_eq(fresh, migrated);
    free(fresh);
    free(migrated);
}

Test(store, cli_add_and_status_leave_a_version_1_file_at_version_1)
{
    copy_fixture();
    char out[4096];
    cr_assert_eq(cli(wq_store_cli_status_io, out, sizeof out, 2, "--db", path), 0, "%s", out);
    cr_assert(strstr(out, "(version 1, migrated when a runner opens it"), "%s", out);
    cr_assert(strstr(out, "DONE"), "%s", out);
    cr_assert(!strstr(out, "schedules:"), "%s", out);
    cr_assert_eq(cli(wq_store_cli_add_io, out, sizeof out, 5, "--db", path, "mail", "k9", "{}"), 0,
                 "%s", out);
    cr_assert_eq(qint("PRAGMA user_version"), 1);
    cr_assert(!has_column("items", "enqueued_at"));
    cr_assert_eq(qint("SELECT count(*) FROM inbox WHERE key = 'k9'"), 1);
    /* A new file made by `wqrun add` is of the current version at once. */
    unlink(path);
    cr_assert_eq(cli(wq_store_cli_add_io, out, sizeof out, 4, "--db", path, "mail", "k"), 0, "%s",
                 out);
    cr_assert_eq(qint("PRAGMA user_version"), 8);
    cr_assert(has_column("items", "grp"));
    cr_assert(has_column("inbox", "priority"));
    cr_assert(has_column("inbox", "unique_add"));
}

/* ---- enqueued_at and groups ---- */

Test(store, enqueued_at_is_stamped_on_a_new_row_and_kept_by_later_writes_of_the_pending_key)
{
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "jobs");
    fake_ns = 5 * WQ_NS_PER_S;
    add(&p, "a", "{}", 0);
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_float_eq(qdouble("SELECT enqueued_at FROM items WHERE key = 'a'"), UNIX0 + 5, 1e-6);
    cr_assert_str_eq(qtext("SELECT grp FROM items WHERE key = 'a'"), "NULL");

    fake_ns = 7 * WQ_NS_PER_S;
    add(&p, "a", "{\"v\":2}", 3); /* a re-add while queued: payload and priority only */
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_str_eq(get(&p), "a");
    fake_ns = 9 * WQ_NS_PER_S;
    add(&p, "a", NULL, 0); /* while processing: runs again */
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_float_eq(qdouble("SELECT added_at FROM items WHERE key = 'a'"), UNIX0 + 9, 1e-6);
    fake_ns = 11 * WQ_NS_PER_S;
    done(&p, "a"); /* queued again: still the same pending item */
    add_after(&p, "a", 30);
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_float_eq(qdouble("SELECT enqueued_at FROM items WHERE key = 'a'"), UNIX0 + 5, 1e-6);
    cr_assert_str_eq(qtext("SELECT payload FROM items WHERE key = 'a'"), "{\"v\":2}");

    /* Done for good: the row goes; the next add is a new item. */
    cr_assert_str_eq(get(&p), "a");
    wq_queue_cancel_after(p.q, "a", 1);
    done(&p, "a");
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_eq(qint("SELECT count(*) FROM items"), 0);
    fake_ns = 20 * WQ_NS_PER_S;
    add(&p, "a", NULL, 0);
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_float_eq(qdouble("SELECT enqueued_at FROM items WHERE key = 'a'"), UNIX0 + 20, 1e-6);

    /* A delayed-only new item has no queue time in the engine: the commit's wall time. */
    add_after(&p, "w", 60);
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_lt(fabs(qdouble("SELECT enqueued_at FROM items WHERE key = 'w'") - wq_store_wall()),
                 60);
    wq_store_close(s);
    wq_queue_free(p.q);
}

Test(store, a_key_done_and_added_again_within_one_window_is_a_new_item)
{
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "jobs");
    fake_ns = 1 * WQ_NS_PER_S;
    add(&p, "k", NULL, 0);
    add(&p, "other", NULL, 0);
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_str_eq(get(&p), "k");
    done(&p, "k");
    fake_ns = 4 * WQ_NS_PER_S;
    add(&p, "k", NULL, 0);
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_float_eq(qdouble("SELECT enqueued_at FROM items WHERE key = 'k'"), UNIX0 + 4, 1e-6);
    cr_assert_float_eq(qdouble("SELECT enqueued_at FROM items WHERE key = 'other'"), UNIX0 + 1,
                       1e-6);
    wq_store_close(s);
    wq_queue_free(p.q);
}

/* The runner's side of wq_store_set_meta: enqueued_at and group per key. */
struct meta_map {
    int n, calls;
    char key[64][16];
    double at[64];
    char grp[64][16];
};

static void meta_set(struct meta_map *m, const char *key, double at, const char *grp)
{
    int i = 0;
    while (i < m->n && strcmp(m->key[i], key) != 0)
        i++;
    if (i == m->n)
        m->n++;
    snprintf(m->key[i], sizeof m->key[0], "%s", key);
    m->at[i] = at;
    snprintf(m->grp[i], sizeof m->grp[0], "%s", grp ? grp : "");
}

static void meta_of(void *ud, const wq_item_info *info, wq_item_meta *out)
{
    struct meta_map *m = ud;
    m->calls++;
    for (int i = 0; i < m->n; i++) {
        if (strlen(m->key[i]) == info->keylen && memcmp(m->key[i], info->key, info->keylen) == 0) {
            out->enqueued_at = m->at[i];
            if (m->grp[i][0]) {
                out->grp = m->grp[i];
                out->grplen = strlen(m->grp[i]);
            }
            return;
        }
    }
}

struct meta_restored {
    int n;
    char key[64][16];
    double at[64];
    char grp[64][16];
};

static void on_meta_item(void *ud, const wq_restored *r)
{
    struct meta_restored *c = ud;
    snprintf(c->key[c->n], sizeof c->key[0], "%.*s", (int)r->keylen, r->key);
    c->at[c->n] = r->enqueued_at;
    snprintf(c->grp[c->n], sizeof c->grp[0], "%.*s", r->grp ? (int)r->grplen : 4,
             r->grp ? r->grp : "NULL");
    c->n++;
}

Test(store, the_runners_enqueued_at_and_group_are_written_and_restored)
{
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "jobs");
    struct meta_map m = {0};
    wq_store_set_meta(p.sq, meta_of, &m);
    /* More than one batch of new rows, so both the batched insert and the upsert ask. */
    for (int i = 0; i < 40; i++) {
        char key[16], grp[16];
        snprintf(key, sizeof key, "k%02d", i);
        snprintf(grp, sizeof grp, "g%d", i % 3);
        meta_set(&m, key, UNIX0 - 1000 + i, i % 5 == 4 ? NULL : grp);
        add(&p, key, NULL, 0);
    }
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_geq(m.calls, 40);
    cr_assert_float_eq(qdouble("SELECT enqueued_at FROM items WHERE key = 'k07'"), UNIX0 - 993,
                       1e-6);
    cr_assert_str_eq(qtext("SELECT grp FROM items WHERE key = 'k07'"), "g1");
    cr_assert_str_eq(qtext("SELECT grp FROM items WHERE key = 'k04'"), "NULL");
    cr_assert_eq(qint("SELECT count(*) FROM items WHERE grp = 'g0'"), 11);
    cr_assert_str_eq(qtext("SELECT grp FROM pending WHERE key = 'k36'"), "g0");

    /* A new group without an engine event: the runner touches the key. */
    meta_set(&m, "k07", UNIX0 - 993, "moved");
    wq_store_touch(p.sq, WQ_EV_UPDATED, "k07", 3);
    /* A group dropped on a re-add. */
    meta_set(&m, "k08", UNIX0 - 992, NULL);
    add(&p, "k08", "{}", 0);
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_str_eq(qtext("SELECT grp FROM items WHERE key = 'k07'"), "moved");
    cr_assert_str_eq(qtext("SELECT grp FROM items WHERE key = 'k08'"), "NULL");
    /* A key the runner has no time for: the row keeps its own. */
    meta_set(&m, "k09", 0, "g0");
    add(&p, "k09", "{}", 0);
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_float_eq(qdouble("SELECT enqueued_at FROM items WHERE key = 'k09'"), UNIX0 - 991,
                       1e-6);
    wq_store_close(s);
    wq_queue_free(p.q);

    /* Restored as written; a row without enqueued_at restores as 0. */
    sql("UPDATE items SET enqueued_at = NULL WHERE key = 'k00'");
    s = open_ok();
    pq_attach(&p, s, "jobs");
    struct meta_restored c = {0};
    cr_assert_eq(wq_store_restore(p.sq, on_meta_item, NULL, NULL, &c), 40);
    cr_assert_str_eq(c.key[0], "k00");
    cr_assert_eq(c.at[0], 0);
    cr_assert_str_eq(c.grp[0], "g0");
    cr_assert_str_eq(c.key[4], "k04");
    cr_assert_str_eq(c.grp[4], "NULL");
    cr_assert_str_eq(c.key[7], "k07");
    cr_assert_float_eq(c.at[7], UNIX0 - 993, 1e-6);
    cr_assert_str_eq(c.grp[7], "moved");
    wq_store_close(s);
    wq_queue_free(p.q);
}

/* ---- completed-job memory ---- */

struct done_rows {
    int n;
    char row[16][128];
};

static void on_done(void *ud, const char *key, size_t len, double finished_at, const char *result,
                    size_t rlen)
{
    struct done_rows *c = ud;
    snprintf(c->row[c->n++], sizeof c->row[0], "%.*s %.0f %.*s", (int)len, key, finished_at - UNIX0,
             (int)rlen, result ? result : "NULL");
}

Test(store, done_rows_are_put_replaced_deleted_and_restored_through_a_flush_and_a_reopen)
{
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "jobs");
    wq_store_done_put(p.sq, "a", 1, UNIX0 + 30, "{\"ok\":true}", 11);
    wq_store_done_put(p.sq, "b", 1, UNIX0 + 10, NULL, 0);
    wq_store_done_put(p.sq, "c", 1, UNIX0 + 20, "\"first\"", 7);
    cr_assert(wq_store_dirty(s));
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_eq(qint("SELECT count(*) FROM done"), 3);
    cr_assert_str_eq(qtext("SELECT result FROM done WHERE key = 'a'"), "{\"ok\":true}");
    cr_assert_str_eq(qtext("SELECT result FROM done WHERE key = 'b'"), "NULL");
    cr_assert_str_eq(qtext("SELECT queue FROM done WHERE key = 'b'"), "jobs");
    /* Replaced, deleted, put and deleted within one window. */
    wq_store_done_put(p.sq, "c", 1, UNIX0 + 40, "\"second\"", 8);
    wq_store_done_del(p.sq, "b", 1);
    wq_store_done_put(p.sq, "d", 1, UNIX0 + 50, NULL, 0);
    wq_store_done_del(p.sq, "d", 1);
    wq_store_done_del(p.sq, "never", 5);
    cr_assert_eq(wq_store_flush(s), 0);
    wq_store_close(s);
    wq_queue_free(p.q);

    s = open_ok();
    pq_attach(&p, s, "jobs");
    struct done_rows c = {0};
    cr_assert_eq(wq_store_restore_done(p.sq, on_done, &c), 2);
    cr_assert_str_eq(c.row[0], "a 30 {\"ok\":true}");
    cr_assert_str_eq(c.row[1], "c 40 \"second\"");
    /* Another queue's rows are its own. */
    struct pq o;
    pq_attach(&o, s, "other");
    struct done_rows none = {0};
    cr_assert_eq(wq_store_restore_done(o.sq, on_done, &none), 0);
    cr_assert_eq(wq_store_restore_done(o.sq, NULL, NULL), WQ_EINVAL);
    /* A key done while pending in the engine: the done row and the items row are independent. */
    add(&p, "a", NULL, 0);
    cr_assert_str_eq(get(&p), "a");
    done(&p, "a");
    wq_store_done_put(p.sq, "a", 1, UNIX0 + 60, "\"again\"", 7);
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_str_eq(qtext("SELECT result FROM done WHERE key = 'a'"), "\"again\"");
    cr_assert_eq(qint("SELECT count(*) FROM items"), 0);
    wq_store_close(s);
    wq_queue_free(p.q);
    wq_queue_free(o.q);
}

Test(store, many_done_rows_of_two_queues_are_written_and_deleted_in_batches)
{
    wq_store *s = open_ok();
    struct pq p, o;
    pq_attach(&p, s, "jobs");
    pq_attach(&o, s, "other");
    /* 200 puts per queue: full 32-row statements and a tail written row by row; every third with
     * a result. */
    char key[16], res[16];
    for (int i = 0; i < 200; i++) {
        snprintf(key, sizeof key, "k%03d", i);
        snprintf(res, sizeof res, "\"r%d\"", i);
        wq_store_done_put(p.sq, key, strlen(key), UNIX0 + i, i % 3 ? NULL : res, strlen(res));
        wq_store_done_put(o.sq, key, strlen(key), UNIX0 + 1000 + i, NULL, 0);
    }
    wq_store_stats st0, st1;
    wq_store_get_stats(s, &st0);
    cr_assert_eq(wq_store_flush(s), 0, "%s", wq_store_errmsg(s));
    wq_store_get_stats(s, &st1);
    cr_assert_eq(st1.rows_written - st0.rows_written, 400);
    cr_assert_eq(qint("SELECT count(*) FROM done WHERE queue = 'jobs'"), 200);
    cr_assert_eq(qint("SELECT count(*) FROM done WHERE queue = 'other'"), 200);
    cr_assert_eq(qint("SELECT count(*) FROM done WHERE queue = 'jobs' AND result IS NOT NULL"), 67);
    cr_assert_str_eq(qtext("SELECT result FROM done WHERE queue = 'jobs' AND key = 'k198'"),
                     "\"r198\"");
    cr_assert_eq(qint("SELECT finished_at FROM done WHERE queue = 'other' AND key = 'k199'") -
                     (int64_t)UNIX0,
                 1199);
    /* Deletes: 150 of one queue (two 64-key statements and a tail of 22), 5 of the other (one
     * statement each), and replacements of rows that exist, in one window. */
    for (int i = 0; i < 150; i++) {
        snprintf(key, sizeof key, "k%03d", i);
        wq_store_done_del(p.sq, key, strlen(key));
    }
    for (int i = 0; i < 5; i++) {
        snprintf(key, sizeof key, "k%03d", 2 * i);
        wq_store_done_del(o.sq, key, strlen(key));
    }
    for (int i = 150; i < 200; i++) {
        snprintf(key, sizeof key, "k%03d", i);
        wq_store_done_put(p.sq, key, strlen(key), UNIX0 + 5000 + i, "1", 1);
    }
    cr_assert_eq(wq_store_flush(s), 0, "%s", wq_store_errmsg(s));
    cr_assert_eq(qint("SELECT count(*) FROM done WHERE queue = 'jobs'"), 50);
    cr_assert_eq(qint("SELECT min(finished_at) FROM done WHERE queue = 'jobs'") - (int64_t)UNIX0,
                 5150);
    cr_assert_eq(qint("SELECT count(*) FROM done WHERE queue = 'jobs' AND result = '1'"), 50);
    cr_assert_eq(qint("SELECT count(*) FROM done WHERE queue = 'other'"), 195);
    cr_assert_eq(qint("SELECT count(*) FROM done WHERE queue = 'other' AND key = 'k008'"), 0);
    wq_store_close(s);
    wq_queue_free(p.q);
    wq_queue_free(o.q);
}

Test(store, done_prune_deletes_the_queues_rows_older_than_the_bound_with_the_next_flush)
{
    wq_store *s = open_ok();
    struct pq p, o;
    pq_attach(&p, s, "jobs");
    pq_attach(&o, s, "other");
    for (int i = 0; i < 10; i++) {
        char key[8];
        snprintf(key, sizeof key, "k%d", i);
        wq_store_done_put(p.sq, key, strlen(key), UNIX0 + i, NULL, 0);
        wq_store_done_put(o.sq, key, strlen(key), UNIX0 + i, NULL, 0);
    }
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert(!wq_store_dirty(s));
    cr_assert_eq(wq_store_done_prune(p.sq, UNIX0 + 3), 0);
    cr_assert(wq_store_dirty(s), "a prune waits for the next flush");
    cr_assert_eq(qint("SELECT count(*) FROM done"), 20);
    cr_assert_eq(wq_store_done_prune(p.sq, UNIX0 + 5), 0); /* the later bound wins */
    cr_assert_eq(wq_store_done_prune(p.sq, UNIX0 + 1), 0);
    wq_store_done_put(p.sq, "late", 4, UNIX0 + 2, NULL, 0); /* expired already */
    wq_store_done_put(p.sq, "new", 3, UNIX0 + 100, NULL, 0);
    wq_store_stats st0, st1;
    wq_store_get_stats(s, &st0);
    cr_assert_eq(wq_store_flush(s), 0);
    wq_store_get_stats(s, &st1);
    cr_assert_eq(qint("SELECT count(*) FROM done WHERE queue = 'jobs'"), 6);
    cr_assert_eq(qint("SELECT min(finished_at) FROM done WHERE queue = 'jobs'") - (int64_t)UNIX0,
                 5);
    cr_assert_eq(qint("SELECT count(*) FROM done WHERE key = 'late'"), 0);
    cr_assert_eq(qint("SELECT count(*) FROM done WHERE queue = 'other'"), 10);
    cr_assert_eq(st1.rows_written - st0.rows_written, 2 + 6, "two puts, six rows pruned");
    /* Done: the next flush prunes nothing more. */
    cr_assert(!wq_store_dirty(s));
    cr_assert_eq(wq_store_done_prune(p.sq, NAN), WQ_EINVAL);
    cr_assert_eq(wq_store_done_prune(NULL, 0), WQ_EINVAL);
    cr_assert(!wq_store_dirty(s));
    wq_store_close(s);
    wq_queue_free(p.q);
    wq_queue_free(o.q);
}

Test(store, a_commit_leaving_a_thousand_pages_in_the_wal_is_copied_into_the_file_in_the_background)
{
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "jobs");
    cr_assert_eq(wq_store_flush(s), 0);
    struct stat st0, st;
    cr_assert_eq(stat(path, &st0), 0);
    /* 1,500 rows of 4 KB: some 1,500 pages in the WAL (SQLite alone would wait for 10,000). */
    static char big[4002];
    memset(big, 'x', sizeof big);
    big[0] = big[sizeof big - 1] = '"';
    char key[16];
    for (int i = 0; i < 1500; i++) {
        snprintf(key, sizeof key, "k%d", i);
        wq_store_done_put(p.sq, key, strlen(key), UNIX0, big, sizeof big);
    }
    cr_assert_eq(wq_store_flush(s), 0, "%s", wq_store_errmsg(s));
    /* Nothing more is asked of the store: the checkpointer does it. */
    int64_t grown = 0;
    for (int i = 0; i < 500 && grown < 4 << 20; i++) {
        usleep(10000);
        cr_assert_eq(stat(path, &st), 0);
        grown = (int64_t)st.st_size - (int64_t)st0.st_size;
    }
    cr_assert_geq(grown, 4 << 20, "the file grew by %lld bytes", (long long)grown);
    cr_assert_eq(qint("SELECT count(*) FROM done"), 1500);
    wq_store_close(s);
    wq_queue_free(p.q);
}

Test(store, done_prune_of_a_big_table_sweeps_a_bounded_slice_per_flush_until_through)
{
    wq_store *s = open_ok();
    struct pq p, o;
    pq_attach(&p, s, "jobs");
    pq_attach(&o, s, "other");
    /* 2,500 rows k00000.. (the even ones expired) and 10 expired rows of another queue. */
    char key[16];
    for (int i = 0; i < 2500; i++) {
        snprintf(key, sizeof key, "k%05d", i);
        wq_store_done_put(p.sq, key, strlen(key), UNIX0 + (i % 2 ? 100 : 1), NULL, 0);
        if (i < 10)
            wq_store_done_put(o.sq, key, strlen(key), UNIX0 + 1, NULL, 0);
    }
    cr_assert_eq(wq_store_flush(s), 0, "%s", wq_store_errmsg(s));
    _Static_assert(WQ_STORE_PRUNE_STEP == 1024, "the counts below");
    wq_store_stats st;
    /* 1: the first 1,024 keys; their 512 expired rows go. */
    cr_assert_eq(wq_store_done_prune(p.sq, UNIX0 + 50), 0);
    cr_assert_eq(wq_store_flush(s), 0, "%s", wq_store_errmsg(s));
    wq_store_get_stats(s, &st);
    cr_assert_eq(st.last_commit_rows, 512);
    cr_assert_eq(qint("SELECT count(*) FROM done WHERE queue = 'jobs'"), 2500 - 512);
    cr_assert(wq_store_dirty(s), "the sweep goes on with the next flush");
    /* Puts during the sweep: an expired row behind it waits for the next sweep, the ones ahead
     * of it are swept; a later bound applies to the rest of the sweep. */
    wq_store_done_put(p.sq, "a-behind", 8, UNIX0 + 1, NULL, 0);
    wq_store_done_put(p.sq, "z-ahead", 7, UNIX0 + 1, NULL, 0);
    wq_store_done_put(p.sq, "z-late", 6, UNIX0 + 150, NULL, 0);
    cr_assert_eq(wq_store_done_prune(p.sq, UNIX0 + 200), 0);
    /* 2: the next 1,024 keys, all expired by now. */
    cr_assert_eq(wq_store_flush(s), 0, "%s", wq_store_errmsg(s));
    wq_store_get_stats(s, &st);
    cr_assert_eq(st.last_commit_rows, 3 + 1024);
    cr_assert(wq_store_dirty(s));
    /* 3: the last 452 keys and the two put ahead: through. */
    cr_assert_eq(wq_store_flush(s), 0, "%s", wq_store_errmsg(s));
    wq_store_get_stats(s, &st);
    cr_assert_eq(st.last_commit_rows, 452 + 2);
    cr_assert(!wq_store_dirty(s));
    cr_assert_eq(qint("SELECT count(*) FROM done WHERE queue = 'jobs' AND key LIKE 'k%'"), 512);
    cr_assert_eq(qint("SELECT count(*) FROM done WHERE queue = 'jobs' AND finished_at < 1700000050"
                      " AND key LIKE 'k%'"),
                 0, "UNIX0 + 50");
    cr_assert_str_eq(qtext("SELECT group_concat(key) FROM done WHERE key NOT LIKE 'k%'"),
                     "a-behind");
    cr_assert_eq(qint("SELECT count(*) FROM done WHERE queue = 'other'"), 10);
    /* A new sweep starts from the first key again. */
    cr_assert_eq(wq_store_done_prune(p.sq, UNIX0 + 200), 0);
    for (int i = 0; wq_store_dirty(s); i++) {
        cr_assert_lt(i, 3);
        cr_assert_eq(wq_store_flush(s), 0, "%s", wq_store_errmsg(s));
    }
    cr_assert_eq(qint("SELECT count(*) FROM done WHERE queue = 'jobs'"), 0);
    wq_store_close(s);
    wq_queue_free(p.q);
    wq_queue_free(o.q);
}

/* ---- schedules ---- */

struct sched_rows {
    int n;
    char row[16][256];
};

static void on_sched(void *ud, const wq_schedule_row *r)
{
    struct sched_rows *c = ud;
    snprintf(c->row[c->n++], sizeof c->row[0], "%s|%s|%.*s|%.*s|%s|%s|%.0f|%.0f", r->name, r->spec,
             (int)r->keylen, r->key, r->payload ? (int)r->paylen : 4,
             r->payload ? r->payload : "NULL", r->tz == WQ_SCHED_LOCAL ? "local" : "utc",
             r->catch_up == WQ_SCHED_CATCH_UP_SKIP ? "skip" : "once",
             r->next_at ? r->next_at - UNIX0 : -1, r->last_at ? r->last_at - UNIX0 : -1);
}

static wq_schedule_row sched(const char *name, const char *spec, const char *key,
                             const char *payload, double next, double last)
{
    wq_schedule_row r;
    memset(&r, 0, sizeof r);
    r.name = name;
    r.spec = spec;
    r.key = key;
    r.keylen = key ? strlen(key) : 0;
    r.payload = payload;
    r.paylen = payload ? strlen(payload) : 0;
    r.next_at = next;
    r.last_at = last;
    return r;
}

Test(store, schedules_are_put_replaced_deleted_and_restored_through_a_flush_and_a_reopen)
{
    wq_store *s = open_ok();
    struct pq p, o;
    pq_attach(&p, s, "jobs");
    pq_attach(&o, s, "other");
    wq_schedule_row r = sched("nightly", "0 3 * * *", "report", "{\"full\":true}", UNIX0 + 100, 0);
    r.tz = WQ_SCHED_LOCAL;
    wq_store_schedule_put(p.sq, &r);
    r = sched("tick", "@every 5m", NULL, NULL, UNIX0 + 300, UNIX0);
    r.catch_up = WQ_SCHED_CATCH_UP_SKIP;
    wq_store_schedule_put(p.sq, &r);
    r = sched("tick", "@hourly", NULL, NULL, UNIX0 + 3600, 0);
    wq_store_schedule_put(o.sq, &r);
    r = sched("gone", "@daily", NULL, NULL, UNIX0 + 1, 0);
    wq_store_schedule_put(p.sq, &r);
    cr_assert(wq_store_dirty(s));
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert(!wq_store_dirty(s));
    cr_assert_eq(qint("SELECT count(*) FROM schedules"), 4);
    cr_assert_str_eq(qtext("SELECT tz || ' ' || catch_up FROM schedules WHERE name = 'nightly'"),
                     "local once");
    cr_assert_str_eq(qtext("SELECT key FROM schedules WHERE queue = 'jobs' AND name = 'tick'"),
                     "tick");
    cr_assert_str_eq(qtext("SELECT last_at FROM schedules WHERE name = 'nightly'"), "NULL");
    cr_assert_gt(qdouble("SELECT updated_at FROM schedules WHERE name = 'nightly'"), UNIX0);

    /* Defining the same name again replaces it; a put then a delete in one window writes the
     * delete. */
    r = sched("nightly", "30 2 * * *", "report", "{\"full\":false}", UNIX0 + 200, UNIX0 + 100);
    r.tz = WQ_SCHED_LOCAL;
    wq_store_schedule_put(p.sq, &r);
    r = sched("gone", "@weekly", NULL, NULL, UNIX0 + 2, 0);
    wq_store_schedule_put(p.sq, &r);
    wq_store_schedule_del(p.sq, "gone");
    wq_store_schedule_del(p.sq, "never-there");
    r = sched("brief", "@daily", "b", NULL, UNIX0 + 50, 0);
    wq_store_schedule_put(p.sq, &r);
    wq_store_schedule_del(p.sq, "brief");
    cr_assert_eq(wq_store_flush(s), 0);
    wq_store_close(s);
    wq_queue_free(p.q);
    wq_queue_free(o.q);

    s = open_ok();
    pq_attach(&p, s, "jobs");
    pq_attach(&o, s, "other");
    struct sched_rows c = {0}, d = {0};
    cr_assert_eq(wq_store_restore_schedules(p.sq, on_sched, &c), 2);
    cr_assert_str_eq(c.row[0], "nightly|30 2 * * *|report|{\"full\":false}|local|once|200|100");
    cr_assert_str_eq(c.row[1], "tick|@every 5m|tick|NULL|utc|skip|300|0");
    cr_assert_eq(wq_store_restore_schedules(o.sq, on_sched, &d), 1);
    cr_assert_str_eq(d.row[0], "tick|@hourly|tick|NULL|utc|once|3600|-1");
    /* Text the store did not write reads as the defaults. */
    sql("UPDATE schedules SET tz = 'mars', catch_up = 'maybe', next_at = NULL"
        " WHERE queue = 'other'");
    memset(&d, 0, sizeof d);
    cr_assert_eq(wq_store_restore_schedules(o.sq, on_sched, &d), 1);
    cr_assert_str_eq(d.row[0], "tick|@hourly|tick|NULL|utc|once|-1|-1");
    cr_assert_eq(wq_store_restore_schedules(o.sq, NULL, NULL), WQ_EINVAL);
    wq_store_close(s);
    wq_queue_free(p.q);
    wq_queue_free(o.q);
}

Test(store, done_and_schedule_changes_wait_out_a_locked_file)
{
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "jobs");
    sqlite3_busy_timeout(s->db, 10);
    wq_store_done_put(p.sq, "old", 3, UNIX0, NULL, 0);
    cr_assert_eq(wq_store_flush(s), 0);
    sqlite3 *other = peek();
    cr_assert_eq(sqlite3_exec(other, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    wq_store_done_put(p.sq, "k", 1, UNIX0 + 5, "1", 1);
    wq_schedule_row r = sched("s", "@daily", NULL, NULL, UNIX0 + 86400, 0);
    wq_store_schedule_put(p.sq, &r);
    wq_store_done_prune(p.sq, UNIX0 + 1);
    cr_assert_eq(wq_store_flush(s), WQ_EBUSY);
    cr_assert(wq_store_dirty(s));
    cr_assert_eq(sqlite3_exec(other, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(other);
    cr_assert_eq(wq_store_flush(s), 0, "%s", wq_store_errmsg(s));
    cr_assert_str_eq(qtext("SELECT group_concat(key) FROM done"), "k");
    cr_assert_eq(qint("SELECT count(*) FROM schedules"), 1);
    wq_store_close(s);
    wq_queue_free(p.q);
}

Test(store, restoring_done_rows_and_schedules_of_a_broken_store_fails)
{
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "jobs");
    unlink(path);
    cr_assert_eq(wq_store_check_path(s), WQ_EIO);
    struct done_rows c = {0};
    struct sched_rows d = {0};
    cr_assert_eq(wq_store_restore_done(p.sq, on_done, &c), WQ_EIO);
    cr_assert_eq(wq_store_restore_schedules(p.sq, on_sched, &d), WQ_EIO);
    cr_assert(strstr(wq_store_errmsg(s), "deleted or replaced"), "%s", wq_store_errmsg(s));
    wq_store_close(s);
    wq_queue_free(p.q);
}

Test(store, cli_status_lists_schedules_in_utc_and_local_time_and_done_counts)
{
    setenv("TZ", "XST-3", 1); /* local time is UTC + 3 h, named XST */
    tzset();
    wq_store *s = open_ok();
    struct pq p, o;
    pq_attach(&p, s, "jobs");
    pq_attach(&o, s, "mail");
    /* 1700000000 is 2023-11-14 22:13:20 UTC. */
    wq_schedule_row r = sched("nightly", "0 3 * * *", NULL, NULL, 1700000000, 1699913600);
    r.tz = WQ_SCHED_LOCAL;
    wq_store_schedule_put(p.sq, &r);
    r = sched("digest", "@every 90s", NULL, NULL, 1700000090, 0);
    wq_store_schedule_put(o.sq, &r);
    for (int i = 0; i < 3; i++) {
        char key[8];
        snprintf(key, sizeof key, "d%d", i);
        wq_store_done_put(p.sq, key, 2, UNIX0 + i, NULL, 0);
    }
    cr_assert_eq(wq_store_flush(s), 0);
    char out[4096];
    cr_assert_eq(cli(wq_store_cli_status_io, out, sizeof out, 2, "--db", path), 0, "%s", out);
    cr_assert(strstr(out, "(version 8, "), "%s", out);
    int queued, processing, waiting, dead, failing, inbox, ndone;
    const char *line = strstr(out, "\njobs ");
    cr_assert_not_null(line, "%s", out);
    cr_assert_eq(sscanf(line, "\njobs %d %d %d %d %d %d %d", &queued, &processing, &waiting, &dead,
                        &failing, &inbox, &ndone),
                 7, "%s", out);
    cr_assert_eq(ndone, 3, "%s", out);
    cr_assert(strstr(out, "\nschedules:\n"), "%s", out);
    cr_assert(strstr(out, "NEXT RUN (UTC)") && strstr(out, "NEXT RUN (LOCAL)"), "%s", out);
    line = strstr(out, "\njobs   nightly");
    cr_assert_not_null(line, "%s", out);
    cr_assert(strstr(line, "0 3 * * *") && strstr(line, "local") &&
                  strstr(line, "2023-11-14 22:13:20") && strstr(line, "2023-11-15 01:13:20 XST") &&
                  strstr(line, "2023-11-13 22:13:20"),
              "%s", out);
    line = strstr(out, "\nmail   digest");
    cr_assert_not_null(line, "%s", out);
    cr_assert(strstr(line, "@every 90s") && strstr(line, "2023-11-14 22:14:50") &&
                  strstr(line, "2023-11-15 01:14:50 XST") && strstr(line, "never"),
              "%s", out);
    cr_assert(strstr(out, "schedules:\nQUEUE  NAME"), "queues come first: %s", out);
    wq_store_close(s);
    wq_queue_free(p.q);
    wq_queue_free(o.q);
}

/* ---- operating a live runner (SPEC 7.5): queues.paused, the commands table ---- */

Test(store, a_migrated_version_1_file_has_queues_paused_and_the_commands_table)
{
    copy_fixture();
    cr_assert(!has_column("queues", "paused"));
    wq_store *s = open_ok();
    wq_store_close(s);
    cr_assert(has_column("queues", "paused"));
    const char *const cols[] = {"id",    "queue",  "op",         "key",
                                "state", "result", "created_at", "done_at"};
    for (size_t i = 0; i < sizeof cols / sizeof *cols; i++)
        cr_assert(has_column("commands", cols[i]), "commands.%s", cols[i]);
    cr_assert_eq(qint("SELECT count(*) FROM queues WHERE paused <> 0"), 0,
                 "every version-1 queue is running");
    cr_assert_eq(qint("SELECT count(*) FROM commands"), 0);
}

Test(store, the_paused_flag_is_written_with_the_next_flush_and_read_back)
{
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "mail");
    cr_assert_eq(wq_store_paused(p.sq), 0, "a queue the file does not know is running");
    cr_assert_eq(wq_store_flush(s), 0);
    wq_store_set_paused(p.sq, 1);
    cr_assert(wq_store_dirty(s));
    cr_assert_eq(qint("SELECT paused FROM queues WHERE name = 'mail'"), 0, "not before the flush");
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_eq(qint("SELECT paused FROM queues WHERE name = 'mail'"), 1);
    cr_assert_eq(wq_store_paused(p.sq), 1);
    wq_store_close(s);
    wq_queue_free(p.q);

    /* A runner that defines the queue again announces it: the flag stays. */
    s = open_ok();
    pq_attach(&p, s, "mail");
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_eq(wq_store_paused(p.sq), 1, "still paused in the next run");
    wq_store_set_paused(p.sq, 0);
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_eq(qint("SELECT paused FROM queues WHERE name = 'mail'"), 0);
    wq_store_close(s);
    wq_queue_free(p.q);
}

struct seen_cmds {
    int n;
    char rows[8][128];
    int64_t ids[8];
};

static void on_command(void *ud, const wq_command *c)
{
    struct seen_cmds *sc = ud;
    cr_assert_lt(sc->n, 8);
    sc->ids[sc->n] = c->id;
    snprintf(sc->rows[sc->n++], sizeof sc->rows[0], "%s %s %.*s", c->queue ? c->queue : "NULL",
             c->op ? c->op : "NULL", c->key ? (int)c->keylen : 4, c->key ? c->key : "NULL");
}

Test(store, commands_are_offered_once_and_their_outcome_commits_with_the_next_flush)
{
    wq_store *s = open_ok();
    struct pq p;
    pq_attach(&p, s, "mail");
    cr_assert_eq(wq_store_flush(s), 0);
    sql("INSERT INTO commands(queue, op, key) VALUES ('mail', 'remove', 'k1');"
        "INSERT INTO commands(queue, op) VALUES ('mail', 'pause');"
        "INSERT INTO commands(queue, op, key) VALUES ('mail', 'done', 'x');"
        "UPDATE commands SET state = 'done' WHERE op = 'done'");
    struct seen_cmds sc = {0};
    cr_assert_eq(wq_store_poll_commands(s, on_command, &sc), 2, "the rows still 'new'");
    cr_assert_str_eq(sc.rows[0], "mail remove k1");
    cr_assert_str_eq(sc.rows[1], "mail pause NULL");
    cr_assert_eq(wq_store_poll_commands(s, on_command, &sc), 0, "nobody wrote since: no read");

    /* The outcome goes with the changes the command made: one transaction. */
    add(&p, "k2", NULL, 0);
    wq_store_command_result(s, sc.ids[0], 0, "no queued or delayed item 'k1'");
    wq_store_command_result(s, sc.ids[1], 1, "paused queue 'mail'");
    wq_store_set_paused(p.sq, 1);
    cr_assert_str_eq(qtext("SELECT group_concat(state) FROM commands WHERE op <> 'done'"),
                     "new,new", "nothing before the flush");
    cr_assert_eq(wq_store_flush(s), 0);
    cr_assert_str_eq(qtext("SELECT group_concat(state || ':' || result, '|') FROM"
                           " (SELECT * FROM commands WHERE op <> 'done' ORDER BY id)"),
                     "failed:no queued or delayed item 'k1'|done:paused queue 'mail'");
    cr_assert_eq(qint("SELECT count(*) FROM commands WHERE done_at IS NULL AND op <> 'done'"), 0);
    cr_assert_eq(qint("SELECT count(*) FROM items WHERE key = 'k2'") +
                     qint("SELECT paused FROM queues WHERE name = 'mail'"),
                 2, "and the changes with them");

    /* A row written later is offered; the ones offered before are not again. */
    sql("INSERT INTO commands(queue, op, key) VALUES ('', 'zap', x'6bff')");
    cr_assert_eq(wq_store_poll_commands(s, on_command, &sc), 1);
    cr_assert_str_eq(sc.rows[2], " zap k\xff", "a garbage row arrives as it is");
    wq_store_close(s);
    wq_queue_free(p.q);

    /* A new runner offers every row still 'new': the next run applies what a crash lost. */
    s = open_ok();
    sc.n = 0;
    cr_assert_eq(wq_store_poll_commands(s, on_command, &sc), 1);
    cr_assert_str_eq(sc.rows[0], " zap k\xff");
    wq_store_close(s);
}
