/* cuda-probe — a CUDA driver API program for shard tests (built against the fake libcuda).
 *   cuda-probe hold <bytes>   allocates on GPU 0, prints {"result":N}, waits for SIGTERM
 *   cuda-probe alloc <bytes>  allocates on GPU 0, prints {"result":N}, exits
 * N is the CUresult of the first call that failed, 0 when all succeeded. */
#include <cuda.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void on_term(int signo)
{
    (void)signo;
    _exit(0);
}

static CUresult allocate(size_t bytes)
{
    CUdevice device;
    CUcontext context;
    CUdeviceptr pointer;
    CUresult r = cuInit(0);
    if (r == CUDA_SUCCESS) r = cuDeviceGet(&device, 0);
    if (r == CUDA_SUCCESS) r = cuDevicePrimaryCtxRetain(&context, device);
    if (r == CUDA_SUCCESS) r = cuCtxSetCurrent(context);
    if (r == CUDA_SUCCESS) r = cuMemAlloc(&pointer, bytes);
    return r;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: cuda-probe hold|alloc <bytes>\n");
        return 2;
    }
    signal(SIGTERM, on_term);
    CUresult r = allocate(strtoull(argv[2], NULL, 10));
    printf("{\"result\":%d}\n", (int)r);
    fflush(stdout);
    if (strcmp(argv[1], "hold") == 0)
        for (;;) pause();
    return 0;
}
