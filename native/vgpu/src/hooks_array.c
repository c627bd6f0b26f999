/* hooks_array.c — CUDA arrays and mipmapped arrays, charged at a size
 * estimated from their descriptors. */
#include "hooks.h"

/* ---- arrays --------------------------------------------------------------
 * The driver gives no size for an array (cuArrayGetMemoryRequirements only
 * answers for deferred-mapping arrays), so it is estimated from the
 * descriptor: texels x bytes per texel, block-compressed formats by 4x4
 * blocks, YUV formats by their plane layout.  A 1024x1024 float array took
 * exactly 4 MiB on an H100, as estimated. */
static uint64_t array_bytes(uint64_t w, uint64_t h, uint64_t d, CUarray_format f, unsigned channels, unsigned flags)
{
    if (flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING)) return 0; /* backed later by cuMemMap* */
    w = w ? w : 1;
    h = h ? h : 1;
    d = d ? d : 1;
    uint64_t num, den = 1;
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: num = channels; break;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF: num = 2ull * channels; break;
    case CU_AD_FORMAT_UNSIGNED_INT32: case CU_AD_FORMAT_SIGNED_INT32: case CU_AD_FORMAT_FLOAT: num = 4ull * channels; break;
    case CU_AD_FORMAT_UNORM_INT8X1: case CU_AD_FORMAT_SNORM_INT8X1: num = 1; break;
    case CU_AD_FORMAT_UNORM_INT8X2: case CU_AD_FORMAT_SNORM_INT8X2: case CU_AD_FORMAT_UNORM_INT16X1:
    case CU_AD_FORMAT_SNORM_INT16X1: case CU_AD_FORMAT_YUY2: num = 2; break;
    case CU_AD_FORMAT_UNORM_INT8X4: case CU_AD_FORMAT_SNORM_INT8X4: case CU_AD_FORMAT_UNORM_INT16X2:
    case CU_AD_FORMAT_SNORM_INT16X2: case CU_AD_FORMAT_Y210: case CU_AD_FORMAT_Y216: case CU_AD_FORMAT_AYUV:
    case CU_AD_FORMAT_Y410: case CU_AD_FORMAT_UNORM_INT_101010_2: num = 4; break;
    case CU_AD_FORMAT_UNORM_INT16X4: case CU_AD_FORMAT_SNORM_INT16X4: case CU_AD_FORMAT_Y416: num = 8; break;
    case CU_AD_FORMAT_Y444_PLANAR8: case CU_AD_FORMAT_YUV444_8bit_SemiPlanar: num = 3; break;
    case CU_AD_FORMAT_Y444_PLANAR10: case CU_AD_FORMAT_YUV444_16bit_SemiPlanar: num = 6; break;
    case CU_AD_FORMAT_NV12: num = 3; den = 2; break;
    case CU_AD_FORMAT_P010: case CU_AD_FORMAT_P016: num = 3; break;
    case CU_AD_FORMAT_NV16: num = 2; break;
    case CU_AD_FORMAT_P210: case CU_AD_FORMAT_P216: num = 4; break;
    case CU_AD_FORMAT_BC1_UNORM: case CU_AD_FORMAT_BC1_UNORM_SRGB: case CU_AD_FORMAT_BC4_UNORM:
    case CU_AD_FORMAT_BC4_SNORM:
        w = (w + 3) / 4 * 4;
        h = (h + 3) / 4 * 4;
        num = 1;
        den = 2;
        break;
    case CU_AD_FORMAT_BC2_UNORM: case CU_AD_FORMAT_BC2_UNORM_SRGB: case CU_AD_FORMAT_BC3_UNORM:
    case CU_AD_FORMAT_BC3_UNORM_SRGB: case CU_AD_FORMAT_BC5_UNORM: case CU_AD_FORMAT_BC5_SNORM:
    case CU_AD_FORMAT_BC6H_UF16: case CU_AD_FORMAT_BC6H_SF16: case CU_AD_FORMAT_BC7_UNORM:
    case CU_AD_FORMAT_BC7_UNORM_SRGB:
        w = (w + 3) / 4 * 4;
        h = (h + 3) / 4 * 4;
        num = 1;
        break;
    default: num = 16; break; /* unknown format: assume the widest texel */
    }
    if (w > UINT32_MAX || h > UINT32_MAX || d > UINT32_MAX) return UINT64_MAX;
    return w * h * d * num / den;
}

