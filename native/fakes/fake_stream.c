/* fake_stream.c — streams of the fake libcuda.so.1.  Stream work is
 * synchronous, so a stream is its context and its capture state
 * (fake_graph.c); synchronising one trims the pools as the real driver's
 * synchronisation does. */
#include <stdlib.h>

#include "fake_cuda.h"

enum { M_STREAM = 0x57575757 };

struct fctx *fake_stream_ctx(CUstream s)
{
    struct fstream *st = (struct fstream *)s;
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) return fake_ctx_current();
    return st->magic == M_STREAM ? st->ctx : NULL;
}

struct fstream *fake_stream_real(CUstream s)
{
    struct fstream *st = (struct fstream *)s;
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD || st->magic != M_STREAM) return NULL;
    return st;
}

API CUresult cuStreamCreate(CUstream *s, unsigned int flags)
{
    NEED_INIT();
    if (s == NULL) return CUDA_ERROR_INVALID_VALUE;
    NEED_CTX(c);
    struct fstream *st = calloc(1, sizeof *st);
    if (st == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
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
    if (!fake_ctx_valid(fake_stream_ctx(s))) return CUDA_ERROR_INVALID_CONTEXT;
    fake_pools_synchronize();
    return CUDA_SUCCESS;
}

API CUresult cuStreamSynchronize_ptsz(CUstream s)
{
    return cuStreamSynchronize(s);
}

API CUresult cuStreamGetCtx(CUstream s, CUcontext *pctx)
{
    NEED_INIT();
    if (pctx == NULL) return CUDA_ERROR_INVALID_VALUE;
    struct fctx *c = fake_stream_ctx(s);
    if (!fake_ctx_valid(c)) return CUDA_ERROR_INVALID_CONTEXT;
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

API CUresult cuStreamGetDevice(CUstream s, CUdevice *d)
{
    NEED_INIT();
    if (d == NULL) return CUDA_ERROR_INVALID_VALUE;
    fake_capture_unsafe_call();
    struct fctx *c = fake_stream_ctx(s);
    if (!fake_ctx_valid(c)) return CUDA_ERROR_INVALID_CONTEXT;
    *d = c->ordinal;
    return CUDA_SUCCESS;
}

/* Work is synchronous: an event is complete once recorded, so a wait on one is already met. */
API CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags)
{
    NEED_INIT();
    if (e == NULL) return CUDA_ERROR_INVALID_HANDLE;
    return fake_ctx_valid(fake_stream_ctx(s)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

API CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int flags)
{
    return cuStreamWaitEvent(s, e, flags);
}

/* The host function runs in the caller's thread, after the stream's (finished) work. */
API CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data)
{
    NEED_INIT();
    if (fn == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (!fake_ctx_valid(fake_stream_ctx(s))) return CUDA_ERROR_INVALID_CONTEXT;
    fn(data);
    return CUDA_SUCCESS;
}

API CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void *data)
{
    return cuLaunchHostFunc(s, fn, data);
}
