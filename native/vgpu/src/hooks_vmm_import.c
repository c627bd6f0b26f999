/* hooks_vmm_import.c — GPU memory imported from another process through a
 * VMM shareable handle (cuMemImportFromShareableHandle), the way NCCL
 * (NCCL_CUMEM_ENABLE, the default since 2.19) and PyTorch's expandable
 * segments share memory between the processes of a host.
 *
 * The driver's checkpoint API checkpoints a process holding such an import
 * but never restores it (CUDA_ERROR_NOT_SUPPORTED, the process left
 * CHECKPOINTED, even with its exporter checkpointed too; driver 580 on an
 * H200, native/gpu-tests/RESULTS.md, 2026-11-29), as with legacy CUDA IPC.
 * So each import counts in hooks_ipc.c's count of imports, which names this
 * process in the region's ipc_importers while it holds any, and the agent
 * refuses to suspend the shard before it locks anything.
 *
 * An import is held while its handle has a reference (the import's own, and
 * one per cuMemRetainAllocationHandle, each ended by one cuMemRelease) or a
 * mapping (cuMemMap until cuMemUnmap): the usual idiom maps the handle and
 * releases it at once, and the memory stays in the process until unmapped.
 * A handle imported twice comes back with one reference per import.  The
 * tables below follow both, fixed in size; every lookup waits until the
 * process has imported something.  Nothing is charged: the bytes are the
 * exporter's (hooks_vmm.c charges only handles of cuMemCreate, and an
 * imported one is not in its table). */
#include <pthread.h>
#include <string.h>

#include "hooks.h"

/* NCCL imports one handle per peer buffer it maps, PyTorch one per segment
 * a peer sent: tens in a process, rarely more. */
#define IMPORTED_HANDLES 128
#define IMPORTED_MAPPINGS 512

struct imported {
    CUmemGenericAllocationHandle handle;
    uint32_t refs; /* the imports' and retains' references not yet released */
    uint32_t maps; /* its mappings in maps[] */
    uint8_t used;
    /* 1: a mapping of it could not be written down, so its unmap would go
     * unseen; the entry, and the bit, stay until the process exits. */
    uint8_t kept;
};

struct imported_map {
    CUdeviceptr va;
    size_t size;
    unsigned of; /* 1 + its handle's place in handles[]; 0: a free place */
};

static pthread_mutex_t table_mu = PTHREAD_MUTEX_INITIALIZER;
static struct imported handles[IMPORTED_HANDLES];
static struct imported_map maps[IMPORTED_MAPPINGS];
/* Entries in use, read without the lock: 0 lets the VMM hooks of a process
 * that imported nothing return at once. */
static uint32_t handles_used;

static int lock_table(void)
{
    int e = pthread_mutex_lock(&table_mu);
    /* A default mutex fails only when corrupt: the tables cannot be kept,
     * and an import not followed keeps the process named (the safe side). */
    if (e != 0) GS_ERROR("cannot take the VMM import lock: %s", strerror(e));
    return e == 0;
}

static void unlock_table(void)
{
    int e = pthread_mutex_unlock(&table_mu);
    if (e != 0) GS_ERROR("cannot release the VMM import lock: %s", strerror(e));
}

/* Under table_mu. */
static struct imported *find(CUmemGenericAllocationHandle handle)
{
    for (unsigned i = 0; i < IMPORTED_HANDLES; i++)
        if (handles[i].used && handles[i].handle == handle) return &handles[i];
    return NULL;
}

/* Under table_mu: an entry with no reference and no mapping is no longer an
 * import of this process. */
static void forget_if_done(struct imported *e)
{
    if (e->refs != 0 || e->maps != 0 || e->kept) return;
    memset(e, 0, sizeof *e);
    __atomic_sub_fetch(&handles_used, 1, __ATOMIC_RELEASE);
    gs_imports_change(0);
}

