/* fake_cuda.c — a fake libcuda.so.1 that simulates the GPUs described in
 * fake_common.c, for testing libvgpu.so without a GPU.
 *
 * It follows the real driver where the interposer depends on it: versioned
 * entry points and cuGetProcAddress's version/per-thread-stream selection,
 * CUDA_VISIBLE_DEVICES (indices or UUID prefixes, stopping at the first
 * invalid entry), primary context reference counting, a context's memory
 * cost, pools that cache freed memory and grow in steps until trimmed, VMM
 * handles that live until released and unmapped, and physical capacity
 * shared across processes (an allocation past the card's free memory fails
 * with CUDA_ERROR_OUT_OF_MEMORY).  Device pointers are fake addresses: no
 * memory is allocated for them.  Stream work is synchronous. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#include "fake_common.h"

#undef cuMemAlloc
#undef cuStreamBeginCapture
#undef cuStreamEndCapture
#undef cuStreamIsCapturing
#undef cuGraphInstantiate
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
#undef cuArrayCreate
#undef cuArray3DCreate
#undef cuStreamDestroy
#undef cuCtxPushCurrent
#undef cuCtxPopCurrent

#define API __attribute__((visibility("default")))
#define DRIVER_VERSION 13000

enum { M_CTX = 0xc7c7c7c7, M_STREAM = 0x57575757, M_POOL = 0x90909090, M_VMM = 0x7a7a7a7a, M_ARRAY = 0xa4a4a4a4 };

struct fctx {
    uint32_t magic;
    int ordinal, phys, primary, refs, alive;
    size_t limits[3]; /* stack, printf FIFO, malloc heap; 0 = the default */
};
struct fgraph;
struct fstream {
    uint32_t magic;
    struct fctx *ctx;
    int capturing, invalidated, global_mode;
    struct fgraph *graph; /* being captured */
};
struct fpool {
    uint32_t magic;
    int phys; /* -1: host memory */
    int destroyed;
    uint64_t reserved, used, threshold, reserved_high, used_high;
};
struct fvmm {
    uint32_t magic;
    int phys;
    uint64_t size;
    int refs, maps;
};
struct farray {
    uint32_t magic;
    int phys;
    uint64_t bytes;
};
enum { K_PLAIN = 1, K_ASYNC, K_HOST };
struct rec {
    uint64_t key, size;
    int phys, kind;
    struct fpool *pool;
};
struct mapping {
    uint64_t va, size;
    struct fvmm *h;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int inited;
static int visible[FAKE_MAX_GPUS], visible_count;
static struct fctx primary[FAKE_MAX_GPUS];
static struct fpool default_pool[FAKE_MAX_GPUS], *current_pool[FAKE_MAX_GPUS];
static __thread struct fctx *ctx_stack[16];
static __thread int ctx_depth;

#define REC_CAP (1u << 18)
static struct rec *recs;
#define MAP_CAP 4096
static struct mapping maps[MAP_CAP];
static int map_count;
static struct fpool *pools[256];
static int pool_count;
static uint64_t next_va[FAKE_MAX_GPUS + 1], next_va32 = 0x10000000, next_vmm_va = 0x600000000000ull;
#define FREE_CAP 4096
static struct {
    uint64_t va, size;
    int phys;
} freed[FREE_CAP];
static int freed_count;

/* ---- bookkeeping (under mu) -------------------------------------------- */
static struct rec *rec_find(uint64_t key)
{
    for (uint32_t i = 0, h = (uint32_t)((key >> 9) * 2654435761u) & (REC_CAP - 1); i < REC_CAP; i++) {
        struct rec *r = &recs[(h + i) & (REC_CAP - 1)];
        if (r->key == key) return r;
        if (r->key == 0) return NULL;
    }
    return NULL;
}

static struct rec *rec_add(uint64_t key)
{
    for (uint32_t i = 0, h = (uint32_t)((key >> 9) * 2654435761u) & (REC_CAP - 1); i < REC_CAP; i++) {
        struct rec *r = &recs[(h + i) & (REC_CAP - 1)];
        if (r->key == 0 || r->key == 1) {
            r->key = key;
            return r;
        }
    }
    return NULL;
}

static uint64_t va_alloc(int phys, uint64_t size)
{
    /* Freed addresses come back first, as a real driver's do. */
    for (int i = freed_count - 1; i >= 0; i--) {
        if (freed[i].phys == phys && freed[i].size == size) {
            uint64_t va = freed[i].va;
            freed[i] = freed[--freed_count];
            return va;
        }
    }
    uint64_t align = size >= (2u << 20) ? (2u << 20) : 512;
    int slot = phys < 0 ? FAKE_MAX_GPUS : phys;
    if (next_va[slot] == 0) next_va[slot] = 0x100000000000ull + ((uint64_t)slot << 42);
    uint64_t va = (next_va[slot] + align - 1) / align * align;
    next_va[slot] = va + (size ? size : 1);
    return va;
}

static void va_free(int phys, uint64_t va, uint64_t size)
{
    if (freed_count < FREE_CAP) {
        freed[freed_count].va = va;
        freed[freed_count].size = size;
        freed[freed_count].phys = phys;
        freed_count++;
    }
}

static void parse_visible(void)
{
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (cvd == NULL) {
        for (int i = 0; i < fake_gpu_count; i++) visible[i] = i;
        visible_count = fake_gpu_count;
        return;
    }
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", cvd);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        while (*t == ' ') t++;
        int phys = -1;
        if (*t >= '0' && *t <= '9') {
            char *end;
            long v = strtol(t, &end, 10);
            if (*end == '\0' && v < fake_gpu_count) phys = (int)v;
        } else if (strncmp(t, "GPU-", 4) == 0) {
            for (int g = 0; g < fake_gpu_count; g++) {
                char u[41];
                fake_uuid_format(fake_gpus[g].uuid, u);
                if (strncmp(u, t, strlen(t)) == 0) {
                    if (phys >= 0) {
                        phys = -1; /* ambiguous prefix */
                        break;
                    }
                    phys = g;
                }
            }
        }
        for (int k = 0; k < visible_count && phys >= 0; k++)
            if (visible[k] == phys) phys = -1;
        /* Like the real driver: the list ends at the first invalid entry. */
        if (phys < 0) break;
        visible[visible_count++] = phys;
    }
}

static struct fctx *cur(void)
{
    return ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL;
}

