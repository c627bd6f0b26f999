/* client_elastic.c — scenarios of elastic memory (issue #30) and of a
 * neighbour's pressure (issue #31), run by runner_elastic.c, which plays the
 * agent: it drives the checkpoint API from another process, marks the limits
 * file suspended, watches the region's bell, and kills the offender.  The
 * driver's entry points are called by name (the client is linked against the
 * fake, and libvgpu.so, when preloaded, comes first). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "client_check.h"
#include "client_elastic.h"
#include "client_process.h"
#include "cuda_subset.h"
#include "gpushards_region.h"

/* The legacy 32-bit ABI's allocation, by its own symbol. */
#undef cuMemAlloc
CUresult cuMemAlloc(unsigned int *dptr, unsigned int bytesize);

#define MiB (1ull << 20)

static CUcontext ctx;

static void pattern(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)((i * 2654435761u + seed) >> 7);
}

/* A process the runner checkpoints: it writes a pattern into device memory,
 * says ready, and at SIGUSR1 reads it back ("calling" first: the read is the
 * call that waits while the process is locked). */
static int s_ckpt_target(const char *bytes_text)
{
    client_block_usr1();
    if (client_begin(&ctx)) return 1;
    size_t n = strtoull(bytes_text, NULL, 10) * MiB;
    CUdeviceptr p;
    OK(cuMemAlloc_v2(&p, n));
    size_t probe = 1 * MiB;
    unsigned char *in = malloc(probe), *out = malloc(probe);
    CHECK(in != NULL && out != NULL, "malloc");
    pattern(in, probe, (unsigned)getpid());
    OK(cuMemcpyHtoD_v2(p, in, probe));
    OK(cuMemcpyHtoD_v2(p + n - probe, in, probe));
    client_say_then_wait("ready");
    printf("calling\n");
    fflush(stdout);
    OK(cuMemcpyDtoH_v2(out, p + n - probe, probe));
    CHECK(memcmp(in, out, probe) == 0, "the data at the end of the allocation changed");
    OK(cuMemcpyDtoH_v2(out, p, probe));
    CHECK(memcmp(in, out, probe) == 0, "the data at the start of the allocation changed");
    OK(cuMemFree_v2(p));
    printf("done ok\n");
    return 0;
}

/* A process inside a driver call that does not return soon: a synchronize
 * on work that runs GPUSHARDS_FAKE_KERNEL_US (set long by the runner). */
static int s_busy_sync(void)
{
    if (client_begin(&ctx)) return 1;
    CUevent e;
    OK(cuEventCreate(&e, 0));
    OK(cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    OK(cuEventRecord(e, NULL));
    printf("syncing\n");
    fflush(stdout);
    OK(cuEventSynchronize(e));
    printf("synced\n");
    return 0;
}

/* ---- the wake gate ---------------------------------------------------------- */
struct wake_rig {
    CUdeviceptr buf;
    CUstream stream;
    CUevent event;
    unsigned char host[4096];
};

static int rig_up(struct wake_rig *w)
{
    OK(cuMemAlloc_v2(&w->buf, 1 * MiB));
    OK(cuStreamCreate(&w->stream, 0));
    OK(cuEventCreate(&w->event, 0));
    OK(cuEventRecord(w->event, w->stream));
    memset(w->host, 7, sizeof w->host);
    return 0;
}

typedef CUresult (*htod_fn)(CUdeviceptr, const void *, size_t);

/* One call a process of a suspended shard makes when it wants its GPU. */
static CUresult wake_call(struct wake_rig *w, const char *call)
{
    CUdeviceptr p;
    if (!strcmp(call, "alloc")) return cuMemAlloc_v2(&p, 1 * MiB);
    if (!strcmp(call, "launch")) return cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, w->stream, NULL, NULL);
    if (!strcmp(call, "htod")) return cuMemcpyHtoD_v2(w->buf, w->host, sizeof w->host);
    if (!strcmp(call, "dtoh-async")) return cuMemcpyDtoHAsync_v2(w->host, w->buf, sizeof w->host, w->stream);
    if (!strcmp(call, "memset")) return cuMemsetD32_v2(w->buf, 42, 1024);
    if (!strcmp(call, "ctx-sync")) return cuCtxSynchronize();
    if (!strcmp(call, "stream-sync")) return cuStreamSynchronize(w->stream);
    if (!strcmp(call, "event-sync")) return cuEventSynchronize(w->event);
    if (!strcmp(call, "stream-wait")) return cuStreamWaitEvent(w->stream, w->event, 0);
    if (!strcmp(call, "htod-ptds")) {
        /* As the runtime built for the per-thread default stream finds it. */
        void *fn = NULL;
        CUdriverProcAddressQueryResult st;
        CUresult r = cuGetProcAddress_v2("cuMemcpyHtoD", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st);
        if (r != CUDA_SUCCESS || fn == NULL) return CUDA_ERROR_NOT_FOUND;
        return ((htod_fn)fn)(w->buf, w->host, sizeof w->host);
    }
    return CUDA_ERROR_INVALID_VALUE;
}

