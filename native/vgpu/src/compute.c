/* compute.c — a shard's compute share: turns on a per-GPU ledger shared by
 * every shard of the host (gpushards_ledger.h says how turns are handed
 * out; compute_internal.h lists the other parts).  Launch hooks call
 * gs_compute_admit() before and gs_compute_launched() after each launch.
 * The hot path of a shard that holds the turn is a clock read (vDSO), one
 * load and a compare. */
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "compute_internal.h"

CUresult (*gs_real_cuEventCreate)(CUevent *, unsigned int);
CUresult (*gs_real_cuEventRecord)(CUevent, CUstream);
CUresult (*gs_real_cuEventQuery)(CUevent);
CUresult (*gs_real_cuEventSynchronize)(CUevent);
CUresult (*gs_real_cuCtxSynchronize)(void);

/* We took the turn from a holder that still had work queued: wait until it
 * has drained (it drains as soon as it sees the turn gone, then waits, which
 * its wait heartbeat shows), has been idle, or one slice has passed (it
 * died, or sits in a long CPU section).  Bound by time, a holder publishes
 * when its queue should end: past that (and no launch since), the GPU is
 * taken to be clean, and the wait lasts at least until then.  The drain is
 * its GPU time: charged to it, not to us. */
static void await_handover(struct gpushards_ledger *L, unsigned h, uint64_t taken)
{
    struct gpushards_ledger_member *o = &L->members[h - 1];
    uint64_t now = taken, limit = taken + gs_cc.slice_ns;
    uint64_t until = __atomic_load_n(&o->inflight_until_ns, __ATOMIC_RELAXED);
    if (until != 0 && until + gs_cc.idle_ns > limit) limit = until + gs_cc.idle_ns;
    if (limit > taken + 4 * gs_cc.slice_ns) limit = taken + 4 * gs_cc.slice_ns;
    if (!gs_cc.handover_wait) limit = taken; /* MPS: our kernels share SMs with its leftovers */
    for (;;) {
        uint64_t hb = __atomic_load_n(&o->wait_hb_ns, __ATOMIC_ACQUIRE);
        uint64_t last = __atomic_load_n(&o->last_kernel_ns, __ATOMIC_RELAXED);
        int idle = last + gs_cc.idle_ns < now && __atomic_load_n(&o->inflight_ns, __ATOMIC_RELAXED) == 0;
        until = __atomic_load_n(&o->inflight_until_ns, __ATOMIC_RELAXED);
        int done = until != 0 && now >= until + 20000ull && last < taken;
        if (hb >= taken || idle || done || now >= limit) break;
        struct timespec ts = {0, 10000};
        nanosleep(&ts, NULL);
        now = gs_now_ns();
    }
    if (now > taken) gs_compute_charge(L, h, taken, now, UINT64_MAX);
    __atomic_store_n(&L->since_ns, now, __ATOMIC_RELEASE);
    if (gs_cc.stats) { gs_cst.handovers++; gs_cst.handover_waits_us += (now - taken) / 1000u; }
}

/* The turn did not come within MAX_WAIT_NS while we were entitled to take
 * it: launch without turns for a while rather than stall on a ledger that a
 * process outside libvgpu.so holds. */
static void give_up_waiting(struct cdev *c, struct gpushards_ledger_member *e, uint64_t now)
{
    c->ungoverned_until = now + UNGOVERNED_NS;
    __atomic_store_n(&e->wait_hb_ns, 0, __ATOMIC_RELAXED);
    gs_compute_gate_open(c);
    if (gs_cc.stats) gs_cst.gave_up++;
    gs_log(GS_LOG_WARN, "no compute turn for %llu ms on GPU %d: launching without turns for %llu s",
           MAX_WAIT_NS / 1000000ull, (int)(c - gs_cdevs), UNGOVERNED_NS / 1000000000ull);
}

/* Our share and mode as the agent's file (or the environment) gives them
 * now, in our entry: read at every turn boundary (taking a turn or renewing
 * a lease), so that a live change takes effect at the next one. */
