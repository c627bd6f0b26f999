/* api.c — populate struct api one of three ways (see api.h). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "api.h"

/* The legacy 32-bit entry points, declared by hand: cuda.h hides them and
 * renames their names to the _v2 ones. */
CUresult legacy_cuMemAlloc(CUdeviceptr32 *dptr, unsigned int bytesize) __asm__("cuMemAlloc");
CUresult legacy_cuMemFree(CUdeviceptr32 dptr) __asm__("cuMemFree");
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *p, int n, unsigned int flags, CUdevice dev);

static int load_link(struct api *a)
{
    *a = (struct api){
        cuInit, cuDeviceGet, cuDeviceGetCount, cuDeviceGetUuid_v2, cuDeviceTotalMem_v2, cuDevicePrimaryCtxRetain,
        cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxReset_v2, cuCtxSetCurrent, cuCtxCreate_v2, cuCtxCreate_v3,
        cuCtxCreate_v4, cuCtxDestroy_v2, cuCtxPopCurrent_v2, cuMemAlloc_v2, cuMemAllocPitch_v2, cuMemAllocManaged,
        cuMemFree_v2, cuMemGetInfo_v2, cuMemAllocAsync, cuMemAllocFromPoolAsync, cuMemFreeAsync, cuMemPoolCreate,
        cuMemPoolDestroy, cuMemPoolTrimTo, cuMemPoolSetAttribute, cuMemPoolGetAttribute, cuDeviceGetDefaultMemPool,
        cuStreamCreate, cuStreamSynchronize, cuMemCreate, cuMemRelease, cuMemMap, cuMemUnmap, cuMemAddressReserve,
        cuMemRetainAllocationHandle, cuArrayCreate_v2, cuArray3DCreate_v2, cuMipmappedArrayCreate, cuArrayDestroy,
        cuMipmappedArrayDestroy, legacy_cuMemAlloc, legacy_cuMemFree, nvmlInit_v2, nvmlShutdown, nvmlDeviceGetHandleByIndex_v2,
        nvmlDeviceGetMemoryInfo, nvmlDeviceGetMemoryInfo_v2};
    return 0;
}

