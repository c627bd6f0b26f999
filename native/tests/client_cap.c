/* client_cap.c — scenarios for the read-only limits file and per-process
 * NVML (runner_limits.c starts them).
 *
 *   try BYTES      allocate BYTES on ordinal 0; prints "ok" or "oom" and
 *                  the free memory the shard is told about
 *   procs ORDINAL  as the agent on the host (run without the interposer):
 *                  prints "card USED", then "pid PID USED" per process from
 *                  nvmlDeviceGetComputeRunningProcesses_v3, checked against
 *                  _v2 and the v1 call
 *   procutil ORDINAL WINDOW_MS
 *                  as the agent on the host: nvmlDeviceGetProcessUtilization
 *                  since WINDOW_MS ago, its size protocol checked; prints
 *                  "pid PID SM%" per sample, or "none"
 *   missing        hooks whose driver function the driver lacks answer
 *                  CUDA_ERROR_NOT_FOUND and charge nothing; prints "ok" */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "client_check.h"
#include "client_cap.h"

static int s_try(const struct api *A, const char *bytes_text)
{
    OK(A->cuInit(0));
    CUcontext c;
    OK(A->cuDevicePrimaryCtxRetain(&c, 0));
    OK(A->cuCtxSetCurrent(c));
    size_t f = 0, t = 0;
    OK(A->cuMemGetInfo(&f, &t));
    CUdeviceptr p;
    CUresult r = A->cuMemAlloc(&p, strtoull(bytes_text, NULL, 0));
    printf("%s free %zu\n", r == CUDA_SUCCESS ? "ok" : r == CUDA_ERROR_OUT_OF_MEMORY ? "oom" : "error", f);
    return r == CUDA_SUCCESS || r == CUDA_ERROR_OUT_OF_MEMORY ? 0 : 3;
}

typedef nvmlReturn_t (*procs_fn)(nvmlDevice_t, unsigned int *, void *);

static int s_procs(const struct api *A, const char *ordinal_text)
{
    CHECK(A->nvmlInit_v2() == NVML_SUCCESS, "nvmlInit");
    nvmlDevice_t d;
    CHECK(A->nvmlDeviceGetHandleByIndex_v2((unsigned)atoi(ordinal_text), &d) == NVML_SUCCESS, "handle");
    procs_fn v3 = (procs_fn)dlsym(RTLD_DEFAULT, "nvmlDeviceGetComputeRunningProcesses_v3");
    procs_fn v2 = (procs_fn)dlsym(RTLD_DEFAULT, "nvmlDeviceGetComputeRunningProcesses_v2");
    procs_fn v1 = (procs_fn)dlsym(RTLD_DEFAULT, "nvmlDeviceGetComputeRunningProcesses");
    CHECK(v3 && v2 && v1, "NVML lacks the per-process calls");
    unsigned int n = 0;
    nvmlReturn_t r = v3(d, &n, NULL);
    CHECK(r == NVML_SUCCESS || r == NVML_ERROR_INSUFFICIENT_SIZE, "size query: %d", (int)r);
    CHECK(r == NVML_SUCCESS || n > 0, "INSUFFICIENT_SIZE with a count of 0");
    nvmlProcessInfo_t infos[64], infos2[64];
    nvmlProcessInfo_v1_t infos1[64];
    unsigned int n3 = 64, n2 = 64, n1 = 64;
    CHECK(v3(d, &n3, infos) == NVML_SUCCESS, "v3");
    CHECK(v2(d, &n2, infos2) == NVML_SUCCESS && n2 == n3, "v2 count %u vs %u", n2, n3);
    CHECK(v1(d, &n1, infos1) == NVML_SUCCESS && n1 == n3, "v1 count %u vs %u", n1, n3);
    if (n3 > 0) {
        unsigned int small = n3 - 1;
        CHECK(v3(d, &small, infos) == NVML_ERROR_INSUFFICIENT_SIZE && small == n3, "a short buffer");
        n3 = 64;
        CHECK(v3(d, &n3, infos) == NVML_SUCCESS, "v3 again");
    }
    procs_fn graphics = (procs_fn)dlsym(RTLD_DEFAULT, "nvmlDeviceGetGraphicsRunningProcesses_v3");
    unsigned int ng = 64;
    CHECK(graphics != NULL && graphics(d, &ng, infos2) == NVML_SUCCESS && ng == 0, "graphics processes: %u", ng);
    nvmlMemory_t m;
    CHECK(A->nvmlDeviceGetMemoryInfo(d, &m) == NVML_SUCCESS, "memory");
    printf("card %llu\n", m.used);
    for (unsigned i = 0; i < n3; i++) {
        CHECK(infos[i].gpuInstanceId == 0xFFFFFFFFu && infos[i].computeInstanceId == 0xFFFFFFFFu, "MIG ids");
        CHECK(infos1[i].pid == infos[i].pid && infos1[i].usedGpuMemory == infos[i].usedGpuMemory, "v1 differs");
        printf("pid %u %llu\n", infos[i].pid, infos[i].usedGpuMemory);
    }
    return 0;
}