static int valid_ctx(struct fctx *c)
{
    return c != NULL && c->magic == M_CTX && c->alive;
}

int fake_current_phys(void)
{
    struct fctx *c = cur();
    return valid_ctx(c) ? c->phys : -1;
}

#define NEED_INIT()                                                                                      \
    do {                                                                                                 \
        if (!__atomic_load_n(&inited, __ATOMIC_ACQUIRE)) return CUDA_ERROR_NOT_INITIALIZED;             \
    } while (0)
#define NEED_CTX(c)                                                                                      \
    struct fctx *c = cur();                                                                              \
    if (!valid_ctx(c)) return CUDA_ERROR_INVALID_CONTEXT

static int phys_of(CUdevice d)
{
    return d >= 0 && d < visible_count ? visible[d] : -1;
}

/* ---- init and devices ---------------------------------------------------- */
/* As the real driver does at cuInit: a process becomes an MPS client when
 * CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps) holds the control
 * daemon's "control" entry; CU_DEVICE_ATTRIBUTE_MPS_ENABLED then says 1. */
static int mps_client;

static void connect_mps(void)
{
    const char *pipes = getenv("CUDA_MPS_PIPE_DIRECTORY");
    char control[1100];
    snprintf(control, sizeof control, "%s/control", pipes != NULL && *pipes != '\0' ? pipes : "/tmp/nvidia-mps");
    mps_client = access(control, F_OK) == 0;
}

API CUresult cuInit(unsigned int flags)
{
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (fake_setup() != 0) return CUDA_ERROR_UNKNOWN;
    pthread_mutex_lock(&mu);
    if (!inited) {
        recs = calloc(REC_CAP, sizeof *recs);
        parse_visible();
        connect_mps();
        for (int g = 0; g < FAKE_MAX_GPUS; g++) {
            default_pool[g] = (struct fpool){.magic = M_POOL, .phys = g};
            current_pool[g] = &default_pool[g];
        }
        __atomic_store_n(&inited, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&mu);
    return visible_count > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

/* ---- test hooks: memory the interposer cannot see ------------------------- */
/* Take (or give back) fake GPU memory without any CUDA call libvgpu.so
 * hooks: it stands in for graph memory nodes, a device malloc heap, local
 * memory reserved at launch, or a program that bypasses the interposer.  It
 * counts in the card's capacity and in this process's NVML usage, exactly
 * like an allocation.  Found with dlsym(dlopen("libcuda.so.1"), ...).
 * ordinal is a CUDA ordinal (after CUDA_VISIBLE_DEVICES); cuInit is not
 * needed. */
API CUresult gpushards_fake_take_hidden(int ordinal, unsigned long long bytes)
{
    CUresult r = cuInit(0);
    if (r != CUDA_SUCCESS) return r;
    int g = ordinal >= 0 && ordinal < visible_count ? visible[ordinal] : -1;
    if (g < 0) return CUDA_ERROR_INVALID_DEVICE;
    return fake_phys_take(g, bytes) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

API CUresult gpushards_fake_give_hidden(int ordinal, unsigned long long bytes)
{
    CUresult r = cuInit(0);
    if (r != CUDA_SUCCESS) return r;
    int g = ordinal >= 0 && ordinal < visible_count ? visible[ordinal] : -1;
    if (g < 0) return CUDA_ERROR_INVALID_DEVICE;
    fake_phys_give(g, bytes);
    return CUDA_SUCCESS;
}

API CUresult cuDriverGetVersion(int *v)
{
    if (v == NULL) return CUDA_ERROR_INVALID_VALUE;
    *v = DRIVER_VERSION;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetCount(int *n)
{
    NEED_INIT();
    *n = visible_count;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
    NEED_INIT();
    if (ordinal < 0 || ordinal >= visible_count) return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
    NEED_INIT();
    if (phys_of(d) < 0) return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "%s", fake_gpus[phys_of(d)].name);
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d)
{
    NEED_INIT();
    if (phys_of(d) < 0) return CUDA_ERROR_INVALID_DEVICE;
    memcpy(u->bytes, fake_gpus[phys_of(d)].uuid, 16);
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice d)
{
    return cuDeviceGetUuid(u, d);
}

API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d)
{
    NEED_INIT();
    if (phys_of(d) < 0) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = fake_gpus[phys_of(d)].capacity;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice d)
{
    size_t b;
    CUresult r = cuDeviceTotalMem_v2(&b, d);
    if (r == CUDA_SUCCESS) *bytes = b > UINT32_MAX ? UINT32_MAX : (unsigned int)b;
    return r;
}

API CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute attr, CUdevice d)
{
    NEED_INIT();
    if (phys_of(d) < 0) return CUDA_ERROR_INVALID_DEVICE;
    switch (attr) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MPS_ENABLED: *v = mps_client; break;
    default: *v = 0; break;
    }
    return CUDA_SUCCESS;
}

/* ---- contexts -------------------------------------------------------------- */
static CUresult ctx_new(struct fctx **out, CUdevice d)
{
    int phys = phys_of(d);
    if (phys < 0) return CUDA_ERROR_INVALID_DEVICE;
    if (fake_phys_take(phys, fake_context_bytes) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    struct fctx *c = calloc(1, sizeof *c);
    *c = (struct fctx){.magic = M_CTX, .ordinal = d, .phys = phys, .alive = 1};
    *out = c;
    return CUDA_SUCCESS;
}

static void push(struct fctx *c)
{
    if (ctx_depth < 16) ctx_stack[ctx_depth++] = c;
}

API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice d)
{
    NEED_INIT();
    struct fctx *c;
    CUresult r = ctx_new(&c, d);
    if (r != CUDA_SUCCESS) return r;
    push(c);
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

API CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice d)
{
    return cuCtxCreate_v2(pctx, flags, d);
}

API CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *p, int n, unsigned int flags, CUdevice d)
{
    return cuCtxCreate_v2(pctx, flags, d);
}

API CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *p, unsigned int flags, CUdevice d)
{
    return cuCtxCreate_v2(pctx, flags, d);
}

static void drop_ctx_allocs(struct fctx *c);

