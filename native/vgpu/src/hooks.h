/* hooks.h — what the files of CUDA hooks share (not exported): the real
 * driver's entry points, the legacy 32-bit types, and the few helpers every
 * hook uses.  One file per concern:
 *   hooks_table.c   the real function pointers and the name -> hook table
 *   hooks_common.c  cuInit, the current device, remembering allocations
 *   hooks_linear.c  cuMemAlloc, pitch, managed, free (and the legacy ABI)
 *   hooks_async.c   stream-ordered allocations and pool calls (pools.c counts)
 *   hooks_vmm.c     cuMemCreate / Map / Unmap / Release
 *   hooks_array.c   arrays and mipmapped arrays
 *   hooks_ctx.c     contexts and the primary context
 *   hooks_limit.c   cuCtxSetLimit (stack, printf FIFO, malloc heap)
 *   hooks_graph.c   graph memory (instantiate, upload, launch, trim, destroy)
 *   hooks_info.c    what the process is told (cuMemGetInfo, cuDeviceTotalMem)
 *   hooks_wake.c    calls hooked only for the wake gate (copies, sets, syncs, module loads)
 *   hooks_ipc.c     CUDA IPC imports (cuIpcOpenMemHandle / cuIpcCloseMemHandle), and the
 *                   count of imports that names this process in the region
 *   hooks_vmm_import.c  VMM imports (cuMemImportFromShareableHandle), held until released and unmapped
 *   capture.c       stream capture begun and ended (what may be called meanwhile) */
#ifndef GPUSHARDS_HOOKS_H
#define GPUSHARDS_HOOKS_H

#include "vgpu.h"

/* cuda_subset.h, as cuda.h, renames these to their newest versions; the legacy symbols are
 * separate functions with their own signatures. */
#undef cuMemAlloc
#undef cuMemAllocPitch
#undef cuMemFree
#undef cuMemGetInfo
#undef cuDeviceTotalMem
#undef cuArrayCreate
#undef cuArray3DCreate
#undef cuCtxCreate
#undef cuCtxDestroy
#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxReset
#undef cuGraphInstantiate
#undef cuModuleLoad
#undef cuStreamBeginCapture
#undef cuStreamEndCapture
#undef cuStreamBeginCaptureToGraph
#undef cuGraphLaunch
#undef cuGraphUpload
#undef cuGraphInstantiateWithParams
#undef cuIpcOpenMemHandle

typedef unsigned int CUdeviceptr32; /* CUdeviceptr_v1 */
typedef struct {
    unsigned int Width, Height;
    CUarray_format Format;
    unsigned int NumChannels;
} ArrayDesc32;
typedef struct {
    unsigned int Width, Height, Depth;
    CUarray_format Format;
    unsigned int NumChannels, Flags;
} Array3DDesc32;

/* Every real driver function we call, hooked or not: gs_real_<name>, NULL
 * when the driver lacks it (every call through one is checked: GS_CALL). */
