/* budget.c — reserve before allocate.  Each charge is one compare-and-swap
 * loop on the device's used counter in the shared region, checked against
 * the limit read at that moment (from the read-only limits file when the
 * agent mounted one, else the region), so every process of the container
 * sees one budget and the agent can move the limit at any time.
 * The slow path (reclaiming dead processes' memory, trimming pools) runs only
 * when a charge would fail. */
#include <unistd.h>

#include "vgpu.h"

int gs_mode;
static int my_slot = -1;

static struct gpushards_device *device(int dev)
{
    return &gs_region->devices[dev];
}

void gs_budget_reset_process(void)
{
    my_slot = -1;
}

/* A launch through libvgpu.so, in this process's slot (once a second at most:
 * the line is not dirtied on every launch).  Nothing before the process has a
 * slot: a process that launches has charged its context. */
void gs_budget_note_launch(uint64_t now_ns)
{
    int s = my_slot;
    if (GS_UNLIKELY(s < 0 || gs_region == NULL)) return;
    uint32_t sec = (uint32_t)(now_ns / 1000000000ull);
    uint32_t *at = &gs_region->slots[s].last_launch_s;
    if (__atomic_load_n(at, __ATOMIC_RELAXED) != sec) __atomic_store_n(at, sec, __ATOMIC_RELAXED);
}

static int slot(void)
{
    if (GS_UNLIKELY(my_slot < 0)) {
        /* Once per process (and once in each fork child). */
        int s = gs_region_claim_slot();
        if (s < 0) return -1;
        my_slot = s;
    }
    return my_slot;
}

/* The cap and the agent's real reading for a device: from the read-only
 * limits file when there is one, else the region's limit (real unknown).
 * -1 when the limits file has no entry for the GPU (refuse). */
static int budget_of(int dev, struct gs_dev_limits *l)
{
    if (gs_limits != NULL) return gs_limits_lookup(dev, l);
    l->limit = __atomic_load_n(&device(dev)->limit_bytes, __ATOMIC_ACQUIRE);
    l->real = 0;
    return 0;
}

/* Checked against max(charged, real): memory the interposer never saw
 * (lazily loaded kernels, local memory, a bypass) but the agent measured
 * through NVML shrinks what may still be allocated.  Zeroing the writable
 * used counter therefore gains nothing once real_bytes is set. */
