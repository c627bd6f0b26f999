/* hooks_info.c — what the process is told about memory: cuMemGetInfo and
 * cuDeviceTotalMem report the shard, not the card. */
#include "hooks.h"

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
    if (GS_CALL(gs_real_cuCtxGetDevice, &dev) != CUDA_SUCCESS) return -1;
    return gs_dev_index(dev);
}

GS_EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    ENTER(gs_real_cuMemGetInfo_v2);
    CUresult r = gs_real_cuMemGetInfo_v2(free, total);
    if (r != CUDA_SUCCESS || !gs_counting() || free == NULL || total == NULL) return r;
    uint64_t f, t;
    if (shard_view(current_index(), *free, *total, &f, &t)) {
        *free = (size_t)f;
        *total = (size_t)t;
    }
    return r;
}

GS_EXPORT CUresult cuMemGetInfo(unsigned int *free, unsigned int *total)
{
    ENTER(gs_real_cuMemGetInfo);
    CUresult r = gs_real_cuMemGetInfo(free, total);
    if (r != CUDA_SUCCESS || !gs_counting() || free == NULL || total == NULL || gs_real_cuMemGetInfo_v2 == NULL) return r;
    size_t rf, rt;
    uint64_t f, t;
    if (gs_real_cuMemGetInfo_v2(&rf, &rt) == CUDA_SUCCESS && shard_view(current_index(), rf, rt, &f, &t)) {
        *free = f > UINT32_MAX ? UINT32_MAX : (unsigned int)f;
        *total = t > UINT32_MAX ? UINT32_MAX : (unsigned int)t;
    }
    return r;
}

GS_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    ENTER(gs_real_cuDeviceTotalMem_v2);
    CUresult r = gs_real_cuDeviceTotalMem_v2(bytes, dev);
    if (r != CUDA_SUCCESS || !gs_counting() || bytes == NULL) return r;
    uint64_t f, t;
    if (gs_mode != GS_MODE_FAIL_CLOSED && shard_view(gs_dev_index(dev), *bytes, *bytes, &f, &t)) *bytes = (size_t)t;
    return r;
}

GS_EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    ENTER(gs_real_cuDeviceTotalMem);
    CUresult r = gs_real_cuDeviceTotalMem(bytes, dev);
    if (r != CUDA_SUCCESS || !gs_counting() || bytes == NULL) return r;
    uint64_t f, t;
    if (gs_mode != GS_MODE_FAIL_CLOSED && shard_view(gs_dev_index(dev), *bytes, *bytes, &f, &t))
        *bytes = (unsigned int)t;
    return r;
}

