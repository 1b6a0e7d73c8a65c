/*
 * The header every bench program prints first: its title, the date and the
 * machine (CPU model, online CPUs, memory), as `#` comment lines.
 */
#ifndef WQ_BENCH_HEADER_H
#define WQ_BENCH_HEADER_H

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