API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    NEED_INIT();
    struct fctx *c = (struct fctx *)ctx;
    if (!valid_ctx(c) || c->primary) return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&mu);
    drop_ctx_allocs(c);
    pthread_mutex_unlock(&mu);
    c->alive = 0;
    fake_phys_give(c->phys, fake_context_bytes);
    for (int i = 0; i < ctx_depth; i++)
        if (ctx_stack[i] == c) ctx_stack[i] = NULL;
    while (ctx_depth > 0 && ctx_stack[ctx_depth - 1] == NULL) ctx_depth--;
    return CUDA_SUCCESS;
}

API CUresult cuCtxDestroy(CUcontext ctx)
{
    return cuCtxDestroy_v2(ctx);
}

API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice d)
{
    NEED_INIT();
    int phys = phys_of(d);
    if (phys < 0) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&mu);
    struct fctx *c = &primary[d];
    if (c->refs == 0) {
        if (fake_phys_take(phys, fake_context_bytes) != 0) {
            pthread_mutex_unlock(&mu);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        *c = (struct fctx){.magic = M_CTX, .ordinal = d, .phys = phys, .primary = 1, .alive = 1};
    }
    c->refs++;
    pthread_mutex_unlock(&mu);
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
    NEED_INIT();
    if (phys_of(d) < 0) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&mu);
    struct fctx *c = &primary[d];
    if (c->refs == 0) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (--c->refs == 0) {
        drop_ctx_allocs(c);
        c->alive = 0;
        fake_phys_give(c->phys, fake_context_bytes);
    }
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRelease(CUdevice d)
{
    return cuDevicePrimaryCtxRelease_v2(d);
}

API CUresult cuDevicePrimaryCtxReset_v2(CUdevice d)
{
    NEED_INIT();
    if (phys_of(d) < 0) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&mu);
    if (primary[d].refs > 0) drop_ctx_allocs(&primary[d]);
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxReset(CUdevice d)
{
    return cuDevicePrimaryCtxReset_v2(d);
}

API CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int *flags, int *active)
{
    NEED_INIT();
    if (phys_of(d) < 0) return CUDA_ERROR_INVALID_DEVICE;
    *flags = 0;
    *active = primary[d].refs > 0;
    return CUDA_SUCCESS;
}

API CUresult cuCtxSetCurrent(CUcontext ctx)
{
    NEED_INIT();
    if (ctx == NULL) {
        if (ctx_depth > 0) ctx_depth--;
        return CUDA_SUCCESS;
    }
    if (!valid_ctx((struct fctx *)ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth == 0) ctx_depth = 1;
    ctx_stack[ctx_depth - 1] = (struct fctx *)ctx;
    return CUDA_SUCCESS;
}

API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    NEED_INIT();
    *pctx = (CUcontext)cur();
    return CUDA_SUCCESS;
}

API CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    NEED_INIT();
    if (!valid_ctx((struct fctx *)ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    push((struct fctx *)ctx);
    return CUDA_SUCCESS;
}

API CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    NEED_INIT();
    if (ctx_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
    struct fctx *c = ctx_stack[--ctx_depth];
    if (pctx) *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

API CUresult cuCtxGetDevice(CUdevice *d)
{
    NEED_INIT();
    NEED_CTX(c);
    *d = c->ordinal;
    return CUDA_SUCCESS;
}

static void trim_all(void);

API CUresult cuCtxSynchronize(void)
{
    NEED_INIT();
    NEED_CTX(c);
    pthread_mutex_lock(&mu);
    trim_all();
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

/* ---- linear memory --------------------------------------------------------- */
static CUresult alloc_plain(CUdeviceptr *dptr, size_t bytes, int kind)
{
    NEED_CTX(c);
    if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    if (fake_phys_take(c->phys, bytes) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&mu);
    uint64_t va = va_alloc(c->phys, bytes);
    struct rec *r = rec_add(va);
    if (r == NULL) {
        pthread_mutex_unlock(&mu);
        fake_phys_give(c->phys, bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    r->size = bytes;
    r->phys = c->phys;
    r->kind = kind;
    r->pool = (struct fpool *)(void *)c; /* owner context, for context teardown */
    pthread_mutex_unlock(&mu);
    *dptr = va;
    return CUDA_SUCCESS;
}

API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes)
{
    NEED_INIT();
    return alloc_plain(dptr, bytes, K_PLAIN);
}

API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags)
{
    NEED_INIT();
    return alloc_plain(dptr, bytes, K_PLAIN);
}

static uint64_t pitch_align(void)
{
    uint64_t a;
    const char *v = getenv("GPUSHARDS_FAKE_PITCH_ALIGN");
    return v != NULL && fake_parse_size(v, &a) == 0 && a != 0 ? a : 512;
}

API CUresult cuMemAlloc(unsigned int *dptr, unsigned int bytes);

API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned int elem)
{
    NEED_INIT();
    if (elem != 4 && elem != 8 && elem != 16) return CUDA_ERROR_INVALID_VALUE;
    /* Rows aligned to 512 bytes, as the real driver did for 1000-byte rows
     * (GPUSHARDS_FAKE_PITCH_ALIGN: another alignment, to test a driver
     * that pads more than the interposer guesses). */
    uint64_t align = pitch_align();
    *pitch = (width + align - 1) / align * align;
    return alloc_plain(dptr, *pitch * height, K_PLAIN);
}

/* The legacy 32-bit ABI's pitched allocation. */
API CUresult cuMemAllocPitch(unsigned int *dptr, unsigned int *pitch, unsigned int width, unsigned int height,
                             unsigned int elem)
{
    NEED_INIT();
    if (elem != 4 && elem != 8 && elem != 16) return CUDA_ERROR_INVALID_VALUE;
    uint64_t align = pitch_align();
    uint64_t p = (width + align - 1) / align * align;
    if (p * height > UINT32_MAX) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = cuMemAlloc(dptr, (unsigned int)(p * height));
    if (r == CUDA_SUCCESS) *pitch = (unsigned int)p;
    return r;
}

static CUresult free_any(CUdeviceptr dptr)
{
    if (dptr == 0) return CUDA_SUCCESS;
    pthread_mutex_lock(&mu);
    struct rec *r = rec_find(dptr);
    if (r == NULL || r->kind == K_HOST) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct rec copy = *r;
    r->key = 1;
    if (copy.kind == K_ASYNC) {
        copy.pool->used -= copy.size;
        if (copy.pool->destroyed && copy.pool->phys >= 0) {
            fake_phys_give(copy.pool->phys, copy.pool->reserved - copy.pool->used);
            copy.pool->reserved = copy.pool->used;
        }
    }
    va_free(copy.phys, dptr, copy.size);
    pthread_mutex_unlock(&mu);
    if (copy.kind == K_PLAIN) fake_phys_give(copy.phys, copy.size);
    return CUDA_SUCCESS;
}

API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    NEED_INIT();
    return free_any(dptr);
}

API CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr dptr)
{
    NEED_INIT();
    pthread_mutex_lock(&mu);
    struct rec *r = rec_find(dptr);
    CUresult res = CUDA_ERROR_NOT_FOUND;
    if (r != NULL && r->kind != K_HOST) {
        if (base) *base = dptr;
        if (size) *size = r->size;
        res = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&mu);
    return res;
}

