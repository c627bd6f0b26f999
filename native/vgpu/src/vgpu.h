/*
 * vgpu.h — interfaces between the files of libvgpu.so.  Nothing here is
 * exported from the library: the build uses -fvisibility=hidden and only
 * GS_EXPORT functions (the hooked ABI names and dlsym) are visible.
 */
#ifndef GPUSHARDS_VGPU_H
#define GPUSHARDS_VGPU_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_subset.h"

#include "gpushards_limits.h"
#include "gpushards_region.h"
#include "nvml_subset.h"

#define GS_EXPORT __attribute__((visibility("default")))
#define GS_LIKELY(x) __builtin_expect(!!(x), 1)
#define GS_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* CUDA ordinals (CUdevice values) we map; far above any real machine. */
#define GS_MAX_ORDINALS 64

/* ---- log.c ---------------------------------------------------------- */
enum { GS_LOG_ERROR = 0, GS_LOG_WARN = 1, GS_LOG_INFO = 2, GS_LOG_DEBUG = 3 };
extern int gs_log_level;
void gs_log_init(void);
void gs_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define GS_LOG(level, ...)                                                     \
    do {                                                                       \
        if ((level) <= gs_log_level) gs_log((level), __VA_ARGS__);             \
    } while (0)
#define GS_ERROR(...) GS_LOG(GS_LOG_ERROR, __VA_ARGS__)
#define GS_WARN(...) GS_LOG(GS_LOG_WARN, __VA_ARGS__)
#define GS_INFO(...) GS_LOG(GS_LOG_INFO, __VA_ARGS__)
#define GS_DEBUG(...) GS_LOG(GS_LOG_DEBUG, __VA_ARGS__)

/* ---- config.c ------------------------------------------------------- */
struct gs_config {
    int limits_bad;                       /* a limit variable was malformed */
    int have_global_limit;
    uint64_t global_limit;                /* CUDA_DEVICE_MEMORY_LIMIT */
    int have_limit[GS_MAX_ORDINALS];
    uint64_t limit[GS_MAX_ORDINALS];      /* CUDA_DEVICE_MEMORY_LIMIT_<i> */
    int any_limit;                        /* some limit variable is set */
    int context_bytes_bad;
    uint64_t context_bytes;               /* GPUSHARDS_CONTEXT_BYTES, 0 = unset */
    int pool_growth_bad;
    uint64_t pool_growth_bytes;           /* GPUSHARDS_POOL_GROWTH_BYTES, 0 = unset */
    uint32_t track_capacity;              /* GPUSHARDS_TRACK_CAPACITY */
    uint32_t pressure_wait_ms;            /* GPUSHARDS_PRESSURE_WAIT_MS, else the default */
    int pressure_wait_ms_set;             /* the environment set it (inside a shard it may only shorten) */
    int visible_devices_set;              /* CUDA_VISIBLE_DEVICES is set */
    char region_path[4096];               /* GPUSHARDS_REGION_PATH */
};
extern struct gs_config gs_cfg;
void gs_config_load(void);
int gs_parse_size(const char *text, uint64_t *out);
/* The env limit for a CUDA ordinal: 1 and *limit set when one applies. */
int gs_config_limit_for(int ordinal, uint64_t *limit);

/* ---- region.c ------------------------------------------------------- */
extern struct gpushards_region *gs_region;
/* 0 = mapped and valid; -1 = missing and could not be created; -2 = the
 * file exists but is unusable (truncated, corrupt, wrong version). */
int gs_region_open(const char *path);
int gs_region_find_device(const uint8_t uuid[16]);
int gs_region_attach_device(const uint8_t uuid[16], uint64_t total_bytes, int have_limit, uint64_t limit);
int gs_region_claim_slot(void);
void gs_region_reclaim_dead(void);
void gs_region_release_slot(int slot);
/* Sets (holds = 1) or clears the slot's bit in the header's ipc_importers;
 * -1 when the slot has no bit (then holding sets ipc_importers_unlisted). */
int gs_region_mark_ipc_importer(int slot, int holds);
void gs_uuid_format(const uint8_t uuid[16], char out[41]);
int gs_uuid_parse(const char *text, uint8_t uuid[16]);

