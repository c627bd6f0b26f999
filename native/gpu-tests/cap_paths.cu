// Allocates 64 MiB at a time, then 2 MiB, through one path until the interposer refuses, then
// frees all and checks the budget came back. Prints one JSON line. Paths: malloc (cudaMalloc), async
// (cudaMallocAsync on the default pool, with the pool trimmed after the frees) and vmm (cuMemCreate).
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <vector>

static const size_t kChunk = 64ull << 20;
// After the first refusal, 2 MiB pieces (the VMM granularity) measure how much is really usable.
static const size_t kTailChunk = 2ull << 20;
static const size_t kSizes[] = {kChunk, kTailChunk};
// Hold the peak long enough for the outside NVML monitor to sample it.
static void hold_peak(void) { usleep(300 * 1000); }

static int fail(const char *what, int code) {
  printf("{\"error\":\"%s failed with %d\"}\n", what, code);
  return 1;
}

static size_t vmm_granularity(int device) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  size_t granularity = 0;
  if (cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS) return 0;
  return granularity;
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "malloc";
  cudaError_t rt = cudaSetDevice(0);
  if (rt != cudaSuccess) return fail("cudaSetDevice", rt);
  size_t free_before = 0, total = 0;
  rt = cudaMemGetInfo(&free_before, &total);
  if (rt != cudaSuccess) return fail("cudaMemGetInfo", rt);

  size_t reached = 0;
  int refusal = 0;
  if (strcmp(path, "malloc") == 0) {
    std::vector<void *> blocks;
    for (size_t size : kSizes) {
      for (;;) {
        void *p = nullptr;
        rt = cudaMalloc(&p, size);
        if (rt != cudaSuccess) { refusal = rt; cudaGetLastError(); break; }
        blocks.push_back(p);
        reached += size;
      }
    }
    hold_peak();
    for (void *p : blocks) cudaFree(p);
  } else if (strcmp(path, "async") == 0) {
    cudaStream_t stream;
    if ((rt = cudaStreamCreate(&stream)) != cudaSuccess) return fail("cudaStreamCreate", rt);
    std::vector<void *> blocks;
    for (size_t size : kSizes) {
      for (;;) {
        void *p = nullptr;
        rt = cudaMallocAsync(&p, size, stream);
        if (rt == cudaSuccess) rt = cudaStreamSynchronize(stream);
        if (rt != cudaSuccess) { refusal = rt; cudaGetLastError(); break; }
        blocks.push_back(p);
        reached += size;
      }
    }
    hold_peak();
    for (void *p : blocks) cudaFreeAsync(p, stream);
    cudaStreamSynchronize(stream);
    cudaMemPool_t pool;
    if ((rt = cudaDeviceGetDefaultMemPool(&pool, 0)) != cudaSuccess) return fail("GetDefaultMemPool", rt);
    cudaMemPoolTrimTo(pool, 0);
  } else if (strcmp(path, "vmm") == 0) {
    size_t granularity = vmm_granularity(0);
    if (granularity == 0 || kChunk % granularity != 0) return fail("granularity", (int)granularity);
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    std::vector<CUmemGenericAllocationHandle> handles;
    for (size_t size : kSizes) {
      for (;;) {
        CUmemGenericAllocationHandle handle;
        CUresult r = cuMemCreate(&handle, size, &prop, 0);
        if (r != CUDA_SUCCESS) { refusal = r; break; }
        handles.push_back(handle);
        reached += size;
      }
    }
    hold_peak();
    for (auto h : handles) cuMemRelease(h);
  } else {
    return fail("unknown path", 0);
  }

  size_t free_after = 0, total_after = 0;
  rt = cudaMemGetInfo(&free_after, &total_after);
  if (rt != cudaSuccess) return fail("cudaMemGetInfo after", rt);
  printf("{\"workload\":\"cuda-%s\",\"total\":%zu,\"free_before\":%zu,\"allocated\":%zu,\"refusal\":%d,"
         "\"free_after\":%zu}\n",
         path, total, free_before, reached, refusal, free_after);
  return 0;
}
