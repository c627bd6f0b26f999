/* hooks_cuda.c — the CUDA driver entry points that take or give back device
 * memory, or report it.  Each hook reserves in the shared budget first, calls
 * the real driver, and rolls the reservation back if the driver fails.
 *
 * The names below are the driver's real ABI names (cuda.h maps e.g.
 * cuMemAlloc to cuMemAlloc_v2 with macros); the legacy unsuffixed names are
 * their own, older entry points with 32-bit sizes and are hooked too. */
#include <pthread.h>
#include <string.h>

#include "vgpu.h"

/* cuda.h renames these to their newest versions; the legacy symbols are
 * separate functions with their own signatures. */
#undef cuMemAlloc
#undef cuMemAllocPitch
#undef cuMemFree
#undef cuMemGetInfo
#undef cuDeviceTotalMem
#undef cuArrayCreate
#undef cuArray3DCreate
#undef cuCtxCreate
#undef cuCtxDestroy
#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxReset

typedef unsigned int CUdeviceptr32; /* CUdeviceptr_v1 */
typedef struct {
    unsigned int Width, Height;
    CUarray_format Format;
    unsigned int NumChannels;
} ArrayDesc32;
typedef struct {
    unsigned int Width, Height, Depth;
    CUarray_format Format;
    unsigned int NumChannels, Flags;
} Array3DDesc32;

/* ---- the real driver ---------------------------------------------------- */
#define REAL(ret, name, args) static ret(*real_##name) args
REAL(CUresult, cuInit, (unsigned int));
REAL(CUresult, cuMemAlloc, (CUdeviceptr32 *, unsigned int));
REAL(CUresult, cuMemAlloc_v2, (CUdeviceptr *, size_t));
REAL(CUresult, cuMemAllocPitch, (CUdeviceptr32 *, unsigned int *, unsigned int, unsigned int, unsigned int));
REAL(CUresult, cuMemAllocPitch_v2, (CUdeviceptr *, size_t *, size_t, size_t, unsigned int));
REAL(CUresult, cuMemAllocManaged, (CUdeviceptr *, size_t, unsigned int));
REAL(CUresult, cuMemFree, (CUdeviceptr32));
REAL(CUresult, cuMemFree_v2, (CUdeviceptr));
REAL(CUresult, cuMemAllocAsync, (CUdeviceptr *, size_t, CUstream));
REAL(CUresult, cuMemAllocAsync_ptsz, (CUdeviceptr *, size_t, CUstream));
REAL(CUresult, cuMemAllocFromPoolAsync, (CUdeviceptr *, size_t, CUmemoryPool, CUstream));
REAL(CUresult, cuMemAllocFromPoolAsync_ptsz, (CUdeviceptr *, size_t, CUmemoryPool, CUstream));
REAL(CUresult, cuMemFreeAsync, (CUdeviceptr, CUstream));
REAL(CUresult, cuMemFreeAsync_ptsz, (CUdeviceptr, CUstream));
REAL(CUresult, cuMemPoolCreate, (CUmemoryPool *, const CUmemPoolProps *));
REAL(CUresult, cuMemPoolDestroy, (CUmemoryPool));
REAL(CUresult, cuMemPoolTrimTo, (CUmemoryPool, size_t));
REAL(CUresult, cuMemCreate, (CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long));
REAL(CUresult, cuMemRelease, (CUmemGenericAllocationHandle));
REAL(CUresult, cuMemRetainAllocationHandle, (CUmemGenericAllocationHandle *, void *));
REAL(CUresult, cuMemMap, (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long));
REAL(CUresult, cuMemUnmap, (CUdeviceptr, size_t));
REAL(CUresult, cuArrayCreate, (CUarray *, const ArrayDesc32 *));
REAL(CUresult, cuArrayCreate_v2, (CUarray *, const CUDA_ARRAY_DESCRIPTOR *));
REAL(CUresult, cuArray3DCreate, (CUarray *, const Array3DDesc32 *));
REAL(CUresult, cuArray3DCreate_v2, (CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *));
REAL(CUresult, cuMipmappedArrayCreate, (CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned int));
REAL(CUresult, cuArrayDestroy, (CUarray));
REAL(CUresult, cuMipmappedArrayDestroy, (CUmipmappedArray));
REAL(CUresult, cuCtxCreate, (CUcontext *, unsigned int, CUdevice));
REAL(CUresult, cuCtxCreate_v2, (CUcontext *, unsigned int, CUdevice));
REAL(CUresult, cuCtxCreate_v3, (CUcontext *, CUexecAffinityParam *, int, unsigned int, CUdevice));
REAL(CUresult, cuCtxCreate_v4, (CUcontext *, CUctxCreateParams *, unsigned int, CUdevice));
REAL(CUresult, cuCtxDestroy, (CUcontext));
REAL(CUresult, cuCtxDestroy_v2, (CUcontext));
REAL(CUresult, cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice));
REAL(CUresult, cuDevicePrimaryCtxRelease, (CUdevice));
REAL(CUresult, cuDevicePrimaryCtxRelease_v2, (CUdevice));
REAL(CUresult, cuDevicePrimaryCtxReset, (CUdevice));
REAL(CUresult, cuDevicePrimaryCtxReset_v2, (CUdevice));
REAL(CUresult, cuMemGetInfo, (unsigned int *, unsigned int *));
REAL(CUresult, cuMemGetInfo_v2, (size_t *, size_t *));
REAL(CUresult, cuDeviceTotalMem, (unsigned int *, CUdevice));
REAL(CUresult, cuPointerGetAttribute, (void *, CUpointer_attribute, CUdeviceptr));
#undef REAL

