/* pools.c — stream-ordered allocations (cuMemAllocAsync,
 * cuMemAllocFromPoolAsync) and the memory pools behind them.
 *
 * What a pool takes from the card is its reserved memory, not the sum of its
 * live allocations: freed blocks stay cached in the pool until the driver
 * trims it (at a synchronisation, down to the release threshold, or on
 * cuMemPoolTrimTo), and the pool grows in steps (32 MiB on an H100 with
 * driver 580).  A container whose pool caches 6 GiB really holds 6 GiB, so
 * the charge follows the pool's CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT.  Per
 * pool:
 *
 *   live    bytes of the pool's allocations not yet freed,
 *   cached  bytes charged beyond the live ones: freed-but-cached blocks and
 *           the rest of a growth step; an allocation reuses these first,
 *   taken   cached bytes handed to allocations still inside the driver,
 *   growth  bytes charged for allocations still inside the driver that the
 *           pool may have to grow by.
 *
 * Reserve before allocate, as everywhere else: an allocation the cached
 * charge covers takes from it and the pool does not grow; any other may make
 * the pool grow by up to the request rounded up to the growth step
 * (gs_pool_growth_bytes: the region's pool_growth_bytes, else
 * GPUSHARDS_POOL_GROWTH_BYTES, else 32 MiB), so that much is charged before
 * the driver is called, and refused — the driver not called, usage
 * unchanged — when it does not fit under the cap.  Charging only the
 * request and the rest of the step afterwards, as an earlier version did,
 * let an H100 hold 4110.8 MiB under a 4096 MiB cap: the driver had taken
 * the step before we could say no.  The price: when the pool must grow, the
 * last part of the cap smaller than one step cannot be had through a pool.
 *
 * The driver's reserved size R must lie between live + cached + taken (what
 * is certainly reserved now) and that plus growth (once the allocations in
 * flight have grown the pool).  reconcile() restores that whenever we look
 * (each async allocation and free, cuMemGetInfo, cuMemPoolTrimTo, and when a
 * charge would fail): below it the driver trimmed, or did not grow by all
 * that was reserved, and the cached charge is given back; above it the pool
 * grew by more than we reserved, which only a driver that grows by more than
 * the configured step, or grows for a request its cached blocks are too
 * fragmented to hold, can do.  That is charged unconditionally, because the
 * driver has already taken it, and later allocations are refused until
 * usage falls.
 *
 * These four counts and the decision must be seen together, so each pool has
 * a small spin lock, held for a few additions and at most one attribute
 * query, never across an allocation or a budget charge.  Pointer allocations
 * (cuMemAlloc and the rest) take no lock at all. */
#include <sched.h>

#include "vgpu.h"

#define GS_POOL_DESTROYED 1u
#define GS_POOL_REFUSE 2u /* a device pool we could not map to a region entry */

static void spin_lock(uint64_t *l)
{
    while (__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE) != 0)
        while (__atomic_load_n(l, __ATOMIC_RELAXED) != 0) sched_yield();
}

static void spin_unlock(uint64_t *l)
{
    __atomic_store_n(l, 0, __ATOMIC_RELEASE);
}

static void lock(struct gs_entry *p)
{
    spin_lock(&p->lock);
}

static void unlock(struct gs_entry *p)
{
    spin_unlock(&p->lock);
}

/* Held while a pool we did not see created is added: once per pool. */
static uint64_t adding;

void gs_pools_reset_process(void)
{
    /* The parent's pools are not the child's; and a thread of the parent
     * may have held the lock at the fork. */
    gs_track_drop_all(&gs_pools);
    __atomic_store_n(&adding, 0, __ATOMIC_RELAXED);
}

static CUmemoryPool handle(const struct gs_entry *p)
{
    return (CUmemoryPool)(uintptr_t)__atomic_load_n(&p->key, __ATOMIC_RELAXED);
}

