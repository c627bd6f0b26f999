/* fake_pool.c — stream-ordered memory pools of the fake libcuda.so.1, as
 * the real driver's behave for the interposer: a pool takes memory from its
 * card in steps of fake_pool_chunk, caches what is freed, and gives whole
 * chunks back above its release threshold at a synchronisation or on
 * cuMemPoolTrimTo.  Every GPU has a default pool; created ones may hold
 * host memory (phys -1), which costs no card memory. */
#include <stdlib.h>
#include <unistd.h>

#include "fake_cuda.h"

enum { M_POOL = 0x90909090 };

struct fpool {
    uint32_t magic;
    int phys; /* -1: host memory */
    int destroyed;
    uint64_t reserved, used, threshold, reserved_high, used_high;
};

static struct fpool default_pool[FAKE_MAX_GPUS], *current_pool[FAKE_MAX_GPUS];
static struct fpool *pools[256];
static int pool_count;

void fake_pools_init(void)
{
    for (int g = 0; g < FAKE_MAX_GPUS; g++) {
        default_pool[g] = (struct fpool){.magic = M_POOL, .phys = g};
        current_pool[g] = &default_pool[g];
    }
}

static uint64_t round_chunk(uint64_t v)
{
    return (v + fake_pool_chunk - 1) / fake_pool_chunk * fake_pool_chunk;
}

/* Give back whole chunks above max(used, keep), as the driver does at a
 * synchronisation (keep = release threshold) or on cuMemPoolTrimTo. */
static void trim(struct fpool *p, uint64_t keep)
{
    uint64_t target = round_chunk(p->used > keep ? p->used : keep);
    if (p->reserved > target) {
        if (p->phys >= 0) fake_phys_give(p->phys, p->reserved - target);
        p->reserved = target;
    }
}

void fake_pools_synchronize(void)
{
    fake_lock();
    for (int d = 0; d < fake_visible_count(); d++) {
        struct fpool *p = &default_pool[fake_phys_of(d)];
        trim(p, p->threshold);
    }
    for (int i = 0; i < pool_count; i++)
        if (!pools[i]->destroyed) trim(pools[i], pools[i]->threshold);
    fake_unlock();
}

void fake_pool_freed(struct fpool *p, uint64_t bytes)
{
    p->used -= bytes;
    /* A destroyed pool kept only its live allocations' memory. */
    if (p->destroyed && p->phys >= 0) {
        fake_phys_give(p->phys, p->reserved - p->used);
        p->reserved = p->used;
    }
}

static CUresult pool_alloc(CUdeviceptr *dptr, size_t bytes, struct fpool *p)
{
    if (p == NULL || p->magic != M_POOL || p->destroyed) return CUDA_ERROR_INVALID_VALUE;
    if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    if (fake_pool_jitter_us != 0) {
        static __thread unsigned seed;
        if (seed == 0) seed = (unsigned)(uintptr_t)&seed ^ (unsigned)getpid();
        if (rand_r(&seed) % 2 == 0) usleep((useconds_t)(rand_r(&seed) % fake_pool_jitter_us));
    }
    fake_lock();
    uint64_t spare = p->reserved - p->used;
    if (spare < bytes) {
        uint64_t grow = round_chunk(bytes - spare);
        if (p->phys >= 0 && fake_phys_take(p->phys, grow) != 0) {
            fake_unlock();
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        p->reserved += grow;
    }
    uint64_t va = fake_va_alloc(p->phys, bytes);
    struct rec *r = fake_rec_add(va);
    if (r == NULL) {
        /* The pool keeps what it grew, as it keeps freed memory, until trimmed. */
        fake_unlock();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    p->used += bytes;
    if (p->reserved > p->reserved_high) p->reserved_high = p->reserved;
    if (p->used > p->used_high) p->used_high = p->used;
    r->size = bytes;
    r->phys = p->phys;
    r->kind = K_ASYNC;
    r->owner.pool = p;
    fake_unlock();
    *dptr = va;
    return CUDA_SUCCESS;
}

API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream s)
{
    NEED_INIT();
    if (dptr == NULL) return CUDA_ERROR_INVALID_VALUE;
    struct fctx *c = fake_stream_ctx(s);
    if (!fake_ctx_valid(c)) return CUDA_ERROR_INVALID_CONTEXT;
    if (fake_capture_alloc(dptr, bytes, s)) return CUDA_SUCCESS;
    return pool_alloc(dptr, bytes, current_pool[c->phys]);
}

API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUstream s)
{
    return cuMemAllocAsync(dptr, bytes, s);
}