static void publish_share(struct cdev *c, uint64_t now)
{
    struct gpushards_ledger_member *e = &c->L->members[c->m];
    uint32_t share, mode;
    gs_compute_share_of(c, &share, &mode);
    __atomic_store_n(&e->share_permille, share, __ATOMIC_RELAXED);
    __atomic_store_n(&e->mode, mode, __ATOMIC_RELAXED);
    __atomic_store_n(&e->seen_ns, now, __ATOMIC_RELAXED);
}

/* Our lease (turn word t) is over: renew it unless somebody is owed the
 * GPU; 1 when renewed.  Otherwise hand it over (turn word 0), after our
 * queue has drained when turns wait on the CPU: the next holder gets the GPU
 * clean.  On the GPU the next holder's gate opens at once and ours, shut,
 * stops our queue at its next wait, so nothing is drained (the launch that asks
 * returns at once). */
static int renew_or_release(struct cdev *c, uint64_t t, uint64_t now)
{
    struct gpushards_ledger *L = c->L;
    unsigned m = (unsigned)c->m, me = m + 1;
    uint64_t end = GPUSHARDS_TURN_END_US(t) * 1000ull;
    uint64_t gen = GPUSHARDS_TURN_GEN(t) + 1;
    publish_share(c, now);
    if (gs_compute_eligible(&L->members[m], now) && gs_compute_most_entitled(L, m, now)) {
        uint64_t lease = (now + gs_cc.slice_ns) / 1000ull;
        if (!__atomic_compare_exchange_n(&L->turn, &t, GPUSHARDS_TURN(me, gen, lease), 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE))
            return 0;
        gs_compute_charge(L, me, __atomic_exchange_n(&L->since_ns, now, __ATOMIC_ACQ_REL), now, end);
        return 1;
    }
    if (!gs_compute_gate_on(c)) {
        gs_compute_drain(c);
        now = gs_now_ns();
    }
    uint64_t from = __atomic_load_n(&L->since_ns, __ATOMIC_ACQUIRE);
    if (__atomic_compare_exchange_n(&L->turn, &t, GPUSHARDS_TURN(0, gen, 0), 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        gs_compute_charge(L, me, from, now, now);
        gs_compute_gate_shut(c);
        gs_compute_wake_all(L);
    }
    return 0;
}

/* ---- waiting for the turn --------------------------------------------------- */

/* A wait for the turn sleeps on the turn word at least this long (shorter
 * would be a spin). */
#define MIN_TURN_SLEEP_NS 20000ull
/* Another shard launched or waited on the GPU this recently: we are
 * contended, and keep our work in flight short. */
#define CONTENDED_WITHIN_NS 50000000ull
/* A capped shard sleeps until its cap lifts when that is within this many
 * slices (else it looks again after idle_ns, as every waiter does). */
#define CAP_WAKE_SLICES 100u

/* ns of GPU time as virtual time at a weight (permille), as holders are
 * charged (compute_ledger.c), and back. */
static inline uint64_t vtime_of(uint64_t ns, uint32_t weight)
{
    return ns * 1000u / weight;
}

static inline uint64_t ns_of_vtime(uint64_t vtime, uint32_t weight)
{
    return vtime * weight / 1000u;
}

/* We start waiting: let our queued work finish before we say (wait
 * heartbeat) that we wait, so that a holder that took the turn from us knows
 * when the GPU is its own; on the GPU our gate, shut, stops it instead, and
 * it may wait behind it.  Coming back, we get no more credit than one slice
 * of our own.  Returns the time after the drain. */
static uint64_t start_waiting(struct cdev *c)
{
    struct gpushards_ledger *L = c->L;
    unsigned m = (unsigned)c->m;
    struct gpushards_ledger_member *self = &L->members[m];
    if (gs_compute_gate_on(c)) gs_compute_gate_shut(c);
    else gs_compute_drain(c);
    uint64_t now = gs_now_ns();
    uint32_t weight = gs_compute_weight(L, m, now);
    uint64_t one_slice = vtime_of(gs_cc.slice_ns, weight);
    uint64_t clock = __atomic_load_n(&L->vclock, __ATOMIC_RELAXED);
    uint64_t vtime = __atomic_load_n(&self->vtime, __ATOMIC_RELAXED);
    if (clock > one_slice && vtime < clock - one_slice) {
        __atomic_store_n(&self->vtime, clock - one_slice, __ATOMIC_RELAXED);
        if (gs_cc.stats) {
            gs_cst.clamps++;
            gs_cst.clamped_us += ns_of_vtime(clock - one_slice - vtime, weight) / 1000u;
        }
    }
    return now;
}

/* The holder launched nothing for idle_ns and has no work of its own known
 * to be in flight (a 2 ms graph launched every 2 ms is busy). */
static int holder_idle(const struct gpushards_ledger_member *holder, uint64_t now)
{
    uint64_t last_kernel = __atomic_load_n(&holder->last_kernel_ns, __ATOMIC_RELAXED);
    return last_kernel + gs_cc.idle_ns < now && __atomic_load_n(&holder->inflight_ns, __ATOMIC_RELAXED) == 0;
}

/* The holder's virtual time as it would be charged now (it has held the
 * turn since the ledger's since_ns). */
static uint64_t holder_vtime_now(struct gpushards_ledger *L, unsigned holder, uint64_t now)
{
    uint64_t since = __atomic_load_n(&L->since_ns, __ATOMIC_RELAXED);
    uint64_t vtime = __atomic_load_n(&L->members[holder - 1].vtime, __ATOMIC_RELAXED);
    if (now <= since || since == 0) return vtime;
    return vtime + vtime_of(now - since, gs_compute_weight(L, holder - 1, now));
}

/* We (member m, eligible) may take the turn now: nobody holds it or its
 * lease is over, or its holder is idle or (preempt) served more than half a
 * slice ahead of us; and no waiter is more entitled.  While a lease runs we
 * look again when it ends, at the latest (*wake_at). */
static int may_take_turn(struct gpushards_ledger *L, unsigned m, unsigned holder, uint64_t lease_end, uint64_t now,
                         uint64_t *wake_at)
{
    if (holder == 0 || now >= lease_end) return gs_compute_most_entitled(L, m, now);
    const struct gpushards_ledger_member *self = &L->members[m];
    int idle = holder_idle(&L->members[holder - 1], now);
    uint32_t weight = gs_compute_weight(L, m, now);
    uint64_t vtime = __atomic_load_n(&self->vtime, __ATOMIC_RELAXED);
    int owed = gs_cc.preempt && vtime + vtime_of(gs_cc.slice_ns, weight) / 2 < holder_vtime_now(L, holder, now);
    int take = (idle || owed) && gs_compute_most_entitled(L, m, now);
    if (lease_end < *wake_at) *wake_at = lease_end;
    return take;
}

/* The turn word went from *turn to ours: the holder we took it from (0: it
 * was free) is charged to now and its queue waited for; then every turn
 * thread looks again (the old holder's shut their gates, ours open). */
static void took_turn(struct gpushards_ledger *L, unsigned holder, uint64_t lease_end, uint64_t now)
{
    if (holder != 0) {
        gs_compute_charge(L, holder, __atomic_exchange_n(&L->since_ns, now, __ATOMIC_ACQ_REL), now, lease_end);
        await_handover(L, holder, now);
    } else {
        __atomic_store_n(&L->since_ns, now, __ATOMIC_RELEASE);
    }
    gs_compute_wake_all(L);
}

/* A capped shard waiting for its own cap to lift is not kept waiting by
 * others: it wakes when the cap lifts, if that is soon. */
static uint64_t cap_wake(const struct gpushards_ledger_member *self, uint64_t now, uint64_t wake_at)
{
    uint64_t cap_lifts = __atomic_load_n(&self->cap_ns, __ATOMIC_RELAXED);
    if (cap_lifts > now && cap_lifts - now < gs_cc.slice_ns * CAP_WAKE_SLICES) return cap_lifts;
    return wake_at;
}

/* Sleep until the turn word is no longer turn, or until wake_at. */
static void sleep_on_turn(struct gpushards_ledger *L, uint64_t turn, uint64_t now, uint64_t wake_at)
{
    if (wake_at <= now) return;
    uint64_t ns = wake_at - now;
    if (ns < MIN_TURN_SLEEP_NS) ns = MIN_TURN_SLEEP_NS;
    struct timespec timeout = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    syscall(SYS_futex, (uint32_t *)(void *)&L->turn, FUTEX_WAIT, (uint32_t)turn, &timeout, NULL, 0);
}

/* We hold the turn: another shard (not an isolated one) launched or waited
 * on this GPU lately, so keep our work in flight short until the next turn
 * boundary looks again. */
static void note_contention(struct cdev *c, uint64_t now)
{
    struct gpushards_ledger *L = c->L;
    for (unsigned j = 0; j < GPUSHARDS_LEDGER_MEMBERS; j++) {
        if (j == (unsigned)c->m) continue;
        const struct gpushards_ledger_member *other = &L->members[j];
        if (gs_compute_is_isolated(other)) continue;
        uint64_t launched = __atomic_load_n(&other->last_kernel_ns, __ATOMIC_RELAXED);
        uint64_t waited = __atomic_load_n(&other->wait_hb_ns, __ATOMIC_RELAXED);
        if ((launched != 0 && launched + CONTENDED_WITHIN_NS > now) ||
            (waited != 0 && waited + CONTENDED_WITHIN_NS > now)) {
            c->contended_until = now + CONTENDED_WITHIN_NS;
            return;
        }
    }
}

/* Wait until our shard holds the turn on this GPU (or gave up waiting). */
static void acquire(struct cdev *c, uint64_t now)
{
    struct gpushards_ledger *L = c->L;
    unsigned m = (unsigned)c->m, me = m + 1;
    struct gpushards_ledger_member *self = &L->members[m];
    uint64_t entitled_since = 0; /* eligible and waiting since */
    int waiting = 0;
    publish_share(c, now);
    for (;;) {
        uint64_t turn = __atomic_load_n(&L->turn, __ATOMIC_ACQUIRE);
        unsigned holder = GPUSHARDS_TURN_HOLDER(turn);
        uint64_t lease_end = GPUSHARDS_TURN_END_US(turn) * 1000ull;
        uint64_t ours = GPUSHARDS_TURN(me, GPUSHARDS_TURN_GEN(turn) + 1, (now + gs_cc.slice_ns) / 1000ull);
        if (holder == me) {
            if (now < lease_end || renew_or_release(c, turn, now)) break;
            now = gs_now_ns();
            continue;
        }
        if (!waiting) {
            now = start_waiting(c);
            waiting = 1;
        }
        __atomic_store_n(&self->wait_hb_ns, now, __ATOMIC_RELAXED);
        __atomic_store_n(&L->last_wait_ns, now, __ATOMIC_RELAXED);
        uint64_t wake_at = now + gs_cc.idle_ns;
        if (gs_compute_eligible(self, now)) {
            /* A failed exchange leaves the turn word as it is now in turn:
             * the sleep below waits for that to change. */
            if (may_take_turn(L, m, holder, lease_end, now, &wake_at) &&
                __atomic_compare_exchange_n(&L->turn, &turn, ours, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                took_turn(L, holder, lease_end, now);
                break;
            }
            if (entitled_since == 0) entitled_since = now;
            if (now - entitled_since > MAX_WAIT_NS) {
                give_up_waiting(c, self, now);
                return;
            }
        } else {
            entitled_since = 0;
            wake_at = cap_wake(self, now, wake_at);
        }
        sleep_on_turn(L, turn, now, wake_at);
        now = gs_now_ns();
    }
    __atomic_store_n(&self->wait_hb_ns, 0, __ATOMIC_RELAXED);
    gs_compute_gate_open(c);
    note_contention(c, now);
}

/* ---- what the launch hooks call ----------------------------------------- */

/* Every launch through libvgpu.so, governed or not, in the container's own
 * region: what the agent's compute fence and idle policy trust (the ledger's
 * stamps are writable by every shard of the host). */
static inline void stamp_launch(CUdevice dev, uint64_t now)
{
    int idx = gs_dev_index(dev);
    if (GS_LIKELY(idx >= 0 && gs_region != NULL))
        __atomic_store_n(&gs_region->devices[idx].last_launch_ns, now, __ATOMIC_RELAXED);
    gs_budget_note_launch(now);
}

enum gpu_turn { LAUNCH_AS_HOLDER, QUEUED_BEHIND_GATE, WAIT_ON_CPU };

/* A launch when we do not hold a live turn (turn word t), with turns on the
 * GPU: renew a lease of ours that is over if nobody is owed, else put the
 * launch behind our gate and let the turn thread take the turn; on the CPU
 * when the gate cannot be used. */
static enum gpu_turn turn_on_gpu(struct cdev *c, CUstream s, uint64_t t, uint64_t now)
{
    if (GPUSHARDS_TURN_HOLDER(t) == (unsigned)c->m + 1 && renew_or_release(c, t, now)) return LAUNCH_AS_HOLDER;
    return gs_compute_gate(c, s, now) ? QUEUED_BEHIND_GATE : WAIT_ON_CPU;
}

static void *admit(CUstream s, int graph)
{
    if (GS_LIKELY(!gs_compute_conf())) return NULL;
    /* A launch into a capturing stream runs nothing now, and waiting or
     * querying events while any capture is under way invalidates it
     * (PyTorch's global capture mode): admission happens when the graph
     * is launched. */
    if (gs_capturing()) {
        if (gs_cc.stats) gs_cst.capturing++;
        return NULL;
    }
    if (gs_cc.stats) gs_cst.admits++;
    gs_init();
    CUdevice dev;
    if (gs_real_cuCtxGetDevice == NULL || gs_real_cuCtxGetDevice(&dev) != CUDA_SUCCESS) return NULL;
    uint64_t now = gs_now_ns();
    stamp_launch(dev, now);
    struct cdev *c = gs_compute_lookup(dev);
    if (c == NULL) return NULL;
    if (GS_UNLIKELY(c->isolated)) {
        gs_compute_note_isolated(c, now);
        return NULL;
    }
    struct gpushards_ledger *L = c->L;
    struct gpushards_ledger_member *e = &L->members[c->m];
    if (GS_UNLIKELY(now < c->ungoverned_until)) goto ungoverned;
again:;
    uint64_t t = __atomic_load_n(&L->turn, __ATOMIC_ACQUIRE);
    if (GS_UNLIKELY(GPUSHARDS_TURN_HOLDER(t) != (unsigned)c->m + 1 || now >= GPUSHARDS_TURN_END_US(t) * 1000ull)) {
        enum gpu_turn how = gs_cc.gpu_turns ? turn_on_gpu(c, s, t, now) : WAIT_ON_CPU;
        if (how == QUEUED_BEHIND_GATE) {
            __atomic_store_n(&e->last_kernel_ns, now, __ATOMIC_RELAXED);
            return NULL; /* the turn thread takes the turn */
        }
        if (how == WAIT_ON_CPU) {
            if (gs_cc.stats) gs_cst.acquires++;
            acquire(c, now);
        }
        now = gs_now_ns();
        if (now < c->ungoverned_until) goto ungoverned;
    }
    __atomic_store_n(&e->last_kernel_ns, now, __ATOMIC_RELAXED);
    /* Contended (somebody waited within 2 ms) or capped: keep the work in
     * flight short, so that a turn ends when it is over. */
    uint64_t lw = __atomic_load_n(&L->last_wait_ns, __ATOMIC_RELAXED);
    int bound = lw + STALE_WAIT_NS > now || now < c->contended_until ||
                __atomic_load_n(&e->mode, __ATOMIC_RELAXED) == GPUSHARDS_COMPUTE_CAPPED;
    if (!bound) {
        gs_compute_forget(c);
        return NULL;
    }
    /* On the GPU the gate is the bound: our queue stops at its next wait
     * once the turn moves. */
    if (gs_cc.gpu_turns && gs_compute_gate(c, s, now)) return NULL;
    uint32_t zero = 0;
    if (!__atomic_compare_exchange_n(&c->ring_lock, &zero, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) return NULL;
    if (!gs_compute_bound(c, s, graph, &now)) {
        __atomic_store_n(&c->ring_lock, 0, __ATOMIC_RELEASE);
        return NULL;
    }
    t = __atomic_load_n(&L->turn, __ATOMIC_ACQUIRE);
    if (GS_UNLIKELY(GPUSHARDS_TURN_HOLDER(t) != (unsigned)c->m + 1)) {
        /* The turn was taken while we waited for our work in flight. */
        if (gs_cc.stats) gs_cst.retakes++;
        __atomic_store_n(&c->ring_lock, 0, __ATOMIC_RELEASE);
        goto again;
    }
    return c; /* gs_compute_launched records the event and unlocks */
ungoverned:
    /* Launched without turns, but through libvgpu.so: the entry still shows
     * it, or the agent's compute fence would take the shard for a process
     * that bypasses libvgpu.so (docs/agent.md, "Compute fence"). */
    __atomic_store_n(&e->last_kernel_ns, now, __ATOMIC_RELAXED);
    return NULL;
}

void gs_compute_acquire(struct cdev *c, uint64_t now)
{
    if (gs_cc.stats) gs_cst.acquires++;
    acquire(c, now);
}

void *gs_compute_admit(CUstream s)
{
    return admit(s, 0);
}

void *gs_compute_admit_graph(CUstream s)
{
    return admit(s, 1);
}

void gs_compute_launched(void *token, CUstream stream, CUresult launched)
{
    struct cdev *c = token;
    if (c == NULL) return;
    if (launched == CUDA_SUCCESS) gs_compute_record(c, stream);
    __atomic_store_n(&c->ring_lock, 0, __ATOMIC_RELEASE);
}

/* After a successful synchronize: the shard waits for nothing on the GPU
 * now, and its next launch needs CPU time first.  While another shard
 * waits, end the turn here (charged to now) instead of holding the GPU
 * idle until the lease ends: a latency-bound shard (a request, then a
 * sync) then holds turns only while its work runs, and comes back owed,
 * taking the next turn at once. */
void gs_compute_synced(void)
{
    if (GS_LIKELY(!gs_compute_conf()) || gs_capturing()) return;
    if (gs_cc.stats) gs_cst.syncs++;
    if (!gs_cc.sync_release) return;
    CUdevice dev;
    if (gs_real_cuCtxGetDevice == NULL || gs_real_cuCtxGetDevice(&dev) != CUDA_SUCCESS) return;
    if (dev < 0 || dev >= GS_MAX_ORDINALS || __atomic_load_n(&gs_cdevs[dev].state, __ATOMIC_ACQUIRE) != 1) return;
    struct cdev *c = &gs_cdevs[dev];
    struct gpushards_ledger *L = c->L;
    unsigned me = (unsigned)c->m + 1;
    uint64_t now = gs_now_ns();
    uint64_t t = __atomic_load_n(&L->turn, __ATOMIC_ACQUIRE);
    if (GPUSHARDS_TURN_HOLDER(t) != me) return;
    /* Nobody waits: a waiter refreshes last_wait_ns at least every idle_ns. */
    if (__atomic_load_n(&L->last_wait_ns, __ATOMIC_RELAXED) + STALE_WAIT_NS + gs_cc.idle_ns < now) return;
    uint64_t end = GPUSHARDS_TURN_END_US(t) * 1000ull;
    uint64_t from = __atomic_load_n(&L->since_ns, __ATOMIC_ACQUIRE);
    if (__atomic_compare_exchange_n(&L->turn, &t, GPUSHARDS_TURN(0, GPUSHARDS_TURN_GEN(t) + 1, 0), 0,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        gs_compute_charge(L, me, from, now, end);
        gs_compute_gate_shut(c);
        gs_compute_wake_all(L);
        if (gs_cc.stats) gs_cst.sync_releases++;
    }
}

void gs_compute_reset_process(void)
{
    memset(gs_cdevs, 0, sizeof gs_cdevs); /* the child has none of the parent's turn threads */
    gs_compute_conf_reset();
}
