/* pressure.c — a neighbour is never harmed (issue #31; docs/interposer.md,
 * "A neighbour's pressure").
 *
 * When the real driver refuses with CUDA_ERROR_OUT_OF_MEMORY an allocation
 * that the shard's budget allowed (the charge went through: under its cap by
 * max(charged, the agent's real reading)), the memory missing is memory
 * someone else holds beyond what placement promised: a process that ignores
 * the interposer and grabbed the card's free memory, which the agent's fence
 * kills within its sampling interval.  So the refusal is not passed on at
 * once: the region's pressure counters for that GPU are rung (the agent then
 * samples that GPU at once), and the call is retried with a short backoff
 * (1, 2, 4 ... ms, at most 20 ms apart) for up to the limits file's
 * pressure_wait_ms (the fence's worst case plus the driver's teardown), the
 * charge held meanwhile.  Then the driver's answer stands, and the caller
 * rolls its charge back as for any refusal.
 *
 * Every allocation path calls gs_pressure_retry() from inside the branch that
 * handles a failed driver call, so a call the driver grants costs nothing. */
#include <time.h>

#include "vgpu.h"

#define GS_PRESSURE_FIRST_NS 1000000ull
#define GS_PRESSURE_MOST_NS 20000000ull

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

CUresult gs_pressure_retry(int dev, CUresult refused, gs_again_fn again, void *arg)
{
    /* Only what the budget allowed on a capped GPU: past the cap the charge
     * itself refuses, and an uncapped GPU was promised nothing. */
    if (refused != CUDA_ERROR_OUT_OF_MEMORY || gs_mode != GS_MODE_COUNTING || dev < 0 ||
        dev >= (int)GPUSHARDS_MAX_DEVICES || gs_limit(dev) == 0)
        return refused;
    gs_ring_pressure(dev);
    uint32_t wait_ms = gs_limits_pressure_wait_ms();
    if (wait_ms == 0) return refused;
    uint64_t start = now_ns(), deadline = start + (uint64_t)wait_ms * 1000000ull, step = GS_PRESSURE_FIRST_NS;
    CUresult r = refused;
    for (uint64_t now = start; r == CUDA_ERROR_OUT_OF_MEMORY && now < deadline; now = now_ns()) {
        uint64_t pause = step < deadline - now ? step : deadline - now;
        struct timespec d = {(time_t)(pause / 1000000000ull), (long)(pause % 1000000000ull)};
        nanosleep(&d, NULL);
        step = step * 2 < GS_PRESSURE_MOST_NS ? step * 2 : GS_PRESSURE_MOST_NS;
        r = again(arg);
    }
    unsigned long long ms = (unsigned long long)((now_ns() - start) / 1000000ull);
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        GS_WARN("the driver refused an allocation on GPU %d inside the shard's cap for %llu ms (someone else holds "
                "the memory); giving up", dev, ms);
    else
        GS_INFO("an allocation on GPU %d refused by the driver inside the shard's cap went through after %llu ms",
                dev, ms);
    return r;
}
