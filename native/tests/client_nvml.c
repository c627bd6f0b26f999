/* client_nvml.c — NVML's lifecycle through the interposer's hooks.
 *
 *   nvml-uninit VIEW  the memory queries before nvmlInit and after the
 *                     last nvmlShutdown answer NVML_ERROR_UNINITIALIZED, as
 *                     the real NVML does, and leave the caller's struct
 *                     untouched (no shard view, no card view).  VIEW is
 *                     what they show while NVML is up:
 *                       held    the shard's 1 GiB with 256 MiB allocated
 *                               through CUDA first
 *                       empty   the shard's 1 GiB, no CUDA call made
 *                       closed  the library failed closed (bad
 *                               configuration): nothing free */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "client_check.h"
#include "client_nvml.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)
#define SENTINEL 0xabu

typedef nvmlReturn_t (*procs_fn)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);

static int untouched(const void *p, size_t n, size_t from)
{
    for (size_t i = from; i < n; i++)
        if (((const unsigned char *)p)[i] != SENTINEL) return 0;
    return 1;
}

/* Every memory query on device d answers UNINITIALIZED and writes nothing. */
static int refused(const struct api *A, nvmlDevice_t d, const char *when)
{
    nvmlMemory_t m;
    memset(&m, SENTINEL, sizeof m);
    nvmlReturn_t r = A->nvmlDeviceGetMemoryInfo(d, &m);
    CHECK(r == NVML_ERROR_UNINITIALIZED, "%s: nvmlDeviceGetMemoryInfo answered %d", when, (int)r);
    CHECK(untouched(&m, sizeof m, 0), "%s: nvmlDeviceGetMemoryInfo wrote total %llu free %llu used %llu", when,
          m.total, m.free, m.used);
    nvmlMemory_v2_t m2;
    memset(&m2, SENTINEL, sizeof m2);
    m2.version = nvmlMemory_v2;
    r = A->nvmlDeviceGetMemoryInfo_v2(d, &m2);
    CHECK(r == NVML_ERROR_UNINITIALIZED, "%s: nvmlDeviceGetMemoryInfo_v2 answered %d", when, (int)r);
    CHECK(untouched(&m2, sizeof m2, sizeof m2.version), "%s: nvmlDeviceGetMemoryInfo_v2 wrote total %llu used %llu",
          when, m2.total, m2.used);
    /* The per-process listing is not hooked: this holds the fake to NVML's answer. */
    procs_fn procs = (procs_fn)dlsym(RTLD_DEFAULT, "nvmlDeviceGetComputeRunningProcesses_v3");
    CHECK(procs != NULL, "no nvmlDeviceGetComputeRunningProcesses_v3");
    nvmlProcessInfo_t infos[4];
    memset(infos, SENTINEL, sizeof infos);
    unsigned int count = 4;
    r = procs(d, &count, infos);
    CHECK(r == NVML_ERROR_UNINITIALIZED, "%s: the process listing answered %d", when, (int)r);
    CHECK(count == 4 && untouched(infos, sizeof infos, 0), "%s: the process listing wrote (count %u)", when, count);
    return 0;
}

/* The view while NVML is up, so that "refused" above is not merely a
 * broken hook: the shard's 1 GiB with `used` taken, or (closed) nothing free. */
static int shown(const struct api *A, nvmlDevice_t d, int closed, unsigned long long used)
{
    nvmlMemory_t m;
    CHECK(A->nvmlDeviceGetMemoryInfo(d, &m) == NVML_SUCCESS, "memory");
    nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
    CHECK(A->nvmlDeviceGetMemoryInfo_v2(d, &m2) == NVML_SUCCESS, "memory v2");
    if (closed) {
        CHECK(m.free == 0 && m.used == m.total && m2.free == 0, "failed closed, yet free %llu of %llu (v2 %llu)",
              m.free, m.total, m2.free);
        return 0;
    }
    CHECK(m.total == GiB && m.used == used && m.free == GiB - used, "total %llu used %llu free %llu", m.total, m.used,
          m.free);
    CHECK(m2.total == GiB && m2.used == used, "v2 total %llu used %llu", m2.total, m2.used);
    return 0;
}

static int s_uninit(const struct api *A, const char *view)
{
    int held = !strcmp(view, "held"), closed = !strcmp(view, "closed");
    CHECK(held || closed || !strcmp(view, "empty"), "unknown view %s", view);
    unsigned long long used = 0;
    CUdeviceptr p = 0;
    if (held) {
        OK(A->cuInit(0));
        CUdevice dev;
        OK(A->cuDeviceGet(&dev, 0));
        CUcontext c;
        OK(A->cuDevicePrimaryCtxRetain(&c, dev));
        OK(A->cuCtxSetCurrent(c));
        OK(A->cuMemAlloc(&p, 256 * MiB));
        used = 256 * MiB;
    }
    /* Before nvmlInit there is no handle to have: a null one and a made-up one. */
    unsigned char junk[64];
    if (refused(A, NULL, "before init, null handle") || refused(A, (nvmlDevice_t)(void *)junk, "before init"))
        return 1;

    CHECK(A->nvmlInit_v2() == NVML_SUCCESS, "nvmlInit");
    nvmlDevice_t d;
    CHECK(A->nvmlDeviceGetHandleByIndex_v2(0, &d) == NVML_SUCCESS, "handle");
    if (shown(A, d, closed, used)) return 1;
    CHECK(A->nvmlShutdown() == NVML_SUCCESS, "nvmlShutdown");
    if (refused(A, d, "after nvmlShutdown, the handle from before")) return 1;

    /* Init and shutdown are counted: NVML stays up until the last shutdown. */
    CHECK(A->nvmlInit_v2() == NVML_SUCCESS && A->nvmlInit_v2() == NVML_SUCCESS, "nvmlInit twice");
    CHECK(A->nvmlShutdown() == NVML_SUCCESS, "the first of two shutdowns");
    if (shown(A, d, closed, used)) return 1;
    CHECK(A->nvmlShutdown() == NVML_SUCCESS, "the second of two shutdowns");
    if (refused(A, d, "after the last nvmlShutdown")) return 1;
    CHECK(A->nvmlShutdown() == NVML_ERROR_UNINITIALIZED, "a shutdown too many");
    if (held) OK(A->cuMemFree(p));
    printf("ok\n");
    return 0;
}

int nvml_scenario(const struct api *A, const char *s, int argc, char **argv)
{
    if (!strcmp(s, "nvml-uninit") && argc > 3) return s_uninit(A, argv[3]);
    return -1;
}
