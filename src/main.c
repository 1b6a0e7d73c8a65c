/*
 * wqrun's command line: parses options and hands over to the host.
 */
#include <stdio.h>
#include <string.h>

static void usage(FILE *f)
{
    fputs("usage: wqrun [options] SCRIPT.lua [ARGS...]\n"
          "       wqrun add --db PATH QUEUE KEY [PAYLOAD] [--after SECONDS]\n"
          "       wqrun status --db PATH\n"
          "       wqrun --help | --version\n",
          f);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--version") == 0) {
        printf("wqrun %s\n", WQ_VERSION);
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "--help") == 0) {
        usage(stdout);
        return 0;
    }
    usage(stderr);
    return 2;
}
