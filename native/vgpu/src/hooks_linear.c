/* hooks_linear.c — linear allocations: cuMemAlloc, cuMemAllocManaged,
 * cuMemAllocPitch and cuMemFree, with the legacy 32-bit ABI's versions.
 * Each reserves in the shared budget first, calls the real driver (again,
 * for a while, when it refuses inside the budget: pressure.c), and rolls the
 * reservation back if the driver fails. */
#include "hooks.h"

/* ---- linear allocations ------------------------------------------------- */
/* One linear allocation's driver call, kept for a retry (pressure.c). */
struct linear_call {
    CUdeviceptr *dptr;
    size_t bytes;
    unsigned int flags;
    int managed;
};

static CUresult linear_real(void *arg)
{
    struct linear_call *c = arg;
    return c->managed ? gs_real_cuMemAllocManaged(c->dptr, c->bytes, c->flags) : gs_real_cuMemAlloc_v2(c->dptr, c->bytes);
}

static CUresult alloc_linear(CUdeviceptr *dptr, size_t bytes, unsigned int flags, int managed)
{
    struct linear_call c = {dptr, bytes, flags, managed};
    CUdevice dev;
    CUcontext ctx;
    if (!gs_counting() || gs_current(&dev, &ctx) != CUDA_SUCCESS) return linear_real(&c);
    int idx = gs_dev_index(dev);
    if (gs_charge(idx, bytes) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = linear_real(&c);
    if (r != CUDA_SUCCESS) {
        r = gs_pressure_retry(idx, r, linear_real, &c);
        if (r != CUDA_SUCCESS) {
            gs_uncharge(idx, bytes);
            return r;
        }
    }
    gs_remember(*dptr, GS_T_MEM, idx, bytes, (uint64_t)(uintptr_t)ctx);
    return r;
}

struct pitch_call {
    CUdeviceptr *dptr;
    size_t *pitch;
    size_t width, height;
    unsigned int elem;
};

static CUresult pitch_real(void *arg)
{
    struct pitch_call *c = arg;
    return gs_real_cuMemAllocPitch_v2(c->dptr, c->pitch, c->width, c->height, c->elem);
}

GS_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    ENTER(gs_real_cuMemAlloc_v2);
    return alloc_linear(dptr, bytesize, 0, 0);
}

GS_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    ENTER(gs_real_cuMemAllocManaged);
    return alloc_linear(dptr, bytesize, flags, 1);
}

/* The driver picks the pitch; reserve a pitch rounded to 512 bytes (what
 * the driver aligns rows to) and settle on pitch * height once known. */
