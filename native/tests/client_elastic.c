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

int elastic_scenario(const char *s, int argc, char **argv)
{
    if (!strcmp(s, "ckpt-target") && argc > 3) return s_ckpt_target(argv[3]);
    if (!strcmp(s, "busy-sync")) return s_busy_sync();
    return -1;
}
