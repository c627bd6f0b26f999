/* hooks_wake.c — driver calls hooked only for the wake gate (wake.c): the
 * ones a process of a suspended shard makes when it wants its GPU back and
 * that no other hook sees: copies and sets (sync and async, the _v2 ABI,
 * and the per-thread default stream's _ptds/_ptsz twins the CUDA runtime
 * asks cuGetProcAddress for), synchronisations and queries, stream waits,
 * host functions and module loads.  Each hook is ENTER and the real call;
 * launches, allocations, graph launches, cuCtxSynchronize and
 * cuStreamSynchronize pass the gate in their own hooks.  Any other driver
 * call of a suspended process simply waits inside the driver until the
 * shard is resumed. */
#include "hooks.h"

/* The per-thread default stream's twins: cuda.h declares them only under
 * CUDA_API_PER_THREAD_DEFAULT_STREAM, by these names and signatures. */
#define GS_WAKE_PTDS(X)                                                                                  \
    X(cuMemcpy_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))                          \
    X(cuMemcpyPeer_ptds, (CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n),     \
      (dst, dctx, src, sctx, n))                                                                         \
    X(cuMemcpyHtoD_v2_ptds, (CUdeviceptr dst, const void *src, size_t n), (dst, src, n))                  \
    X(cuMemcpyDtoH_v2_ptds, (void *dst, CUdeviceptr src, size_t n), (dst, src, n))                        \
    X(cuMemcpyDtoD_v2_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))                  \
    X(cuMemcpyDtoA_v2_ptds, (CUarray dst, size_t off, CUdeviceptr src, size_t n), (dst, off, src, n))     \
    X(cuMemcpyAtoD_v2_ptds, (CUdeviceptr dst, CUarray src, size_t off, size_t n), (dst, src, off, n))     \
    X(cuMemcpyHtoA_v2_ptds, (CUarray dst, size_t off, const void *src, size_t n), (dst, off, src, n))     \
    X(cuMemcpyAtoH_v2_ptds, (void *dst, CUarray src, size_t off, size_t n), (dst, src, off, n))           \
    X(cuMemcpyAtoA_v2_ptds, (CUarray dst, size_t doff, CUarray src, size_t soff, size_t n),               \
      (dst, doff, src, soff, n))                                                                         \
    X(cuMemcpy2D_v2_ptds, (const CUDA_MEMCPY2D *p), (p))                                                   \
    X(cuMemcpy2DUnaligned_v2_ptds, (const CUDA_MEMCPY2D *p), (p))                                          \
    X(cuMemcpy3D_v2_ptds, (const CUDA_MEMCPY3D *p), (p))                                                   \
    X(cuMemcpy3DPeer_ptds, (const CUDA_MEMCPY3D_PEER *p), (p))                                             \
    X(cuMemcpyAsync_ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))     \
    X(cuMemcpyPeerAsync_ptsz,                                                                            \
      (CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n, CUstream s),          \
      (dst, dctx, src, sctx, n, s))                                                                      \
    X(cuMemcpyHtoDAsync_v2_ptsz, (CUdeviceptr dst, const void *src, size_t n, CUstream s), (dst, src, n, s)) \
    X(cuMemcpyDtoHAsync_v2_ptsz, (void *dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))   \
    X(cuMemcpyDtoDAsync_v2_ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s)) \
    X(cuMemcpyHtoAAsync_v2_ptsz, (CUarray dst, size_t off, const void *src, size_t n, CUstream s),        \
      (dst, off, src, n, s))                                                                             \
    X(cuMemcpyAtoHAsync_v2_ptsz, (void *dst, CUarray src, size_t off, size_t n, CUstream s),              \
      (dst, src, off, n, s))                                                                             \
    X(cuMemcpy2DAsync_v2_ptsz, (const CUDA_MEMCPY2D *p, CUstream s), (p, s))                               \
    X(cuMemcpy3DAsync_v2_ptsz, (const CUDA_MEMCPY3D *p, CUstream s), (p, s))                               \
    X(cuMemcpy3DPeerAsync_ptsz, (const CUDA_MEMCPY3D_PEER *p, CUstream s), (p, s))                         \
    X(cuMemcpyBatchAsync_v2_ptsz,                                                                        \
      (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes *attrs,    \
       size_t *attrsIdxs, size_t numAttrs, CUstream s),                                                  \
      (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, s))                                         \
    X(cuMemcpy3DBatchAsync_v2_ptsz, (size_t numOps, CUDA_MEMCPY3D_BATCH_OP *ops, unsigned long long flags, \
                                     CUstream s),                                                        \
      (numOps, ops, flags, s))                                                                           \
    X(cuMemsetD8_v2_ptds, (CUdeviceptr d, unsigned char v, size_t n), (d, v, n))                          \
    X(cuMemsetD16_v2_ptds, (CUdeviceptr d, unsigned short v, size_t n), (d, v, n))                        \
    X(cuMemsetD32_v2_ptds, (CUdeviceptr d, unsigned int v, size_t n), (d, v, n))                          \
    X(cuMemsetD2D8_v2_ptds, (CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h),           \
      (d, pitch, v, w, h))                                                                               \
    X(cuMemsetD2D16_v2_ptds, (CUdeviceptr d, size_t pitch, unsigned short v, size_t w, size_t h),         \
      (d, pitch, v, w, h))                                                                               \
    X(cuMemsetD2D32_v2_ptds, (CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h),           \
      (d, pitch, v, w, h))                                                                               \
    X(cuMemsetD8Async_ptsz, (CUdeviceptr d, unsigned char v, size_t n, CUstream s), (d, v, n, s))         \
    X(cuMemsetD16Async_ptsz, (CUdeviceptr d, unsigned short v, size_t n, CUstream s), (d, v, n, s))       \
    X(cuMemsetD32Async_ptsz, (CUdeviceptr d, unsigned int v, size_t n, CUstream s), (d, v, n, s))         \
    X(cuMemsetD2D8Async_ptsz, (CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h, CUstream s), \
      (d, pitch, v, w, h, s))                                                                            \
    X(cuMemsetD2D16Async_ptsz,                                                                           \
      (CUdeviceptr d, size_t pitch, unsigned short v, size_t w, size_t h, CUstream s), (d, pitch, v, w, h, s)) \
    X(cuMemsetD2D32Async_ptsz,                                                                           \
      (CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h, CUstream s), (d, pitch, v, w, h, s)) \
    X(cuStreamQuery_ptsz, (CUstream s), (s))                                                               \
    X(cuStreamWaitEvent_ptsz, (CUstream s, CUevent e, unsigned int flags), (s, e, flags))                 \
    X(cuLaunchHostFunc_ptsz, (CUstream s, CUhostFn fn, void *data), (s, fn, data))

