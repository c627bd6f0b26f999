/*
 * gpushards_ledger.h — layout of the per-GPU compute LEDGER.
 *
 * One file per physical GPU, shared by every shard of the host that uses
 * that GPU: <ledger dir>/<GPU-uuid>.  The agent creates the folder on the
 * host and bind-mounts it read-write into every shard's container at
 * GPUSHARDS_LEDGER_DIR (default /run/gpushards/ledger); libvgpu.so creates
 * a GPU's file on first use (built privately, published with link(2)).
 *
 * The GPU is handed out in TURNS.  Only the shard that holds the turn may
 * run work; the others wait, in their launch call (CPU turns) or in their
 * own streams behind a gate only their process writes (turns on the GPU,
 * the limits file's compute_turns).  A turn is a lease:
 * holder, generation and lease end are packed into one 64-bit word changed
 * only by compare-and-swap, so a holder that dies simply lets its lease run
 * out (at most one slice) and nobody waits on it longer.  Who gets the next
 * turn: the waiting shard with the least virtual time (GPU time held,
 * divided by its share) — weighted fair queueing, the way a CFS run queue
 * works.  A shard that is owed time (its virtual time behind the holder's
 * by more than one slice of its own) takes the turn at once; an idle
 * holder (no launch for idle_ns) loses it.  Time is CLOCK_MONOTONIC ns,
 * which every container of a host shares.
 *
 * Activity for the agent: busy_ns (GPU time held) and last_kernel_ns per
 * member; the agent samples them (busy ratio = delta busy_ns / delta t).
 */
#ifndef GPUSHARDS_LEDGER_H
#define GPUSHARDS_LEDGER_H

#include <stddef.h>
#include <stdint.h>

#define GPUSHARDS_LEDGER_MAGIC 0x31524744454C5047ULL /* "GPLEDGR1" */
#define GPUSHARDS_LEDGER_VERSION 1u
#define GPUSHARDS_LEDGER_MEMBERS 32u
#define GPUSHARDS_LEDGER_DEFAULT_DIR "/run/gpushards/ledger"

/* Compute modes (also the limits file's compute_mode). */
#define GPUSHARDS_COMPUTE_UNSET 0u
#define GPUSHARDS_COMPUTE_GUARANTEED 1u /* at least its share; idle time beyond it */
#define GPUSHARDS_COMPUTE_CAPPED 2u     /* never more than its share */
#define GPUSHARDS_COMPUTE_ISOLATED 3u   /* an MPS partition of its own: no turns (docs/compute.md) */

/* turn word: bits 0-7 holder member + 1 (0 = nobody), 8-15 generation,
 * 16-63 lease end in microseconds of CLOCK_MONOTONIC. */
#define GPUSHARDS_TURN_HOLDER(t) ((uint32_t)((t) & 0xffu))
#define GPUSHARDS_TURN_GEN(t) ((uint32_t)(((t) >> 8) & 0xffu))
#define GPUSHARDS_TURN_END_US(t) ((t) >> 16)
#define GPUSHARDS_TURN(holder, gen, end_us) \
    ((uint64_t)(holder) | ((uint64_t)((gen) & 0xffu) << 8) | ((uint64_t)(end_us) << 16))

struct gpushards_ledger_member {
    char shard[48];          /* shard id, NUL-terminated; "" = free entry */
    uint32_t share_permille; /* 0 = unset (an equal split of what is unguaranteed) */
    uint32_t mode;           /* GPUSHARDS_COMPUTE_* */
    uint64_t vtime;          /* virtual ns: GPU ns held * 1000 / weight */
    uint64_t busy_ns;        /* GPU ns held in total */
    uint64_t last_kernel_ns; /* last launch; 0 = never */
    uint64_t wait_hb_ns;     /* refreshed while one of its processes waits for a turn */
    uint64_t cap_ns;         /* capped mode: the time its used share pays up to */
    uint64_t seen_ns;        /* last time a process of this shard used the entry */
    uint64_t inflight_ns;    /* launch time of its oldest unfinished recorded work; 0 = none known */
    uint64_t gpu_ns;         /* GPU ns its launches took, measured with timed events while contended */
    uint64_t inflight_until_ns; /* estimated end of its queued work (bound by time); 0 = not known */
};

struct gpushards_ledger {
    uint64_t magic;        /* GPUSHARDS_LEDGER_MAGIC */
    uint32_t version;      /* GPUSHARDS_LEDGER_VERSION */
    uint32_t members_max;  /* GPUSHARDS_LEDGER_MEMBERS */
    uint64_t total_size;   /* sizeof(struct gpushards_ledger) */
    uint64_t turn;         /* see GPUSHARDS_TURN; its low 32 bits are also the futex waiters sleep on */
    uint64_t since_ns;     /* start of the holder's not yet charged time */
    uint64_t last_wait_ns; /* last time anybody waited: contention is recent */
    uint64_t vclock;       /* virtual time of the last charged holder */
    uint32_t lock;         /* spin lock for claiming member entries (slow path) */
    /* Nothing here gates anybody's work: with turns on the GPU each process
     * keeps its gate in a page of its own (compute_gate.c), since every
     * shard of the host can write this file. */
    uint8_t reserved[68];
    struct gpushards_ledger_member members[GPUSHARDS_LEDGER_MEMBERS];
};

_Static_assert(sizeof(struct gpushards_ledger_member) == 128, "layout");
_Static_assert(offsetof(struct gpushards_ledger, turn) == 24, "layout");
_Static_assert(offsetof(struct gpushards_ledger, members) == 128, "layout");

#endif
