/* hooks_ctx.c — contexts: created, destroyed, the primary context's
 * reference count. */
#include <pthread.h>
#include <string.h>

#include "hooks.h"

/* ---- contexts -------------------------------------------------------------
 * A context costs device memory before anything is allocated in it (about
 * half a GiB on an H100).  The agent measures it per GPU and writes it to
 * the region; GPUSHARDS_CONTEXT_BYTES is the fallback. */

/* What a destroyed context held goes with it. */
void gs_drop_owned(struct gs_entry *e, void *ctx)
{
    if (e->owner != (uint64_t)(uintptr_t)ctx || !(e->kind & (GS_T_MEM | GS_T_ARRAY | GS_T_MIPMAP))) return;
    struct gs_entry out;
    uint64_t key = __atomic_load_n(&e->key, __ATOMIC_ACQUIRE);
    if (gs_track_take(&gs_allocs, key, e->kind, &out)) gs_uncharge((int)out.dev, out.size);
}

/* One context creation's driver call, kept for a retry (pressure.c). */
enum ctx_api { CTX_LEGACY, CTX_V2, CTX_V3, CTX_V4 };
struct ctx_call {
    enum ctx_api api;
    CUcontext *pctx;
    unsigned int flags;
    CUdevice dev;
    void *params; /* CUexecAffinityParam * (v3), CUctxCreateParams * (v4) */
    int count;    /* v3's numParams */
};

static CUresult ctx_real(void *arg)
{
    struct ctx_call *c = arg;
    switch (c->api) {
    case CTX_LEGACY: return gs_real_cuCtxCreate(c->pctx, c->flags, c->dev);
    case CTX_V2: return gs_real_cuCtxCreate_v2(c->pctx, c->flags, c->dev);
    case CTX_V3: return gs_real_cuCtxCreate_v3(c->pctx, c->params, c->count, c->flags, c->dev);
    case CTX_V4: return gs_real_cuCtxCreate_v4(c->pctx, c->params, c->flags, c->dev);
    }
    return CUDA_ERROR_INVALID_VALUE;
}

static CUresult ctx_create(struct ctx_call *c)
{
    if (!gs_counting()) return ctx_real(c);
    int idx = gs_dev_index(c->dev);
    uint64_t bytes = idx >= 0 ? gs_context_bytes(idx) : 0;
    if (gs_charge(idx, bytes) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = ctx_real(c);
    if (r != CUDA_SUCCESS) {
        r = gs_pressure_retry(idx, r, ctx_real, c);
        if (r != CUDA_SUCCESS) {
            gs_uncharge(idx, bytes);
            return r;
        }
    }
    CUcontext *pctx = c->pctx;
    if (gs_remember((uint64_t)(uintptr_t)*pctx, GS_T_CTX, idx, bytes, 0) != 0) {
        CUresult f = GS_CALL(gs_real_cuCtxDestroy_v2, *pctx);
        if (f != CUDA_SUCCESS) GS_ERROR("cannot destroy a refused context (error %d)", (int)f);
        gs_uncharge(idx, bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return r;
}

GS_EXPORT CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    ENTER(gs_real_cuCtxCreate);
    struct ctx_call c = {CTX_LEGACY, pctx, flags, dev, NULL, 0};
    return ctx_create(&c);
}

GS_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    ENTER(gs_real_cuCtxCreate_v2);
    struct ctx_call c = {CTX_V2, pctx, flags, dev, NULL, 0};
    return ctx_create(&c);
}

GS_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int numParams, unsigned int flags,
                                  CUdevice dev)
{
    ENTER(gs_real_cuCtxCreate_v3);
    struct ctx_call c = {CTX_V3, pctx, flags, dev, params, numParams};
    return ctx_create(&c);
}

GS_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev)
{
    ENTER(gs_real_cuCtxCreate_v4);
    struct ctx_call c = {CTX_V4, pctx, flags, dev, params, 0};
    return ctx_create(&c);
}

static CUresult ctx_destroy(CUcontext ctx, CUresult (*fn)(CUcontext))
{
    struct gs_entry e;
    if (!gs_counting() || !gs_track_take(&gs_allocs, (uint64_t)(uintptr_t)ctx, GS_T_CTX, &e)) {
        CUresult r = fn(ctx);
        if (r == CUDA_SUCCESS) gs_compute_ctx_gone(ctx);
        return r;
    }
    CUresult r = fn(ctx);
    if (r != CUDA_SUCCESS) {
        if (gs_track_insert(&gs_allocs, &e) != 0) GS_WARN("lost track of a context");
        return r;
    }
    gs_track_each(&gs_allocs, gs_drop_owned, ctx);
    gs_uncharge((int)e.dev, e.size);
    gs_compute_ctx_gone(ctx);
    return r;
}

