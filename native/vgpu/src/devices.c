/* devices.c — CUDA ordinals as this process sees them (after
 * CUDA_VISIBLE_DEVICES reordered or subset them) to the region's entries,
 * which are keyed by the physical GPU's UUID. */

#include "hooks.h"

/* 0 = not mapped yet, otherwise region index + 1.  Written once per ordinal
 * (racing mappers write the same value), read on every allocation. */
static int dev_map[GS_MAX_ORDINALS];

static int map_one(CUdevice dev)
{
    CUuuid uuid;
    CUresult r = CUDA_ERROR_NOT_FOUND;
    if (gs_real_cuDeviceGetUuid_v2 != NULL) r = gs_real_cuDeviceGetUuid_v2(&uuid, dev);
    if (r != CUDA_SUCCESS && gs_real_cuDeviceGetUuid != NULL) r = gs_real_cuDeviceGetUuid(&uuid, dev);
    if (r != CUDA_SUCCESS) {
        GS_ERROR("cannot read the UUID of CUDA device %d (error %d); refusing its allocations", (int)dev, (int)r);
        return -1;
    }
    size_t total = 0;
    if (gs_real_cuDeviceTotalMem_v2 == NULL || (r = gs_real_cuDeviceTotalMem_v2(&total, dev)) != CUDA_SUCCESS)
        GS_WARN("cannot read the memory size of CUDA device %d (error %d)", (int)dev, (int)r);
    uint64_t limit = 0;
    /* With a limits file the environment's limit is ignored entirely. */
    int have = gs_limits == NULL && gs_config_limit_for((int)dev, &limit);
    int idx = gs_region_attach_device((const uint8_t *)uuid.bytes, total, have, limit);
    if (idx < 0) return -1;
    __atomic_store_n(&dev_map[dev], idx + 1, __ATOMIC_RELEASE);
    char text[41];
    gs_uuid_format((const uint8_t *)uuid.bytes, text);
    GS_INFO("CUDA device %d is %s (region entry %d, limit %llu bytes)", (int)dev, text, idx,
            (unsigned long long)gs_limit(idx));
    return idx;
}

int gs_devices_map_all(void)
{
    int n = 0;
    CUresult r = gs_real_cuDeviceGetCount != NULL ? gs_real_cuDeviceGetCount(&n) : CUDA_ERROR_NOT_FOUND;
    if (r != CUDA_SUCCESS) return -1;
    for (int i = 0; i < n && i < GS_MAX_ORDINALS; i++)
        if (__atomic_load_n(&dev_map[i], __ATOMIC_ACQUIRE) == 0) map_one((CUdevice)i);
    return 0;
}

int gs_dev_index(CUdevice dev)
{
    if (GS_UNLIKELY(dev < 0 || dev >= GS_MAX_ORDINALS)) return -1;
    int v = __atomic_load_n(&dev_map[dev], __ATOMIC_ACQUIRE);
    if (GS_LIKELY(v > 0)) return v - 1;
    if (gs_mode != GS_MODE_COUNTING) return -1;
    return map_one(dev);
}
