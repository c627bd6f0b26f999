/* init.c — the process's life: initialisation on the first CUDA or NVML
 * call (not at load: /etc/ld.so.preload loads us into every process of the
 * container, most of which never touch a GPU), fork, and exit. */
#include <sched.h>

#include "vgpu.h"

/* What pthread_atfork expands to (it lives in libc_nonshared.a, and in
 * libpthread before glibc 2.28): calling it directly keeps one definition,
 * GLIBC_2.3.2, that every glibc since has. */
extern int __register_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void), void *dso);
extern void *__dso_handle;

/* 0 not started, 1 in progress, 2 done. */
int gs_init_state;

static void child_after_fork(void)
{
    /* A fork in the middle of another thread's initialisation leaves no
     * thread to finish it in the child: start over there. */
    int busy = 1;
    __atomic_compare_exchange_n(&gs_init_state, &busy, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
    gs_resolve_after_fork();
    /* The child is a process of its own: it claims its own slot when it
     * first charges, and holds nothing yet (CUDA contexts do not survive
     * fork, so the parent's allocations are not the child's to free). */
    gs_budget_reset_process();
    gs_track_drop_all(&gs_allocs);
    gs_pools_reset_process();
    gs_capture_reset_process();
    gs_hooks_reset_process();
    gs_compute_reset_process();
    gs_wake_reset_process();
}

static int choose_mode(void)
{
    if (gs_cfg.limits_bad || gs_cfg.context_bytes_bad || gs_cfg.pool_growth_bad) return GS_MODE_FAIL_CLOSED;
    if (gs_track_init(&gs_allocs, gs_cfg.track_capacity) != 0 || gs_pools_init() != 0) {
        gs_log(GS_LOG_ERROR, "cannot allocate the allocation table; refusing every GPU allocation");
        return GS_MODE_FAIL_CLOSED;
    }
    int lim = gs_limits_open();
    if (lim < 0) return GS_MODE_FAIL_CLOSED;
    int r = gs_region_open(gs_cfg.region_path);
    if (r == 0) return GS_MODE_COUNTING;
    if (r == -2) {
        gs_log(GS_LOG_ERROR, "refusing every GPU allocation until %s is fixed or removed", gs_cfg.region_path);
        return GS_MODE_FAIL_CLOSED;
    }
    if (gs_cfg.any_limit || lim > 0) {
        gs_log(GS_LOG_ERROR, "a memory limit is set but the region %s is unavailable; refusing every GPU allocation",
               gs_cfg.region_path);
        return GS_MODE_FAIL_CLOSED;
    }
    gs_log(GS_LOG_WARN, "no region at %s and no limit set: GPU memory is not capped or counted", gs_cfg.region_path);
    return GS_MODE_PASSTHROUGH;
}

void gs_init_slow(void)
{
    int expected = 0;
    if (!__atomic_compare_exchange_n(&gs_init_state, &expected, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        while (__atomic_load_n(&gs_init_state, __ATOMIC_ACQUIRE) != 2) sched_yield();
        return;
    }
    gs_log_init();
    gs_config_load();
    gs_mode = choose_mode();
    if (gs_mode == GS_MODE_COUNTING) gs_region_reclaim_dead();
    GS_DEBUG("initialised: mode %d, region %s", gs_mode, gs_cfg.region_path);
    __atomic_store_n(&gs_init_state, 2, __ATOMIC_RELEASE);
}

/* Registered at load so that a fork at any moment, even during
 * initialisation, leaves the child consistent. */
__attribute__((constructor)) static void at_load(void)
{
    int e = __register_atfork(NULL, NULL, child_after_fork, __dso_handle);
    if (e != 0) gs_log(GS_LOG_WARN, "cannot register the fork handler (error %d)", e);
}

__attribute__((destructor)) static void at_exit(void)
{
    if (__atomic_load_n(&gs_init_state, __ATOMIC_ACQUIRE) == 2) gs_release_process();
}
