/* compute_gate.c — turns on the GPU (GPUSHARDS_COMPUTE_TURNS=gpu;
 * docs/compute.md, "Turns on the GPU").  While the GPU is contended, every
 * launch first waits in its stream on this process's own gate, a word in a
 * private page mapped for the GPU, so a turn that moves stops the old
 * holder's queue at its next wait.  A launch made while another shard holds
 * the turn returns at once, its kernels queued behind that wait, and the
 * GPU's turn thread takes the turn for it (compute.c's protocol) and opens
 * the gate: a shard shut out keeps its queue full, and its turn starts on work
 * already queued (native/gpu-tests/RESULTS.md, 2026-11-27 23:35).
 *
 * Only this process writes its gate, so no other shard of the host can open
 * or shut it; the turn thread opens it while its shard holds the turn and
 * shuts it when it sees the turn move (the turn word's futex wakes it) or
 * its queue go idle. */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "compute_internal.h"

CUresult (*gs_real_cuMemHostRegister_v2)(void *, size_t, unsigned int);
CUresult (*gs_real_cuMemHostGetDevicePointer_v2)(CUdeviceptr *, void *, unsigned int);
CUresult (*gs_real_cuMemHostUnregister)(void *);
CUresult (*gs_real_cuStreamWaitValue32_v2)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
CUresult (*gs_real_cuStreamQuery)(CUstream);
CUresult (*gs_real_cuCtxSetCurrent)(CUcontext);

#define GATE_UNKNOWN 0
#define GATE_USABLE GS_GATE_USABLE
#define GATE_SETTING_UP 2
#define GATE_UNUSABLE (-1)
#define IDLE_LOOK_NS 100000000ull /* the turn thread looks again at least this often */

