// The seven ways past the cap found on the H100 (issue 11), one per mode. Each prints one JSON
// line with what the program saw; prove.py runs it inside a 4 GiB shard with an NVML watcher.
//   graph         6 GiB of graph memory (cudaGraphAddMemAllocNode): launch must be refused
//   graph-probe   (no interposer) when graph memory becomes real: card free after each step
//   heap          cudaLimitMallocHeapSize = 6 GiB: must be refused
//   heap-probe    (no interposer) when the malloc heap becomes real
//   stack         a kernel with a 16 KiB stack frame after 3 GiB allocated: local memory at launch
//   module        a 1.5 GiB __device__ array after 2 GiB allocated, then 512 MiB more
//   region        write 80 GiB into the writable region's limit, then allocate 6 GiB
//   bypass        the driver through dlmopen + that namespace's dlsym: 6 GiB, held
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define GiB (1ull << 30)
#define MiB (1ull << 20)

__device__ char big_global[1536ull << 20];

__global__ void touch_global(int i) { big_global[i] = 1; }

__global__ void deep_stack(int *out, int n) {
  volatile char frame[16384];
  for (int i = 0; i < n; i++) frame[(i * 97) % 16384] = (char)i;
  if (threadIdx.x == 0) *out = frame[n % 16384];
}

__global__ void heap_user(int *out) {
  char *p = (char *)malloc(64);
  if (p) { p[0] = 1; *out = p[0]; free(p); }
}

static size_t card_free() {
  size_t f = 0, t = 0;
  cudaMemGetInfo(&f, &t);
  return f;
}

