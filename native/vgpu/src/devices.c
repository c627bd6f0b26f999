/* devices.c — CUDA ordinals as this process sees them (after
 * CUDA_VISIBLE_DEVICES reordered or subset them) to the region's entries,
 * which are keyed by the physical GPU's UUID. */
#include <stdio.h>
#include <string.h>

#include "vgpu.h"

/* 0 = not mapped yet, otherwise region index + 1.  Written once per ordinal
 * (racing mappers write the same value), read on every allocation. */
static int dev_map[GS_MAX_ORDINALS];

void gs_uuid_format(const uint8_t u[16], char out[41])
{
    snprintf(out, 41, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
             u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

int gs_uuid_parse(const char *text, uint8_t u[16])
{
    if (strncmp(text, "GPU-", 4) == 0) text += 4;
    int n = 0;
    for (const char *p = text; *p; p++) {
        if (*p == '-') continue;
        int v;
        if (*p >= '0' && *p <= '9') v = *p - '0';
        else if (*p >= 'a' && *p <= 'f') v = *p - 'a' + 10;
        else if (*p >= 'A' && *p <= 'F') v = *p - 'A' + 10;
        else return -1;
        if (n >= 32) return -1;
        if (n % 2 == 0) u[n / 2] = (uint8_t)(v << 4);
        else u[n / 2] |= (uint8_t)v;
        n++;
    }
    return n == 32 ? 0 : -1;
}

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
    int have = gs_config_limit_for((int)dev, &limit);
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
