/* client_cap.c — scenarios for the read-only limits file and per-process
 * NVML (runner_limits.c starts them).
 *
 *   try BYTES      allocate BYTES on ordinal 0; prints "ok" or "oom" and
 *                  the free memory the shard is told about
 *   procs ORDINAL  as the agent on the host (run without the interposer):
 *                  prints "card USED", then "pid PID USED" per process from
 *                  nvmlDeviceGetComputeRunningProcesses_v3, checked against
 *                  _v2 and the v1 call */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "client_cap.h"

#define CHECK(cond, ...)                                                                                 \
    do {                                                                                                 \
        if (!(cond)) {                                                                                   \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);                     \
            fprintf(stderr, __VA_ARGS__);                                                                \
            fprintf(stderr, "\n");                                                                       \
            return 1;                                                                                    \
        }                                                                                                \
    } while (0)
#define OK(call) CHECK((call) == CUDA_SUCCESS, "%s", #call)

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

int cap_scenario(const struct api *A, const char *s, int argc, char **argv)
{
    if (!strcmp(s, "try") && argc > 3) return s_try(A, argv[3]);
    if (!strcmp(s, "procs") && argc > 3) return s_procs(A, argv[3]);
    return -1;
}