static int try_charge(int dev, uint64_t bytes)
{
    struct gpushards_device *d = device(dev);
    uint64_t used = __atomic_load_n(&d->used_bytes, __ATOMIC_RELAXED);
    uint64_t next;
    for (;;) {
        struct gs_dev_limits l;
        if (budget_of(dev, &l) != 0) return -1;
        if (bytes > UINT64_MAX - used) return -1;
        next = used + bytes;
        uint64_t base = used > l.real ? used : l.real;
        if (l.limit != 0 && (bytes > l.limit || base > l.limit - bytes)) return -1;
        if (__atomic_compare_exchange_n(&d->used_bytes, &used, next, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            break;
    }
    uint64_t peak = __atomic_load_n(&d->peak_bytes, __ATOMIC_RELAXED);
    while (next > peak &&
           !__atomic_compare_exchange_n(&d->peak_bytes, &peak, next, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return 0;
}

/* Order matters for deaths: the device counter goes up before the process's
 * slot does, and comes down after it, so a process killed in between leaves
 * the device over-counted (safe) rather than under-counted. */
int gs_charge(int dev, uint64_t bytes)
{
    if (GS_UNLIKELY(gs_mode != GS_MODE_COUNTING)) return gs_mode == GS_MODE_PASSTHROUGH ? 0 : -1;
    if (GS_UNLIKELY(dev < 0 || dev >= (int)GPUSHARDS_MAX_DEVICES)) return -1;
    int s = slot();
    if (GS_UNLIKELY(s < 0)) return -1;
    if (GS_UNLIKELY(try_charge(dev, bytes) != 0)) {
        gs_region_reclaim_dead();
        gs_pools_reconcile(dev);
        if (try_charge(dev, bytes) != 0) {
            GS_INFO("refusing %llu bytes on GPU %d: %llu of %llu used", (unsigned long long)bytes, dev,
                    (unsigned long long)gs_used(dev), (unsigned long long)gs_limit(dev));
            return -1;
        }
    }
    __atomic_add_fetch(&gs_region->slots[s].used_bytes[dev], bytes, __ATOMIC_RELAXED);
    return 0;
}

/* Memory the driver has already handed out (a pool grew by more than the
 * allocation asked for): it is held whatever the limit says, so it is
 * counted, and later allocations are refused until usage falls. */
void gs_charge_force(int dev, uint64_t bytes)
{
    if (gs_mode != GS_MODE_COUNTING || dev < 0 || dev >= (int)GPUSHARDS_MAX_DEVICES || bytes == 0) return;
    int s = slot();
    if (s < 0) return;
    uint64_t next = __atomic_add_fetch(&device(dev)->used_bytes, bytes, __ATOMIC_ACQ_REL);
    uint64_t peak = __atomic_load_n(&device(dev)->peak_bytes, __ATOMIC_RELAXED);
    while (next > peak && !__atomic_compare_exchange_n(&device(dev)->peak_bytes, &peak, next, 1,
                                                       __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    __atomic_add_fetch(&gs_region->slots[s].used_bytes[dev], bytes, __ATOMIC_RELAXED);
}

static void sub_clamped(uint64_t *counter, uint64_t bytes)
{
    uint64_t cur = __atomic_load_n(counter, __ATOMIC_RELAXED);
    uint64_t next;
    do {
        next = cur > bytes ? cur - bytes : 0;
    } while (!__atomic_compare_exchange_n(counter, &cur, next, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
}

void gs_uncharge(int dev, uint64_t bytes)
{
    if (gs_mode != GS_MODE_COUNTING || dev < 0 || dev >= (int)GPUSHARDS_MAX_DEVICES || bytes == 0 || my_slot < 0)
        return;
    /* Never give back more than this process holds on the device: a
     * mistaken release must not eat into other processes' charges. */
    uint64_t *mine = &gs_region->slots[my_slot].used_bytes[dev];
    uint64_t cur = __atomic_load_n(mine, __ATOMIC_RELAXED);
    uint64_t take;
    do {
        take = cur < bytes ? cur : bytes;
    } while (!__atomic_compare_exchange_n(mine, &cur, cur - take, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
    if (take != bytes)
        GS_WARN("releasing %llu bytes on GPU %d but this process holds %llu", (unsigned long long)bytes, dev,
                (unsigned long long)take);
    sub_clamped(&device(dev)->used_bytes, take);
}

uint64_t gs_used(int dev)
{
    return __atomic_load_n(&device(dev)->used_bytes, __ATOMIC_RELAXED);
}

uint64_t gs_effective_used(int dev)
{
    uint64_t used = gs_used(dev);
    struct gs_dev_limits l;
    if (gs_limits != NULL && gs_limits_lookup(dev, &l) == 0 && l.real > used) return l.real;
    return used;
}

uint64_t gs_limit(int dev)
{
    struct gs_dev_limits l;
    if (budget_of(dev, &l) != 0) return 0;
    return l.limit;
}

/* With a limits file the region's writable fields are not read: the file's
 * value, else the environment's. */
uint64_t gs_context_bytes(int dev)
{
    uint64_t v = gs_limits != NULL ? gs_limits_context_bytes(dev)
                                   : __atomic_load_n(&device(dev)->context_bytes, __ATOMIC_RELAXED);
    return v != 0 ? v : gs_cfg.context_bytes;
}

/* 32 MiB: what a stream-ordered pool grows by on an H100 with driver 580
 * (measured), and the fake driver's default step. */
#define GS_DEFAULT_POOL_GROWTH (32ull << 20)

uint64_t gs_pool_growth_bytes(int dev)
{
    uint64_t v = gs_limits != NULL ? gs_limits_pool_growth_bytes(dev)
                                   : __atomic_load_n(&device(dev)->pool_growth_bytes, __ATOMIC_RELAXED);
    if (v == 0) v = gs_cfg.pool_growth_bytes;
    return v != 0 ? v : GS_DEFAULT_POOL_GROWTH;
}

int gs_budget_mark_ipc_importer(int holds)
{
    if (gs_mode != GS_MODE_COUNTING) return -1;
    int s = holds ? slot() : my_slot;
    return s < 0 ? -1 : gs_region_mark_ipc_importer(s, holds);
}

void gs_release_process(void)
{
    if (gs_mode == GS_MODE_COUNTING) gs_region_release_slot(my_slot);
    my_slot = -1;
}