static void wake_turn_thread(struct cdev *c)
{
    if (!__atomic_exchange_n(&c->turner_asleep, 0, __ATOMIC_SEQ_CST)) return;
    __atomic_add_fetch(&c->turner_wake, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, &c->turner_wake, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* ---- what the turn thread knows of our queued work ---------------------- */

static void lock(struct cdev *c)
{
    uint32_t zero = 0;
    while (!__atomic_compare_exchange_n(&c->gate_lock, &zero, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        zero = 0;
        sched_yield();
    }
}

static void unlock(struct cdev *c)
{
    __atomic_store_n(&c->gate_lock, 0, __ATOMIC_RELEASE);
}

/* The streams with gated work, so that the turn thread can ask whether any of
 * it is still queued; 0 when every slot holds another stream.  A stream the
 * application destroys while work of it waits at the gate is no longer
 * followed: that work runs at the shard's next turn (docs/compute.md). */
static int note_stream(struct cdev *c, CUstream s)
{
    CUcontext ctx = NULL;
    if (gs_real_cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == NULL) return 0;
    lock(c);
    int free_slot = -1;
    for (int i = 0; i < GATE_STREAMS; i++) {
        if (c->gate_used & (1u << i)) {
            if (c->gate_streams[i] == s && c->gate_ctxs[i] == ctx) {
                unlock(c);
                return 1;
            }
        } else if (free_slot < 0) {
            free_slot = i;
        }
    }
    if (free_slot >= 0) {
        c->gate_streams[free_slot] = s;
        c->gate_ctxs[free_slot] = ctx;
        c->gate_used |= 1u << free_slot;
    }
    unlock(c);
    return free_slot >= 0;
}

/* 1 while gated work may still be queued: a launch within idle_ns, or a
 * noted stream the driver says is not done (turn thread only). */
static int work_pending(struct cdev *c, uint64_t now, CUcontext *current)
{
    if (__atomic_load_n(&c->gated_ns, __ATOMIC_RELAXED) + gs_cc.idle_ns > now) return 1;
    int pending = 0;
    lock(c);
    for (int i = 0; i < GATE_STREAMS; i++) {
        if (!(c->gate_used & (1u << i))) continue;
        if (*current != c->gate_ctxs[i]) {
            if (gs_real_cuCtxSetCurrent(c->gate_ctxs[i]) != CUDA_SUCCESS) {
                c->gate_used &= ~(1u << i); /* a context since destroyed, its work with it */
                continue;
            }
            *current = c->gate_ctxs[i];
        }
        CUresult r = gs_real_cuStreamQuery(c->gate_streams[i]);
        if (r == CUDA_ERROR_NOT_READY) pending = 1;
        else c->gate_used &= ~(1u << i); /* done, or a stream since destroyed */
    }
    unlock(c);
    return pending;
}

/* ---- the turn thread ---------------------------------------------------- */

/* When and how the turn thread looks at its GPU again. */
struct look {
    uint64_t at;
    int on_turn;    /* 1: sleep on the turn word, which any move of the turn wakes */
    uint32_t seen;  /* the turn word's low 32 bits when it looked */
};

/* Serves one GPU. */
static struct look serve(struct cdev *c, uint64_t now, CUcontext *current)
{
    struct gpushards_ledger *L = c->L;
    struct gpushards_ledger_member *e = &L->members[c->m];
    if (!work_pending(c, now, current)) {
        /* Idle: shut, so that a launch finds its gate shut whoever holds the
         * turn by then, and wakes us to look. */
        if (now >= c->ungoverned_until) gs_compute_gate_shut(c);
        __atomic_store_n(&e->inflight_ns, 0, __ATOMIC_RELAXED);
        return (struct look){now + IDLE_LOOK_NS, 0, 0};
    }
    /* Queued work: a holder that waits in a synchronize for it is not idle. */
    __atomic_store_n(&e->inflight_ns, now, __ATOMIC_RELAXED);
    if (now < c->ungoverned_until) {
        gs_compute_gate_open(c);
        return (struct look){now + gs_cc.slice_ns, 0, 0};
    }
    uint64_t t = __atomic_load_n(&L->turn, __ATOMIC_ACQUIRE);
    uint64_t end = GPUSHARDS_TURN_END_US(t) * 1000ull;
    if (GPUSHARDS_TURN_HOLDER(t) == (unsigned)c->m + 1 && now < end) {
        /* Our shard's (another process of it may have taken it).  Look
         * again within idle_ns, so that a queue that drains early is seen
         * idle, and at once when the turn moves. */
        gs_compute_gate_open(c);
        uint64_t at = now + gs_cc.idle_ns < end ? now + gs_cc.idle_ns : end;
        return (struct look){at, 1, (uint32_t)t};
    }
    gs_compute_acquire(c, now); /* shuts the gate while it waits, opens it when it has the turn */
    return (struct look){gs_now_ns(), 0, 0};
}

static void sleep_until(uint32_t *word, uint32_t seen, uint64_t at, uint64_t now)
{
    uint64_t d = at - now;
    struct timespec ts = {(time_t)(d / 1000000000ull), (long)(d % 1000000000ull)};
    syscall(SYS_futex, word, FUTEX_WAIT, seen, &ts, NULL, 0);
}

/* One per GPU the process gates on, so that waiting for one GPU's turn never
 * holds up another's. */
static void *turn_thread(void *arg)
{
    struct cdev *c = arg;
    int s;
    while ((s = __atomic_load_n(&c->gate, __ATOMIC_ACQUIRE)) == GATE_SETTING_UP) sched_yield();
    if (s != GATE_USABLE) return NULL;
    CUcontext current = NULL;
    for (;;) {
        uint32_t seq = __atomic_load_n(&c->turner_wake, __ATOMIC_ACQUIRE);
        uint64_t gated = __atomic_load_n(&c->gated_count, __ATOMIC_SEQ_CST);
        struct look next = serve(c, gs_now_ns(), &current);
        uint64_t now = gs_now_ns();
        if (next.at <= now) continue;
        if (next.on_turn) {
            /* Holding, gate open: our launches need not wake us. */
            sleep_until((uint32_t *)(void *)&c->L->turn, next.seen, next.at, now);
            continue;
        }
        __atomic_store_n(&c->turner_asleep, 1, __ATOMIC_SEQ_CST);
        /* A launch gated after this pass began, whose wake saw us awake. */
        if (__atomic_load_n(&c->gated_count, __ATOMIC_SEQ_CST) != gated) {
            __atomic_store_n(&c->turner_asleep, 0, __ATOMIC_RELEASE);
            continue;
        }
        if (__atomic_load_n(&c->turner_wake, __ATOMIC_ACQUIRE) == seq) sleep_until(&c->turner_wake, seq, next.at, now);
        __atomic_store_n(&c->turner_asleep, 0, __ATOMIC_RELEASE);
    }
    return NULL;
}

static int start_turn_thread(struct cdev *c)
{
    pthread_t thread;
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0) return 0;
    int created = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0 &&
                  pthread_create(&thread, &attr, turn_thread, c) == 0;
    pthread_attr_destroy(&attr);
    if (!created) gs_log(GS_LOG_WARN, "turns on the GPU: no turn thread for GPU %d; its turns wait on the CPU",
                         (int)(c - gs_cdevs));
    return created;
}

/* ---- setup, and what compute.c calls ------------------------------------ */

/* This process's gate for the GPU, a page of its own mapped for the GPU
 * (once per GPU, with a context current); shut until the turn thread opens it. */
static CUresult map_gate(struct cdev *c)
{
    long page = sysconf(_SC_PAGESIZE);
    void *p = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = gs_real_cuMemHostRegister_v2(p, (size_t)page, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
    if (r == CUDA_SUCCESS) {
        r = gs_real_cuMemHostGetDevicePointer_v2(&c->gate_word, p, 0);
        if (r != CUDA_SUCCESS && gs_real_cuMemHostUnregister(p) != CUDA_SUCCESS)
            gs_log(GS_LOG_WARN, "turns on the GPU: a gate page that cannot be used stays registered");
    }
    if (r != CUDA_SUCCESS) {
        munmap(p, (size_t)page);
        return r;
    }
    c->gate_open = p;
    if (gs_cc.stats) __atomic_add_fetch(&gs_cst.gates_mapped, 1, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

static int gate_usable(struct cdev *c)
{
    int s = __atomic_load_n(&c->gate, __ATOMIC_ACQUIRE);
    if (GS_LIKELY(s == GATE_USABLE)) return 1;
    if (s == GATE_UNUSABLE) return 0;
    int unknown = GATE_UNKNOWN;
    if (!__atomic_compare_exchange_n(&c->gate, &unknown, GATE_SETTING_UP, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        while ((s = __atomic_load_n(&c->gate, __ATOMIC_ACQUIRE)) == GATE_SETTING_UP) sched_yield();
        return s == GATE_USABLE;
    }
    CUcontext ctx = NULL;
    CUresult r = CUDA_ERROR_NOT_FOUND;
    if (gs_real_cuMemHostRegister_v2 != NULL && gs_real_cuMemHostGetDevicePointer_v2 != NULL &&
        gs_real_cuMemHostUnregister != NULL &&
        gs_real_cuStreamWaitValue32_v2 != NULL && gs_real_cuStreamQuery != NULL && gs_real_cuCtxSetCurrent != NULL &&
        (r = gs_real_cuCtxGetCurrent(&ctx)) == CUDA_SUCCESS && ctx != NULL)
        r = map_gate(c);
    int ok = r == CUDA_SUCCESS && ctx != NULL;
    c->gate_ctx = ok ? ctx : NULL;
    if (!ok)
        gs_log(GS_LOG_WARN, "turns on the GPU: no gate can be mapped for GPU %d (error %d); turns wait on the CPU",
               (int)(c - gs_cdevs), (int)r);
    if (ok && !c->turner_started) ok = c->turner_started = start_turn_thread(c);
    __atomic_store_n(&c->gate, ok ? GATE_USABLE : GATE_UNUSABLE, __ATOMIC_RELEASE);
    return ok;
}

int gs_compute_gate(struct cdev *c, CUstream s, uint64_t now)
{
    if (!gate_usable(c) || !note_stream(c, s)) return 0;
    /* The turn thread hears of the work first: a wait that holds its caller
     * (the fake driver's) must not keep it from taking the turn. */
    __atomic_store_n(&c->gated_ns, now, __ATOMIC_RELAXED);
    __atomic_add_fetch(&c->gated_count, 1, __ATOMIC_SEQ_CST);
    wake_turn_thread(c);
    if (gs_real_cuStreamWaitValue32_v2(s, c->gate_word, 1u, CU_STREAM_WAIT_VALUE_AND) != CUDA_SUCCESS) return 0;
    if (gs_cc.stats) __atomic_add_fetch(&gs_cst.gated, 1, __ATOMIC_RELAXED);
    return 1;
}

/* The registration of a gate ends with the context that made it (an
 * application that creates and destroys its own contexts): the next gated
 * launch maps a new page in the context current then.  The old page stays
 * mapped, since the turn thread may be writing it. */
void gs_compute_ctx_gone(CUcontext ctx)
{
    for (int i = 0; i < GS_MAX_ORDINALS; i++) {
        struct cdev *c = &gs_cdevs[i];
        int usable = GATE_USABLE;
        if (ctx != NULL && c->gate_ctx == ctx)
            __atomic_compare_exchange_n(&c->gate, &usable, GATE_UNKNOWN, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    }
}

void gs_compute_gate_open(struct cdev *c)
{
    if (gs_compute_gate_on(c)) __atomic_store_n(c->gate_open, 1u, __ATOMIC_RELEASE);
}

void gs_compute_gate_shut(struct cdev *c)
{
    if (gs_compute_gate_on(c)) __atomic_store_n(c->gate_open, 0u, __ATOMIC_RELEASE);
}