typedef nvmlReturn_t (*util_fn)(nvmlDevice_t, nvmlProcessUtilizationSample_t *, unsigned int *, unsigned long long);

static unsigned long long epoch_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (unsigned long long)t.tv_sec * 1000000ull + (unsigned long long)t.tv_nsec / 1000u;
}

static int s_procutil(const struct api *A, const char *ordinal_text, const char *window_text)
{
    CHECK(A->nvmlInit_v2() == NVML_SUCCESS, "nvmlInit");
    nvmlDevice_t d;
    CHECK(A->nvmlDeviceGetHandleByIndex_v2((unsigned)atoi(ordinal_text), &d) == NVML_SUCCESS, "handle");
    util_fn util = (util_fn)dlsym(RTLD_DEFAULT, "nvmlDeviceGetProcessUtilization");
    CHECK(util != NULL, "NVML lacks nvmlDeviceGetProcessUtilization");
    unsigned long long before = epoch_us(), since = before - strtoull(window_text, NULL, 10) * 1000ull;
    unsigned int n = 0;
    CHECK(util(d, NULL, &n, before + 60000000ull) == NVML_ERROR_NOT_FOUND && n == 0, "samples from the future");
    nvmlReturn_t r = util(d, NULL, &n, since);
    if (r == NVML_ERROR_NOT_FOUND) {
        CHECK(n == 0, "NOT_FOUND with a count of %u", n);
        printf("none\n");
        return 0;
    }
    CHECK(r == NVML_ERROR_INSUFFICIENT_SIZE && n > 0, "size query: %d, count %u", (int)r, n);
    nvmlProcessUtilizationSample_t samples[64];
    unsigned int small = n - 1;
    CHECK(small == 0 || (util(d, samples, &small, since) == NVML_ERROR_INSUFFICIENT_SIZE && small >= n),
          "a short buffer");
    n = 64;
    r = util(d, samples, &n, since);
    unsigned long long after = epoch_us();
    if (r == NVML_ERROR_NOT_FOUND) {
        printf("none\n");
        return 0;
    }
    CHECK(r == NVML_SUCCESS, "samples: %d", (int)r);
    for (unsigned i = 0; i < n; i++) {
        CHECK(samples[i].timeStamp >= before && samples[i].timeStamp <= after, "timestamp %llu outside [%llu, %llu]",
              samples[i].timeStamp, before, after);
        CHECK(samples[i].smUtil <= 100, "smUtil %u", samples[i].smUtil);
        printf("pid %u %u\n", samples[i].pid, samples[i].smUtil);
    }
    return 0;
}

/* The legacy pitch hook under a 1g cap, on a driver that pads rows to 2 KiB
 * (GPUSHARDS_FAKE_PITCH_ALIGN=2k) where the interposer guesses 512 bytes:
 * the guess fits, what the driver took does not. */
