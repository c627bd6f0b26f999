/* fake_cuda.h — what the parts of the fake libcuda.so.1 share:
 * fake_device.c (cuInit, CUDA_VISIBLE_DEVICES, device queries),
 * fake_context.c (contexts and their limits), fake_memory.c (linear memory,
 * arrays, the allocation records), fake_pool.c (stream-ordered pools),
 * fake_vmm.c (virtual memory management, and its memory shared between
 * processes), fake_stream.c (streams),
 * fake_graph.c (stream capture, graphs and graph memory), fake_launch.c
 * (kernels and events, with simulated kernel time), fake_copy.c (copies and
 * sets), fake_checkpoint.c (the checkpoint API, and the wait of a locked
 * process's calls), fake_ipc.c (memory shared between processes) and fake_cuda.c
 * (cuGetProcAddress's table, version, error strings).  The simulated GPUs,
 * their physical memory and per-process usage are fake_common.h's, shared
 * with the fake NVML. */
#ifndef GPUSHARDS_FAKE_CUDA_H
#define GPUSHARDS_FAKE_CUDA_H

#include <pthread.h>
#include <stdint.h>

#include "cuda_subset.h"

#include "fake_common.h"

/* cuda_subset.h, as cuda.h, maps these names to their newest version; the fake exports every
 * version under its own name, as the real driver does. */
#undef cuMemAlloc
#undef cuStreamBeginCapture
#undef cuStreamEndCapture
#undef cuStreamIsCapturing
#undef cuGraphLaunch
#undef cuGraphUpload
#undef cuMemAllocPitch
#undef cuMemFree
#undef cuMemGetInfo
#undef cuDeviceTotalMem
#undef cuCtxCreate
#undef cuCtxDestroy
#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxReset
#undef cuDeviceGetUuid
#undef cuGetProcAddress
#undef cuIpcOpenMemHandle

#define API __attribute__((visibility("default")))

/* One lock for the driver's bookkeeping: allocation records, pools, VMM
 * mappings, primary contexts, captures and graph memory. */
FAKE_HIDDEN extern pthread_mutex_t fake_mu;
/* Take and give back fake_mu.  A fake whose lock fails cannot keep its
 * books, and a test that went on would measure nonsense: it aborts. */
FAKE_HIDDEN void fake_lock(void);
FAKE_HIDDEN void fake_unlock(void);

/* ---- fake_device.c ---- */
/* cuInit has run (in any thread). */
FAKE_HIDDEN int fake_initialized(void);
/* The physical GPU of CUDA ordinal d (after CUDA_VISIBLE_DEVICES), -1 for none. */
FAKE_HIDDEN int fake_phys_of(CUdevice d);
FAKE_HIDDEN int fake_visible_count(void);

/* ---- fake_checkpoint.c ---- */
/* A driver call of this process, from entry to return: it waits at entry
 * while another process holds this one locked or checkpointed
 * (cuCheckpointProcessLock), and a lock waits for the calls under way to
 * return.  Nested calls (the fake calling its own entry points) pass. */
struct fake_call {
    struct fake_proc *p; /* NULL: nested, or before cuInit */
};
FAKE_HIDDEN struct fake_call fake_call_enter(void);
FAKE_HIDDEN void fake_call_leave(struct fake_call *c);
#define FAKE_CALL() struct fake_call fake_call_ __attribute__((cleanup(fake_call_leave))) = fake_call_enter()

/* Every entry point but cuInit, the version, error strings and
 * cuGetProcAddress starts here. */
#define NEED_INIT()                                                                                      \
    FAKE_CALL();                                                                                         \
    if (!fake_initialized()) return CUDA_ERROR_NOT_INITIALIZED

/* ---- fake_context.c ---- */
struct fctx {
    uint32_t magic;
    int ordinal, phys, primary, refs, alive;
    size_t limits[3]; /* stack, printf FIFO, malloc heap; 0 = the default */
};
/* The calling thread's current context, NULL for none. */
FAKE_HIDDEN struct fctx *fake_ctx_current(void);
FAKE_HIDDEN int fake_ctx_valid(const struct fctx *c);
/* The physical GPU of the calling thread's current context, -1 for none. */
FAKE_HIDDEN int fake_current_phys(void);

#define NEED_CTX(c)                                                                                      \
    struct fctx *c = fake_ctx_current();                                                                 \
    if (!fake_ctx_valid(c)) return CUDA_ERROR_INVALID_CONTEXT

/* ---- fake_memory.c ---- */
struct fpool;
/* K_IPC: another process's allocation opened here (fake_ipc.c), charged to
 * nobody here: its bytes are the exporter's. */
enum { K_PLAIN = 1, K_ASYNC, K_IPC };
/* One live allocation with a device address, in an open-addressed table
 * keyed by address (key 0: never used, 1: freed). */
