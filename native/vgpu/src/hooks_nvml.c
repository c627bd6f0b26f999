/* hooks_nvml.c — NVML's memory figures (what nvidia-smi, PyTorch's
 * memory_stats and monitoring agents read) show the shard, not the card.
 * NVML ignores CUDA_VISIBLE_DEVICES and names GPUs by UUID, which is how the
 * region names them too. */
#include "vgpu.h"

static nvmlReturn_t (*real_nvmlDeviceGetMemoryInfo)(nvmlDevice_t, nvmlMemory_t *);
static nvmlReturn_t (*real_nvmlDeviceGetMemoryInfo_v2)(nvmlDevice_t, nvmlMemory_v2_t *);
static nvmlReturn_t (*real_nvmlDeviceGetUUID)(nvmlDevice_t, char *, unsigned int);
static nvmlReturn_t (*real_nvmlDeviceGetIndex)(nvmlDevice_t, unsigned int *);

/* The region entry of an NVML device; a GPU no CUDA process has touched
 * yet is added with the environment's limit, its NVML index standing in
 * for the CUDA ordinal (the same when CUDA_VISIBLE_DEVICES is unset and
 * the GPUs are alike, as they are in a shard). */
static int nvml_index(nvmlDevice_t device)
{
    char text[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    uint8_t uuid[16];
    if (real_nvmlDeviceGetUUID == NULL || real_nvmlDeviceGetUUID(device, text, sizeof text) != NVML_SUCCESS ||
        gs_uuid_parse(text, uuid) != 0)
        return -1;
    int idx = gs_region_find_device(uuid);
    if (idx >= 0) return idx;
    unsigned int i = 0;
    uint64_t limit = 0;
    int have = 0;
    if (!gs_cfg.visible_devices_set && real_nvmlDeviceGetIndex != NULL &&
        real_nvmlDeviceGetIndex(device, &i) == NVML_SUCCESS)
        have = gs_config_limit_for((int)i, &limit);
    else if (gs_cfg.have_global_limit)
        have = 1, limit = gs_cfg.global_limit;
    return gs_region_attach_device(uuid, 0, have, limit);
}

/* 1 when the figures were replaced by the shard's. */
static int shard(nvmlDevice_t device, unsigned long long *total, unsigned long long *free, unsigned long long *used)
{
    gs_init();
    if (gs_mode == GS_MODE_FAIL_CLOSED) {
        *used += *free;
        *free = 0;
        return 1;
    }
    if (gs_mode != GS_MODE_COUNTING) return 0;
    int idx = nvml_index(device);
    if (idx < 0) return 0;
    gs_pools_reconcile(idx);
    struct gs_dev_limits l;
    if (gs_limits != NULL && gs_limits_lookup(idx, &l) != 0) { /* no entry: nothing may be allocated */
        *used += *free;
        *free = 0;
        return 1;
    }
    uint64_t limit = gs_limit(idx);
    if (limit == 0) return 0;
    uint64_t held = gs_effective_used(idx);
    uint64_t room = limit > held ? limit - held : 0;
    *total = limit < *total ? limit : *total;
    *free = room < *free ? room : *free;
    *used = held;
    return 1;
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    if (gs_resolve_nvml() != 0 || real_nvmlDeviceGetMemoryInfo == NULL) return NVML_ERROR_UNINITIALIZED;
    nvmlReturn_t r = real_nvmlDeviceGetMemoryInfo(device, memory);
    if (r == NVML_SUCCESS && memory != NULL) shard(device, &memory->total, &memory->free, &memory->used);
    return r;
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    if (gs_resolve_nvml() != 0 || real_nvmlDeviceGetMemoryInfo_v2 == NULL) return NVML_ERROR_UNINITIALIZED;
    nvmlReturn_t r = real_nvmlDeviceGetMemoryInfo_v2(device, memory);
    /* The driver's own reservation is part of the card, not of the shard. */
    if (r == NVML_SUCCESS && memory != NULL && shard(device, &memory->total, &memory->free, &memory->used))
        memory->reserved = 0;
    return r;
}

const struct gs_hook gs_nvml_hooks[] = {
    {"nvmlDeviceGetMemoryInfo", (void *)nvmlDeviceGetMemoryInfo, (void **)&real_nvmlDeviceGetMemoryInfo},
    {"nvmlDeviceGetMemoryInfo_v2", (void *)nvmlDeviceGetMemoryInfo_v2, (void **)&real_nvmlDeviceGetMemoryInfo_v2},
    {"nvmlDeviceGetUUID", NULL, (void **)&real_nvmlDeviceGetUUID},
    {"nvmlDeviceGetIndex", NULL, (void **)&real_nvmlDeviceGetIndex},
};
const size_t gs_nvml_hook_count = sizeof gs_nvml_hooks / sizeof gs_nvml_hooks[0];
