/*
 * The runtime: wires the host's loop, the Lua state and the state file
 * together and runs a script. The only header main.c needs to run one.
 */
#ifndef WQ_RUNTIME_H
#define WQ_RUNTIME_H

#include "host/opts.h"

/* Runs script with its arguments; returns the process exit status. */
int wq_runtime_main(const wq_host_opts *opts, const char *script, int argc, char **argv);

#endif