GS_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t width, size_t height,
                                      unsigned int elementSize)
{
    ENTER(gs_real_cuMemAllocPitch_v2);
    CUdevice dev;
    CUcontext ctx;
    if (!gs_counting() || gs_current(&dev, &ctx) != CUDA_SUCCESS)
        return gs_real_cuMemAllocPitch_v2(dptr, pPitch, width, height, elementSize);
    int idx = gs_dev_index(dev);
    uint64_t guess = ((uint64_t)width + 511) / 512 * 512;
    if (height != 0 && guess > UINT64_MAX / height) return CUDA_ERROR_OUT_OF_MEMORY;
    guess *= height;
    if (gs_charge(idx, guess) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    struct pitch_call c = {dptr, pPitch, width, height, elementSize};
    CUresult r = pitch_real(&c);
    if (r != CUDA_SUCCESS) {
        r = gs_pressure_retry(idx, r, pitch_real, &c);
        if (r != CUDA_SUCCESS) {
            gs_uncharge(idx, guess);
            return r;
        }
    }
    uint64_t actual = (uint64_t)*pPitch * height;
    if (actual > guess && gs_charge(idx, actual - guess) != 0) {
        CUresult f = GS_CALL(gs_real_cuMemFree_v2, *dptr);
        if (f != CUDA_SUCCESS) GS_ERROR("cannot free a refused pitched allocation (error %d)", (int)f);
        gs_uncharge(idx, guess);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (actual < guess) gs_uncharge(idx, guess - actual);
    gs_remember(*dptr, GS_T_MEM, idx, actual, (uint64_t)(uintptr_t)ctx);
    return r;
}

CUresult gs_free_tracked(CUdeviceptr dptr, int async_free, CUstream stream, void *real_fn)
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
        if (gs_counting() && dptr != 0 && gs_untracked_any() && gs_real_cuMemGetAddressRange_v2 != NULL &&
            gs_real_cuMemGetAddressRange_v2(&base, &len, dptr) == CUDA_SUCCESS && base == dptr &&
            gs_real_cuPointerGetAttribute != NULL &&
            gs_real_cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dptr) == CUDA_SUCCESS)
            size = len;
        CUresult r = async_free ? free_async(dptr, stream) : free_sync(dptr);
        if (r == CUDA_SUCCESS && size != 0) {
            int idx = gs_dev_index((CUdevice)ordinal);
            gs_uncharge(idx, gs_untracked_take(idx, size));
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
    ENTER(gs_real_cuMemFree_v2);
    return gs_free_tracked(dptr, 0, NULL, (void *)gs_real_cuMemFree_v2);
}

/* Legacy 32-bit entry points (CUDA < 3.2 ABI): same accounting. */
struct legacy_call {
    CUdeviceptr32 *dptr;
    unsigned int *pitch;
    unsigned int bytes, width, height, elem; /* pitch == NULL: cuMemAlloc of bytes */
};

static CUresult legacy_real(void *arg)
{
    struct legacy_call *c = arg;
    return c->pitch == NULL ? gs_real_cuMemAlloc(c->dptr, c->bytes)
                            : gs_real_cuMemAllocPitch(c->dptr, c->pitch, c->width, c->height, c->elem);
}

GS_EXPORT CUresult cuMemAlloc(CUdeviceptr32 *dptr, unsigned int bytesize)
{
    ENTER(gs_real_cuMemAlloc);
    CUdevice dev;
    CUcontext ctx;
    if (!gs_counting() || gs_current(&dev, &ctx) != CUDA_SUCCESS) return gs_real_cuMemAlloc(dptr, bytesize);
    int idx = gs_dev_index(dev);
    if (gs_charge(idx, bytesize) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    struct legacy_call c = {.dptr = dptr, .bytes = bytesize};
    CUresult r = gs_real_cuMemAlloc(dptr, bytesize);
    if (r != CUDA_SUCCESS) {
        r = gs_pressure_retry(idx, r, legacy_real, &c);
        if (r != CUDA_SUCCESS) {
            gs_uncharge(idx, bytesize);
            return r;
        }
    }
    gs_remember(*dptr, GS_T_MEM, idx, bytesize, (uint64_t)(uintptr_t)ctx);
    return r;
}

GS_EXPORT CUresult cuMemAllocPitch(CUdeviceptr32 *dptr, unsigned int *pPitch, unsigned int width, unsigned int height,
                                   unsigned int elementSize)
{
    ENTER(gs_real_cuMemAllocPitch);
    CUdevice dev;
    CUcontext ctx;
    if (!gs_counting() || gs_current(&dev, &ctx) != CUDA_SUCCESS)
        return gs_real_cuMemAllocPitch(dptr, pPitch, width, height, elementSize);
    int idx = gs_dev_index(dev);
    uint64_t guess = ((uint64_t)width + 511) / 512 * 512 * height;
    if (gs_charge(idx, guess) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    struct legacy_call c = {.dptr = dptr, .pitch = pPitch, .width = width, .height = height, .elem = elementSize};
    CUresult r = legacy_real(&c);
    if (r != CUDA_SUCCESS) {
        r = gs_pressure_retry(idx, r, legacy_real, &c);
        if (r != CUDA_SUCCESS) {
            gs_uncharge(idx, guess);
            return r;
        }
    }
    /* As the v2 hook: a driver that padded rows more than guessed gets the
     * difference charged, or the allocation is freed and refused (charging
     * it regardless let this path pass the cap). */
    uint64_t actual = (uint64_t)*pPitch * height;
    if (actual > guess && gs_charge(idx, actual - guess) != 0) {
        CUresult f = GS_CALL(gs_real_cuMemFree, *dptr);
        if (f != CUDA_SUCCESS) GS_ERROR("cannot free a refused pitched allocation (error %d)", (int)f);
        gs_uncharge(idx, guess);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (actual < guess) gs_uncharge(idx, guess - actual);
    gs_remember(*dptr, GS_T_MEM, idx, actual, (uint64_t)(uintptr_t)ctx);
    return r;
}

GS_EXPORT CUresult cuMemFree(CUdeviceptr32 dptr)
{
    ENTER(gs_real_cuMemFree);
    return gs_free_tracked(dptr, 0, NULL, (void *)gs_real_cuMemFree);
}

