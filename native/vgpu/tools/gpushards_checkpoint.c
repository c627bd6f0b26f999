/* gpushards-checkpoint — drive the driver's checkpoint API on one process from
 * a shell, as the agent does through koffi (docs/elastic.md): for operators
 * looking at a stuck shard, and for the native tests, which play the agent.
 *
 *   gpushards-checkpoint state PID          prints running|locked|checkpointed|failed
 *   gpushards-checkpoint lock PID [MS]      waits at most MS ms for its calls to return (default: no limit)
 *   gpushards-checkpoint checkpoint PID
 *   gpushards-checkpoint restore PID
 *   gpushards-checkpoint unlock PID
 *   gpushards-checkpoint restore-tid PID    prints the restore thread's id
 *
 * PID as this shell sees it (a container's process by its host pid).  The
 * driver is libcuda.so.1 as the dynamic loader finds it (LD_LIBRARY_PATH
 * puts the fake one in its place).  Prints "ok" (or the answer) and exits 0;
 * when the driver refuses, prints its error's name (CUDA_ERROR_ILLEGAL_STATE)
 * with its description on stderr and exits 1; bad arguments or no driver
 * exit 2. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_subset.h"

static void *driver;

static void *need(const char *name)
{
    void *f = dlsym(driver, name);
    if (f == NULL) {
        fprintf(stderr, "gpushards-checkpoint: the driver has no %s (the checkpoint API needs driver 570 or newer)\n",
                name);
        exit(2);
    }
    return f;
}

static int number(const char *text, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v <= 0 || v > max) return -1;
    *out = v;
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: gpushards-checkpoint state|lock|checkpoint|restore|unlock|restore-tid PID [TIMEOUT_MS]\n");
    return 2;
}

/* 0 on success; else the driver's error named on stdout, described on stderr. */
static int report(CUresult r, const char *call, long pid)
{
    if (r == CUDA_SUCCESS) return 0;
    CUresult (*name_of)(CUresult, const char **) = (CUresult(*)(CUresult, const char **))need("cuGetErrorName");
    CUresult (*text_of)(CUresult, const char **) = (CUresult(*)(CUresult, const char **))need("cuGetErrorString");
    const char *name = NULL, *text = NULL;
    if (name_of(r, &name) != CUDA_SUCCESS || name == NULL) name = "CUDA_ERROR";
    if (text_of(r, &text) != CUDA_SUCCESS || text == NULL) text = "no description";
    printf("%s\n", name);
    fprintf(stderr, "gpushards-checkpoint: %s(%ld) returned %s (%d): %s\n", call, pid, name, (int)r, text);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) return usage();
    const char *op = argv[1];
    long pid, timeout = 0;
    if (number(argv[2], INT_MAX, &pid) != 0) {
        fprintf(stderr, "gpushards-checkpoint: \"%s\" is not a process id\n", argv[2]);
        return 2;
    }
    if (argc == 4 && (strcmp(op, "lock") != 0 || number(argv[3], UINT_MAX, &timeout) != 0)) {
        fprintf(stderr, "gpushards-checkpoint: a timeout in ms (1 or more) is taken by lock only, got \"%s\"\n",
                argv[3]);
        return 2;
    }
    driver = dlopen("libcuda.so.1", RTLD_NOW);
    if (driver == NULL) {
        fprintf(stderr, "gpushards-checkpoint: cannot load libcuda.so.1: %s\n", dlerror());
        return 2;
    }
    /* A restore needs the driver initialised in the caller. */
    CUresult r = ((CUresult(*)(unsigned int))need("cuInit"))(0);
    if (r != CUDA_SUCCESS) return report(r, "cuInit", pid);
    if (strcmp(op, "state") == 0) {
        static const char *const names[] = {"running", "locked", "checkpointed", "failed"};
        CUprocessState s;
        r = ((CUresult(*)(int, CUprocessState *))need("cuCheckpointProcessGetState"))((int)pid, &s);
        if (r != CUDA_SUCCESS) return report(r, "cuCheckpointProcessGetState", pid);
        printf("%s\n", (unsigned)s < 4 ? names[s] : "unknown");
        return 0;
    }
    if (strcmp(op, "restore-tid") == 0) {
        int tid;
        r = ((CUresult(*)(int, int *))need("cuCheckpointProcessGetRestoreThreadId"))((int)pid, &tid);
        if (r != CUDA_SUCCESS) return report(r, "cuCheckpointProcessGetRestoreThreadId", pid);
        printf("%d\n", tid);
        return 0;
    }
    const char *call;
    if (strcmp(op, "lock") == 0) {
        CUcheckpointLockArgs args;
        memset(&args, 0, sizeof args);
        args.timeoutMs = (unsigned int)timeout;
        r = ((CUresult(*)(int, CUcheckpointLockArgs *))need(call = "cuCheckpointProcessLock"))((int)pid, &args);
    } else if (strcmp(op, "checkpoint") == 0) {
        r = ((CUresult(*)(int, CUcheckpointCheckpointArgs *))need(call = "cuCheckpointProcessCheckpoint"))((int)pid,
                                                                                                         NULL);
    } else if (strcmp(op, "restore") == 0) {
        r = ((CUresult(*)(int, CUcheckpointRestoreArgs *))need(call = "cuCheckpointProcessRestore"))((int)pid, NULL);
    } else if (strcmp(op, "unlock") == 0) {
        r = ((CUresult(*)(int, CUcheckpointUnlockArgs *))need(call = "cuCheckpointProcessUnlock"))((int)pid, NULL);
    } else {
        return usage();
    }
    if (r != CUDA_SUCCESS) return report(r, call, pid);
    printf("ok\n");
    return 0;
}