/* ---- limits.c ------------------------------------------------------- */
/* The read-only limits file, or NULL when there is none (then the
 * environment and the region's limit fields decide, as before). */
extern const struct gpushards_limits *gs_limits;
struct gs_dev_limits {
    uint64_t limit; /* 0 = uncapped */
    uint64_t real;  /* the agent's NVML reading for the whole shard; 0 = unknown */
};
/* 0 no file, 1 mapped, -1 a file that exists but is unusable. */
int gs_limits_open(void);
/* -1 when the file has no ACTIVE entry for the region device's UUID. */
int gs_limits_lookup(int dev, struct gs_dev_limits *out);
uint64_t gs_limits_context_bytes(int dev);
uint64_t gs_limits_pool_growth_bytes(int dev);
/* Where the limits file is mapped (MAP_FIXED, read-only, shared): page
 * aligned for pages up to 64 KiB, zero (resident, default wait) until a file
 * is mapped or when there is none.  Its untouched pages cost no memory. */
#define GS_LIMITS_AREA_BYTES (64u << 10)
union gs_limits_area {
    struct gpushards_limits l;
    unsigned char bytes[GS_LIMITS_AREA_BYTES];
};
extern union gs_limits_area gs_limits_area;
/* How long an allocation the driver refused inside the budget is retried
 * (pressure.c), in ms: the limits file's pressure_wait_ms, else
 * GPUSHARDS_PRESSURE_WAIT_MS where there is no file; 0 = no retry. */
uint32_t gs_limits_pressure_wait_ms(void);

/* ---- wake.c (docs/interposer.md, "Elastic memory: the wake gate") -------- */
/* 1 while the agent has marked the shard suspended: every hook's first
 * question (ENTER), one load from a fixed address and a branch. */
static inline int gs_suspended(void)
{
    return __atomic_load_n(&gs_limits_area.l.header.memory_state, __ATOMIC_RELAXED) == GPUSHARDS_MEMORY_SUSPENDED;
}
/* The slow path: ring the wake bell, then wait (polling, re-ringing about
 * once a second) until the agent marks the shard resident again. */
void gs_wake_wait(void);
/* The driver refused an allocation on region device dev that the budget
 * allowed: count it in the region and ring the bell. */
void gs_ring_pressure(int dev);
void gs_wake_reset_process(void);

/* ---- pressure.c (docs/interposer.md, "A neighbour's pressure") ---------- */
/* The driver call again, with the arguments it was first given. */
typedef CUresult (*gs_again_fn)(void *arg);
/* Called where the driver refused an allocation on region device dev that
 * the budget allowed (charge still held): for CUDA_ERROR_OUT_OF_MEMORY on a
 * capped GPU, rings pressure and retries `again` with backoff for up to the
 * shard's pressure_wait_ms; returns the last answer (anything else as given). */
CUresult gs_pressure_retry(int dev, CUresult refused, gs_again_fn again, void *arg);

/* ---- mps.c ---------------------------------------------------------- */
/* Around the real cuInit: set the MPS client's percentage and pipe folder
 * from the limits file, then refuse CUDA unless the driver made this
 * process an MPS client. */
void gs_mps_before_init(void);
CUresult gs_mps_after_init(void);
/* 1 when cuInit made this process an MPS client of its host's partition. */
int gs_mps_client(void);

/* ---- budget.c ------------------------------------------------------- */
enum { GS_MODE_UNINIT = 0, GS_MODE_COUNTING, GS_MODE_PASSTHROUGH, GS_MODE_FAIL_CLOSED };
extern int gs_mode;
void gs_budget_reset_process(void);
int gs_charge(int dev, uint64_t bytes);
void gs_charge_force(int dev, uint64_t bytes);
void gs_uncharge(int dev, uint64_t bytes);
uint64_t gs_used(int dev);
/* max(charged, the agent's real reading): what the budget is checked against. */
uint64_t gs_effective_used(int dev);
/* 0 = uncapped; UINT64_MAX... never: a GPU with no limits entry reports 0
 * here but every charge on it is refused (gs_charge). */
