/*
 * gpushards_region.h — layout of the per-container shared region file.
 *
 * This is the ONE definition of the bytes that libvgpu.so (every CUDA
 * process of a container) and the GPU Shards agent (TypeScript, reading the
 * same file from the host) share.  Every field has a fixed size and a fixed
 * offset, asserted below, so the agent can read it without a C compiler;
 * `region-layout` prints the same offsets as JSON and the agent's test holds
 * its reader against that output.
 *
 * Byte order is the host's (little endian on x86_64 and aarch64).  All
 * counters are unsigned 64-bit values updated with atomic instructions; a
 * reader sees each 8-byte field atomically because it is 8-byte aligned.
 *
 * Who writes what:
 *   - the library creates the file complete (header, lock, zeroed tables) in
 *     a temporary file and publishes it with link(2), so no process ever sees
 *     a half-initialised region;
 *   - the library adds device entries (uuid, then state = ACTIVE) and keeps
 *     used_bytes, peak_bytes and the slots current, rings the bell
 *     (wake_requests, a device's pressure_count; slow paths only), and names
 *     the processes that hold CUDA IPC imports (ipc_importers);
 *   - the agent may overwrite limit_bytes, context_bytes and
 *     pool_growth_bytes of an ACTIVE device at any time (8-byte aligned
 *     writes); the library reads the limit on every allocation.
 */
#ifndef GPUSHARDS_REGION_H
#define GPUSHARDS_REGION_H

#include <stddef.h>
#include <stdint.h>

#define GPUSHARDS_REGION_MAGIC 0x3144524853555047ULL /* the bytes "GPUSHRD1" */
#define GPUSHARDS_REGION_VERSION 1u
#define GPUSHARDS_MAX_DEVICES 16u
#define GPUSHARDS_MAX_SLOTS 1024u
/* Slots that ipc_importers has a bit for (the first 256 of 1024). */
#define GPUSHARDS_IPC_IMPORTER_SLOTS 256u

/* gpushards_device.state */
#define GPUSHARDS_DEVICE_FREE 0u
#define GPUSHARDS_DEVICE_ACTIVE 1u

/* One physical GPU, identified by its UUID (never by a CUDA ordinal, which
 * CUDA_VISIBLE_DEVICES can change from one process to the next). */
struct gpushards_device {
    uint8_t uuid[16];       /* raw CUuuid bytes; NVML shows them as GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx */
    uint32_t state;         /* GPUSHARDS_DEVICE_*; ACTIVE is stored last (release) */
    uint32_t reserved0;
    uint64_t limit_bytes;   /* cap for the whole container; 0 = uncapped */
    uint64_t used_bytes;    /* what all processes of the container hold now */
    uint64_t context_bytes; /* charge per CUDA context; 0 = use GPUSHARDS_CONTEXT_BYTES */
    uint64_t peak_bytes;    /* high-water mark of used_bytes */
    uint64_t total_bytes;   /* the physical card's memory as the driver reports it */
    /* Most a stream-ordered pool grows by for one allocation, rounded up
     * (32 MiB on an H100 with driver 580); 0 = GPUSHARDS_POOL_GROWTH_BYTES,
     * else 32 MiB.  Taken from reserved1 without a version bump: those bytes
     * are zero in every region ever written, and 0 means "not set". */
    uint64_t pool_growth_bytes;
    /* CLOCK_MONOTONIC of the container's last kernel launch through
     * libvgpu.so on this GPU (0 = none yet; from reserved1 as above).  The
     * agent's compute fence and idle policy read it here, in a file only this
     * container can write, not in the host's ledger, where any shard could
     * forge or erase another's stamp. */
    uint64_t last_launch_ns;
    /* Pressure (issue #31): the driver refused an allocation on this GPU that
     * the shard's budget allowed, so memory someone else holds beyond what
     * placement promised is in the way.  pressure_count + 1 and pressure_ns
     * (CLOCK_MONOTONIC of the latest) are written, then the header's bell is
     * rung, as for a wake.  From reserved1 as above: zero = never. */
    uint64_t pressure_count;
    uint64_t pressure_ns;
    uint8_t reserved1[32];
};

/* One process that has charged memory.  pid alone could be reused by the
 * kernel; pid + start_time (clock ticks after boot, /proc/<pid>/stat field
 * 22) names a process uniquely. */
