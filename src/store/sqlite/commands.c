/*
 * The runner's side of operating it live (SPEC 7.5): a queue's paused flag
 * (queues.paused) and the commands table, which `wqrun pause|remove|...`
 * fills while a runner owns the file. A command's outcome is written with
 * the group commit that also writes what the command changed, so after a
 * crash either both are in the file or neither is (the row is still 'new'
 * and the next runner applies it). The command line's side, which applies
 * commands itself when no runner owns the file, is cli_ops.c.
 */
#include "store/sqlite/store_int.h"

#include <string.h>

static const char select_commands_sql[] =
    "SELECT id, queue, op, key FROM commands WHERE id > ?1 AND state = 'new' ORDER BY id";

int wq_store_paused(wq_store_queue *sq)
{
    if (!sq)
        return WQ_EINVAL;
    wq_store *s = sq->s;
    if (s->broken)
        return wq_store_broken(s);
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(s->db, "SELECT paused FROM queues WHERE name = ?1", -1, &st, NULL);
    if (rc != SQLITE_OK)
        return wq_store_sqlite_fail(s, rc, "read a queue's paused flag");
    sqlite3_bind_text(st, 1, sq->name, (int)sq->namelen, SQLITE_STATIC);
    rc = sqlite3_step(st);
    int paused = rc == SQLITE_ROW && sqlite3_column_int64(st, 0) != 0;
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return wq_store_sqlite_fail(s, rc, "read a queue's paused flag");
    return paused;
}

void wq_store_set_paused(wq_store_queue *sq, int paused)
{
    if (!sq)
        return;
    sq->set_paused = 1;
    sq->paused = paused != 0;
}

void wq_store_set_history(wq_store_queue *sq, double history)
{
    if (!sq)
        return;
    sq->set_history = 1;
    sq->history = history > 0 ? history : 0;
}

int wq_store_poll_commands(wq_store *s, void (*fn)(void *ud, const wq_command *c), void *ud)
{
    if (!s || !fn)
        return WQ_EINVAL;
    if (s->broken)
        return wq_store_broken(s);
    int64_t version;
    int rc = wq_store_data_version(s, &version, "read the commands");
    if (rc < 0)
        return rc;
    if (wq_store_prepare(s, &s->st[ST_SELECT_COMMANDS], select_commands_sql) < 0)
        return WQ_EIO;
    if (s->cmd_polled && version == s->cmd_data_version)
        return 0; /* nobody else wrote to the file */
    sqlite3_stmt *st = s->st[ST_SELECT_COMMANDS];
    sqlite3_bind_int64(st, 1, s->cmd_mark);
    int n = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        wq_command c;
        c.id = sqlite3_column_int64(st, 0);
        c.queue = (const char *)sqlite3_column_text(st, 1);
        c.op = (const char *)sqlite3_column_text(st, 2);
        c.key = (const char *)sqlite3_column_text(st, 3);
        c.keylen = c.key ? (size_t)sqlite3_column_bytes(st, 3) : 0;
        /* Offered once: the outcome is written later, so the row stays 'new' until then. */
        s->cmd_mark = c.id;
        fn(ud, &c);
        n++;
    }
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return wq_store_sqlite_fail(s, rc, "read the commands");
    /* Only a complete read counts: after an error the next poll reads again. */
    s->cmd_data_version = version;
    s->cmd_polled = 1;
    return n;
}

void wq_store_command_result(wq_store *s, int64_t id, int ok, const char *text)
{
    if (!s)
        return;
    char *copy = wq_store_dup(text ? text : "", text ? strlen(text) : 0);
    if (!copy || wq_store_grow((void **)&s->cmd_results, &s->capcmd_results, s->ncmd_results + 1,
                               sizeof *s->cmd_results) < 0) {
        wq_free(copy);
        s->lost_updates++; /* the row stays 'new': the next runner applies it again */
        return;
    }
    s->cmd_results[s->ncmd_results++] = (struct cmd_result){id, ok, copy};
}

static void free_inbox_put(struct inbox_put *p)
{
    wq_free(p->queue);
    wq_free(p->key);
    wq_free(p->payload);
    wq_free(p->grp);
}

int wq_store_inbox_put(wq_store *s, const wq_inbox_row *row)
{
    struct inbox_put p = {0};
    p.queue = wq_store_dup(row->queue, strlen(row->queue));
    p.key = wq_store_dup(row->key, row->keylen);
    p.keylen = row->keylen;
    p.payload = row->payload ? wq_store_dup(row->payload, row->paylen) : NULL;
    p.paylen = row->paylen;
    p.grp = row->grp ? wq_store_dup(row->grp, row->grplen) : NULL;
    p.grplen = row->grplen;
    p.after = row->after;
    p.has_priority = row->has_priority;
    p.priority = row->priority;
    p.unique = row->unique;
    if (!p.queue || !p.key || (row->payload && !p.payload) || (row->grp && !p.grp) ||
        wq_store_grow((void **)&s->inbox_puts, &s->capinbox_puts, s->ninbox_puts + 1,
                      sizeof *s->inbox_puts) < 0) {
        free_inbox_put(&p);
        return WQ_ENOMEM;
    }
    s->inbox_puts[s->ninbox_puts++] = p;
    return 0;
}