/* Under the pool's lock. */
static void reconcile_locked(struct gs_entry *p)
{
    if (p->dev == GS_DEV_NONE || p->flags != 0 || gs_real_cuMemPoolGetAttribute == NULL) return;
    cuuint64_t r = 0;
    if (gs_real_cuMemPoolGetAttribute(handle(p), CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &r) != CUDA_SUCCESS) return;
    uint64_t low = p->c1 + p->c2 + p->size, high = low + p->owner;
    if (r < low) {
        uint64_t drop = low - r < p->c2 ? low - r : p->c2;
        p->c2 -= drop;
        gs_uncharge((int)p->dev, drop);
    } else if (r > high) {
        p->c2 += r - high;
        gs_charge_force((int)p->dev, r - high);
    }
}

static void reconcile(struct gs_entry *p)
{
    lock(p);
    reconcile_locked(p);
    unlock(p);
}

static void reconcile_if(struct gs_entry *p, void *dev)
{
    if (p->dev == (uint32_t)(uintptr_t)dev) reconcile(p);
}

void gs_pools_reconcile(int dev)
{
    if (dev >= 0) gs_track_each(&gs_pools, reconcile_if, (void *)(uintptr_t)dev);
}

static struct gs_entry *add_pool(CUmemoryPool pool, uint32_t dev, uint64_t flags)
{
    struct gs_entry e = {.key = (uint64_t)(uintptr_t)pool, .kind = GS_T_POOL, .dev = dev, .flags = flags};
    if (gs_track_insert(&gs_pools, &e) != 0) GS_ERROR("too many memory pools to track");
    return gs_track_find(&gs_pools, e.key, GS_T_POOL);
}

/* The first threads to meet a pool must add one entry between them, not
 * one each: gs_pools_reconcile() visits every entry, and a second one, at
 * zero, would charge the pool's whole reserved size again each time it
 * looked (8 threads starting at once charged 1708 MiB for a pool holding
 * 704).  Rare (once per pool), so a lock and a second look suffice. */
static struct gs_entry *add_pool_once(CUmemoryPool pool, uint32_t dev, uint64_t flags)
{
    spin_lock(&adding);
    struct gs_entry *p = gs_track_find(&gs_pools, (uint64_t)(uintptr_t)pool, GS_T_POOL);
    if (p == NULL) p = add_pool(pool, dev, flags);
    spin_unlock(&adding);
    return p;
}

void gs_pool_register(CUmemoryPool pool, const CUmemPoolProps *props)
{
    uint32_t dev = GS_DEV_NONE;
    uint64_t flags = 0;
    int idx = -2;
    if (props != NULL && props->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
        idx = gs_dev_index((CUdevice)props->location.id);
    } else if (props != NULL && props->allocType == CU_MEM_ALLOCATION_TYPE_MANAGED) {
        /* Managed memory may live on any GPU; like cuMemAllocManaged it is
         * counted on the current device. */
        CUdevice d;
        idx = gs_real_cuCtxGetDevice(&d) == CUDA_SUCCESS ? gs_dev_index(d) : -1;
    }
    if (idx >= 0) dev = (uint32_t)idx;
    else if (idx == -1) flags = GS_POOL_REFUSE;
    add_pool(pool, dev, flags);
}

/* A pool we did not see created is a device's default (or current) pool. */
static struct gs_entry *pool_entry(CUmemoryPool pool, int hint)
{
    struct gs_entry *p = gs_track_find(&gs_pools, (uint64_t)(uintptr_t)pool, GS_T_POOL);
    if (p != NULL) return p;
    int n = 0, idx = hint;
    if (gs_real_cuDeviceGetCount != NULL && gs_real_cuDeviceGetCount(&n) == CUDA_SUCCESS) {
        for (int d = 0; d < n; d++) {
            CUmemoryPool a = NULL, b = NULL;
            if ((gs_real_cuDeviceGetDefaultMemPool != NULL &&
                 gs_real_cuDeviceGetDefaultMemPool(&a, (CUdevice)d) == CUDA_SUCCESS && a == pool) ||
                (gs_real_cuDeviceGetMemPool != NULL && gs_real_cuDeviceGetMemPool(&b, (CUdevice)d) == CUDA_SUCCESS &&
                 b == pool)) {
                idx = gs_dev_index((CUdevice)d);
                break;
            }
        }
    }
    return add_pool_once(pool, idx >= 0 ? (uint32_t)idx : 0, idx >= 0 ? 0 : GS_POOL_REFUSE);
}