/* Ready, then at SIGUSR1 one call ("calling" first, "done R" after). */
static int s_wake_call(const char *call)
{
    client_block_usr1();
    if (client_begin(&ctx)) return 1;
    struct wake_rig w;
    if (rig_up(&w)) return 1;
    client_say_then_wait("ready");
    printf("calling\n");
    fflush(stdout);
    CUresult r = wake_call(&w, call);
    printf("done %d\n", (int)r);
    return r == CUDA_SUCCESS ? 0 : 1;
}

/* Every call of wake_call once, no waiting: a resident shard's run. */
static int s_wake_all(void)
{
    if (client_begin(&ctx)) return 1;
    struct wake_rig w;
    if (rig_up(&w)) return 1;
    static const char *const calls[] = {"alloc",    "launch",      "htod",       "dtoh-async",  "memset",
                                        "ctx-sync", "stream-sync", "event-sync", "stream-wait", "htod-ptds"};
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        CUresult r = wake_call(&w, calls[i]);
        CHECK(r == CUDA_SUCCESS, "%s returned %d", calls[i], (int)r);
    }
    printf("done\n");
    return 0;
}

/* ---- a neighbour's pressure ------------------------------------------------ */
/* What the region says this container holds on GPU 0, read as the agent reads it. */
static uint64_t region_used0(void)
{
    static struct gpushards_region *r;
    if (r == NULL) {
        int fd = open(getenv("GPUSHARDS_REGION_PATH"), O_RDONLY);
        if (fd < 0) return UINT64_MAX;
        void *m = mmap(NULL, sizeof *r, PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        if (m == MAP_FAILED) return UINT64_MAX;
        r = m;
    }
    const uint8_t gpu0[16] = {0xfa, 0x4e, 0x50, 0, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0, 0};
    for (uint32_t i = 0; i < r->header.device_count; i++)
        if (memcmp(r->devices[i].uuid, gpu0, 16) == 0) return __atomic_load_n(&r->devices[i].used_bytes, __ATOMIC_ACQUIRE);
    return UINT64_MAX;
}

/* What each allocation path needs set up before it is tried. */
struct pressure_rig {
    CUstream stream;
    CUgraphExec graph;
};

#define PRESSURE_BYTES (64 * MiB)

static int pressure_rig_up(const char *path, struct pressure_rig *g)
{
    OK(cuStreamCreate(&g->stream, 0));
    if (!strcmp(path, "graph")) {
        CUgraph graph;
        OK(cuGraphCreate(&graph, 0));
        CUDA_MEM_ALLOC_NODE_PARAMS p;
        memset(&p, 0, sizeof p);
        p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        p.poolProps.location.id = 0;
        p.bytesize = PRESSURE_BYTES;
        CUgraphNode node;
        OK(cuGraphAddMemAllocNode(&node, graph, NULL, 0, &p));
        OK(cuGraphInstantiateWithFlags(&g->graph, graph, 0));
    }
    return 0;
}

/* One allocation of PRESSURE_BYTES (a context for "ctx") by the path named. */
static CUresult pressure_call(const char *path, struct pressure_rig *g)
{
    CUdeviceptr p;
    if (!strcmp(path, "linear")) return cuMemAlloc_v2(&p, PRESSURE_BYTES);
    if (!strcmp(path, "managed")) return cuMemAllocManaged(&p, PRESSURE_BYTES, CU_MEM_ATTACH_GLOBAL);
    if (!strcmp(path, "pitch")) {
        size_t pitch;
        return cuMemAllocPitch_v2(&p, &pitch, 64 * 1024, PRESSURE_BYTES / (64 * 1024), 4);
    }
    if (!strcmp(path, "legacy")) {
        unsigned int p32;
        return cuMemAlloc(&p32, (unsigned int)PRESSURE_BYTES);
    }
    if (!strcmp(path, "vmm")) {
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof prop);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = 0;
        CUmemGenericAllocationHandle h;
        return cuMemCreate(&h, PRESSURE_BYTES, &prop, 0);
    }
    if (!strcmp(path, "async")) return cuMemAllocAsync(&p, PRESSURE_BYTES, g->stream);
    if (!strcmp(path, "array")) {
        CUDA_ARRAY_DESCRIPTOR d = {.Width = 4096, .Height = 4096, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
        CUarray a;
        return cuArrayCreate_v2(&a, &d);
    }
    if (!strcmp(path, "mipmap")) {
        CUDA_ARRAY3D_DESCRIPTOR d = {.Width = 4096, .Height = 4096, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
        CUmipmappedArray m;
        return cuMipmappedArrayCreate(&m, &d, 1);
    }
    if (!strcmp(path, "ctx")) {
        CUcontext c;
        CUresult r = cuCtxCreate_v4(&c, NULL, 0, 0);
        if (r == CUDA_SUCCESS) cuCtxSetCurrent(ctx);
        return r;
    }
    if (!strcmp(path, "graph")) return cuGraphLaunch(g->graph, g->stream);
    if (!strcmp(path, "heap")) return cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 8 * MiB + PRESSURE_BYTES);
    return CUDA_ERROR_INVALID_VALUE;
}

static uint64_t elapsed_ms(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (uint64_t)((t1.tv_sec - t0->tv_sec) * 1000 + (t1.tv_nsec - t0->tv_nsec) / 1000000);
}

/* Ready, then at SIGUSR1 one allocation by PATH.  EXPECT "ok": it succeeds
 * and is charged; a number of ms: the driver's refusal reaches the caller no
 * sooner than that, the charge rolled back. */
static int s_pressure(const char *path, const char *expect)
{
    client_block_usr1();
    if (client_begin(&ctx)) return 1;
    struct pressure_rig g;
    if (pressure_rig_up(path, &g)) return 1;
    client_say_then_wait("ready");
    uint64_t base = region_used0();
    CHECK(base != UINT64_MAX, "no region entry for GPU 0");
    printf("calling\n");
    fflush(stdout);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CUresult r = pressure_call(path, &g);
    uint64_t ms = elapsed_ms(&t0), after = region_used0();
    printf("result %d after %llu ms, charged %lld\n", (int)r, (unsigned long long)ms, (long long)(after - base));
    fflush(stdout);
    if (!strcmp(expect, "ok")) {
        CHECK(r == CUDA_SUCCESS, "%s: the driver's %d reached the caller", path, (int)r);
        CHECK(after > base || !strcmp(path, "ctx"), "%s: nothing charged (%llu then %llu)", path,
              (unsigned long long)base, (unsigned long long)after);
        return 0;
    }
    CHECK(r == CUDA_ERROR_OUT_OF_MEMORY, "%s: %d, not the driver's out of memory", path, (int)r);
    CHECK(after == base, "%s: the charge was not rolled back (%llu then %llu)", path, (unsigned long long)base,
          (unsigned long long)after);
    uint64_t wait_ms = strtoull(expect, NULL, 10);
    CHECK(ms >= wait_ms, "%s: gave up after %llu ms, before the %llu ms bound", path, (unsigned long long)ms,
          (unsigned long long)wait_ms);
    return 0;
}

int elastic_scenario(const char *s, int argc, char **argv)
{
    if (!strcmp(s, "pressure") && argc > 4) return s_pressure(argv[3], argv[4]);
    if (!strcmp(s, "wake-call") && argc > 3) return s_wake_call(argv[3]);
    if (!strcmp(s, "wake-all")) return s_wake_all();
    if (!strcmp(s, "ckpt-target") && argc > 3) return s_ckpt_target(argv[3]);
    if (!strcmp(s, "busy-sync")) return s_busy_sync();
    return -1;
}
