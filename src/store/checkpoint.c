/*
 * The background checkpointer. In WAL mode a commit only appends pages to
 * the -wal file; a checkpoint copies them into the database file, with an
 * fsync of each. Run by the committing connection (SQLite's
 * wal_autocheckpoint), that copy stalls the loop for as long as it takes:
 * about 60 ms for 10,000 pages on the reference VM, 16 ms for 1,000, and
 * at least 3 ms for any (the two fsyncs), so smaller checkpoints bound the
 * stall only by making every commit pay more fsyncs.
 *
 * Here the loop's connection never checkpoints while running. A thread
 * with its own connection to the file runs PASSIVE checkpoints, which
 * never block a writer: once a commit leaves CKPT_PAGES or more pages in
 * the WAL, the commit's WAL hook wakes it, and it copies what is there.
 * It is woken again after each later commit until the WAL restarts, so
 * it keeps up with a busy loop one commit at a time. But a writer starts
 * the WAL over only when every page in it was copied at the moment it
 * begins, and commits that come faster than checkpoints (a loop turn's
 * commit acknowledging HTTP posts) would never leave it that moment: the
 * WAL would grow without end. So once it is past GROWN_PAGES, the loop,
 * before its next commit, waits for the thread's checkpoint under way (a
 * few ms, bounded by WAIT_MS), copies the pages committed since (one or
 * two commits' worth) itself, and the commit starts the WAL over.
 *
 * The thread touches nothing of the store but its own connection and this
 * struct (under mu). It is stopped before the store closes and as soon as
 * the store breaks: a broken store never writes to its file again.
 */
#include "store/store_int.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#define CKPT_PAGES 1000   /* WAL pages after a commit that wake the checkpointer */
#define GROWN_PAGES 20000 /* WAL pages (80 MiB) past which the loop helps it restart */
#define WAIT_MS 20        /* longest wait for the thread's checkpoint then */

struct wq_ckpt {
    pthread_t thread;
    sqlite3 *db; /* the thread's own connection */
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* to the thread: wanted, stop or held changed */
    pthread_cond_t idle; /* to the loop: a checkpoint of the thread's ended */
    int wanted;          /* a commit left CKPT_PAGES or more in the WAL */
    int running;         /* the thread is checkpointing */
    int held;            /* the loop is checkpointing: the thread waits */
    int stop;
    int grown; /* the loop's own: the last commit left GROWN_PAGES or more */
};

static void *run(void *arg)
{
    wq_ckpt *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while ((!c->wanted || c->held) && !c->stop)
            pthread_cond_wait(&c->cv, &c->mu);
        if (c->stop)
            break;
        c->wanted = 0;
        c->running = 1;
        pthread_mutex_unlock(&c->mu);
        /* Copies what is committed; a page written meanwhile waits for the next wake-up. Errors
         * (SQLITE_BUSY: someone else is checkpointing) just leave the pages for the next one. */
        sqlite3_wal_checkpoint_v2(c->db, "main", SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
        pthread_mutex_lock(&c->mu);
        c->running = 0;
        pthread_cond_signal(&c->idle);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* After each commit of the loop's connection (on the loop's thread): pages is the WAL's length. */
static int on_commit(void *arg, sqlite3 *db, const char *name, int pages)
{
    (void)db;
    (void)name;
    wq_ckpt *c = arg;
    c->grown = pages >= GROWN_PAGES;
    if (pages >= CKPT_PAGES) {
        pthread_mutex_lock(&c->mu);
        c->wanted = 1;
        pthread_cond_signal(&c->cv);
        pthread_mutex_unlock(&c->mu);
    }
    return SQLITE_OK;
}

int wq_ckpt_start(wq_store *s)
{
    if (!sqlite3_threadsafe())
        return -1; /* an SQLite built for one thread */
    wq_ckpt *c = wq_malloc(sizeof *c);
    if (!c)
        return -1;
    memset(c, 0, sizeof *c);
    const char *file = sqlite3_db_filename(s->db, "main");
    if (sqlite3_open_v2(file && *file ? file : s->path, &c->db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK)
        goto fail;
    /* The loop's connection makes the last checkpoint, at close (unless the store broke). */
    sqlite3_db_config(c->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int *)NULL);
    /* A checkpoint syncs by its own connection's setting: the store's. */
    if (sqlite3_exec(c->db,
                     s->sync == WQ_SYNC_FULL ? "PRAGMA synchronous = FULL"
                                             : "PRAGMA synchronous = NORMAL",
                     NULL, NULL, NULL) != SQLITE_OK)
        goto fail;
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        goto fail;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int ok = pthread_mutex_init(&c->mu, NULL) == 0;
    if (ok && pthread_cond_init(&c->cv, NULL) != 0) {
        pthread_mutex_destroy(&c->mu);
        ok = 0;
    }
    if (ok && pthread_cond_init(&c->idle, &ca) != 0) {
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
        ok = 0;
    }
    pthread_condattr_destroy(&ca);
    if (!ok)
        goto fail;
    /* Signals are the loop's business: the thread blocks them all. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int r = pthread_create(&c->thread, NULL, run, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r != 0) {
        pthread_cond_destroy(&c->idle);
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
        goto fail;
    }
    s->ckpt = c;
    sqlite3_wal_hook(s->db, on_commit, c); /* replaces wal_autocheckpoint */
    return 0;
fail:
    sqlite3_close(c->db);
    wq_free(c);
    return -1;
}

void wq_ckpt_stop(wq_store *s)
{
    wq_ckpt *c = s->ckpt;
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    sqlite3_wal_hook(s->db, NULL, NULL);
    sqlite3_close(c->db);
    pthread_cond_destroy(&c->idle);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    wq_free(c);
    s->ckpt = NULL;
}

void wq_ckpt_before_commit(wq_store *s)
{
    wq_ckpt *c = s->ckpt;
    if (!c || !c->grown)
        return;
    c->grown = 0;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_nsec += WAIT_MS * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&c->mu);
    while (c->running && pthread_cond_timedwait(&c->idle, &c->mu, &until) == 0)
        ;
    int mine = !c->running;
    c->held = mine;
    pthread_mutex_unlock(&c->mu);
    if (!mine)
        return; /* still at it: the next commit tries again */
    /* The thread copied the WAL up to where its checkpoint began: what is left is the commits
     * since, one or two. */
    sqlite3_wal_checkpoint_v2(s->db, "main", SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    pthread_mutex_lock(&c->mu);
    c->held = 0;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}
