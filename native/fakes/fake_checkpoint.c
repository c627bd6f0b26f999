/* fake_checkpoint.c — the driver's checkpoint API (cuCheckpointProcess*,
 * driver >= 570), as another process (the agent) drives it on a process of
 * the fake driver, named by its pid as the caller sees it (the host pid of a
 * process in a container, translated as the fake NVML translates it).
 *
 * Each process's state lives in its entry of the shared state file
 * (fake_common.h): RUNNING -> lock -> LOCKED -> checkpoint -> CHECKPOINTED
 * -> restore -> LOCKED -> unlock -> RUNNING, anything else refused with
 * CUDA_ERROR_ILLEGAL_STATE, as the API documents.
 *   - lock: from then on every driver call of the process waits at its entry
 *     (fake_call_enter) until unlock; the lock itself waits for the calls
 *     under way to return (timeoutMs: CUDA_ERROR_NOT_READY, left RUNNING);
 *   - checkpoint: the process's device memory leaves the card's capacity (the
 *     real driver copies it to host memory and releases its allocations and
 *     contexts, so NVML no longer lists it); its bytes stay where they are,
 *     since the fake's device memory is host memory of the process;
 *   - restore: the card's capacity is taken back, all of it or nothing
 *     (CUDA_ERROR_OUT_OF_MEMORY, still CHECKPOINTED, when it lacks room);
 *     a process holding a CUDA IPC import (fake_ipc.c) is refused with
 *     CUDA_ERROR_INVALID_VALUE, one holding a VMM import (fake_vmm.c)
 *     with CUDA_ERROR_NOT_SUPPORTED, and it stays CHECKPOINTED, its calls
 *     waiting for good, as driver 580 does on an H200 (lock and checkpoint
 *     succeed; native/gpu-tests/RESULTS.md, 2026-11-29);
 *   - a process that dies gives its entry back like any dead process (what
 *     a checkpoint moved out is its host memory: gone with it).
 * A pid that holds no entry (no CUDA in it, or gone) is refused with
 * CUDA_ERROR_INVALID_VALUE, one of the errors every one of these functions
 * documents.  FAILED is never reached: the fake's moves cannot fail half way.
 *
 * GPUSHARDS_FAKE_MOVE_GATE, in the caller's environment (the agent's), names a
 * file: a seam for tests that stop the caller in the middle of a move, which
 * a real driver's seconds-long copies leave plenty of time for.  Before a
 * checkpoint or restore touches its target it takes a pass from the file: the
 * file holds a count; above 0 the call takes one (writes back one less, under
 * flock) and goes on; at 0 it waits until the count rises or the file is
 * gone; without the file it goes on. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fake_cuda.h"

/* The state file is a shared mapping: its futex words are seen by every process. */
static void futex_wait(uint32_t *word, uint32_t value, const struct timespec *timeout)
{
    syscall(SYS_futex, word, FUTEX_WAIT, value, timeout, NULL, 0);
}

static void futex_wake(uint32_t *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* ---- the calls of a locked process wait ------------------------------------ */
static __thread int call_depth;

struct fake_call fake_call_enter(void)
{
    if (call_depth++ > 0 || !fake_initialized()) return (struct fake_call){NULL};
    struct fake_proc *p = fake_proc_mine();
    if (p == NULL) p = fake_proc_claim(); /* a fork child's first call */
    if (p == NULL) return (struct fake_call){NULL};
    /* Counted before the state is read, and the locker reads the count
     * after it set the state: one of the two sees the other. */
    for (;;) {
        __atomic_add_fetch(&p->inflight, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&p->ckpt, __ATOMIC_SEQ_CST) == FAKE_CKPT_RUNNING) return (struct fake_call){p};
        if (__atomic_sub_fetch(&p->inflight, 1, __ATOMIC_SEQ_CST) == 0) futex_wake(&p->inflight);
        uint32_t s;
        while ((s = __atomic_load_n(&p->ckpt, __ATOMIC_SEQ_CST)) != FAKE_CKPT_RUNNING) futex_wait(&p->ckpt, s, NULL);
    }
}

void fake_call_leave(struct fake_call *c)
{
    call_depth--;
    if (c->p == NULL) return;
    if (__atomic_sub_fetch(&c->p->inflight, 1, __ATOMIC_SEQ_CST) == 0 &&
        __atomic_load_n(&c->p->ckpt, __ATOMIC_SEQ_CST) != FAKE_CKPT_RUNNING)
        futex_wake(&c->p->inflight);
}