static int s_pitch_legacy(const struct api *A)
{
    OK(A->cuInit(0));
    CUcontext c;
    OK(A->cuDevicePrimaryCtxRetain(&c, 0));
    OK(A->cuCtxSetCurrent(c));
    CUresult (*pitch32)(unsigned int *, unsigned int *, unsigned int, unsigned int, unsigned int) =
        (CUresult(*)(unsigned int *, unsigned int *, unsigned int, unsigned int, unsigned int))dlsym(
            RTLD_DEFAULT, "cuMemAllocPitch");
    CHECK(pitch32 != NULL, "no legacy cuMemAllocPitch");
    CUdeviceptr big;
    OK(A->cuMemAlloc(&big, (1ull << 30) - (1ull << 20)));
    unsigned int p = 0, pitch = 0;
    CUresult r = pitch32(&p, &pitch, 1000, 1024, 4);
    CHECK(r == CUDA_ERROR_OUT_OF_MEMORY, "1000x1024 padded to 2 KiB rows (2 MiB) with 1 MiB left: %d, pitch %u", (int)r,
          pitch);
    OK(A->cuMemAllocPitch(&big, (size_t[]){0}, 1000, 1024, 4) == CUDA_ERROR_OUT_OF_MEMORY ? CUDA_SUCCESS
                                                                                          : CUDA_ERROR_UNKNOWN);
    printf("refused\n");
    return 0;
}

#define SYM(name) __typeof__(&name) f_##name = (__typeof__(&name))dlsym(RTLD_DEFAULT, #name)

/* The charged usage of the shard on ordinal 0, as the shard is told. */
static uint64_t shard_used(const struct api *A)
{
    size_t f = 0, t = 0;
    return A->cuMemGetInfo(&f, &t) == CUDA_SUCCESS ? t - f : 0;
}

/* Stream capture with stream-ordered allocations keeps working (nothing the
 * interposer calls invalidates it), and the captured graph's memory is
 * charged when it is launched, refused past the cap (1g), and given back
 * when the graph is destroyed and the pool trimmed. */
static int s_capture(const struct api *A)
{
    OK(A->cuInit(0));
    CUcontext c;
    OK(A->cuDevicePrimaryCtxRetain(&c, 0));
    OK(A->cuCtxSetCurrent(c));
    SYM(cuStreamBeginCapture_v2);
    SYM(cuStreamEndCapture);
    SYM(cuGraphInstantiateWithFlags);
    SYM(cuGraphLaunch);
    SYM(cuGraphUpload);
    SYM(cuGraphExecDestroy);
    SYM(cuDeviceGraphMemTrim);
    SYM(cuGraphCreate);
    SYM(cuGraphAddMemAllocNode);
    CHECK(f_cuStreamBeginCapture_v2 && f_cuStreamEndCapture && f_cuGraphInstantiateWithFlags && f_cuGraphLaunch &&
              f_cuGraphUpload && f_cuGraphExecDestroy && f_cuDeviceGraphMemTrim && f_cuGraphCreate && f_cuGraphAddMemAllocNode,
          "graph API missing");
    CUstream s1, s2;
    OK(A->cuStreamCreate(&s1, 0));
    OK(A->cuStreamCreate(&s2, 0));
    uint64_t base = shard_used(A);

    OK(f_cuStreamBeginCapture_v2(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUdeviceptr p, q;
    OK(A->cuMemAllocAsync(&p, 64ull << 20, s1));
    CHECK(shard_used(A) == base, "a captured allocation is charged at capture: %llu", (unsigned long long)shard_used(A));
    OK(A->cuMemAllocAsync(&q, 4ull << 20, s2)); /* another stream, not capturing */
    OK(A->cuMemFreeAsync(q, s2));
    OK(A->cuMemFreeAsync(p, s1));
    CUgraph g;
    CUresult r = f_cuStreamEndCapture(s1, &g);
    CHECK(r == CUDA_SUCCESS, "the capture was invalidated (%d)", (int)r);

    CUgraphExec exec;
    OK(f_cuGraphInstantiateWithFlags(&exec, g, 0));
    uint64_t before = shard_used(A);
    OK(f_cuGraphLaunch(exec, s1));
    uint64_t after = shard_used(A);
    CHECK(after - before == 64ull << 20, "launching the captured graph charged %llu", (unsigned long long)(after - before));
    OK(f_cuGraphLaunch(exec, s1)); /* covered: nothing more */
    CHECK(shard_used(A) == after, "a second launch charged again");

    /* 2 GiB of graph memory under a 1 GiB cap: refused at upload and launch. */
    CUgraph big;
    OK(f_cuGraphCreate(&big, 0));
    CUDA_MEM_ALLOC_NODE_PARAMS np = {.poolProps = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                                                   .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}},
                                     .bytesize = 2ull << 30};
    CUgraphNode node;
    OK(f_cuGraphAddMemAllocNode(&node, big, NULL, 0, &np));
    CUgraphExec bigexec;
    OK(f_cuGraphInstantiateWithFlags(&bigexec, big, 0));
    r = f_cuGraphUpload(bigexec, s1);
    CHECK(r == CUDA_ERROR_OUT_OF_MEMORY, "upload of 2g under 1g: %d", (int)r);
    r = f_cuGraphLaunch(bigexec, s1);
    CHECK(r == CUDA_ERROR_OUT_OF_MEMORY, "launch of 2g under 1g: %d", (int)r);
    CHECK(shard_used(A) == after, "a refused graph changed the charge");

    OK(f_cuGraphExecDestroy(bigexec));
    OK(f_cuGraphExecDestroy(exec));
    CHECK(shard_used(A) == after, "destroyed but not trimmed: the pool keeps its memory");
    OK(f_cuDeviceGraphMemTrim(0));
    CHECK(shard_used(A) == before, "after trim: %llu, before the launch %llu", (unsigned long long)shard_used(A),
          (unsigned long long)before);
    printf("ok\n");
    return 0;
}