int wq_store_ops_dirty(const wq_store *s)
{
    if (s->ncmd_results || s->ninbox_puts)
        return 1;
    for (uint32_t i = 0; i < s->nqueues; i++)
        if (s->queues[i]->set_paused || s->queues[i]->set_history)
            return 1;
    return 0;
}

int wq_store_write_ops(wq_store *s, double now, uint64_t *rows)
{
    int rc = SQLITE_OK;
    if (!wq_store_ops_dirty(s))
        return rc;
    if (wq_store_prepare(s, &s->st[ST_SET_PAUSED],
                         "INSERT INTO queues(name, seen_at, paused) VALUES (?1, ?2, ?3)"
                         " ON CONFLICT (name) DO UPDATE SET paused = excluded.paused") < 0 ||
        wq_store_prepare(s, &s->st[ST_SET_HISTORY],
                         "INSERT INTO queues(name, seen_at, history) VALUES (?1, ?2, ?3)"
                         " ON CONFLICT (name) DO UPDATE SET history = excluded.history") < 0 ||
        wq_store_prepare(s, &s->st[ST_COMMAND_RESULT],
                         "UPDATE commands SET state = ?2, result = ?3, done_at = ?4"
                         " WHERE id = ?1 AND state = 'new'") < 0 ||
        wq_store_prepare(s, &s->st[ST_INBOX_PUT],
                         "INSERT INTO inbox(queue, key, payload, after, grp, created_at, priority,"
                         " unique_add) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)") < 0)
        return SQLITE_ERROR;
    for (size_t i = 0; i < s->ninbox_puts && rc == SQLITE_OK; i++) {
        const struct inbox_put *p = &s->inbox_puts[i];
        sqlite3_stmt *st = s->st[ST_INBOX_PUT];
        sqlite3_bind_text(st, 1, p->queue, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, p->key, (int)p->keylen, SQLITE_STATIC);
        if (p->payload)
            sqlite3_bind_text(st, 3, p->payload, (int)p->paylen, SQLITE_STATIC);
        else
            sqlite3_bind_null(st, 3);
        if (p->after > 0)
            sqlite3_bind_double(st, 4, p->after);
        else
            sqlite3_bind_null(st, 4);
        if (p->grp)
            sqlite3_bind_text(st, 5, p->grp, (int)p->grplen, SQLITE_STATIC);
        else
            sqlite3_bind_null(st, 5);
        sqlite3_bind_double(st, 6, now);
        if (p->has_priority)
            sqlite3_bind_int64(st, 7, p->priority);
        else
            sqlite3_bind_null(st, 7);
        if (p->unique) /* 1 unique, 0 not (--no-unique), NULL: as the queue says */
            sqlite3_bind_int(st, 8, p->unique > 0);
        else
            sqlite3_bind_null(st, 8);
        rc = wq_store_run(st);
        ++*rows;
    }
    for (uint32_t i = 0; i < s->nqueues && rc == SQLITE_OK; i++) {
        wq_store_queue *sq = s->queues[i];
        if (sq->set_paused) {
            sqlite3_stmt *st = s->st[ST_SET_PAUSED];
            sqlite3_bind_text(st, 1, sq->name, (int)sq->namelen, SQLITE_STATIC);
            sqlite3_bind_double(st, 2, now);
            sqlite3_bind_int(st, 3, sq->paused);
            rc = wq_store_run(st);
            ++*rows;
        }
        if (sq->set_history && rc == SQLITE_OK) {
            sqlite3_stmt *st = s->st[ST_SET_HISTORY];
            sqlite3_bind_text(st, 1, sq->name, (int)sq->namelen, SQLITE_STATIC);
            sqlite3_bind_double(st, 2, now);
            sqlite3_bind_double(st, 3, sq->history);
            rc = wq_store_run(st);
            ++*rows;
        }
    }
    for (size_t i = 0; i < s->ncmd_results && rc == SQLITE_OK; i++) {
        const struct cmd_result *r = &s->cmd_results[i];
        sqlite3_stmt *st = s->st[ST_COMMAND_RESULT];
        sqlite3_bind_int64(st, 1, r->id);
        sqlite3_bind_text(st, 2, r->ok ? "done" : "failed", -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, r->text, -1, SQLITE_TRANSIENT);
        sqlite3_bind_double(st, 4, now);
        rc = wq_store_run(st);
        ++*rows;
    }
    return rc;
}

void wq_store_free_inbox_puts(wq_store *s)
{
    for (size_t i = 0; i < s->ninbox_puts; i++)
        free_inbox_put(&s->inbox_puts[i]);
    s->ninbox_puts = 0;
    wq_free(s->inbox_puts);
    s->inbox_puts = NULL;
    s->capinbox_puts = 0;
}

void wq_store_clear_ops(wq_store *s)
{
    for (size_t i = 0; i < s->ninbox_puts; i++)
        free_inbox_put(&s->inbox_puts[i]);
    s->ninbox_puts = 0;
    for (size_t i = 0; i < s->ncmd_results; i++)
        wq_free(s->cmd_results[i].text);
    s->ncmd_results = 0;
    for (uint32_t i = 0; i < s->nqueues; i++)
        s->queues[i]->set_paused = s->queues[i]->set_history = 0;
}