/* After a successful import that gs_imports_change(1) counted already. */
static void note_import(CUmemGenericAllocationHandle handle)
{
    if (!lock_table()) return;
    struct imported *e = find(handle);
    if (e != NULL) {
        /* The same handle value again (should the driver hand it back for
         * an allocation imported twice): one more release to come, and one
         * count for the entry is enough. */
        e->refs++;
        unlock_table();
        gs_imports_change(0);
        return;
    }
    for (unsigned i = 0; i < IMPORTED_HANDLES; i++) {
        if (handles[i].used) continue;
        handles[i] = (struct imported){.handle = handle, .refs = 1, .used = 1};
        __atomic_add_fetch(&handles_used, 1, __ATOMIC_RELEASE);
        unlock_table();
        return;
    }
    unlock_table();
    /* No place to follow it: its count is never taken back, so the process
     * stays named until it exits.  Losing track the other way would clear
     * the bit while the import may still be held, and the agent would then
     * checkpoint a process the driver never restores (its calls hang for
     * good); a suspend refused only leaves the shard's memory where it is. */
    GS_WARN("more than %u VMM imports held at once: this process is named an importer until it exits",
            IMPORTED_HANDLES);
}

GS_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                                  CUmemAllocationHandleType shHandleType)
{
    ENTER(gs_real_cuMemImportFromShareableHandle);
    /* Counted before the driver imports: a process the agent locks in the
     * middle of an import is named already. */
    gs_imports_change(1);
    CUresult r = gs_real_cuMemImportFromShareableHandle(handle, osHandle, shHandleType);
    if (r != CUDA_SUCCESS) {
        gs_imports_change(0);
        return r;
    }
    note_import(*handle);
    return r;
}

void gs_vmm_import_retained(CUmemGenericAllocationHandle handle)
{
    if (__atomic_load_n(&handles_used, __ATOMIC_ACQUIRE) == 0 || !lock_table()) return;
    struct imported *e = find(handle);
    if (e != NULL) e->refs++;
    unlock_table();
}

void gs_vmm_import_released(CUmemGenericAllocationHandle handle)
{
    if (__atomic_load_n(&handles_used, __ATOMIC_ACQUIRE) == 0 || !lock_table()) return;
    struct imported *e = find(handle);
    if (e != NULL && e->refs > 0) {
        e->refs--;
        forget_if_done(e);
    }
    unlock_table();
}

void gs_vmm_import_mapped(CUdeviceptr ptr, size_t size, CUmemGenericAllocationHandle handle)
{
    if (__atomic_load_n(&handles_used, __ATOMIC_ACQUIRE) == 0 || !lock_table()) return;
    struct imported *e = find(handle);
    if (e != NULL) {
        unsigned i = 0;
        while (i < IMPORTED_MAPPINGS && maps[i].of != 0) i++;
        if (i < IMPORTED_MAPPINGS) {
            maps[i] = (struct imported_map){.va = ptr, .size = size, .of = 1 + (unsigned)(e - handles)};
            e->maps++;
        } else if (!e->kept) {
            e->kept = 1; /* the safe side, as in note_import */
            GS_WARN("more than %u mappings of VMM imports: this process is named an importer until it exits",
                    IMPORTED_MAPPINGS);
        }
    }
    unlock_table();
}

/* A successful unmap covered whole mappings (the driver refuses part of one). */
void gs_vmm_import_unmapped(CUdeviceptr ptr, size_t size)
{
    if (__atomic_load_n(&handles_used, __ATOMIC_ACQUIRE) == 0 || !lock_table()) return;
    for (unsigned i = 0; i < IMPORTED_MAPPINGS; i++) {
        if (maps[i].of == 0 || maps[i].va < ptr || maps[i].va + maps[i].size > ptr + size) continue;
        struct imported *e = &handles[maps[i].of - 1];
        maps[i].of = 0;
        if (e->maps > 0) e->maps--;
        forget_if_done(e);
    }
    unlock_table();
}

/* A fork child holds no import (CUDA does not survive fork), and another
 * thread may have held the lock when the parent forked. */
void gs_vmm_import_reset_process(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&table_mu, &fresh, sizeof fresh);
    memset(handles, 0, sizeof handles);
    memset(maps, 0, sizeof maps);
    handles_used = 0;
}