/* cuCtxSetLimit under a 1g cap: the increase over the defaults charged,
 * refused past the cap, given back when lowered. */
static int s_ctx_limits(const struct api *A)
{
    OK(A->cuInit(0));
    CUcontext c;
    OK(A->cuDevicePrimaryCtxRetain(&c, 0));
    OK(A->cuCtxSetCurrent(c));
    SYM(cuCtxSetLimit);
    CHECK(f_cuCtxSetLimit != NULL, "no cuCtxSetLimit");
    uint64_t base = shard_used(A);
    CUresult r = f_cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 2ull << 30);
    CHECK(r == CUDA_ERROR_OUT_OF_MEMORY, "a 2g heap under a 1g cap: %d", (int)r);
    OK(f_cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 256ull << 20));
    CHECK(shard_used(A) == base + (248ull << 20), "a 256m heap (8m default) charged %llu",
          (unsigned long long)(shard_used(A) - base));
    r = f_cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 16384);
    CHECK(r == CUDA_ERROR_OUT_OF_MEMORY, "16 KiB of stack (3.9 GiB on an H100-sized device) under 1g: %d", (int)r);
    OK(f_cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 2048)); /* 1 KiB more x 270,336 threads = 264 MiB */
    CHECK(shard_used(A) == base + (248ull << 20) + 1024ull * 270336, "stack charged %llu",
          (unsigned long long)(shard_used(A) - base));
    OK(f_cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, 65ull << 20));
    OK(f_cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 8ull << 20));
    OK(f_cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 1024));
    OK(f_cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, 1ull << 20));
    CHECK(shard_used(A) == base, "back to the defaults: %llu over", (unsigned long long)(shard_used(A) - base));
    printf("ok\n");
    return 0;
}

/* Hooks whose driver function this driver lacks (the fake has no legacy
 * cuArrayCreate or cuArray3DCreate, no cuGraphInstantiate_v2,
 * cuStreamBeginCaptureToGraph or cuCtxSynchronize_v2, as an older driver
 * lacks newer ones): each answers CUDA_ERROR_NOT_FOUND, as the driver's
 * cuGetProcAddress would for the name, charges nothing, and the process goes
 * on.  They are reached as a program linked against a newer driver reaches
 * them: by name, where libvgpu.so's export is the only definition. */