static uint64_t mipmap_bytes(const CUDA_ARRAY3D_DESCRIPTOR *a, unsigned levels)
{
    uint64_t total = 0;
    int layered = (a->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) != 0;
    for (unsigned l = 0; l < (levels ? levels : 1) && l < 64; l++) {
        uint64_t w = a->Width >> l, h = a->Height >> l, d = layered ? a->Depth : a->Depth >> l;
        uint64_t b = array_bytes(w ? w : 1, a->Height ? (h ? h : 1) : 0, a->Depth ? (d ? d : 1) : 0, a->Format,
                                 a->NumChannels, a->Flags);
        if (b == UINT64_MAX || total + b < total) return UINT64_MAX;
        total += b;
    }
    return total;
}

int gs_charge_current(uint64_t bytes, int *idx, CUcontext *ctx)
{
    CUdevice dev;
    if (gs_current(&dev, ctx) != CUDA_SUCCESS) {
        *idx = -1;
        return 1; /* no context: let the driver report it */
    }
    *idx = gs_dev_index(dev);
    return gs_charge(*idx, bytes) == 0 ? 1 : 0;
}

/* One array's driver call, kept for a retry (pressure.c). */
enum array_api { ARRAY_V2, ARRAY3D_V2, ARRAY_LEGACY, ARRAY3D_LEGACY, MIPMAPPED };
struct array_call {
    enum array_api api;
    void *handle; /* CUarray * or CUmipmappedArray * */
    const void *desc;
    unsigned int levels;
};

static CUresult array_real(void *arg)
{
    struct array_call *c = arg;
    switch (c->api) {
    case ARRAY_V2: return gs_real_cuArrayCreate_v2(c->handle, c->desc);
    case ARRAY3D_V2: return gs_real_cuArray3DCreate_v2(c->handle, c->desc);
    case ARRAY_LEGACY: return gs_real_cuArrayCreate(c->handle, c->desc);
    case ARRAY3D_LEGACY: return gs_real_cuArray3DCreate(c->handle, c->desc);
    case MIPMAPPED: return gs_real_cuMipmappedArrayCreate(c->handle, c->desc, c->levels);
    }
    return CUDA_ERROR_INVALID_VALUE;
}

/* The driver's answer to a charged array (idx < 0: nothing was charged),
 * retried while it refuses inside the budget, then remembered or rolled back. */
static CUresult array_done(struct array_call *c, uint32_t kind, int idx, uint64_t bytes, CUcontext ctx)
{
    CUresult r = array_real(c);
    if (idx < 0) return r;
    if (r != CUDA_SUCCESS) {
        r = gs_pressure_retry(idx, r, array_real, c);
        if (r != CUDA_SUCCESS) {
            gs_uncharge(idx, bytes);
            return r;
        }
    }
    CUarray *h = c->handle;
    if (gs_remember((uint64_t)(uintptr_t)*h, kind, idx, bytes, (uint64_t)(uintptr_t)ctx) != 0) {
        CUresult f = kind == GS_T_MIPMAP ? GS_CALL(gs_real_cuMipmappedArrayDestroy, (CUmipmappedArray)(void *)*h)
                                         : GS_CALL(gs_real_cuArrayDestroy, *h);
        if (f != CUDA_SUCCESS) GS_ERROR("cannot destroy a refused array (error %d)", (int)f);
        gs_uncharge(idx, bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return r;
}

GS_EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *d)
{
    ENTER(gs_real_cuArrayCreate_v2);
    if (!gs_counting() || d == NULL) return gs_real_cuArrayCreate_v2(pHandle, d);
    uint64_t bytes = array_bytes(d->Width, d->Height, 0, d->Format, d->NumChannels, 0);
    int idx;
    CUcontext ctx;
    if (!gs_charge_current(bytes, &idx, &ctx)) return CUDA_ERROR_OUT_OF_MEMORY;
    struct array_call c = {ARRAY_V2, pHandle, d, 0};
    return array_done(&c, GS_T_ARRAY, idx, bytes, ctx);
}

GS_EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    ENTER(gs_real_cuArray3DCreate_v2);
    if (!gs_counting() || d == NULL) return gs_real_cuArray3DCreate_v2(pHandle, d);
    uint64_t bytes = array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels, d->Flags);
    int idx;
    CUcontext ctx;
    if (!gs_charge_current(bytes, &idx, &ctx)) return CUDA_ERROR_OUT_OF_MEMORY;
    struct array_call c = {ARRAY3D_V2, pHandle, d, 0};
    return array_done(&c, GS_T_ARRAY, idx, bytes, ctx);
}