struct gpushards_slot {
    int32_t pid;            /* 0 = free */
    /* The second (CLOCK_MONOTONIC) of this process's last kernel launch
     * through libvgpu.so; 0 = none.  From reserved0 without a version bump,
     * like pool_growth_bytes.  The agent's compute fence tells a process that
     * launches around libvgpu.so from a sibling that launches through it. */
    uint32_t last_launch_s;
    uint64_t start_time;    /* 0 = unknown (no /proc) */
    uint64_t used_bytes[GPUSHARDS_MAX_DEVICES]; /* indexed like devices[] */
};

struct gpushards_region_header {
    uint64_t magic;          /* GPUSHARDS_REGION_MAGIC */
    uint32_t version;        /* GPUSHARDS_REGION_VERSION */
    uint32_t header_size;    /* sizeof(struct gpushards_region_header) */
    uint64_t total_size;     /* size of the whole file */
    uint32_t max_devices;    /* GPUSHARDS_MAX_DEVICES */
    uint32_t max_slots;      /* GPUSHARDS_MAX_SLOTS */
    uint32_t device_size;    /* sizeof(struct gpushards_device) */
    uint32_t slot_size;      /* sizeof(struct gpushards_slot) */
    uint64_t devices_offset; /* offset of devices[0] from the start of the file */
    uint64_t slots_offset;   /* offset of slots[0] */
    uint64_t checksum;       /* FNV-1a 64 of bytes [0, 56): the fields above */
    uint32_t device_count;   /* entries of devices[] in use; only grows */
    /* Nonzero: a process whose slot is past ipc_importers' bits (slot 256 or
     * later: 256 processes of the container were alive at once) opened a
     * CUDA IPC import.  Nothing can say when that import ends, so the agent
     * refuses every suspend of the shard while this region lasts: refusing
     * too often is safe, a suspend that leaves a process unrestorable is
     * not.  From reserved0 without a version bump: zero = never. */
    uint32_t ipc_importers_unlisted;
    /* The wake bell (docs/elastic.md): a process of a suspended shard that
     * wants the GPU adds 1 to wake_requests, stamps wake_requested_ns
     * (CLOCK_MONOTONIC) and then pwrite(2)s 8 zero bytes over `bell`: a
     * write through a mapping raises no inotify event, a pwrite does, so
     * the agent's watch on this file hears the ring at once.  bell is
     * always zero.  From reserved1 without a version bump: zero = never rung. */
    uint64_t wake_requests;
    uint64_t wake_requested_ns;
    uint64_t bell;
    /* CUDA IPC imports (docs/elastic.md, "What cannot be suspended"): the
     * driver's checkpoint API locks and checkpoints a process that opened
     * another process's GPU memory (cuIpcOpenMemHandle) but never restores
     * it (CUDA_ERROR_INVALID_VALUE, the process left CHECKPOINTED with its
     * CUDA calls hanging; native/gpu-tests/RESULTS.md, 2026-11-29).  Bit s
     * (word s / 64, bit s % 64) is set while the process in slot s holds at
     * least one import; it is set before the driver opens one (a process
     * locked in the middle of an open is named already) and cleared when its
     * last import is closed (or the open failed), at a clean exit, and when the slot
     * of a dead process is reclaimed, before the slot is freed.  A bit alone
     * proves nothing: a process killed with SIGKILL leaves its bit set until
     * some process of the container reclaims its slot.  So the agent counts
     * a bit only when the slot's pid and start_time are those of a process
     * alive in the container now; a dead importer never makes a shard
     * unsuspendable.  From reserved1 without a version bump: zero = none. */
    uint64_t ipc_importers[GPUSHARDS_IPC_IMPORTER_SLOTS / 64];
    uint8_t lock[64];        /* pthread_mutex_t, robust + process-shared; C only */
    uint8_t reserved2[64];
};

struct gpushards_region {
    struct gpushards_region_header header;
    struct gpushards_device devices[GPUSHARDS_MAX_DEVICES];
    struct gpushards_slot slots[GPUSHARDS_MAX_SLOTS];
};

#define GPUSHARDS_CHECKSUM_BYTES 56u

