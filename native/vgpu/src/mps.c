/* mps.c — a shard on a host that runs an MPS partition (docs/compute.md,
 * "Isolated shards").  Its limits file says at what active-thread
 * percentage it is an MPS client: an isolated shard at its share, every
 * other shard at what the partition leaves.  The driver reads both the
 * percentage and the pipe folder from the process's environment at cuInit,
 * where anything in the container can set them, so cuInit sets them from
 * the limits file first.  Afterwards a process the driver did not make an
 * MPS client is refused CUDA: as a plain context it would be time-sliced
 * against the MPS server, isolated shards included. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hooks.h"
#include "vgpu.h"

/* The percentage this process was made an MPS client at; 0 = not one. */
static uint32_t applied_percent;

/* The smallest nonzero mps_thread_percent of the file's active devices: an
 * MPS client has one percentage for all its devices, and the agent writes
 * the same on each. */
static uint32_t wanted_percent(void)
{
    if (gs_limits == NULL) return 0;
    uint32_t wanted = 0;
    uint32_t n = gs_limits->header.device_count;
    for (uint32_t i = 0; i < n && i < GPUSHARDS_LIMITS_MAX_DEVICES; i++) {
        const struct gpushards_limits_device *d = &gs_limits->devices[i];
        if (__atomic_load_n(&d->state, __ATOMIC_ACQUIRE) != GPUSHARDS_LIMITS_ACTIVE) continue;
        uint32_t p = __atomic_load_n(&d->mps_thread_percent, __ATOMIC_RELAXED);
        if (p > 100) {
            gs_log(GS_LOG_ERROR, "the limits file asks for MPS active-thread percentage %u; using 1", p);
            p = 1;
        }
        if (p != 0 && (wanted == 0 || p < wanted)) wanted = p;
    }
    return wanted;
}

/* The mounted pipe folder; outside a container (tests, a bare host),
 * GPUSHARDS_MPS_PIPE_PATH, as GPUSHARDS_LIMITS_PATH stands in for the
 * limits file. */
static const char *pipe_folder(void)
{
    if (access(GPUSHARDS_MPS_PIPE_FIXED_PATH, F_OK) == 0) return GPUSHARDS_MPS_PIPE_FIXED_PATH;
    const char *alt = getenv("GPUSHARDS_MPS_PIPE_PATH");
    return alt != NULL && *alt != '\0' ? alt : GPUSHARDS_MPS_PIPE_FIXED_PATH;
}

void gs_mps_before_init(void)
{
    uint32_t percent = wanted_percent();
    if (percent == 0) return;
    char text[12];
    snprintf(text, sizeof text, "%u", percent);
    const char *pipes = pipe_folder();
    if (setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", text, 1) != 0 || setenv("CUDA_MPS_PIPE_DIRECTORY", pipes, 1) != 0) {
        gs_log(GS_LOG_ERROR, "cannot set the MPS environment; refusing CUDA");
        __atomic_store_n(&applied_percent, UINT32_MAX, __ATOMIC_RELEASE);
        return;
    }
    __atomic_store_n(&applied_percent, percent, __ATOMIC_RELEASE);
    GS_INFO("an MPS client at %u%% of the GPU's threads (pipes in %s)", percent, pipes);
}

int gs_mps_client(void)
{
    uint32_t percent = __atomic_load_n(&applied_percent, __ATOMIC_ACQUIRE);
    return percent != 0 && percent != UINT32_MAX;
}

CUresult gs_mps_after_init(void)
{
    uint32_t percent = __atomic_load_n(&applied_percent, __ATOMIC_ACQUIRE);
    if (percent == 0) return CUDA_SUCCESS;
    if (percent == UINT32_MAX) return CUDA_ERROR_MPS_CONNECTION_FAILED;
    int count = 0;
    CUresult r = GS_CALL(gs_real_cuDeviceGetCount, &count);
    for (int dev = 0; r == CUDA_SUCCESS && dev < count; dev++) {
        int enabled = 0;
        r = GS_CALL(gs_real_cuDeviceGetAttribute, &enabled, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, dev);
        if (r == CUDA_SUCCESS && !enabled) {
            gs_log(GS_LOG_ERROR,
                   "this shard must run as an MPS client (its host's MPS partition) but device %d is not shared "
                   "through MPS: is nvidia-cuda-mps-control running with its pipes in %s? Refusing CUDA",
                   dev, getenv("CUDA_MPS_PIPE_DIRECTORY"));
            return CUDA_ERROR_MPS_CONNECTION_FAILED;
        }
    }
    if (r != CUDA_SUCCESS) {
        gs_log(GS_LOG_ERROR, "cannot tell whether this process is an MPS client (error %d); refusing CUDA", (int)r);
        return CUDA_ERROR_MPS_CONNECTION_FAILED;
    }
    return CUDA_SUCCESS;
}
