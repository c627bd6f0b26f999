// The program inside the test container. It is the image's only program (no shell), so every
// scenario is a mode of it, and its verdict is a JSON line on stdout.
//   probe info            shard total/free through cuMemGetInfo, and whether LD_PRELOAD is set
//   probe hold BYTES      allocate BYTES, print, then sleep until killed
//   probe fill            allocate 64 MiB at a time until CUDA_ERROR_OUT_OF_MEMORY
//   probe launch N        launch N kernels (the compute share's admission decides when each runs)
#include "cuda_subset.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const size_t kChunk = 64u << 20;

static int init_context(void) {
  CUdevice device;
  CUcontext context;
  CUresult r = cuInit(0);
  if (r == CUDA_SUCCESS) r = cuDeviceGet(&device, 0);
  if (r == CUDA_SUCCESS) r = cuDevicePrimaryCtxRetain(&context, device);
  if (r == CUDA_SUCCESS) r = cuCtxSetCurrent(context);
  if (r != CUDA_SUCCESS) printf("{\"error\":\"CUDA initialisation failed with %d\"}\n", (int)r);
  return r == CUDA_SUCCESS;
}

int main(int argc, char **argv) {
  if (argc < 2 || !init_context()) return 2;
  size_t free_bytes = 0, total_bytes = 0;
  CUresult r = cuMemGetInfo(&free_bytes, &total_bytes);
  if (r != CUDA_SUCCESS) {
    printf("{\"error\":\"cuMemGetInfo failed with %d\"}\n", (int)r);
    return 2;
  }
  const char *preload = getenv("LD_PRELOAD");
  if (strcmp(argv[1], "info") == 0) {
    printf("{\"total\":%zu,\"free\":%zu,\"ld_preload_set\":%s}\n", total_bytes, free_bytes,
           preload && *preload ? "true" : "false");
    return 0;
  }
  if (strcmp(argv[1], "hold") == 0 && argc == 3) {
    CUdeviceptr pointer;
    r = cuMemAlloc(&pointer, strtoull(argv[2], NULL, 10));
    printf("{\"held\":%s,\"result\":%d}\n", r == CUDA_SUCCESS ? argv[2] : "0", (int)r);
    fflush(stdout);
    for (;;) pause();
  }
  if (strcmp(argv[1], "fill") == 0) {
    size_t reached = 0;
    CUdeviceptr pointer;
    while ((r = cuMemAlloc(&pointer, kChunk)) == CUDA_SUCCESS) reached += kChunk;
    size_t free_after = 0, total_after = 0;
    cuMemGetInfo(&free_after, &total_after);
    printf("{\"total\":%zu,\"free_before\":%zu,\"reached\":%zu,\"refusal\":%d,\"free_after\":%zu}\n",
           total_bytes, free_bytes, reached, (int)r, free_after);
    return 0;
  }
  if (strcmp(argv[1], "launch") == 0 && argc == 3) {
    long n = strtol(argv[2], NULL, 10), done = 0;
    for (; done < n; done++)
      if ((r = cuLaunchKernel((CUfunction)0x1, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL)) != CUDA_SUCCESS) break;
    printf("{\"launched\":%ld,\"result\":%d}\n", done, (int)r);
    return 0;
  }
  printf("{\"error\":\"unknown mode %s\"}\n", argv[1]);
  return 2;
}
