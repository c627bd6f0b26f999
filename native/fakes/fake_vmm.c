/* fake_vmm.c — virtual memory management in the fake libcuda.so.1: a
 * handle from cuMemCreate takes its card memory at once and gives it back
 * only when it has been released and unmapped everywhere, as the real
 * driver's does; reserved address ranges cost nothing.
 *
 * Memory shared between the processes of one fake card the way NCCL and
 * PyTorch's expandable segments share it: cuMemExportToShareableHandle gives
 * a POSIX file descriptor (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, the
 * only type simulated) for a handle created with that type requested, and
 * another process imports it (cuMemImportFromShareableHandle) into a handle
 * of its own that it maps like any.  The descriptor is a memfd holding the
 * exporter's entry in the shared state file (place and claim), its GPU and
 * the size; an import succeeds while that entry still stands for the
 * exporter.  What is simulated is who holds what, not the bytes: the card
 * memory stays the exporter's handle's, and an import takes none.  Each
 * process counts the imports it holds in its entry (fake_proc's
 * vmm_imports), from the import until its handle is released and unmapped;
 * a restore of a process holding any is refused (fake_checkpoint.c). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_cuda.h"

enum { M_VMM = 0x7a7a7a7a };

struct fvmm {
    uint32_t magic;
    int phys;
    uint64_t size;
    int refs, maps;
    CUmemAllocationHandleType shareable; /* the types cuMemCreate was asked for */
    int imported;                        /* another process's memory: counted in vmm_imports */
};
struct mapping {
    uint64_t va, size;
    struct fvmm *h;
};

#define MAP_CAP 4096
static struct mapping maps[MAP_CAP];
static int map_count;
static uint64_t next_vmm_va = 0x600000000000ull;

/* Under fake_mu. */
static void vmm_maybe_free(struct fvmm *h)
{
    if (h->refs == 0 && h->maps == 0) {
        if (h->imported) {
            struct fake_proc *me = fake_proc_mine();
            if (me != NULL && __atomic_load_n(&me->vmm_imports, __ATOMIC_ACQUIRE) > 0)
                __atomic_sub_fetch(&me->vmm_imports, 1, __ATOMIC_ACQ_REL);
        } else if (h->phys >= 0) {
            fake_phys_give(h->phys, h->size);
        }
        h->magic = 0;
        free(h);
    }
}

API CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop,
                                           CUmemAllocationGranularity_flags option)
{
    NEED_INIT();
    if (g == NULL) return CUDA_ERROR_INVALID_VALUE;
    *g = 2u << 20;
    return CUDA_SUCCESS;
}

API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                         unsigned long long flags)
{
    NEED_INIT();
    if (handle == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (prop == NULL || size == 0 || size % (2u << 20) != 0) return CUDA_ERROR_INVALID_VALUE;
    int phys = -1;
    if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
        phys = fake_phys_of(prop->location.id);
        if (phys < 0) return CUDA_ERROR_INVALID_DEVICE;
        if (fake_phys_take(phys, size) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct fvmm *h = calloc(1, sizeof *h);
    if (h == NULL) {
        if (phys >= 0) fake_phys_give(phys, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *h = (struct fvmm){.magic = M_VMM, .phys = phys, .size = size, .refs = 1, .shareable = prop->requestedHandleTypes};
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
    return CUDA_SUCCESS;
}

API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    NEED_INIT();
    struct fvmm *h = (struct fvmm *)(uintptr_t)handle;
    fake_lock();
    if (h == NULL || h->magic != M_VMM || h->refs == 0) {
        fake_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    h->refs--;
    vmm_maybe_free(h);
    fake_unlock();
    return CUDA_SUCCESS;
}

API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
                                 unsigned long long flags)
{
    NEED_INIT();
    if (ptr == NULL) return CUDA_ERROR_INVALID_VALUE;
    fake_lock();
    *ptr = next_vmm_va;
    next_vmm_va += (size + (2u << 20) - 1) / (2u << 20) * (2u << 20);
    fake_unlock();
    return CUDA_SUCCESS;
}

API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    NEED_INIT();
    return CUDA_SUCCESS;
}

API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                      unsigned long long flags)
{
    NEED_INIT();
    struct fvmm *h = (struct fvmm *)(uintptr_t)handle;
    fake_lock();
    if (h == NULL || h->magic != M_VMM || offset + size > h->size || map_count == MAP_CAP) {
        fake_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    maps[map_count++] = (struct mapping){.va = ptr, .size = size, .h = h};
    h->maps++;
    fake_unlock();
    return CUDA_SUCCESS;
}

API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    NEED_INIT();
    fake_lock();
    int n = 0;
    for (int i = 0; i < map_count;) {
        if (maps[i].va >= ptr && maps[i].va + maps[i].size <= ptr + size) {
            struct fvmm *h = maps[i].h;
            maps[i] = maps[--map_count];
            h->maps--;
            vmm_maybe_free(h);
            n++;
        } else {
            i++;
        }
    }
    fake_unlock();
    return n > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    NEED_INIT();
    return CUDA_SUCCESS;
}

API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    NEED_INIT();
    if (handle == NULL) return CUDA_ERROR_INVALID_VALUE;
    uint64_t a = (uint64_t)(uintptr_t)addr;
    fake_lock();
    for (int i = 0; i < map_count; i++) {
        if (a >= maps[i].va && a < maps[i].va + maps[i].size) {
            maps[i].h->refs++;
            *handle = (CUmemGenericAllocationHandle)(uintptr_t)maps[i].h;
            fake_unlock();
            return CUDA_SUCCESS;
        }
    }
    fake_unlock();
    return CUDA_ERROR_INVALID_VALUE;
}

