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
 * it keeps up with a busy loop one commit at a time. A writer starts the
 * WAL over when every page in it was copied at the moment it begins: after
 * a big commit the thread takes a few rounds to catch up, then a commit
 * finds it idle and the WAL restarts. But commits that always come faster
 * than checkpoints (a loop turn's commit acknowledging HTTP posts, on a
 * slow disk) would never leave that moment, and the WAL would grow without
 * end (and a big WAL is slow to truncate and to sync: its first restart
 * after 240 MB held a commit 35 ms in ftruncate). So once it is past
 * GROWN_PAGES, the loop holds the thread: it starts no new checkpoint after
 * the one under way. At the loop's next commit (or at once, when the thread
 * is idle) the loop copies what the thread has not, the pages of the
 * commits since the thread's last checkpoint began, and the commit starts
 * the WAL over. That copy is the one checkpoint the loop still makes, once
 * per GROWN_PAGES of WAL and only when commits keep the thread busy: a
 * commit or two's pages (a 10,000-page one used to come every 40 MB). When
 * the WAL does not start over even so (a reader of another connection
 * keeps it), the loop tries again only after GROWN_STEP more pages.
 *
 * The thread touches nothing of the store but its own connection and this
 * struct (under mu). It is stopped before the store closes and as soon as
 * the store breaks: a broken store never writes to its file again.
 */
#include "store/sqlite/store_int.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>

#define CKPT_PAGES 1000   /* WAL pages after a commit that wake the checkpointer */
#define GROWN_PAGES 65536 /* WAL pages (256 MiB, journal_size_limit) past which the loop helps */
#define GROWN_STEP 8192   /* WAL pages (32 MiB) more before the loop tries again */

struct wq_ckpt {
    pthread_t thread;
    sqlite3 *db; /* the thread's own connection */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* to the thread: wanted, stop or held changed */
    int wanted;        /* a commit left CKPT_PAGES or more in the WAL */
    int running;       /* the thread is checkpointing */
    int held;          /* the loop wants to checkpoint: the thread starts no checkpoint */
    int stop;
    /* The loop's own: */
    int grown;      /* the last commit left next_grown pages or more */
    int next_grown; /* GROWN_PAGES, or more after the WAL did not start over */
    int pages;      /* in the WAL after the last commit */
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
    if (pages < c->pages)
        c->next_grown = GROWN_PAGES; /* the WAL started over */
    c->pages = pages;
    c->grown = pages >= c->next_grown;
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
    c->next_grown = GROWN_PAGES;
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
    if (pthread_mutex_init(&c->mu, NULL) != 0)
        goto fail;
    if (pthread_cond_init(&c->cv, NULL) != 0) {
        pthread_mutex_destroy(&c->mu);
        goto fail;
    }
    /* Signals are the loop's business: the thread blocks them all. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int r = pthread_create(&c->thread, NULL, run, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r != 0) {
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
    pthread_mutex_lock(&c->mu);
    c->held = 1;
    int busy = c->running;
    pthread_mutex_unlock(&c->mu);
    if (busy)
        return; /* it starts no other checkpoint: the next commit finds it done */
    c->grown = 0;
    c->next_grown = c->pages + GROWN_STEP; /* until the WAL starts over */
    sqlite3_wal_checkpoint_v2(s->db, "main", SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    pthread_mutex_lock(&c->mu);
    c->held = 0;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}
