/* hooks_limit.c — cuCtxSetLimit.  Raising the stack size, the printf FIFO
 * or the device malloc heap makes the driver reserve device memory for the
 * context: the FIFO and the heap their size, the stack its size for every
 * thread the device can hold at once (SMs x threads per SM: 270,336 threads
 * on an H100, so 16 KiB of stack is 4.1 GiB).  The increase over the
 * context's value before the first change (the defaults are part of the
 * measured context size) is charged before the driver is called, and refused
 * with CUDA_ERROR_OUT_OF_MEMORY past the cap; lowering it gives the
 * difference back.  If the card's free memory fell by more than that across
 * the call, the driver took more than estimated, and the rest is charged as
 * well.  Per CUDA ordinal (the primary context's case); rare, so a mutex. */
#include <pthread.h>
#include <string.h>

#include "hooks.h"

enum { LIM_STACK, LIM_FIFO, LIM_HEAP, LIM_KINDS };

static pthread_mutex_t limit_lock = PTHREAD_MUTEX_INITIALIZER;
static int based[GS_MAX_ORDINALS][LIM_KINDS];
static size_t base[GS_MAX_ORDINALS][LIM_KINDS];
static uint64_t charged[GS_MAX_ORDINALS][LIM_KINDS];

void gs_limit_reset_process(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    limit_lock = fresh;
    memset(based, 0, sizeof based);
    memset(base, 0, sizeof base);
    memset(charged, 0, sizeof charged);
}

static int kind_of(CUlimit l)
{
    switch (l) {
    case CU_LIMIT_STACK_SIZE: return LIM_STACK;
    case CU_LIMIT_PRINTF_FIFO_SIZE: return LIM_FIFO;
    case CU_LIMIT_MALLOC_HEAP_SIZE: return LIM_HEAP;
    default: return -1;
    }
}

/* Threads the device can hold at once; an H100's when the driver will not say. */
static uint64_t resident_threads(CUdevice dev)
{
    int sms = 0, per_sm = 0;
    if (GS_CALL(gs_real_cuDeviceGetAttribute, &sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) != CUDA_SUCCESS ||
        GS_CALL(gs_real_cuDeviceGetAttribute, &per_sm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev) !=
            CUDA_SUCCESS ||
        sms <= 0 || per_sm <= 0)
        return 132ull * 2048ull;
    return (uint64_t)sms * (uint64_t)per_sm;
}

static uint64_t reserve_for(int kind, CUdevice dev, size_t above)
{
    if (kind != LIM_STACK) return above;
    uint64_t t = resident_threads(dev);
    return above > UINT64_MAX / t ? UINT64_MAX : (uint64_t)above * t;
}

static uint64_t card_free(void)
{
    size_t f = 0, t = 0;
    return GS_CALL(gs_real_cuMemGetInfo_v2, &f, &t) == CUDA_SUCCESS ? f : 0;
}

/* The driver call, kept for a retry (pressure.c). */
struct limit_call {
    CUlimit limit;
    size_t value;
};

static CUresult limit_real(void *arg)
{
    struct limit_call *c = arg;
    return gs_real_cuCtxSetLimit(c->limit, c->value);
}

GS_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    ENTER(gs_real_cuCtxSetLimit);
    int kind = kind_of(limit);
    CUdevice dev;
    CUcontext ctx;
    if (!gs_counting() || kind < 0 || gs_current(&dev, &ctx) != CUDA_SUCCESS || dev < 0 || dev >= GS_MAX_ORDINALS)
        return gs_real_cuCtxSetLimit(limit, value);
    int idx = gs_dev_index(dev);
    pthread_mutex_lock(&limit_lock);
    if (!based[dev][kind]) {
        size_t cur = 0;
        if (GS_CALL(gs_real_cuCtxGetLimit, &cur, limit) == CUDA_SUCCESS) {
            base[dev][kind] = cur;
            based[dev][kind] = 1;
        }
    }
    uint64_t want = reserve_for(kind, dev, value > base[dev][kind] ? value - base[dev][kind] : 0);
    uint64_t have = charged[dev][kind], more = want > have ? want - have : 0;
    if (more > 0 && (want == UINT64_MAX || gs_charge(idx, more) != 0)) {
        pthread_mutex_unlock(&limit_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t before = card_free();
    struct limit_call c = {limit, value};
    CUresult r = limit_real(&c);
    if (r != CUDA_SUCCESS && more > 0) r = gs_pressure_retry(idx, r, limit_real, &c);
    if (r != CUDA_SUCCESS) {
        gs_uncharge(idx, more);
        pthread_mutex_unlock(&limit_lock);
        return r;
    }
    uint64_t after = card_free();
    if (want < have) gs_uncharge(idx, have - want);
    charged[dev][kind] = want;
    /* The driver took more than estimated: it holds it whatever the cap says. */
    if (before != 0 && after != 0 && before > after && before - after > more) {
        uint64_t extra = before - after - more;
        gs_charge_force(idx, extra);
        charged[dev][kind] += extra;
        GS_INFO("cuCtxSetLimit(%d, %zu) took %llu bytes more than estimated", (int)limit, value,
                (unsigned long long)extra);
    }
    pthread_mutex_unlock(&limit_lock);
    return r;
}