CUresult (*gs_real_cuCtxGetDevice)(CUdevice *);
CUresult (*gs_real_cuCtxGetCurrent)(CUcontext *);
CUresult (*gs_real_cuMemGetAddressRange_v2)(CUdeviceptr *, size_t *, CUdeviceptr);
CUresult (*gs_real_cuDeviceGetCount)(int *);
CUresult (*gs_real_cuDeviceGetUuid_v2)(CUuuid *, CUdevice);
CUresult (*gs_real_cuDeviceGetUuid)(CUuuid *, CUdevice);
CUresult (*gs_real_cuDeviceTotalMem_v2)(size_t *, CUdevice);
CUresult (*gs_real_cuStreamGetDevice)(CUstream, CUdevice *);
CUresult (*gs_real_cuStreamGetCtx)(CUstream, CUcontext *);
CUresult (*gs_real_cuCtxPushCurrent_v2)(CUcontext);
CUresult (*gs_real_cuCtxPopCurrent_v2)(CUcontext *);
CUresult (*gs_real_cuDeviceGetMemPool)(CUmemoryPool *, CUdevice);
CUresult (*gs_real_cuDeviceGetDefaultMemPool)(CUmemoryPool *, CUdevice);
CUresult (*gs_real_cuMemPoolGetAttribute)(CUmemoryPool, CUmemPool_attribute, void *);

/* Pages the driver backs VMM mappings with: every mapping starts on a
 * multiple of the minimum granularity, 2 MiB on every current NVIDIA GPU. */
#define GS_VMM_STEP (2ull << 20)

/* Bytes charged with no table entry (the table was full): released on free
 * by asking the driver for the allocation's size, never more than this. */
static uint64_t untracked[GPUSHARDS_MAX_DEVICES];

static void untracked_add(int dev, uint64_t bytes)
{
    if (dev >= 0 && dev < (int)GPUSHARDS_MAX_DEVICES) __atomic_add_fetch(&untracked[dev], bytes, __ATOMIC_RELAXED);
}

static int untracked_any(void)
{
    for (unsigned i = 0; i < GPUSHARDS_MAX_DEVICES; i++)
        if (__atomic_load_n(&untracked[i], __ATOMIC_RELAXED) != 0) return 1;
    return 0;
}

static uint64_t untracked_take(int dev, uint64_t bytes)
{
    if (dev < 0 || dev >= (int)GPUSHARDS_MAX_DEVICES) return 0;
    uint64_t cur = __atomic_load_n(&untracked[dev], __ATOMIC_RELAXED), take;
    do {
        take = cur < bytes ? cur : bytes;
    } while (!__atomic_compare_exchange_n(&untracked[dev], &cur, cur - take, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return take;
}

/* Every hook first makes sure the real driver is resolved and the process
 * initialised: two acquire loads once both are done. */
static int ready(void)
{
    if (gs_resolve_cuda() != 0) return 0;
    gs_init();
    return 1;
}

#define ENTER(real)                                                                                      \
    do {                                                                                                 \
        if (GS_UNLIKELY(!ready() || (real) == NULL)) return CUDA_ERROR_NOT_INITIALIZED;                  \
    } while (0)

static int counting(void)
{
    return gs_mode != GS_MODE_PASSTHROUGH;
}

static CUresult current(CUdevice *dev, CUcontext *ctx)
{
    CUresult r = gs_real_cuCtxGetCurrent(ctx);
    if (r != CUDA_SUCCESS) return r;
    if (*ctx == NULL) return CUDA_ERROR_INVALID_CONTEXT;
    return gs_real_cuCtxGetDevice(dev);
}

/* Remember an allocation; 0 when remembered.  Pointer allocations have a
 * fallback for a full table (the driver knows their size on free); the rest
 * must be undone by the caller. */
static int remember(uint64_t key, uint32_t kind, int dev, uint64_t size, uint64_t owner)
{
    struct gs_entry e = {.key = key, .kind = kind, .dev = (uint32_t)dev, .size = size, .owner = owner, .c1 = 1};
    if (gs_track_insert(&gs_allocs, &e) == 0) return 0;
    if (kind == GS_T_MEM) {
        GS_WARN("allocation table full (GPUSHARDS_TRACK_CAPACITY); sizing frees through the driver");
        untracked_add(dev, size);
        return 0;
    }
    GS_ERROR("allocation table full (raise GPUSHARDS_TRACK_CAPACITY); refusing the allocation");
    return -1;
}

/* ---- cuInit ------------------------------------------------------------- */
GS_EXPORT CUresult cuInit(unsigned int flags)
{
    if (gs_resolve_cuda() != 0 || real_cuInit == NULL) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real_cuInit(flags);
    if (r == CUDA_SUCCESS) {
        gs_init();
        if (gs_mode == GS_MODE_COUNTING) gs_devices_map_all();
    }
    return r;
}

/* ---- linear allocations ------------------------------------------------- */
static CUresult alloc_linear(CUdeviceptr *dptr, size_t bytes, unsigned int flags, int managed)
{
    CUdevice dev;
    CUcontext ctx;
    if (!counting() || current(&dev, &ctx) != CUDA_SUCCESS)
        return managed ? real_cuMemAllocManaged(dptr, bytes, flags) : real_cuMemAlloc_v2(dptr, bytes);
    int idx = gs_dev_index(dev);
    if (gs_charge(idx, bytes) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = managed ? real_cuMemAllocManaged(dptr, bytes, flags) : real_cuMemAlloc_v2(dptr, bytes);
    if (r != CUDA_SUCCESS) {
        gs_uncharge(idx, bytes);
        return r;
    }
    remember(*dptr, GS_T_MEM, idx, bytes, (uint64_t)(uintptr_t)ctx);
    return r;
}

GS_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    ENTER(real_cuMemAlloc_v2);
    return alloc_linear(dptr, bytesize, 0, 0);
}

GS_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    ENTER(real_cuMemAllocManaged);
    return alloc_linear(dptr, bytesize, flags, 1);
}

/* The driver picks the pitch; reserve a pitch rounded to 512 bytes (what
 * the driver aligns rows to) and settle on pitch * height once known. */
GS_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t width, size_t height,
                                      unsigned int elementSize)
{
    ENTER(real_cuMemAllocPitch_v2);
    CUdevice dev;
    CUcontext ctx;
    if (!counting() || current(&dev, &ctx) != CUDA_SUCCESS)
        return real_cuMemAllocPitch_v2(dptr, pPitch, width, height, elementSize);
    int idx = gs_dev_index(dev);
    uint64_t guess = ((uint64_t)width + 511) / 512 * 512;
    if (height != 0 && guess > UINT64_MAX / height) return CUDA_ERROR_OUT_OF_MEMORY;
    guess *= height;
    if (gs_charge(idx, guess) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = real_cuMemAllocPitch_v2(dptr, pPitch, width, height, elementSize);
    if (r != CUDA_SUCCESS) {
        gs_uncharge(idx, guess);
        return r;
    }
    uint64_t actual = (uint64_t)*pPitch * height;
    if (actual > guess && gs_charge(idx, actual - guess) != 0) {
        CUresult f = real_cuMemFree_v2(*dptr);
        if (f != CUDA_SUCCESS) GS_ERROR("cannot free a refused pitched allocation (error %d)", (int)f);
        gs_uncharge(idx, guess);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (actual < guess) gs_uncharge(idx, guess - actual);
    remember(*dptr, GS_T_MEM, idx, actual, (uint64_t)(uintptr_t)ctx);
    return r;
}

static CUresult free_tracked(CUdeviceptr dptr, int async_free, CUstream stream, void *real_fn)
{
    CUresult (*free_sync)(CUdeviceptr) = (CUresult(*)(CUdeviceptr))real_fn;
    CUresult (*free_async)(CUdeviceptr, CUstream) = (CUresult(*)(CUdeviceptr, CUstream))real_fn;
    struct gs_entry e;
    /* Taken out before the real free: the moment the driver frees it, the
     * address can come back from another thread's allocation. */
    if (!gs_track_take(&gs_allocs, dptr, GS_T_MEM | GS_T_ASYNC, &e)) {
        uint64_t size = 0;
        int ordinal = -1;
        CUdeviceptr base = 0;
        size_t len = 0;
        if (counting() && dptr != 0 && untracked_any() && gs_real_cuMemGetAddressRange_v2 != NULL &&
            gs_real_cuMemGetAddressRange_v2(&base, &len, dptr) == CUDA_SUCCESS && base == dptr &&
            real_cuPointerGetAttribute != NULL &&
            real_cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dptr) == CUDA_SUCCESS)
            size = len;
        CUresult r = async_free ? free_async(dptr, stream) : free_sync(dptr);
        if (r == CUDA_SUCCESS && size != 0) {
            int idx = gs_dev_index((CUdevice)ordinal);
            gs_uncharge(idx, untracked_take(idx, size));
        }
        return r;
    }
    CUresult r = async_free ? free_async(dptr, stream) : free_sync(dptr);
    if (r != CUDA_SUCCESS) {
        if (gs_track_insert(&gs_allocs, &e) != 0) GS_WARN("lost track of %#llx after a failed free", (unsigned long long)dptr);
        return r;
    }
    if (e.kind == GS_T_ASYNC) gs_pool_release(&e);
    else gs_uncharge((int)e.dev, e.size);
    return r;
}

GS_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    ENTER(real_cuMemFree_v2);
    return free_tracked(dptr, 0, NULL, (void *)real_cuMemFree_v2);
}

