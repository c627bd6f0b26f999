/* fake_memory.c — memory of the fake libcuda.so.1 outside pools and VMM:
 * linear allocations (and their 32-bit and pitched forms), host memory,
 * arrays, cuMemGetInfo, and the table of allocation records the pools
 * share.  Device pointers are fake addresses (their bytes are mapped only
 * when something is copied into them: fake_copy.c); what they cost is taken
 * from the card's capacity (fake_phys_take), which fails with
 * CUDA_ERROR_OUT_OF_MEMORY past the card's free memory. */
#include <stdlib.h>
#include <sys/mman.h>

#include "fake_cuda.h"

#define REC_CAP (1u << 18)
static struct rec *recs;
static uint64_t next_va[FAKE_MAX_GPUS + 1], next_va32 = 0x10000000;
#define FREE_CAP 4096
static struct {
    uint64_t va, size;
    int phys;
} freed[FREE_CAP];
static int freed_count;

/* ---- bookkeeping (under fake_mu) --------------------------------------- */
int fake_records_init(void)
{
    recs = calloc(REC_CAP, sizeof *recs);
    return recs != NULL ? 0 : -1;
}

/* A slot's key: an address, or one of these (no allocation is ever at 0 or 1). */
#define EMPTY_KEY 0u
#define FREED_KEY 1u

static struct rec *rec_find(uint64_t key)
{
    /* Freeing 1 or looking up 0 would otherwise find a freed or empty slot. */
    if (key == EMPTY_KEY || key == FREED_KEY) return NULL;
    for (uint32_t i = 0, h = (uint32_t)((key >> 9) * 2654435761u) & (REC_CAP - 1); i < REC_CAP; i++) {
        struct rec *r = &recs[(h + i) & (REC_CAP - 1)];
        if (r->key == key) return r;
        if (r->key == EMPTY_KEY) return NULL;
    }
    return NULL;
}

struct rec *fake_rec_add(uint64_t key)
{
    for (uint32_t i = 0, h = (uint32_t)((key >> 9) * 2654435761u) & (REC_CAP - 1); i < REC_CAP; i++) {
        struct rec *r = &recs[(h + i) & (REC_CAP - 1)];
        if (r->key == EMPTY_KEY || r->key == FREED_KEY) {
            r->key = key;
            r->data = NULL;
            return r;
        }
    }
    return NULL;
}

void fake_rec_drop(struct rec *r)
{
    if (r->data != NULL) munmap(r->data, r->size);
    r->data = NULL;
    r->key = FREED_KEY;
}

struct rec *fake_rec_containing(uint64_t addr, uint64_t bytes)
{
    struct rec *r = rec_find(addr);
    /* An address inside an allocation: the table is keyed by the start, so
     * look at every record (copies at an offset are rare in tests). */
    for (uint32_t i = 0; r == NULL && addr > FREED_KEY && i < REC_CAP; i++) {
        struct rec *c = &recs[i];
        if (c->key > FREED_KEY && addr >= c->key && addr - c->key < c->size) r = c;
    }
    if (r == NULL || bytes > r->size - (addr - r->key)) return NULL;
    return r;
}

uint64_t fake_va_alloc(int phys, uint64_t size)
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

/* Context teardown frees its linear allocations. */
void fake_mem_drop_ctx(struct fctx *c)
{
    for (uint32_t i = 0; i < REC_CAP; i++) {
        struct rec *r = &recs[i];
        if (r->key > FREED_KEY && r->kind == K_PLAIN && r->owner.ctx == c) {
            fake_phys_give(r->phys, r->size);
            fake_rec_drop(r);
        } else if (r->key > FREED_KEY && r->kind == K_IPC && r->owner.ctx == c) {
            fake_ipc_drop(r);
        }
    }
}

/* ---- linear memory --------------------------------------------------------- */
/* Records bytes the context took from its card at va (fake_mu held); a full
 * table gives them back. */