static int stream_device(CUstream s, CUdevice *dev)
{
    if (gs_real_cuStreamGetDevice != NULL && gs_real_cuStreamGetDevice(s, dev) == CUDA_SUCCESS) return 0;
    /* Drivers before 12.8 have no cuStreamGetDevice: ask the stream's
     * context for its device. */
    CUcontext ctx, popped;
    if (gs_real_cuStreamGetCtx == NULL || gs_real_cuStreamGetCtx(s, &ctx) != CUDA_SUCCESS) return -1;
    if (gs_real_cuCtxPushCurrent_v2(ctx) != CUDA_SUCCESS) return -1;
    CUresult r = gs_real_cuCtxGetDevice(dev);
    if (gs_real_cuCtxPopCurrent_v2(&popped) != CUDA_SUCCESS) GS_WARN("cannot restore the current context");
    return r == CUDA_SUCCESS ? 0 : -1;
}

/* Undo the in-flight bookkeeping of an allocation that did not happen. */
static void unreserve(struct gs_entry *p, uint64_t take, uint64_t grow)
{
    lock(p);
    p->c2 += take;
    p->size -= take;
    p->owner -= grow;
    unlock(p);
}

/* The most the pool can grow by for one allocation: the request rounded up
 * to the growth step.  The driver may not find room in its cached blocks
 * even when they add up to enough, so nothing cached is subtracted.  0 when
 * the rounding overflows (no cap could hold it). */
static uint64_t worst_growth(size_t bytes, uint64_t step)
{
    uint64_t steps = bytes / step + (bytes % step != 0);
    return steps > UINT64_MAX / step ? 0 : steps * step;
}