/* Legacy 32-bit entry points (CUDA < 3.2 ABI): same accounting. */
GS_EXPORT CUresult cuMemAlloc(CUdeviceptr32 *dptr, unsigned int bytesize)
{
    ENTER(real_cuMemAlloc);
    CUdevice dev;
    CUcontext ctx;
    if (!counting() || current(&dev, &ctx) != CUDA_SUCCESS) return real_cuMemAlloc(dptr, bytesize);
    int idx = gs_dev_index(dev);
    if (gs_charge(idx, bytesize) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = real_cuMemAlloc(dptr, bytesize);
    if (r != CUDA_SUCCESS) gs_uncharge(idx, bytesize);
    else remember(*dptr, GS_T_MEM, idx, bytesize, (uint64_t)(uintptr_t)ctx);
    return r;
}

GS_EXPORT CUresult cuMemAllocPitch(CUdeviceptr32 *dptr, unsigned int *pPitch, unsigned int width, unsigned int height,
                                   unsigned int elementSize)
{
    ENTER(real_cuMemAllocPitch);
    CUdevice dev;
    CUcontext ctx;
    if (!counting() || current(&dev, &ctx) != CUDA_SUCCESS)
        return real_cuMemAllocPitch(dptr, pPitch, width, height, elementSize);
    int idx = gs_dev_index(dev);
    uint64_t guess = ((uint64_t)width + 511) / 512 * 512 * height;
    if (gs_charge(idx, guess) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = real_cuMemAllocPitch(dptr, pPitch, width, height, elementSize);
    if (r != CUDA_SUCCESS) {
        gs_uncharge(idx, guess);
        return r;
    }
    uint64_t actual = (uint64_t)*pPitch * height;
    if (actual > guess) gs_charge_force(idx, actual - guess);
    if (actual < guess) gs_uncharge(idx, guess - actual);
    remember(*dptr, GS_T_MEM, idx, actual, (uint64_t)(uintptr_t)ctx);
    return r;
}

GS_EXPORT CUresult cuMemFree(CUdeviceptr32 dptr)
{
    ENTER(real_cuMemFree);
    return free_tracked(dptr, 0, NULL, (void *)real_cuMemFree);
}

/* ---- stream-ordered allocations (accounting in pools.c) ----------------- */
GS_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    ENTER(real_cuMemAllocAsync);
    if (!counting()) return real_cuMemAllocAsync(dptr, bytesize, hStream);
    return gs_pool_alloc(dptr, bytesize, NULL, hStream, 0, (void *)real_cuMemAllocAsync);
}

GS_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    ENTER(real_cuMemAllocAsync_ptsz);
    if (!counting()) return real_cuMemAllocAsync_ptsz(dptr, bytesize, hStream);
    return gs_pool_alloc(dptr, bytesize, NULL, hStream, 0, (void *)real_cuMemAllocAsync_ptsz);
}

GS_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    ENTER(real_cuMemAllocFromPoolAsync);
    if (!counting()) return real_cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream);
    return gs_pool_alloc(dptr, bytesize, pool, hStream, 1, (void *)real_cuMemAllocFromPoolAsync);
}

