/* What the client scenarios run by another process (runner_elastic.c,
 * runner_ipc.c) share: a context on device 0, and a handshake with the
 * runner over stdout and SIGUSR1. */
#ifndef GPUSHARDS_CLIENT_PROCESS_H
#define GPUSHARDS_CLIENT_PROCESS_H

#include "cuda_subset.h"

/* Device 0's primary context, made current (and stored in *ctx when not
 * NULL); 1 with the failed call said on stderr. */
int client_begin(CUcontext *ctx);

/* Blocks SIGUSR1, so that the runner's signal is kept until it is waited for. */
void client_block_usr1(void);

/* Prints what (a line), then waits for the runner's SIGUSR1. */
void client_say_then_wait(const char *what);

#endif
