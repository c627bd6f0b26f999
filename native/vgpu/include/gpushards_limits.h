/*
 * gpushards_limits.h — layout of the per-container LIMITS file.
 *
 * The agent alone writes this file, on the host, and bind-mounts it
 * READ-ONLY into the container at GPUSHARDS_LIMITS_FIXED_PATH.  It holds
 * what a process of the container must not be able to change: each GPU's
 * cap, the context charge, a pool's growth step, and the agent's ground
 * truth (NVML) of what the whole shard really holds on the GPU.  The
 * writable shared region (gpushards_region.h) keeps only usage counters and
 * process slots: lying about those cannot get a process past the cap, since
 * libvgpu.so budgets against max(charged used_bytes, real_bytes).
 *
 * Writing: the agent writes the whole file before the container starts (a
 * temporary file, then rename(2)), and later updates limit_bytes,
 * context_bytes, pool_growth_bytes, real_bytes and real_sampled_at_ms of an
 * ACTIVE device in place with aligned 8-byte writes.  The header and the
 * uuid/state fields do not change while the container runs.  compute_turns
 * took reserved bytes without a new version: an older libvgpu.so ignores it
 * (CPU turns), and this one reads an older agent's zeros as UNSET.  So did
 * memory_state and pressure_wait_ms (zero: resident, the default wait); the
 * agent updates them in place with aligned 4-byte stores.
 *
 * Byte order is the host's (little endian).  `region-layout` prints these
 * offsets as JSON under "limits"; the agent's test holds its writer
 * against that output.
 */
#ifndef GPUSHARDS_LIMITS_H
#define GPUSHARDS_LIMITS_H

#include <stddef.h>
#include <stdint.h>

#define GPUSHARDS_LIMITS_MAGIC 0x31544D494C555047ULL /* the bytes "GPULIMT1" */
#define GPUSHARDS_LIMITS_VERSION 1u
#define GPUSHARDS_LIMITS_MAX_DEVICES 16u
#define GPUSHARDS_LIMITS_CHECKSUM_BYTES 40u
/* Where the agent mounts it.  When this path exists it is the only source
 * of limits; GPUSHARDS_LIMITS_PATH is read only when it does not. */
#define GPUSHARDS_LIMITS_FIXED_PATH "/etc/gpushards/limits"
/* Where the agent mounts its host's MPS pipe folder (read-only) into a shard
 * whose devices have a nonzero mps_thread_percent. */
#define GPUSHARDS_MPS_PIPE_FIXED_PATH "/run/gpushards/mps"

/* gpushards_limits_header.compute_turns: where the shard waits for its
 * compute turns, on the CPU or on the GPU (docs/compute.md, "Turns on the
 * GPU").  The host's agent chooses for every shard (GPUSHARDS_COMPUTE_TURNS):
 * inside a shard libvgpu.so reads no compute setting from the environment,
 * which any process of the shard could set.  UNSET, what an older agent's
 * file says, leaves it to the environment outside a shard (CPU turns inside
 * one); any other value means CPU turns, with a warning. */
#define GPUSHARDS_COMPUTE_TURNS_UNSET 0u
#define GPUSHARDS_COMPUTE_TURNS_CPU 1u
#define GPUSHARDS_COMPUTE_TURNS_GPU 2u

/* gpushards_limits_header.memory_state */
#define GPUSHARDS_MEMORY_RESIDENT 0u
#define GPUSHARDS_MEMORY_SUSPENDED 1u

/* gpushards_limits_header.pressure_wait_ms of 0: the fence's worst case (50 ms
 * sampling, a kill, the driver's teardown) with room to spare. */
#define GPUSHARDS_PRESSURE_WAIT_DEFAULT_MS 300u

/* gpushards_limits_device.state */
#define GPUSHARDS_LIMITS_FREE 0u
#define GPUSHARDS_LIMITS_ACTIVE 1u

struct gpushards_limits_device {
    uint8_t uuid[16];            /* raw CUuuid bytes of the physical GPU */
    uint32_t state;              /* GPUSHARDS_LIMITS_* */
    uint32_t reserved0;
    uint64_t limit_bytes;        /* cap for the whole container on this GPU; 0 = uncapped */
    uint64_t context_bytes;      /* charge per CUDA context; 0 = GPUSHARDS_CONTEXT_BYTES */
    uint64_t pool_growth_bytes;  /* a pool's growth step; 0 = GPUSHARDS_POOL_GROWTH_BYTES, else 32 MiB */
    uint64_t real_bytes;         /* NVML: what the whole shard really holds on this GPU; 0 = unknown */
    uint64_t real_sampled_at_ms; /* CLOCK_REALTIME ms of that sample; 0 = never */
    uint32_t compute_share_permille; /* compute share on this GPU, 1..1000; 0 = unset (see docs/compute.md) */
    uint32_t compute_mode;       /* 0 unset (guaranteed), 1 guaranteed, 2 capped, 3 isolated (gpushards_ledger.h) */
    uint32_t mps_thread_percent; /* 1..100: the shard is an MPS client with this active-thread
                                  * percentage, forced at cuInit whatever its own environment
                                  * says; 0 = the host runs no MPS partition (docs/compute.md) */
    uint8_t reserved1[52];       /* zero */
};