GS_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                                CUstream hStream)
{
    ENTER(real_cuMemAllocFromPoolAsync_ptsz);
    if (!counting()) return real_cuMemAllocFromPoolAsync_ptsz(dptr, bytesize, pool, hStream);
    return gs_pool_alloc(dptr, bytesize, pool, hStream, 1, (void *)real_cuMemAllocFromPoolAsync_ptsz);
}

CUresult gs_real_free_async(CUdeviceptr dptr, CUstream hStream)
{
    return real_cuMemFreeAsync(dptr, hStream);
}

GS_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    ENTER(real_cuMemFreeAsync);
    return free_tracked(dptr, 1, hStream, (void *)real_cuMemFreeAsync);
}

GS_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    ENTER(real_cuMemFreeAsync_ptsz);
    return free_tracked(dptr, 1, hStream, (void *)real_cuMemFreeAsync_ptsz);
}

GS_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    ENTER(real_cuMemPoolCreate);
    CUresult r = real_cuMemPoolCreate(pool, poolProps);
    if (r == CUDA_SUCCESS && counting()) gs_pool_register(*pool, poolProps);
    return r;
}

GS_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    ENTER(real_cuMemPoolDestroy);
    CUresult r = real_cuMemPoolDestroy(pool);
    if (r == CUDA_SUCCESS && counting()) gs_pool_destroyed(pool);
    return r;
}

GS_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    ENTER(real_cuMemPoolTrimTo);
    CUresult r = real_cuMemPoolTrimTo(pool, minBytesToKeep);
    if (r == CUDA_SUCCESS && counting()) gs_pool_trimmed(pool);
    return r;
}

/* ---- virtual memory management ------------------------------------------
 * Physical memory from cuMemCreate lives until its handle is released AND
 * every mapping of it is unmapped (the common idiom maps, then releases the
 * handle at once).  c1 packs both counts, mappings in the high half, so the
 * one decrement that reaches zero is the one that gives the bytes back. */
#define REF_ONE 1ull
#define MAP_ONE (1ull << 32)

static void vmm_drop(uint64_t handle, uint64_t one)
{
    struct gs_entry *e = gs_track_find(&gs_allocs, handle, GS_T_VMM);
    if (e == NULL || __atomic_sub_fetch(&e->c1, one, __ATOMIC_ACQ_REL) != 0) return;
    struct gs_entry out;
    if (gs_track_take(&gs_allocs, handle, GS_T_VMM, &out)) gs_uncharge((int)out.dev, out.size);
}

GS_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                               unsigned long long flags)
{
    ENTER(real_cuMemCreate);
    /* Host-located allocations (HOST, HOST_NUMA) are host memory: not ours. */
    if (!counting() || prop == NULL || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return real_cuMemCreate(handle, size, prop, flags);
    int idx = gs_dev_index((CUdevice)prop->location.id);
    if (gs_charge(idx, size) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = real_cuMemCreate(handle, size, prop, flags);
    if (r != CUDA_SUCCESS) {
        gs_uncharge(idx, size);
        return r;
    }
    if (remember(*handle, GS_T_VMM, idx, size, 0) != 0) {
        CUresult f = real_cuMemRelease(*handle);
        if (f != CUDA_SUCCESS) GS_ERROR("cannot release a refused VMM allocation (error %d)", (int)f);
        gs_uncharge(idx, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return r;
}

GS_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    ENTER(real_cuMemRelease);
    struct gs_entry *e = gs_track_find(&gs_allocs, handle, GS_T_VMM);
    if (e == NULL) return real_cuMemRelease(handle);
    /* The last reference with nothing mapped: take the entry out before the
     * driver frees it, or a racing cuMemCreate could reuse the handle value
     * while our entry still names it. */
    if (__atomic_load_n(&e->c1, __ATOMIC_ACQUIRE) == REF_ONE) {
        struct gs_entry out;
        if (gs_track_take(&gs_allocs, handle, GS_T_VMM, &out)) {
            CUresult r = real_cuMemRelease(handle);
            if (r == CUDA_SUCCESS) gs_uncharge((int)out.dev, out.size);
            else if (gs_track_insert(&gs_allocs, &out) != 0) GS_WARN("lost track of a VMM handle");
            return r;
        }
    }
    CUresult r = real_cuMemRelease(handle);
    if (r == CUDA_SUCCESS) vmm_drop(handle, REF_ONE);
    return r;
}

GS_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    ENTER(real_cuMemRetainAllocationHandle);
    CUresult r = real_cuMemRetainAllocationHandle(handle, addr);
    if (r == CUDA_SUCCESS && counting()) {
        /* The driver hands back the same handle value with one more
         * reference, which the caller will cuMemRelease. */
        struct gs_entry *e = gs_track_find(&gs_allocs, *handle, GS_T_VMM);
        if (e != NULL) __atomic_add_fetch(&e->c1, REF_ONE, __ATOMIC_ACQ_REL);
    }
    return r;
}

GS_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                            unsigned long long flags)
{
    ENTER(real_cuMemMap);
    CUresult r = real_cuMemMap(ptr, size, offset, handle, flags);
    if (r != CUDA_SUCCESS || !counting()) return r;
    struct gs_entry *e = gs_track_find(&gs_allocs, handle, GS_T_VMM);
    if (e == NULL) return r;
    struct gs_entry m = {.key = ptr, .kind = GS_T_MAP, .dev = e->dev, .size = size, .owner = handle};
    if (gs_track_insert(&gs_allocs, &m) == 0) __atomic_add_fetch(&e->c1, MAP_ONE, __ATOMIC_ACQ_REL);
    else GS_WARN("allocation table full: the memory behind %#llx stays counted until exit", (unsigned long long)ptr);
    return r;
}

GS_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    ENTER(real_cuMemUnmap);
    CUresult r = real_cuMemUnmap(ptr, size);
    if (r != CUDA_SUCCESS || !counting()) return r;
    /* A successful unmap covered whole mappings back to back; walk them. */
    for (CUdeviceptr a = ptr; a < ptr + size;) {
        struct gs_entry m;
        if (!gs_track_take(&gs_allocs, a, GS_T_MAP, &m)) {
            a += GS_VMM_STEP;
            continue;
        }
        vmm_drop(m.owner, MAP_ONE);
        a += m.size > 0 ? m.size : GS_VMM_STEP;
    }
    return r;
}