API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr)
{
    NEED_INIT();
    if (attr != CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) return CUDA_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&mu);
    struct rec *r = rec_find(ptr);
    int phys = r ? r->phys : -1;
    pthread_mutex_unlock(&mu);
    for (int d = 0; d < visible_count; d++)
        if (visible[d] == phys) {
            *(int *)data = d;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    NEED_INIT();
    NEED_CTX(c);
    uint64_t cap = fake_gpus[c->phys].capacity, used = fake_phys_used(c->phys) + fake_reserved_bytes;
    *total = cap;
    *free = used < cap ? cap - used : 0;
    return CUDA_SUCCESS;
}

API CUresult cuMemGetInfo(unsigned int *free, unsigned int *total)
{
    size_t f, t;
    CUresult r = cuMemGetInfo_v2(&f, &t);
    if (r == CUDA_SUCCESS) {
        *free = f > UINT32_MAX ? UINT32_MAX : (unsigned int)f;
        *total = t > UINT32_MAX ? UINT32_MAX : (unsigned int)t;
    }
    return r;
}

/* The CUDA 3.1 ABI: 32-bit device pointers, from a low range. */
API CUresult cuMemAlloc(unsigned int *dptr, unsigned int bytes)
{
    NEED_INIT();
    NEED_CTX(c);
    if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    if (fake_phys_take(c->phys, bytes) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&mu);
    uint64_t va = next_va32;
    next_va32 += (bytes + 511) / 512 * 512;
    struct rec *r = rec_add(va);
    r->size = bytes;
    r->phys = c->phys;
    r->kind = K_PLAIN;
    r->pool = (struct fpool *)(void *)c;
    pthread_mutex_unlock(&mu);
    *dptr = (unsigned int)va;
    return CUDA_SUCCESS;
}

API CUresult cuMemFree(unsigned int dptr)
{
    NEED_INIT();
    return free_any(dptr);
}

API CUresult cuMemAllocHost_v2(void **pp, size_t bytes)
{
    NEED_INIT();
    *pp = malloc(bytes ? bytes : 1);
    return *pp ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

API CUresult cuMemHostAlloc(void **pp, size_t bytes, unsigned int flags)
{
    return cuMemAllocHost_v2(pp, bytes);
}

API CUresult cuMemFreeHost(void *p)
{
    NEED_INIT();
    free(p);
    return CUDA_SUCCESS;
}

/* ---- stream-ordered pools ---------------------------------------------------- */
static uint64_t round_chunk(uint64_t v)
{
    return (v + fake_pool_chunk - 1) / fake_pool_chunk * fake_pool_chunk;
}

/* Give back whole chunks above max(used, keep), as the driver does at a
 * synchronisation (keep = release threshold) or on cuMemPoolTrimTo. */
static void trim(struct fpool *p, uint64_t keep)
{
    uint64_t target = round_chunk(p->used > keep ? p->used : keep);
    if (p->reserved > target) {
        if (p->phys >= 0) fake_phys_give(p->phys, p->reserved - target);
        p->reserved = target;
    }
}

static void trim_all(void)
{
    for (int g = 0; g < visible_count; g++) trim(&default_pool[visible[g]], default_pool[visible[g]].threshold);
    for (int i = 0; i < pool_count; i++)
        if (!pools[i]->destroyed) trim(pools[i], pools[i]->threshold);
}

static struct fctx *stream_ctx(CUstream s)
{
    struct fstream *st = (struct fstream *)s;
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) return cur();
    return st->magic == M_STREAM ? st->ctx : NULL;
}

static CUresult pool_alloc(CUdeviceptr *dptr, size_t bytes, struct fpool *p)
{
    if (p == NULL || p->magic != M_POOL || p->destroyed) return CUDA_ERROR_INVALID_VALUE;
    if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    if (fake_pool_jitter_us != 0) {
        static __thread unsigned seed;
        if (seed == 0) seed = (unsigned)(uintptr_t)&seed ^ (unsigned)getpid();
        if (rand_r(&seed) % 2 == 0) usleep((useconds_t)(rand_r(&seed) % fake_pool_jitter_us));
    }
    pthread_mutex_lock(&mu);
    uint64_t spare = p->reserved - p->used;
    if (spare < bytes) {
        uint64_t grow = round_chunk(bytes - spare);
        if (p->phys >= 0 && fake_phys_take(p->phys, grow) != 0) {
            pthread_mutex_unlock(&mu);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        p->reserved += grow;
    }
    p->used += bytes;
    if (p->reserved > p->reserved_high) p->reserved_high = p->reserved;
    if (p->used > p->used_high) p->used_high = p->used;
    uint64_t va = va_alloc(p->phys, bytes);
    struct rec *r = rec_add(va);
    r->size = bytes;
    r->phys = p->phys;
    r->kind = K_ASYNC;
    r->pool = p;
    pthread_mutex_unlock(&mu);
    *dptr = va;
    return CUDA_SUCCESS;
}

static int capture_alloc(CUdeviceptr *dptr, size_t bytes, CUstream s);

API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream s)
{
    NEED_INIT();
    struct fctx *c = stream_ctx(s);
    if (!valid_ctx(c)) return CUDA_ERROR_INVALID_CONTEXT;
    if (capture_alloc(dptr, bytes, s)) return CUDA_SUCCESS;
    return pool_alloc(dptr, bytes, current_pool[c->phys]);
}

API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUstream s)
{
    return cuMemAllocAsync(dptr, bytes, s);
}

API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream s)
{
    NEED_INIT();
    if (!valid_ctx(stream_ctx(s))) return CUDA_ERROR_INVALID_CONTEXT;
    return pool_alloc(dptr, bytes, (struct fpool *)pool);
}

