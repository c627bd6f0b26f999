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
    FAKE_CALL();
    return launch();
}
API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                 unsigned bz, unsigned shmem, CUstream s, void **params, void **extra)
{
    FAKE_CALL();
    return launch();
}
API CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    FAKE_CALL();
    return launch();
}
API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    FAKE_CALL();
    return launch();
}
API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                       unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params)
{
    FAKE_CALL();
    return launch();
}
API CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                            unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params)
{
    FAKE_CALL();
    return launch();
}
/* A stream memory wait (libvgpu.so's turns on the GPU): the fake's work is
 * its caller's, so the caller is held until the word lets what follows run,
 * and that work starts no earlier than then. */
static int wait_passes(uint32_t word, uint32_t value, unsigned flags)
{
    switch (flags & 0x3u) {
    case CU_STREAM_WAIT_VALUE_GEQ:
        return (int32_t)(word - value) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ:
        return word == value;
    case CU_STREAM_WAIT_VALUE_AND:
        return (word & value) != 0;
    default: /* CU_STREAM_WAIT_VALUE_NOR */
        return ~(word | value) != 0;
    }
}

static int waiting; /* callers held in a wait: their stream's work has not run */

static CUresult wait_value(CUdeviceptr addr, uint32_t value, unsigned flags)
{
    /* Held at the gate while locked, but not a call under way while it
     * waits on the word: on a GPU the wait is the stream's, not the caller's. */
    {
        FAKE_CALL();
    }
    if (addr == 0 || addr % 4 != 0) return CUDA_ERROR_INVALID_VALUE;
    const uint32_t *word = (const uint32_t *)(uintptr_t)addr;
    __atomic_add_fetch(&waiting, 1, __ATOMIC_SEQ_CST);
    while (!wait_passes(__atomic_load_n(word, __ATOMIC_ACQUIRE), value, flags)) {
        struct timespec d = {0, 20000};
        nanosleep(&d, NULL);
    }
    __atomic_sub_fetch(&waiting, 1, __ATOMIC_SEQ_CST);
    uint64_t now = now_ns(), b = __atomic_load_n(&busy_until, __ATOMIC_RELAXED);
    if (b < now) __atomic_store_n(&busy_until, now, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

API CUresult cuStreamWaitValue32_v2(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
    return wait_value(addr, value, flags);
}
/* cuda.h renames cuStreamWaitValue32 to its _v2; the fake exports both names. */
#undef cuStreamWaitValue32
CUresult cuStreamWaitValue32(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned int flags);
API CUresult cuStreamWaitValue32(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
    return wait_value(addr, value, flags);
}

/* NOT_READY while the process's simulated kernels run, or a caller is held
 * in a wait (on a GPU, work queued behind the wait). */
API CUresult cuStreamQuery(CUstream s)
{
    FAKE_CALL();
    if (__atomic_load_n(&waiting, __ATOMIC_SEQ_CST) > 0) return CUDA_ERROR_NOT_READY;
    return now_ns() >= __atomic_load_n(&busy_until, __ATOMIC_RELAXED) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

API CUresult cuStreamQuery_ptsz(CUstream s)
{
    return cuStreamQuery(s);
}

struct fake_event {
    uint64_t done_at;
};

API CUresult cuEventCreate(CUevent *ev, unsigned int flags)
{
    FAKE_CALL();
    if (ev == NULL) return CUDA_ERROR_INVALID_VALUE;
    struct fake_event *e = calloc(1, sizeof *e);
    if (e == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    *ev = (CUevent)e;
    return CUDA_SUCCESS;
}
API CUresult cuEventDestroy_v2(CUevent ev)
{
    FAKE_CALL();
    free(ev);
    return CUDA_SUCCESS;
}
API CUresult cuEventRecord(CUevent ev, CUstream s)
{
    FAKE_CALL();
    if (ev == NULL) return CUDA_ERROR_INVALID_HANDLE;
    /* On an idle GPU the event completes when it is recorded: its timestamp is now. */
    uint64_t b = __atomic_load_n(&busy_until, __ATOMIC_RELAXED), now = now_ns();
    ((struct fake_event *)ev)->done_at = b > now ? b : now;
    return CUDA_SUCCESS;
}
API CUresult cuEventQuery(CUevent ev)
{
    FAKE_CALL();
    if (ev == NULL) return CUDA_ERROR_INVALID_HANDLE;
    return now_ns() >= ((struct fake_event *)ev)->done_at ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
API CUresult cuEventSynchronize(CUevent ev)
{
    FAKE_CALL();
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
    FAKE_CALL();
    if (ms == NULL || start == NULL || end == NULL) return CUDA_ERROR_INVALID_HANDLE;
    uint64_t a = ((struct fake_event *)start)->done_at, b = ((struct fake_event *)end)->done_at, now = now_ns();
    if (a > now || b > now) return CUDA_ERROR_NOT_READY;
    *ms = (float)((double)((int64_t)(b - a)) / 1e6);
    return CUDA_SUCCESS;
}
API CUresult cuEventElapsedTime_v2(float *ms, CUevent start, CUevent end)
{
    if (ms == NULL) return CUDA_ERROR_INVALID_VALUE;
    return elapsed(ms, start, end);
}
API CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end)
{
    if (ms == NULL) return CUDA_ERROR_INVALID_VALUE;
    return elapsed(ms, start, end);
}