#define SHARE_MAGIC 0x4d4d564b414647ULL /* "GFAKVMM" */

/* What an exported descriptor holds. */
struct share {
    uint64_t magic;
    int32_t exporter; /* its place in the shared state's table */
    uint32_t gen;     /* the claim of that place it was */
    int32_t phys;
    uint32_t reserved;
    uint64_t size;
};

API CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                          CUmemAllocationHandleType handleType, unsigned long long flags)
{
    NEED_INIT();
    if (shareableHandle == NULL || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
    struct fake_proc *me = fake_proc_claim();
    if (me == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    struct fvmm *h = (struct fvmm *)(uintptr_t)handle;
    fake_lock();
    /* Only a handle created with the type requested (an import is not
     * exported again: not simulated). */
    int ok = h != NULL && h->magic == M_VMM && h->refs > 0 && !h->imported &&
             (h->shareable & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0 && h->phys >= 0;
    struct share sh = {.magic = SHARE_MAGIC,
                       .exporter = fake_proc_index(me),
                       .gen = __atomic_load_n(&me->gen, __ATOMIC_ACQUIRE),
                       .phys = ok ? h->phys : -1,
                       .size = ok ? h->size : 0};
    fake_unlock();
    if (!ok) return CUDA_ERROR_INVALID_VALUE;
    int fd = memfd_create("gpushards-fake-vmm-share", MFD_CLOEXEC);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    if (pwrite(fd, &sh, sizeof sh, 0) != (ssize_t)sizeof sh) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *(int *)shareableHandle = fd;
    return CUDA_SUCCESS;
}

API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                            CUmemAllocationHandleType shHandleType)
{
    NEED_INIT();
    if (handle == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
    /* The descriptor is passed by value, cast to a pointer. */
    int fd = (int)(intptr_t)osHandle;
    struct share sh;
    if (fd < 0 || pread(fd, &sh, sizeof sh, 0) != (ssize_t)sizeof sh || sh.magic != SHARE_MAGIC || sh.size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_proc *exporter = fake_proc_at(sh.exporter);
    if (exporter == NULL || !fake_proc_still(exporter, sh.gen)) return CUDA_ERROR_INVALID_VALUE; /* gone */
    struct fake_proc *me = fake_proc_claim();
    if (me == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    struct fvmm *h = calloc(1, sizeof *h);
    if (h == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    *h = (struct fvmm){.magic = M_VMM, .phys = sh.phys, .size = sh.size, .refs = 1, .imported = 1};
    __atomic_add_fetch(&me->vmm_imports, 1, __ATOMIC_ACQ_REL);
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
    return CUDA_SUCCESS;
}