API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream s)
{
    return cuMemAllocFromPoolAsync(dptr, bytes, pool, s);
}

API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
    NEED_INIT();
    struct fstream *cs = (struct fstream *)s;
    if (s != NULL && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD && cs->magic == M_STREAM && cs->capturing)
        return CUDA_SUCCESS; /* a free node in the captured graph */
    return free_any(dptr);
}

API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s)
{
    return cuMemFreeAsync(dptr, s);
}

API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice d)
{
    NEED_INIT();
    if (phys_of(d) < 0) return CUDA_ERROR_INVALID_DEVICE;
    *pool = (CUmemoryPool)&default_pool[phys_of(d)];
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice d)
{
    NEED_INIT();
    if (phys_of(d) < 0) return CUDA_ERROR_INVALID_DEVICE;
    *pool = (CUmemoryPool)current_pool[phys_of(d)];
    return CUDA_SUCCESS;
}

API CUresult cuDeviceSetMemPool(CUdevice d, CUmemoryPool pool)
{
    NEED_INIT();
    struct fpool *p = (struct fpool *)pool;
    if (phys_of(d) < 0 || p == NULL || p->magic != M_POOL || p->phys != phys_of(d)) return CUDA_ERROR_INVALID_VALUE;
    current_pool[phys_of(d)] = p;
    return CUDA_SUCCESS;
}

API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    NEED_INIT();
    if (props == NULL) return CUDA_ERROR_INVALID_VALUE;
    int phys = -1;
    if (props->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
        phys = phys_of(props->location.id);
        if (phys < 0) return CUDA_ERROR_INVALID_DEVICE;
    }
    pthread_mutex_lock(&mu);
    if (pool_count == 256) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct fpool *p = calloc(1, sizeof *p);
    *p = (struct fpool){.magic = M_POOL, .phys = phys};
    pools[pool_count++] = p;
    pthread_mutex_unlock(&mu);
    *pool = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    NEED_INIT();
    struct fpool *p = (struct fpool *)pool;
    if (p == NULL || p->magic != M_POOL || p->destroyed) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    p->destroyed = 1;
    /* Live allocations keep their memory until freed. */
    if (p->phys >= 0) fake_phys_give(p->phys, p->reserved - p->used);
    p->reserved = p->used;
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
    NEED_INIT();
    struct fpool *p = (struct fpool *)pool;
    if (p == NULL || p->magic != M_POOL) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    trim(p, keep);
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

static void unsafe_call(void);

API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    NEED_INIT();
    unsafe_call();
    struct fpool *p = (struct fpool *)pool;
    if (p == NULL || p->magic != M_POOL) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    cuuint64_t *v = value;
    CUresult r = CUDA_SUCCESS;
    switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *v = p->threshold; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *v = p->reserved; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *v = p->reserved_high; break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *v = p->used; break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *v = p->used_high; break;
    default: *(int *)value = 1; break;
    }
    pthread_mutex_unlock(&mu);
    return r;
}

API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    NEED_INIT();
    struct fpool *p = (struct fpool *)pool;
    if (p == NULL || p->magic != M_POOL) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    if (attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) p->threshold = *(cuuint64_t *)value;
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

API CUresult cuStreamCreate(CUstream *s, unsigned int flags)
{
    NEED_INIT();
    NEED_CTX(c);
    struct fstream *st = calloc(1, sizeof *st);
    st->magic = M_STREAM;
    st->ctx = c;
    *s = (CUstream)st;
    return CUDA_SUCCESS;
}

API CUresult cuStreamDestroy_v2(CUstream s)
{
    NEED_INIT();
    struct fstream *st = (struct fstream *)s;
    if (st == NULL || st->magic != M_STREAM) return CUDA_ERROR_INVALID_HANDLE;
    st->magic = 0;
    free(st);
    return CUDA_SUCCESS;
}

API CUresult cuStreamSynchronize(CUstream s)
{
    NEED_INIT();
    if (!valid_ctx(stream_ctx(s))) return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&mu);
    trim_all();
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

API CUresult cuStreamSynchronize_ptsz(CUstream s)
{
    return cuStreamSynchronize(s);
}

API CUresult cuStreamGetCtx(CUstream s, CUcontext *pctx)
{
    NEED_INIT();
    struct fctx *c = stream_ctx(s);
    if (!valid_ctx(c)) return CUDA_ERROR_INVALID_CONTEXT;
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

API CUresult cuStreamGetDevice(CUstream s, CUdevice *d)
{
    NEED_INIT();
    unsafe_call();
    struct fctx *c = stream_ctx(s);
    if (!valid_ctx(c)) return CUDA_ERROR_INVALID_CONTEXT;
    *d = c->ordinal;
    return CUDA_SUCCESS;
}

/* ---- virtual memory management ------------------------------------------------ */
static void vmm_maybe_free(struct fvmm *h)
{
    if (h->refs == 0 && h->maps == 0) {
        if (h->phys >= 0) fake_phys_give(h->phys, h->size);
        h->magic = 0;
        free(h);
    }
}

API CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop,
                                           CUmemAllocationGranularity_flags option)
{
    NEED_INIT();
    *g = 2u << 20;
    return CUDA_SUCCESS;
}

API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                         unsigned long long flags)
{
    NEED_INIT();
    if (prop == NULL || size == 0 || size % (2u << 20) != 0) return CUDA_ERROR_INVALID_VALUE;
    int phys = -1;
    if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
        phys = phys_of(prop->location.id);
        if (phys < 0) return CUDA_ERROR_INVALID_DEVICE;
        if (fake_phys_take(phys, size) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct fvmm *h = calloc(1, sizeof *h);
    *h = (struct fvmm){.magic = M_VMM, .phys = phys, .size = size, .refs = 1};
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
    return CUDA_SUCCESS;
}

API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    NEED_INIT();
    struct fvmm *h = (struct fvmm *)(uintptr_t)handle;
    pthread_mutex_lock(&mu);
    if (h == NULL || h->magic != M_VMM || h->refs == 0) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    h->refs--;
    vmm_maybe_free(h);
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
                                 unsigned long long flags)
{
    NEED_INIT();
    pthread_mutex_lock(&mu);
    *ptr = next_vmm_va;
    next_vmm_va += (size + (2u << 20) - 1) / (2u << 20) * (2u << 20);
    pthread_mutex_unlock(&mu);
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
    pthread_mutex_lock(&mu);
    if (h == NULL || h->magic != M_VMM || offset + size > h->size || map_count == MAP_CAP) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    maps[map_count++] = (struct mapping){.va = ptr, .size = size, .h = h};
    h->maps++;
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    NEED_INIT();
    pthread_mutex_lock(&mu);
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
    pthread_mutex_unlock(&mu);
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
    uint64_t a = (uint64_t)(uintptr_t)addr;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < map_count; i++) {
        if (a >= maps[i].va && a < maps[i].va + maps[i].size) {
            maps[i].h->refs++;
            *handle = (CUmemGenericAllocationHandle)(uintptr_t)maps[i].h;
            pthread_mutex_unlock(&mu);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&mu);
    return CUDA_ERROR_INVALID_VALUE;
}