/* The layout is a contract with another language: any change here must bump
 * GPUSHARDS_REGION_VERSION and be reflected in region-layout's output.  The
 * one exception is giving reserved bytes a meaning in which zero is "not
 * set" (pool_growth_bytes): every region already has zero there, and a
 * reader that does not know the field loses nothing. */
_Static_assert(offsetof(struct gpushards_device, uuid) == 0, "layout");
_Static_assert(offsetof(struct gpushards_device, state) == 16, "layout");
_Static_assert(offsetof(struct gpushards_device, limit_bytes) == 24, "layout");
_Static_assert(offsetof(struct gpushards_device, used_bytes) == 32, "layout");
_Static_assert(offsetof(struct gpushards_device, context_bytes) == 40, "layout");
_Static_assert(offsetof(struct gpushards_device, peak_bytes) == 48, "layout");
_Static_assert(offsetof(struct gpushards_device, total_bytes) == 56, "layout");
_Static_assert(offsetof(struct gpushards_device, pool_growth_bytes) == 64, "layout");
_Static_assert(offsetof(struct gpushards_device, last_launch_ns) == 72, "layout");
_Static_assert(offsetof(struct gpushards_device, pressure_count) == 80, "layout");
_Static_assert(offsetof(struct gpushards_device, pressure_ns) == 88, "layout");
_Static_assert(sizeof(struct gpushards_device) == 128, "layout");

_Static_assert(offsetof(struct gpushards_slot, pid) == 0, "layout");
_Static_assert(offsetof(struct gpushards_slot, last_launch_s) == 4, "layout");
_Static_assert(offsetof(struct gpushards_slot, start_time) == 8, "layout");
_Static_assert(offsetof(struct gpushards_slot, used_bytes) == 16, "layout");
_Static_assert(sizeof(struct gpushards_slot) == 16 + 8 * GPUSHARDS_MAX_DEVICES, "layout");
_Static_assert(sizeof(struct gpushards_slot) == 144, "layout");

_Static_assert(offsetof(struct gpushards_region_header, magic) == 0, "layout");
_Static_assert(offsetof(struct gpushards_region_header, version) == 8, "layout");
_Static_assert(offsetof(struct gpushards_region_header, header_size) == 12, "layout");
_Static_assert(offsetof(struct gpushards_region_header, total_size) == 16, "layout");
_Static_assert(offsetof(struct gpushards_region_header, max_devices) == 24, "layout");
_Static_assert(offsetof(struct gpushards_region_header, max_slots) == 28, "layout");
_Static_assert(offsetof(struct gpushards_region_header, device_size) == 32, "layout");
_Static_assert(offsetof(struct gpushards_region_header, slot_size) == 36, "layout");
_Static_assert(offsetof(struct gpushards_region_header, devices_offset) == 40, "layout");
_Static_assert(offsetof(struct gpushards_region_header, slots_offset) == 48, "layout");
_Static_assert(offsetof(struct gpushards_region_header, checksum) == GPUSHARDS_CHECKSUM_BYTES, "layout");
_Static_assert(offsetof(struct gpushards_region_header, device_count) == 64, "layout");
_Static_assert(offsetof(struct gpushards_region_header, wake_requests) == 72, "layout");
_Static_assert(offsetof(struct gpushards_region_header, wake_requested_ns) == 80, "layout");
_Static_assert(offsetof(struct gpushards_region_header, bell) == 88, "layout");
_Static_assert(offsetof(struct gpushards_region_header, ipc_importers_unlisted) == 68, "layout");
_Static_assert(offsetof(struct gpushards_region_header, ipc_importers) == 96, "layout");
_Static_assert(sizeof(((struct gpushards_region_header *)0)->ipc_importers) == 32, "layout");
_Static_assert(GPUSHARDS_IPC_IMPORTER_SLOTS <= GPUSHARDS_MAX_SLOTS, "layout");
_Static_assert(offsetof(struct gpushards_region_header, lock) == 128, "layout");
_Static_assert(sizeof(struct gpushards_region_header) == 256, "layout");

_Static_assert(offsetof(struct gpushards_region, devices) == 256, "layout");
_Static_assert(offsetof(struct gpushards_region, slots) == 256 + 128 * GPUSHARDS_MAX_DEVICES, "layout");
_Static_assert(sizeof(struct gpushards_region) == 2304 + 144 * GPUSHARDS_MAX_SLOTS, "layout");

#endif
