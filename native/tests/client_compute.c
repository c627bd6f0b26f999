/* client_compute.c — compute-share scenarios (libvgpu.so's launch
 * admission against the per-GPU ledger, docs/compute.md), run by
 * runner_compute.c.  The ledger is read directly, as the agent would. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cuda_subset.h"

#include "client_compute.h"
#include "gpushards_ledger.h"

#define LEDGER_GPU0 "GPU-fa4e5000-0000-4000-8000-000000000000"

#define FAIL(...)                                                                                        \
    do {                                                                                                 \
        fprintf(stderr, __VA_ARGS__);                                                                    \
        fprintf(stderr, "\n");                                                                           \
        return 1;                                                                                        \
    } while (0)

static struct gpushards_ledger *ledger(void)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", getenv("GPUSHARDS_LEDGER_DIR"), LEDGER_GPU0);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return NULL;
    void *m = mmap(NULL, sizeof(struct gpushards_ledger), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    return m == MAP_FAILED ? NULL : m;
}

/* The ledger as a neighbour that writes it outside the protocol sees it. */
static struct gpushards_ledger *ledger_rw(void)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", getenv("GPUSHARDS_LEDGER_DIR"), LEDGER_GPU0);
    int fd = open(path, O_RDWR);
    if (fd < 0) return NULL;
    void *m = mmap(NULL, sizeof(struct gpushards_ledger), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return m == MAP_FAILED ? NULL : m;
}

static uint64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static struct gpushards_ledger_member *member(struct gpushards_ledger *L, const char *shard)
{
    for (unsigned i = 0; i < GPUSHARDS_LEDGER_MEMBERS; i++)
        if (strcmp(L->members[i].shard, shard) == 0) return &L->members[i];
    return NULL;
}

static int context(void)
{
    CUdevice d;
    CUcontext c;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&d, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&c, d) != CUDA_SUCCESS || cuCtxSetCurrent(c) != CUDA_SUCCESS)
        return -1;
    return 0;
}