struct rec {
    uint64_t key, size;
    int phys, kind;
    /* Its bytes: host memory, mapped at the first copy or set into it (the
     * fake's "device memory"; a checkpoint leaves it where it is, as the
     * real one moves device memory into the process's host memory). */
    unsigned char *data;
    union {
        struct fctx *ctx;   /* K_PLAIN: the context that frees it at its teardown */
        struct fpool *pool; /* K_ASYNC: the pool it came from */
    } owner;
};
/* At cuInit, under fake_mu: 0, or -1 when there is no memory for the table. */
FAKE_HIDDEN int fake_records_init(void);
/* Under fake_mu: a free slot for key, NULL when the table is full. */
FAKE_HIDDEN struct rec *fake_rec_add(uint64_t key);
/* Under fake_mu: a fake device address for size bytes on GPU phys (-1: host). */
FAKE_HIDDEN uint64_t fake_va_alloc(int phys, uint64_t size);
/* Free a linear or pool allocation, as cuMemFree does. */
FAKE_HIDDEN CUresult fake_mem_free(CUdeviceptr dptr);
/* Under fake_mu: a context's teardown frees its linear allocations. */
FAKE_HIDDEN void fake_mem_drop_ctx(struct fctx *c);
/* Under fake_mu: a record leaves the table (its bytes go with it). */
FAKE_HIDDEN void fake_rec_drop(struct rec *r);
/* Under fake_mu: the allocation holding [addr, addr + bytes), NULL for none. */
FAKE_HIDDEN struct rec *fake_rec_containing(uint64_t addr, uint64_t bytes);

/* ---- fake_ipc.c ---- */
/* Under fake_mu: a context's teardown closes the imports it opened. */
FAKE_HIDDEN void fake_ipc_drop(struct rec *r);

/* ---- fake_pool.c ---- */
/* At cuInit, under fake_mu: every GPU's default pool is its current one. */
FAKE_HIDDEN void fake_pools_init(void);
/* A synchronisation: every pool gives back what it holds above its release threshold. */
FAKE_HIDDEN void fake_pools_synchronize(void);
/* Under fake_mu: one of p's allocations of bytes was freed. */
FAKE_HIDDEN void fake_pool_freed(struct fpool *p, uint64_t bytes);

/* ---- fake_stream.c ---- */
struct fgraph;
struct fstream {
    uint32_t magic;
    struct fctx *ctx;
    int capturing, invalidated, global_mode;
    struct fgraph *graph; /* being captured */
};
/* The context of stream s (the current one for the NULL, legacy and per-thread streams). */
FAKE_HIDDEN struct fctx *fake_stream_ctx(CUstream s);
/* s as a stream the fake created, NULL for the NULL, legacy and per-thread streams. */
FAKE_HIDDEN struct fstream *fake_stream_real(CUstream s);

/* ---- fake_graph.c ---- */
/* cuMemAllocAsync on a capturing stream records an allocation node: 1 when
 * s is capturing (*dptr is the node's address), 0 when it is not. */
FAKE_HIDDEN int fake_capture_alloc(CUdeviceptr *dptr, size_t bytes, CUstream s);
/* A call that is not capture-safe: it invalidates every global-mode capture under way. */
FAKE_HIDDEN void fake_capture_unsafe_call(void);

/* ---- fake_launch.c ---- */
/* A graph launch takes simulated kernel time. */
FAKE_HIDDEN void fake_launch_graph(void);

/* ---- entry points cuda.h does not declare: older ABIs and the
 * per-thread-stream (_ptsz) variants, found through cuGetProcAddress ---- */
API CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d);
API CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice d);
API CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice d);
API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice d);
API CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *p, int n, unsigned int flags, CUdevice d);
API CUresult cuCtxDestroy(CUcontext ctx);
API CUresult cuDevicePrimaryCtxRelease(CUdevice d);
API CUresult cuDevicePrimaryCtxReset(CUdevice d);
API CUresult cuMemAlloc(unsigned int *dptr, unsigned int bytes);
API CUresult cuMemAllocPitch(unsigned int *dptr, unsigned int *pitch, unsigned int width, unsigned int height,
                             unsigned int elem);
API CUresult cuMemFree(unsigned int dptr);
API CUresult cuMemGetInfo(unsigned int *free, unsigned int *total);
API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUstream s);
API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream s);
API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s);
API CUresult cuStreamSynchronize_ptsz(CUstream s);
API CUresult cuStreamBeginCapture(CUstream s);
API CUresult cuGraphUpload_ptsz(CUgraphExec exec, CUstream s);
API CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s);
API CUresult cuGetProcAddress(const char *symbol, void **pfn, int ver, cuuint64_t flags);
API CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags);
API CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n);
API CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n);
API CUresult cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n);
API CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n);
API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, CUstream s);
API CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr src, size_t n, CUstream s);
API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
API CUresult cuMemsetD8_v2_ptds(CUdeviceptr dst, unsigned char v, size_t n);
API CUresult cuMemsetD32_v2_ptds(CUdeviceptr dst, unsigned int v, size_t n);
API CUresult cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char v, size_t n, CUstream s);
API CUresult cuMemsetD32Async_ptsz(CUdeviceptr dst, unsigned int v, size_t n, CUstream s);
API CUresult cuStreamQuery_ptsz(CUstream s);
API CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int flags);
API CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void *data);

#endif