/* ---- arrays --------------------------------------------------------------
 * The driver gives no size for an array (cuArrayGetMemoryRequirements only
 * answers for deferred-mapping arrays), so it is estimated from the
 * descriptor: texels x bytes per texel, block-compressed formats by 4x4
 * blocks, YUV formats by their plane layout.  A 1024x1024 float array took
 * exactly 4 MiB on an H100, as estimated. */
static uint64_t array_bytes(uint64_t w, uint64_t h, uint64_t d, CUarray_format f, unsigned channels, unsigned flags)
{
    if (flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING)) return 0; /* backed later by cuMemMap* */
    w = w ? w : 1;
    h = h ? h : 1;
    d = d ? d : 1;
    uint64_t num, den = 1;
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: num = channels; break;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF: num = 2ull * channels; break;
    case CU_AD_FORMAT_UNSIGNED_INT32: case CU_AD_FORMAT_SIGNED_INT32: case CU_AD_FORMAT_FLOAT: num = 4ull * channels; break;
    case CU_AD_FORMAT_UNORM_INT8X1: case CU_AD_FORMAT_SNORM_INT8X1: num = 1; break;
    case CU_AD_FORMAT_UNORM_INT8X2: case CU_AD_FORMAT_SNORM_INT8X2: case CU_AD_FORMAT_UNORM_INT16X1:
    case CU_AD_FORMAT_SNORM_INT16X1: case CU_AD_FORMAT_YUY2: num = 2; break;
    case CU_AD_FORMAT_UNORM_INT8X4: case CU_AD_FORMAT_SNORM_INT8X4: case CU_AD_FORMAT_UNORM_INT16X2:
    case CU_AD_FORMAT_SNORM_INT16X2: case CU_AD_FORMAT_Y210: case CU_AD_FORMAT_Y216: case CU_AD_FORMAT_AYUV:
    case CU_AD_FORMAT_Y410: case CU_AD_FORMAT_UNORM_INT_101010_2: num = 4; break;
    case CU_AD_FORMAT_UNORM_INT16X4: case CU_AD_FORMAT_SNORM_INT16X4: case CU_AD_FORMAT_Y416: num = 8; break;
    case CU_AD_FORMAT_Y444_PLANAR8: case CU_AD_FORMAT_YUV444_8bit_SemiPlanar: num = 3; break;
    case CU_AD_FORMAT_Y444_PLANAR10: case CU_AD_FORMAT_YUV444_16bit_SemiPlanar: num = 6; break;
    case CU_AD_FORMAT_NV12: num = 3; den = 2; break;
    case CU_AD_FORMAT_P010: case CU_AD_FORMAT_P016: num = 3; break;
    case CU_AD_FORMAT_NV16: num = 2; break;
    case CU_AD_FORMAT_P210: case CU_AD_FORMAT_P216: num = 4; break;
    case CU_AD_FORMAT_BC1_UNORM: case CU_AD_FORMAT_BC1_UNORM_SRGB: case CU_AD_FORMAT_BC4_UNORM:
    case CU_AD_FORMAT_BC4_SNORM:
        w = (w + 3) / 4 * 4;
        h = (h + 3) / 4 * 4;
        num = 1;
        den = 2;
        break;
    case CU_AD_FORMAT_BC2_UNORM: case CU_AD_FORMAT_BC2_UNORM_SRGB: case CU_AD_FORMAT_BC3_UNORM:
    case CU_AD_FORMAT_BC3_UNORM_SRGB: case CU_AD_FORMAT_BC5_UNORM: case CU_AD_FORMAT_BC5_SNORM:
    case CU_AD_FORMAT_BC6H_UF16: case CU_AD_FORMAT_BC6H_SF16: case CU_AD_FORMAT_BC7_UNORM:
    case CU_AD_FORMAT_BC7_UNORM_SRGB:
        w = (w + 3) / 4 * 4;
        h = (h + 3) / 4 * 4;
        num = 1;
        break;
    default: num = 16; break; /* unknown format: assume the widest texel */
    }
    if (w > UINT32_MAX || h > UINT32_MAX || d > UINT32_MAX) return UINT64_MAX;
    return w * h * d * num / den;
}

static uint64_t mipmap_bytes(const CUDA_ARRAY3D_DESCRIPTOR *a, unsigned levels)
{
    uint64_t total = 0;
    int layered = (a->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) != 0;
    for (unsigned l = 0; l < (levels ? levels : 1) && l < 64; l++) {
        uint64_t w = a->Width >> l, h = a->Height >> l, d = layered ? a->Depth : a->Depth >> l;
        uint64_t b = array_bytes(w ? w : 1, a->Height ? (h ? h : 1) : 0, a->Depth ? (d ? d : 1) : 0, a->Format,
                                 a->NumChannels, a->Flags);
        if (b == UINT64_MAX || total + b < total) return UINT64_MAX;
        total += b;
    }
    return total;
}

static int charge_current(uint64_t bytes, int *idx, CUcontext *ctx)
{
    CUdevice dev;
    if (current(&dev, ctx) != CUDA_SUCCESS) {
        *idx = -1;
        return 1; /* no context: let the driver report it */
    }
    *idx = gs_dev_index(dev);
    return gs_charge(*idx, bytes) == 0 ? 1 : 0;
}