static int s_missing(const struct api *A)
{
    OK(A->cuInit(0));
    CUcontext c;
    OK(A->cuDevicePrimaryCtxRetain(&c, 0));
    OK(A->cuCtxSetCurrent(c));
    uint64_t base = shard_used(A);
    typedef CUresult (*array_fn)(CUarray *, const void *);
    typedef CUresult (*instantiate_fn)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t);
    typedef CUresult (*capture_fn)(CUstream, CUgraph, const CUgraphNode *, const void *, size_t,
                                   CUstreamCaptureMode);
    typedef CUresult (*sync_fn)(CUcontext);
    array_fn array = (array_fn)dlsym(RTLD_DEFAULT, "cuArrayCreate");
    array_fn array3d = (array_fn)dlsym(RTLD_DEFAULT, "cuArray3DCreate");
    instantiate_fn instantiate = (instantiate_fn)dlsym(RTLD_DEFAULT, "cuGraphInstantiate_v2");
    capture_fn capture = (capture_fn)dlsym(RTLD_DEFAULT, "cuStreamBeginCaptureToGraph");
    sync_fn sync = (sync_fn)dlsym(RTLD_DEFAULT, "cuCtxSynchronize_v2");
    SYM(cuGraphCreate);
    SYM(cuGraphDestroy);
    SYM(cuStreamDestroy_v2);
    CHECK(array && array3d && instantiate && capture && sync, "a hook was not found by name");
    CHECK(f_cuGraphCreate && f_cuGraphDestroy && f_cuStreamDestroy_v2, "the driver lacks graphs or streams");
    struct { unsigned int w, h; CUarray_format f; unsigned int ch; } d2 = {4096, 4096, CU_AD_FORMAT_FLOAT, 4};
    struct { unsigned int w, h, d; CUarray_format f; unsigned int ch, flags; } d3 = {256, 256, 256, CU_AD_FORMAT_FLOAT, 4, 0};
    CUarray arr = NULL;
    CUresult r = array(&arr, &d2);
    CHECK(r == CUDA_ERROR_NOT_FOUND, "cuArrayCreate: %d", (int)r);
    r = array3d(&arr, &d3);
    CHECK(r == CUDA_ERROR_NOT_FOUND, "cuArray3DCreate: %d", (int)r);
    CUgraph g;
    OK(f_cuGraphCreate(&g, 0));
    CUgraphExec exec = NULL;
    r = instantiate(&exec, g, NULL, NULL, 0);
    CHECK(r == CUDA_ERROR_NOT_FOUND, "cuGraphInstantiate_v2: %d", (int)r);
    CUstream s;
    OK(A->cuStreamCreate(&s, 0));
    r = capture(s, g, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL);
    CHECK(r == CUDA_ERROR_NOT_FOUND, "cuStreamBeginCaptureToGraph: %d", (int)r);
    r = sync(c);
    CHECK(r == CUDA_ERROR_NOT_FOUND, "cuCtxSynchronize_v2: %d", (int)r);
    CHECK(shard_used(A) == base, "%llu bytes charged by refused calls", (unsigned long long)(shard_used(A) - base));
    /* The process goes on. */
    CUdeviceptr p;
    OK(A->cuMemAlloc(&p, 64ull << 20));
    CHECK(shard_used(A) == base + (64ull << 20), "64 MiB after: %llu", (unsigned long long)(shard_used(A) - base));
    OK(A->cuMemFree(p));
    OK(f_cuStreamDestroy_v2(s));
    OK(f_cuGraphDestroy(g));
    printf("ok\n");
    return 0;
}

int cap_scenario(const struct api *A, const char *s, int argc, char **argv)
{
    if (!strcmp(s, "try") && argc > 3) return s_try(A, argv[3]);
    if (!strcmp(s, "procs") && argc > 3) return s_procs(A, argv[3]);
    if (!strcmp(s, "procutil") && argc > 4) return s_procutil(A, argv[3], argv[4]);
    if (!strcmp(s, "pitch-legacy")) return s_pitch_legacy(A);
    if (!strcmp(s, "capture")) return s_capture(A);
    if (!strcmp(s, "ctx-limits")) return s_ctx_limits(A);
    if (!strcmp(s, "missing")) return s_missing(A);
    return -1;
}
