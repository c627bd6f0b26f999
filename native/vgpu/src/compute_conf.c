/* compute_conf.c — the compute admission's settings (docs/compute.md,
 * "Configuration"), read once per process, and its counters. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compute_internal.h"

struct cconf gs_cc;
struct gs_compute_stats gs_cst;
static int conf_state; /* 0, 1 loading, 2 loaded */

/* Inside a shard (its limits file at the fixed path) the host decides the
 * ledger folder, the member and every tuning setting: a process of the
 * shard could set GPUSHARDS_* in its own environment to leave the ledger,
 * take another shard's entry or lengthen its turns.  Outside (tests,
 * benchmarks) the environment does. */
static int in_shard;

static const char *setting(const char *name)
{
    return in_shard ? NULL : getenv(name);
}

static uint64_t env_u64(const char *name, uint64_t dflt, uint64_t lo, uint64_t hi)
{
    const char *v = setting(name);
    if (v == NULL || *v == '\0') return dflt;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno != 0 || *end != '\0' || x < lo || x > hi) {
        gs_log(GS_LOG_WARN, "%s=%s is not a number in [%llu, %llu]; using %llu", name, v, (unsigned long long)lo,
               (unsigned long long)hi, (unsigned long long)dflt);
        return dflt;
    }
    return x;
}

static int env_choice(const char *name, const char *a, const char *b, int dflt)
{
    const char *v = setting(name);
    if (v == NULL || *v == '\0') return dflt;
    if (strcmp(v, a) == 0) return 0;
    if (strcmp(v, b) == 0) return 1;
    gs_log(GS_LOG_WARN, "%s=%s is neither %s nor %s; using %s", name, v, a, b, dflt ? b : a);
    return dflt;
}

/* Turns on the GPU (1) or the CPU (0): the host's choice in the limits file
 * wins.  An older agent's file, or none, leaves it to the environment, which
 * is not read inside a shard (so CPU turns there). */
static int compute_turns(void)
{
    uint32_t v = gs_limits != NULL ? gs_limits->header.compute_turns : GPUSHARDS_COMPUTE_TURNS_UNSET;
    if (v == GPUSHARDS_COMPUTE_TURNS_CPU) return 0;
    if (v == GPUSHARDS_COMPUTE_TURNS_GPU) return 1;
    if (v == GPUSHARDS_COMPUTE_TURNS_UNSET) return env_choice("GPUSHARDS_COMPUTE_TURNS", "cpu", "gpu", 0);
    gs_log(GS_LOG_WARN, "the limits file's compute_turns is %u, neither %u (CPU) nor %u (GPU); using CPU turns", v,
           GPUSHARDS_COMPUTE_TURNS_CPU, GPUSHARDS_COMPUTE_TURNS_GPU);
    return 0;
}

static void print_stats(void)
{
    const struct gs_compute_stats *s = &gs_cst;
    fprintf(stderr, "gpushards compute [%s]: admits %lu, while capturing %lu, turns waited for %lu, synchronizes %lu, "
            "released at a synchronize %lu, turns taken from a busy holder %lu (waited %lu us for its drain), "
            "turn lost during the in-flight wait %lu, credit clamped %lu times (%lu us of its own time), "
            "GPU time measured %lu us, waits for work in flight %lu, gave up waiting %lu, "
            "launches queued behind the gate %lu, gate pages mapped %lu\n", gs_cc.shard, s->admits,
            s->capturing, s->acquires, s->syncs, s->sync_releases, s->handovers, s->handover_waits_us, s->retakes,
            s->clamps, s->clamped_us, s->measured_us, s->bound_waits, s->gave_up, s->gated,
            s->gates_mapped);
}

