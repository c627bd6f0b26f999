/* fake_nvml.c — a fake libnvidia-ml.so.1 over the same simulated GPUs as
 * fake_cuda.c.  Like the real NVML it ignores CUDA_VISIBLE_DEVICES and
 * reports the memory every process holds on the card, read from the shared
 * state file. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "nvml_subset.h"
#include "fake_common.h"

#define API __attribute__((visibility("default")))

static int initialised;

/* Handles are pointers into the GPU table. */
static int index_of(nvmlDevice_t d)
{
    long i = (struct fake_gpu *)(void *)d - fake_gpus;
    return d != NULL && i >= 0 && i < fake_gpu_count ? (int)i : -1;
}

API nvmlReturn_t nvmlInit_v2(void)
{
    if (fake_setup() != 0) return NVML_ERROR_UNKNOWN;
    __atomic_add_fetch(&initialised, 1, __ATOMIC_ACQ_REL);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlInit(void)
{
    return nvmlInit_v2();
}

API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    return nvmlInit_v2();
}

API nvmlReturn_t nvmlShutdown(void)
{
    if (__atomic_load_n(&initialised, __ATOMIC_ACQUIRE) == 0) return NVML_ERROR_UNINITIALIZED;
    __atomic_sub_fetch(&initialised, 1, __ATOMIC_ACQ_REL);
    return NVML_SUCCESS;
}

#define NEED_INIT()                                                                                      \
    do {                                                                                                 \
        if (__atomic_load_n(&initialised, __ATOMIC_ACQUIRE) == 0) return NVML_ERROR_UNINITIALIZED;      \
    } while (0)

API const char *nvmlErrorString(nvmlReturn_t r)
{
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument Version Mismatch";
    default: return "Unknown Error";
    }
}

