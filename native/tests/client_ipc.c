/* client_ipc.c — CUDA IPC scenarios, run by runner_ipc.c: an exporter shares
 * an allocation; an importer opens it the way a program reaches the driver
 * (by symbol, by the pre-CUDA 11 symbol, or through cuGetProcAddress as the
 * CUDA runtime and PyTorch do) and closes it when the runner says, which
 * reads the region in between. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client_check.h"
#include "client_ipc.h"
#include "cuda_subset.h"

/* The symbol before CUDA 11's rename, by its own name. */
#undef cuIpcOpenMemHandle
CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags);

typedef CUresult (*open_fn)(CUdeviceptr *, CUipcMemHandle, unsigned int);
typedef CUresult (*close_fn)(CUdeviceptr);

static int begin(void)
{
    CUcontext ctx;
    CUdevice d;
    OK(cuInit(0));
    OK(cuDeviceGet(&d, 0));
    OK(cuDevicePrimaryCtxRetain(&ctx, d));
    OK(cuCtxSetCurrent(ctx));
    return 0;
}

/* Prints what, then waits for the runner's SIGUSR1 (blocked from the start,
 * so an early one is kept). */
static void say_then_wait(const char *what)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    printf("%s\n", what);
    fflush(stdout);
    int sig;
    sigwait(&set, &sig);
}

static void block_usr1(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, NULL);
}

/* 64 MiB shared: "handle HEX" on stdout, then held until killed.  Its own
 * handle is refused to it, as the driver refuses it. */
static int s_export(void)
{
    if (begin()) return 1;
    CUdeviceptr p, self;
    OK(cuMemAlloc_v2(&p, 64u << 20));
    CUipcMemHandle h;
    OK(cuIpcGetMemHandle(&h, p));
    CHECK(cuIpcOpenMemHandle_v2(&self, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS,
          "the exporter opened its own handle");
    printf("handle ");
    for (size_t i = 0; i < sizeof h.reserved; i++) printf("%02x", (unsigned char)h.reserved[i]);
    printf("\n");
    fflush(stdout);
    for (;;) pause();
}

static int parse_handle(const char *hex, CUipcMemHandle *h)
{
    if (strlen(hex) != 2 * sizeof h->reserved) return -1;
    for (size_t i = 0; i < sizeof h->reserved; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1) return -1;
        h->reserved[i] = (char)v;
    }
    return 0;
}

/* way: "link" (cuIpcOpenMemHandle_v2), "legacy" (cuIpcOpenMemHandle) or
 * "gpa" (both calls found through cuGetProcAddress_v2). */
static int s_import(const char *hex, const char *way)
{
    block_usr1();
    CUipcMemHandle h;
    CHECK(parse_handle(hex, &h) == 0, "not a handle: %s", hex);
    if (begin()) return 1;
    open_fn open = cuIpcOpenMemHandle_v2;
    close_fn close = cuIpcCloseMemHandle;
    if (!strcmp(way, "legacy")) open = cuIpcOpenMemHandle;
    if (!strcmp(way, "gpa")) {
        void *o = NULL, *c = NULL;
        CUdriverProcAddressQueryResult st;
        OK(cuGetProcAddress_v2("cuIpcOpenMemHandle", &o, 12000, 0, &st));
        OK(cuGetProcAddress_v2("cuIpcCloseMemHandle", &c, 12000, 0, &st));
        CHECK(o != NULL && c != NULL, "cuGetProcAddress found no IPC entry points");
        open = (open_fn)o;
        close = (close_fn)c;
    }
    CUdeviceptr p, bad;
    /* A handle that names nothing: refused, and nothing is left named. */
    CUipcMemHandle junk;
    memset(&junk, 0x5a, sizeof junk);
    CHECK(open(&bad, junk, 0) != CUDA_SUCCESS, "a junk handle was opened");
    say_then_wait("refused");
    OK(open(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CHECK(cuMemFree_v2(p) != CUDA_SUCCESS, "an import was freed like an allocation");
    say_then_wait("opened");
    OK(close(p));
    CHECK(close(p) != CUDA_SUCCESS, "an import was closed twice");
    say_then_wait("closed");
    OK(open(&p, h, 0));
    say_then_wait("opened again");
    return 0;
}

int ipc_scenario(const char *s, int argc, char **argv)
{
    if (!strcmp(s, "ipc-export")) return s_export();
    if (!strcmp(s, "ipc-import") && argc > 4) return s_import(argv[3], argv[4]);
    return -1;
}