API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream s)
{
    NEED_INIT();
    if (dptr == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (!fake_ctx_valid(fake_stream_ctx(s))) return CUDA_ERROR_INVALID_CONTEXT;
    return pool_alloc(dptr, bytes, (struct fpool *)pool);
}

API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream s)
{
    return cuMemAllocFromPoolAsync(dptr, bytes, pool, s);
}

API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
    NEED_INIT();
    struct fstream *cs = fake_stream_real(s);
    if (cs != NULL && cs->capturing) return CUDA_SUCCESS; /* a free node in the captured graph */
    return fake_mem_free(dptr);
}

API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s)
{
    return cuMemFreeAsync(dptr, s);
}

API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice d)
{
    NEED_INIT();
    if (pool == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (fake_phys_of(d) < 0) return CUDA_ERROR_INVALID_DEVICE;
    *pool = (CUmemoryPool)&default_pool[fake_phys_of(d)];
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice d)
{
    NEED_INIT();
    if (pool == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (fake_phys_of(d) < 0) return CUDA_ERROR_INVALID_DEVICE;
    *pool = (CUmemoryPool)current_pool[fake_phys_of(d)];
    return CUDA_SUCCESS;
}

API CUresult cuDeviceSetMemPool(CUdevice d, CUmemoryPool pool)
{
    NEED_INIT();
    struct fpool *p = (struct fpool *)pool;
    if (fake_phys_of(d) < 0 || p == NULL || p->magic != M_POOL || p->phys != fake_phys_of(d))
        return CUDA_ERROR_INVALID_VALUE;
    current_pool[fake_phys_of(d)] = p;
    return CUDA_SUCCESS;
}

API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    NEED_INIT();
    if (pool == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (props == NULL) return CUDA_ERROR_INVALID_VALUE;
    int phys = -1;
    if (props->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
        phys = fake_phys_of(props->location.id);
        if (phys < 0) return CUDA_ERROR_INVALID_DEVICE;
    }
    fake_lock();
    if (pool_count == 256) {
        fake_unlock();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct fpool *p = calloc(1, sizeof *p);
    if (p == NULL) {
        fake_unlock();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *p = (struct fpool){.magic = M_POOL, .phys = phys};
    pools[pool_count++] = p;
    fake_unlock();
    *pool = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    NEED_INIT();
    struct fpool *p = (struct fpool *)pool;
    if (p == NULL || p->magic != M_POOL || p->destroyed) return CUDA_ERROR_INVALID_VALUE;
    fake_lock();
    p->destroyed = 1;
    /* Live allocations keep their memory until freed. */
    if (p->phys >= 0) fake_phys_give(p->phys, p->reserved - p->used);
    p->reserved = p->used;
    fake_unlock();
    return CUDA_SUCCESS;
}

API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
    NEED_INIT();
    struct fpool *p = (struct fpool *)pool;
    if (p == NULL || p->magic != M_POOL) return CUDA_ERROR_INVALID_VALUE;
    fake_lock();
    trim(p, keep);
    fake_unlock();
    return CUDA_SUCCESS;
}

API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    NEED_INIT();
    fake_capture_unsafe_call();
    struct fpool *p = (struct fpool *)pool;
    if (p == NULL || p->magic != M_POOL) return CUDA_ERROR_INVALID_VALUE;
    fake_lock();
    cuuint64_t *v = value;
    switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *v = p->threshold; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *v = p->reserved; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *v = p->reserved_high; break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *v = p->used; break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *v = p->used_high; break;
    default: *(int *)value = 1; break;
    }
    fake_unlock();
    return CUDA_SUCCESS;
}

API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    NEED_INIT();
    struct fpool *p = (struct fpool *)pool;
    if (p == NULL || p->magic != M_POOL) return CUDA_ERROR_INVALID_VALUE;
    fake_lock();
    if (attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) p->threshold = *(cuuint64_t *)value;
    fake_unlock();
    return CUDA_SUCCESS;
}