GS_EXPORT CUresult cuCtxDestroy(CUcontext ctx)
{
    ENTER(gs_real_cuCtxDestroy);
    return ctx_destroy(ctx, gs_real_cuCtxDestroy);
}

GS_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    ENTER(gs_real_cuCtxDestroy_v2);
    return ctx_destroy(ctx, gs_real_cuCtxDestroy_v2);
}

/* The primary context is reference counted by the driver; this process's
 * count mirrors it so the context is charged once, on the first retain, and
 * given back when the last release destroys it.  Retain and release are
 * rare (the runtime retains once per device), so a process-local mutex keeps
 * the count and the charge in step. */
static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;
static int primary_refs[GS_MAX_ORDINALS];
static uint64_t primary_charge[GS_MAX_ORDINALS];
static CUcontext primary_ctx[GS_MAX_ORDINALS];

struct primary_call {
    CUcontext *pctx;
    CUdevice dev;
};

static CUresult primary_real(void *arg)
{
    struct primary_call *c = arg;
    return gs_real_cuDevicePrimaryCtxRetain(c->pctx, c->dev);
}

GS_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    ENTER(gs_real_cuDevicePrimaryCtxRetain);
    if (!gs_counting() || dev < 0 || dev >= GS_MAX_ORDINALS) return gs_real_cuDevicePrimaryCtxRetain(pctx, dev);
    int idx = gs_dev_index(dev);
    pthread_mutex_lock(&primary_lock);
    uint64_t bytes = 0;
    if (primary_refs[dev] == 0) {
        bytes = idx >= 0 ? gs_context_bytes(idx) : 0;
        if (gs_charge(idx, bytes) != 0) {
            pthread_mutex_unlock(&primary_lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    struct primary_call c = {pctx, dev};
    CUresult r = primary_real(&c);
    if (r != CUDA_SUCCESS && bytes > 0) r = gs_pressure_retry(idx, r, primary_real, &c);
    if (r == CUDA_SUCCESS) {
        if (primary_refs[dev]++ == 0) primary_charge[dev] = bytes;
        primary_ctx[dev] = *pctx;
    } else if (primary_refs[dev] == 0) {
        gs_uncharge(idx, bytes);
    }
    pthread_mutex_unlock(&primary_lock);
    return r;
}

static CUresult primary_release(CUdevice dev, CUresult (*fn)(CUdevice), int reset)
{
    if (!gs_counting() || dev < 0 || dev >= GS_MAX_ORDINALS) return fn(dev);
    pthread_mutex_lock(&primary_lock);
    CUresult r = fn(dev);
    if (r == CUDA_SUCCESS && primary_ctx[dev] != NULL) {
        int gone = reset;
        if (!reset && primary_refs[dev] > 0 && --primary_refs[dev] == 0) {
            gs_uncharge(gs_dev_index(dev), primary_charge[dev]);
            primary_charge[dev] = 0;
            gone = 1;
        }
        /* Reset destroys the context's allocations but keeps it retained:
         * its charge stays until the last release. */
        if (gone) {
            gs_track_each(&gs_allocs, gs_drop_owned, primary_ctx[dev]);
            gs_compute_ctx_gone(primary_ctx[dev]);
        }
    }
    pthread_mutex_unlock(&primary_lock);
    return r;
}

GS_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    ENTER(gs_real_cuDevicePrimaryCtxRelease);
    return primary_release(dev, gs_real_cuDevicePrimaryCtxRelease, 0);
}

GS_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    ENTER(gs_real_cuDevicePrimaryCtxRelease_v2);
    return primary_release(dev, gs_real_cuDevicePrimaryCtxRelease_v2, 0);
}

GS_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    ENTER(gs_real_cuDevicePrimaryCtxReset);
    return primary_release(dev, gs_real_cuDevicePrimaryCtxReset, 1);
}

GS_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    ENTER(gs_real_cuDevicePrimaryCtxReset_v2);
    return primary_release(dev, gs_real_cuDevicePrimaryCtxReset_v2, 1);
}

void gs_ctx_reset_process(void)
{
    /* A fork child has no contexts: CUDA state does not survive fork. */
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    primary_lock = fresh;
    memset(primary_refs, 0, sizeof primary_refs);
    memset(primary_charge, 0, sizeof primary_charge);
    memset(primary_ctx, 0, sizeof primary_ctx);
}