/* ---- the API ---------------------------------------------------------------- */
static int zeros(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0) return 0;
    return 1;
}

/* The target, or an error for the caller to return. */
static CUresult target(int pid, struct fake_proc **p, uint32_t *gen)
{
    if (!fake_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    *p = fake_proc_named(pid, gen);
    return *p != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Moves the target from one state to another, or says it was elsewhere. */
static CUresult move(struct fake_proc *p, uint32_t from, uint32_t to)
{
    uint32_t s = from;
    if (__atomic_compare_exchange_n(&p->ckpt, &s, to, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) return CUDA_SUCCESS;
    return CUDA_ERROR_ILLEGAL_STATE;
}

static void settle(struct fake_proc *p, uint32_t to)
{
    __atomic_store_n(&p->ckpt, to, __ATOMIC_SEQ_CST);
    futex_wake(&p->ckpt);
}

static uint64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

/* 1: a pass was taken, or there is no gate to take one from; 0: the count is 0. */
static int move_pass_taken(const char *path)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return 1; /* no gate (or none this process may use) */
    int taken = 1;
    if (flock(fd, LOCK_EX) == 0) {
        char text[32] = {0};
        ssize_t n = pread(fd, text, sizeof text - 1, 0);
        long count = n > 0 ? strtol(text, NULL, 10) : 0;
        if (count > 0) {
            int len = snprintf(text, sizeof text, "%ld\n", count - 1);
            if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)len, 0) != len)
                fprintf(stderr, "[fake-gpu] cannot take a pass from %s: %s\n", path, strerror(errno));
        } else {
            taken = 0;
        }
    }
    close(fd); /* releases the flock */
    return taken;
}

static void move_gate(void)
{
    const char *path = getenv("GPUSHARDS_FAKE_MOVE_GATE");
    if (path == NULL || *path == '\0') return;
    while (!move_pass_taken(path)) {
        struct timespec slice = {0, 10 * 1000000L};
        nanosleep(&slice, NULL);
    }
}

API CUresult cuCheckpointProcessGetState(int pid, CUprocessState *state)
{
    if (state == NULL) return CUDA_ERROR_INVALID_VALUE;
    struct fake_proc *p;
    uint32_t gen;
    CUresult r = target(pid, &p, &gen);
    if (r != CUDA_SUCCESS) return r;
    switch (__atomic_load_n(&p->ckpt, __ATOMIC_SEQ_CST)) {
    case FAKE_CKPT_RUNNING: case FAKE_CKPT_LOCKING: *state = CU_PROCESS_STATE_RUNNING; break;
    case FAKE_CKPT_LOCKED: case FAKE_CKPT_CHECKPOINTING: *state = CU_PROCESS_STATE_LOCKED; break;
    case FAKE_CKPT_CHECKPOINTED: case FAKE_CKPT_RESTORING: *state = CU_PROCESS_STATE_CHECKPOINTED; break;
    default: *state = CU_PROCESS_STATE_FAILED; break;
    }
    return CUDA_SUCCESS;
}

/* The fake has no restore thread of its own: the process's main thread
 * stands in, named as the caller names the process. */
API CUresult cuCheckpointProcessGetRestoreThreadId(int pid, int *tid)
{
    if (tid == NULL) return CUDA_ERROR_INVALID_VALUE;
    struct fake_proc *p;
    uint32_t gen;
    CUresult r = target(pid, &p, &gen);
    if (r == CUDA_SUCCESS) *tid = pid;
    return r;
}

API CUresult cuCheckpointProcessLock(int pid, CUcheckpointLockArgs *args)
{
    if (args != NULL && (args->reserved0 != 0 || !zeros(args->reserved1, sizeof args->reserved1)))
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_proc *p;
    uint32_t gen;
    CUresult r = target(pid, &p, &gen);
    if (r != CUDA_SUCCESS) return r;
    if ((r = move(p, FAKE_CKPT_RUNNING, FAKE_CKPT_LOCKING)) != CUDA_SUCCESS) return r;
    uint64_t timeout = args != NULL ? args->timeoutMs : 0, deadline = now_ms() + timeout;
    /* New calls now wait at their entry; the ones under way are let finish. */
    uint32_t n;
    while ((n = __atomic_load_n(&p->inflight, __ATOMIC_SEQ_CST)) != 0) {
        if (!fake_proc_still(p, gen)) return CUDA_ERROR_INVALID_VALUE; /* it died meanwhile */
        uint64_t now = now_ms();
        if (timeout != 0 && now >= deadline) {
            settle(p, FAKE_CKPT_RUNNING);
            return CUDA_ERROR_NOT_READY;
        }
        uint64_t slice = timeout != 0 && deadline - now < 10 ? deadline - now : 10;
        struct timespec ts = {0, (long)slice * 1000000L};
        futex_wait(&p->inflight, n, &ts);
    }
    return move(p, FAKE_CKPT_LOCKING, FAKE_CKPT_LOCKED);
}

