/* fake_common.h — what the fake libcuda.so.1 and libnvidia-ml.so.1 share:
 * the simulated GPUs (from GPUSHARDS_FAKE_GPUS) and their physical memory,
 * kept in a small file every process maps so that capacity is shared across
 * processes like a real card's. */
#ifndef GPUSHARDS_FAKE_COMMON_H
#define GPUSHARDS_FAKE_COMMON_H

#include <stdint.h>

#define FAKE_MAX_GPUS 16
#define FAKE_MAX_PROCS 256
/* Kernel time is kept per process and GPU in buckets of CLOCK_MONOTONIC
 * time: FAKE_BUSY_BUCKETS of FAKE_BUSY_BUCKET_NS, the history that NVML's
 * per-process utilization can look back over. */
#define FAKE_BUSY_BUCKETS 64
#define FAKE_BUSY_BUCKET_NS 100000000ull
#define FAKE_HIDDEN __attribute__((visibility("hidden")))

struct fake_gpu {
    char name[96];
    uint8_t uuid[16];
    uint64_t capacity;
};

/* The shared file: per GPU, what all processes hold, and per process what it
 * holds, so the memory of a process that died is given back as a real
 * driver gives back a dead process's memory. */
struct fake_proc {
    int32_t pid;          /* as the process sees itself (its own PID namespace) */
    uint32_t gen;         /* bumped at each claim: which process an entry stood for */
    uint64_t ns_inode;    /* inode of its /proc/self/ns/pid; 0 = unknown */
    uint64_t start_time;  /* /proc/self/stat field 22 (the same in every namespace) */
    uint64_t used[FAKE_MAX_GPUS];
    /* Per GPU and bucket: (bucket number << 32) | microseconds its kernels ran in it. */
    uint64_t busy[FAKE_MAX_GPUS][FAKE_BUSY_BUCKETS];
    /* The checkpoint API (fake_checkpoint.c): the process's FAKE_CKPT_* state,
     * written by whichever process drives its checkpoint; its driver calls
     * under way (entered and not yet returned), which a lock waits to see
     * drain; and per GPU what a checkpoint moved out of the card's capacity
     * to host memory, which a restore takes back.  ckpt and inflight are
     * futex words shared across processes. */
    uint32_t ckpt;
    uint32_t inflight;
    uint64_t moved[FAKE_MAX_GPUS];
    /* CUDA IPC imports the process holds (fake_ipc.c): a restore refuses a
     * process with any, as the real driver does. */
    uint32_t ipc_imports;
    /* VMM imports it holds (fake_vmm.c, cuMemImportFromShareableHandle):
     * likewise, with the real driver's other error. */
    uint32_t vmm_imports;
};
#define FAKE_STATE_MAGIC 0x3654534b414647ULL /* "GFAKST6" */

/* fake_proc.ckpt: CUprocessState's four states, and the moves between them
 * while one is under way (reported as the state they start from). */
enum {
    FAKE_CKPT_RUNNING = 0,
    FAKE_CKPT_LOCKED = 1,
    FAKE_CKPT_CHECKPOINTED = 2,
    FAKE_CKPT_FAILED = 3,
    FAKE_CKPT_LOCKING = 4,
    FAKE_CKPT_CHECKPOINTING = 5,
    FAKE_CKPT_RESTORING = 6
};
struct fake_state {
    uint64_t magic;
    uint64_t used[FAKE_MAX_GPUS];
    struct fake_proc procs[FAKE_MAX_PROCS];
};

/* One process holding fake GPU memory, as NVML reports it. */
struct fake_proc_usage {
    unsigned int host_pid; /* pid in the caller's PID namespace */
    uint64_t used;
};

FAKE_HIDDEN extern struct fake_gpu fake_gpus[FAKE_MAX_GPUS];
FAKE_HIDDEN extern int fake_gpu_count;
FAKE_HIDDEN extern uint64_t fake_context_bytes;
/* What every fake card sets aside for the driver and firmware, as a real one
 * does (480 MiB on an H100 80GB, driver 580): in NVML's v1 used bytes, v2's
 * reserved bytes, never free, never allocatable. */
FAKE_HIDDEN extern uint64_t fake_reserved_bytes;
FAKE_HIDDEN extern uint64_t fake_pool_chunk;
/* Up to this many microseconds before a pool allocation reaches the pool, at
 * random: a real driver's calls take varying time, and the interposer's
 * bookkeeping around them must hold in every order threads arrive in. */
FAKE_HIDDEN extern uint64_t fake_pool_jitter_us;

/* Parse the environment and map the shared state; 0 on success. */
FAKE_HIDDEN int fake_setup(void);
/* Take bytes of GPU g's physical memory: 0, or -1 when the card is full. */
FAKE_HIDDEN int fake_phys_take(int g, uint64_t bytes);
FAKE_HIDDEN void fake_phys_give(int g, uint64_t bytes);
FAKE_HIDDEN uint64_t fake_phys_used(int g);
/* Take (give back) capacity on GPU g without charging any process: a restore
 * takes back what a checkpoint moved out.  0, or -1 when the card is full
 * (after the memory of dead processes was given back). */
FAKE_HIDDEN int fake_phys_reserve(int g, uint64_t bytes);
FAKE_HIDDEN void fake_phys_unreserve(int g, uint64_t bytes);

/* This process's entry (claimed on its first use of the driver: cuInit or a
 * first allocation); NULL when it cannot be claimed. */
FAKE_HIDDEN struct fake_proc *fake_proc_claim(void);
/* This process's entry if it has one, without claiming it. */
FAKE_HIDDEN struct fake_proc *fake_proc_mine(void);
/* The entry of the process that the caller knows as pid (its own pid in
 * this PID namespace, or the host pid of a process in a container, as
 * fake_procs_on reports it), after the dead are reaped; NULL when no process
 * of that pid uses the driver.  *gen: the claim it stands for. */
FAKE_HIDDEN struct fake_proc *fake_proc_named(int pid, uint32_t *gen);
/* An entry's place in the table, and the entry at a place (NULL past it). */
FAKE_HIDDEN int fake_proc_index(const struct fake_proc *p);
FAKE_HIDDEN struct fake_proc *fake_proc_at(int index);
/* 1 while the entry still stands for the claim gen. */
FAKE_HIDDEN int fake_proc_still(const struct fake_proc *p, uint32_t gen);
/* The processes holding memory on GPU g, with pids translated into the
 * caller's PID namespace (processes it cannot see are left out, as real
 * NVML leaves them out).  Returns how many there are (may exceed max). */
FAKE_HIDDEN int fake_procs_on(int g, struct fake_proc_usage *out, int max);
FAKE_HIDDEN void fake_uuid_format(const uint8_t u[16], char out[41]);
FAKE_HIDDEN int fake_parse_size(const char *s, uint64_t *out);

/* This process's kernels run on GPU g over [from_ns, to_ns) of CLOCK_MONOTONIC. */
FAKE_HIDDEN void fake_busy_note(int g, uint64_t from_ns, uint64_t to_ns);
/* One process that ran kernels on a GPU, as NVML's per-process utilization reports it. */
struct fake_proc_busy {
    unsigned int host_pid;
    unsigned int percent; /* of the window's time its kernels ran */
};
/* The processes whose kernels ran on GPU g within [from_ns, to_ns) of
 * CLOCK_MONOTONIC (pids in the caller's namespace, as fake_procs_on).
 * Returns how many there are (may exceed max). */
FAKE_HIDDEN int fake_busy_on(int g, uint64_t from_ns, uint64_t to_ns, struct fake_proc_busy *out, int max);

#endif