/* Declared in cuda_subset.h (each definition below must match it). */
#define GS_WAKE_DEFAULT(X)                                                                               \
    X(cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))                               \
    X(cuMemcpyPeer, (CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n),          \
      (dst, dctx, src, sctx, n))                                                                         \
    X(cuMemcpyHtoD_v2, (CUdeviceptr dst, const void *src, size_t n), (dst, src, n))                       \
    X(cuMemcpyDtoH_v2, (void *dst, CUdeviceptr src, size_t n), (dst, src, n))                             \
    X(cuMemcpyDtoD_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))                       \
    X(cuMemcpyDtoA_v2, (CUarray dst, size_t off, CUdeviceptr src, size_t n), (dst, off, src, n))          \
    X(cuMemcpyAtoD_v2, (CUdeviceptr dst, CUarray src, size_t off, size_t n), (dst, src, off, n))          \
    X(cuMemcpyHtoA_v2, (CUarray dst, size_t off, const void *src, size_t n), (dst, off, src, n))          \
    X(cuMemcpyAtoH_v2, (void *dst, CUarray src, size_t off, size_t n), (dst, src, off, n))                \
    X(cuMemcpyAtoA_v2, (CUarray dst, size_t doff, CUarray src, size_t soff, size_t n), (dst, doff, src, soff, n)) \
    X(cuMemcpy2D_v2, (const CUDA_MEMCPY2D *p), (p))                                                        \
    X(cuMemcpy2DUnaligned_v2, (const CUDA_MEMCPY2D *p), (p))                                               \
    X(cuMemcpy3D_v2, (const CUDA_MEMCPY3D *p), (p))                                                        \
    X(cuMemcpy3DPeer, (const CUDA_MEMCPY3D_PEER *p), (p))                                                  \
    X(cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))          \
    X(cuMemcpyPeerAsync, (CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n, CUstream s), \
      (dst, dctx, src, sctx, n, s))                                                                      \
    X(cuMemcpyHtoDAsync_v2, (CUdeviceptr dst, const void *src, size_t n, CUstream s), (dst, src, n, s))  \
    X(cuMemcpyDtoHAsync_v2, (void *dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))        \
    X(cuMemcpyDtoDAsync_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))  \
    X(cuMemcpyHtoAAsync_v2, (CUarray dst, size_t off, const void *src, size_t n, CUstream s), (dst, off, src, n, s)) \
    X(cuMemcpyAtoHAsync_v2, (void *dst, CUarray src, size_t off, size_t n, CUstream s), (dst, src, off, n, s)) \
    X(cuMemcpy2DAsync_v2, (const CUDA_MEMCPY2D *p, CUstream s), (p, s))                                    \
    X(cuMemcpy3DAsync_v2, (const CUDA_MEMCPY3D *p, CUstream s), (p, s))                                    \
    X(cuMemcpy3DPeerAsync, (const CUDA_MEMCPY3D_PEER *p, CUstream s), (p, s))                              \
    X(cuMemcpyBatchAsync_v2,                                                                             \
      (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes *attrs,    \
       size_t *attrsIdxs, size_t numAttrs, CUstream s),                                                  \
      (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, s))                                         \
    X(cuMemcpy3DBatchAsync_v2, (size_t numOps, CUDA_MEMCPY3D_BATCH_OP *ops, unsigned long long flags, CUstream s), \
      (numOps, ops, flags, s))                                                                           \
    X(cuMemsetD8_v2, (CUdeviceptr d, unsigned char v, size_t n), (d, v, n))                               \
    X(cuMemsetD16_v2, (CUdeviceptr d, unsigned short v, size_t n), (d, v, n))                             \
    X(cuMemsetD32_v2, (CUdeviceptr d, unsigned int v, size_t n), (d, v, n))                               \
    X(cuMemsetD2D8_v2, (CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h), (d, pitch, v, w, h)) \
    X(cuMemsetD2D16_v2, (CUdeviceptr d, size_t pitch, unsigned short v, size_t w, size_t h), (d, pitch, v, w, h)) \
    X(cuMemsetD2D32_v2, (CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h), (d, pitch, v, w, h)) \
    X(cuMemsetD8Async, (CUdeviceptr d, unsigned char v, size_t n, CUstream s), (d, v, n, s))              \
    X(cuMemsetD16Async, (CUdeviceptr d, unsigned short v, size_t n, CUstream s), (d, v, n, s))            \
    X(cuMemsetD32Async, (CUdeviceptr d, unsigned int v, size_t n, CUstream s), (d, v, n, s))              \
    X(cuMemsetD2D8Async, (CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h, CUstream s),  \
      (d, pitch, v, w, h, s))                                                                            \
    X(cuMemsetD2D16Async, (CUdeviceptr d, size_t pitch, unsigned short v, size_t w, size_t h, CUstream s), \
      (d, pitch, v, w, h, s))                                                                            \
    X(cuMemsetD2D32Async, (CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h, CUstream s),  \
      (d, pitch, v, w, h, s))                                                                            \
    X(cuEventSynchronize, (CUevent e), (e))                                                                \
    X(cuEventQuery, (CUevent e), (e))                                                                      \
    X(cuStreamQuery, (CUstream s), (s))                                                                    \
    X(cuStreamWaitEvent, (CUstream s, CUevent e, unsigned int flags), (s, e, flags))                      \
    X(cuLaunchHostFunc, (CUstream s, CUhostFn fn, void *data), (s, fn, data))                             \
    X(cuModuleLoad, (CUmodule *m, const char *fname), (m, fname))                                          \
    X(cuModuleLoadData, (CUmodule *m, const void *image), (m, image))                                      \
    X(cuModuleLoadDataEx, (CUmodule *m, const void *image, unsigned int n, CUjit_option *o, void **v),    \
      (m, image, n, o, v))                                                                               \
    X(cuModuleLoadFatBinary, (CUmodule *m, const void *fatCubin), (m, fatCubin))                           \
    X(cuLibraryLoadData,                                                                                 \
      (CUlibrary *l, const void *code, CUjit_option *jo, void **jv, unsigned int nj, CUlibraryOption *lo, \
       void **lv, unsigned int nl),                                                                      \
      (l, code, jo, jv, nj, lo, lv, nl))                                                                 \
    X(cuLibraryLoadFromFile,                                                                             \
      (CUlibrary *l, const char *file, CUjit_option *jo, void **jv, unsigned int nj, CUlibraryOption *lo, \
       void **lv, unsigned int nl),                                                                      \
      (l, file, jo, jv, nj, lo, lv, nl))

#define GS_WAKE_HOOKS(X) GS_WAKE_DEFAULT(X) GS_WAKE_PTDS(X)

#define REAL(name, params, args) static CUresult(*real_##name) params;
GS_WAKE_HOOKS(REAL)
#undef REAL

#define GATE_ONLY(name, params, args)                                                                    \
    GS_EXPORT CUresult name params;                                                                      \
    GS_EXPORT CUresult name params                                                                       \
    {                                                                                                    \
        ENTER(real_##name);                                                                              \
        return real_##name args;                                                                         \
    }
GS_WAKE_HOOKS(GATE_ONLY)
#undef GATE_ONLY

#define ENTRY(name, params, args) {#name, (void *)name, (void **)&real_##name},
const struct gs_hook gs_wake_hooks[] = {GS_WAKE_HOOKS(ENTRY)};
#undef ENTRY
const size_t gs_wake_hook_count = sizeof gs_wake_hooks / sizeof gs_wake_hooks[0];
