/* compute_inflight.c — this process's work in flight on a governed GPU
 * while it is contended (docs/compute.md, "In-flight work"): an event
 * recorded after each launch, the bound that keeps a turn from running far
 * past its lease, the drain before a handover, and (timed mode) the GPU
 * time each launch took, measured between timed events.
 *
 * Measuring: a launch that finds nothing of ours in flight gets an event
 * recorded before it too; its GPU time is then elapsed(before, after).  A
 * launch queued behind unfinished work starts when that work ends, so its
 * time is elapsed(previous after-event, its after-event).  Idle gaps (the
 * CPU preparing the next launch) are thus not counted. */
#include "compute_internal.h"

CUresult (*gs_real_cuEventElapsedTime)(float *, CUevent, CUevent);
CUresult (*gs_real_cuEventElapsedTime_v1)(float *, CUevent, CUevent);

/* The oldest slot is complete: account for its GPU time and drop it. */
static void pop(struct cdev *c)
{
    unsigned slot = c->head;
    if (gs_cc.timed) {
        CUevent from = c->has_pre[slot] ? c->pre[slot] : c->last_done;
        float ms = 0;
        CUresult (*elapsed)(float *, CUevent, CUevent) =
            gs_real_cuEventElapsedTime != NULL ? gs_real_cuEventElapsedTime : gs_real_cuEventElapsedTime_v1;
        if (from != NULL && elapsed != NULL && elapsed(&ms, from, c->ev[slot]) == CUDA_SUCCESS && ms > 0) {
            uint64_t ns = (uint64_t)(ms * 1e6f);
            gs_compute_charge_gpu(c, ns);
            c->est_ns = c->est_ns != 0 ? (c->est_ns * 7u + ns) / 8u : ns;
        }
        c->last_done = c->ev[slot];
    }
    c->head = (c->head + 1) % RING;
    c->count--;
}

static void reset(struct cdev *c)
{
    c->head = 0;
    c->count = 0;
    c->last_done = NULL;
    __atomic_store_n(&c->L->members[c->m].inflight_ns, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&c->L->members[c->m].inflight_until_ns, 0, __ATOMIC_RELAXED);
}

/* Wait until everything this process queued on the GPU has run: every
 * stream of the context (several streams, or work queued before the GPU
 * was contended and nothing was recorded), so that the next holder gets
 * the GPU clean instead of time-sliced against our leftovers. */
void gs_compute_drain(struct cdev *c)
{
    uint32_t zero = 0;
    if (!__atomic_compare_exchange_n(&c->ring_lock, &zero, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) return;
    CUresult r = CUDA_SUCCESS;
    if (gs_real_cuCtxSynchronize != NULL && !gs_capturing()) r = gs_real_cuCtxSynchronize();
    else if (c->count > 0) r = gs_real_cuEventSynchronize(c->ev[(c->head + c->count - 1) % RING]);
    if (r != CUDA_SUCCESS) GS_DEBUG("drain: %d", (int)r);
    else
        while (c->count > 0) pop(c);
    reset(c);
    __atomic_store_n(&c->ring_lock, 0, __ATOMIC_RELEASE);
}

/* Not contended: nothing is recorded, and what was is forgotten. */
void gs_compute_forget(struct cdev *c)
{
    if (GS_UNLIKELY(c->count != 0 || c->L->members[c->m].inflight_until_ns != 0)) reset(c);
}

/* Before a launch on stream s while contended (ring_lock held): forget
 * what has finished, then wait while too much is in flight.  By age (the
 * default): while two or more launches are unfinished and the oldest was
 * made more than depth_ns ago; a graph launch waits whenever two are
 * unfinished, whatever their age: a graph is many kernels (ten 180 us
 * matmuls make 1.8 ms), and a CPU that queues graphs in microseconds would
 * otherwise queue far past the lease, which the next holder waits for only
 * one slice before its work and ours run at once (under MPS on the same
 * SMs).  By time: while the unfinished launches' estimated GPU time passes
 * depth_ns (one 2 ms graph launch then counts as 2 ms, ten 20 us kernels
 * as 200 us).  A turn therefore ends soon after its lease, whatever the
 * kernels' sizes.  0: nothing can be recorded. */
int gs_compute_bound(struct cdev *c, CUstream s, int graph, uint64_t *now_io)
{
    CUcontext ctx = NULL;
    if (gs_real_cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == NULL) return 0;
    if (ctx != c->ctx) {
        /* Events belong to a context: (re)create them for this one. */
        unsigned flags = gs_cc.timed ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING;
        for (unsigned i = 0; i < RING; i++) {
            if (gs_real_cuEventCreate(&c->ev[i], flags) != CUDA_SUCCESS ||
                (gs_cc.timed && gs_real_cuEventCreate(&c->pre[i], flags) != CUDA_SUCCESS)) {
                c->ctx = NULL;
                return 0;
            }
        }
        c->ctx = ctx;
        c->head = c->count = 0;
        c->last_done = NULL;
    }
    while (c->count > 0 && gs_real_cuEventQuery(c->ev[c->head]) != CUDA_ERROR_NOT_READY) pop(c);
    uint64_t now = *now_io;
    for (;;) {
        int wait;
        /* RING - 2: the slot popped last stays intact for the next elapsed time. */
        if (c->count >= RING - 2) wait = 1;
        else if (gs_cc.depth_by_time && c->est_ns != 0) wait = c->count >= 1 && c->count * c->est_ns > gs_cc.depth_ns;
        else wait = c->count >= 2 && (graph || c->rec_ns[c->head] + gs_cc.depth_ns < now);
        if (!wait) break;
        (void)gs_real_cuEventSynchronize(c->ev[c->head]);
        pop(c);
        now = gs_now_ns();
        if (gs_cc.stats) gs_cst.bound_waits++;
    }
    __atomic_store_n(&c->L->members[c->m].inflight_ns, c->count > 0 ? c->rec_ns[c->head] : 0, __ATOMIC_RELAXED);
    if (gs_cc.timed) {
        unsigned slot = (c->head + c->count) % RING;
        c->has_pre[slot] = 0;
        if (c->count == 0) {
            c->last_done = NULL;
            c->has_pre[slot] = gs_real_cuEventRecord(c->pre[slot], s) == CUDA_SUCCESS;
        }
    }
    *now_io = now;
    return 1;
}

/* After a successful launch on stream s (ring_lock held).  Bound by time,
 * the estimated end of the queue is published too: a shard that takes the
 * turn from us starts when it has passed, without waiting for us to notice
 * (compute.c, await_handover). */
void gs_compute_record(struct cdev *c, CUstream s)
{
    unsigned slot = (c->head + c->count) % RING;
    struct gpushards_ledger_member *e = &c->L->members[c->m];
    if (gs_real_cuEventRecord(c->ev[slot], s) == CUDA_SUCCESS) {
        uint64_t now = gs_now_ns();
        c->rec_ns[slot] = now;
        if (c->count++ == 0) __atomic_store_n(&e->inflight_ns, now, __ATOMIC_RELAXED);
        if (gs_cc.depth_by_time && c->est_ns != 0) {
            uint64_t u = __atomic_load_n(&e->inflight_until_ns, __ATOMIC_RELAXED);
            __atomic_store_n(&e->inflight_until_ns, (u > now ? u : now) + c->est_ns, __ATOMIC_RELAXED);
        }
    } else {
        __atomic_store_n(&e->inflight_until_ns, 0, __ATOMIC_RELAXED); /* no longer known */
    }
}