API CUresult cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs *args)
{
    if (args != NULL && !zeros(args->reserved, sizeof args->reserved)) return CUDA_ERROR_INVALID_VALUE;
    move_gate();
    struct fake_proc *p;
    uint32_t gen;
    CUresult r = target(pid, &p, &gen);
    if (r != CUDA_SUCCESS) return r;
    if ((r = move(p, FAKE_CKPT_LOCKED, FAKE_CKPT_CHECKPOINTING)) != CUDA_SUCCESS) return r;
    /* Locked with no call under way: nothing else changes its usage now. */
    for (int g = 0; g < FAKE_MAX_GPUS; g++) {
        uint64_t v = __atomic_exchange_n(&p->used[g], 0, __ATOMIC_ACQ_REL);
        __atomic_store_n(&p->moved[g], v, __ATOMIC_RELEASE);
        if (v != 0) fake_phys_unreserve(g, v);
    }
    settle(p, FAKE_CKPT_CHECKPOINTED);
    return CUDA_SUCCESS;
}

API CUresult cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs *args)
{
    if (args != NULL &&
        (!zeros(args->reserved, sizeof args->reserved) || args->reserved1 != 0 ||
         (args->gpuPairsCount != 0 && args->gpuPairs == NULL)))
        return CUDA_ERROR_INVALID_VALUE;
    /* Restoring onto other GPUs is not simulated. */
    if (args != NULL && args->gpuPairsCount != 0) return CUDA_ERROR_NOT_SUPPORTED;
    move_gate();
    struct fake_proc *p;
    uint32_t gen;
    CUresult r = target(pid, &p, &gen);
    if (r != CUDA_SUCCESS) return r;
    if ((r = move(p, FAKE_CKPT_CHECKPOINTED, FAKE_CKPT_RESTORING)) != CUDA_SUCCESS) return r;
    if (__atomic_load_n(&p->ipc_imports, __ATOMIC_ACQUIRE) != 0) {
        settle(p, FAKE_CKPT_CHECKPOINTED);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (__atomic_load_n(&p->vmm_imports, __ATOMIC_ACQUIRE) != 0) {
        settle(p, FAKE_CKPT_CHECKPOINTED);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    int g = 0;
    for (; g < FAKE_MAX_GPUS; g++) {
        uint64_t v = __atomic_load_n(&p->moved[g], __ATOMIC_ACQUIRE);
        if (v != 0 && fake_phys_reserve(g, v) != 0) break;
    }
    if (g < FAKE_MAX_GPUS) { /* no room on GPU g: give back what was taken, stay checkpointed */
        while (g-- > 0) {
            uint64_t v = __atomic_load_n(&p->moved[g], __ATOMIC_ACQUIRE);
            if (v != 0) fake_phys_unreserve(g, v);
        }
        settle(p, FAKE_CKPT_CHECKPOINTED);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (g = 0; g < FAKE_MAX_GPUS; g++)
        __atomic_add_fetch(&p->used[g], __atomic_exchange_n(&p->moved[g], 0, __ATOMIC_ACQ_REL), __ATOMIC_ACQ_REL);
    settle(p, FAKE_CKPT_LOCKED);
    return CUDA_SUCCESS;
}

API CUresult cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs *args)
{
    if (args != NULL && !zeros(args->reserved, sizeof args->reserved)) return CUDA_ERROR_INVALID_VALUE;
    struct fake_proc *p;
    uint32_t gen;
    CUresult r = target(pid, &p, &gen);
    if (r != CUDA_SUCCESS) return r;
    if ((r = move(p, FAKE_CKPT_LOCKED, FAKE_CKPT_RUNNING)) != CUDA_SUCCESS) return r;
    futex_wake(&p->ckpt);
    return CUDA_SUCCESS;
}
