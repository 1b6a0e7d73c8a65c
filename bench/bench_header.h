/*
 * What every bench program shares: the header it prints first (its title,
 * the date and the machine: CPU model, online CPUs, memory, as `#` comment
 * lines), bench_die, bench_selected, and the wall and CPU clocks. A program defines
 * BENCH_NAME (its name, for error messages) before including it.
 */
#ifndef WQ_BENCH_HEADER_H
#define WQ_BENCH_HEADER_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef BENCH_NAME
#error "define BENCH_NAME before including bench_header.h"
#endif

/* Prints "BENCH_NAME: message" to stderr and exits 1 (atexit handlers run). */
__attribute__((format(printf, 1, 2), noreturn)) static inline void bench_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs(BENCH_NAME ": ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

/* Whether case name is among the n names asked for (none asked for: every case). */
static inline int bench_selected(int n, char **names, const char *name)
{
    if (n == 0)
        return 1;
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return 1;
    return 0;
}

/* Seconds on the monotonic clock. */
static inline double bench_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Seconds of CPU time used by the process (time sharing does not inflate it). */
static inline double bench_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void bench_print_header(const char *title)
{
    char model[256] = "unknown";
    char line[512];
    long mem_kb = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        while (fgets(line, sizeof line, f)) {
            char *colon = strchr(line, ':');
            if (strncmp(line, "model name", 10) == 0 && colon) {
                snprintf(model, sizeof model, "%s", colon + 2);
                model[strcspn(model, "\n")] = '\0';
                break;
            }
        }
        fclose(f);
    }
    f = fopen("/proc/meminfo", "r");
    if (f) {
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemTotal: %ld kB", &mem_kb) == 1)
                break;
        fclose(f);
    }
    time_t t = time(NULL);
    char date[64];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %z", localtime(&t));
    printf("# %s\n", title);
    printf("# date: %s\n", date);
    printf("# machine: nproc %ld, cpu %s, ram %ld MiB\n", sysconf(_SC_NPROCESSORS_ONLN), model,
           mem_kb / 1024);
}

#endif
