/*
 * The runner as a service: the start-up line (version, backend, address,
 * queues) and the stop line in the log, and systemd's notification
 * protocol through libsystemd's sd_notify — READY=1 once the state is
 * restored and the listener is up, STOPPING=1 when a graceful stop begins,
 * WATCHDOG=1 every half WatchdogSec while the loop turns. Without systemd
 * (no NOTIFY_SOCKET) the notifications cost nothing.
 */
#ifndef WQ_SERVICE_H
#define WQ_SERVICE_H

#include "host/host.h"

/* Arms the start-up line and READY=1 for the loop's first turn (after the
 * main chunk's first pass has defined its queues), and the watchdog. */
void wq_service_start(wq_host *h);
/* A graceful stop began: STOPPING=1. */
void wq_service_stopping(wq_host *h, const char *why);
/* The loop is over: the stop line (status is the exit status). */
void wq_service_stopped(wq_host *h, int status);
/* Frees what wq_service_start set up (at host free). */
void wq_service_free(wq_host *h);

/*
 * The --db text fit for a log line: a PostgreSQL URL or connection string
 * with its password replaced by "***". Writes at most n bytes to out.
 */
void wq_service_redact_db(const char *db, char *out, size_t n);

#endif
