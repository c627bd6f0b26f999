/* client_elastic.c — scenarios of elastic memory (issue #30) and of a
 * neighbour's pressure (issue #31), run by runner_elastic.c, which plays the
 * agent: it drives the checkpoint API from another process, marks the limits
 * file suspended, watches the region's bell, and kills the offender.  The
 * driver's entry points are called by name (the client is linked against the
 * fake, and libvgpu.so, when preloaded, comes first). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client_check.h"
#include "client_elastic.h"
#include "cuda_subset.h"

#define MiB (1ull << 20)

static CUcontext ctx;

static int begin(void)
{
    OK(cuInit(0));
    CUdevice d;
    OK(cuDeviceGet(&d, 0));
    OK(cuDevicePrimaryCtxRetain(&ctx, d));
    OK(cuCtxSetCurrent(ctx));
    return 0;
}

/* Says "ready" and waits for the runner's SIGUSR1 (blocked before, so an
 * early one is kept). */
static void ready_then_wait(const char *what)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    printf("%s\n", what);
    fflush(stdout);
    int sig;
    sigwait(&set, &sig);
}

static void block_usr1(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, NULL);
}

static void pattern(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)((i * 2654435761u + seed) >> 7);
}

/* A process the runner checkpoints: it writes a pattern into device memory,
 * says ready, and at SIGUSR1 reads it back ("calling" first: the read is the
 * call that waits while the process is locked). */
static int s_ckpt_target(const char *bytes_text)
{
    block_usr1();
    if (begin()) return 1;
    size_t n = strtoull(bytes_text, NULL, 10) * MiB;
    CUdeviceptr p;
    OK(cuMemAlloc_v2(&p, n));
    size_t probe = 1 * MiB;
    unsigned char *in = malloc(probe), *out = malloc(probe);
    CHECK(in != NULL && out != NULL, "malloc");
    pattern(in, probe, (unsigned)getpid());
    OK(cuMemcpyHtoD_v2(p, in, probe));
    OK(cuMemcpyHtoD_v2(p + n - probe, in, probe));
    ready_then_wait("ready");
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
    if (begin()) return 1;
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
    block_usr1();
    if (begin()) return 1;
    struct wake_rig w;
    if (rig_up(&w)) return 1;
    ready_then_wait("ready");
    printf("calling\n");
    fflush(stdout);
    CUresult r = wake_call(&w, call);
    printf("done %d\n", (int)r);
    return r == CUDA_SUCCESS ? 0 : 1;
}

/* Every call of wake_call once, no waiting: a resident shard's run. */
static int s_wake_all(void)
{
    if (begin()) return 1;
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

int elastic_scenario(const char *s, int argc, char **argv)
{
    if (!strcmp(s, "wake-call") && argc > 3) return s_wake_call(argv[3]);
    if (!strcmp(s, "wake-all")) return s_wake_all();
    if (!strcmp(s, "ckpt-target") && argc > 3) return s_ckpt_target(argv[3]);
    if (!strcmp(s, "busy-sync")) return s_busy_sync();
    return -1;
}