uint64_t gs_limit(int dev);
uint64_t gs_context_bytes(int dev);
void gs_budget_note_launch(uint64_t now_ns);
uint64_t gs_pool_growth_bytes(int dev);
void gs_release_process(void);
/* Names this process in the region as holding CUDA IPC imports (holds = 1)
 * or no longer (0); claims its slot if it has none.  0, or -1 when it could
 * not be named (no region, no slot, or a slot past the bitmap). */
int gs_budget_mark_ipc_importer(int holds);

/* ---- track.c -------------------------------------------------------- */
enum gs_kind {
    GS_T_MEM = 1 << 0,    /* cuMemAlloc / pitch / managed: freed by cuMemFree */
    GS_T_ASYNC = 1 << 1,  /* from a stream-ordered pool; owner = pool handle */
    GS_T_VMM = 1 << 2,    /* cuMemCreate handle; c1 = references, c2 = mappings */
    GS_T_MAP = 1 << 3,    /* cuMemMap of a handle at a VA; owner = handle */
    GS_T_ARRAY = 1 << 4,  /* cuArrayCreate / cuArray3DCreate */
    GS_T_MIPMAP = 1 << 5, /* cuMipmappedArrayCreate */
    GS_T_CTX = 1 << 6,    /* cuCtxCreate: size = context charge */
    GS_T_GRAPH = 1 << 7   /* an instantiated graph: owner = CUdevice, size = its allocation nodes' bytes */
};
#define GS_DEV_NONE 0xffffffffu /* host memory: tracked, never charged */
struct gs_entry {
    uint64_t key;   /* atomic: empty, tombstone, busy, or the handle */
    uint32_t kind;  /* one gs_kind */
    uint32_t dev;   /* region device index or GS_DEV_NONE */
    uint64_t size;  /* bytes charged */
    uint64_t owner; /* context (MEM, ARRAY, MIPMAP), pool (ASYNC) or handle (MAP) */
    uint64_t c1;    /* VMM: references + (mappings << 32) */
    uint64_t c2;    /* unused */
    uint64_t flags; /* unused */
    uint64_t lock;  /* held by gs_track_update and gs_track_take */
};
struct gs_table {
    struct gs_entry *e; /* mmap'd; capacity is a power of two */
    uint32_t mask;
};
extern struct gs_table gs_allocs; /* pointers, handles, arrays, contexts */
int gs_track_init(struct gs_table *t, uint32_t capacity);
void gs_track_drop_all(struct gs_table *t);
/* 0 inserted; -1 no free slot near the key's hash (table too full). */
int gs_track_insert(struct gs_table *t, const struct gs_entry *e);
/* kinds is a mask of gs_kind bits. */
struct gs_entry *gs_track_find(struct gs_table *t, uint64_t key, uint32_t kinds);
/* Add delta to the entry's c1 while it still holds key (no thread can take
 * it meanwhile); 1 and *after = the entry after the update when it was there. */
int gs_track_update(struct gs_table *t, uint64_t key, uint32_t kinds, int64_t delta, struct gs_entry *after);
/* Take the entry out of the table; 1 and *out filled when it was there. */
int gs_track_take(struct gs_table *t, uint64_t key, uint32_t kinds, struct gs_entry *out);
/* Visit every live entry (slow paths only: the whole table is scanned). */
void gs_track_each(struct gs_table *t, void (*fn)(struct gs_entry *e, void *arg), void *arg);

/* ---- devices.c ------------------------------------------------------ */
int gs_devices_map_all(void);
int gs_dev_index(CUdevice dev);

/* ---- init.c --------------------------------------------------------- */
void gs_init_slow(void);
extern int gs_init_state;
static inline void gs_init(void)
{
    if (GS_UNLIKELY(__atomic_load_n(&gs_init_state, __ATOMIC_ACQUIRE) != 2)) gs_init_slow();
}