/* ---- arrays ---------------------------------------------------------------- */
static uint64_t texel(CUarray_format f, unsigned ch)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: return ch;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF: return 2ull * ch;
    default: return 4ull * ch;
    }
}

static CUresult array_new(void **out, uint64_t bytes)
{
    NEED_CTX(c);
    if (bytes != 0 && fake_phys_take(c->phys, bytes) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    struct farray *a = calloc(1, sizeof *a);
    *a = (struct farray){.magic = M_ARRAY, .phys = c->phys, .bytes = bytes};
    *out = a;
    return CUDA_SUCCESS;
}

static uint64_t dim(uint64_t v)
{
    return v ? v : 1;
}

API CUresult cuArrayCreate_v2(CUarray *h, const CUDA_ARRAY_DESCRIPTOR *d)
{
    NEED_INIT();
    return array_new((void **)h, dim(d->Width) * dim(d->Height) * texel(d->Format, d->NumChannels));
}

API CUresult cuArray3DCreate_v2(CUarray *h, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    NEED_INIT();
    uint64_t b = (d->Flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING))
                     ? 0
                     : dim(d->Width) * dim(d->Height) * dim(d->Depth) * texel(d->Format, d->NumChannels);
    return array_new((void **)h, b);
}

API CUresult cuMipmappedArrayCreate(CUmipmappedArray *h, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int levels)
{
    NEED_INIT();
    uint64_t b = 0;
    int layered = (d->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) != 0;
    for (unsigned l = 0; l < (levels ? levels : 1); l++)
        b += dim(d->Width >> l) * (d->Height ? dim(d->Height >> l) : 1) *
             (d->Depth ? (layered ? d->Depth : dim(d->Depth >> l)) : 1) * texel(d->Format, d->NumChannels);
    return array_new((void **)h, b);
}

static CUresult array_free(void *h)
{
    struct farray *a = h;
    if (a == NULL || a->magic != M_ARRAY) return CUDA_ERROR_INVALID_HANDLE;
    if (a->bytes) fake_phys_give(a->phys, a->bytes);
    a->magic = 0;
    free(a);
    return CUDA_SUCCESS;
}

API CUresult cuArrayDestroy(CUarray h)
{
    NEED_INIT();
    return array_free(h);
}

API CUresult cuMipmappedArrayDestroy(CUmipmappedArray h)
{
    NEED_INIT();
    return array_free(h);
}

/* Context teardown frees its linear allocations (under mu). */
static void drop_ctx_allocs(struct fctx *c)
{
    for (uint32_t i = 0; i < REC_CAP; i++) {
        struct rec *r = &recs[i];
        if (r->key > 1 && r->kind == K_PLAIN && r->pool == (struct fpool *)(void *)c) {
            fake_phys_give(r->phys, r->size);
            r->key = 1;
        }
    }
}

/* ---- errors -------------------------------------------------------------------- */
API CUresult cuGetErrorString(CUresult e, const char **s)
{
    *s = e == CUDA_SUCCESS ? "no error" : e == CUDA_ERROR_OUT_OF_MEMORY ? "out of memory" : "fake driver error";
    return CUDA_SUCCESS;
}

API CUresult cuGetErrorName(CUresult e, const char **s)
{
    *s = e == CUDA_SUCCESS ? "CUDA_SUCCESS" : e == CUDA_ERROR_OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUDA_ERROR";
    return CUDA_SUCCESS;
}


/* ---- context limits --------------------------------------------------------
 * What the driver reserves for them, per context: the malloc heap and the
 * printf FIFO their size, the stack its size for every thread the device
 * can hold at once (132 SMs x 2048 threads on an H100: 1 KiB -> 264 MiB,
 * 16 KiB -> 4.1 GiB).  Defaults as the real driver's. */
#define FAKE_THREADS (132ull * 2048ull)
static const size_t limit_default[3] = {1024, 1u << 20, 8u << 20}; /* stack, printf FIFO, malloc heap */

static int limit_index(CUlimit l)
{
    return l == CU_LIMIT_STACK_SIZE ? 0 : l == CU_LIMIT_PRINTF_FIFO_SIZE ? 1 : l == CU_LIMIT_MALLOC_HEAP_SIZE ? 2 : -1;
}

static uint64_t limit_reserve(int k, size_t v)
{
    return k == 0 ? (uint64_t)v * FAKE_THREADS : (uint64_t)v;
}

API CUresult cuCtxGetLimit(size_t *value, CUlimit limit)
{
    NEED_INIT();
    NEED_CTX(c);
    int k = limit_index(limit);
    if (k < 0 || value == NULL) return CUDA_ERROR_INVALID_VALUE;
    *value = c->limits[k] ? c->limits[k] : limit_default[k];
    return CUDA_SUCCESS;
}

API CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    NEED_INIT();
    NEED_CTX(c);
    int k = limit_index(limit);
    if (k < 0) return CUDA_ERROR_INVALID_VALUE;
    size_t old = c->limits[k] ? c->limits[k] : limit_default[k];
    uint64_t was = limit_reserve(k, old), now = limit_reserve(k, value);
    if (now > was && fake_phys_take(c->phys, now - was) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    if (now < was) fake_phys_give(c->phys, was - now);
    c->limits[k] = value;
    return CUDA_SUCCESS;
}

/* ---- stream capture and graph memory ---------------------------------------
 * A capturing stream's cuMemAllocAsync records a memory allocation node (no
 * memory yet).  Graph memory becomes real when an instantiated graph is
 * uploaded or launched: the device's graph memory pool grows to what the
 * graph's allocation nodes need, and keeps it (even after the graph is
 * destroyed) until cuDeviceGraphMemTrim, as the real driver's does.  A call
 * that is not capture-safe (cuStreamGetDevice, cuMemPoolGetAttribute) while
 * a global-mode capture is under way invalidates it, as seen on an H100. */
