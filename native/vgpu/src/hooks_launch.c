/* hooks_launch.c — every way work is launched on a GPU (kernels,
 * cooperative kernels, the extended launch, each with its
 * per-thread-default-stream twin) passes compute.c's admission first;
 * graph launches do too, in hooks_graph.c. */
#include "vgpu.h"

#undef cuStreamSynchronize

/* The per-thread default stream, as cuda.h defines CU_STREAM_PER_THREAD. */
#define PT_STREAM ((CUstream)0x2)

#define REAL(ret, name, args) static ret(*real_##name) args
REAL(CUresult, cuLaunchKernel, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                CUstream, void **, void **));
REAL(CUresult, cuLaunchKernel_ptsz, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                     unsigned, CUstream, void **, void **));
REAL(CUresult, cuLaunchKernelEx, (const CUlaunchConfig *, CUfunction, void **, void **));
REAL(CUresult, cuLaunchKernelEx_ptsz, (const CUlaunchConfig *, CUfunction, void **, void **));
REAL(CUresult, cuLaunchCooperativeKernel, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                           unsigned, CUstream, void **));
REAL(CUresult, cuLaunchCooperativeKernel_ptsz, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                                unsigned, unsigned, CUstream, void **));
REAL(CUresult, cuCtxSynchronize_v2, (CUcontext));
REAL(CUresult, cuStreamSynchronize, (CUstream));
REAL(CUresult, cuStreamSynchronize_ptsz, (CUstream));

/* As hooks.h's ENTER, wake gate included (the process is initialised by then:
 * a launch follows a context, and before initialisation the gate reads zero). */
#define ENTER(real)                                                                                      \
    do {                                                                                                 \
        if (GS_UNLIKELY(gs_resolve_cuda() != 0)) return CUDA_ERROR_NOT_INITIALIZED;                      \
        if (GS_UNLIKELY(gs_suspended())) gs_wake_wait();                                                 \
        if (GS_UNLIKELY((real) == NULL)) return CUDA_ERROR_NOT_FOUND;                                    \
    } while (0)

static inline CUstream pt(CUstream s)
{
    return s == NULL ? PT_STREAM : s;
}

GS_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                  unsigned bz, unsigned shmem, CUstream s, void **params, void **extra)
{
    ENTER(real_cuLaunchKernel);
    void *t = gs_compute_admit(s);
    CUresult r = real_cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
    gs_compute_launched(t, s, r);
    return r;
}

GS_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                       unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
                                       void **extra)
{
    ENTER(real_cuLaunchKernel_ptsz);
    void *t = gs_compute_admit(pt(s));
    CUresult r = real_cuLaunchKernel_ptsz(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
    gs_compute_launched(t, pt(s), r);
    return r;
}

GS_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    ENTER(real_cuLaunchKernelEx);
    void *t = gs_compute_admit(config != NULL ? config->hStream : NULL);
    CUresult r = real_cuLaunchKernelEx(config, f, params, extra);
    gs_compute_launched(t, config != NULL ? config->hStream : NULL, r);
    return r;
}

GS_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    ENTER(real_cuLaunchKernelEx_ptsz);
    void *t = gs_compute_admit(pt(config != NULL ? config->hStream : NULL));
    CUresult r = real_cuLaunchKernelEx_ptsz(config, f, params, extra);
    gs_compute_launched(t, pt(config != NULL ? config->hStream : NULL), r);
    return r;
}

GS_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                             unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params)
{
    ENTER(real_cuLaunchCooperativeKernel);
    void *t = gs_compute_admit(s);
    CUresult r = real_cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params);
    gs_compute_launched(t, s, r);
    return r;
}

GS_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                                  unsigned by, unsigned bz, unsigned shmem, CUstream s,
                                                  void **params)
{
    ENTER(real_cuLaunchCooperativeKernel_ptsz);
    void *t = gs_compute_admit(pt(s));
    CUresult r = real_cuLaunchCooperativeKernel_ptsz(f, gx, gy, gz, bx, by, bz, shmem, s, params);
    gs_compute_launched(t, pt(s), r);
    return r;
}

/* A synchronize can end the shard's turn (compute.c, gs_compute_synced). */
GS_EXPORT CUresult cuCtxSynchronize(void)
{
    ENTER(gs_real_cuCtxSynchronize);
    CUresult r = gs_real_cuCtxSynchronize();
    if (r == CUDA_SUCCESS) gs_compute_synced();
    return r;
}

GS_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    ENTER(real_cuCtxSynchronize_v2);
    CUresult r = real_cuCtxSynchronize_v2(ctx);
    if (r == CUDA_SUCCESS) gs_compute_synced();
    return r;
}

GS_EXPORT CUresult cuStreamSynchronize(CUstream s)
{
    ENTER(real_cuStreamSynchronize);
    CUresult r = real_cuStreamSynchronize(s);
    if (r == CUDA_SUCCESS) gs_compute_synced();
    return r;
}

GS_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s)
{
    ENTER(real_cuStreamSynchronize_ptsz);
    CUresult r = real_cuStreamSynchronize_ptsz(s);
    if (r == CUDA_SUCCESS) gs_compute_synced();
    return r;
}

#define HOOK(name) {#name, (void *)name, (void **)&real_##name}
#define CALLS(name) {#name, NULL, (void **)&gs_real_##name}
const struct gs_hook gs_launch_hooks[] = {
    HOOK(cuLaunchKernel),
    HOOK(cuLaunchKernel_ptsz),
    HOOK(cuLaunchKernelEx),
    HOOK(cuLaunchKernelEx_ptsz),
    HOOK(cuLaunchCooperativeKernel),
    HOOK(cuLaunchCooperativeKernel_ptsz),
    {"cuCtxSynchronize", (void *)cuCtxSynchronize, (void **)&gs_real_cuCtxSynchronize},
    HOOK(cuCtxSynchronize_v2),
    HOOK(cuStreamSynchronize),
    HOOK(cuStreamSynchronize_ptsz),
    CALLS(cuEventCreate),
    CALLS(cuEventRecord),
    CALLS(cuEventQuery),
    CALLS(cuEventSynchronize),
    {"cuEventElapsedTime_v2", NULL, (void **)&gs_real_cuEventElapsedTime},
    {"cuEventElapsedTime", NULL, (void **)&gs_real_cuEventElapsedTime_v1},
    CALLS(cuMemHostRegister_v2),
    CALLS(cuMemHostGetDevicePointer_v2),
    CALLS(cuMemHostUnregister),
    CALLS(cuStreamWaitValue32_v2),
    CALLS(cuStreamQuery),
    CALLS(cuCtxSetCurrent),
};
const size_t gs_launch_hook_count = sizeof gs_launch_hooks / sizeof gs_launch_hooks[0];
