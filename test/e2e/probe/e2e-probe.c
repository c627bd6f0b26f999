/* e2e-probe: the only program of the end-to-end suite's shard image (no shell inside).
 * Linked against libcuda.so.1, which the agent provides at run time (the fake driver here).
 *   e2e-probe fill         prints what CUDA reports, allocates 64 MiB at a time until the
 *                          driver refuses, prints one JSON line, holds it until SIGTERM
 *   e2e-probe hold BYTES   allocates BYTES on GPU 0, prints {"held":..,"result":N}, holds
 *   e2e-probe alloc BYTES  allocates BYTES on GPU 0, prints {"result":N}, exits (docker exec)
 *   e2e-probe keep BYTES   allocates BYTES on GPU 0 and fills it with a pattern, prints
 *                          {"kept":..,"result":N}; at each SIGUSR1 reads samples back from the
 *                          GPU (a CUDA call that needs the GPU: a suspended shard waits in it)
 *                          and prints {"poke":i,"intact":0|1,"result":N}
 * Every verdict is one JSON line on stdout. */
#include "cuda_subset.h"
#include <signal.h>
#include <stdint.h>
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

static const uint32_t kPattern = 0x5eed1234u;
static const size_t kSampleWords = 1024;
static volatile sig_atomic_t pokes;

static void on_poke(int signo)
{
    (void)signo;
    pokes++;
}

/* Reads the first, middle and last kSampleWords words back; 1 when every one is the pattern. */
static int pattern_intact(CUdeviceptr pointer, size_t words, CUresult *result)
{
    static uint32_t sample[1024];
    size_t starts[3] = {0, words / 2, words - kSampleWords};
    for (int i = 0; i < 3; i++) {
        *result = cuMemcpyDtoH(sample, pointer + starts[i] * sizeof(uint32_t), sizeof sample);
        if (*result != CUDA_SUCCESS) return 0;
        for (size_t k = 0; k < kSampleWords; k++)
            if (sample[k] != kPattern) return 0;
    }
    return 1;
}

static int keep(size_t bytes)
{
    size_t words = bytes / sizeof(uint32_t);
    if (words < 2 * kSampleWords) {
        printf("{\"error\":\"keep needs at least 8192 bytes\"}\n");
        return 2;
    }
    CUdeviceptr pointer;
    CUresult r = cuMemAlloc(&pointer, bytes);
    if (r == CUDA_SUCCESS) r = cuMemsetD32(pointer, kPattern, words);
    printf("{\"kept\":%zu,\"result\":%d}\n", r == CUDA_SUCCESS ? bytes : 0, (int)r);
    if (r != CUDA_SUCCESS) hold_forever();
    signal(SIGUSR1, on_poke);
    int answered = 0;
    for (;;) {
        pause();
        while (answered < pokes) {
            answered++;
            CUresult read = CUDA_SUCCESS;
            int intact = pattern_intact(pointer, words, &read);
            printf("{\"poke\":%d,\"intact\":%d,\"result\":%d}\n", answered, intact, (int)read);
        }
    }
}

int main(int argc, char **argv)
{
    signal(SIGTERM, on_term);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        printf("{\"error\":\"usage: e2e-probe fill | hold BYTES | alloc BYTES | keep BYTES\"}\n");
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
    if (argc == 3 && strcmp(argv[1], "keep") == 0) return keep(strtoull(argv[2], NULL, 10));
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