#define GS_CUDA_REAL(X)                                                                                  \
    X(CUresult, cuInit, (unsigned int))                                                                  \
    X(CUresult, cuMemAlloc, (CUdeviceptr32 *, unsigned int))                                             \
    X(CUresult, cuMemAlloc_v2, (CUdeviceptr *, size_t))                                                  \
    X(CUresult, cuMemAllocPitch, (CUdeviceptr32 *, unsigned int *, unsigned int, unsigned int, unsigned int)) \
    X(CUresult, cuMemAllocPitch_v2, (CUdeviceptr *, size_t *, size_t, size_t, unsigned int))             \
    X(CUresult, cuMemAllocManaged, (CUdeviceptr *, size_t, unsigned int))                                \
    X(CUresult, cuMemFree, (CUdeviceptr32))                                                              \
    X(CUresult, cuMemFree_v2, (CUdeviceptr))                                                             \
    X(CUresult, cuMemAllocAsync, (CUdeviceptr *, size_t, CUstream))                                      \
    X(CUresult, cuMemAllocAsync_ptsz, (CUdeviceptr *, size_t, CUstream))                                 \
    X(CUresult, cuMemAllocFromPoolAsync, (CUdeviceptr *, size_t, CUmemoryPool, CUstream))                \
    X(CUresult, cuMemAllocFromPoolAsync_ptsz, (CUdeviceptr *, size_t, CUmemoryPool, CUstream))           \
    X(CUresult, cuMemFreeAsync, (CUdeviceptr, CUstream))                                                 \
    X(CUresult, cuMemFreeAsync_ptsz, (CUdeviceptr, CUstream))                                            \
    X(CUresult, cuMemPoolCreate, (CUmemoryPool *, const CUmemPoolProps *))                               \
    X(CUresult, cuMemPoolDestroy, (CUmemoryPool))                                                        \
    X(CUresult, cuMemPoolTrimTo, (CUmemoryPool, size_t))                                                 \
    X(CUresult, cuMemCreate, (CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long)) \
    X(CUresult, cuMemRelease, (CUmemGenericAllocationHandle))                                            \
    X(CUresult, cuMemRetainAllocationHandle, (CUmemGenericAllocationHandle *, void *))                   \
    X(CUresult, cuMemMap, (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long)) \
    X(CUresult, cuMemUnmap, (CUdeviceptr, size_t))                                                       \
    X(CUresult, cuArrayCreate, (CUarray *, const ArrayDesc32 *))                                         \
    X(CUresult, cuArrayCreate_v2, (CUarray *, const CUDA_ARRAY_DESCRIPTOR *))                            \
    X(CUresult, cuArray3DCreate, (CUarray *, const Array3DDesc32 *))                                     \
    X(CUresult, cuArray3DCreate_v2, (CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *))                        \
    X(CUresult, cuMipmappedArrayCreate, (CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned int)) \
    X(CUresult, cuArrayDestroy, (CUarray))                                                               \
    X(CUresult, cuMipmappedArrayDestroy, (CUmipmappedArray))                                             \
    X(CUresult, cuCtxCreate, (CUcontext *, unsigned int, CUdevice))                                      \
    X(CUresult, cuCtxCreate_v2, (CUcontext *, unsigned int, CUdevice))                                   \
    X(CUresult, cuCtxCreate_v3, (CUcontext *, CUexecAffinityParam *, int, unsigned int, CUdevice))       \
    X(CUresult, cuCtxCreate_v4, (CUcontext *, CUctxCreateParams *, unsigned int, CUdevice))              \
    X(CUresult, cuCtxDestroy, (CUcontext))                                                               \
    X(CUresult, cuCtxDestroy_v2, (CUcontext))                                                            \
    X(CUresult, cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice))                                       \
    X(CUresult, cuDevicePrimaryCtxRelease, (CUdevice))                                                   \
    X(CUresult, cuDevicePrimaryCtxRelease_v2, (CUdevice))                                                \
    X(CUresult, cuDevicePrimaryCtxReset, (CUdevice))                                                     \
    X(CUresult, cuDevicePrimaryCtxReset_v2, (CUdevice))                                                  \
    X(CUresult, cuMemGetInfo, (unsigned int *, unsigned int *))                                          \
    X(CUresult, cuMemGetInfo_v2, (size_t *, size_t *))                                                   \
    X(CUresult, cuDeviceTotalMem, (unsigned int *, CUdevice))                                            \
    X(CUresult, cuDeviceTotalMem_v2, (size_t *, CUdevice))                                               \
    X(CUresult, cuPointerGetAttribute, (void *, CUpointer_attribute, CUdeviceptr))                       \
    X(CUresult, cuCtxGetDevice, (CUdevice *))                                                            \
    X(CUresult, cuCtxGetCurrent, (CUcontext *))                                                          \
    X(CUresult, cuMemGetAddressRange_v2, (CUdeviceptr *, size_t *, CUdeviceptr))                         \
    X(CUresult, cuDeviceGetCount, (int *))                                                               \
    X(CUresult, cuDeviceGetUuid_v2, (CUuuid *, CUdevice))                                                \
    X(CUresult, cuDeviceGetUuid, (CUuuid *, CUdevice))                                                   \
    X(CUresult, cuStreamGetDevice, (CUstream, CUdevice *))                                               \
    X(CUresult, cuStreamGetCtx, (CUstream, CUcontext *))                                                 \
    X(CUresult, cuStreamIsCapturing, (CUstream, CUstreamCaptureStatus *))                                \
    X(CUresult, cuCtxPushCurrent_v2, (CUcontext))                                                        \
    X(CUresult, cuCtxPopCurrent_v2, (CUcontext *))                                                       \
    X(CUresult, cuDeviceGetMemPool, (CUmemoryPool *, CUdevice))                                          \
    X(CUresult, cuDeviceGetDefaultMemPool, (CUmemoryPool *, CUdevice))                                   \
    X(CUresult, cuMemPoolGetAttribute, (CUmemoryPool, CUmemPool_attribute, void *))                      \
    X(CUresult, cuStreamBeginCapture, (CUstream))                                                        \
    X(CUresult, cuStreamBeginCapture_ptsz, (CUstream))                                                   \
    X(CUresult, cuStreamBeginCapture_v2, (CUstream, CUstreamCaptureMode))                                \
    X(CUresult, cuStreamBeginCapture_v2_ptsz, (CUstream, CUstreamCaptureMode))                           \
    X(CUresult, cuStreamBeginCaptureToGraph,                                                             \
      (CUstream, CUgraph, const CUgraphNode *, const CUgraphEdgeData *, size_t, CUstreamCaptureMode))    \
    X(CUresult, cuStreamBeginCaptureToGraph_ptsz,                                                        \
      (CUstream, CUgraph, const CUgraphNode *, const CUgraphEdgeData *, size_t, CUstreamCaptureMode))    \
    X(CUresult, cuStreamEndCapture, (CUstream, CUgraph *))                                               \
    X(CUresult, cuStreamEndCapture_ptsz, (CUstream, CUgraph *))                                          \
    X(CUresult, cuGraphInstantiateWithFlags, (CUgraphExec *, CUgraph, unsigned long long))               \
    X(CUresult, cuGraphInstantiateWithParams, (CUgraphExec *, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS *))  \
    X(CUresult, cuGraphInstantiateWithParams_ptsz, (CUgraphExec *, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS *)) \
    X(CUresult, cuGraphInstantiate_v2, (CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t))          \
    X(CUresult, cuGraphLaunch, (CUgraphExec, CUstream))                                                  \
    X(CUresult, cuGraphLaunch_ptsz, (CUgraphExec, CUstream))                                             \
    X(CUresult, cuGraphUpload, (CUgraphExec, CUstream))                                                  \
    X(CUresult, cuGraphUpload_ptsz, (CUgraphExec, CUstream))                                             \
    X(CUresult, cuGraphExecDestroy, (CUgraphExec))                                                       \
    X(CUresult, cuDeviceGraphMemTrim, (CUdevice))                                                        \
    X(CUresult, cuDeviceGetGraphMemAttribute, (CUdevice, CUgraphMem_attribute, void *))                  \
    X(CUresult, cuGraphGetNodes, (CUgraph, CUgraphNode *, size_t *))                                     \
    X(CUresult, cuGraphNodeGetType, (CUgraphNode, CUgraphNodeType *))                                    \
    X(CUresult, cuGraphMemAllocNodeGetParams, (CUgraphNode, CUDA_MEM_ALLOC_NODE_PARAMS *))                \
    X(CUresult, cuCtxSetLimit, (CUlimit, size_t))                                                        \
    X(CUresult, cuCtxGetLimit, (size_t *, CUlimit))                                                      \
    X(CUresult, cuDeviceGetAttribute, (int *, CUdevice_attribute, CUdevice))                              \
    X(CUresult, cuIpcOpenMemHandle, (CUdeviceptr *, CUipcMemHandle, unsigned int))                       \
    X(CUresult, cuIpcOpenMemHandle_v2, (CUdeviceptr *, CUipcMemHandle, unsigned int))                    \
    X(CUresult, cuIpcCloseMemHandle, (CUdeviceptr))                                                      \
    X(CUresult, cuMemImportFromShareableHandle, (CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType))

