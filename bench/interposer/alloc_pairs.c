// cuMemAlloc_v2 + cuMemFree_v2 pairs per size, timed with CLOCK_MONOTONIC. Prints one JSON line
// per size: {"size":..., "pairs":..., "ns_per_pair":...}. Run it with and without the
// interposer preloaded; bench/interposer/run.sh takes the ratio.
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(call)                                                     \
  do {                                                                  \
    CUresult result_ = (call);                                          \
    if (result_ != CUDA_SUCCESS) {                                      \
      fprintf(stderr, "%s failed: %d\n", #call, (int)result_);          \
      exit(1);                                                          \
    }                                                                   \
  } while (0)

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(void) {
  CUdevice device;
  CUcontext context;
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&device, 0));
  CHECK(cuDevicePrimaryCtxRetain(&context, device));
  CHECK(cuCtxSetCurrent(context));
  for (size_t size = 4096; size <= (256u << 20); size *= 4) {
    int pairs = size >= (64u << 20) ? 200 : 2000;
    CUdeviceptr pointer;
    for (int i = 0; i < 20; i++) {  // warm up the driver's own caches
      CHECK(cuMemAlloc(&pointer, size));
      CHECK(cuMemFree(pointer));
    }
    double start = now_ns();
    for (int i = 0; i < pairs; i++) {
      CHECK(cuMemAlloc(&pointer, size));
      CHECK(cuMemFree(pointer));
    }
    double elapsed = now_ns() - start;
    printf("{\"size\":%zu,\"pairs\":%d,\"ns_per_pair\":%.1f}\n", size, pairs, elapsed / pairs);
  }
  CHECK(cuDevicePrimaryCtxRelease(device));
  return 0;
}