struct gpushards_limits_header {
    uint64_t magic;       /* GPUSHARDS_LIMITS_MAGIC */
    uint32_t version;     /* GPUSHARDS_LIMITS_VERSION */
    uint32_t header_size; /* 128 */
    uint64_t total_size;  /* size of the whole file: 128 + 16 * 128 */
    uint32_t max_devices; /* GPUSHARDS_LIMITS_MAX_DEVICES */
    uint32_t device_size; /* 128 */
    uint32_t device_count;/* entries of devices[] that may be ACTIVE */
    uint32_t reserved0;
    uint64_t checksum;    /* FNV-1a 64 of bytes [0, 40) */
    char shard_id[48];    /* the shard's id, NUL-terminated; "" = none (its ledger member) */
    uint32_t compute_turns; /* GPUSHARDS_COMPUTE_TURNS_*; fixed while the container runs */
    /* GPUSHARDS_MEMORY_*: where the shard's GPU memory is (docs/elastic.md).
     * The agent sets SUSPENDED after it has locked every CUDA process of the
     * shard (cuCheckpointProcessLock) and before it checkpoints them, and
     * clears it after every one is restored and unlocked.  While it is set,
     * every hooked CUDA call waits in libvgpu.so and rings the region's wake
     * bell (gpushards_region.h).  Zero, an older agent's file: resident. */
    uint32_t memory_state;
    /* How long an allocation that the driver refused inside the shard's
     * budget is retried, in ms (issue #31: memory a neighbour holds past what
     * placement promised, which the agent's fence frees); 0 = libvgpu.so's
     * default, GPUSHARDS_PRESSURE_WAIT_DEFAULT_MS. */
    uint32_t pressure_wait_ms;
    uint8_t reserved1[20];  /* zero */
};

struct gpushards_limits {
    struct gpushards_limits_header header;
    struct gpushards_limits_device devices[GPUSHARDS_LIMITS_MAX_DEVICES];
};

_Static_assert(offsetof(struct gpushards_limits_header, magic) == 0, "layout");
_Static_assert(offsetof(struct gpushards_limits_header, version) == 8, "layout");
_Static_assert(offsetof(struct gpushards_limits_header, header_size) == 12, "layout");
_Static_assert(offsetof(struct gpushards_limits_header, total_size) == 16, "layout");
_Static_assert(offsetof(struct gpushards_limits_header, max_devices) == 24, "layout");
_Static_assert(offsetof(struct gpushards_limits_header, device_size) == 28, "layout");
_Static_assert(offsetof(struct gpushards_limits_header, device_count) == 32, "layout");
_Static_assert(offsetof(struct gpushards_limits_header, reserved0) == 36, "layout");
_Static_assert(offsetof(struct gpushards_limits_header, checksum) == GPUSHARDS_LIMITS_CHECKSUM_BYTES, "layout");
_Static_assert(offsetof(struct gpushards_limits_header, shard_id) == 48, "layout");
_Static_assert(offsetof(struct gpushards_limits_header, compute_turns) == 96, "layout");
_Static_assert(offsetof(struct gpushards_limits_header, memory_state) == 100, "layout");
_Static_assert(offsetof(struct gpushards_limits_header, pressure_wait_ms) == 104, "layout");
_Static_assert(offsetof(struct gpushards_limits_header, reserved1) == 108, "layout");
_Static_assert(sizeof(struct gpushards_limits_header) == 128, "layout");

_Static_assert(offsetof(struct gpushards_limits_device, uuid) == 0, "layout");
_Static_assert(offsetof(struct gpushards_limits_device, state) == 16, "layout");
_Static_assert(offsetof(struct gpushards_limits_device, limit_bytes) == 24, "layout");
_Static_assert(offsetof(struct gpushards_limits_device, context_bytes) == 32, "layout");
_Static_assert(offsetof(struct gpushards_limits_device, pool_growth_bytes) == 40, "layout");
_Static_assert(offsetof(struct gpushards_limits_device, real_bytes) == 48, "layout");
_Static_assert(offsetof(struct gpushards_limits_device, real_sampled_at_ms) == 56, "layout");
_Static_assert(offsetof(struct gpushards_limits_device, compute_share_permille) == 64, "layout");
_Static_assert(offsetof(struct gpushards_limits_device, compute_mode) == 68, "layout");
_Static_assert(offsetof(struct gpushards_limits_device, mps_thread_percent) == 72, "layout");
_Static_assert(offsetof(struct gpushards_limits_device, reserved1) == 76, "layout");
_Static_assert(sizeof(struct gpushards_limits_device) == 128, "layout");

_Static_assert(offsetof(struct gpushards_limits, devices) == 128, "layout");
_Static_assert(sizeof(struct gpushards_limits) == 128 + 128 * GPUSHARDS_LIMITS_MAX_DEVICES, "layout");

#endif