static CUresult launch(void)
{
    return cuLaunchKernel((CUfunction)0x1, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
}

/* Launch until the shard's ledger entry satisfies done(), at most n times. */
static int launch_until(const char *shard, int (*done)(const struct gpushards_ledger_member *, uint64_t), uint64_t arg,
                        long n)
{
    struct gpushards_ledger *L = NULL;
    for (long i = 0; i < n; i++) {
        if (launch() != CUDA_SUCCESS) FAIL("cuLaunchKernel failed");
        if (L == NULL) L = ledger();
        struct gpushards_ledger_member *m = L != NULL ? member(L, shard) : NULL;
        if (m != NULL && done(m, arg)) return 0;
    }
    return 1;
}

static int busy(const struct gpushards_ledger_member *m, uint64_t arg)
{
    return __atomic_load_n(&m->busy_ns, __ATOMIC_RELAXED) > 0 && __atomic_load_n(&m->last_kernel_ns, __ATOMIC_RELAXED) > 0;
}

/* GPU time measured, and a turn ended (its wall time held counted in busy_ns). */
static int measured(const struct gpushards_ledger_member *m, uint64_t arg)
{
    return __atomic_load_n(&m->gpu_ns, __ATOMIC_RELAXED) > 0 && __atomic_load_n(&m->busy_ns, __ATOMIC_RELAXED) > 0;
}

/* The published end of the shard's queue lies ahead of now: work is queued. */
static int queue_end_ahead(const struct gpushards_ledger_member *m, uint64_t arg)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    uint64_t now = (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
    return __atomic_load_n(&m->inflight_until_ns, __ATOMIC_RELAXED) > now;
}

static int share_is(const struct gpushards_ledger_member *m, uint64_t arg)
{
    return __atomic_load_n(&m->share_permille, __ATOMIC_RELAXED) == arg;
}

/* Keep the GPU busy until killed: batches of 500 launches (50 ms of the
 * fake's 100 us kernels), the next batch queued once the one before it has
 * run, so that a batch is always waiting however the process is scheduled.
 * Prints "ready" once two batches have run. */
static int busy_hold(void)
{
    CUevent done[2];
    if (cuEventCreate(&done[0], 0) != CUDA_SUCCESS || cuEventCreate(&done[1], 0) != CUDA_SUCCESS)
        FAIL("cuEventCreate failed");
    for (unsigned batch = 0;; batch++) {
        for (int i = 0; i < 500; i++)
            if (launch() != CUDA_SUCCESS) FAIL("cuLaunchKernel failed");
        if (cuEventRecord(done[batch % 2], NULL) != CUDA_SUCCESS) FAIL("cuEventRecord failed");
        if (batch > 0 && cuEventSynchronize(done[(batch - 1) % 2]) != CUDA_SUCCESS) FAIL("cuEventSynchronize failed");
        if (batch == 2) {
            printf("ready\n");
            fflush(stdout);
        }
    }
}

/* Launches once on a device, in a thread of its own; done says when it returned. */
struct device_launch {
    int device;
    int failed;
    int done;
};

static void *launch_on(void *arg)
{
    struct device_launch *l = arg;
    CUdevice d;
    CUcontext c;
    l->failed = cuDeviceGet(&d, l->device) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&c, d) != CUDA_SUCCESS ||
                cuCtxSetCurrent(c) != CUDA_SUCCESS || launch() != CUDA_SUCCESS;
    __atomic_store_n(&l->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

int compute_scenario(const char *s, int argc, char **argv)
{
    const char *shard = getenv("GPUSHARDS_SHARD_ID");
    if (!strcmp(s, "busy-hold")) {
        if (context() != 0) FAIL("no context");
        return busy_hold();
    }
    if (!strcmp(s, "compute-claim-later")) {
        /* The ledger is full when this process starts: it launches without
         * an entry, says "ready", and keeps launching until an entry freed
         * meanwhile becomes its own (at most 10 s). */
        if (context() != 0 || launch() != CUDA_SUCCESS) FAIL("no launch");
        struct gpushards_ledger *L = ledger();
        if (L == NULL) FAIL("no ledger");
        if (member(L, shard) != NULL) FAIL("%s got an entry in a full ledger", shard);
        printf("ready\n");
        fflush(stdout);
        for (int i = 0; i < 10000; i++) {
            if (launch() != CUDA_SUCCESS) FAIL("cuLaunchKernel failed");
            struct gpushards_ledger_member *m = member(L, shard);
            if (m != NULL && __atomic_load_n(&m->last_kernel_ns, __ATOMIC_RELAXED) > 0) {
                printf("claimed\n");
                return 0;
            }
            usleep(1000);
        }
        FAIL("%s never got the entry that was freed", shard);
    }
    if (!strcmp(s, "idle-hold")) {
        /* A context that launches nothing, until killed. */
        if (context() != 0) FAIL("no context");
        printf("ready\n");
        fflush(stdout);
        for (;;) pause();
    }
    if (!strcmp(s, "compute-launch")) {
        /* Launches pass (with or without a ledger). */
        if (context() != 0) FAIL("no context");
        for (int i = 0; i < 50; i++)
            if (launch() != CUDA_SUCCESS) FAIL("launch %d failed", i);
        printf("launched\n");
        return 0;
    }
    if (!strcmp(s, "compute-busy")) {
        /* The ledger records GPU time held and the last launch. */
        if (context() != 0) FAIL("no context");
        if (launch_until(shard, busy, 0, 10000000) != 0) FAIL("the ledger never showed GPU time for %s", shard);
        printf("busy\n");
        return 0;
    }
    if (!strcmp(s, "compute-measured")) {
        /* Launches while bound (capped) record timed events: the ledger
         * shows GPU time measured from them, and a turn has ended. */
        if (context() != 0) FAIL("no context");
        if (launch_until(shard, measured, 0, 1000000) != 0) FAIL("no GPU time was measured for %s", shard);
        printf("measured\n");
        return 0;
    }
    if (!strcmp(s, "compute-queue-end")) {
        /* Bound by time, the shard publishes when its queued work should end. */
        if (context() != 0) FAIL("no context");
        if (launch_until(shard, queue_end_ahead, 0, 1000000) != 0) FAIL("%s never published its queue's end", shard);
        printf("queue-end\n");
        return 0;
    }
    if (!strcmp(s, "mps-client") && argc > 4) {
        /* argv[3]: the active-thread percentage, argv[4]: the pipe folder
         * the driver must have been given, whatever this process's own
         * environment said before cuInit. */
        if (context() != 0) FAIL("no context");
        const char *percent = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
        const char *pipes = getenv("CUDA_MPS_PIPE_DIRECTORY");
        if (percent == NULL || strcmp(percent, argv[3]) != 0) FAIL("MPS percentage %s, not %s", percent, argv[3]);
        if (pipes == NULL || strcmp(pipes, argv[4]) != 0) FAIL("MPS pipes in %s, not %s", pipes, argv[4]);
        int enabled = 0;
        if (cuDeviceGetAttribute(&enabled, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, 0) != CUDA_SUCCESS || !enabled)
            FAIL("not an MPS client");
        printf("mps %s\n", percent);
        return 0;
    }
    if (!strcmp(s, "mps-refused")) {
        /* Told to be an MPS client where no control daemon answers. */
        CUresult r = cuInit(0);
        if (r != CUDA_ERROR_MPS_CONNECTION_FAILED) FAIL("cuInit returned %d, not CUDA_ERROR_MPS_CONNECTION_FAILED", (int)r);
        if (cuInit(0) != CUDA_ERROR_MPS_CONNECTION_FAILED) FAIL("a second cuInit let the process use CUDA");
        printf("refused\n");
        return 0;
    }
    if (!strcmp(s, "compute-rogue")) {
        /* A process outside libvgpu.so that writes the ledger itself: it
         * holds the turn under an entry of its own, never idle, never
         * owed anything, until killed. */
        if (context() != 0 || launch() != CUDA_SUCCESS) FAIL("no launch"); /* the ledger exists */
        struct gpushards_ledger *L = ledger_rw();
        if (L == NULL) FAIL("cannot map the ledger read-write");
        unsigned r = GPUSHARDS_LEDGER_MEMBERS - 1;
        struct gpushards_ledger_member *me = &L->members[r];
        snprintf(me->shard, sizeof me->shard, "rogue");
        for (int said = 0;; said = 1) {
            uint64_t now = mono_ns();
            __atomic_store_n(&me->vtime, 0, __ATOMIC_RELAXED);
            __atomic_store_n(&me->last_kernel_ns, now, __ATOMIC_RELAXED);
            __atomic_store_n(&me->inflight_ns, now, __ATOMIC_RELAXED);
            __atomic_store_n(&me->seen_ns, now, __ATOMIC_RELAXED);
            __atomic_store_n(&L->since_ns, 0, __ATOMIC_RELAXED);
            __atomic_store_n(&L->turn, GPUSHARDS_TURN(r + 1, 0, (now + 10000000000ull) / 1000ull), __ATOMIC_RELEASE);
            if (!said) {
                printf("ready\n");
                fflush(stdout);
            }
            usleep(100);
        }
    }
    if (!strcmp(s, "compute-ctx-anew")) {
        /* Launches in a context of its own, which it then destroys, then in
         * a second one: a gate registered in the first must not be used in
         * the second (its registration ended with the first). */
        CUdevice d;
        CUcontext first, second;
        if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&d, 0) != CUDA_SUCCESS) FAIL("no device");
        if (cuCtxCreate(&first, NULL, 0, d) != CUDA_SUCCESS) FAIL("no first context");
        for (int i = 0; i < 200; i++)
            if (launch() != CUDA_SUCCESS) FAIL("a launch in the first context failed");
        if (cuCtxSynchronize() != CUDA_SUCCESS || cuCtxDestroy(first) != CUDA_SUCCESS) FAIL("cannot destroy the first context");
        if (cuCtxCreate(&second, NULL, 0, d) != CUDA_SUCCESS) FAIL("no second context");
        for (int i = 0; i < 200; i++)
            if (launch() != CUDA_SUCCESS) FAIL("a launch in the second context failed");
        if (cuCtxSynchronize() != CUDA_SUCCESS) FAIL("the second context's work never finished");
        printf("done\n");
        return 0;
    }
    if (!strcmp(s, "ledger-scribble")) {
        /* A shard that writes the ledger's header outside the protocol, in
         * a loop: zeros over every byte the turns do not use (where gates
         * were once kept), as fast as it can, until killed. */
        if (context() != 0 || launch() != CUDA_SUCCESS) FAIL("no launch"); /* the ledger exists */
        struct gpushards_ledger *L = ledger_rw();
        if (L == NULL) FAIL("cannot map the ledger read-write");
        uint32_t *words = &L->lock + 1, *members = (uint32_t *)(void *)L->members;
        for (int said = 0;; said = 1) {
            for (uint32_t *w = words; w < members; w++) __atomic_store_n(w, 0, __ATOMIC_RELAXED);
            if (!said) {
                printf("ready\n");
                fflush(stdout);
            }
        }
    }
    if (!strcmp(s, "compute-hold")) {
        /* Take the turn, say so, and wait to be killed holding it. */
        if (context() != 0 || launch() != CUDA_SUCCESS) FAIL("no launch");
        struct gpushards_ledger *L = ledger();
        if (L == NULL) FAIL("no ledger");
        unsigned h = GPUSHARDS_TURN_HOLDER(__atomic_load_n(&L->turn, __ATOMIC_ACQUIRE));
        if (h == 0 || strcmp(L->members[h - 1].shard, shard) != 0) FAIL("%s does not hold the turn", shard);
        printf("ready\n");
        fflush(stdout);
        for (;;) pause();
    }
    if (!strcmp(s, "compute-resize") && argc > 4) {
        /* argv[3]: the share the limits file holds now (permille); argv[4]:
         * the share to write in place, as the agent does on a live change. */
        if (context() != 0) FAIL("no context");
        uint64_t before = strtoull(argv[3], NULL, 10), after = strtoull(argv[4], NULL, 10);
        if (launch_until(shard, share_is, before, 10000000) != 0) FAIL("the ledger never showed share %llu",
                                                                       (unsigned long long)before);
        int fd = open(getenv("GPUSHARDS_LIMITS_PATH"), O_WRONLY);
        uint32_t v = (uint32_t)after;
        if (fd < 0 || pwrite(fd, &v, 4, 128 + 64) != 4) FAIL("cannot write the limits file");
        close(fd);
        if (launch_until(shard, share_is, after, 10000000) != 0) FAIL("the ledger never showed share %llu",
                                                                      (unsigned long long)after);
        printf("resized\n");
        return 0;
    }
    if (!strcmp(s, "compute-graph")) {
        /* Graph launches pass the admission: they take turns and are
         * charged in the ledger like kernel launches. */
        if (context() != 0) FAIL("no context");
        CUgraph g;
        CUgraphExec x;
        if (cuGraphCreate(&g, 0) != CUDA_SUCCESS || cuGraphInstantiateWithFlags(&x, g, 0) != CUDA_SUCCESS)
            FAIL("no graph");
        struct gpushards_ledger *L = NULL;
        for (long i = 0; i < 10000000; i++) {
            if (cuGraphLaunch(x, NULL) != CUDA_SUCCESS) FAIL("cuGraphLaunch failed");
            if (L == NULL) L = ledger();
            struct gpushards_ledger_member *m = L != NULL ? member(L, shard) : NULL;
            if (m != NULL && busy(m, 0)) {
                printf("graph-busy\n");
                return 0;
            }
        }
        FAIL("graph launches never showed in the ledger for %s", shard);
    }
    if (!strcmp(s, "compute-depth") && argc > 3) {
        /* argv[3] "graph" or "kernel": ten launches of that kind queued at
         * once while bound; the in-flight waits show in the stats at exit. */
        if (context() != 0) FAIL("no context");
        CUgraph g;
        CUgraphExec x;
        int graph = !strcmp(argv[3], "graph");
        if (graph && (cuGraphCreate(&g, 0) != CUDA_SUCCESS || cuGraphInstantiateWithFlags(&x, g, 0) != CUDA_SUCCESS))
            FAIL("no graph");
        for (int i = 0; i < 10; i++)
            if ((graph ? cuGraphLaunch(x, NULL) : launch()) != CUDA_SUCCESS) FAIL("launch %d failed", i);
        printf("queued\n");
        return 0;
    }
    if (!strcmp(s, "compute-sync-release")) {
        /* Take the turn (a lease far longer than the test), wait until
         * another shard waits for it, then synchronize: the turn must be
         * handed back by the synchronize itself. */
        if (context() != 0 || launch() != CUDA_SUCCESS) FAIL("no launch");
        struct gpushards_ledger *L = ledger();
        if (L == NULL) FAIL("no ledger");
        struct gpushards_ledger_member *me = member(L, shard);
        unsigned h = GPUSHARDS_TURN_HOLDER(__atomic_load_n(&L->turn, __ATOMIC_ACQUIRE));
        if (me == NULL || h == 0 || &L->members[h - 1] != me) FAIL("%s does not hold the turn", shard);
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        uint64_t ready = (uint64_t)t0.tv_sec * 1000000000ull + (uint64_t)t0.tv_nsec;
        printf("ready\n");
        fflush(stdout);
        while (__atomic_load_n(&L->last_wait_ns, __ATOMIC_ACQUIRE) < ready) sched_yield();
        if (cuCtxSynchronize() != CUDA_SUCCESS) FAIL("cuCtxSynchronize failed");
        h = GPUSHARDS_TURN_HOLDER(__atomic_load_n(&L->turn, __ATOMIC_ACQUIRE));
        if (h != 0 && &L->members[h - 1] == me) FAIL("%s still holds the turn after synchronizing", shard);
        printf("released\n");
        return 0;
    }
    if (!strcmp(s, "compute-two-gpus")) {
        /* GPU 0's turn is held from outside libvgpu.so (a rogue): a launch
         * there waits behind the gate for about a second, until the turn
         * thread gives up.  A launch on GPU 1 meanwhile must not wait for
         * it: it returns while GPU 0's is still held. */
        if (cuInit(0) != CUDA_SUCCESS) FAIL("cuInit failed");
        struct device_launch first = {0, 0, 0}, second = {1, 0, 0};
        pthread_t t0, t1;
        if (pthread_create(&t0, NULL, launch_on, &first) != 0) FAIL("no thread");
        struct gpushards_ledger *L = ledger();
        if (L == NULL) FAIL("no ledger");
        /* GPU 0's launch is behind the gate once this process waits there. */
        while (__atomic_load_n(&L->last_wait_ns, __ATOMIC_ACQUIRE) == 0) sched_yield();
        if (pthread_create(&t1, NULL, launch_on, &second) != 0) FAIL("no thread");
        pthread_join(t1, NULL);
        int first_done = __atomic_load_n(&first.done, __ATOMIC_ACQUIRE);
        pthread_join(t0, NULL);
        if (first.failed || second.failed) FAIL("a launch failed");
        if (first_done) FAIL("GPU 1's launch waited for GPU 0's turn");
        printf("independent\n");
        return 0;
    }
    return -1;
}
