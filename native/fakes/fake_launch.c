/* fake_launch.c — kernel launches and events for the fake driver, with
 * simulated kernel time: every launch "runs" GPUSHARDS_FAKE_KERNEL_US
 * microseconds (default 100) after the process's previous one, and an
 * event completes when the work recorded before it would have finished.
 * The time each kernel runs is kept in the shared state (per process and
 * GPU) for the fake NVML's per-process utilization.  Enough for
 * libvgpu.so's compute admission (turns, in-flight bound) to be exercised
 * without a GPU. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "fake_cuda.h"

static uint64_t busy_until; /* when this process's queued work ends */

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static uint64_t kernel_ns(void)
{
    const char *v = getenv("GPUSHARDS_FAKE_KERNEL_US");
    return (v != NULL && *v ? strtoull(v, NULL, 10) : 100ull) * 1000ull;
}

static CUresult launch(void)
{
    uint64_t now = now_ns(), b = __atomic_load_n(&busy_until, __ATOMIC_RELAXED);
    uint64_t start = b > now ? b : now, end = start + kernel_ns();
    __atomic_store_n(&busy_until, end, __ATOMIC_RELAXED);
    /* NVML's per-process utilization reports the time it runs. */
    fake_busy_note(fake_current_phys(), start, end);
    return CUDA_SUCCESS;
}

/* A graph launch runs like one kernel launch (fake_graph.c calls it once the
 * graph is launched). */
FAKE_HIDDEN void fake_launch_graph(void)
{
    (void)launch();
}

API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                            unsigned bz, unsigned shmem, CUstream s, void **params, void **extra)
{
    return launch();
}
API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                 unsigned bz, unsigned shmem, CUstream s, void **params, void **extra)
{
    return launch();
}
API CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    return launch();
}
API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    return launch();
}
API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                       unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params)
{
    return launch();
}
API CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                            unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params)
{
    return launch();
}
struct fake_event {
    uint64_t done_at;
};

API CUresult cuEventCreate(CUevent *ev, unsigned int flags)
{
    if (ev == NULL) return CUDA_ERROR_INVALID_VALUE;
    struct fake_event *e = calloc(1, sizeof *e);
    if (e == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    *ev = (CUevent)e;
    return CUDA_SUCCESS;
}
API CUresult cuEventDestroy_v2(CUevent ev)
{
    free(ev);
    return CUDA_SUCCESS;
}
API CUresult cuEventRecord(CUevent ev, CUstream s)
{
    if (ev == NULL) return CUDA_ERROR_INVALID_HANDLE;
    /* On an idle GPU the event completes when it is recorded: its timestamp is now. */
    uint64_t b = __atomic_load_n(&busy_until, __ATOMIC_RELAXED), now = now_ns();
    ((struct fake_event *)ev)->done_at = b > now ? b : now;
    return CUDA_SUCCESS;
}
API CUresult cuEventQuery(CUevent ev)
{
    if (ev == NULL) return CUDA_ERROR_INVALID_HANDLE;
    return now_ns() >= ((struct fake_event *)ev)->done_at ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
API CUresult cuEventSynchronize(CUevent ev)
{
    if (ev == NULL) return CUDA_ERROR_INVALID_HANDLE;
    /* Until the event's time, a signal or not: a real synchronize does not return early. */
    uint64_t t = ((struct fake_event *)ev)->done_at;
    for (uint64_t now = now_ns(); now < t; now = now_ns()) {
        struct timespec d = {(time_t)((t - now) / 1000000000ull), (long)((t - now) % 1000000000ull)};
        nanosleep(&d, NULL);
    }
    return CUDA_SUCCESS;
}
/* cuda.h renames cuEventElapsedTime to its _v2; the fake exports both names. */
#undef cuEventElapsedTime
static CUresult elapsed(float *ms, CUevent start, CUevent end)
{
    if (ms == NULL || start == NULL || end == NULL) return CUDA_ERROR_INVALID_HANDLE;
    uint64_t a = ((struct fake_event *)start)->done_at, b = ((struct fake_event *)end)->done_at, now = now_ns();
    if (a > now || b > now) return CUDA_ERROR_NOT_READY;
    *ms = (float)((double)((int64_t)(b - a)) / 1e6);
    return CUDA_SUCCESS;
}
API CUresult cuEventElapsedTime_v2(float *ms, CUevent start, CUevent end)
{
    return elapsed(ms, start, end);
}
API CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end)
{
    return elapsed(ms, start, end);
}
