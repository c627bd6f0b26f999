/* demo-probe: the program of the demo image (`npm run demo-image`).
 * Prints what CUDA reports inside the shard, then allocates 64 MiB at a time until the driver
 * refuses, prints where it stopped and why, and holds that memory until it is stopped (SIGTERM),
 * so the shard stays RUNNING and its usage shows in the API and in /metrics.
 * It is the image's only program (no shell), linked against libcuda.so.1, which the host
 * provides at run time: the NVIDIA container runtime on a GPU host, the agent's fake driver
 * in simulated mode. */
#include "cuda_subset.h"
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

static const size_t kChunk = 64u << 20;

static double gib(size_t bytes) { return (double)bytes / (double)(1u << 30); }

static const char *error_name(CUresult r)
{
    const char *name = NULL;
    return cuGetErrorName(r, &name) == CUDA_SUCCESS && name ? name : "unknown error";
}

/* PID 1 of a container gets no default action for SIGTERM: without a handler `stopShard`
 * would wait for its grace period and then SIGKILL. */
static void on_term(int signo)
{
    (void)signo;
    _exit(0);
}

static int fail(const char *call, CUresult r)
{
    printf("%s failed: %s (%d)\n", call, error_name(r), (int)r);
    return 2;
}

int main(void)
{
    signal(SIGTERM, on_term);
    setvbuf(stdout, NULL, _IOLBF, 0);

    CUdevice device;
    CUcontext context;
    char name[128] = "";
    CUresult r = cuInit(0);
    if (r != CUDA_SUCCESS) return fail("cuInit", r);
    if ((r = cuDeviceGet(&device, 0)) != CUDA_SUCCESS) return fail("cuDeviceGet", r);
    cuDeviceGetName(name, sizeof name, device);
    if ((r = cuDevicePrimaryCtxRetain(&context, device)) != CUDA_SUCCESS)
        return fail("cuDevicePrimaryCtxRetain", r);
    if ((r = cuCtxSetCurrent(context)) != CUDA_SUCCESS) return fail("cuCtxSetCurrent", r);

    size_t free_bytes = 0, total_bytes = 0;
    if ((r = cuMemGetInfo(&free_bytes, &total_bytes)) != CUDA_SUCCESS)
        return fail("cuMemGetInfo", r);
    printf("GPU 0: %s\n", name);
    printf("CUDA reports total %.2f GiB, free %.2f GiB (the shard's cap, not the card's size)\n",
           gib(total_bytes), gib(free_bytes));

    printf("allocating 64 MiB at a time until CUDA refuses...\n");
    size_t reached = 0;
    CUdeviceptr pointer;
    while ((r = cuMemAlloc(&pointer, kChunk)) == CUDA_SUCCESS) reached += kChunk;
    cuMemGetInfo(&free_bytes, &total_bytes);
    printf("refused after %.2f GiB with %s (%d); CUDA now reports %.2f GiB free\n", gib(reached),
           error_name(r), (int)r, gib(free_bytes));

    printf("holding %.2f GiB until stopped\n", gib(reached));
    for (;;) pause();
}