static CUresult record_plain(struct fctx *c, uint64_t va, size_t bytes)
{
    struct rec *r = fake_rec_add(va);
    if (r == NULL) {
        fake_phys_give(c->phys, bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    r->size = bytes;
    r->phys = c->phys;
    r->kind = K_PLAIN;
    r->owner.ctx = c;
    return CUDA_SUCCESS;
}

static CUresult alloc_plain(CUdeviceptr *dptr, size_t bytes)
{
    NEED_CTX(c);
    if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    if (fake_phys_take(c->phys, bytes) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    fake_lock();
    uint64_t va = fake_va_alloc(c->phys, bytes);
    CUresult res = record_plain(c, va, bytes);
    fake_unlock();
    if (res != CUDA_SUCCESS) return res;
    *dptr = va;
    return CUDA_SUCCESS;
}

API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes)
{
    NEED_INIT();
    if (dptr == NULL) return CUDA_ERROR_INVALID_VALUE;
    return alloc_plain(dptr, bytes);
}

API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags)
{
    NEED_INIT();
    if (dptr == NULL) return CUDA_ERROR_INVALID_VALUE;
    return alloc_plain(dptr, bytes);
}

static uint64_t pitch_align(void)
{
    uint64_t a;
    const char *v = getenv("GPUSHARDS_FAKE_PITCH_ALIGN");
    return v != NULL && fake_parse_size(v, &a) == 0 && a != 0 ? a : 512;
}

API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned int elem)
{
    NEED_INIT();
    if (dptr == NULL || pitch == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (elem != 4 && elem != 8 && elem != 16) return CUDA_ERROR_INVALID_VALUE;
    /* Rows aligned to 512 bytes, as the real driver did for 1000-byte rows
     * (GPUSHARDS_FAKE_PITCH_ALIGN: another alignment, to test a driver
     * that pads more than the interposer guesses). */
    uint64_t align = pitch_align();
    *pitch = (width + align - 1) / align * align;
    return alloc_plain(dptr, *pitch * height);
}

/* The legacy 32-bit ABI's pitched allocation. */
API CUresult cuMemAllocPitch(unsigned int *dptr, unsigned int *pitch, unsigned int width, unsigned int height,
                             unsigned int elem)
{
    NEED_INIT();
    if (dptr == NULL || pitch == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (elem != 4 && elem != 8 && elem != 16) return CUDA_ERROR_INVALID_VALUE;
    uint64_t align = pitch_align();
    uint64_t p = (width + align - 1) / align * align;
    if (p * height > UINT32_MAX) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = cuMemAlloc(dptr, (unsigned int)(p * height));
    if (r == CUDA_SUCCESS) *pitch = (unsigned int)p;
    return r;
}

CUresult fake_mem_free(CUdeviceptr dptr)
{
    if (dptr == 0) return CUDA_SUCCESS;
    fake_lock();
    struct rec *r = rec_find(dptr);
    if (r == NULL || r->kind == K_IPC) { /* an import is closed, not freed */
        fake_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct rec copy = *r;
    fake_rec_drop(r);
    if (copy.kind == K_ASYNC) fake_pool_freed(copy.owner.pool, copy.size);
    va_free(copy.phys, dptr, copy.size);
    fake_unlock();
    if (copy.kind == K_PLAIN) fake_phys_give(copy.phys, copy.size);
    return CUDA_SUCCESS;
}

API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    NEED_INIT();
    return fake_mem_free(dptr);
}

API CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr dptr)
{
    NEED_INIT();
    fake_lock();
    struct rec *r = rec_find(dptr);
    CUresult res = CUDA_ERROR_NOT_FOUND;
    if (r != NULL) {
        if (base) *base = dptr;
        if (size) *size = r->size;
        res = CUDA_SUCCESS;
    }
    fake_unlock();
    return res;
}

API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr)
{
    NEED_INIT();
    if (attr != CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) return CUDA_ERROR_NOT_SUPPORTED;
    fake_lock();
    struct rec *r = rec_find(ptr);
    int phys = r ? r->phys : -1;
    fake_unlock();
    for (int d = 0; d < fake_visible_count(); d++)
        if (fake_phys_of(d) == phys) {
            *(int *)data = d;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    NEED_INIT();
    if (free == NULL || total == NULL) return CUDA_ERROR_INVALID_VALUE;
    NEED_CTX(c);
    uint64_t cap = fake_gpus[c->phys].capacity, used = fake_phys_used(c->phys) + fake_reserved_bytes;
    *total = cap;
    *free = used < cap ? cap - used : 0;
    return CUDA_SUCCESS;
}

API CUresult cuMemGetInfo(unsigned int *free, unsigned int *total)
{
    if (free == NULL || total == NULL) return CUDA_ERROR_INVALID_VALUE;
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
    if (dptr == NULL) return CUDA_ERROR_INVALID_VALUE;
    NEED_CTX(c);
    if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    if (fake_phys_take(c->phys, bytes) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    fake_lock();
    uint64_t va = next_va32;
    next_va32 += (bytes + 511) / 512 * 512;
    CUresult res = record_plain(c, va, bytes);
    fake_unlock();
    if (res != CUDA_SUCCESS) return res;
    *dptr = (unsigned int)va;
    return CUDA_SUCCESS;
}

API CUresult cuMemFree(unsigned int dptr)
{
    NEED_INIT();
    return fake_mem_free(dptr);
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

/* Host memory registered for the GPU (libvgpu.so's turns on the GPU wait on a
 * word of the ledger): the fake's "GPU" reads host memory as it is. */
API CUresult cuMemHostRegister_v2(void *p, size_t bytes, unsigned int flags)
{
    NEED_INIT();
    return p != NULL && bytes != 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuMemHostUnregister(void *p)
{
    NEED_INIT();
    return p != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *dptr, void *p, unsigned int flags)
{
    NEED_INIT();
    if (dptr == NULL || p == NULL || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

/* ---- arrays ---------------------------------------------------------------- */
enum { M_ARRAY = 0xa4a4a4a4 };
struct farray {
    uint32_t magic;
    int phys;
    uint64_t bytes;
};

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
    if (a == NULL) {
        if (bytes != 0) fake_phys_give(c->phys, bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
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
    if (h == NULL) return CUDA_ERROR_INVALID_VALUE;
    return array_new((void **)h, dim(d->Width) * dim(d->Height) * texel(d->Format, d->NumChannels));
}

API CUresult cuArray3DCreate_v2(CUarray *h, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    NEED_INIT();
    if (h == NULL) return CUDA_ERROR_INVALID_VALUE;
    uint64_t b = (d->Flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING))
                     ? 0
                     : dim(d->Width) * dim(d->Height) * dim(d->Depth) * texel(d->Format, d->NumChannels);
    return array_new((void **)h, b);
}

API CUresult cuMipmappedArrayCreate(CUmipmappedArray *h, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int levels)
{
    NEED_INIT();
    if (h == NULL) return CUDA_ERROR_INVALID_VALUE;
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
    FAKE_CALL();
    int g = fake_phys_of(ordinal);
    if (g < 0) return CUDA_ERROR_INVALID_DEVICE;
    return fake_phys_take(g, bytes) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

API CUresult gpushards_fake_give_hidden(int ordinal, unsigned long long bytes)
{
    CUresult r = cuInit(0);
    if (r != CUDA_SUCCESS) return r;
    FAKE_CALL();
    int g = fake_phys_of(ordinal);
    if (g < 0) return CUDA_ERROR_INVALID_DEVICE;
    fake_phys_give(g, bytes);
    return CUDA_SUCCESS;
}
