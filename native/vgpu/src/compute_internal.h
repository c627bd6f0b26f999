/* compute_internal.h — what the parts of the compute admission share
 * (docs/compute.md): compute_conf.c (settings, counters), compute_ledger.c
 * (the per-GPU ledger file, members, weights, charges), compute_inflight.c
 * (this process's work in flight: the bound, the drain, measured GPU time),
 * compute_gate.c (turns on the GPU: stream waits on each process's own gate,
 * the turn thread) and compute.c (turns: taking, renewing, handing over). */
#ifndef GPUSHARDS_COMPUTE_INTERNAL_H
#define GPUSHARDS_COMPUTE_INTERNAL_H

#include <stdint.h>
#include <time.h>

#include "gpushards_ledger.h"
#include "hooks.h"

#define STALE_WAIT_NS 2000000ull /* a waiter that has not polled for 2 ms is gone */
/* Turns rotate within a few slices per shard; a wait this long means the
 * ledger is stuck or written by a process outside libvgpu.so.  The waiter
 * then launches without turns for UNGOVERNED_NS (the hardware's own
 * time-slicing, as plain co-location) before trying the ledger again. */
#define MAX_WAIT_NS 1000000000ull
#define UNGOVERNED_NS 10000000000ull
#define ACTIVE_NS 1000000000ull  /* a member seen within 1 s counts for the default weight */
#define MIN_WEIGHT 50u
#define RING 16u
#define GATE_STREAMS 16 /* streams with gated work one GPU's turn thread follows */

/* What a turn's holder is charged (GPUSHARDS_COMPUTE_CHARGE). */
#define GS_CHARGE_WALL 0 /* the wall time it held the turn */
#define GS_CHARGE_GPU 1  /* the GPU time its launches took, measured with timed events */

struct cconf {
    int on;
    char dir[1024];
    char shard[48];
    uint32_t env_share; /* permille, 0 = unset */
    uint32_t env_mode;
    uint64_t slice_ns, idle_ns, depth_ns;
    int sync_release; /* a synchronize ends the turn while contended */
    int preempt;      /* a waiter owed more than half a slice takes the turn before the lease ends */
    int handover_wait; /* a new holder waits for the old one's drain (0: MPS hosts, where clients share SMs) */
    int charge;       /* GS_CHARGE_* */
    int depth_by_time; /* bound the estimated GPU time queued, not the age of the oldest launch */
    int timed;        /* events carry timestamps (charge by GPU time, or the bound by time) */
    int gpu_turns;    /* GPUSHARDS_COMPUTE_TURNS=gpu: a shut-out launch is queued behind a stream wait */
    int stats;
};
extern struct cconf gs_cc;

struct cdev {
    int state; /* 0 not looked up, 1 governed, -1 not governed, -2 the ledger was full (claim_retry_ns) */
    struct gpushards_ledger *L;
    int m;     /* our member entry */
    int lim;   /* index in the limits file, -1 = none */
    int isolated; /* an MPS partition of its own: no turns (fixed while it runs) */
    /* in-flight work while contended: an event recorded after each launch,
     * and before the launch that finds nothing in flight (timed mode) */
    uint32_t ring_lock, head, count;
    uint64_t contended_until; /* another shard used this GPU recently */
    uint64_t ungoverned_until; /* a turn did not come within MAX_WAIT_NS: no turns until then */
    uint64_t claim_retry_ns;   /* state -2: when to look for a free ledger entry again */
    CUcontext ctx;
    CUevent ev[RING];
    CUevent pre[RING];     /* timed: recorded before slot's launch when it started on an empty queue */
    uint8_t has_pre[RING];
    uint64_t rec_ns[RING]; /* when each event was recorded */
    CUevent last_done;     /* timed: the last event found complete, NULL after an empty queue */
    uint64_t est_ns;       /* timed: moving average of one launch's GPU time */
    /* turns on the GPU (compute_gate.c) */
    int gate;                 /* 0 not set up, 1 usable, 2 being set up, -1 not usable */
    uint32_t *gate_open;      /* this process's gate for the GPU: 1 open, 0 shut (a page of its own) */
    CUdeviceptr gate_word;    /* gate_open, as the GPU sees it */
    CUcontext gate_ctx;       /* the context that registered gate_open (its registration ends with it) */
    int turner_started;       /* the turn thread runs (it outlives a gate mapped anew) */
    uint32_t gate_lock;
    uint32_t gate_used;       /* bit i: gate_streams[i] (of context gate_ctxs[i]) has had gated work */
    CUstream gate_streams[GATE_STREAMS];
    CUcontext gate_ctxs[GATE_STREAMS]; /* a stream is asked about in its own context */
    uint64_t gated_ns;        /* the last gated launch */
    uint64_t gated_count;     /* gated launches: the turn thread sleeps only if none came meanwhile */
    uint32_t turner_wake;     /* futex the GPU's turn thread sleeps on */
    uint32_t turner_asleep;
};
extern struct cdev gs_cdevs[GS_MAX_ORDINALS];