GS_EXPORT CUresult cuArrayCreate(CUarray *pHandle, const ArrayDesc32 *d)
{
    ENTER(gs_real_cuArrayCreate);
    if (!gs_counting() || d == NULL) return gs_real_cuArrayCreate(pHandle, d);
    uint64_t bytes = array_bytes(d->Width, d->Height, 0, d->Format, d->NumChannels, 0);
    int idx;
    CUcontext ctx;
    if (!gs_charge_current(bytes, &idx, &ctx)) return CUDA_ERROR_OUT_OF_MEMORY;
    struct array_call c = {ARRAY_LEGACY, pHandle, d, 0};
    return array_done(&c, GS_T_ARRAY, idx, bytes, ctx);
}

GS_EXPORT CUresult cuArray3DCreate(CUarray *pHandle, const Array3DDesc32 *d)
{
    ENTER(gs_real_cuArray3DCreate);
    if (!gs_counting() || d == NULL) return gs_real_cuArray3DCreate(pHandle, d);
    uint64_t bytes = array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels, d->Flags);
    int idx;
    CUcontext ctx;
    if (!gs_charge_current(bytes, &idx, &ctx)) return CUDA_ERROR_OUT_OF_MEMORY;
    struct array_call c = {ARRAY3D_LEGACY, pHandle, d, 0};
    return array_done(&c, GS_T_ARRAY, idx, bytes, ctx);
}

GS_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                          unsigned int numLevels)
{
    ENTER(gs_real_cuMipmappedArrayCreate);
    if (!gs_counting() || d == NULL) return gs_real_cuMipmappedArrayCreate(pHandle, d, numLevels);
    uint64_t bytes = mipmap_bytes(d, numLevels);
    int idx;
    CUcontext ctx;
    if (!gs_charge_current(bytes, &idx, &ctx)) return CUDA_ERROR_OUT_OF_MEMORY;
    struct array_call c = {MIPMAPPED, pHandle, d, numLevels};
    return array_done(&c, GS_T_MIPMAP, idx, bytes, ctx);
}

static CUresult destroy_tracked(uint64_t key, uint32_t kind, CUresult (*fn)(void *), void *h)
{
    struct gs_entry e;
    if (!gs_track_take(&gs_allocs, key, kind, &e)) return fn(h);
    CUresult r = fn(h);
    if (r == CUDA_SUCCESS) gs_uncharge((int)e.dev, e.size);
    else if (gs_track_insert(&gs_allocs, &e) != 0) GS_WARN("lost track of an array");
    return r;
}

GS_EXPORT CUresult cuArrayDestroy(CUarray hArray)
{
    ENTER(gs_real_cuArrayDestroy);
    return destroy_tracked((uint64_t)(uintptr_t)hArray, GS_T_ARRAY, (CUresult(*)(void *))gs_real_cuArrayDestroy, hArray);
}

GS_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray h)
{
    ENTER(gs_real_cuMipmappedArrayDestroy);
    return destroy_tracked((uint64_t)(uintptr_t)h, GS_T_MIPMAP, (CUresult(*)(void *))gs_real_cuMipmappedArrayDestroy, h);
}