static void hold(double seconds) { usleep((useconds_t)(seconds * 1e6)); }

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (!strcmp(mode, "bypass")) {
    void *h = dlmopen(LM_ID_NEWLM, "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) { printf("{\"mode\":\"bypass\",\"error\":\"dlmopen\"}\n"); return 1; }
    CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(h, "cuInit");
    CUresult (*get)(CUdevice *, int) = (CUresult(*)(CUdevice *, int))dlsym(h, "cuDeviceGet");
    CUresult (*create)(CUcontext *, unsigned, CUdevice) = (CUresult(*)(CUcontext *, unsigned, CUdevice))dlsym(h, "cuCtxCreate_v2");
    CUresult (*alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))dlsym(h, "cuMemAlloc_v2");
    CUresult (*memset8)(CUdeviceptr, unsigned char, size_t) = (CUresult(*)(CUdeviceptr, unsigned char, size_t))dlsym(h, "cuMemsetD8_v2");
    CUresult (*sync)(void) = (CUresult(*)(void))dlsym(h, "cuCtxSynchronize");
    CUdevice d; CUcontext c; CUdeviceptr p;
    int r = init(0); if (!r) r = get(&d, 0); if (!r) r = create(&c, 0, d);
    if (!r) r = alloc(&p, 6 * GiB);
    if (!r) { memset8(p, 1, 6 * GiB); sync(); }
    printf("{\"mode\":\"bypass\",\"alloc\":%d}\n", r);
    fflush(stdout);
    hold(3.0);
    printf("{\"mode\":\"bypass\",\"survived\":true}\n");
    return 0;
  }
  cudaFree(0);
  if (!strcmp(mode, "graph") || !strcmp(mode, "graph-probe")) {
    size_t bytes = !strcmp(mode, "graph") ? 6 * GiB : 1 * GiB;
    size_t f0 = card_free();
    cudaGraph_t g; cudaGraphCreate(&g, 0);
    cudaMemAllocNodeParams np = {};
    np.poolProps.allocType = cudaMemAllocationTypePinned;
    np.poolProps.location.type = cudaMemLocationTypeDevice;
    np.poolProps.location.id = 0;
    np.bytesize = bytes;
    cudaGraphNode_t n, fnode;
    cudaError_t e1 = cudaGraphAddMemAllocNode(&n, g, NULL, 0, &np);
    cudaError_t e1b = cudaGraphAddMemFreeNode(&fnode, g, &n, 1, np.dptr);
    cudaGraphExec_t x;
    cudaError_t e2 = cudaGraphInstantiate(&x, g, 0);
    size_t f1 = card_free();
    cudaStream_t s; cudaStreamCreate(&s);
    cudaError_t e3 = cudaGraphUpload(x, s);
    cudaStreamSynchronize(s);
    size_t f2 = card_free();
    cudaError_t e4 = cudaGraphLaunch(x, s);
    cudaError_t e5 = cudaStreamSynchronize(s);
    size_t f3 = card_free();
    hold(0.3);
    cudaGraphExecDestroy(x);
    size_t f4 = card_free();
    cudaDeviceGraphMemTrim(0);
    size_t f5 = card_free();
    printf("{\"mode\":\"%s\",\"add\":%d,\"free_node\":%d,\"instantiate\":%d,\"upload\":%d,\"launch\":%d,\"sync\":%d,"
           "\"taken_after_instantiate_mib\":%.1f,\"after_upload_mib\":%.1f,\"after_launch_mib\":%.1f,"
           "\"after_destroy_mib\":%.1f,\"after_trim_mib\":%.1f}\n",
           mode, e1, e1b, e2, e3, e4, e5, (double)(f0 - f1) / MiB, (double)(f0 - f2) / MiB, (double)(f0 - f3) / MiB,
           (double)(f0 - f4) / MiB, (double)(f0 - f5) / MiB);
    return 0;
  }
  if (!strcmp(mode, "heap") || !strcmp(mode, "heap-probe")) {
    size_t bytes = !strcmp(mode, "heap") ? 6 * GiB : 1 * GiB;
    size_t f0 = card_free();
    cudaError_t e1 = cudaDeviceSetLimit(cudaLimitMallocHeapSize, bytes);
    size_t f1 = card_free();
    int *out; cudaMalloc(&out, 4);
    size_t f1b = card_free();
    heap_user<<<1, 1>>>(out);
    cudaError_t e2 = cudaDeviceSynchronize();
    size_t f2 = card_free();
    hold(0.3);
    printf("{\"mode\":\"%s\",\"set_limit\":%d,\"kernel\":%d,\"taken_after_set_mib\":%.1f,\"after_kernel_mib\":%.1f}\n",
           mode, e1, e2, (double)(f0 - f1) / MiB, (double)(f0 - f2 - (f1 - f1b)) / MiB);
    return 0;
  }
  if (!strcmp(mode, "stack")) {
    void *p; cudaError_t e0 = cudaMalloc(&p, 3 * GiB);
    int *out; cudaMalloc(&out, 4);
    printf("{\"mode\":\"stack\",\"alloc3g\":%d}\n", e0); fflush(stdout);
    deep_stack<<<1, 32>>>(out, 16000);
    cudaError_t e1 = cudaDeviceSynchronize();
    printf("{\"mode\":\"stack\",\"kernel\":%d}\n", e1); fflush(stdout);
    hold(2.0);
    void *q; cudaError_t e2 = cudaMalloc(&q, 64 * MiB);
    printf("{\"mode\":\"stack\",\"alloc_after\":%d,\"survived\":true}\n", e2);
    return 0;
  }
  if (!strcmp(mode, "module")) {
    void *p; cudaError_t e0 = cudaMalloc(&p, 2 * GiB);
    touch_global<<<1, 1>>>(5);
    cudaError_t e1 = cudaDeviceSynchronize();
    hold(0.5);  // the watcher samples and writes real_bytes into the limits file
    void *q; cudaError_t e2 = cudaMalloc(&q, 512 * MiB);
    size_t f = 0, t = 0; cudaMemGetInfo(&f, &t);
    printf("{\"mode\":\"module\",\"alloc2g\":%d,\"kernel\":%d,\"alloc512m_after\":%d,\"shard_free_mib\":%.1f}\n",
           e0, e1, e2, (double)f / MiB);
    return 0;
  }
  if (!strcmp(mode, "region")) {
    const char *path = getenv("GPUSHARDS_REGION_PATH");
    int fd = open(path, O_RDWR);
    int wrote = 0;
    if (fd >= 0) {
      unsigned long long v = 80 * GiB;
      wrote = pwrite(fd, &v, 8, 256 + 24) == 8;  // devices[0].limit_bytes
      close(fd);
    }
    void *p; cudaError_t e = cudaMalloc(&p, 6 * GiB);
    printf("{\"mode\":\"region\",\"wrote_80g_into_region\":%s,\"alloc6g\":%d}\n", wrote ? "true" : "false", e);
    return 0;
  }
  printf("{\"error\":\"unknown mode %s\"}\n", mode);
  return 2;
}