static CUresult array_done(CUresult r, CUarray *h, uint32_t kind, int idx, uint64_t bytes, CUcontext ctx)
{
    if (idx < 0) return r;
    if (r != CUDA_SUCCESS) {
        gs_uncharge(idx, bytes);
        return r;
    }
    if (remember((uint64_t)(uintptr_t)*h, kind, idx, bytes, (uint64_t)(uintptr_t)ctx) != 0) {
        CUresult f = kind == GS_T_MIPMAP ? real_cuMipmappedArrayDestroy((CUmipmappedArray)(void *)*h)
                                         : real_cuArrayDestroy(*h);
        if (f != CUDA_SUCCESS) GS_ERROR("cannot destroy a refused array (error %d)", (int)f);
        gs_uncharge(idx, bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return r;
}

GS_EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *d)
{
    ENTER(real_cuArrayCreate_v2);
    if (!counting() || d == NULL) return real_cuArrayCreate_v2(pHandle, d);
    uint64_t bytes = array_bytes(d->Width, d->Height, 0, d->Format, d->NumChannels, 0);
    int idx;
    CUcontext ctx;
    if (!charge_current(bytes, &idx, &ctx)) return CUDA_ERROR_OUT_OF_MEMORY;
    return array_done(real_cuArrayCreate_v2(pHandle, d), pHandle, GS_T_ARRAY, idx, bytes, ctx);
}

GS_EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    ENTER(real_cuArray3DCreate_v2);
    if (!counting() || d == NULL) return real_cuArray3DCreate_v2(pHandle, d);
    uint64_t bytes = array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels, d->Flags);
    int idx;
    CUcontext ctx;
    if (!charge_current(bytes, &idx, &ctx)) return CUDA_ERROR_OUT_OF_MEMORY;
    return array_done(real_cuArray3DCreate_v2(pHandle, d), pHandle, GS_T_ARRAY, idx, bytes, ctx);
}

GS_EXPORT CUresult cuArrayCreate(CUarray *pHandle, const ArrayDesc32 *d)
{
    ENTER(real_cuArrayCreate);
    if (!counting() || d == NULL) return real_cuArrayCreate(pHandle, d);
    uint64_t bytes = array_bytes(d->Width, d->Height, 0, d->Format, d->NumChannels, 0);
    int idx;
    CUcontext ctx;
    if (!charge_current(bytes, &idx, &ctx)) return CUDA_ERROR_OUT_OF_MEMORY;
    return array_done(real_cuArrayCreate(pHandle, d), pHandle, GS_T_ARRAY, idx, bytes, ctx);
}

GS_EXPORT CUresult cuArray3DCreate(CUarray *pHandle, const Array3DDesc32 *d)
{
    ENTER(real_cuArray3DCreate);
    if (!counting() || d == NULL) return real_cuArray3DCreate(pHandle, d);
    uint64_t bytes = array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels, d->Flags);
    int idx;
    CUcontext ctx;
    if (!charge_current(bytes, &idx, &ctx)) return CUDA_ERROR_OUT_OF_MEMORY;
    return array_done(real_cuArray3DCreate(pHandle, d), pHandle, GS_T_ARRAY, idx, bytes, ctx);
}

GS_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                          unsigned int numLevels)
{
    ENTER(real_cuMipmappedArrayCreate);
    if (!counting() || d == NULL) return real_cuMipmappedArrayCreate(pHandle, d, numLevels);
    uint64_t bytes = mipmap_bytes(d, numLevels);
    int idx;
    CUcontext ctx;
    if (!charge_current(bytes, &idx, &ctx)) return CUDA_ERROR_OUT_OF_MEMORY;
    return array_done(real_cuMipmappedArrayCreate(pHandle, d, numLevels), (CUarray *)(void *)pHandle, GS_T_MIPMAP,
                      idx, bytes, ctx);
}

static CUresult destroy_tracked(uint64_t key, uint32_t kind, CUresult (*fn)(void *), void *h)
{
    struct gs_entry e;
    if (!gs_track_take(&gs_allocs, key, kind, &e)) return fn(h);
    CUresult r = fn(h);
    if (r == CUDA_SUCCESS) gs_uncharge((int)e.dev, e.size);
    else if (gs_track_insert(&gs_allocs, &e) != 0) GS_WARN("lost track of an array");
    return r;
}

GS_EXPORT CUresult cuArrayDestroy(CUarray hArray)
{
    ENTER(real_cuArrayDestroy);
    return destroy_tracked((uint64_t)(uintptr_t)hArray, GS_T_ARRAY, (CUresult(*)(void *))real_cuArrayDestroy, hArray);
}

GS_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray h)
{
    ENTER(real_cuMipmappedArrayDestroy);
    return destroy_tracked((uint64_t)(uintptr_t)h, GS_T_MIPMAP, (CUresult(*)(void *))real_cuMipmappedArrayDestroy, h);
}

/* ---- contexts -------------------------------------------------------------
 * A context costs device memory before anything is allocated in it (about
 * half a GiB on an H100).  The agent measures it per GPU and writes it to
 * the region; GPUSHARDS_CONTEXT_BYTES is the fallback. */

/* What a destroyed context held goes with it. */
static void drop_owned(struct gs_entry *e, void *ctx)
{
    if (e->owner != (uint64_t)(uintptr_t)ctx || !(e->kind & (GS_T_MEM | GS_T_ARRAY | GS_T_MIPMAP))) return;
    struct gs_entry out;
    uint64_t key = __atomic_load_n(&e->key, __ATOMIC_ACQUIRE);
    if (gs_track_take(&gs_allocs, key, e->kind, &out)) gs_uncharge((int)out.dev, out.size);
}

static CUresult ctx_created(CUresult r, CUcontext *pctx, int idx, uint64_t bytes)
{
    if (r != CUDA_SUCCESS) {
        gs_uncharge(idx, bytes);
        return r;
    }
    if (remember((uint64_t)(uintptr_t)*pctx, GS_T_CTX, idx, bytes, 0) != 0) {
        CUresult f = real_cuCtxDestroy_v2(*pctx);
        if (f != CUDA_SUCCESS) GS_ERROR("cannot destroy a refused context (error %d)", (int)f);
        gs_uncharge(idx, bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return r;
}

#define CTX_CREATE(call)                                                                                 \
    do {                                                                                                 \
        if (!counting()) return call;                                                                    \
        int idx = gs_dev_index(dev);                                                                     \
        uint64_t bytes = idx >= 0 ? gs_context_bytes(idx) : 0;                                           \
        if (gs_charge(idx, bytes) != 0) return CUDA_ERROR_OUT_OF_MEMORY;                                 \
        return ctx_created(call, pctx, idx, bytes);                                                      \
    } while (0)

GS_EXPORT CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    ENTER(real_cuCtxCreate);
    CTX_CREATE(real_cuCtxCreate(pctx, flags, dev));
}

GS_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    ENTER(real_cuCtxCreate_v2);
    CTX_CREATE(real_cuCtxCreate_v2(pctx, flags, dev));
}

