/* client_process.c — see client_process.h. */
#include <signal.h>
#include <stdio.h>

#include "client_check.h"
#include "client_process.h"

int client_begin(CUcontext *ctx)
{
    CUcontext current;
    CUdevice d;
    OK(cuInit(0));
    OK(cuDeviceGet(&d, 0));
    OK(cuDevicePrimaryCtxRetain(&current, d));
    OK(cuCtxSetCurrent(current));
    if (ctx != NULL) *ctx = current;
    return 0;
}

static void usr1_set(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGUSR1);
}

void client_block_usr1(void)
{
    sigset_t set;
    usr1_set(&set);
    sigprocmask(SIG_BLOCK, &set, NULL);
}

void client_say_then_wait(const char *what)
{
    sigset_t set;
    usr1_set(&set);
    printf("%s\n", what);
    fflush(stdout);
    int sig;
    sigwait(&set, &sig);
}