API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    NEED_INIT();
    if (version == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (length < 12) return NVML_ERROR_INSUFFICIENT_SIZE;
    snprintf(version, length, "580.159.04");
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v)
{
    NEED_INIT();
    if (v == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *v = 13000;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v)
{
    return nvmlSystemGetCudaDriverVersion(v);
}

API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n)
{
    NEED_INIT();
    if (n == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *n = (unsigned int)fake_gpu_count;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCount(unsigned int *n)
{
    return nvmlDeviceGetCount_v2(n);
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d)
{
    NEED_INIT();
    if (d == NULL || i >= (unsigned int)fake_gpu_count) return NVML_ERROR_INVALID_ARGUMENT;
    *d = (nvmlDevice_t)(void *)&fake_gpus[i];
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *d)
{
    return nvmlDeviceGetHandleByIndex_v2(i, d);
}

API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *d)
{
    NEED_INIT();
    for (int i = 0; i < fake_gpu_count; i++) {
        char u[41];
        fake_uuid_format(fake_gpus[i].uuid, u);
        if (uuid != NULL && strcmp(u, uuid) == 0) {
            *d = (nvmlDevice_t)(void *)&fake_gpus[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *index)
{
    NEED_INIT();
    int i = index_of(d);
    if (i < 0 || index == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned int)i;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length)
{
    NEED_INIT();
    int i = index_of(d);
    if (i < 0 || uuid == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (length < 41) return NVML_ERROR_INSUFFICIENT_SIZE;
    fake_uuid_format(fake_gpus[i].uuid, uuid);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length)
{
    NEED_INIT();
    int i = index_of(d);
    if (i < 0 || name == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (length <= strlen(fake_gpus[i].name)) return NVML_ERROR_INSUFFICIENT_SIZE;
    snprintf(name, length, "%s", fake_gpus[i].name);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
    NEED_INIT();
    int i = index_of(d);
    if (i < 0 || m == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t used = fake_phys_used(i) + fake_reserved_bytes, cap = fake_gpus[i].capacity;
    m->total = cap;
    m->used = used;
    m->free = used < cap ? cap - used : 0;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
    NEED_INIT();
    int i = index_of(d);
    if (i < 0 || m == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (m->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    uint64_t used = fake_phys_used(i), cap = fake_gpus[i].capacity;
    m->total = cap;
    m->reserved = fake_reserved_bytes;
    m->used = used;
    m->free = used + fake_reserved_bytes < cap ? cap - fake_reserved_bytes - used : 0;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u)
{
    NEED_INIT();
    int i = index_of(d);
    if (i < 0 || u == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t cap = fake_gpus[i].capacity;
    u->gpu = 0;
    u->memory = cap ? (unsigned int)(fake_phys_used(i) * 100 / cap) : 0;
    return NVML_SUCCESS;
}

/* Per-process accounting, as the real NVML: host pids, each process's
 * memory on the card (contexts, allocations, and memory the interposer
 * cannot see, such as gpushards_fake_take_hidden's).  With too small a
 * buffer: NVML_ERROR_INSUFFICIENT_SIZE and *count = how many there are. */
static nvmlReturn_t running(nvmlDevice_t d, unsigned int *count, void *infos, int v1)
{
    NEED_INIT();
    int i = index_of(d);
    if (i < 0 || count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    struct fake_proc_usage procs[FAKE_MAX_PROCS];
    int n = fake_procs_on(i, procs, FAKE_MAX_PROCS);
    if (n > FAKE_MAX_PROCS) n = FAKE_MAX_PROCS;
    if (*count < (unsigned int)n || (infos == NULL && n > 0)) {
        *count = (unsigned int)n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (int k = 0; k < n; k++) {
        if (v1) {
            ((nvmlProcessInfo_v1_t *)infos)[k] =
                (nvmlProcessInfo_v1_t){.pid = procs[k].host_pid, .usedGpuMemory = procs[k].used};
        } else {
            ((nvmlProcessInfo_t *)infos)[k] = (nvmlProcessInfo_t){.pid = procs[k].host_pid,
                                                                  .usedGpuMemory = procs[k].used,
                                                                  .gpuInstanceId = 0xFFFFFFFFu,
                                                                  .computeInstanceId = 0xFFFFFFFFu};
        }
    }
    *count = (unsigned int)n;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_v1_t *infos)
{
    return running(d, count, infos, 1);
}

API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *infos)
{
    return running(d, count, infos, 0);
}

API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *infos)
{
    return running(d, count, infos, 0);
}

static uint64_t clock_ns(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* Like the real one: one sample per process whose kernels ran since
 * lastSeenTimeStamp (microseconds since the epoch; 0 = as far back as the
 * history goes), smUtil the percentage of that time they ran;
 * NVML_ERROR_NOT_FOUND when there is none, NVML_ERROR_INSUFFICIENT_SIZE with
 * the count when the buffer is missing or short. */
API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d, nvmlProcessUtilizationSample_t *utilization,
                                                 unsigned int *count, unsigned long long last_seen)
{
    NEED_INIT();
    int i = index_of(d);
    if (i < 0 || count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t mono = clock_ns(CLOCK_MONOTONIC), now_us = clock_ns(CLOCK_REALTIME) / 1000u;
    uint64_t back = FAKE_BUSY_BUCKETS * FAKE_BUSY_BUCKET_NS; /* fake_busy_on keeps it to its history */
    if (last_seen != 0 && last_seen < now_us && (now_us - last_seen) * 1000u < back) back = (now_us - last_seen) * 1000u;
    struct fake_proc_busy procs[FAKE_MAX_PROCS];
    int n = last_seen >= now_us || back >= mono ? 0 : fake_busy_on(i, mono - back, mono, procs, FAKE_MAX_PROCS);
    if (n > FAKE_MAX_PROCS) n = FAKE_MAX_PROCS;
    if (n == 0) {
        *count = 0;
        return NVML_ERROR_NOT_FOUND;
    }
    if (utilization == NULL || *count < (unsigned int)n) {
        *count = (unsigned int)n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (int k = 0; k < n; k++)
        utilization[k] = (nvmlProcessUtilizationSample_t){.pid = procs[k].host_pid, .timeStamp = now_us,
                                                          .smUtil = procs[k].percent};
    *count = (unsigned int)n;
    return NVML_SUCCESS;
}

/* The fake GPUs run no graphics: like a real data-centre GPU with only
 * compute processes, the graphics list is empty (both lists exist in the
 * real NVML, so an agent that reads both finds both here). */
API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *infos)
{
    NEED_INIT();
    if (index_of(d) < 0 || count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *count = 0;
    return NVML_SUCCESS;
}
