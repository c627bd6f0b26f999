/* fake_cuda.c — a fake libcuda.so.1 that simulates the GPUs described in
 * fake_common.c, for testing libvgpu.so without a GPU; this file holds what
 * spans the whole library: the driver version, error strings and
 * cuGetProcAddress's table.  The rest is one file per concern (fake_cuda.h
 * lists them).
 *
 * It follows the real driver where the interposer depends on it: versioned
 * entry points and cuGetProcAddress's version/per-thread-stream selection,
 * CUDA_VISIBLE_DEVICES (indices or UUID prefixes, not both, stopping at the
 * first invalid entry), primary context reference counting, a context's memory
 * cost, pools that cache freed memory and grow in steps until trimmed, VMM
 * handles that live until released and unmapped, and physical capacity
 * shared across processes (an allocation past the card's free memory fails
 * with CUDA_ERROR_OUT_OF_MEMORY), and the checkpoint API another process
 * drives (fake_checkpoint.c).  Device pointers are fake addresses; an
 * allocation's bytes are host memory mapped at its first copy or set
 * (fake_copy.c).  Stream work is synchronous. */
#include <string.h>

#include "fake_cuda.h"

#define DRIVER_VERSION 13000

API CUresult cuDriverGetVersion(int *v)
{
    if (v == NULL) return CUDA_ERROR_INVALID_VALUE;
    *v = DRIVER_VERSION;
    return CUDA_SUCCESS;
}

/* ---- errors -------------------------------------------------------------------- */
/* The codes the fake returns, by cuda.h's names and the driver's words (the
 * agent reports a refused checkpoint call by them). */
static const struct {
    CUresult code;
    const char *name, *text;
} errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation is not permitted in the current state"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

API CUresult cuGetErrorString(CUresult e, const char **s)
{
    if (s == NULL) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == e) {
            *s = errors[i].text;
            return CUDA_SUCCESS;
        }
    *s = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuGetErrorName(CUresult e, const char **s)
{
    if (s == NULL) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == e) {
            *s = errors[i].name;
            return CUDA_SUCCESS;
        }
    *s = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

/* ---- cuGetProcAddress ---------------------------------------------------------
 * For a base name the driver returns the newest variant introduced at or
 * before the requested CUDA version; with
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM a _ptsz/_ptds variant if
 * there is one.  These versions are what driver 580 answered. */