GS_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int numParams, unsigned int flags,
                                  CUdevice dev)
{
    ENTER(real_cuCtxCreate_v3);
    CTX_CREATE(real_cuCtxCreate_v3(pctx, params, numParams, flags, dev));
}

GS_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev)
{
    ENTER(real_cuCtxCreate_v4);
    CTX_CREATE(real_cuCtxCreate_v4(pctx, params, flags, dev));
}

static CUresult ctx_destroy(CUcontext ctx, CUresult (*fn)(CUcontext))
{
    struct gs_entry e;
    if (!counting() || !gs_track_take(&gs_allocs, (uint64_t)(uintptr_t)ctx, GS_T_CTX, &e)) return fn(ctx);
    CUresult r = fn(ctx);
    if (r != CUDA_SUCCESS) {
        if (gs_track_insert(&gs_allocs, &e) != 0) GS_WARN("lost track of a context");
        return r;
    }
    gs_track_each(&gs_allocs, drop_owned, ctx);
    gs_uncharge((int)e.dev, e.size);
    return r;
}

GS_EXPORT CUresult cuCtxDestroy(CUcontext ctx)
{
    ENTER(real_cuCtxDestroy);
    return ctx_destroy(ctx, real_cuCtxDestroy);
}

GS_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    ENTER(real_cuCtxDestroy_v2);
    return ctx_destroy(ctx, real_cuCtxDestroy_v2);
}

/* The primary context is reference counted by the driver; this process's
 * count mirrors it so the context is charged once, on the first retain, and
 * given back when the last release destroys it.  Retain and release are
 * rare (the runtime retains once per device), so a process-local mutex keeps
 * the count and the charge in step. */
static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;
static int primary_refs[GS_MAX_ORDINALS];
static uint64_t primary_charge[GS_MAX_ORDINALS];
static CUcontext primary_ctx[GS_MAX_ORDINALS];

GS_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    ENTER(real_cuDevicePrimaryCtxRetain);
    if (!counting() || dev < 0 || dev >= GS_MAX_ORDINALS) return real_cuDevicePrimaryCtxRetain(pctx, dev);
    int idx = gs_dev_index(dev);
    pthread_mutex_lock(&primary_lock);
    uint64_t bytes = 0;
    if (primary_refs[dev] == 0) {
        bytes = idx >= 0 ? gs_context_bytes(idx) : 0;
        if (gs_charge(idx, bytes) != 0) {
            pthread_mutex_unlock(&primary_lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    CUresult r = real_cuDevicePrimaryCtxRetain(pctx, dev);
    if (r == CUDA_SUCCESS) {
        if (primary_refs[dev]++ == 0) primary_charge[dev] = bytes;
        primary_ctx[dev] = *pctx;
    } else if (primary_refs[dev] == 0) {
        gs_uncharge(idx, bytes);
    }
    pthread_mutex_unlock(&primary_lock);
    return r;
}

static CUresult primary_release(CUdevice dev, CUresult (*fn)(CUdevice), int reset)
{
    if (!counting() || dev < 0 || dev >= GS_MAX_ORDINALS) return fn(dev);
    pthread_mutex_lock(&primary_lock);
    CUresult r = fn(dev);
    if (r == CUDA_SUCCESS && primary_ctx[dev] != NULL) {
        int gone = reset;
        if (!reset && primary_refs[dev] > 0 && --primary_refs[dev] == 0) {
            gs_uncharge(gs_dev_index(dev), primary_charge[dev]);
            primary_charge[dev] = 0;
            gone = 1;
        }
        /* Reset destroys the context's allocations but keeps it retained:
         * its charge stays until the last release. */
        if (gone) gs_track_each(&gs_allocs, drop_owned, primary_ctx[dev]);
    }
    pthread_mutex_unlock(&primary_lock);
    return r;
}

GS_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    ENTER(real_cuDevicePrimaryCtxRelease);
    return primary_release(dev, real_cuDevicePrimaryCtxRelease, 0);
}

GS_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    ENTER(real_cuDevicePrimaryCtxRelease_v2);
    return primary_release(dev, real_cuDevicePrimaryCtxRelease_v2, 0);
}

GS_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    ENTER(real_cuDevicePrimaryCtxReset);
    return primary_release(dev, real_cuDevicePrimaryCtxReset, 1);
}

GS_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    ENTER(real_cuDevicePrimaryCtxReset_v2);
    return primary_release(dev, real_cuDevicePrimaryCtxReset_v2, 1);
}

void gs_hooks_reset_process(void)
{
    /* A fork child has no contexts: CUDA state does not survive fork. */
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    primary_lock = fresh;
    memset(primary_refs, 0, sizeof primary_refs);
    memset(primary_charge, 0, sizeof primary_charge);
    memset(primary_ctx, 0, sizeof primary_ctx);
    memset(untracked, 0, sizeof untracked);
}

/* ---- what the process is told ------------------------------------------- */

/* The shard's view of a GPU: total = cap, free = cap - used, and never more
 * free than the card really has (other tenants share it). */
static int shard_view(int idx, uint64_t real_free, uint64_t real_total, uint64_t *free_out, uint64_t *total_out)
{
    if (gs_mode == GS_MODE_FAIL_CLOSED) {
        *free_out = 0;
        *total_out = real_total;
        return 1;
    }
    if (idx < 0) return 0;
    gs_pools_reconcile(idx);
    struct gs_dev_limits l;
    if (gs_limits != NULL && gs_limits_lookup(idx, &l) != 0) { /* no entry: nothing may be allocated */
        *free_out = 0;
        *total_out = real_total;
        return 1;
    }
    uint64_t limit = gs_limit(idx);
    if (limit == 0) return 0;
    uint64_t used = gs_effective_used(idx);
    uint64_t room = limit > used ? limit - used : 0;
    *free_out = room < real_free ? room : real_free;
    *total_out = limit < real_total ? limit : real_total;
    return 1;
}

