/* e2e-probe: the only program of the end-to-end suite's shard image (no shell inside).
 * Linked against libcuda.so.1, which the agent provides at run time (the fake driver here).
 *   e2e-probe fill         prints what CUDA reports, allocates 64 MiB at a time until the
 *                          driver refuses, prints one JSON line, holds it until SIGTERM
 *   e2e-probe hold BYTES   allocates BYTES on GPU 0, prints {"held":..,"result":N}, holds
 *   e2e-probe alloc BYTES  allocates BYTES on GPU 0, prints {"result":N}, exits (docker exec)
 * Every verdict is one JSON line on stdout. */
#include "cuda_subset.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const size_t kChunk = 64u << 20;

/* PID 1 of a container has no default SIGTERM action: without a handler a stop waits for
 * its grace period and ends in SIGKILL. */
static void on_term(int signo)
{
    (void)signo;
    _exit(0);
}

static CUresult init_context(void)
{
    CUdevice device;
    CUcontext context;
    CUresult r = cuInit(0);
    if (r == CUDA_SUCCESS) r = cuDeviceGet(&device, 0);
    if (r == CUDA_SUCCESS) r = cuDevicePrimaryCtxRetain(&context, device);
    if (r == CUDA_SUCCESS) r = cuCtxSetCurrent(context);
    return r;
}

static void hold_forever(void)
{
    for (;;) pause();
}

int main(int argc, char **argv)
{
    signal(SIGTERM, on_term);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        printf("{\"error\":\"usage: e2e-probe fill | hold BYTES | alloc BYTES\"}\n");
        return 2;
    }
    CUresult r = init_context();
    if (r != CUDA_SUCCESS) {
        printf("{\"error\":\"CUDA initialisation failed\",\"result\":%d}\n", (int)r);
        return 2;
    }
    size_t free_before = 0, total = 0;
    cuMemGetInfo(&free_before, &total);
    CUdeviceptr pointer;
    if (strcmp(argv[1], "fill") == 0) {
        size_t reached = 0;
        while ((r = cuMemAlloc(&pointer, kChunk)) == CUDA_SUCCESS) reached += kChunk;
        size_t free_after = 0, total_after = 0;
        cuMemGetInfo(&free_after, &total_after);
        printf("{\"total\":%zu,\"free_before\":%zu,\"reached\":%zu,\"refusal\":%d,"
               "\"free_after\":%zu}\n",
               total, free_before, reached, (int)r, free_after);
        hold_forever();
    }
    if (argc == 3 && (strcmp(argv[1], "hold") == 0 || strcmp(argv[1], "alloc") == 0)) {
        r = cuMemAlloc(&pointer, strtoull(argv[2], NULL, 10));
        if (strcmp(argv[1], "alloc") == 0) {
            printf("{\"result\":%d}\n", (int)r);
            return 0;
        }
        printf("{\"held\":%s,\"result\":%d,\"total\":%zu}\n", r == CUDA_SUCCESS ? argv[2] : "0",
               (int)r, total);
        hold_forever();
    }
    printf("{\"error\":\"unknown mode\"}\n");
    return 2;
}