static void load_conf(void)
{
    struct cconf *cc = &gs_cc;
    gs_init(); /* the limits file, which names the shard */
    in_shard = access(GPUSHARDS_LIMITS_FIXED_PATH, F_OK) == 0;
    const char *dir = setting("GPUSHARDS_LEDGER_DIR");
    if (dir == NULL || *dir == '\0') {
        if (access(GPUSHARDS_LEDGER_DEFAULT_DIR, W_OK) != 0) return; /* no ledger: compute is not governed */
        dir = GPUSHARDS_LEDGER_DEFAULT_DIR;
    }
    snprintf(cc->dir, sizeof cc->dir, "%s", dir);
    /* The limits file's shard id wins; an older agent's file names none. */
    const char *id = gs_limits != NULL && gs_limits->header.shard_id[0] != '\0' ? gs_limits->header.shard_id
                                                                               : getenv("GPUSHARDS_SHARD_ID");
    if (id != NULL && *id != '\0') snprintf(cc->shard, sizeof cc->shard, "%.*s", (int)sizeof cc->shard - 1, id);
    else snprintf(cc->shard, sizeof cc->shard, "pid-%d", (int)getpid());
    cc->env_share = (uint32_t)env_u64("GPUSHARDS_COMPUTE_SHARE", 0, 1, 100) * 10u;
    cc->env_mode = env_choice("GPUSHARDS_COMPUTE_MODE", "guaranteed", "capped", 0) ? GPUSHARDS_COMPUTE_CAPPED
                                                                                    : GPUSHARDS_COMPUTE_GUARANTEED;
    cc->slice_ns = env_u64("GPUSHARDS_COMPUTE_SLICE_US", 4000, 100, 1000000) * 1000ull;
    cc->idle_ns = env_u64("GPUSHARDS_COMPUTE_IDLE_US", 1000, 20, 1000000) * 1000ull;
    cc->depth_ns = env_u64("GPUSHARDS_COMPUTE_DEPTH_US", 200, 10, 1000000) * 1000ull;
    cc->sync_release = (int)env_u64("GPUSHARDS_COMPUTE_SYNC_RELEASE", 1, 0, 1);
    cc->preempt = (int)env_u64("GPUSHARDS_COMPUTE_PREEMPT", 1, 0, 1);
    cc->handover_wait = (int)env_u64("GPUSHARDS_COMPUTE_HANDOVER_WAIT", 1, 0, 1);
    cc->charge = env_choice("GPUSHARDS_COMPUTE_CHARGE", "wall", "gpu", 0) ? GS_CHARGE_GPU : GS_CHARGE_WALL;
    cc->gpu_turns = compute_turns();
    if (cc->gpu_turns) {
        /* Every contended launch waits for its turn on the GPU: no in-flight
         * ring to measure GPU time with, and a new holder starts at once (the
         * old one's queue stops at its next kernel). */
        cc->charge = GS_CHARGE_WALL;
        cc->handover_wait = 0;
    }
    /* An MPS client of a partition is bound by queued GPU time whatever its
     * environment says: by age, graph neighbours in the rest took an
     * isolated shard's p99 to 2.2-2.9x alone, by time 1.1-1.6x (H200,
     * native/gpu-tests/RESULTS.md, 2026-11-27 15:40). */
    cc->depth_by_time = gs_mps_client() || env_choice("GPUSHARDS_COMPUTE_DEPTH_BY", "age", "time", 0);
    cc->timed = cc->charge == GS_CHARGE_GPU || cc->depth_by_time;
    /* Diagnostics only: read inside a shard too. */
    const char *stats = getenv("GPUSHARDS_COMPUTE_STATS");
    cc->stats = stats != NULL && strcmp(stats, "1") == 0;
    if (cc->stats) atexit(print_stats);
    cc->on = 1;
}

int gs_compute_conf(void)
{
    int s = __atomic_load_n(&conf_state, __ATOMIC_ACQUIRE);
    if (GS_LIKELY(s == 2)) return gs_cc.on;
    int zero = 0;
    if (__atomic_compare_exchange_n(&conf_state, &zero, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        load_conf();
        __atomic_store_n(&conf_state, 2, __ATOMIC_RELEASE);
    } else {
        while (__atomic_load_n(&conf_state, __ATOMIC_ACQUIRE) != 2) sched_yield();
    }
    return gs_cc.on;
}

void gs_compute_conf_reset(void)
{
    __atomic_store_n(&conf_state, 0, __ATOMIC_RELEASE);
    memset(&gs_cc, 0, sizeof gs_cc);
}