CUresult gs_pool_alloc(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream stream, int from_pool,
                       void *real_fn)
{
    CUresult (*alloc)(CUdeviceptr *, size_t, CUstream) = (CUresult(*)(CUdeviceptr *, size_t, CUstream))real_fn;
    CUresult (*alloc_from)(CUdeviceptr *, size_t, CUmemoryPool, CUstream) =
        (CUresult(*)(CUdeviceptr *, size_t, CUmemoryPool, CUstream))real_fn;
#define CALL_REAL() (from_pool ? alloc_from(dptr, bytes, pool, stream) : alloc(dptr, bytes, stream))
    CUdevice sdev;
    if (stream_device(stream, &sdev) != 0 && gs_real_cuCtxGetDevice(&sdev) != CUDA_SUCCESS)
        return CALL_REAL(); /* no stream, no context: the driver reports it */
    int hint = gs_dev_index(sdev);
    if (!from_pool) {
        /* cuMemAllocAsync takes from the current pool of the stream's device. */
        CUresult r = gs_real_cuDeviceGetMemPool != NULL ? gs_real_cuDeviceGetMemPool(&pool, sdev)
                                                          : CUDA_ERROR_NOT_SUPPORTED;
        if (r != CUDA_SUCCESS) {
            GS_ERROR("cannot find the memory pool of CUDA device %d (error %d); refusing", (int)sdev, (int)r);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    struct gs_entry *p = pool_entry(pool, hint);
    if (p == NULL || (p->flags & GS_POOL_REFUSE) || gs_mode == GS_MODE_FAIL_CLOSED) return CUDA_ERROR_OUT_OF_MEMORY;
    if (p->dev == GS_DEV_NONE) return CALL_REAL(); /* a host-memory pool */
    int idx = (int)p->dev;

    /* Served from the cached charge: taken, nothing new reserved.  Else the
     * pool may grow: its worst case is reserved now, and what the pool did
     * not grow by is given back once the driver has answered.  Both stay in
     * flight (taken, growth) until then. */
    uint64_t step = gs_pool_growth_bytes(idx), take = 0, grow = 0;
    lock(p);
    reconcile_locked(p);
    int may_grow = p->c2 < bytes;
    if (!may_grow) {
        take = bytes;
        p->c2 -= take;
        p->size += take;
    } else {
        grow = worst_growth(bytes, step);
        p->owner += grow;
    }
    unlock(p);
    if (may_grow && (grow == 0 || gs_charge(idx, grow) != 0)) {
        unreserve(p, take, grow);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult r = CALL_REAL();
#undef CALL_REAL
    if (r != CUDA_SUCCESS) {
        unreserve(p, take, grow);
        gs_uncharge(idx, grow);
        return r;
    }
    struct gs_entry a = {.key = *dptr, .kind = GS_T_ASYNC, .dev = (uint32_t)idx, .size = bytes,
                         .owner = (uint64_t)(uintptr_t)pool};
    int tracked = gs_track_insert(&gs_allocs, &a) == 0;
    lock(p);
    p->size -= take;
    p->owner -= grow;
    /* take + grow >= bytes: the allocation is live, the rest of the growth
     * reservation is cache until reconcile_locked() holds it against what
     * the pool really reserved and gives back what it did not grow by.
     * Untracked, the block is freed at once below and stays in the cache. */
    if (tracked) {
        p->c1 += bytes;
        p->c2 += take + grow - bytes;
    } else {
        p->c2 += take + grow;
    }
    reconcile_locked(p);
    unlock(p);
    if (!tracked) {
        /* No fallback here: an untracked pool allocation would be counted
         * twice, by its size and in the pool's reserved memory. */
        GS_ERROR("allocation table full (raise GPUSHARDS_TRACK_CAPACITY); refusing the allocation");
        CUresult f = gs_real_free_async(*dptr, stream);
        if (f != CUDA_SUCCESS) GS_ERROR("cannot free a refused allocation (error %d)", (int)f);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return r;
}

void gs_pool_release(const struct gs_entry *freed)
{
    struct gs_entry *p = gs_track_find(&gs_pools, freed->owner, GS_T_POOL);
    if (p == NULL) {
        gs_uncharge((int)freed->dev, freed->size);
        return;
    }
    lock(p);
    if (p->flags & GS_POOL_DESTROYED) {
        unlock(p);
        gs_uncharge((int)freed->dev, freed->size);
        return;
    }
    /* Free, but still held by the pool until the driver trims it. */
    uint64_t sub = p->c1 < freed->size ? p->c1 : freed->size;
    p->c1 -= sub;
    p->c2 += sub;
    reconcile_locked(p);
    unlock(p);
}

void gs_pool_destroyed(CUmemoryPool pool)
{
    struct gs_entry *p = gs_track_find(&gs_pools, (uint64_t)(uintptr_t)pool, GS_T_POOL);
    if (p == NULL) return;
    /* Its cached memory goes back to the card now; allocations still live
     * keep the pool alive in the driver and are given back as they are freed. */
    lock(p);
    p->flags |= GS_POOL_DESTROYED;
    uint64_t cached = p->c2;
    p->c2 = 0;
    unlock(p);
    if (p->dev != GS_DEV_NONE) gs_uncharge((int)p->dev, cached);
}

void gs_pool_trimmed(CUmemoryPool pool)
{
    struct gs_entry *p = gs_track_find(&gs_pools, (uint64_t)(uintptr_t)pool, GS_T_POOL);
    if (p != NULL) reconcile(p);
}
