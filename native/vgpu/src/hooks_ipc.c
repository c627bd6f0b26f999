/* hooks_ipc.c — CUDA IPC imports: cuIpcOpenMemHandle (both symbols) and
 * cuIpcCloseMemHandle; and the count of every import this process holds,
 * those of hooks_vmm_import.c (VMM shareable handles) too.
 *
 * The driver's checkpoint API locks and checkpoints a process that opened
 * another process's GPU memory but never restores it (gpushards_region.h,
 * ipc_importers).  So while this process holds an import, its slot's bit in
 * the region says so, and the agent refuses to suspend the shard before it
 * locks anything.  Nothing is charged: the bytes are the exporter's, counted
 * where they were allocated.
 *
 * The bit is set before the driver opens an import and cleared after the
 * last one closes (or after the open that set it failed): a process the
 * agent locks in the middle of an open is named already.  Imports a context
 * teardown drops without a close keep the bit until the process exits: the
 * agent then refuses a suspend it could have made, never the other way.
 * Not the hot path: one process-local mutex orders the count and the bit. */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "hooks.h"

static pthread_mutex_t imports_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t imports_open; /* opened (or being opened) and not yet closed */

void gs_imports_change(int opened)
{
    int e = pthread_mutex_lock(&imports_mu);
    if (e != 0) {
        /* A default mutex fails only on a corrupt one; the count cannot be kept. */
        GS_ERROR("cannot take the import lock: %s", strerror(e));
        return;
    }
    uint64_t before = imports_open;
    if (opened) imports_open++;
    else if (imports_open > 0) imports_open--;
    if ((before == 0) != (imports_open == 0) && gs_budget_mark_ipc_importer(imports_open != 0) != 0 && opened &&
        gs_mode == GS_MODE_COUNTING)
        GS_WARN("this process imported memory of another process that the region cannot name");
    e = pthread_mutex_unlock(&imports_mu);
    if (e != 0) GS_ERROR("cannot release the import lock: %s", strerror(e));
}

/* A fork child holds no import (CUDA does not survive fork), and another
 * thread may have held the lock when the parent forked. */
void gs_ipc_reset_process(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&imports_mu, &fresh, sizeof fresh);
    imports_open = 0;
}

static CUresult open_import(CUresult (*real)(CUdeviceptr *, CUipcMemHandle, unsigned int), CUdeviceptr *pdptr,
                            CUipcMemHandle handle, unsigned int flags)
{
    gs_imports_change(1);
    CUresult r = real(pdptr, handle, flags);
    if (r != CUDA_SUCCESS) gs_imports_change(0);
    return r;
}

GS_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
    ENTER(gs_real_cuIpcOpenMemHandle_v2);
    return open_import(gs_real_cuIpcOpenMemHandle_v2, pdptr, handle, flags);
}

/* The symbol before CUDA 11's rename; drivers still export it. */
GS_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
    ENTER(gs_real_cuIpcOpenMemHandle);
    return open_import(gs_real_cuIpcOpenMemHandle, pdptr, handle, flags);
}

GS_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    ENTER(gs_real_cuIpcCloseMemHandle);
    CUresult r = gs_real_cuIpcCloseMemHandle(dptr);
    if (r == CUDA_SUCCESS) gs_imports_change(0);
    return r;
}