#define GS_DECLARE_REAL(ret, name, args) extern ret(*gs_real_##name) args;
GS_CUDA_REAL(GS_DECLARE_REAL)
#undef GS_DECLARE_REAL

/* A driver function we only call: CUDA_ERROR_NOT_FOUND when it is missing. */
#define GS_CALL(fn, ...) ((fn) != NULL ? (fn)(__VA_ARGS__) : CUDA_ERROR_NOT_FOUND)

/* Every hook first makes sure the real driver is resolved and the process
 * initialised: two acquire loads once both are done.  Then the wake gate:
 * while the shard is suspended the call waits here (wake.c); resident, it
 * costs one load from a fixed address and a branch.  A driver without the
 * hooked function (older than the program's headers) answers
 * CUDA_ERROR_NOT_FOUND, as its cuGetProcAddress does for the name. */
int gs_hooks_ready(void);
#define ENTER(real)                                                                                      \
    do {                                                                                                 \
        if (GS_UNLIKELY(!gs_hooks_ready())) return CUDA_ERROR_NOT_INITIALIZED;                           \
        if (GS_UNLIKELY(gs_suspended())) gs_wake_wait();                                                 \
        if (GS_UNLIKELY((real) == NULL)) return CUDA_ERROR_NOT_FOUND;                                    \
    } while (0)