/* Diagnostics (GPUSHARDS_COMPUTE_STATS=1): counts printed at exit. */
struct gs_compute_stats {
    unsigned long admits, capturing, acquires, syncs, sync_releases, handovers, handover_waits_us, retakes;
    unsigned long clamps, clamped_us, measured_us, bound_waits, gave_up, gated, gates_mapped;
};
extern struct gs_compute_stats gs_cst;

static inline uint64_t gs_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* compute_conf.c */
int gs_compute_conf(void); /* 1 when compute is governed in this process */
void gs_compute_conf_reset(void);

/* compute_ledger.c */
struct cdev *gs_compute_lookup(CUdevice dev);
void gs_compute_share_of(struct cdev *c, uint32_t *share, uint32_t *mode);
uint32_t gs_compute_weight(struct gpushards_ledger *L, unsigned i, uint64_t now);
void gs_compute_charge(struct gpushards_ledger *L, unsigned holder_plus1, uint64_t from, uint64_t to,
                       uint64_t lease_end);
void gs_compute_charge_gpu(struct cdev *c, uint64_t gpu_ns);
int gs_compute_eligible(struct gpushards_ledger_member *e, uint64_t now);
int gs_compute_most_entitled(struct gpushards_ledger *L, unsigned m, uint64_t now);
void gs_compute_wake_all(struct gpushards_ledger *L);

void gs_compute_note_isolated(struct cdev *c, uint64_t now);
int gs_compute_is_isolated(const struct gpushards_ledger_member *e);

/* compute.c */
void gs_compute_acquire(struct cdev *c, uint64_t now); /* waits for the turn (the turn thread) */

/* compute_gate.c */
#define GS_GATE_USABLE 1
/* Turns on the GPU are in use for this GPU: nothing of ours is drained on
 * the CPU (our queue may wait behind our own gate). */
static inline int gs_compute_gate_on(struct cdev *c)
{
    return __atomic_load_n(&c->gate, __ATOMIC_ACQUIRE) == GS_GATE_USABLE;
}
/* Queues a wait for our gate in front of the next launch on s; 0 when it
 * cannot (then the launch waits on the CPU). */
int gs_compute_gate(struct cdev *c, CUstream s, uint64_t now);
void gs_compute_gate_open(struct cdev *c); /* we hold the turn, or launch without turns */
void gs_compute_gate_shut(struct cdev *c); /* somebody else may hold it */

/* compute_inflight.c (callers hold c->ring_lock where said) */
void gs_compute_drain(struct cdev *c);
void gs_compute_forget(struct cdev *c);                  /* not contended: nothing recorded */
/* ring_lock held; graph: the launch is a graph's; 0 = cannot record */
int gs_compute_bound(struct cdev *c, CUstream s, int graph, uint64_t *now);
void gs_compute_record(struct cdev *c, CUstream s);      /* ring_lock held */

#endif
