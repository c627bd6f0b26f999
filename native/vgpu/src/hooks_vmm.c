/* hooks_vmm.c — virtual memory management: cuMemCreate, cuMemMap,
 * cuMemUnmap, cuMemRelease, cuMemRetainAllocationHandle.  Handles imported
 * from another process are not charged; what happens to them is told to
 * hooks_vmm_import.c. */
#include "hooks.h"

/* Pages the driver backs VMM mappings with: every mapping starts on a
 * multiple of the minimum granularity, 2 MiB on every current NVIDIA GPU. */
#define GS_VMM_STEP (2ull << 20)

/* ---- virtual memory management ------------------------------------------
 * Physical memory from cuMemCreate lives until its handle is released AND
 * every mapping of it is unmapped (the common idiom maps, then releases the
 * handle at once).  c1 packs both counts, mappings in the high half, so the
 * one decrement that reaches zero is the one that gives the bytes back. */
#define REF_ONE 1ull
#define MAP_ONE (1ull << 32)

static void vmm_drop(uint64_t handle, uint64_t one)
{
    struct gs_entry e;
    if (!gs_track_update(&gs_allocs, handle, GS_T_VMM, -(int64_t)one, &e) || e.c1 != 0) return;
    struct gs_entry out;
    if (gs_track_take(&gs_allocs, handle, GS_T_VMM, &out)) gs_uncharge((int)out.dev, out.size);
}

struct create_call {
    CUmemGenericAllocationHandle *handle;
    size_t size;
    const CUmemAllocationProp *prop;
    unsigned long long flags;
};

static CUresult create_real(void *arg)
{
    struct create_call *c = arg;
    return gs_real_cuMemCreate(c->handle, c->size, c->prop, c->flags);
}

GS_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                               unsigned long long flags)
{
    ENTER(gs_real_cuMemCreate);
    /* Host-located allocations (HOST, HOST_NUMA) are host memory: not ours. */
    if (!gs_counting() || prop == NULL || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return gs_real_cuMemCreate(handle, size, prop, flags);
    int idx = gs_dev_index((CUdevice)prop->location.id);
    if (gs_charge(idx, size) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    struct create_call c = {handle, size, prop, flags};
    CUresult r = create_real(&c);
    if (r != CUDA_SUCCESS) {
        r = gs_pressure_retry(idx, r, create_real, &c);
        if (r != CUDA_SUCCESS) {
            gs_uncharge(idx, size);
            return r;
        }
    }
    if (gs_remember(*handle, GS_T_VMM, idx, size, 0) != 0) {
        CUresult f = GS_CALL(gs_real_cuMemRelease, *handle);
        if (f != CUDA_SUCCESS) GS_ERROR("cannot release a refused VMM allocation (error %d)", (int)f);
        gs_uncharge(idx, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return r;
}

GS_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    ENTER(gs_real_cuMemRelease);
    struct gs_entry e;
    if (!gs_track_update(&gs_allocs, handle, GS_T_VMM, 0, &e)) {
        CUresult r = gs_real_cuMemRelease(handle);
        if (r == CUDA_SUCCESS) gs_vmm_import_released(handle);
        return r;
    }
    /* The last reference with nothing mapped: take the entry out before the
     * driver frees it, or a racing cuMemCreate could reuse the handle value
     * while our entry still names it. */
    if (e.c1 == REF_ONE) {
        struct gs_entry out;
        if (gs_track_take(&gs_allocs, handle, GS_T_VMM, &out)) {
            CUresult r = gs_real_cuMemRelease(handle);
            if (r == CUDA_SUCCESS) gs_uncharge((int)out.dev, out.size);
            else if (gs_track_insert(&gs_allocs, &out) != 0) GS_WARN("lost track of a VMM handle");
            return r;
        }
    }
    CUresult r = gs_real_cuMemRelease(handle);
    if (r == CUDA_SUCCESS) vmm_drop(handle, REF_ONE);
    return r;
}

GS_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    ENTER(gs_real_cuMemRetainAllocationHandle);
    CUresult r = gs_real_cuMemRetainAllocationHandle(handle, addr);
    if (r == CUDA_SUCCESS) gs_vmm_import_retained(*handle);
    if (r == CUDA_SUCCESS && gs_counting()) {
        /* The driver hands back the same handle value with one more
         * reference, which the caller will cuMemRelease. */
        struct gs_entry e;
        (void)gs_track_update(&gs_allocs, *handle, GS_T_VMM, (int64_t)REF_ONE, &e);
    }
    return r;
}

GS_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                            unsigned long long flags)
{
    ENTER(gs_real_cuMemMap);
    CUresult r = gs_real_cuMemMap(ptr, size, offset, handle, flags);
    if (r == CUDA_SUCCESS) gs_vmm_import_mapped(ptr, size, handle);
    if (r != CUDA_SUCCESS || !gs_counting()) return r;
    /* The mapping is counted first, so a racing release of the handle
     * cannot give the memory back while it is mapped; if the mapping cannot
     * be remembered, the memory stays counted until exit. */
    struct gs_entry e;
    if (!gs_track_update(&gs_allocs, handle, GS_T_VMM, (int64_t)MAP_ONE, &e)) return r;
    struct gs_entry m = {.key = ptr, .kind = GS_T_MAP, .dev = e.dev, .size = size, .owner = handle};
    if (gs_track_insert(&gs_allocs, &m) != 0)
        GS_WARN("allocation table full: the memory behind %#llx stays counted until exit", (unsigned long long)ptr);
    return r;
}

GS_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    ENTER(gs_real_cuMemUnmap);
    CUresult r = gs_real_cuMemUnmap(ptr, size);
    if (r == CUDA_SUCCESS) gs_vmm_import_unmapped(ptr, size);
    if (r != CUDA_SUCCESS || !gs_counting()) return r;
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