static int current_index(void)
{
    CUdevice dev;
    if (gs_real_cuCtxGetDevice(&dev) != CUDA_SUCCESS) return -1;
    return gs_dev_index(dev);
}

GS_EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    ENTER(real_cuMemGetInfo_v2);
    CUresult r = real_cuMemGetInfo_v2(free, total);
    if (r != CUDA_SUCCESS || !counting() || free == NULL || total == NULL) return r;
    uint64_t f, t;
    if (shard_view(current_index(), *free, *total, &f, &t)) {
        *free = (size_t)f;
        *total = (size_t)t;
    }
    return r;
}

GS_EXPORT CUresult cuMemGetInfo(unsigned int *free, unsigned int *total)
{
    ENTER(real_cuMemGetInfo);
    CUresult r = real_cuMemGetInfo(free, total);
    if (r != CUDA_SUCCESS || !counting() || free == NULL || total == NULL || real_cuMemGetInfo_v2 == NULL) return r;
    size_t rf, rt;
    uint64_t f, t;
    if (real_cuMemGetInfo_v2(&rf, &rt) == CUDA_SUCCESS && shard_view(current_index(), rf, rt, &f, &t)) {
        *free = f > UINT32_MAX ? UINT32_MAX : (unsigned int)f;
        *total = t > UINT32_MAX ? UINT32_MAX : (unsigned int)t;
    }
    return r;
}

GS_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    ENTER(gs_real_cuDeviceTotalMem_v2);
    CUresult r = gs_real_cuDeviceTotalMem_v2(bytes, dev);
    if (r != CUDA_SUCCESS || !counting() || bytes == NULL) return r;
    uint64_t f, t;
    if (gs_mode != GS_MODE_FAIL_CLOSED && shard_view(gs_dev_index(dev), *bytes, *bytes, &f, &t)) *bytes = (size_t)t;
    return r;
}

GS_EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    ENTER(real_cuDeviceTotalMem);
    CUresult r = real_cuDeviceTotalMem(bytes, dev);
    if (r != CUDA_SUCCESS || !counting() || bytes == NULL) return r;
    uint64_t f, t;
    if (gs_mode != GS_MODE_FAIL_CLOSED && shard_view(gs_dev_index(dev), *bytes, *bytes, &f, &t))
        *bytes = (unsigned int)t;
    return r;
}

/* ---- the table resolve.c fills and dlsym / cuGetProcAddress consult ------ */
#define HOOK(name) {#name, (void *)name, (void **)&real_##name}
#define CALLS(name) {#name, NULL, (void **)&gs_real_##name}
const struct gs_hook gs_cuda_hooks[] = {
    HOOK(cuInit),
    {"cuGetProcAddress_v2", (void *)cuGetProcAddress_v2, (void **)&gs_real_cuGetProcAddress_v2},
    {"cuGetProcAddress", (void *)gs_legacy_cuGetProcAddress, (void **)&gs_real_cuGetProcAddress},
    HOOK(cuMemAlloc),
    HOOK(cuMemAlloc_v2),
    HOOK(cuMemAllocPitch),
    HOOK(cuMemAllocPitch_v2),
    HOOK(cuMemAllocManaged),
    HOOK(cuMemFree),
    HOOK(cuMemFree_v2),
    HOOK(cuMemAllocAsync),
    HOOK(cuMemAllocAsync_ptsz),
    HOOK(cuMemAllocFromPoolAsync),
    HOOK(cuMemAllocFromPoolAsync_ptsz),
    HOOK(cuMemFreeAsync),
    HOOK(cuMemFreeAsync_ptsz),
    HOOK(cuMemPoolCreate),
    HOOK(cuMemPoolDestroy),
    HOOK(cuMemPoolTrimTo),
    HOOK(cuMemCreate),
    HOOK(cuMemRelease),
    HOOK(cuMemRetainAllocationHandle),
    HOOK(cuMemMap),
    HOOK(cuMemUnmap),
    HOOK(cuArrayCreate),
    HOOK(cuArrayCreate_v2),
    HOOK(cuArray3DCreate),
    HOOK(cuArray3DCreate_v2),
    HOOK(cuMipmappedArrayCreate),
    HOOK(cuArrayDestroy),
    HOOK(cuMipmappedArrayDestroy),
    HOOK(cuCtxCreate),
    HOOK(cuCtxCreate_v2),
    HOOK(cuCtxCreate_v3),
    HOOK(cuCtxCreate_v4),
    HOOK(cuCtxDestroy),
    HOOK(cuCtxDestroy_v2),
    HOOK(cuDevicePrimaryCtxRetain),
    HOOK(cuDevicePrimaryCtxRelease),
    HOOK(cuDevicePrimaryCtxRelease_v2),
    HOOK(cuDevicePrimaryCtxReset),
    HOOK(cuDevicePrimaryCtxReset_v2),
    HOOK(cuMemGetInfo),
    HOOK(cuMemGetInfo_v2),
    HOOK(cuDeviceTotalMem),
    {"cuDeviceTotalMem_v2", (void *)cuDeviceTotalMem_v2, (void **)&gs_real_cuDeviceTotalMem_v2},
    {"cuPointerGetAttribute", NULL, (void **)&real_cuPointerGetAttribute},
    CALLS(cuCtxGetDevice),
    CALLS(cuCtxGetCurrent),
    CALLS(cuMemGetAddressRange_v2),
    CALLS(cuDeviceGetCount),
    CALLS(cuDeviceGetUuid_v2),
    CALLS(cuDeviceGetUuid),
    CALLS(cuStreamGetDevice),
    CALLS(cuStreamGetCtx),
    CALLS(cuCtxPushCurrent_v2),
    CALLS(cuCtxPopCurrent_v2),
    CALLS(cuDeviceGetMemPool),
    CALLS(cuDeviceGetDefaultMemPool),
    CALLS(cuMemPoolGetAttribute),
};
const size_t gs_cuda_hook_count = sizeof gs_cuda_hooks / sizeof gs_cuda_hooks[0];
