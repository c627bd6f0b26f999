/* client.c — scenarios run under LD_PRELOAD=libvgpu.so against the fake
 * driver; the runner (runner.c) starts one process per scenario.
 *
 *   vgpu-client MODE SCENARIO [ARGS]    MODE: link | dlsym | gpa
 *
 * Exit status 0 means every check held; failures are explained on stderr.
 * Checks read the shared region file directly, as the agent would. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "client_check.h"
#include "client_cap.h"
#include "client_nvml.h"
#include "client_compute.h"
#include "client_elastic.h"
#include "client_ipc.h"
#include "gpushards_region.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)

static struct api A;
static struct gpushards_region *R;
static const char *mode;

/* ---- the region, read as the agent reads it ------------------------------- */
static int region_map(void)
{
    const char *path = getenv("GPUSHARDS_REGION_PATH");
    int fd = open(path, O_RDWR);
    if (fd < 0) return -1;
    void *m = mmap(NULL, sizeof *R, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return -1;
    R = m;
    return 0;
}

static void fake_uuid(int phys, uint8_t u[16])
{
    const uint8_t base[16] = {0xfa, 0x4e, 0x50, 0, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0, (uint8_t)phys};
    memcpy(u, base, 16);
}

static struct gpushards_device *dev_by_uuid(const uint8_t u[16])
{
    if (R == NULL && region_map() != 0) return NULL;
    for (uint32_t i = 0; i < R->header.device_count; i++)
        if (memcmp(R->devices[i].uuid, u, 16) == 0) return &R->devices[i];
    return NULL;
}

static struct gpushards_device *dev_phys(int phys)
{
    uint8_t u[16];
    fake_uuid(phys, u);
    return dev_by_uuid(u);
}

static uint64_t used(int phys)
{
    struct gpushards_device *d = dev_phys(phys);
    return d ? __atomic_load_n(&d->used_bytes, __ATOMIC_ACQUIRE) : 0;
}

static uint64_t slot_used(int pid, int phys)
{
    struct gpushards_device *d = dev_phys(phys);
    if (d == NULL) return 0;
    long idx = d - R->devices;
    for (unsigned i = 0; i < GPUSHARDS_MAX_SLOTS; i++)
        if (R->slots[i].pid == pid) return R->slots[i].used_bytes[idx];
    return 0;
}

static CUcontext ctx0;

/* cuInit and the primary context of ordinal 0, as the runtime does. */
static int start(void)
{
    OK(A.cuInit(0));
    CUdevice d;
    OK(A.cuDeviceGet(&d, 0));
    OK(A.cuDevicePrimaryCtxRetain(&ctx0, d));
    OK(A.cuCtxSetCurrent(ctx0));
    return 0;
}

/* ---- each allocation path counted and released -------------------------- */
/* Checked through this process's slot, so that it also holds when other
 * processes allocate at the same time (the region-creation race test). */
static int s_alloc(void)
{
    if (start()) return 1;
    int me = getpid();
    uint64_t base = slot_used(me, 0);
    CUdeviceptr p;
    OK(A.cuMemAlloc(&p, 64 * MiB));
    CHECK(slot_used(me, 0) == base + 64 * MiB, "slot %llu", (unsigned long long)slot_used(me, 0));
    CHECK(used(0) >= base + 64 * MiB, "device %llu", (unsigned long long)used(0));
    OK(A.cuMemFree(p));
    CHECK(slot_used(me, 0) == base, "slot %llu after free", (unsigned long long)slot_used(me, 0));
    CHECK(A.cuMemFree(p) != CUDA_SUCCESS, "double free accepted");
    CHECK(slot_used(me, 0) == base, "double free changed usage");
    return 0;
}

/* An allocation whose result has nowhere to go is refused, as the driver
 * refuses it, and leaves no charge behind. */
static int s_null_out(void)
{
    if (start()) return 1;
    int me = getpid();
    uint64_t base = slot_used(me, 0);
    size_t pitch;
    CUstream s;
    OK(A.cuStreamCreate(&s, 0));
    CHECK(A.cuMemAlloc(NULL, 64 * MiB) == CUDA_ERROR_INVALID_VALUE, "cuMemAlloc into NULL was taken");
    CHECK(A.cuMemAllocPitch(NULL, &pitch, 4096, 16, 4) == CUDA_ERROR_INVALID_VALUE, "cuMemAllocPitch into NULL was taken");
    CHECK(A.cuMemAllocManaged(NULL, 64 * MiB, CU_MEM_ATTACH_GLOBAL) == CUDA_ERROR_INVALID_VALUE,
          "cuMemAllocManaged into NULL was taken");
    CHECK(A.cuMemAllocAsync(NULL, 64 * MiB, s) == CUDA_ERROR_INVALID_VALUE, "cuMemAllocAsync into NULL was taken");
    CHECK(slot_used(me, 0) == base, "%llu bytes charged for refused allocations",
          (unsigned long long)(slot_used(me, 0) - base));
    return 0;
}

static int s_pitch(void)
{
    if (start()) return 1;
    uint64_t base = used(0);
    CUdeviceptr p;
    size_t pitch = 0;
    OK(A.cuMemAllocPitch(&p, &pitch, 1000, 100, 4));
    CHECK(pitch >= 1000, "pitch %zu", pitch);
    CHECK(used(0) == base + pitch * 100, "used %llu, pitch %zu", (unsigned long long)used(0), pitch);
    OK(A.cuMemFree(p));
    CHECK(used(0) == base, "after free");
    return 0;
}

static int s_managed(void)
{
    if (start()) return 1;
    uint64_t base = used(0);
    CUdeviceptr p;
    OK(A.cuMemAllocManaged(&p, 32 * MiB, CU_MEM_ATTACH_GLOBAL));
    CHECK(used(0) == base + 32 * MiB, "used %llu", (unsigned long long)used(0));
    OK(A.cuMemFree(p));
    CHECK(used(0) == base, "after free");
    return 0;
}

static uint64_t reserved(CUmemoryPool pool)
{
    cuuint64_t v = 0;
    A.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v);
    return v;
}

static int info_touch(void)
{
    size_t f, t;
    return A.cuMemGetInfo(&f, &t) != CUDA_SUCCESS;
}