struct named {
    const char *name; /* exported ABI name, for dlsym */
    const char *base; /* base name for cuGetProcAddress */
    int version;      /* CUDA version the runtime asks with */
    int ptsz;         /* ask for the per-thread default stream variant */
    size_t offset;
};
#define N(field, name, base, ver, ptsz) {name, base, ver, ptsz, offsetof(struct api, field)}
static const struct named cuda_names[] = {
    N(cuInit, "cuInit", "cuInit", 2000, 0),
    N(cuDeviceGet, "cuDeviceGet", "cuDeviceGet", 2000, 0),
    N(cuDeviceGetCount, "cuDeviceGetCount", "cuDeviceGetCount", 2000, 0),
    N(cuDeviceGetUuid, "cuDeviceGetUuid_v2", "cuDeviceGetUuid", 11040, 0),
    N(cuDeviceTotalMem, "cuDeviceTotalMem_v2", "cuDeviceTotalMem", 3020, 0),
    N(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", 7000, 0),
    N(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease", 11000, 0),
    N(cuDevicePrimaryCtxReset, "cuDevicePrimaryCtxReset_v2", "cuDevicePrimaryCtxReset", 11000, 0),
    N(cuCtxSetCurrent, "cuCtxSetCurrent", "cuCtxSetCurrent", 4000, 0),
    N(cuCtxCreate_v2, "cuCtxCreate_v2", "cuCtxCreate", 3020, 0),
    N(cuCtxCreate_v3, "cuCtxCreate_v3", "cuCtxCreate", 11040, 0),
    N(cuCtxCreate_v4, "cuCtxCreate_v4", "cuCtxCreate", 12050, 0),
    N(cuCtxDestroy, "cuCtxDestroy_v2", "cuCtxDestroy", 4000, 0),
    N(cuCtxPopCurrent, "cuCtxPopCurrent_v2", "cuCtxPopCurrent", 4000, 0),
    N(cuMemAlloc, "cuMemAlloc_v2", "cuMemAlloc", 3020, 0),
    N(cuMemAllocPitch, "cuMemAllocPitch_v2", "cuMemAllocPitch", 3020, 0),
    N(cuMemAllocManaged, "cuMemAllocManaged", "cuMemAllocManaged", 6000, 0),
    N(cuMemFree, "cuMemFree_v2", "cuMemFree", 3020, 0),
    N(cuMemGetInfo, "cuMemGetInfo_v2", "cuMemGetInfo", 3020, 0),
    N(cuMemAllocAsync, "cuMemAllocAsync_ptsz", "cuMemAllocAsync", 11020, 1),
    N(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync_ptsz", "cuMemAllocFromPoolAsync", 11020, 1),
    N(cuMemFreeAsync, "cuMemFreeAsync_ptsz", "cuMemFreeAsync", 11020, 1),
    N(cuMemPoolCreate, "cuMemPoolCreate", "cuMemPoolCreate", 11020, 0),
    N(cuMemPoolDestroy, "cuMemPoolDestroy", "cuMemPoolDestroy", 11020, 0),
    N(cuMemPoolTrimTo, "cuMemPoolTrimTo", "cuMemPoolTrimTo", 11020, 0),
    N(cuMemPoolSetAttribute, "cuMemPoolSetAttribute", "cuMemPoolSetAttribute", 11020, 0),
    N(cuMemPoolGetAttribute, "cuMemPoolGetAttribute", "cuMemPoolGetAttribute", 11020, 0),
    N(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", "cuDeviceGetDefaultMemPool", 11020, 0),
    N(cuStreamCreate, "cuStreamCreate", "cuStreamCreate", 2000, 0),
    N(cuStreamSynchronize, "cuStreamSynchronize_ptsz", "cuStreamSynchronize", 7000, 1),
    N(cuMemCreate, "cuMemCreate", "cuMemCreate", 10020, 0),
    N(cuMemRelease, "cuMemRelease", "cuMemRelease", 10020, 0),
    N(cuMemMap, "cuMemMap", "cuMemMap", 10020, 0),
    N(cuMemUnmap, "cuMemUnmap", "cuMemUnmap", 10020, 0),
    N(cuMemAddressReserve, "cuMemAddressReserve", "cuMemAddressReserve", 10020, 0),
    N(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle", "cuMemRetainAllocationHandle", 11000, 0),
    N(cuArrayCreate, "cuArrayCreate_v2", "cuArrayCreate", 3020, 0),
    N(cuArray3DCreate, "cuArray3DCreate_v2", "cuArray3DCreate", 3020, 0),
    N(cuMipmappedArrayCreate, "cuMipmappedArrayCreate", "cuMipmappedArrayCreate", 5000, 0),
    N(cuArrayDestroy, "cuArrayDestroy", "cuArrayDestroy", 2000, 0),
    N(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", "cuMipmappedArrayDestroy", 5000, 0),
    N(cuMemAlloc32, "cuMemAlloc", "cuMemAlloc", 2000, 0),
    N(cuMemFree32, "cuMemFree", "cuMemFree", 2000, 0),
};
static const struct named nvml_names[] = {
    N(nvmlInit_v2, "nvmlInit_v2", NULL, 0, 0),
    N(nvmlShutdown, "nvmlShutdown", NULL, 0, 0),
    N(nvmlDeviceGetHandleByIndex_v2, "nvmlDeviceGetHandleByIndex_v2", NULL, 0, 0),
    N(nvmlDeviceGetMemoryInfo, "nvmlDeviceGetMemoryInfo", NULL, 0, 0),
    N(nvmlDeviceGetMemoryInfo_v2, "nvmlDeviceGetMemoryInfo_v2", NULL, 0, 0),
};
#define COUNT(x) (sizeof(x) / sizeof((x)[0]))

static void set(struct api *a, size_t offset, void *p)
{
    memcpy((char *)a + offset, &p, sizeof p);
}

int api_load(struct api *a, const char *mode)
{
    if (strcmp(mode, "link") == 0) return load_link(a);
    memset(a, 0, sizeof *a);
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (cuda == NULL || nvml == NULL) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return -1;
    }
    for (size_t i = 0; i < COUNT(nvml_names); i++) set(a, nvml_names[i].offset, dlsym(nvml, nvml_names[i].name));
    if (strcmp(mode, "dlsym") == 0) {
        for (size_t i = 0; i < COUNT(cuda_names); i++) set(a, cuda_names[i].offset, dlsym(cuda, cuda_names[i].name));
        return 0;
    }
    if (strcmp(mode, "gpa") != 0) return -1;
    CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
        (CUresult(*)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *))dlsym(
            cuda, "cuGetProcAddress_v2");
    if (gpa == NULL) return -1;
    for (size_t i = 0; i < COUNT(cuda_names); i++) {
        const struct named *n = &cuda_names[i];
        void *p = NULL;
        CUdriverProcAddressQueryResult st;
        cuuint64_t flags = n->ptsz ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT;
        if (gpa(n->base, &p, n->version, flags, &st) != CUDA_SUCCESS || p == NULL) {
            fprintf(stderr, "cuGetProcAddress(%s, %d) found nothing (status %d)\n", n->base, n->version, (int)st);
            return -1;
        }
        set(a, n->offset, p);
    }
    return 0;
}