struct entry {
    const char *name;
    int version;
    void *fn, *ptsz;
};
#define E(n, v, f) {n, v, (void *)f, NULL}
#define EP(n, v, f, p) {n, v, (void *)f, (void *)p}
static const struct entry table[] = {
    E("cuInit", 2000, cuInit),
    E("cuDriverGetVersion", 2020, cuDriverGetVersion),
    E("cuDeviceGet", 2000, cuDeviceGet),
    E("cuDeviceGetCount", 2000, cuDeviceGetCount),
    E("cuDeviceGetName", 2000, cuDeviceGetName),
    E("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
    E("cuDeviceGetUuid", 9020, cuDeviceGetUuid),
    E("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2),
    E("cuDeviceTotalMem", 2000, cuDeviceTotalMem),
    E("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    E("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    E("cuDevicePrimaryCtxRelease", 7000, cuDevicePrimaryCtxRelease),
    E("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    E("cuDevicePrimaryCtxReset", 7000, cuDevicePrimaryCtxReset),
    E("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2),
    E("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState),
    E("cuCtxCreate", 2000, cuCtxCreate),
    E("cuCtxCreate", 3020, cuCtxCreate_v2),
    E("cuCtxCreate", 11040, cuCtxCreate_v3),
    E("cuCtxCreate", 12050, cuCtxCreate_v4),
    E("cuCtxDestroy", 2000, cuCtxDestroy),
    E("cuCtxDestroy", 4000, cuCtxDestroy_v2),
    E("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    E("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    E("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    E("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    E("cuCtxGetDevice", 2000, cuCtxGetDevice),
    E("cuCtxSynchronize", 2000, cuCtxSynchronize),
    E("cuMemGetInfo", 2000, cuMemGetInfo),
    E("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    E("cuMemAlloc", 2000, cuMemAlloc),
    E("cuMemAlloc", 3020, cuMemAlloc_v2),
    E("cuCtxSetLimit", 3010, cuCtxSetLimit),
    E("cuCtxGetLimit", 3010, cuCtxGetLimit),
    E("cuStreamBeginCapture", 10000, cuStreamBeginCapture),
    E("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2),
    E("cuStreamEndCapture", 10000, cuStreamEndCapture),
    E("cuStreamIsCapturing", 10000, cuStreamIsCapturing),
    E("cuGraphCreate", 10000, cuGraphCreate),
    E("cuGraphDestroy", 10000, cuGraphDestroy),
    E("cuGraphAddMemAllocNode", 11040, cuGraphAddMemAllocNode),
    E("cuGraphAddMemFreeNode", 11040, cuGraphAddMemFreeNode),
    E("cuGraphGetNodes", 10000, cuGraphGetNodes),
    E("cuGraphNodeGetType", 10000, cuGraphNodeGetType),
    E("cuGraphMemAllocNodeGetParams", 11040, cuGraphMemAllocNodeGetParams),
    E("cuGraphInstantiate", 11040, cuGraphInstantiateWithFlags),
    E("cuGraphInstantiateWithFlags", 11040, cuGraphInstantiateWithFlags),
    E("cuGraphInstantiateWithParams", 12000, cuGraphInstantiateWithParams),
    EP("cuGraphUpload", 11010, cuGraphUpload, cuGraphUpload_ptsz),
    EP("cuGraphLaunch", 10000, cuGraphLaunch, cuGraphLaunch_ptsz),
    E("cuGraphExecDestroy", 10000, cuGraphExecDestroy),
    E("cuDeviceGraphMemTrim", 11040, cuDeviceGraphMemTrim),
    E("cuDeviceGetGraphMemAttribute", 11040, cuDeviceGetGraphMemAttribute),
    E("cuMemAllocPitch", 2000, cuMemAllocPitch),
    E("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
    E("cuMemFree", 2000, cuMemFree),
    E("cuMemFree", 3020, cuMemFree_v2),
    E("cuMemAllocManaged", 6000, cuMemAllocManaged),
    E("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
    E("cuPointerGetAttribute", 4000, cuPointerGetAttribute),
    E("cuMemAllocHost", 3020, cuMemAllocHost_v2),
    E("cuMemHostAlloc", 2020, cuMemHostAlloc),
    E("cuMemFreeHost", 2000, cuMemFreeHost),
    E("cuMemHostRegister", 6050, cuMemHostRegister_v2),
    E("cuMemHostUnregister", 4000, cuMemHostUnregister),
    E("cuMemHostGetDevicePointer", 3020, cuMemHostGetDevicePointer_v2),
    E("cuStreamWaitValue32", 8000, cuStreamWaitValue32),
    E("cuStreamWaitValue32", 11070, cuStreamWaitValue32_v2),
    EP("cuMemAllocAsync", 11020, cuMemAllocAsync, cuMemAllocAsync_ptsz),
    EP("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz),
    EP("cuMemFreeAsync", 11020, cuMemFreeAsync, cuMemFreeAsync_ptsz),
    E("cuMemPoolCreate", 11020, cuMemPoolCreate),
    E("cuMemPoolDestroy", 11020, cuMemPoolDestroy),
    E("cuMemPoolTrimTo", 11020, cuMemPoolTrimTo),
    E("cuMemPoolGetAttribute", 11020, cuMemPoolGetAttribute),
    E("cuMemPoolSetAttribute", 11020, cuMemPoolSetAttribute),
    E("cuDeviceGetDefaultMemPool", 11020, cuDeviceGetDefaultMemPool),
    E("cuDeviceGetMemPool", 11020, cuDeviceGetMemPool),
    E("cuDeviceSetMemPool", 11020, cuDeviceSetMemPool),
    E("cuStreamCreate", 2000, cuStreamCreate),
    E("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    EP("cuStreamSynchronize", 2000, cuStreamSynchronize, cuStreamSynchronize_ptsz),
    E("cuStreamGetCtx", 9020, cuStreamGetCtx),
    E("cuStreamGetDevice", 12080, cuStreamGetDevice),
    E("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity),
    E("cuMemCreate", 10020, cuMemCreate),
    E("cuMemRelease", 10020, cuMemRelease),
    E("cuMemAddressReserve", 10020, cuMemAddressReserve),
    E("cuMemAddressFree", 10020, cuMemAddressFree),
    E("cuMemMap", 10020, cuMemMap),
    E("cuMemUnmap", 10020, cuMemUnmap),
    E("cuMemSetAccess", 10020, cuMemSetAccess),
    E("cuMemRetainAllocationHandle", 11000, cuMemRetainAllocationHandle),
    E("cuMemExportToShareableHandle", 10020, cuMemExportToShareableHandle),
    E("cuMemImportFromShareableHandle", 10020, cuMemImportFromShareableHandle),
    E("cuArrayCreate", 3020, cuArrayCreate_v2),
    E("cuArray3DCreate", 3020, cuArray3DCreate_v2),
    E("cuArrayDestroy", 2000, cuArrayDestroy),
    E("cuMipmappedArrayCreate", 5000, cuMipmappedArrayCreate),
    E("cuMipmappedArrayDestroy", 5000, cuMipmappedArrayDestroy),
    E("cuGetErrorString", 6000, cuGetErrorString),
    E("cuGetErrorName", 6000, cuGetErrorName),
    EP("cuMemcpy", 4000, cuMemcpy, cuMemcpy_ptds),
    EP("cuMemcpyAsync", 4000, cuMemcpyAsync, cuMemcpyAsync_ptsz),
    EP("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds),
    EP("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds),
    EP("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds),
    EP("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz),
    EP("cuMemcpyDtoHAsync", 3020, cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz),
    EP("cuMemcpyDtoDAsync", 3020, cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz),
    EP("cuMemsetD8", 3020, cuMemsetD8_v2, cuMemsetD8_v2_ptds),
    EP("cuMemsetD32", 3020, cuMemsetD32_v2, cuMemsetD32_v2_ptds),
    EP("cuMemsetD8Async", 3020, cuMemsetD8Async, cuMemsetD8Async_ptsz),
    EP("cuMemsetD32Async", 3020, cuMemsetD32Async, cuMemsetD32Async_ptsz),
    EP("cuStreamQuery", 2000, cuStreamQuery, cuStreamQuery_ptsz),
    EP("cuStreamWaitEvent", 3020, cuStreamWaitEvent, cuStreamWaitEvent_ptsz),
    EP("cuLaunchHostFunc", 10000, cuLaunchHostFunc, cuLaunchHostFunc_ptsz),
    E("cuEventCreate", 2000, cuEventCreate),
    E("cuEventRecord", 2000, cuEventRecord),
    E("cuEventQuery", 2000, cuEventQuery),
    E("cuEventSynchronize", 2000, cuEventSynchronize),
    E("cuCheckpointProcessGetRestoreThreadId", 12080, cuCheckpointProcessGetRestoreThreadId),
    E("cuCheckpointProcessGetState", 12080, cuCheckpointProcessGetState),
    E("cuCheckpointProcessLock", 12080, cuCheckpointProcessLock),
    E("cuCheckpointProcessCheckpoint", 12080, cuCheckpointProcessCheckpoint),
    E("cuCheckpointProcessRestore", 12080, cuCheckpointProcessRestore),
    E("cuCheckpointProcessUnlock", 12080, cuCheckpointProcessUnlock),
    E("cuIpcGetMemHandle", 4010, cuIpcGetMemHandle),
    E("cuIpcOpenMemHandle", 4010, cuIpcOpenMemHandle),
    E("cuIpcOpenMemHandle", 11000, cuIpcOpenMemHandle_v2),
    E("cuIpcCloseMemHandle", 4010, cuIpcCloseMemHandle),
    E("cuGetProcAddress", 11030, cuGetProcAddress),
    E("cuGetProcAddress", 12000, cuGetProcAddress_v2),
};

API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int ver, cuuint64_t flags,
                                 CUdriverProcAddressQueryResult *status)
{
    if (symbol == NULL || pfn == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (ver > DRIVER_VERSION) return CUDA_ERROR_INVALID_VALUE;
    const struct entry *best = NULL;
    int known = 0;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(table[i].name, symbol) != 0) continue;
        known = 1;
        if (table[i].version <= ver && (best == NULL || table[i].version > best->version)) best = &table[i];
    }
    *pfn = NULL;
    if (best != NULL) *pfn = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && best->ptsz ? best->ptsz : best->fn;
    if (status != NULL)
        *status = best ? CU_GET_PROC_ADDRESS_SUCCESS
                       : known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_SUCCESS;
}

API CUresult cuGetProcAddress(const char *symbol, void **pfn, int ver, cuuint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, ver, flags, NULL);
}
