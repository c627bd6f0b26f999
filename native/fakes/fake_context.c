/* fake_context.c — contexts of the fake libcuda.so.1: created and primary
 * ones (reference counted, as the real driver's), each thread's stack of
 * current contexts, what a context costs on its card (fake_context_bytes),
 * and its limits, whose reservations cost memory as the real driver's do. */
#include <stdlib.h>

#include "fake_cuda.h"

enum { M_CTX = 0xc7c7c7c7 };

static struct fctx primary[FAKE_MAX_GPUS];
static __thread struct fctx *ctx_stack[16];
static __thread int ctx_depth;

struct fctx *fake_ctx_current(void)
{
    return ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL;
}

int fake_ctx_valid(const struct fctx *c)
{
    return c != NULL && c->magic == M_CTX && c->alive;
}

int fake_current_phys(void)
{
    struct fctx *c = fake_ctx_current();
    return fake_ctx_valid(c) ? c->phys : -1;
}

static CUresult ctx_new(struct fctx **out, CUdevice d)
{
    int phys = fake_phys_of(d);
    if (phys < 0) return CUDA_ERROR_INVALID_DEVICE;
    if (fake_phys_take(phys, fake_context_bytes) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    struct fctx *c = calloc(1, sizeof *c);
    if (c == NULL) {
        fake_phys_give(phys, fake_context_bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *c = (struct fctx){.magic = M_CTX, .ordinal = d, .phys = phys, .alive = 1};
    *out = c;
    return CUDA_SUCCESS;
}

static void push(struct fctx *c)
{
    if (ctx_depth < 16) ctx_stack[ctx_depth++] = c;
}

API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice d)
{
    NEED_INIT();
    if (pctx == NULL) return CUDA_ERROR_INVALID_VALUE;
    struct fctx *c;
    CUresult r = ctx_new(&c, d);
    if (r != CUDA_SUCCESS) return r;
    push(c);
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

API CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice d)
{
    return cuCtxCreate_v2(pctx, flags, d);
}

API CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *p, int n, unsigned int flags, CUdevice d)
{
    return cuCtxCreate_v2(pctx, flags, d);
}

API CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *p, unsigned int flags, CUdevice d)
{
    return cuCtxCreate_v2(pctx, flags, d);
}

API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    NEED_INIT();
    struct fctx *c = (struct fctx *)ctx;
    if (!fake_ctx_valid(c) || c->primary) return CUDA_ERROR_INVALID_CONTEXT;
    fake_lock();
    fake_mem_drop_ctx(c);
    fake_unlock();
    c->alive = 0;
    fake_phys_give(c->phys, fake_context_bytes);
    for (int i = 0; i < ctx_depth; i++)
        if (ctx_stack[i] == c) ctx_stack[i] = NULL;
    while (ctx_depth > 0 && ctx_stack[ctx_depth - 1] == NULL) ctx_depth--;
    return CUDA_SUCCESS;
}

API CUresult cuCtxDestroy(CUcontext ctx)
{
    return cuCtxDestroy_v2(ctx);
}