enum { M_GRAPH = 0x6a6a6a6a, M_NODE = 0x4e4e4e4e, M_EXEC = 0xe8e8e8e8 };
#define GRAPH_NODES 64
struct fnode {
    uint32_t magic;
    struct fgraph *g;
    CUgraphNodeType type;
    uint64_t bytes;
    int ordinal;
    CUdeviceptr va;
};
struct fgraph {
    uint32_t magic;
    int n;
    struct fnode nodes[GRAPH_NODES];
};
struct fexec {
    uint32_t magic;
    int alive, launched;
    uint64_t need[FAKE_MAX_GPUS];
};
static int active_global_captures;
static uint64_t graph_reserved[FAKE_MAX_GPUS];
static struct fexec *execs[1024];
static int exec_count;
#define MAX_CAPTURING 64
static struct fstream *capturing_streams[MAX_CAPTURING];

static void unsafe_call(void)
{
    if (__atomic_load_n(&active_global_captures, __ATOMIC_ACQUIRE) == 0) return;
    pthread_mutex_lock(&mu);
    if (active_global_captures > 0)
        for (int i = 0; i < MAX_CAPTURING; i++)
            if (capturing_streams[i] != NULL && capturing_streams[i]->global_mode) capturing_streams[i]->invalidated = 1;
    pthread_mutex_unlock(&mu);
}

static struct fstream *real_stream(CUstream s)
{
    struct fstream *st = (struct fstream *)s;
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD || st->magic != M_STREAM) return NULL;
    return st;
}

static struct fnode *node_add(struct fgraph *g, CUgraphNodeType type)
{
    if (g->n >= GRAPH_NODES) return NULL;
    struct fnode *n = &g->nodes[g->n++];
    *n = (struct fnode){.magic = M_NODE, .g = g, .type = type};
    return n;
}

static int capture_alloc(CUdeviceptr *dptr, size_t bytes, CUstream s)
{
    struct fstream *st = real_stream(s);
    if (st == NULL || !st->capturing) return 0;
    pthread_mutex_lock(&mu);
    struct fnode *n = node_add(st->graph, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
    if (n != NULL) {
        n->bytes = bytes;
        n->ordinal = st->ctx->ordinal;
        n->va = va_alloc(st->ctx->phys, bytes);
        *dptr = n->va;
    } else {
        st->invalidated = 1;
        *dptr = 0;
    }
    pthread_mutex_unlock(&mu);
    return 1;
}

API CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode)
{
    NEED_INIT();
    struct fstream *st = real_stream(s);
    if (st == NULL) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    pthread_mutex_lock(&mu);
    CUresult r = CUDA_SUCCESS;
    int slot = -1;
    for (int i = 0; i < MAX_CAPTURING && slot < 0; i++)
        if (capturing_streams[i] == NULL) slot = i;
    if (st->capturing) r = CUDA_ERROR_ILLEGAL_STATE;
    else if (slot < 0) r = CUDA_ERROR_OUT_OF_MEMORY;
    else {
        st->capturing = 1;
        st->invalidated = 0;
        st->global_mode = mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
        st->graph = calloc(1, sizeof *st->graph);
        st->graph->magic = M_GRAPH;
        capturing_streams[slot] = st;
        if (st->global_mode) active_global_captures++;
    }
    pthread_mutex_unlock(&mu);
    return r;
}

API CUresult cuStreamBeginCapture(CUstream s)
{
    return cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

API CUresult cuStreamEndCapture(CUstream s, CUgraph *g)
{
    NEED_INIT();
    struct fstream *st = real_stream(s);
    if (st == NULL || g == NULL) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    if (!st->capturing) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_ILLEGAL_STATE;
    }
    st->capturing = 0;
    for (int i = 0; i < MAX_CAPTURING; i++)
        if (capturing_streams[i] == st) capturing_streams[i] = NULL;
    if (st->global_mode) active_global_captures--;
    CUresult r = CUDA_SUCCESS;
    if (st->invalidated) {
        free(st->graph);
        *g = NULL;
        r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    } else {
        *g = (CUgraph)st->graph;
    }
    st->graph = NULL;
    pthread_mutex_unlock(&mu);
    return r;
}

API CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status)
{
    NEED_INIT();
    if (status == NULL) return CUDA_ERROR_INVALID_VALUE;
    struct fstream *st = real_stream(s);
    if (st == NULL) {
        /* The legacy stream while a global capture is under way: an error
         * that invalidates the capture, as the real driver does. */
        if ((s == NULL || s == CU_STREAM_LEGACY) && __atomic_load_n(&active_global_captures, __ATOMIC_ACQUIRE) > 0) {
            unsafe_call();
            return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        }
        *status = CU_STREAM_CAPTURE_STATUS_NONE;
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&mu);
    *status = !st->capturing ? CU_STREAM_CAPTURE_STATUS_NONE
              : st->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

API CUresult cuGraphCreate(CUgraph *g, unsigned int flags)
{
    NEED_INIT();
    if (g == NULL || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    struct fgraph *fg = calloc(1, sizeof *fg);
    fg->magic = M_GRAPH;
    *g = (CUgraph)fg;
    return CUDA_SUCCESS;
}

API CUresult cuGraphDestroy(CUgraph g)
{
    struct fgraph *fg = (struct fgraph *)g;
    if (fg == NULL || fg->magic != M_GRAPH) return CUDA_ERROR_INVALID_VALUE;
    fg->magic = 0;
    free(fg);
    return CUDA_SUCCESS;
}

API CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                    CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    NEED_INIT();
    struct fgraph *fg = (struct fgraph *)g;
    if (fg == NULL || fg->magic != M_GRAPH || p == NULL || p->bytesize == 0 ||
        p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    int phys = phys_of(p->poolProps.location.id);
    if (phys < 0) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&mu);
    struct fnode *n = node_add(fg, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
    if (n != NULL) {
        n->bytes = p->bytesize;
        n->ordinal = p->poolProps.location.id;
        n->va = va_alloc(phys, p->bytesize);
        p->dptr = n->va;
    }
    pthread_mutex_unlock(&mu);
    if (n == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    *node = (CUgraphNode)n;
    return CUDA_SUCCESS;
}

API CUresult cuGraphAddMemFreeNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                   CUdeviceptr dptr)
{
    NEED_INIT();
    struct fgraph *fg = (struct fgraph *)g;
    if (fg == NULL || fg->magic != M_GRAPH) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    struct fnode *n = node_add(fg, CU_GRAPH_NODE_TYPE_MEM_FREE);
    if (n != NULL) n->va = dptr;
    pthread_mutex_unlock(&mu);
    if (n == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    *node = (CUgraphNode)n;
    return CUDA_SUCCESS;
}

API CUresult cuGraphGetNodes(CUgraph g, CUgraphNode *nodes, size_t *count)
{
    struct fgraph *fg = (struct fgraph *)g;
    if (fg == NULL || fg->magic != M_GRAPH || count == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (nodes == NULL) {
        *count = (size_t)fg->n;
        return CUDA_SUCCESS;
    }
    size_t n = *count < (size_t)fg->n ? *count : (size_t)fg->n;
    for (size_t i = 0; i < n; i++) nodes[i] = (CUgraphNode)&fg->nodes[i];
    *count = n;
    return CUDA_SUCCESS;
}

API CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType *type)
{
    struct fnode *n = (struct fnode *)node;
    if (n == NULL || n->magic != M_NODE || type == NULL) return CUDA_ERROR_INVALID_VALUE;
    *type = n->type;
    return CUDA_SUCCESS;
}

API CUresult cuGraphMemAllocNodeGetParams(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    struct fnode *n = (struct fnode *)node;
    if (n == NULL || n->magic != M_NODE || n->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC || p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memset(p, 0, sizeof *p);
    p->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p->poolProps.location.id = n->ordinal;
    p->bytesize = n->bytes;
    p->dptr = n->va;
    return CUDA_SUCCESS;
}

API CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph g, unsigned long long flags)
{
    NEED_INIT();
    struct fgraph *fg = (struct fgraph *)g;
    if (fg == NULL || fg->magic != M_GRAPH || exec == NULL) return CUDA_ERROR_INVALID_VALUE;
    struct fexec *e = calloc(1, sizeof *e);
    e->magic = M_EXEC;
    e->alive = 1;
    for (int i = 0; i < fg->n; i++)
        if (fg->nodes[i].type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) e->need[phys_of(fg->nodes[i].ordinal)] += fg->nodes[i].bytes;
    pthread_mutex_lock(&mu);
    int ok = exec_count < 1024;
    if (ok) execs[exec_count++] = e;
    pthread_mutex_unlock(&mu);
    if (!ok) {
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *exec = (CUgraphExec)e;
    return CUDA_SUCCESS;
}

API CUresult cuGraphInstantiateWithParams(CUgraphExec *exec, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    CUresult r = cuGraphInstantiateWithFlags(exec, g, p != NULL ? p->flags : 0);
    if (p != NULL) p->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
    return r;
}

/* The graph's memory becomes real: the pool grows to what it needs. */
static CUresult graph_make_real(CUgraphExec exec)
{
    NEED_INIT();
    struct fexec *e = (struct fexec *)exec;
    if (e == NULL || e->magic != M_EXEC || !e->alive) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    CUresult r = CUDA_SUCCESS;
    for (int g = 0; g < FAKE_MAX_GPUS && r == CUDA_SUCCESS; g++) {
        if (e->need[g] <= graph_reserved[g]) continue;
        if (fake_phys_take(g, e->need[g] - graph_reserved[g]) != 0) r = CUDA_ERROR_OUT_OF_MEMORY;
        else graph_reserved[g] = e->need[g];
    }
    if (r == CUDA_SUCCESS) e->launched = 1;
    pthread_mutex_unlock(&mu);
    return r;
}

API CUresult cuGraphUpload(CUgraphExec exec, CUstream s)
{
    return graph_make_real(exec);
}

API CUresult cuGraphLaunch(CUgraphExec exec, CUstream s)
{
    CUresult r = graph_make_real(exec);
    if (r == CUDA_SUCCESS) fake_launch_graph();
    return r;
}

API CUresult cuGraphUpload_ptsz(CUgraphExec exec, CUstream s)
{
    return graph_make_real(exec);
}

API CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s)
{
    CUresult r = graph_make_real(exec);
    if (r == CUDA_SUCCESS) fake_launch_graph();
    return r;
}

API CUresult cuGraphExecDestroy(CUgraphExec exec)
{
    struct fexec *e = (struct fexec *)exec;
    if (e == NULL || e->magic != M_EXEC || !e->alive) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    e->alive = 0;
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGraphMemTrim(CUdevice d)
{
    NEED_INIT();
    int g = phys_of(d);
    if (g < 0) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&mu);
    uint64_t keep = 0;
    for (int i = 0; i < exec_count; i++)
        if (execs[i]->alive && execs[i]->launched && execs[i]->need[g] > keep) keep = execs[i]->need[g];
    if (graph_reserved[g] > keep) {
        fake_phys_give(g, graph_reserved[g] - keep);
        graph_reserved[g] = keep;
    }
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetGraphMemAttribute(CUdevice d, CUgraphMem_attribute attr, void *value)
{
    NEED_INIT();
    int g = phys_of(d);
    if (g < 0 || value == NULL) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    *(cuuint64_t *)value = graph_reserved[g];
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

/* ---- cuGetProcAddress ---------------------------------------------------------
 * For a base name the driver returns the newest variant introduced at or
 * before the requested CUDA version; with
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM a _ptsz/_ptds variant if
 * there is one.  These versions are what driver 580 answered. */
API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int ver, cuuint64_t flags,
                                 CUdriverProcAddressQueryResult *status);
API CUresult cuGetProcAddress(const char *symbol, void **pfn, int ver, cuuint64_t flags);

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
    E("cuArrayCreate", 3020, cuArrayCreate_v2),
    E("cuArray3DCreate", 3020, cuArray3DCreate_v2),
    E("cuArrayDestroy", 2000, cuArrayDestroy),
    E("cuMipmappedArrayCreate", 5000, cuMipmappedArrayCreate),
    E("cuMipmappedArrayDestroy", 5000, cuMipmappedArrayDestroy),
    E("cuGetErrorString", 6000, cuGetErrorString),
    E("cuGetErrorName", 6000, cuGetErrorName),
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
