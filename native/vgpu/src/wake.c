/* wake.c — the wake gate and the bell (docs/interposer.md, "Elastic memory:
 * the wake gate" and "Ringing the agent").
 *
 * While the agent has marked the shard suspended in the limits file
 * (memory_state), every hooked CUDA call stops here before it reaches the
 * driver: the driver would hold it anyway while the process is locked or
 * checkpointed, but then nobody would know the process wants its GPU.  So
 * the call rings the agent's bell and waits until the shard is resident
 * again, which can take seconds (the memory moving back) or hours (no room
 * for it on its GPU).
 *
 * Ringing: the counters are updated through the mapping, then 8 zero bytes
 * are pwrite(2)n over the region's `bell`.  A write through a mapping raises
 * no inotify event; a pwrite does, so the agent's watch on the region file
 * hears the ring at once (its periodic read is the fallback).  Slow paths
 * only: a wait, or an allocation the driver refused (pressure.c). */
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include "vgpu.h"

/* How often a waiting call looks at memory_state, and rings again. */
#define GS_WAKE_POLL_NS 1000000ull
#define GS_WAKE_RING_AGAIN_NS 1000000000ull

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* The inotify-visible part of a ring. */
static void bell(void)
{
    static const uint64_t zero;
    int fd = open(gs_cfg.region_path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || pwrite(fd, &zero, sizeof zero, offsetof(struct gpushards_region_header, bell)) != sizeof zero)
        GS_DEBUG("cannot ring the bell of %s; the agent hears it at its next look", gs_cfg.region_path);
    if (fd >= 0) close(fd);
}

static void ring_wake(void)
{
    if (gs_region == NULL) return;
    __atomic_add_fetch(&gs_region->header.wake_requests, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&gs_region->header.wake_requested_ns, now_ns(), __ATOMIC_RELEASE);
    bell();
}

void gs_ring_pressure(int dev)
{
    if (gs_region == NULL || dev < 0 || dev >= (int)GPUSHARDS_MAX_DEVICES) return;
    struct gpushards_device *d = &gs_region->devices[dev];
    __atomic_add_fetch(&d->pressure_count, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&d->pressure_ns, now_ns(), __ATOMIC_RELEASE);
    bell();
}

/* This process's threads waiting at the gate, and when one of them last rang. */
static uint32_t waiters;
static uint64_t last_ring_ns;

void gs_wake_reset_process(void)
{
    waiters = 0;
    last_ring_ns = 0;
}

void gs_wake_wait(void)
{
    /* The first thread to find the shard suspended rings at once; any that
     * join it wait on its ring, and one of them rings again each second. */
    if (__atomic_add_fetch(&waiters, 1, __ATOMIC_ACQ_REL) == 1) {
        __atomic_store_n(&last_ring_ns, now_ns(), __ATOMIC_RELEASE);
        ring_wake();
        GS_INFO("the shard is suspended: this call waits for the agent to resume it (wake bell rung)");
    }
    while (gs_suspended()) {
        struct timespec d = {0, (long)GS_WAKE_POLL_NS};
        nanosleep(&d, NULL);
        uint64_t now = now_ns(), last = __atomic_load_n(&last_ring_ns, __ATOMIC_ACQUIRE);
        if (now - last >= GS_WAKE_RING_AGAIN_NS &&
            __atomic_compare_exchange_n(&last_ring_ns, &last, now, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            ring_wake();
    }
    __atomic_sub_fetch(&waiters, 1, __ATOMIC_ACQ_REL);
}