API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice d)
{
    NEED_INIT();
    if (pctx == NULL) return CUDA_ERROR_INVALID_VALUE;
    int phys = fake_phys_of(d);
    if (phys < 0) return CUDA_ERROR_INVALID_DEVICE;
    fake_lock();
    struct fctx *c = &primary[d];
    if (c->refs == 0) {
        if (fake_phys_take(phys, fake_context_bytes) != 0) {
            fake_unlock();
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        *c = (struct fctx){.magic = M_CTX, .ordinal = d, .phys = phys, .primary = 1, .alive = 1};
    }
    c->refs++;
    fake_unlock();
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
    NEED_INIT();
    if (fake_phys_of(d) < 0) return CUDA_ERROR_INVALID_DEVICE;
    fake_lock();
    struct fctx *c = &primary[d];
    if (c->refs == 0) {
        fake_unlock();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (--c->refs == 0) {
        fake_mem_drop_ctx(c);
        c->alive = 0;
        fake_phys_give(c->phys, fake_context_bytes);
    }
    fake_unlock();
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRelease(CUdevice d)
{
    return cuDevicePrimaryCtxRelease_v2(d);
}

API CUresult cuDevicePrimaryCtxReset_v2(CUdevice d)
{
    NEED_INIT();
    if (fake_phys_of(d) < 0) return CUDA_ERROR_INVALID_DEVICE;
    fake_lock();
    if (primary[d].refs > 0) fake_mem_drop_ctx(&primary[d]);
    fake_unlock();
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxReset(CUdevice d)
{
    return cuDevicePrimaryCtxReset_v2(d);
}

API CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int *flags, int *active)
{
    NEED_INIT();
    if (flags == NULL || active == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (fake_phys_of(d) < 0) return CUDA_ERROR_INVALID_DEVICE;
    *flags = 0;
    *active = primary[d].refs > 0;
    return CUDA_SUCCESS;
}

API CUresult cuCtxSetCurrent(CUcontext ctx)
{
    NEED_INIT();
    if (ctx == NULL) {
        if (ctx_depth > 0) ctx_depth--;
        return CUDA_SUCCESS;
    }
    if (!fake_ctx_valid((struct fctx *)ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth == 0) ctx_depth = 1;
    ctx_stack[ctx_depth - 1] = (struct fctx *)ctx;
    return CUDA_SUCCESS;
}

API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    NEED_INIT();
    if (pctx == NULL) return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)fake_ctx_current();
    return CUDA_SUCCESS;
}

API CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    NEED_INIT();
    if (!fake_ctx_valid((struct fctx *)ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    push((struct fctx *)ctx);
    return CUDA_SUCCESS;
}

API CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    NEED_INIT();
    if (pctx == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (ctx_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
    struct fctx *c = ctx_stack[--ctx_depth];
    if (pctx) *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

API CUresult cuCtxGetDevice(CUdevice *d)
{
    NEED_INIT();
    if (d == NULL) return CUDA_ERROR_INVALID_VALUE;
    NEED_CTX(c);
    *d = c->ordinal;
    return CUDA_SUCCESS;
}

API CUresult cuCtxSynchronize(void)
{
    NEED_INIT();
    NEED_CTX(c);
    fake_pools_synchronize();
    return CUDA_SUCCESS;
}

/* ---- context limits --------------------------------------------------------
 * What the driver reserves for them, per context: the malloc heap and the
 * printf FIFO their size, the stack its size for every thread the device
 * can hold at once (132 SMs x 2048 threads on an H100: 1 KiB -> 264 MiB,
 * 16 KiB -> 4.1 GiB).  Defaults as the real driver's. */
#define FAKE_THREADS (132ull * 2048ull)
static const size_t limit_default[3] = {1024, 1u << 20, 8u << 20}; /* stack, printf FIFO, malloc heap */

static int limit_index(CUlimit l)
{
    return l == CU_LIMIT_STACK_SIZE ? 0 : l == CU_LIMIT_PRINTF_FIFO_SIZE ? 1 : l == CU_LIMIT_MALLOC_HEAP_SIZE ? 2 : -1;
}

static uint64_t limit_reserve(int k, size_t v)
{
    return k == 0 ? (uint64_t)v * FAKE_THREADS : (uint64_t)v;
}

API CUresult cuCtxGetLimit(size_t *value, CUlimit limit)
{
    NEED_INIT();
    NEED_CTX(c);
    int k = limit_index(limit);
    if (k < 0 || value == NULL) return CUDA_ERROR_INVALID_VALUE;
    *value = c->limits[k] ? c->limits[k] : limit_default[k];
    return CUDA_SUCCESS;
}

API CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    NEED_INIT();
    NEED_CTX(c);
    int k = limit_index(limit);
    if (k < 0) return CUDA_ERROR_INVALID_VALUE;
    size_t old = c->limits[k] ? c->limits[k] : limit_default[k];
    uint64_t was = limit_reserve(k, old), now = limit_reserve(k, value);
    if (now > was && fake_phys_take(c->phys, now - was) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    if (now < was) fake_phys_give(c->phys, was - now);
    c->limits[k] = value;
    return CUDA_SUCCESS;
}