static inline int gs_counting(void)
{
    return gs_mode != GS_MODE_PASSTHROUGH;
}

/* The current context and its device. */
CUresult gs_current(CUdevice *dev, CUcontext *ctx);
/* Remember an allocation; 0 when remembered (see hooks_common.c). */
int gs_remember(uint64_t key, uint32_t kind, int dev, uint64_t size, uint64_t owner);
/* Bytes charged with no table entry (the table was full). */
int gs_untracked_any(void);
uint64_t gs_untracked_take(int dev, uint64_t bytes);
void gs_untracked_reset(void);
/* Free a pointer allocation (sync or stream-ordered) and give back its charge. */
CUresult gs_free_tracked(CUdeviceptr dptr, int async_free, CUstream stream, void *real_fn);
/* Charge bytes on the current context's device; 1 = go ahead (idx -1: no
 * context, let the driver report it), 0 = refused. */
int gs_charge_current(uint64_t bytes, int *idx, CUcontext *ctx);
/* What a destroyed context held goes with it (gs_track_each callback). */
void gs_drop_owned(struct gs_entry *e, void *ctx);
void gs_ctx_reset_process(void);
void gs_graph_reset_process(void);
void gs_limit_reset_process(void);
void gs_ipc_reset_process(void);
void gs_vmm_import_reset_process(void);
/* hooks_ipc.c: one more import held by this process (opened = 1, counted
 * before the driver is asked) or one fewer (0); the region names the process
 * while the count is above zero. */
void gs_imports_change(int opened);
/* hooks_vmm_import.c: what hooks_vmm.c saw succeed, for handles imported
 * from another process (each returns at once while none is held). */
void gs_vmm_import_retained(CUmemGenericAllocationHandle handle);
void gs_vmm_import_released(CUmemGenericAllocationHandle handle);
void gs_vmm_import_mapped(CUdeviceptr ptr, size_t size, CUmemGenericAllocationHandle handle);
void gs_vmm_import_unmapped(CUdeviceptr ptr, size_t size);

/* The hooks with no prototype in cuda.h (legacy ABI), for the table. */
CUresult cuMemAlloc(CUdeviceptr32 *dptr, unsigned int bytesize);
CUresult cuMemAllocPitch(CUdeviceptr32 *dptr, unsigned int *pPitch, unsigned int width, unsigned int height,
                         unsigned int elementSize);
CUresult cuMemFree(CUdeviceptr32 dptr);
CUresult cuArrayCreate(CUarray *pHandle, const ArrayDesc32 *d);
CUresult cuArray3DCreate(CUarray *pHandle, const Array3DDesc32 *d);
CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxDestroy(CUcontext ctx);
CUresult cuDevicePrimaryCtxRelease(CUdevice dev);
CUresult cuDevicePrimaryCtxReset(CUdevice dev);
CUresult cuMemGetInfo(unsigned int *free, unsigned int *total);
CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev);
CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags);
/* cuda.h declares these only under some macros. */
CUresult cuStreamBeginCapture(CUstream s);
CUresult cuStreamBeginCapture_ptsz(CUstream s);
CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode);
CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *data,
                                          size_t n, CUstreamCaptureMode mode);
CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g);
CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *exec, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p);
CUresult cuGraphInstantiate_v2(CUgraphExec *exec, CUgraph g, CUgraphNode *err, char *log, size_t len);
CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s);
CUresult cuGraphUpload_ptsz(CUgraphExec exec, CUstream s);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int numParams, unsigned int flags,
                        CUdevice dev);

#endif
