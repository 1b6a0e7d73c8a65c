/*
 * The live progress line on stderr (a TTY, not --quiet): per queue done /
 * queued / running / waiting / retrying / dead, redrawn at most 10 times a
 * second, cleared before log lines and at exit, then replaced by a summary.
 */
#ifndef WQ_PROGRESS_H
#define WQ_PROGRESS_H

#include "host/host.h"

/* Decides whether to show the line (stderr is a TTY, not --quiet). */
void wq_progress_start(wq_host *h);
/* Erases the line so other output can be written. */
void wq_progress_clear(wq_host *h);
/* Redraws the line if shown and due (or force). */
void wq_progress_draw(wq_host *h, int force);
/* Erases the line and prints the one-line summary (when shown). */
void wq_progress_finish(wq_host *h);

#endif