/* The pool's reserved memory is what counts (GPUSHARDS_FAKE_POOL_CHUNK=2m). */
static int s_async(void)
{
    if (start()) return 1;
    uint64_t base = used(0);
    CUmemoryPool pool;
    CUdevice d = 0;
    OK(A.cuDeviceGetDefaultMemPool(&pool, d));
    CUdeviceptr a, b;
    CHECK(A.cuMemAllocAsync(&a, 0, NULL) == CUDA_ERROR_INVALID_VALUE, "0 bytes: the driver's answer");
    CHECK(used(0) == base, "0 bytes charged %llu", (unsigned long long)(used(0) - base));
    OK(A.cuMemAllocAsync(&a, 3 * MiB, NULL));
    CHECK(used(0) == base + reserved(pool) && reserved(pool) == 4 * MiB, "used %llu reserved %llu",
          (unsigned long long)(used(0) - base), (unsigned long long)reserved(pool));
    OK(A.cuMemAllocAsync(&b, 1 * MiB, NULL));
    CHECK(used(0) == base + 4 * MiB, "second fits the growth step: %llu", (unsigned long long)(used(0) - base));
    OK(A.cuMemFreeAsync(a, NULL));
    OK(A.cuMemFreeAsync(b, NULL));
    CHECK(used(0) == base + 4 * MiB, "freed but cached: %llu", (unsigned long long)(used(0) - base));
    OK(A.cuStreamSynchronize(NULL)); /* threshold 0: the pool trims */
    CHECK(info_touch() == 0, "cuMemGetInfo");
    CHECK(used(0) == base, "trimmed: %llu", (unsigned long long)(used(0) - base));

    cuuint64_t keep = ~0ull;
    OK(A.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
    OK(A.cuMemAllocAsync(&a, 8 * MiB, NULL));
    OK(A.cuMemFreeAsync(a, NULL));
    OK(A.cuStreamSynchronize(NULL));
    CHECK(used(0) == base + 8 * MiB, "cache kept: %llu", (unsigned long long)(used(0) - base));
    OK(A.cuMemAllocAsync(&a, 8 * MiB, NULL));
    CHECK(used(0) == base + 8 * MiB, "served from cache, not charged twice: %llu", (unsigned long long)(used(0) - base));
    OK(A.cuMemFree(a)); /* cuMemFree also frees stream-ordered memory */
    OK(A.cuMemPoolTrimTo(pool, 0));
    CHECK(used(0) == base, "after trim: %llu", (unsigned long long)(used(0) - base));
    return 0;
}

static int s_pool(void)
{
    if (start()) return 1;
    uint64_t base = used(0);
    CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                            .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemoryPool pool, host;
    OK(A.cuMemPoolCreate(&pool, &props));
    CUstream s;
    OK(A.cuStreamCreate(&s, 0));
    CUdeviceptr p;
    OK(A.cuMemAllocFromPoolAsync(&p, 6 * MiB, pool, s));
    CHECK(used(0) == base + 6 * MiB, "used %llu", (unsigned long long)(used(0) - base));
    OK(A.cuMemFreeAsync(p, s));
    OK(A.cuMemPoolDestroy(pool));
    CHECK(used(0) == base, "destroyed pool: %llu", (unsigned long long)(used(0) - base));
    props.location.type = CU_MEM_LOCATION_TYPE_HOST;
    OK(A.cuMemPoolCreate(&host, &props));
    OK(A.cuMemAllocFromPoolAsync(&p, 6 * MiB, host, s));
    CHECK(used(0) == base, "host pool counted: %llu", (unsigned long long)(used(0) - base));
    OK(A.cuMemFreeAsync(p, s));
    return 0;
}

static int s_vmm(void)
{
    if (start()) return 1;
    uint64_t base = used(0);
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemGenericAllocationHandle h, h2, lone;
    OK(A.cuMemCreate(&lone, 2 * MiB, &prop, 0));
    CHECK(used(0) == base + 2 * MiB, "created");
    OK(A.cuMemRelease(lone));
    CHECK(used(0) == base, "released unmapped");

    OK(A.cuMemCreate(&h, 8 * MiB, &prop, 0));
    CHECK(used(0) == base + 8 * MiB, "created 8");
    CUdeviceptr va;
    OK(A.cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0));
    OK(A.cuMemMap(va, 4 * MiB, 0, h, 0));
    OK(A.cuMemMap(va + 4 * MiB, 4 * MiB, 4 * MiB, h, 0));
    OK(A.cuMemRelease(h)); /* the usual idiom: release once mapped */
    CHECK(used(0) == base + 8 * MiB, "mapped memory outlives its handle");
    OK(A.cuMemRetainAllocationHandle(&h2, (void *)(uintptr_t)va));
    CHECK(h2 == h, "same handle back");
    OK(A.cuMemRelease(h2));
    CHECK(used(0) == base + 8 * MiB, "still mapped");
    OK(A.cuMemUnmap(va, 8 * MiB));
    CHECK(used(0) == base, "unmapped: %llu", (unsigned long long)(used(0) - base));

    prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    OK(A.cuMemCreate(&h, 4 * MiB, &prop, 0));
    CHECK(used(0) == base, "host memory counted");
    OK(A.cuMemRelease(h));
    return 0;
}

