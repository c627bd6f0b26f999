// The smallest CUDA process: cuInit and a primary context. Timed as a whole process, with and
// without the interposer, to measure what the interposer adds to process start-up.
#include <cuda.h>
#include <stdio.h>

int main(void) {
  CUdevice device;
  CUcontext context;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&device, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&context, device) != CUDA_SUCCESS) {
    fprintf(stderr, "CUDA initialisation failed\n");
    return 1;
  }
  cuDevicePrimaryCtxRelease(device);
  return 0;
}
