/* fake_ipc.c — memory shared between processes of one fake card, as the
 * legacy CUDA IPC API shares it: cuIpcGetMemHandle names a linear allocation
 * in a 64-byte handle, another process opens it (cuIpcOpenMemHandle, both
 * symbols) at an address of its own and closes it (cuIpcCloseMemHandle).
 *
 * The handle carries the exporter's entry in the shared state file (place
 * and claim), its GPU, and the allocation's size; an open succeeds while
 * that entry still stands for the exporter.  What is simulated is who holds
 * what, not the bytes: the importer's address maps memory of its own, and
 * nothing is taken from the card (the bytes are the exporter's).
 *
 * Each process counts the imports it holds in its entry (fake_proc's
 * ipc_imports): a restore of a process holding any is refused, as the real
 * driver refuses it (fake_checkpoint.c). */
#include <string.h>

#include "fake_cuda.h"

#define HANDLE_MAGIC 0x4350494b414647ULL /* "GFAKIPC" */

struct handle {
    uint64_t magic;
    int32_t exporter; /* its place in the shared state's table */
    uint32_t gen;     /* the claim of that place it was */
    int32_t phys;
    uint32_t reserved;
    uint64_t dptr, size;
};
_Static_assert(sizeof(struct handle) <= CU_IPC_HANDLE_SIZE, "a handle fits CUipcMemHandle");

API CUresult cuIpcGetMemHandle(CUipcMemHandle *out, CUdeviceptr dptr)
{
    NEED_INIT();
    if (out == NULL) return CUDA_ERROR_INVALID_VALUE;
    struct fake_proc *me = fake_proc_claim();
    if (me == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    fake_lock();
    struct rec *r = fake_rec_containing(dptr, 1);
    int ok = r != NULL && r->key == dptr && r->kind == K_PLAIN;
    struct handle h = {.magic = HANDLE_MAGIC,
                       .exporter = fake_proc_index(me),
                       .gen = __atomic_load_n(&me->gen, __ATOMIC_ACQUIRE),
                       .phys = ok ? r->phys : -1,
                       .dptr = dptr,
                       .size = ok ? r->size : 0};
    fake_unlock();
    if (!ok) return CUDA_ERROR_INVALID_VALUE; /* only a cuMemAlloc allocation, named by its start */
    memset(out, 0, sizeof *out);
    memcpy(out->reserved, &h, sizeof h);
    return CUDA_SUCCESS;
}

static CUresult open_handle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
    NEED_INIT();
    NEED_CTX(c);
    if (pdptr == NULL || (flags & ~(unsigned int)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct handle h;
    memcpy(&h, handle.reserved, sizeof h);
    struct fake_proc *exporter = fake_proc_at(h.exporter);
    if (h.magic != HANDLE_MAGIC || exporter == NULL || h.size == 0) return CUDA_ERROR_INVALID_VALUE;
    if (!fake_proc_still(exporter, h.gen)) return CUDA_ERROR_INVALID_VALUE; /* the exporter is gone */
    struct fake_proc *me = fake_proc_claim();
    if (me == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    /* The driver refuses the exporter's own handle (the error it names is
     * not documented; this one is among those cuIpcOpenMemHandle lists). */
    if (me == exporter) return CUDA_ERROR_INVALID_CONTEXT;
    /* Peer access to another GPU is not simulated. */
    if (h.phys != c->phys) return CUDA_ERROR_INVALID_DEVICE;
    fake_lock();
    uint64_t va = fake_va_alloc(c->phys, h.size);
    struct rec *r = fake_rec_add(va);
    if (r != NULL) {
        r->size = h.size;
        r->phys = c->phys;
        r->kind = K_IPC;
        r->owner.ctx = c;
        __atomic_add_fetch(&me->ipc_imports, 1, __ATOMIC_ACQ_REL);
    }
    fake_unlock();
    if (r == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    *pdptr = va;
    return CUDA_SUCCESS;
}

API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
    return open_handle(pdptr, handle, flags);
}

API CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
    return open_handle(pdptr, handle, flags);
}

void fake_ipc_drop(struct rec *r)
{
    fake_rec_drop(r);
    struct fake_proc *me = fake_proc_mine();
    if (me != NULL && __atomic_load_n(&me->ipc_imports, __ATOMIC_ACQUIRE) > 0)
        __atomic_sub_fetch(&me->ipc_imports, 1, __ATOMIC_ACQ_REL);
}

API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    NEED_INIT();
    fake_lock();
    struct rec *r = fake_rec_containing(dptr, 1);
    int ok = r != NULL && r->key == dptr && r->kind == K_IPC;
    if (ok) fake_ipc_drop(r);
    fake_unlock();
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
