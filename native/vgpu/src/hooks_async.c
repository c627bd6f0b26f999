/* hooks_async.c — stream-ordered allocations and the pool calls; the
 * accounting is pools.c's. */
#include "hooks.h"

/* ---- stream-ordered allocations (accounting in pools.c) ----------------- */
GS_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    ENTER(gs_real_cuMemAllocAsync);
    if (!gs_counting()) return gs_real_cuMemAllocAsync(dptr, bytesize, hStream);
    return gs_pool_alloc(dptr, bytesize, NULL, hStream, 0, (void *)gs_real_cuMemAllocAsync);
}

GS_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    ENTER(gs_real_cuMemAllocAsync_ptsz);
    if (!gs_counting()) return gs_real_cuMemAllocAsync_ptsz(dptr, bytesize, hStream);
    return gs_pool_alloc(dptr, bytesize, NULL, hStream, 0, (void *)gs_real_cuMemAllocAsync_ptsz);
}

GS_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    ENTER(gs_real_cuMemAllocFromPoolAsync);
    if (!gs_counting()) return gs_real_cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream);
    return gs_pool_alloc(dptr, bytesize, pool, hStream, 1, (void *)gs_real_cuMemAllocFromPoolAsync);
}

GS_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                                CUstream hStream)
{
    ENTER(gs_real_cuMemAllocFromPoolAsync_ptsz);
    if (!gs_counting()) return gs_real_cuMemAllocFromPoolAsync_ptsz(dptr, bytesize, pool, hStream);
    return gs_pool_alloc(dptr, bytesize, pool, hStream, 1, (void *)gs_real_cuMemAllocFromPoolAsync_ptsz);
}

CUresult gs_real_free_async(CUdeviceptr dptr, CUstream hStream)
{
    return GS_CALL(gs_real_cuMemFreeAsync, dptr, hStream);
}

GS_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    ENTER(gs_real_cuMemFreeAsync);
    return gs_free_tracked(dptr, 1, hStream, (void *)gs_real_cuMemFreeAsync);
}

GS_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    ENTER(gs_real_cuMemFreeAsync_ptsz);
    return gs_free_tracked(dptr, 1, hStream, (void *)gs_real_cuMemFreeAsync_ptsz);
}

GS_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    ENTER(gs_real_cuMemPoolCreate);
    CUresult r = gs_real_cuMemPoolCreate(pool, poolProps);
    if (r == CUDA_SUCCESS && gs_counting()) gs_pool_register(*pool, poolProps);
    return r;
}

GS_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    ENTER(gs_real_cuMemPoolDestroy);
    CUresult r = gs_real_cuMemPoolDestroy(pool);
    if (r == CUDA_SUCCESS && gs_counting()) gs_pool_destroyed(pool);
    return r;
}

GS_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    ENTER(gs_real_cuMemPoolTrimTo);
    CUresult r = gs_real_cuMemPoolTrimTo(pool, minBytesToKeep);
    if (r == CUDA_SUCCESS && gs_counting()) gs_pool_trimmed(pool);
    return r;
}

