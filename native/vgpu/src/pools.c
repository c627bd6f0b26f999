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
#include <string.h>
#include <sys/mman.h>

#include "hooks.h"

#define GS_POOL_DESTROYED 1u
#define GS_POOL_REFUSE 2u /* a device pool we could not map to a region entry */

/* One memory pool.  Entries are only ever added (a destroyed pool keeps
 * its entry, flagged), so a pointer to one stays valid for the process's
 * life and needs no protection against reuse. */
struct gs_pool {
    uint64_t handle; /* atomic: 0 empty, 1 being filled, else the CUmemoryPool */
    uint32_t dev;    /* region device index, or GS_DEV_NONE (host memory) */
    uint32_t flags;  /* GS_POOL_* */
    uint64_t live;   /* bytes of the pool's allocations not yet freed */
    uint64_t cached; /* bytes charged beyond the live ones */
    uint64_t taken;  /* cached bytes handed to allocations still inside the driver */
    uint64_t growth; /* bytes charged for allocations in flight that may grow the pool */
    uint64_t lock;   /* spin lock over the four counts */
};

#define GS_POOL_CAPACITY 256u /* a power of two */
#define GS_POOL_BUSY 1ull
static struct gs_pool *pools;

int gs_pools_init(void)
{
    void *m = mmap(NULL, GS_POOL_CAPACITY * sizeof(struct gs_pool), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return -1;
    pools = m;
    return 0;
}

static uint32_t pool_slot(uint64_t key)
{
    key ^= key >> 29;
    key *= 0xbf58476d1ce4e5b9ULL;
    key ^= key >> 32;
    return (uint32_t)key & (GS_POOL_CAPACITY - 1);
}

static struct gs_pool *pool_find(CUmemoryPool pool)
{
    uint64_t key = (uint64_t)(uintptr_t)pool;
    if (pools == NULL || key <= GS_POOL_BUSY) return NULL;
    for (uint32_t i = 0, s = pool_slot(key); i < GS_POOL_CAPACITY; i++, s = (s + 1) & (GS_POOL_CAPACITY - 1)) {
        uint64_t k = __atomic_load_n(&pools[s].handle, __ATOMIC_ACQUIRE);
        if (k == 0) return NULL;
        if (k == key) return &pools[s];
    }
    return NULL;
}

/* Add a pool (or find the one a racing thread added first).  A thread that
 * loses the race for an empty slot must look at that same slot again: the
 * winner may be adding this very pool.  Moving on to the next slot instead
 * added the pool twice, and the two entries each counted the other's memory
 * as their own free cache, handed it out uncharged, and force-charged the
 * growth that followed: a 1 GiB cap let 8 threads take 9 GiB. */
static struct gs_pool *pool_insert(CUmemoryPool pool, uint32_t dev, uint32_t flags)
{
    uint64_t key = (uint64_t)(uintptr_t)pool;
    if (pools == NULL || key <= GS_POOL_BUSY) return NULL;
    for (uint32_t i = 0, s = pool_slot(key); i < GS_POOL_CAPACITY; i++, s = (s + 1) & (GS_POOL_CAPACITY - 1)) {
        struct gs_pool *p = &pools[s];
        for (;;) {
            uint64_t k = __atomic_load_n(&p->handle, __ATOMIC_ACQUIRE);
            if (k == GS_POOL_BUSY) {
                sched_yield();
                continue;
            }
            if (k == key) return p;
            if (k != 0) break; /* another pool's slot */
            if (!__atomic_compare_exchange_n(&p->handle, &k, GS_POOL_BUSY, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
                continue;
            p->dev = dev;
            p->flags = flags;
            p->live = p->cached = p->taken = p->growth = 0;
            __atomic_store_n(&p->lock, 0, __ATOMIC_RELAXED);
            __atomic_store_n(&p->handle, key, __ATOMIC_RELEASE);
            return p;
        }
    }
    GS_ERROR("too many memory pools to track (%u)", GS_POOL_CAPACITY);
    return NULL;
}

static void spin_lock(uint64_t *l)
{
    while (__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE) != 0)
        while (__atomic_load_n(l, __ATOMIC_RELAXED) != 0) sched_yield();
}

static void spin_unlock(uint64_t *l)
{
    __atomic_store_n(l, 0, __ATOMIC_RELEASE);
}

static void lock(struct gs_pool *p)
{
    spin_lock(&p->lock);
}

static void unlock(struct gs_pool *p)
{
    spin_unlock(&p->lock);
}

void gs_pools_reset_process(void)
{
    /* The parent's pools are not the child's; and a thread of the parent
     * may have held a lock at the fork. */
    if (pools == NULL) return;
    size_t bytes = GS_POOL_CAPACITY * sizeof(struct gs_pool);
    void *m = mmap(pools, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (m == MAP_FAILED) memset(pools, 0, bytes);
}

static CUmemoryPool handle(const struct gs_pool *p)
{
    return (CUmemoryPool)(uintptr_t)__atomic_load_n(&p->handle, __ATOMIC_RELAXED);
}

/* Under the pool's lock.  Never while a stream capture is under way in the
 * process: cuMemPoolGetAttribute is not a capture-safe call, and in the
 * global capture mode it invalidates the capture of any thread. */
static void reconcile_locked(struct gs_pool *p)
{
    if (p->dev == GS_DEV_NONE || p->flags != 0 || gs_real_cuMemPoolGetAttribute == NULL || gs_capturing()) return;
    cuuint64_t r = 0;
    if (gs_real_cuMemPoolGetAttribute(handle(p), CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &r) != CUDA_SUCCESS) return;
    uint64_t low = p->live + p->cached + p->taken, high = low + p->growth;
    /* While an allocation served from the cached charge is still inside the
     * driver, a growing allocation may have taken the cached block it was
     * counting on first: the pool is then below what we hold, yet about to
     * grow for the one in flight.  Giving the difference back would free
     * budget that the coming growth needs (charged afterwards by force,
     * past the cap if another allocation took that budget meanwhile), so
     * give back only once nothing taken from the cache is in flight. */
    if (r < low && p->taken == 0) {
        uint64_t drop = low - r < p->cached ? low - r : p->cached;
        p->cached -= drop;
        gs_uncharge((int)p->dev, drop);
    } else if (r > high) {
        p->cached += r - high;
        gs_charge_force((int)p->dev, r - high);
        GS_WARN("a memory pool on GPU %u grew by %llu bytes more than was reserved; charged regardless", p->dev,
                (unsigned long long)(r - high));
    }
}

static void reconcile(struct gs_pool *p)
{
    lock(p);
    reconcile_locked(p);
    unlock(p);
}

void gs_pools_reconcile(int dev)
{
    if (dev < 0 || pools == NULL) return;
    for (uint32_t i = 0; i < GS_POOL_CAPACITY; i++) {
        struct gs_pool *p = &pools[i];
        if (__atomic_load_n(&p->handle, __ATOMIC_ACQUIRE) > GS_POOL_BUSY && p->dev == (uint32_t)dev) reconcile(p);
    }
}

/* The first threads to meet a pool must add one entry between them, not
 * one each: gs_pools_reconcile() visits every entry, and a second one, at
 * zero, would charge the pool's whole reserved size again each time it
 * looked (8 threads starting at once charged 1708 MiB for a pool holding
 * 704).  pool_insert() returns the entry a racing thread added first. */
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
        idx = GS_CALL(gs_real_cuCtxGetDevice, &d) == CUDA_SUCCESS ? gs_dev_index(d) : -1;
    }
    if (idx >= 0) dev = (uint32_t)idx;
    else if (idx == -1) flags = GS_POOL_REFUSE;
    pool_insert(pool, dev, (uint32_t)flags);
}

/* A pool we did not see created is a device's default (or current) pool. */
static struct gs_pool *pool_entry(CUmemoryPool pool, int hint)
{
    struct gs_pool *p = pool_find(pool);
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
    return pool_insert(pool, idx >= 0 ? (uint32_t)idx : 0, idx >= 0 ? 0 : GS_POOL_REFUSE);
}

static int stream_device(CUstream s, CUdevice *dev)
{
    /* cuStreamGetDevice is not capture-safe: while any capture is under way
     * the current context's device stands in. */
    if (gs_capturing()) return GS_CALL(gs_real_cuCtxGetDevice, dev) == CUDA_SUCCESS ? 0 : -1;
    if (gs_real_cuStreamGetDevice != NULL && gs_real_cuStreamGetDevice(s, dev) == CUDA_SUCCESS) return 0;
    /* Drivers before 12.8 have no cuStreamGetDevice: ask the stream's
     * context for its device. */
    CUcontext ctx, popped;
    if (gs_real_cuStreamGetCtx == NULL || gs_real_cuStreamGetCtx(s, &ctx) != CUDA_SUCCESS) return -1;
    if (GS_CALL(gs_real_cuCtxPushCurrent_v2, ctx) != CUDA_SUCCESS) return -1;
    CUresult r = GS_CALL(gs_real_cuCtxGetDevice, dev);
    if (GS_CALL(gs_real_cuCtxPopCurrent_v2, &popped) != CUDA_SUCCESS) GS_WARN("cannot restore the current context");
    return r == CUDA_SUCCESS ? 0 : -1;
}

/* Undo the in-flight bookkeeping of an allocation that did not happen. */
static void unreserve(struct gs_pool *p, uint64_t take, uint64_t grow)
{
    lock(p);
    p->cached += take;
    p->taken -= take;
    p->growth -= grow;
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

/* One stream-ordered allocation's driver call, kept for a retry (pressure.c). */
struct pool_call {
    CUdeviceptr *dptr;
    size_t bytes;
    CUmemoryPool pool;
    CUstream stream;
    int from_pool;
    void *real_fn;
};

static CUresult pool_real(void *arg)
{
    struct pool_call *c = arg;
    if (c->from_pool)
        return ((CUresult(*)(CUdeviceptr *, size_t, CUmemoryPool, CUstream))c->real_fn)(c->dptr, c->bytes, c->pool,
                                                                                       c->stream);
    return ((CUresult(*)(CUdeviceptr *, size_t, CUstream))c->real_fn)(c->dptr, c->bytes, c->stream);
}

CUresult gs_pool_alloc(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream stream, int from_pool,
                       void *real_fn)
{
    struct pool_call call = {dptr, bytes, pool, stream, from_pool, real_fn};
#define CALL_REAL() pool_real(&call)
    /* On a capturing stream this records a graph memory node: nothing is
     * allocated now, and the graph's memory is charged when it becomes real
     * (hooks_graph.c). */
    if (gs_stream_capturing(stream)) return CALL_REAL();
    CUdevice sdev;
    if (stream_device(stream, &sdev) != 0 && GS_CALL(gs_real_cuCtxGetDevice, &sdev) != CUDA_SUCCESS)
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
    struct gs_pool *p = pool_entry(pool, hint);
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
    int may_grow = p->cached < bytes;
    if (!may_grow) {
        take = bytes;
        p->cached -= take;
        p->taken += take;
    } else {
        grow = worst_growth(bytes, step);
        p->growth += grow;
    }
    unlock(p);
    if (may_grow && (grow == 0 || gs_charge(idx, grow) != 0)) {
        unreserve(p, take, grow);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult r = CALL_REAL();
#undef CALL_REAL
    if (r != CUDA_SUCCESS) {
        /* The pool could not grow within the budget: memory someone else
         * holds.  What was reserved stays in flight while it is retried. */
        r = gs_pressure_retry(idx, r, pool_real, &call);
        if (r != CUDA_SUCCESS) {
            unreserve(p, take, grow);
            gs_uncharge(idx, grow);
            return r;
        }
    }
    struct gs_entry a = {.key = *dptr, .kind = GS_T_ASYNC, .dev = (uint32_t)idx, .size = bytes,
                         .owner = (uint64_t)(uintptr_t)pool};
    int tracked = gs_track_insert(&gs_allocs, &a) == 0;
    lock(p);
    p->taken -= take;
    p->growth -= grow;
    /* take + grow >= bytes: the allocation is live, the rest of the growth
     * reservation is cache until reconcile_locked() holds it against what
     * the pool really reserved and gives back what it did not grow by.
     * Untracked, the block is freed at once below and stays in the cache. */
    if (tracked) {
        p->live += bytes;
        p->cached += take + grow - bytes;
    } else {
        p->cached += take + grow;
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
    struct gs_pool *p = pool_find((CUmemoryPool)(uintptr_t)freed->owner);
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
    uint64_t sub = p->live < freed->size ? p->live : freed->size;
    p->live -= sub;
    p->cached += sub;
    reconcile_locked(p);
    unlock(p);
}

void gs_pool_destroyed(CUmemoryPool pool)
{
    struct gs_pool *p = pool_find(pool);
    if (p == NULL) return;
    /* Its cached memory goes back to the card now; allocations still live
     * keep the pool alive in the driver and are given back as they are freed. */
    lock(p);
    p->flags |= GS_POOL_DESTROYED;
    uint64_t cached = p->cached;
    p->cached = 0;
    unlock(p);
    if (p->dev != GS_DEV_NONE) gs_uncharge((int)p->dev, cached);
}

void gs_pool_trimmed(CUmemoryPool pool)
{
    struct gs_pool *p = pool_find(pool);
    if (p != NULL) reconcile(p);
}
