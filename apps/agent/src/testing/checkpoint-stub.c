/* checkpoint-stub — a libcuda that has cuInit and the error strings, and (with
 * -DWITH_CHECKPOINT) the checkpoint API with fixed answers, for the agent's binding test:
 *   GetState: pid 101 RUNNING, 102 LOCKED, 103 CHECKPOINTED, 104 FAILED, else INVALID_VALUE;
 *   Lock: CUDA_ERROR_NOT_READY unless args->timeoutMs is 1234 and the reserved words are 0;
 *   Checkpoint: CUDA_ERROR_NOT_SUPPORTED for pid 99;
 *   Restore, Unlock: success; every call counts in stub_calls(). */
#include <stdint.h>
#include <string.h>

typedef int CUresult;
static int calls;

int stub_calls(void) { return calls; }

CUresult cuInit(unsigned int flags) { (void)flags; return 0; }

CUresult cuGetErrorName(CUresult code, const char **name)
{
    switch (code) {
    case 1: *name = "CUDA_ERROR_INVALID_VALUE"; return 0;
    case 600: *name = "CUDA_ERROR_NOT_READY"; return 0;
    case 801: *name = "CUDA_ERROR_NOT_SUPPORTED"; return 0;
    default: return 1;
    }
}

CUresult cuGetErrorString(CUresult code, const char **text)
{
    switch (code) {
    case 1: *text = "invalid argument"; return 0;
    case 600: *text = "device not ready"; return 0;
    case 801: *text = "operation not supported"; return 0;
    default: return 1;
    }
}

#ifdef WITH_CHECKPOINT
typedef struct {
    unsigned int timeoutMs;
    unsigned int reserved0;
    uint64_t reserved1[7];
} CUcheckpointLockArgs;

CUresult cuCheckpointProcessGetState(int pid, int *state)
{
    calls++;
    if (pid < 101 || pid > 104) return 1;
    *state = pid - 101;
    return 0;
}

CUresult cuCheckpointProcessLock(int pid, CUcheckpointLockArgs *args)
{
    (void)pid;
    calls++;
    static const uint64_t zeros[7];
    if (args == NULL || args->timeoutMs != 1234 || args->reserved0 != 0 ||
        memcmp(args->reserved1, zeros, sizeof zeros) != 0)
        return 600;
    return 0;
}

CUresult cuCheckpointProcessCheckpoint(int pid, void *args)
{
    (void)args;
    calls++;
    return pid == 99 ? 801 : 0;
}

CUresult cuCheckpointProcessRestore(int pid, void *args) { (void)pid; (void)args; calls++; return 0; }
CUresult cuCheckpointProcessUnlock(int pid, void *args) { (void)pid; (void)args; calls++; return 0; }
#endif
