/* fake_copy.c — copies and sets of the fake libcuda.so.1, so that a test can
 * write data into "device memory" and read it back (across a checkpoint and
 * restore, for instance).  An allocation's bytes are host memory, mapped at
 * the first copy or set into it (until then it reads as zeros), and go with
 * the allocation when it is freed.  Linear and stream-ordered allocations
 * only: VMM mappings and arrays have no bytes here.  Stream work is
 * synchronous, so the Async forms finish before they return. */
#include <string.h>
#include <sys/mman.h>

#include "fake_cuda.h"

/* Under fake_mu: the bytes of r, mapped on first use; NULL when there is no memory for them. */
static unsigned char *bytes_of(struct rec *r)
{
    if (r->data == NULL) {
        void *m = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m != MAP_FAILED) r->data = m;
    }
    return r->data;
}

/* One side of a copy: an allocation (device memory) or, with unified
 * addressing, anything else is host memory. */
struct side {
    struct rec *r;
    uint64_t offset;
    unsigned char *host;
};

static int find(uint64_t addr, size_t n, int host_allowed, struct side *out)
{
    out->r = fake_rec_containing(addr, n);
    out->offset = out->r != NULL ? addr - out->r->key : 0;
    out->host = (unsigned char *)(uintptr_t)addr;
    return out->r != NULL || (host_allowed && addr != 0) ? 0 : -1;
}

static CUresult copy(uint64_t dst, int dst_host_allowed, uint64_t src, int src_host_allowed, size_t n)
{
    if (n == 0) return CUDA_SUCCESS;
    fake_lock();
    struct side d, s;
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    if (find(dst, n, dst_host_allowed, &d) == 0 && find(src, n, src_host_allowed, &s) == 0) {
        unsigned char *to = d.r != NULL ? bytes_of(d.r) : d.host;
        res = CUDA_ERROR_OUT_OF_MEMORY;
        if (to != NULL) {
            to += d.r != NULL ? d.offset : 0;
            if (s.r == NULL) memmove(to, s.host, n);
            else if (s.r->data == NULL) memset(to, 0, n);
            else memmove(to, s.r->data + s.offset, n);
            res = CUDA_SUCCESS;
        }
    }
    fake_unlock();
    return res;
}

static CUresult set(uint64_t dst, const void *value, size_t width, size_t n)
{
    if (n == 0) return CUDA_SUCCESS;
    if (n > SIZE_MAX / width) return CUDA_ERROR_INVALID_VALUE;
    fake_lock();
    struct side d;
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    if (find(dst, n * width, 0, &d) == 0) {
        unsigned char *to = bytes_of(d.r);
        res = CUDA_ERROR_OUT_OF_MEMORY;
        if (to != NULL) {
            to += d.offset;
            for (size_t i = 0; i < n; i++) memcpy(to + i * width, value, width);
            res = CUDA_SUCCESS;
        }
    }
    fake_unlock();
    return res;
}

#define HOST(p) ((uint64_t)(uintptr_t)(p))

API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
    NEED_INIT();
    return src == NULL ? CUDA_ERROR_INVALID_VALUE : copy(dst, 0, HOST(src), 1, n);
}
API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
    NEED_INIT();
    return dst == NULL ? CUDA_ERROR_INVALID_VALUE : copy(HOST(dst), 1, src, 0, n);
}
API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    NEED_INIT();
    return copy(dst, 0, src, 0, n);
}
API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    NEED_INIT();
    return copy(dst, 1, src, 1, n);
}
API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    return cuMemcpyHtoD_v2(dst, src, n);
}
API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    return cuMemcpyDtoH_v2(dst, src, n);
}
API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    return cuMemcpyDtoD_v2(dst, src, n);
}
API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    return cuMemcpy(dst, src, n);
}
API CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n)
{
    NEED_INIT();
    return set(dst, &v, 1, n);
}
API CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int v, size_t n)
{
    NEED_INIT();
    return dst % 4 != 0 ? CUDA_ERROR_INVALID_VALUE : set(dst, &v, 4, n);
}
API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s)
{
    return cuMemsetD8_v2(dst, v, n);
}
API CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n, CUstream s)
{
    return cuMemsetD32_v2(dst, v, n);
}

/* The per-thread default stream's entry points (cuGetProcAddress hands them
 * out for CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM): the same work. */
API CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return cuMemcpy(dst, src, n);
}
API CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    return cuMemcpy(dst, src, n);
}
API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n)
{
    return cuMemcpyHtoD_v2(dst, src, n);
}
API CUresult cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n)
{
    return cuMemcpyDtoH_v2(dst, src, n);
}
API CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return cuMemcpyDtoD_v2(dst, src, n);
}
API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    return cuMemcpyHtoD_v2(dst, src, n);
}
API CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    return cuMemcpyDtoH_v2(dst, src, n);
}
API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    return cuMemcpyDtoD_v2(dst, src, n);
}
API CUresult cuMemsetD8_v2_ptds(CUdeviceptr dst, unsigned char v, size_t n)
{
    return cuMemsetD8_v2(dst, v, n);
}
API CUresult cuMemsetD32_v2_ptds(CUdeviceptr dst, unsigned int v, size_t n)
{
    return cuMemsetD32_v2(dst, v, n);
}
API CUresult cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char v, size_t n, CUstream s)
{
    return cuMemsetD8_v2(dst, v, n);
}
API CUresult cuMemsetD32Async_ptsz(CUdeviceptr dst, unsigned int v, size_t n, CUstream s)
{
    return cuMemsetD32_v2(dst, v, n);
}
