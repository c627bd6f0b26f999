/* hooks_common.c — what every CUDA hook uses: readiness, the current
 * device, remembering allocations (with the fallback for a full table), and
 * cuInit. */
#include <string.h>

#include "hooks.h"

/* Bytes charged with no table entry (the table was full): released on free
 * by asking the driver for the allocation's size, never more than this. */
static uint64_t untracked[GPUSHARDS_MAX_DEVICES];

static void untracked_add(int dev, uint64_t bytes)
{
    if (dev >= 0 && dev < (int)GPUSHARDS_MAX_DEVICES) __atomic_add_fetch(&untracked[dev], bytes, __ATOMIC_RELAXED);
}

int gs_untracked_any(void)
{
    for (unsigned i = 0; i < GPUSHARDS_MAX_DEVICES; i++)
        if (__atomic_load_n(&untracked[i], __ATOMIC_RELAXED) != 0) return 1;
    return 0;
}

uint64_t gs_untracked_take(int dev, uint64_t bytes)
{
    if (dev < 0 || dev >= (int)GPUSHARDS_MAX_DEVICES) return 0;
    uint64_t cur = __atomic_load_n(&untracked[dev], __ATOMIC_RELAXED), take;
    do {
        take = cur < bytes ? cur : bytes;
    } while (!__atomic_compare_exchange_n(&untracked[dev], &cur, cur - take, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return take;
}

int gs_hooks_ready(void)
{
    if (gs_resolve_cuda() != 0) return 0;
    gs_init();
    return 1;
}

CUresult gs_current(CUdevice *dev, CUcontext *ctx)
{
    if (gs_real_cuCtxGetCurrent == NULL || gs_real_cuCtxGetDevice == NULL) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = gs_real_cuCtxGetCurrent(ctx);
    if (r != CUDA_SUCCESS) return r;
    if (*ctx == NULL) return CUDA_ERROR_INVALID_CONTEXT;
    return gs_real_cuCtxGetDevice(dev);
}

/* Remember an allocation; 0 when remembered.  Pointer allocations have a
 * fallback for a full table (the driver knows their size on free); the rest
 * must be undone by the caller. */
int gs_remember(uint64_t key, uint32_t kind, int dev, uint64_t size, uint64_t owner)
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
    if (gs_resolve_cuda() != 0 || gs_real_cuInit == NULL) return CUDA_ERROR_NOT_INITIALIZED;
    /* Before the driver initialises: it reads the MPS settings then. */
    gs_init();
    gs_mps_before_init();
    CUresult r = gs_real_cuInit(flags);
    if (r == CUDA_SUCCESS) r = gs_mps_after_init();
    if (r == CUDA_SUCCESS && gs_mode == GS_MODE_COUNTING) gs_devices_map_all();
    return r;
}

void gs_untracked_reset(void)
{
    memset(untracked, 0, sizeof untracked);
}