static int s_array(void)
{
    if (start()) return 1;
    uint64_t base = used(0);
    CUDA_ARRAY_DESCRIPTOR d2 = {.Width = 1024, .Height = 1024, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
    CUarray a, b;
    OK(A.cuArrayCreate(&a, &d2));
    CHECK(used(0) == base + 4 * MiB, "2D: %llu", (unsigned long long)(used(0) - base));
    CUDA_ARRAY3D_DESCRIPTOR d3 = {.Width = 64, .Height = 64, .Depth = 64, .Format = CU_AD_FORMAT_UNSIGNED_INT8,
                                  .NumChannels = 4};
    OK(A.cuArray3DCreate(&b, &d3));
    CHECK(used(0) == base + 5 * MiB, "3D: %llu", (unsigned long long)(used(0) - base));
    CUmipmappedArray m;
    CUDA_ARRAY3D_DESCRIPTOR dm = {.Width = 256, .Height = 256, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
    OK(A.cuMipmappedArrayCreate(&m, &dm, 3));
    uint64_t mip = (256 * 256 + 128 * 128 + 64 * 64) * 4;
    CHECK(used(0) == base + 5 * MiB + mip, "mipmap: %llu", (unsigned long long)(used(0) - base));
    OK(A.cuArrayDestroy(a));
    OK(A.cuArrayDestroy(b));
    OK(A.cuMipmappedArrayDestroy(m));
    CHECK(used(0) == base, "destroyed: %llu", (unsigned long long)(used(0) - base));
    CUDA_ARRAY3D_DESCRIPTOR sparse = d3;
    sparse.Flags = CUDA_ARRAY3D_DEFERRED_MAPPING;
    OK(A.cuArray3DCreate(&b, &sparse));
    CHECK(used(0) == base, "deferred-mapping array has no memory of its own");
    OK(A.cuArrayDestroy(b));
    return 0;
}

/* GPUSHARDS_CONTEXT_BYTES=100m */
static int s_context(void)
{
    OK(A.cuInit(0));
    uint64_t c = 100 * MiB;
    CUcontext x, y, z;
    OK(A.cuCtxCreate_v2(&x, 0, 0));
    CHECK(used(0) == c, "v2: %llu", (unsigned long long)used(0));
    OK(A.cuCtxCreate_v3(&y, NULL, 0, 0, 0));
    OK(A.cuCtxCreate_v4(&z, NULL, 0, 0));
    CHECK(used(0) == 3 * c, "three contexts: %llu", (unsigned long long)used(0));
    CUdeviceptr p;
    OK(A.cuMemAlloc(&p, 16 * MiB)); /* in z, the current context */
    OK(A.cuCtxDestroy(z));
    CHECK(used(0) == 2 * c, "destroying a context gives back what it held: %llu", (unsigned long long)used(0));
    OK(A.cuCtxDestroy(y));
    OK(A.cuCtxDestroy(x));
    CHECK(used(0) == 0, "all destroyed: %llu", (unsigned long long)used(0));
    return 0;
}

static int s_primary(void)
{
    OK(A.cuInit(0));
    uint64_t c = 100 * MiB;
    CUcontext p1, p2;
    OK(A.cuDevicePrimaryCtxRetain(&p1, 0));
    CHECK(used(0) == c, "first retain: %llu", (unsigned long long)used(0));
    OK(A.cuDevicePrimaryCtxRetain(&p2, 0));
    CHECK(used(0) == c, "charged once");
    OK(A.cuCtxSetCurrent(p1));
    CUdeviceptr m;
    OK(A.cuMemAlloc(&m, 16 * MiB));
    OK(A.cuDevicePrimaryCtxReset(0));
    CHECK(used(0) == c, "reset frees the allocations: %llu", (unsigned long long)used(0));
    OK(A.cuDevicePrimaryCtxRelease(0));
    CHECK(used(0) == c, "one reference left");
    OK(A.cuDevicePrimaryCtxRelease(0));
    CHECK(used(0) == 0, "released: %llu", (unsigned long long)used(0));
    return 0;
}

static int s_legacy(void)
{
    if (start()) return 1;
    uint64_t base = used(0);
    CUdeviceptr32 p;
    OK(A.cuMemAlloc32(&p, (unsigned int)MiB));
    CHECK(used(0) == base + MiB, "v1 alloc counted");
    OK(A.cuMemFree32(p));
    CHECK(used(0) == base, "v1 free");
    return 0;
}

/* ---- the cap (CUDA_DEVICE_MEMORY_LIMIT=1g) --------------------------------- */
static int s_cap(void)
{
    if (start()) return 1;
    CUdeviceptr a, b, c, x;
    OK(A.cuMemAlloc(&a, 600 * MiB));
    CHECK(A.cuMemAlloc(&x, 500 * MiB) == CUDA_ERROR_OUT_OF_MEMORY, "over the cap");
    CHECK(used(0) == 600 * MiB, "usage unchanged: %llu", (unsigned long long)used(0));
    OK(A.cuMemAlloc(&b, 424 * MiB)); /* exactly to the cap */
    CHECK(used(0) == GiB, "at the cap");
    CHECK(A.cuMemAlloc(&x, 1) == CUDA_ERROR_OUT_OF_MEMORY, "one byte past");
    size_t pitch;
    CHECK(A.cuMemAllocPitch(&x, &pitch, 4096, 16, 4) == CUDA_ERROR_OUT_OF_MEMORY, "pitch");
    CHECK(A.cuMemAllocManaged(&x, MiB, CU_MEM_ATTACH_GLOBAL) == CUDA_ERROR_OUT_OF_MEMORY, "managed");
    CHECK(A.cuMemAllocAsync(&x, MiB, NULL) == CUDA_ERROR_OUT_OF_MEMORY, "async");
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemGenericAllocationHandle h;
    CHECK(A.cuMemCreate(&h, 2 * MiB, &prop, 0) == CUDA_ERROR_OUT_OF_MEMORY, "vmm");
    CUarray arr;
    CUDA_ARRAY_DESCRIPTOR d2 = {.Width = 64, .Height = 64, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
    CHECK(A.cuArrayCreate(&arr, &d2) == CUDA_ERROR_OUT_OF_MEMORY, "array");
    CHECK(used(0) == GiB, "usage unchanged after refusals: %llu", (unsigned long long)used(0));
    OK(A.cuMemFree(b));
    OK(A.cuMemAlloc(&c, 400 * MiB));
    OK(A.cuMemFree(a));
    OK(A.cuMemFree(c));
    CHECK(used(0) == 0, "all freed");
    return 0;
}

static int s_info(void)
{
    if (start()) return 1;
    size_t f, t, total;
    OK(A.cuMemGetInfo(&f, &t));
    CHECK(t == GiB && f == GiB, "free %zu total %zu", f, t);
    OK(A.cuDeviceTotalMem(&total, 0));
    CHECK(total == GiB, "cuDeviceTotalMem %zu", total);
    CUdeviceptr p;
    OK(A.cuMemAlloc(&p, 256 * MiB));
    OK(A.cuMemGetInfo(&f, &t));
    CHECK(t == GiB && f == 768 * MiB, "after 256m: free %zu total %zu", f, t);
    OK(A.cuMemFree(p));
    return 0;
}

/* A cap larger than the card: the card's figures win (GPUSHARDS_FAKE_GPUS
 * with 2g, limit 8g). */
static int s_info_clamp(void)
{
    if (start()) return 1;
    size_t f, t, total;
    OK(A.cuMemGetInfo(&f, &t));
    CHECK(t == 2 * GiB, "total %zu", t);
    CHECK(f <= 2 * GiB, "free %zu", f);
    OK(A.cuDeviceTotalMem(&total, 0));
    CHECK(total == 2 * GiB, "cuDeviceTotalMem %zu", total);
    return 0;
}

static int s_nvml(void)
{
    if (start()) return 1;
    CUdeviceptr p;
    OK(A.cuMemAlloc(&p, 256 * MiB));
    CHECK(A.nvmlInit_v2() == NVML_SUCCESS, "nvmlInit");
    nvmlDevice_t d0, d1;
    CHECK(A.nvmlDeviceGetHandleByIndex_v2(0, &d0) == NVML_SUCCESS, "handle 0");
    nvmlMemory_t m;
    CHECK(A.nvmlDeviceGetMemoryInfo(d0, &m) == NVML_SUCCESS, "memory");
    CHECK(m.total == GiB && m.used == 256 * MiB && m.free == 768 * MiB, "v1 total %llu used %llu free %llu", m.total,
          m.used, m.free);
    nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
    CHECK(A.nvmlDeviceGetMemoryInfo_v2(d0, &m2) == NVML_SUCCESS, "memory v2");
    CHECK(m2.total == GiB && m2.used == 256 * MiB && m2.free == 768 * MiB && m2.reserved == 0,
          "v2 total %llu used %llu free %llu", m2.total, m2.used, m2.free);
    /* GPU 1 has no limit: the card's own figures. */
    CHECK(A.nvmlDeviceGetHandleByIndex_v2(1, &d1) == NVML_SUCCESS, "handle 1");
    CHECK(A.nvmlDeviceGetMemoryInfo(d1, &m) == NVML_SUCCESS, "memory 1");
    CHECK(m.total == 24 * GiB, "uncapped GPU total %llu", m.total);
    OK(A.cuMemFree(p));
    return 0;
}

/* ---- concurrency --------------------------------------------------------------- */
static uint64_t limit_of(int phys)
{
    struct gpushards_device *d = dev_phys(phys);
    return d ? __atomic_load_n(&d->limit_bytes, __ATOMIC_ACQUIRE) : 0;
}

static int violations, refusals;

static void *churn_thread(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    long iters = strtol(getenv("CHURN_ITERS") ? getenv("CHURN_ITERS") : "10000", NULL, 10);
    CUdeviceptr live[32] = {0};
    if (A.cuCtxSetCurrent(ctx0) != CUDA_SUCCESS) __atomic_add_fetch(&violations, 1, __ATOMIC_RELAXED);
    uint64_t limit = limit_of(0);
    for (long i = 0; i < iters; i++) {
        int k = rand_r(&seed) % 32;
        if (live[k]) {
            if (A.cuMemFree(live[k]) != CUDA_SUCCESS) __atomic_add_fetch(&violations, 1, __ATOMIC_RELAXED);
            live[k] = 0;
        } else {
            size_t sz = (size_t)(rand_r(&seed) % 64 + 1) * MiB - (size_t)(rand_r(&seed) % 4096);
            CUresult r = A.cuMemAlloc(&live[k], sz);
            if (r == CUDA_ERROR_OUT_OF_MEMORY) {
                live[k] = 0;
                __atomic_add_fetch(&refusals, 1, __ATOMIC_RELAXED);
            } else if (r != CUDA_SUCCESS) {
                __atomic_add_fetch(&violations, 1, __ATOMIC_RELAXED);
            }
        }
        if (limit != 0 && used(0) > limit) __atomic_add_fetch(&violations, 1, __ATOMIC_RELAXED);
    }
    for (int k = 0; k < 32; k++)
        if (live[k] && A.cuMemFree(live[k]) != CUDA_SUCCESS) __atomic_add_fetch(&violations, 1, __ATOMIC_RELAXED);
    return NULL;
}

static int s_threads(void)
{
    if (start()) return 1;
    pthread_t t[8];
    for (int i = 0; i < 8; i++) pthread_create(&t[i], NULL, churn_thread, (void *)(uintptr_t)(i * 7919 + getpid()));
    for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
    CHECK(violations == 0, "%d violations (over the cap or failed frees)", violations);
    CHECK(refusals > 0, "the cap was never reached");
    CHECK(used(0) == 0, "back to zero: %llu", (unsigned long long)used(0));
    printf("refusals %d\n", refusals);
    return 0;
}

/* One of several processes sharing one region (multi-process test). */
static int s_churn(void)
{
    if (start()) return 1;
    churn_thread((void *)(uintptr_t)getpid());
    CHECK(violations == 0, "%d violations", violations);
    printf("refusals %d\n", refusals);
    return 0;
}

/* A full allocation table (GPUSHARDS_TRACK_CAPACITY=64): pointer
 * allocations go on, sized by the driver when freed; handles that cannot be
 * sized later are refused. */
static int s_full(void)
{
    if (start()) return 1;
    CUdeviceptr p[100];
    for (int i = 0; i < 100; i++) OK(A.cuMemAlloc(&p[i], MiB));
    CHECK(used(0) == 100 * MiB, "used %llu", (unsigned long long)used(0));
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemGenericAllocationHandle h;
    CHECK(A.cuMemCreate(&h, 2 * MiB, &prop, 0) == CUDA_ERROR_OUT_OF_MEMORY, "VMM with a full table");
    CHECK(used(0) == 100 * MiB, "refusal left usage at %llu", (unsigned long long)used(0));
    for (int i = 0; i < 100; i++) OK(A.cuMemFree(p[i]));
    CHECK(used(0) == 0, "after frees %llu", (unsigned long long)used(0));
    return 0;
}

/* Stream-ordered allocations and frees from 8 threads, with trims between
 * (GPUSHARDS_FAKE_POOL_CHUNK=2m, a small limit): usage never passes the
 * cap, and ends where the pool ends.  (An earlier lock-free version let
 * the threads drive the pool past the cap through a stale view of its
 * cache; this test caught it.) */
static uint64_t async_peak;
static pthread_barrier_t async_start; /* every thread holds its 24 MiB before any goes on */

static void *async_thread(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    CUdeviceptr live[16] = {0};
    if (A.cuCtxSetCurrent(ctx0) != CUDA_SUCCESS) __atomic_add_fetch(&violations, 1, __ATOMIC_RELAXED);
    /* Each thread holds 24 MiB throughout, taken before any thread goes on,
     * so that 8 of them pass the 128 MiB cap however the scheduler runs
     * them (on a loaded machine the random part alone sometimes never
     * reached the cap). */
    CUdeviceptr held = 0;
    CUresult hr = A.cuMemAllocAsync(&held, 24 * MiB, NULL);
    if (hr == CUDA_ERROR_OUT_OF_MEMORY) __atomic_add_fetch(&refusals, 1, __ATOMIC_RELAXED);
    else if (hr != CUDA_SUCCESS) __atomic_add_fetch(&violations, 1, __ATOMIC_RELAXED);
    pthread_barrier_wait(&async_start);
    for (int i = 0; i < 2000; i++) {
        int k = rand_r(&seed) % 16;
        if (live[k]) {
            if (A.cuMemFreeAsync(live[k], NULL) != CUDA_SUCCESS) __atomic_add_fetch(&violations, 1, __ATOMIC_RELAXED);
            live[k] = 0;
        } else {
            size_t sz = (size_t)(rand_r(&seed) % (8 * MiB)) + 1;
            CUresult r = A.cuMemAllocAsync(&live[k], sz, NULL);
            if (r == CUDA_ERROR_OUT_OF_MEMORY) {
                live[k] = 0;
                __atomic_add_fetch(&refusals, 1, __ATOMIC_RELAXED);
            } else if (r != CUDA_SUCCESS) {
                __atomic_add_fetch(&violations, 1, __ATOMIC_RELAXED);
            }
        }
        if (i % 97 == 0 && A.cuStreamSynchronize(NULL) != CUDA_SUCCESS)
            __atomic_add_fetch(&violations, 1, __ATOMIC_RELAXED);
        uint64_t u = used(0), seen = __atomic_load_n(&async_peak, __ATOMIC_RELAXED);
        while (u > seen && !__atomic_compare_exchange_n(&async_peak, &seen, u, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        }
    }
    for (int k = 0; k < 16; k++)
        if (live[k] && A.cuMemFreeAsync(live[k], NULL) != CUDA_SUCCESS)
            __atomic_add_fetch(&violations, 1, __ATOMIC_RELAXED);
    if (held && A.cuMemFreeAsync(held, NULL) != CUDA_SUCCESS) __atomic_add_fetch(&violations, 1, __ATOMIC_RELAXED);
    return NULL;
}

static int s_threads_async(void)
{
    if (start()) return 1;
    pthread_t t[8];
    pthread_barrier_init(&async_start, NULL, 8);
    for (int i = 0; i < 8; i++) pthread_create(&t[i], NULL, async_thread, (void *)(uintptr_t)(i * 104729 + 1));
    for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
    CHECK(violations == 0, "%d failed calls", violations);
    CHECK(async_peak <= limit_of(0), "peak %llu: past the cap", (unsigned long long)async_peak);
    struct gpushards_device *d = dev_phys(0);
    CHECK(d->peak_bytes <= limit_of(0), "the region's peak %llu: past the cap", (unsigned long long)d->peak_bytes);
    CHECK(refusals > 0, "the cap was never reached");
    OK(A.cuStreamSynchronize(NULL));
    CHECK(info_touch() == 0, "cuMemGetInfo");
    CHECK(used(0) == 0, "after the pool trimmed: %llu", (unsigned long long)used(0));
    printf("refusals %d, peak %llu MiB\n", refusals, (unsigned long long)(async_peak >> 20));
    return 0;
}

/* Stream-ordered allocations of one size until refused, from one or more
 * threads (SIZE in bytes, THREADS), from the current pool (pool-cap) or a
 * pool we create (pool-cap-from), under a cap with a context charge and the
 * fake growing pools in GPUSHARDS_FAKE_POOL_CHUNK steps.  Neither what the
 * region charges nor what the card really holds (the pool's reserved bytes,
 * highest ever included, plus the context) may pass the cap at any moment;
 * a refusal leaves usage unchanged and wastes less than a growth step and
 * the request; freeing and trimming brings usage back to the context. */
#define CAP_MAX_THREADS 8
#define CAP_MAX_LIVE 4096
static CUmemoryPool cap_pool;
static int cap_from_pool;
static size_t cap_size;
static uint64_t cap_step, cap_ctx, cap_limit, cap_peak_real, cap_peak_used;
static int cap_threads, cap_violations, cap_early, cap_moved;
static CUdeviceptr cap_live[CAP_MAX_THREADS][CAP_MAX_LIVE];
static int cap_count[CAP_MAX_THREADS];

static uint64_t pool_attr(CUmemoryPool pool, CUmemPool_attribute attr)
{
    cuuint64_t v = 0;
    if (A.cuMemPoolGetAttribute(pool, attr, &v) != CUDA_SUCCESS) return UINT64_MAX;
    return v;
}

static void raise_to(uint64_t *peak, uint64_t v)
{
    uint64_t seen = __atomic_load_n(peak, __ATOMIC_RELAXED);
    while (v > seen && !__atomic_compare_exchange_n(peak, &seen, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

/* What the card holds for us and what the region charges, both within the cap. */
static void cap_look(void)
{
    uint64_t real = pool_attr(cap_pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) + cap_ctx, u = used(0);
    raise_to(&cap_peak_real, real);
    raise_to(&cap_peak_used, u);
    if (real > cap_limit || u > cap_limit) __atomic_add_fetch(&cap_violations, 1, __ATOMIC_RELAXED);
}

static void *cap_thread(void *arg)
{
    int t = (int)(uintptr_t)arg;
    if (A.cuCtxSetCurrent(ctx0) != CUDA_SUCCESS) __atomic_add_fetch(&cap_violations, 1, __ATOMIC_RELAXED);
    while (cap_count[t] < CAP_MAX_LIVE) {
        uint64_t before = used(0), live_before = pool_attr(cap_pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT),
                 reserved_before = pool_attr(cap_pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
        CUdeviceptr p = 0;
        CUresult r = cap_from_pool ? A.cuMemAllocFromPoolAsync(&p, cap_size, cap_pool, NULL)
                                   : A.cuMemAllocAsync(&p, cap_size, NULL);
        cap_look();
        if (r == CUDA_ERROR_OUT_OF_MEMORY) {
            if (cap_threads == 1) {
                /* Alone, the refusal must be for want of room for a whole
                 * growth step, and must change nothing. */
                uint64_t worst = (cap_size + cap_step - 1) / cap_step * cap_step;
                if (reserved_before - live_before >= cap_size || before + worst <= cap_limit)
                    __atomic_add_fetch(&cap_early, 1, __ATOMIC_RELAXED);
                if (used(0) != before) __atomic_add_fetch(&cap_moved, 1, __ATOMIC_RELAXED);
            }
            break;
        }
        if (r != CUDA_SUCCESS) {
            __atomic_add_fetch(&cap_violations, 1, __ATOMIC_RELAXED);
            break;
        }
        cap_live[t][cap_count[t]++] = p;
    }
    return NULL;
}

static uint64_t env_size(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);
    if (v == NULL) return dflt;
    char *end;
    uint64_t n = strtoull(v, &end, 10);
    return *end == 'm' ? n * MiB : *end == 'g' ? n * GiB : n;
}

static int s_pool_cap(int from_pool, const char *size, const char *threads)
{
    if (start()) return 1;
    cap_from_pool = from_pool;
    cap_size = (size_t)strtoull(size, NULL, 10);
    cap_threads = atoi(threads);
    CHECK(cap_size > 0 && cap_threads >= 1 && cap_threads <= CAP_MAX_THREADS, "bad arguments");
    cap_step = env_size("GPUSHARDS_FAKE_POOL_CHUNK", 32 * MiB);
    cap_ctx = env_size("GPUSHARDS_FAKE_CONTEXT_BYTES", 300 * MiB);
    cap_limit = limit_of(0);
    uint64_t base = used(0);
    CHECK(base == cap_ctx, "the context is charged %llu, the card takes %llu", (unsigned long long)base,
          (unsigned long long)cap_ctx);
    CHECK(cap_limit != 0, "no cap");
    CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                            .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    if (from_pool) OK(A.cuMemPoolCreate(&cap_pool, &props));
    else OK(A.cuDeviceGetDefaultMemPool(&cap_pool, 0));

    pthread_t t[CAP_MAX_THREADS];
    for (int i = 0; i < cap_threads; i++) pthread_create(&t[i], NULL, cap_thread, (void *)(uintptr_t)i);
    for (int i = 0; i < cap_threads; i++) pthread_join(t[i], NULL);
    uint64_t live = 0;
    for (int i = 0; i < cap_threads; i++) live += (uint64_t)cap_count[i] * cap_size;
    uint64_t reserved_high = pool_attr(cap_pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH);
    struct gpushards_device *d = dev_phys(0);
    uint64_t region_peak = __atomic_load_n(&d->peak_bytes, __ATOMIC_RELAXED);
    printf("%llu MiB in %zu-byte pieces from %d thread(s); room %llu MiB; peak charged %.2f MiB, card %.2f MiB "
           "(pool reserved at most %.2f MiB); cap %llu MiB\n",
           (unsigned long long)(live >> 20), cap_size, cap_threads, (unsigned long long)((cap_limit - cap_ctx) >> 20),
           region_peak / (double)MiB, (reserved_high + cap_ctx) / (double)MiB, reserved_high / (double)MiB,
           (unsigned long long)(cap_limit >> 20));
    CHECK(cap_violations == 0, "%d looks past the cap (or failed calls): card peak %llu, charged peak %llu, cap %llu",
          cap_violations, (unsigned long long)cap_peak_real, (unsigned long long)cap_peak_used,
          (unsigned long long)cap_limit);
    CHECK(reserved_high + cap_ctx <= cap_limit, "the card held %llu > cap %llu", (unsigned long long)(reserved_high + cap_ctx),
          (unsigned long long)cap_limit);
    CHECK(region_peak <= cap_limit, "the region's peak %llu > cap %llu", (unsigned long long)region_peak,
          (unsigned long long)cap_limit);
    CHECK(cap_early == 0, "refused although a whole growth step fitted or the pool had room");
    CHECK(cap_moved == 0, "a refusal changed usage");
    /* The price: less than one growth step (plus the request) left unused. */
    if (cap_threads == 1)
        CHECK(live + cap_ctx + cap_step + cap_size > cap_limit, "only %llu MiB of %llu usable",
              (unsigned long long)(live >> 20), (unsigned long long)((cap_limit - cap_ctx) >> 20));
    else
        CHECK(live > 0, "nothing allocated");

    for (int i = 0; i < cap_threads; i++)
        for (int k = 0; k < cap_count[i]; k++) OK(A.cuMemFreeAsync(cap_live[i][k], NULL));
    CHECK(used(0) <= cap_limit, "after the frees: %llu", (unsigned long long)used(0));
    OK(A.cuStreamSynchronize(NULL)); /* threshold 0: the pool trims */
    CHECK(info_touch() == 0, "cuMemGetInfo");
    CHECK(pool_attr(cap_pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0, "the pool kept %llu",
          (unsigned long long)pool_attr(cap_pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT));
    CHECK(used(0) == base, "after the pool trimmed: %llu, the context is %llu", (unsigned long long)used(0),
          (unsigned long long)base);
    if (from_pool) {
        OK(A.cuMemPoolDestroy(cap_pool));
        CHECK(used(0) == base, "after the pool was destroyed: %llu", (unsigned long long)used(0));
    }
    return 0;
}

/* NVML before any CUDA call (nvidia-smi in a fresh container). */
static int s_nvml_only(void)
{
    CHECK(A.nvmlInit_v2() == NVML_SUCCESS, "nvmlInit");
    nvmlDevice_t d;
    CHECK(A.nvmlDeviceGetHandleByIndex_v2(0, &d) == NVML_SUCCESS, "handle");
    nvmlMemory_t m;
    CHECK(A.nvmlDeviceGetMemoryInfo(d, &m) == NVML_SUCCESS, "memory");
    CHECK(m.total == GiB && m.used == 0 && m.free == GiB, "total %llu used %llu free %llu", m.total, m.used, m.free);
    return 0;
}

/* Raw NVML, as the agent reads it on the host (run without the interposer):
 * the fake card shows what every process holds, contexts included. */
static int s_nvml_used(const char *min_text)
{
    CHECK(A.nvmlInit_v2() == NVML_SUCCESS, "nvmlInit");
    nvmlDevice_t d;
    CHECK(A.nvmlDeviceGetHandleByIndex_v2(0, &d) == NVML_SUCCESS, "handle");
    nvmlMemory_v2_t m = {.version = nvmlMemory_v2};
    CHECK(A.nvmlDeviceGetMemoryInfo_v2(d, &m) == NVML_SUCCESS, "memory");
    unsigned long long min = strtoull(min_text, NULL, 0);
    CHECK(m.used == min && m.total == 80 * GiB && m.free == m.total - m.used, "used %llu (want %llu) total %llu",
          m.used, min, m.total);
    return 0;
}

/* Hold memory until killed. */
static int s_hold(const char *bytes)
{
    if (start()) return 1;
    CUdeviceptr p;
    OK(A.cuMemAlloc(&p, strtoull(bytes, NULL, 0)));
    printf("ready\n");
    fflush(stdout);
    for (;;) pause();
}

/* Take the region's lock and die holding it (the runner SIGKILLs us). */
static int s_lock(void)
{
    if (start()) return 1;
    CHECK(region_map() == 0, "map");
    pthread_mutex_t *m = (pthread_mutex_t *)(void *)R->header.lock;
    int e = pthread_mutex_lock(m);
    if (e == EOWNERDEAD) e = pthread_mutex_consistent(m);
    CHECK(e == 0, "lock: %d", e);
    printf("ready\n");
    fflush(stdout);
    for (;;) pause();
}

/* Fail closed: nothing may be allocated. */
static int s_refused(void)
{
    OK(A.cuInit(0));
    CUcontext c;
    CUresult r = A.cuDevicePrimaryCtxRetain(&c, 0);
    if (r == CUDA_SUCCESS) {
        OK(A.cuCtxSetCurrent(c));
        CUdeviceptr p;
        r = A.cuMemAlloc(&p, MiB);
    }
    CHECK(r == CUDA_ERROR_OUT_OF_MEMORY, "expected CUDA_ERROR_OUT_OF_MEMORY, got %d", (int)r);
    return 0;
}

/* Allocate on a CUDA ordinal and report which physical GPU it charged. */
static int s_visible(const char *ordinal_text, const char *want_phys_text)
{
    OK(A.cuInit(0));
    int ordinal = atoi(ordinal_text), want = atoi(want_phys_text);
    CUcontext c;
    OK(A.cuDevicePrimaryCtxRetain(&c, ordinal));
    OK(A.cuCtxSetCurrent(c));
    CUdeviceptr p;
    OK(A.cuMemAlloc(&p, 48 * MiB));
    CUuuid u;
    OK(A.cuDeviceGetUuid(&u, ordinal));
    uint8_t expect[16];
    fake_uuid(want, expect);
    CHECK(memcmp(u.bytes, expect, 16) == 0, "ordinal %d is not physical GPU %d", ordinal, want);
    CHECK(used(want) == 48 * MiB, "GPU %d charged %llu", want, (unsigned long long)used(want));
    for (int g = 0; g < 3; g++)
        CHECK(g == want || used(g) == 0, "GPU %d charged %llu instead", g, (unsigned long long)used(g));
    /* the limit for ordinal 0 (CUDA_DEVICE_MEMORY_LIMIT_0) went to the GPU ordinal 0 is */
    size_t f, t;
    OK(A.cuMemGetInfo(&f, &t));
    printf("total %zu\n", t);
    OK(A.cuMemFree(p));
    return 0;
}

/* Every ordinal this process sees at once, as a rank that touches several GPUs (or NCCL's
 * set-up) does: (k + 1) x 8 MiB on ordinal k, each from its own primary context. Each must
 * charge the physical GPU phys_csv names for ordinal k, and cuMemGetInfo with ordinal k
 * current must report that GPU's shard (the 1 GiB limit less what k took). */
static int s_visible_all(const char *phys_csv)
{
    OK(A.cuInit(0));
    int n, phys[8], m = 0;
    OK(A.cuDeviceGetCount(&n));
    for (const char *c = phys_csv; c != NULL && m < 8; c = strchr(c, ','), c = c ? c + 1 : NULL) phys[m++] = atoi(c);
    CHECK(n == m, "%d ordinals visible, want %d", n, m);
    CUcontext ctx[8];
    CUdeviceptr p[8];
    for (int k = 0; k < n; k++) {
        OK(A.cuDevicePrimaryCtxRetain(&ctx[k], k));
        OK(A.cuCtxSetCurrent(ctx[k]));
        OK(A.cuMemAlloc(&p[k], (size_t)(k + 1) * 8 * MiB));
    }
    for (int g = 0; g < 3; g++) {
        uint64_t want = 0;
        for (int k = 0; k < n; k++) want += phys[k] == g ? (uint64_t)(k + 1) * 8 * MiB : 0;
        CHECK(used(g) == want, "GPU %d charged %llu, want %llu", g, (unsigned long long)used(g), (unsigned long long)want);
    }
    for (int k = 0; k < n; k++) {
        OK(A.cuCtxSetCurrent(ctx[k]));
        size_t f, t;
        OK(A.cuMemGetInfo(&f, &t));
        CHECK(t == GiB && f == GiB - (size_t)(k + 1) * 8 * MiB, "ordinal %d (GPU %d) told free %zu of %zu", k, phys[k], f,
              t);
    }
    for (int k = 0; k < n; k++) {
        OK(A.cuCtxSetCurrent(ctx[k]));
        OK(A.cuMemFree(p[k]));
    }
    for (int g = 0; g < 3; g++) CHECK(used(g) == 0, "GPU %d still charged %llu", g, (unsigned long long)used(g));
    return 0;
}

static int s_count(const char *want)
{
    OK(A.cuInit(0));
    int n;
    OK(A.cuDeviceGetCount(&n));
    CHECK(n == atoi(want), "%d devices", n);
    return 0;
}

static int s_fork(void)
{
    if (start()) return 1;
    CUdeviceptr p;
    OK(A.cuMemAlloc(&p, 64 * MiB));
    int parent = getpid();
    int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    pid_t child = fork();
    if (child == 0) {
        /* The real driver forbids CUDA in a child of an initialised parent;
         * the fake allows it so that the child's accounting can be seen. */
        CUdeviceptr q;
        CUresult r = A.cuMemAlloc(&q, 16 * MiB);
        int ok = r == CUDA_SUCCESS && slot_used(getpid(), 0) == 16 * MiB && slot_used(parent, 0) == 64 * MiB &&
                 used(0) == 80 * MiB;
        /* Freeing the parent's pointer must not touch the parent's charge. */
        A.cuMemFree(p);
        ok = ok && slot_used(parent, 0) == 64 * MiB && used(0) == 80 * MiB;
        ok = ok && A.cuMemFree(q) == CUDA_SUCCESS && slot_used(getpid(), 0) == 0;
        char c = ok ? 'y' : 'n';
        if (write(fds[1], &c, 1) != 1) _exit(3);
        _exit(ok ? 0 : 2);
    }
    int st;
    CHECK(waitpid(child, &st, 0) == child, "wait");
    char c = 0;
    CHECK(read(fds[0], &c, 1) == 1 && c == 'y', "child accounting wrong");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
    CHECK(slot_used(parent, 0) == 64 * MiB && used(0) == 64 * MiB, "parent after child: %llu",
          (unsigned long long)used(0));
    return 0;
}

/* The agent moves the limit while we run (we play the agent). */
static int s_live_limit(void)
{
    if (start()) return 1;
    CHECK(region_map() == 0, "map");
    struct gpushards_device *d = dev_phys(0);
    CHECK(d != NULL, "device in region");
    CHECK(d->limit_bytes == GiB, "env limit written into the region: %llu", (unsigned long long)d->limit_bytes);
    __atomic_store_n(&d->limit_bytes, 512 * MiB, __ATOMIC_RELEASE);
    CUdeviceptr a, b, x;
    CHECK(A.cuMemAlloc(&x, 600 * MiB) == CUDA_ERROR_OUT_OF_MEMORY, "lowered limit applies");
    OK(A.cuMemAlloc(&a, 256 * MiB));
    __atomic_store_n(&d->limit_bytes, 128 * MiB, __ATOMIC_RELEASE);
    CHECK(A.cuMemAlloc(&x, 1) == CUDA_ERROR_OUT_OF_MEMORY, "below usage: refused");
    size_t f, t;
    OK(A.cuMemGetInfo(&f, &t));
    CHECK(f == 0 && t == 128 * MiB, "free %zu total %zu", f, t);
    OK(A.cuMemFree(a));
    OK(A.cuMemAlloc(&b, 64 * MiB));
    __atomic_store_n(&d->limit_bytes, 2 * GiB, __ATOMIC_RELEASE);
    OK(A.cuMemAlloc(&a, 1536 * MiB));
    OK(A.cuMemFree(a));
    OK(A.cuMemFree(b));
    return 0;
}

/* cuGetProcAddress hands out our hooks for every version and flag the
 * runtimes use, and the driver's answer otherwise. */
static int s_gpa_variants(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    CHECK(h != NULL, "dlopen");
    CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
        (CUresult(*)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *))dlsym(
            h, "cuGetProcAddress_v2");
    void *self = dlopen(getenv("GPUSHARDS_TEST_LIBVGPU"), RTLD_NOW | RTLD_NOLOAD);
    CHECK(gpa != NULL && self != NULL, "symbols");
    OK(((CUresult(*)(unsigned))dlsym(h, "cuInit"))(0));
    struct {
        const char *base;
        int version;
        cuuint64_t flags;
        const char *expect; /* our export, or NULL for "not ours" */
    } cases[] = {
        {"cuMemAlloc", 3020, 0, "cuMemAlloc_v2"},
        {"cuMemAlloc", 12000, 0, "cuMemAlloc_v2"},
        {"cuMemAlloc", 2000, 0, "cuMemAlloc"},
        {"cuMemFree", 3020, 2, "cuMemFree_v2"},
        {"cuMemGetInfo", 3020, 0, "cuMemGetInfo_v2"},
        {"cuCtxCreate", 3020, 0, "cuCtxCreate_v2"},
        {"cuCtxCreate", 12000, 0, "cuCtxCreate_v3"},
        {"cuCtxCreate", 13000, 0, "cuCtxCreate_v4"},
        {"cuCtxDestroy", 4000, 0, "cuCtxDestroy_v2"},
        {"cuDevicePrimaryCtxRetain", 7000, 0, "cuDevicePrimaryCtxRetain"},
        {"cuDevicePrimaryCtxRelease", 7000, 0, "cuDevicePrimaryCtxRelease"},
        {"cuDevicePrimaryCtxRelease", 11000, 0, "cuDevicePrimaryCtxRelease_v2"},
        {"cuMemAllocAsync", 11020, 0, "cuMemAllocAsync"},
        {"cuMemAllocAsync", 11020, 1, "cuMemAllocAsync"},
        {"cuMemAllocAsync", 11020, 2, "cuMemAllocAsync_ptsz"},
        {"cuMemFreeAsync", 12000, 2, "cuMemFreeAsync_ptsz"},
        {"cuMemAllocFromPoolAsync", 13000, 2, "cuMemAllocFromPoolAsync_ptsz"},
        {"cuMemCreate", 10020, 0, "cuMemCreate"},
        {"cuGetProcAddress", 11030, 0, "cuGetProcAddress"},
        {"cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"},
        {"cuDeviceTotalMem", 3020, 0, "cuDeviceTotalMem_v2"},
        {"cuInit", 2000, 0, "cuInit"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        void *p = NULL;
        CUdriverProcAddressQueryResult st;
        OK(gpa(cases[i].base, &p, cases[i].version, cases[i].flags, &st));
        void *ours = dlsym(self, cases[i].expect);
        CHECK(p != NULL && p == ours, "%s@%d flags %llu is not our %s", cases[i].base, cases[i].version,
              (unsigned long long)cases[i].flags, cases[i].expect);
    }
    void *p = (void *)1;
    CUdriverProcAddressQueryResult st;
    OK(gpa("cuMemAllocAsync", &p, 11000, 0, &st));
    CHECK(p == NULL && st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, "too old a version");
    OK(gpa("cuNoSuchThing", &p, 12000, 0, &st));
    CHECK(p == NULL && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, "unknown symbol");
    OK(gpa("cuCtxGetDevice", &p, 2000, 0, &st));
    CHECK(p != NULL && p == dlsym(h, "cuCtxGetDevice"), "unhooked functions pass through");
    return 0;
}

/* dlsym(RTLD_NEXT) from the program still means "after the program". */
static int s_dlsym_next(void)
{
    void *next = dlsym(RTLD_NEXT, "getpid");
    void *dflt = dlsym(RTLD_DEFAULT, "getpid");
    CHECK(next != NULL && next == dflt, "RTLD_NEXT getpid %p, default %p", next, dflt);
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    CHECK(libc != NULL && dlsym(libc, "getpid") == dflt, "handle lookups");
    return 0;
}

/* How long the first driver calls take under the interposer. */
static int s_startup(void)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (start()) return 1;
    CUdeviceptr p;
    OK(A.cuMemAlloc(&p, MiB));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("startup_us %ld\n", (t1.tv_sec - t0.tv_sec) * 1000000L + (t1.tv_nsec - t0.tv_nsec) / 1000);
    OK(A.cuMemFree(p));
    return 0;
}

/* No limit anywhere: pass-through, still counted. */
static int s_uncapped(void)
{
    if (start()) return 1;
    CUdeviceptr p;
    OK(A.cuMemAlloc(&p, 8 * GiB));
    CHECK(used(0) == 8 * GiB, "counted: %llu", (unsigned long long)used(0));
    size_t f, t;
    OK(A.cuMemGetInfo(&f, &t));
    CHECK(t == 80 * GiB, "the card's total: %zu", t);
    CUdeviceptr x;
    CHECK(A.cuMemAlloc(&x, 80 * GiB) == CUDA_ERROR_OUT_OF_MEMORY, "the card itself is full");
    CHECK(used(0) == 8 * GiB, "unchanged after the driver refused: %llu", (unsigned long long)used(0));
    OK(A.cuMemFree(p));
    return 0;
}

/* No region and no limit: the library stays out of the way. */
static int s_passthrough(void)
{
    if (start()) return 1;
    CUdeviceptr p;
    OK(A.cuMemAlloc(&p, GiB));
    OK(A.cuMemFree(p));
    return 0;
}

/* The fake driver itself (run without libvgpu.so): freeing an address it
 * never handed out, 1 included (the mark it leaves in a freed slot), is
 * refused and gives back nothing. */
static int s_bogus_free(void)
{
    if (start()) return 1;
    size_t free_before, free_after, total;
    OK(A.cuMemGetInfo(&free_before, &total));
    CUdeviceptr p;
    OK(A.cuMemAlloc(&p, GiB));
    OK(A.cuMemFree(p));
    CHECK(A.cuMemFree(p) == CUDA_ERROR_INVALID_VALUE, "a second free of the same address was taken");
    CHECK(A.cuMemFree(1) == CUDA_ERROR_INVALID_VALUE, "freeing address 1 was taken");
    OK(A.cuMemGetInfo(&free_after, &total));
    CHECK(free_after == free_before, "free %zu before, %zu after: memory given back twice", free_before, free_after);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: vgpu-client link|dlsym|gpa SCENARIO [ARGS]\n");
        return 2;
    }
    mode = argv[1];
    const char *s = argv[2];
    if (api_load(&A, mode) != 0) {
        fprintf(stderr, "cannot load the API (%s)\n", mode);
        return 1;
    }
    if (!strcmp(s, "alloc")) return s_alloc();
    if (!strcmp(s, "pitch")) return s_pitch();
    if (!strcmp(s, "null-out")) return s_null_out();
    if (!strcmp(s, "managed")) return s_managed();
    if (!strcmp(s, "async")) return s_async();
    if (!strcmp(s, "pool")) return s_pool();
    if (!strcmp(s, "vmm")) return s_vmm();
    if (!strcmp(s, "array")) return s_array();
    if (!strcmp(s, "context")) return s_context();
    if (!strcmp(s, "primary")) return s_primary();
    if (!strcmp(s, "legacy")) return s_legacy();
    if (!strcmp(s, "cap")) return s_cap();
    if (!strcmp(s, "info")) return s_info();
    if (!strcmp(s, "info-clamp")) return s_info_clamp();
    if (!strcmp(s, "nvml")) return s_nvml();
    if (!strcmp(s, "threads")) return s_threads();
    if (!strcmp(s, "churn")) return s_churn();
    if (!strcmp(s, "full")) return s_full();
    if (!strcmp(s, "threads-async")) return s_threads_async();
    if (!strcmp(s, "pool-cap") && argc > 4) return s_pool_cap(0, argv[3], argv[4]);
    if (!strcmp(s, "pool-cap-from") && argc > 4) return s_pool_cap(1, argv[3], argv[4]);
    if (!strcmp(s, "nvml-only")) return s_nvml_only();
    if (!strcmp(s, "nvml-used") && argc > 3) return s_nvml_used(argv[3]);
    if (!strcmp(s, "hold") && argc > 3) return s_hold(argv[3]);
    if (!strcmp(s, "lock")) return s_lock();
    if (!strcmp(s, "refused")) return s_refused();
    if (!strcmp(s, "visible") && argc > 4) return s_visible(argv[3], argv[4]);
    if (!strcmp(s, "visible-all") && argc > 3) return s_visible_all(argv[3]);
    if (!strcmp(s, "count") && argc > 3) return s_count(argv[3]);
    if (!strcmp(s, "fork")) return s_fork();
    if (!strcmp(s, "live-limit")) return s_live_limit();
    if (!strcmp(s, "gpa-variants")) return s_gpa_variants();
    if (!strcmp(s, "dlsym-next")) return s_dlsym_next();
    if (!strcmp(s, "startup")) return s_startup();
    if (!strcmp(s, "uncapped")) return s_uncapped();
    if (!strcmp(s, "passthrough")) return s_passthrough();
    if (!strcmp(s, "bogus-free")) return s_bogus_free();
    int nvml = nvml_scenario(&A, s, argc, argv);
    if (nvml >= 0) return nvml;
    int cap = cap_scenario(&A, s, argc, argv);
    if (cap >= 0) return cap;
    int compute = compute_scenario(s, argc, argv);
    if (compute >= 0) return compute;
    int elastic = elastic_scenario(s, argc, argv);
    if (elastic >= 0) return elastic;
    int ipc = ipc_scenario(s, argc, argv);
    if (ipc >= 0) return ipc;
    fprintf(stderr, "unknown scenario %s\n", s);
    return 2;
}
