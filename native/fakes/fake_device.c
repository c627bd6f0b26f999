/* fake_device.c — cuInit and the devices of the fake libcuda.so.1: which of
 * the simulated GPUs (fake_common.c) CUDA_VISIBLE_DEVICES makes visible and
 * under which ordinals, MPS client detection, and the device queries. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_cuda.h"

pthread_mutex_t fake_mu = PTHREAD_MUTEX_INITIALIZER;

static void lock_failed(const char *what, int err)
{
    fprintf(stderr, "fake CUDA: pthread_mutex_%s of the driver's lock failed (%d)\n", what, err);
    abort();
}

void fake_lock(void)
{
    int err = pthread_mutex_lock(&fake_mu);
    if (err != 0) lock_failed("lock", err);
}

void fake_unlock(void)
{
    int err = pthread_mutex_unlock(&fake_mu);
    if (err != 0) lock_failed("unlock", err);
}

static int inited;
static int visible[FAKE_MAX_GPUS], visible_count;

int fake_initialized(void)
{
    return __atomic_load_n(&inited, __ATOMIC_ACQUIRE);
}

int fake_phys_of(CUdevice d)
{
    return d >= 0 && d < visible_count ? visible[d] : -1;
}

int fake_visible_count(void)
{
    return visible_count;
}

static void parse_visible(void)
{
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (cvd == NULL) {
        for (int i = 0; i < fake_gpu_count; i++) visible[i] = i;
        visible_count = fake_gpu_count;
        return;
    }
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", cvd);
    char *save = NULL;
    /* The first entry says whether the list names indices or UUIDs; an entry of the other
     * kind is invalid (on two H200s with driver 580.159.04, "1,GPU-<uuid of 0>" and
     * "GPU-<uuid of 1>,0" each made GPU 1 alone visible: native/gpu-tests/RESULTS.md,
     * 2026-11-28). */
    int by_index = -1;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        while (*t == ' ') t++;
        int index = *t >= '0' && *t <= '9';
        if (by_index < 0) by_index = index;
        int phys = -1;
        if (index != by_index) {
            /* invalid: ends the list below */
        } else if (index) {
            char *end;
            long v = strtol(t, &end, 10);
            if (*end == '\0' && v < fake_gpu_count) phys = (int)v;
        } else if (strncmp(t, "GPU-", 4) == 0) {
            for (int g = 0; g < fake_gpu_count; g++) {
                char u[41];
                fake_uuid_format(fake_gpus[g].uuid, u);
                if (strncmp(u, t, strlen(t)) == 0) {
                    if (phys >= 0) {
                        phys = -1; /* ambiguous prefix */
                        break;
                    }
                    phys = g;
                }
            }
        }
        for (int k = 0; k < visible_count && phys >= 0; k++)
            if (visible[k] == phys) phys = -1;
        /* Like the real driver: the list ends at the first invalid entry. */
        if (phys < 0) break;
        visible[visible_count++] = phys;
    }
}

/* As the real driver does at cuInit: a process becomes an MPS client when
 * CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps) holds the control
 * daemon's "control" entry; CU_DEVICE_ATTRIBUTE_MPS_ENABLED then says 1. */
static int mps_client;

static void connect_mps(void)
{
    const char *pipes = getenv("CUDA_MPS_PIPE_DIRECTORY");
    char control[1100];
    snprintf(control, sizeof control, "%s/control", pipes != NULL && *pipes != '\0' ? pipes : "/tmp/nvidia-mps");
    mps_client = access(control, F_OK) == 0;
}

API CUresult cuInit(unsigned int flags)
{
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (fake_setup() != 0) return CUDA_ERROR_UNKNOWN;
    fake_lock();
    if (!inited) {
        if (fake_records_init() != 0) {
            /* Not initialised: a later cuInit tries again. */
            fake_unlock();
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        parse_visible();
        connect_mps();
        fake_pools_init();
        __atomic_store_n(&inited, 1, __ATOMIC_RELEASE);
    }
    fake_unlock();
    /* From here on the process is one the checkpoint API can name. */
    (void)fake_proc_claim();
    return visible_count > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

API CUresult cuDeviceGetCount(int *n)
{
    NEED_INIT();
    if (n == NULL) return CUDA_ERROR_INVALID_VALUE;
    *n = visible_count;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
    NEED_INIT();
    if (d == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= visible_count) return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
    NEED_INIT();
    if (name == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (fake_phys_of(d) < 0) return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "%s", fake_gpus[fake_phys_of(d)].name);
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d)
{
    NEED_INIT();
    if (u == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (fake_phys_of(d) < 0) return CUDA_ERROR_INVALID_DEVICE;
    memcpy(u->bytes, fake_gpus[fake_phys_of(d)].uuid, 16);
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice d)
{
    return cuDeviceGetUuid(u, d);
}

API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d)
{
    NEED_INIT();
    if (bytes == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (fake_phys_of(d) < 0) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = fake_gpus[fake_phys_of(d)].capacity;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice d)
{
    if (bytes == NULL) return CUDA_ERROR_INVALID_VALUE;
    size_t b;
    CUresult r = cuDeviceTotalMem_v2(&b, d);
    if (r == CUDA_SUCCESS) *bytes = b > UINT32_MAX ? UINT32_MAX : (unsigned int)b;
    return r;
}

API CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute attr, CUdevice d)
{
    NEED_INIT();
    if (v == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (fake_phys_of(d) < 0) return CUDA_ERROR_INVALID_DEVICE;
    switch (attr) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MPS_ENABLED: *v = mps_client; break;
    default: *v = 0; break;
    }
    return CUDA_SUCCESS;
}
