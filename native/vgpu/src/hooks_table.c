/* hooks_table.c — the real driver's entry points (filled by resolve.c) and
 * the table that dlsym and cuGetProcAddress consult: each hooked name, our
 * function, and where the real one is kept. */
#include "hooks.h"

#define GS_DEFINE_REAL(ret, name, args) ret(*gs_real_##name) args;
GS_CUDA_REAL(GS_DEFINE_REAL)
#undef GS_DEFINE_REAL

void gs_hooks_reset_process(void)
{
    gs_ctx_reset_process();
    gs_graph_reset_process();
    gs_limit_reset_process();
    gs_untracked_reset();
    gs_ipc_reset_process();
    gs_vmm_import_reset_process();
}

#define HOOK(name) {#name, (void *)name, (void **)&gs_real_##name}
#define CALLS(name) {#name, NULL, (void **)&gs_real_##name}
const struct gs_hook gs_cuda_hooks[] = {
    HOOK(cuInit),
    {"cuGetProcAddress_v2", (void *)cuGetProcAddress_v2, (void **)&gs_real_cuGetProcAddress_v2},
    {"cuGetProcAddress", (void *)gs_legacy_cuGetProcAddress, (void **)&gs_real_cuGetProcAddress},
    HOOK(cuMemAlloc),
    HOOK(cuMemAlloc_v2),
    HOOK(cuMemAllocPitch),
    HOOK(cuMemAllocPitch_v2),
    HOOK(cuMemAllocManaged),
    HOOK(cuMemFree),
    HOOK(cuMemFree_v2),
    HOOK(cuMemAllocAsync),
    HOOK(cuMemAllocAsync_ptsz),
    HOOK(cuMemAllocFromPoolAsync),
    HOOK(cuMemAllocFromPoolAsync_ptsz),
    HOOK(cuMemFreeAsync),
    HOOK(cuMemFreeAsync_ptsz),
    HOOK(cuMemPoolCreate),
    HOOK(cuMemPoolDestroy),
    HOOK(cuMemPoolTrimTo),
    HOOK(cuMemCreate),
    HOOK(cuMemRelease),
    HOOK(cuMemRetainAllocationHandle),
    HOOK(cuMemMap),
    HOOK(cuMemUnmap),
    HOOK(cuArrayCreate),
    HOOK(cuArrayCreate_v2),
    HOOK(cuArray3DCreate),
    HOOK(cuArray3DCreate_v2),
    HOOK(cuMipmappedArrayCreate),
    HOOK(cuArrayDestroy),
    HOOK(cuMipmappedArrayDestroy),
    HOOK(cuCtxCreate),
    HOOK(cuCtxCreate_v2),
    HOOK(cuCtxCreate_v3),
    HOOK(cuCtxCreate_v4),
    HOOK(cuCtxDestroy),
    HOOK(cuCtxDestroy_v2),
    HOOK(cuDevicePrimaryCtxRetain),
    HOOK(cuDevicePrimaryCtxRelease),
    HOOK(cuDevicePrimaryCtxRelease_v2),
    HOOK(cuDevicePrimaryCtxReset),
    HOOK(cuDevicePrimaryCtxReset_v2),
    HOOK(cuStreamBeginCapture),
    HOOK(cuStreamBeginCapture_ptsz),
    HOOK(cuStreamBeginCapture_v2),
    HOOK(cuStreamBeginCapture_v2_ptsz),
    HOOK(cuStreamBeginCaptureToGraph),
    HOOK(cuStreamBeginCaptureToGraph_ptsz),
    HOOK(cuStreamEndCapture),
    HOOK(cuStreamEndCapture_ptsz),
    HOOK(cuGraphInstantiateWithFlags),
    HOOK(cuGraphInstantiateWithParams),
    HOOK(cuGraphInstantiateWithParams_ptsz),
    HOOK(cuGraphInstantiate_v2),
    HOOK(cuGraphLaunch),
    HOOK(cuGraphLaunch_ptsz),
    HOOK(cuGraphUpload),
    HOOK(cuGraphUpload_ptsz),
    HOOK(cuGraphExecDestroy),
    HOOK(cuDeviceGraphMemTrim),
    CALLS(cuDeviceGetGraphMemAttribute),
    CALLS(cuGraphGetNodes),
    CALLS(cuGraphNodeGetType),
    CALLS(cuGraphMemAllocNodeGetParams),
    HOOK(cuCtxSetLimit),
    CALLS(cuCtxGetLimit),
    CALLS(cuDeviceGetAttribute),
    HOOK(cuMemGetInfo),
    HOOK(cuMemGetInfo_v2),
    HOOK(cuDeviceTotalMem),
    HOOK(cuDeviceTotalMem_v2),
    CALLS(cuPointerGetAttribute),
    CALLS(cuCtxGetDevice),
    CALLS(cuCtxGetCurrent),
    CALLS(cuMemGetAddressRange_v2),
    CALLS(cuDeviceGetCount),
    CALLS(cuDeviceGetUuid_v2),
    CALLS(cuDeviceGetUuid),
    CALLS(cuStreamGetDevice),
    CALLS(cuStreamGetCtx),
    CALLS(cuStreamIsCapturing),
    CALLS(cuCtxPushCurrent_v2),
    CALLS(cuCtxPopCurrent_v2),
    CALLS(cuDeviceGetMemPool),
    CALLS(cuDeviceGetDefaultMemPool),
    CALLS(cuMemPoolGetAttribute),
    HOOK(cuIpcOpenMemHandle),
    HOOK(cuIpcOpenMemHandle_v2),
    HOOK(cuIpcCloseMemHandle),
    HOOK(cuMemImportFromShareableHandle),
};
const size_t gs_cuda_hook_count = sizeof gs_cuda_hooks / sizeof gs_cuda_hooks[0];