/* ---- resolve.c ------------------------------------------------------ */
struct gs_hook {
    const char *name;
    void *hook;   /* our function, or NULL for a real function we only call */
    void **real;  /* where the real function's address is kept */
};
extern const struct gs_hook gs_cuda_hooks[];
extern const size_t gs_cuda_hook_count;
extern const struct gs_hook gs_nvml_hooks[];
extern const size_t gs_nvml_hook_count;
int gs_resolve_cuda(void);
int gs_resolve_nvml(void);
void gs_resolve_after_fork(void);
extern CUresult (*gs_real_cuGetProcAddress_v2)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
extern CUresult (*gs_real_cuGetProcAddress)(const char *, void **, int, cuuint64_t);
/* The legacy cuGetProcAddress (cuda.h renames the name to _v2). */
CUresult gs_legacy_cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
    __asm__("cuGetProcAddress");

/* ---- compute.c / hooks_launch.c (docs/compute.md) -------------------- */
extern const struct gs_hook gs_launch_hooks[];
extern const size_t gs_launch_hook_count;
/* hooks_wake.c: calls hooked only for the wake gate. */
extern const struct gs_hook gs_wake_hooks[];
extern const size_t gs_wake_hook_count;
extern CUresult (*gs_real_cuEventCreate)(CUevent *, unsigned int);
extern CUresult (*gs_real_cuEventRecord)(CUevent, CUstream);
extern CUresult (*gs_real_cuEventQuery)(CUevent);
extern CUresult (*gs_real_cuEventSynchronize)(CUevent);
extern CUresult (*gs_real_cuCtxSynchronize)(void);
extern CUresult (*gs_real_cuEventElapsedTime)(float *, CUevent, CUevent);
extern CUresult (*gs_real_cuEventElapsedTime_v1)(float *, CUevent, CUevent);
extern CUresult (*gs_real_cuMemHostRegister_v2)(void *, size_t, unsigned int);
extern CUresult (*gs_real_cuMemHostGetDevicePointer_v2)(CUdeviceptr *, void *, unsigned int);
extern CUresult (*gs_real_cuMemHostUnregister)(void *);
extern CUresult (*gs_real_cuStreamWaitValue32_v2)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
extern CUresult (*gs_real_cuStreamQuery)(CUstream);
extern CUresult (*gs_real_cuCtxSetCurrent)(CUcontext);
/* Before a launch on stream s: waits for this shard's turn on the current
 * GPU; returns a token for gs_compute_launched (NULL when nothing is to be
 * recorded). */
void *gs_compute_admit(CUstream s);
/* The same for a graph launch: many kernels, so while bound it counts as old
 * work at once (compute_inflight.c). */
void *gs_compute_admit_graph(CUstream s);
void gs_compute_synced(void);
void gs_compute_launched(void *token, CUstream stream, CUresult launched);
void gs_compute_reset_process(void);
/* A context was destroyed: a gate it registered is mapped anew at the next
 * gated launch (compute_gate.c). */
void gs_compute_ctx_gone(CUcontext ctx);

/* ---- pools.c -------------------------------------------------------- */
CUresult gs_pool_alloc(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream stream, int from_pool,
                       void *real_fn);
void gs_pool_release(const struct gs_entry *freed);
void gs_pool_register(CUmemoryPool pool, const CUmemPoolProps *props);
void gs_pool_destroyed(CUmemoryPool pool);
void gs_pool_trimmed(CUmemoryPool pool);
void gs_pools_reconcile(int dev);
void gs_pools_reset_process(void);
int gs_pools_init(void);

/* ---- capture.c ------------------------------------------------------ */
/* 1 while any stream capture is under way in the process: calls that are
 * not capture-safe (pool attribute queries, cuStreamGetDevice) are then
 * avoided, since in the global mode they invalidate any thread's capture. */
int gs_capturing(void);
/* 1 when this stream is capturing (its allocations become graph memory,
 * charged when the graph is instantiated and launched). */
int gs_stream_capturing(CUstream s);
void gs_capture_reset_process(void);

/* ---- hooks_*.c (hooks.h has the rest) -------------------------------- */
CUresult gs_real_free_async(CUdeviceptr dptr, CUstream stream);
void gs_hooks_reset_process(void);

#endif
