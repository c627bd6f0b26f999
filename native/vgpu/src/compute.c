/* compute.c — a shard's compute share: turns on a per-GPU ledger shared by
 * every shard of the host (gpushards_ledger.h says how turns are handed
 * out).  Launch hooks call gs_compute_admit() before and
 * gs_compute_launched() after each launch.  The hot path of a shard that
 * holds the turn is a clock read (vDSO), one load and a compare. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "gpushards_ledger.h"
#include "hooks.h"

#define STALE_WAIT_NS 2000000ull /* a waiter that has not polled for 2 ms is gone */
#define ACTIVE_NS 1000000000ull  /* a member seen within 1 s counts for the default weight */
#define MIN_WEIGHT 50u
#define RING 16u

struct cconf {
    int on;
    char dir[1024];
    char shard[48];
    uint32_t env_share; /* permille, 0 = unset */
    uint32_t env_mode;
    uint64_t slice_ns, idle_ns, depth_ns;
    int sync_release; /* a synchronize ends the turn while contended */
    int preempt;      /* a waiter owed more than half a slice takes the turn before the lease ends */
    int stats;
};
static struct cconf cc;

struct cdev {
    int state; /* 0 not looked up, 1 governed, -1 not governed */
    struct gpushards_ledger *L;
    int m;     /* our member entry */
    int lim;   /* index in the limits file, -1 = none */
    /* in-flight work while contended: events recorded after launches */
    uint32_t ring_lock, head, count;
    uint64_t contended_until; /* another shard used this GPU recently */
    CUcontext ctx;
    CUevent ev[RING];
    uint64_t rec_ns[RING]; /* when each event was recorded */
};
static struct cdev cdevs[GS_MAX_ORDINALS];
static int conf_state; /* 0, 1 loading, 2 loaded */

CUresult (*gs_real_cuEventCreate)(CUevent *, unsigned int);
CUresult (*gs_real_cuEventRecord)(CUevent, CUstream);
CUresult (*gs_real_cuEventQuery)(CUevent);
CUresult (*gs_real_cuEventSynchronize)(CUevent);
CUresult (*gs_real_cuCtxSynchronize)(void);

static inline uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static uint64_t env_u64(const char *name, uint64_t dflt, uint64_t lo, uint64_t hi)
{
    const char *v = getenv(name);
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

/* Diagnostics (GPUSHARDS_COMPUTE_STATS=1): counts printed at exit. */
static struct {
    unsigned long admits, capturing, acquires, syncs, sync_releases, handovers, handover_waits_us, retakes;
    unsigned long clamps, clamped_us;
} st;

static void print_stats(void)
{
    fprintf(stderr, "gpushards compute [%s]: admits %lu, while capturing %lu, turns waited for %lu, synchronizes %lu, "
            "released at a synchronize %lu, turns taken from a busy holder %lu (waited %lu us for its drain), "
            "turn lost during the in-flight wait %lu, credit clamped %lu times (%lu us of its own time)\n", cc.shard,
            st.admits, st.capturing, st.acquires, st.syncs, st.sync_releases, st.handovers, st.handover_waits_us,
            st.retakes, st.clamps, st.clamped_us);
}

static void load_conf(void)
{
    const char *dir = getenv("GPUSHARDS_LEDGER_DIR");
    if (dir == NULL || *dir == '\0') {
        if (access(GPUSHARDS_LEDGER_DEFAULT_DIR, W_OK) != 0) return; /* no ledger: compute is not governed */
        dir = GPUSHARDS_LEDGER_DEFAULT_DIR;
    }
    snprintf(cc.dir, sizeof cc.dir, "%s", dir);
    const char *id = getenv("GPUSHARDS_SHARD_ID");
    if (id != NULL && *id != '\0') snprintf(cc.shard, sizeof cc.shard, "%s", id);
    else snprintf(cc.shard, sizeof cc.shard, "pid-%d", (int)getpid());
    cc.env_share = (uint32_t)env_u64("GPUSHARDS_COMPUTE_SHARE", 0, 1, 100) * 10u;
    const char *mode = getenv("GPUSHARDS_COMPUTE_MODE");
    cc.env_mode = mode != NULL && strcmp(mode, "capped") == 0 ? GPUSHARDS_COMPUTE_CAPPED : GPUSHARDS_COMPUTE_GUARANTEED;
    if (mode != NULL && *mode && strcmp(mode, "capped") != 0 && strcmp(mode, "guaranteed") != 0)
        gs_log(GS_LOG_WARN, "GPUSHARDS_COMPUTE_MODE=%s is neither guaranteed nor capped; using guaranteed", mode);
    cc.slice_ns = env_u64("GPUSHARDS_COMPUTE_SLICE_US", 4000, 100, 1000000) * 1000ull;
    cc.idle_ns = env_u64("GPUSHARDS_COMPUTE_IDLE_US", 1000, 20, 1000000) * 1000ull;
    cc.depth_ns = env_u64("GPUSHARDS_COMPUTE_DEPTH_US", 200, 10, 1000000) * 1000ull;
    cc.sync_release = (int)env_u64("GPUSHARDS_COMPUTE_SYNC_RELEASE", 1, 0, 1);
    cc.preempt = (int)env_u64("GPUSHARDS_COMPUTE_PREEMPT", 1, 0, 1);
    cc.stats = (int)env_u64("GPUSHARDS_COMPUTE_STATS", 0, 0, 1);
    if (cc.stats) atexit(print_stats);
    cc.on = 1;
}

static int conf(void)
{
    int s = __atomic_load_n(&conf_state, __ATOMIC_ACQUIRE);
    if (GS_LIKELY(s == 2)) return cc.on;
    int zero = 0;
    if (__atomic_compare_exchange_n(&conf_state, &zero, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        load_conf();
        __atomic_store_n(&conf_state, 2, __ATOMIC_RELEASE);
    } else {
        while (__atomic_load_n(&conf_state, __ATOMIC_ACQUIRE) != 2) sched_yield();
    }
    return cc.on;
}

/* ---- the ledger file -------------------------------------------------- */
static struct gpushards_ledger *map_ledger(const char *path)
{
    for (int attempt = 0; attempt < 3; attempt++) {
        int fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd >= 0) {
            off_t size = lseek(fd, 0, SEEK_END);
            void *m = size >= (off_t)sizeof(struct gpushards_ledger)
                          ? mmap(NULL, sizeof(struct gpushards_ledger), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                          : MAP_FAILED;
            close(fd);
            if (m == MAP_FAILED) return NULL;
            struct gpushards_ledger *L = m;
            if (L->magic != GPUSHARDS_LEDGER_MAGIC || L->version != GPUSHARDS_LEDGER_VERSION ||
                L->members_max != GPUSHARDS_LEDGER_MEMBERS || L->total_size != sizeof *L) {
                gs_log(GS_LOG_ERROR, "%s is not a ledger this libvgpu.so reads", path);
                munmap(m, sizeof *L);
                return NULL;
            }
            return L;
        }
        if (errno != ENOENT) break;
        /* Build it privately, publish with link(2): one creator wins. */
        char tmp[1200];
        snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
        fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0) break;
        (void)fchmod(fd, 0666);
        struct gpushards_ledger init;
        memset(&init, 0, sizeof init);
        init.magic = GPUSHARDS_LEDGER_MAGIC;
        init.version = GPUSHARDS_LEDGER_VERSION;
        init.members_max = GPUSHARDS_LEDGER_MEMBERS;
        init.total_size = sizeof init;
        ssize_t w = write(fd, &init, sizeof init);
        close(fd);
        if (w == (ssize_t)sizeof init && link(tmp, path) != 0 && errno != EEXIST)
            gs_log(GS_LOG_WARN, "cannot publish %s: %s", path, strerror(errno));
        unlink(tmp);
    }
    gs_log(GS_LOG_ERROR, "cannot open the compute ledger %s: %s", path, strerror(errno));
    return NULL;
}

static void spin_lock(uint32_t *l)
{
    uint64_t t0 = now_ns();
    uint32_t zero = 0;
    while (!__atomic_compare_exchange_n(l, &zero, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        zero = 0;
        /* A process killed inside the (tiny) critical section leaves it
         * held: after 50 ms take it anyway. */
        if (now_ns() - t0 > 50000000ull) break;
        sched_yield();
    }
}

static int claim_member(struct gpushards_ledger *L)
{
    spin_lock(&L->lock);
    int found = -1, free_i = -1;
    uint64_t now = now_ns();
    for (unsigned i = 0; i < GPUSHARDS_LEDGER_MEMBERS; i++) {
        struct gpushards_ledger_member *e = &L->members[i];
        if (strncmp(e->shard, cc.shard, sizeof e->shard) == 0) { found = (int)i; break; }
        uint64_t seen = __atomic_load_n(&e->seen_ns, __ATOMIC_RELAXED);
        int stale = e->shard[0] == '\0' || (now > seen && now - seen > 10ull * ACTIVE_NS);
        if (free_i < 0 && stale && GPUSHARDS_TURN_HOLDER(__atomic_load_n(&L->turn, __ATOMIC_ACQUIRE)) != i + 1)
            free_i = (int)i;
    }
    if (found < 0 && free_i >= 0) {
        struct gpushards_ledger_member *e = &L->members[free_i];
        memset(e, 0, sizeof *e);
        snprintf(e->shard, sizeof e->shard, "%s", cc.shard);
        e->vtime = __atomic_load_n(&L->vclock, __ATOMIC_RELAXED);
        found = free_i;
    }
    if (found >= 0) __atomic_store_n(&L->members[found].seen_ns, now, __ATOMIC_RELAXED);
    __atomic_store_n(&L->lock, 0, __ATOMIC_RELEASE);
    if (found < 0) gs_log(GS_LOG_ERROR, "the compute ledger has no free member entry (at most %u shards per GPU)",
                          GPUSHARDS_LEDGER_MEMBERS);
    return found;
}

static struct cdev *lookup(CUdevice dev)
{
    if (GS_UNLIKELY(dev < 0 || dev >= GS_MAX_ORDINALS)) return NULL;
    struct cdev *c = &cdevs[dev];
    int s = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
    if (GS_LIKELY(s == 1)) return c;
    if (s < 0) return NULL;
    CUuuid u;
    CUresult r = gs_real_cuDeviceGetUuid_v2 != NULL ? gs_real_cuDeviceGetUuid_v2(&u, dev)
                 : gs_real_cuDeviceGetUuid != NULL ? gs_real_cuDeviceGetUuid(&u, dev) : CUDA_ERROR_NOT_FOUND;
    struct gpushards_ledger *L = NULL;
    int m = -1;
    if (r == CUDA_SUCCESS) {
        char id[41], path[1100];
        gs_uuid_format((const uint8_t *)u.bytes, id);
        snprintf(path, sizeof path, "%s/%s", cc.dir, id);
        L = map_ledger(path);
        if (L != NULL) m = claim_member(L);
    } else {
        gs_log(GS_LOG_ERROR, "cannot read the UUID of device %d (error %d); its compute is not governed", dev, (int)r);
    }
    /* Two threads may get here at once: the second mapping is harmless. */
    if (m < 0) {
        __atomic_store_n(&c->state, -1, __ATOMIC_RELEASE);
        return NULL;
    }
    c->L = L;
    c->m = m;
    __atomic_store_n(&L->members[m].inflight_ns, 0, __ATOMIC_RELAXED); /* a dead process's claim */
    c->lim = -1;
    if (gs_limits != NULL)
        for (unsigned i = 0; i < gs_limits->header.device_count && i < GPUSHARDS_LIMITS_MAX_DEVICES; i++)
            if (gs_limits->devices[i].state == GPUSHARDS_LIMITS_ACTIVE &&
                memcmp(gs_limits->devices[i].uuid, u.bytes, 16) == 0)
                c->lim = (int)i;
    __atomic_store_n(&c->state, 1, __ATOMIC_RELEASE);
    return c;
}

/* ---- decisions (slow path: at turn boundaries and while waiting) ------- */
static void share_of(struct cdev *c, uint32_t *share, uint32_t *mode)
{
    uint32_t s = cc.env_share, md = cc.env_mode;
    if (gs_limits != NULL && c->lim >= 0) {
        /* The agent's file wins, and is read at every turn: a live change
         * takes effect at the next turn. */
        const struct gpushards_limits_device *d = &gs_limits->devices[c->lim];
        uint32_t ls = __atomic_load_n(&d->compute_share_permille, __ATOMIC_RELAXED);
        uint32_t lm = __atomic_load_n(&d->compute_mode, __ATOMIC_RELAXED);
        if (ls != 0 && ls <= 1000) s = ls;
        if (lm == GPUSHARDS_COMPUTE_GUARANTEED || lm == GPUSHARDS_COMPUTE_CAPPED) md = lm;
    }
    *share = s;
    *mode = md;
}

/* The weight a member's time is divided by: its share, or for one with no
 * share an equal split of what active members with a share leave. */
static uint32_t weight(struct gpushards_ledger *L, unsigned i, uint64_t now)
{
    uint32_t s = __atomic_load_n(&L->members[i].share_permille, __ATOMIC_RELAXED);
    if (s != 0) return s;
    uint32_t taken = 0, unset = 0;
    for (unsigned j = 0; j < GPUSHARDS_LEDGER_MEMBERS; j++) {
        struct gpushards_ledger_member *e = &L->members[j];
        uint64_t seen = __atomic_load_n(&e->seen_ns, __ATOMIC_RELAXED);
        if (e->shard[0] == '\0' || now - seen > ACTIVE_NS) continue;
        uint32_t sj = __atomic_load_n(&e->share_permille, __ATOMIC_RELAXED);
        if (sj != 0) taken += sj;
        else unset++;
    }
    uint32_t left = taken < 1000 ? 1000 - taken : 0;
    uint32_t w = unset > 0 ? left / unset : left;
    return w < MIN_WEIGHT ? MIN_WEIGHT : w;
}

/* Charge the holder for [from, min(to, lease_end)]: a holder that died is
 * charged to the end of its lease, not beyond. */
static void charge(struct gpushards_ledger *L, unsigned holder_plus1, uint64_t from, uint64_t to, uint64_t lease_end)
{
    if (holder_plus1 == 0 || holder_plus1 > GPUSHARDS_LEDGER_MEMBERS || from == 0) return;
    uint64_t end = to < lease_end ? to : lease_end;
    if (end <= from) return;
    uint64_t d = end - from;
    struct gpushards_ledger_member *e = &L->members[holder_plus1 - 1];
    uint32_t w = weight(L, holder_plus1 - 1, to);
    uint64_t v = __atomic_add_fetch(&e->vtime, d * 1000u / w, __ATOMIC_RELAXED);
    __atomic_add_fetch(&e->busy_ns, d, __ATOMIC_RELAXED);
    if (__atomic_load_n(&e->mode, __ATOMIC_RELAXED) == GPUSHARDS_COMPUTE_CAPPED) {
        uint32_t s = __atomic_load_n(&e->share_permille, __ATOMIC_RELAXED);
        if (s == 0) s = w;
        uint64_t c = __atomic_load_n(&e->cap_ns, __ATOMIC_RELAXED);
        if (c < from) c = from;
        __atomic_store_n(&e->cap_ns, c + d * 1000u / s, __ATOMIC_RELAXED);
    }
    uint64_t vc = __atomic_load_n(&L->vclock, __ATOMIC_RELAXED);
    if (v > vc) __atomic_store_n(&L->vclock, v, __ATOMIC_RELAXED);
}

static int eligible(struct gpushards_ledger_member *e, uint64_t now)
{
    return __atomic_load_n(&e->mode, __ATOMIC_RELAXED) != GPUSHARDS_COMPUTE_CAPPED ||
           __atomic_load_n(&e->cap_ns, __ATOMIC_RELAXED) <= now;
}

/* 1 when no other shard waiting (and eligible) has less virtual time. */
static int most_entitled(struct gpushards_ledger *L, unsigned m, uint64_t now)
{
    uint64_t mine = __atomic_load_n(&L->members[m].vtime, __ATOMIC_RELAXED);
    for (unsigned j = 0; j < GPUSHARDS_LEDGER_MEMBERS; j++) {
        if (j == m) continue;
        struct gpushards_ledger_member *e = &L->members[j];
        uint64_t hb = __atomic_load_n(&e->wait_hb_ns, __ATOMIC_RELAXED);
        if (hb == 0 || hb + STALE_WAIT_NS < now || !eligible(e, now)) continue;
        if (__atomic_load_n(&e->vtime, __ATOMIC_RELAXED) < mine) return 0;
    }
    return 1;
}

static void wake_all(struct gpushards_ledger *L)
{
    syscall(SYS_futex, (uint32_t *)(void *)&L->turn, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Wait until everything this process queued on the GPU has run: every
 * stream of the context (several streams, or work queued before the GPU
 * was contended and nothing was recorded), so that the next holder gets
 * the GPU clean instead of time-sliced against our leftovers. */
static void drain(struct cdev *c)
{
    uint32_t zero = 0;
    if (!__atomic_compare_exchange_n(&c->ring_lock, &zero, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) return;
    CUresult r = CUDA_SUCCESS;
    if (gs_real_cuCtxSynchronize != NULL && !gs_capturing()) r = gs_real_cuCtxSynchronize();
    else if (c->count > 0) r = gs_real_cuEventSynchronize(c->ev[(c->head + c->count - 1) % RING]);
    if (r != CUDA_SUCCESS) GS_DEBUG("drain: %d", (int)r);
    c->head = 0;
    c->count = 0;
    __atomic_store_n(&c->L->members[c->m].inflight_ns, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&c->ring_lock, 0, __ATOMIC_RELEASE);
}

/* We took the turn from a holder that still had work queued: wait until it
 * has drained (it drains as soon as it sees the turn gone, then waits, which
 * its wait heartbeat shows), has been idle, or one slice has passed (it
 * died, or sits in a long CPU section).  The drain is its GPU time: charged
 * to it, not to us. */
static void await_handover(struct gpushards_ledger *L, unsigned h, uint64_t taken)
{
    struct gpushards_ledger_member *o = &L->members[h - 1];
    uint64_t now = taken;
    for (;;) {
        uint64_t hb = __atomic_load_n(&o->wait_hb_ns, __ATOMIC_ACQUIRE);
        uint64_t last = __atomic_load_n(&o->last_kernel_ns, __ATOMIC_RELAXED);
        int idle = last + cc.idle_ns < now && __atomic_load_n(&o->inflight_ns, __ATOMIC_RELAXED) == 0;
        if (hb >= taken || idle || now >= taken + cc.slice_ns) break;
        struct timespec ts = {0, 10000};
        nanosleep(&ts, NULL);
        now = now_ns();
    }
    if (now > taken) charge(L, h, taken, now, UINT64_MAX);
    __atomic_store_n(&L->since_ns, now, __ATOMIC_RELEASE);
    if (cc.stats) { st.handovers++; st.handover_waits_us += (now - taken) / 1000u; }
}

/* Wait until our shard holds the turn on this GPU. */
static void acquire(struct cdev *c, uint64_t now)
{
    struct gpushards_ledger *L = c->L;
    unsigned m = (unsigned)c->m, me = m + 1;
    struct gpushards_ledger_member *e = &L->members[m];
    uint32_t share, mode;
    share_of(c, &share, &mode);
    __atomic_store_n(&e->share_permille, share, __ATOMIC_RELAXED);
    __atomic_store_n(&e->mode, mode, __ATOMIC_RELAXED);
    __atomic_store_n(&e->seen_ns, now, __ATOMIC_RELAXED);
    int waiting = 0;
    for (;;) {
        uint64_t t = __atomic_load_n(&L->turn, __ATOMIC_ACQUIRE);
        unsigned h = GPUSHARDS_TURN_HOLDER(t);
        uint64_t end = GPUSHARDS_TURN_END_US(t) * 1000ull;
        uint64_t gen = GPUSHARDS_TURN_GEN(t) + 1;
        uint64_t lease = (now + cc.slice_ns) / 1000ull;
        if (h == me) {
            if (now < end) break;
            /* Our lease is over: renew it unless somebody is owed the GPU. */
            if (eligible(e, now) && most_entitled(L, m, now)) {
                if (__atomic_compare_exchange_n(&L->turn, &t, GPUSHARDS_TURN(me, gen, lease), 0, __ATOMIC_ACQ_REL,
                                                __ATOMIC_ACQUIRE)) {
                    charge(L, me, __atomic_exchange_n(&L->since_ns, now, __ATOMIC_ACQ_REL), now, end);
                    break;
                }
            } else {
                /* Hand over a drained GPU: the next holder gets it clean. */
                drain(c);
                now = now_ns();
                uint64_t from = __atomic_load_n(&L->since_ns, __ATOMIC_ACQUIRE);
                if (__atomic_compare_exchange_n(&L->turn, &t, GPUSHARDS_TURN(0, gen, 0), 0, __ATOMIC_ACQ_REL,
                                                __ATOMIC_ACQUIRE)) {
                    charge(L, me, from, now, now);
                    wake_all(L);
                }
            }
            now = now_ns();
            continue;
        }
        if (!waiting) {
            /* We do not hold the turn: let our queued work finish before we
             * say (wait heartbeat) that we wait, so that a holder that took
             * the turn from us knows when the GPU is its own. */
            drain(c);
            now = now_ns();
            /* Coming back: no more credit than one slice of our own. */
            uint32_t w = weight(L, m, now);
            uint64_t lag = cc.slice_ns * 1000u / w, vc = __atomic_load_n(&L->vclock, __ATOMIC_RELAXED);
            uint64_t v = __atomic_load_n(&e->vtime, __ATOMIC_RELAXED);
            if (vc > lag && v < vc - lag) {
                __atomic_store_n(&e->vtime, vc - lag, __ATOMIC_RELAXED);
                if (cc.stats) { st.clamps++; st.clamped_us += (vc - lag - v) * w / 1000u / 1000u; }
            }
            waiting = 1;
        }
        __atomic_store_n(&e->wait_hb_ns, now, __ATOMIC_RELAXED);
        __atomic_store_n(&L->last_wait_ns, now, __ATOMIC_RELAXED);
        uint64_t wake_at = now + cc.idle_ns;
        if (eligible(e, now)) {
            int take = 0;
            if (h == 0 || now >= end) {
                take = most_entitled(L, m, now);
            } else {
                struct gpushards_ledger_member *o = &L->members[h - 1];
                uint64_t last = __atomic_load_n(&o->last_kernel_ns, __ATOMIC_RELAXED);
                uint32_t w = weight(L, m, now);
                uint64_t v = __atomic_load_n(&e->vtime, __ATOMIC_RELAXED);
                /* Idle: no launch for idle_ns and no work of its own known to
                 * be in flight (a 2 ms graph launched every 2 ms is busy). */
                int idle = last + cc.idle_ns < now && __atomic_load_n(&o->inflight_ns, __ATOMIC_RELAXED) == 0;
                /* The holder's virtual time as it would be charged now. */
                uint64_t since = __atomic_load_n(&L->since_ns, __ATOMIC_RELAXED);
                uint64_t live = __atomic_load_n(&o->vtime, __ATOMIC_RELAXED) +
                                (now > since && since != 0 ? (now - since) * 1000u / weight(L, h - 1, now) : 0);
                int owed = cc.preempt && v + cc.slice_ns * 500u / w < live;
                take = (idle || owed) && most_entitled(L, m, now);
                if (end < wake_at) wake_at = end;
            }
            if (take && __atomic_compare_exchange_n(&L->turn, &t, GPUSHARDS_TURN(me, gen, lease), 0,
                                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                if (h != 0) {
                    charge(L, h, __atomic_exchange_n(&L->since_ns, now, __ATOMIC_ACQ_REL), now, end);
                    await_handover(L, h, now);
                } else {
                    __atomic_store_n(&L->since_ns, now, __ATOMIC_RELEASE);
                }
                break;
            }
        } else {
            uint64_t c2 = __atomic_load_n(&e->cap_ns, __ATOMIC_RELAXED);
            if (c2 > now && c2 - now < cc.slice_ns * 100u) wake_at = c2;
        }
        if (wake_at > now) {
            uint64_t d = wake_at - now;
            if (d < 20000ull) d = 20000ull;
            struct timespec ts = {(time_t)(d / 1000000000ull), (long)(d % 1000000000ull)};
            syscall(SYS_futex, (uint32_t *)(void *)&L->turn, FUTEX_WAIT, (uint32_t)t, &ts, NULL, 0);
        }
        now = now_ns();
    }
    __atomic_store_n(&e->wait_hb_ns, 0, __ATOMIC_RELAXED);
    /* Another shard launched or waited within 50 ms: keep our work in
     * flight short until the next turn boundary looks again. */
    for (unsigned j = 0; j < GPUSHARDS_LEDGER_MEMBERS; j++) {
        if (j == m) continue;
        struct gpushards_ledger_member *o = &L->members[j];
        uint64_t a = __atomic_load_n(&o->last_kernel_ns, __ATOMIC_RELAXED);
        uint64_t b = __atomic_load_n(&o->wait_hb_ns, __ATOMIC_RELAXED);
        if ((a != 0 && a + 50000000ull > now) || (b != 0 && b + 50000000ull > now)) {
            c->contended_until = now + 50000000ull;
            break;
        }
    }
}

/* ---- what the launch hooks call ----------------------------------------- */
void *gs_compute_admit(void)
{
    if (GS_LIKELY(!conf())) return NULL;
    /* A launch into a capturing stream runs nothing now, and waiting or
     * querying events while any capture is under way invalidates it
     * (PyTorch's global capture mode): admission happens when the graph
     * is launched. */
    if (gs_capturing()) {
        if (cc.stats) st.capturing++;
        return NULL;
    }
    if (cc.stats) st.admits++;
    gs_init();
    CUdevice dev;
    if (gs_real_cuCtxGetDevice == NULL || gs_real_cuCtxGetDevice(&dev) != CUDA_SUCCESS) return NULL;
    struct cdev *c = lookup(dev);
    if (c == NULL) return NULL;
    struct gpushards_ledger *L = c->L;
    uint64_t now = now_ns();
    struct gpushards_ledger_member *e = &L->members[c->m];
again:;
    uint64_t t = __atomic_load_n(&L->turn, __ATOMIC_ACQUIRE);
    if (GS_UNLIKELY(GPUSHARDS_TURN_HOLDER(t) != (unsigned)c->m + 1 || now >= GPUSHARDS_TURN_END_US(t) * 1000ull)) {
        if (cc.stats) st.acquires++;
        acquire(c, now);
        now = now_ns();
    }
    __atomic_store_n(&e->last_kernel_ns, now, __ATOMIC_RELAXED);
    /* Contended (somebody waited within 2 ms) or capped: keep the work in
     * flight short, so that a turn ends when it is over. */
    uint64_t lw = __atomic_load_n(&L->last_wait_ns, __ATOMIC_RELAXED);
    int bound = lw + STALE_WAIT_NS > now || now < c->contended_until ||
                __atomic_load_n(&e->mode, __ATOMIC_RELAXED) == GPUSHARDS_COMPUTE_CAPPED;
    if (!bound) {
        if (GS_UNLIKELY(c->count != 0)) {
            c->head = 0;
            c->count = 0;
            __atomic_store_n(&e->inflight_ns, 0, __ATOMIC_RELAXED);
        }
        return NULL;
    }
    uint32_t zero = 0;
    if (!__atomic_compare_exchange_n(&c->ring_lock, &zero, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) return NULL;
    CUcontext ctx = NULL;
    if (gs_real_cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == NULL) goto unlock;
    if (ctx != c->ctx) {
        /* Events belong to a context: (re)create them for this one. */
        for (unsigned i = 0; i < RING; i++)
            if (gs_real_cuEventCreate(&c->ev[i], CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) { c->ctx = NULL; goto unlock; }
        c->ctx = ctx;
        c->head = c->count = 0;
    }
    /* Forget what has finished; then, while the oldest unfinished launch
     * was made more than depth_ns ago, the queue holds at least that much
     * work: wait for it.  A turn then ends at most ~depth_ns after its
     * lease, whatever the kernels' sizes. */
    while (c->count > 0 && gs_real_cuEventQuery(c->ev[c->head]) != CUDA_ERROR_NOT_READY) {
        c->head = (c->head + 1) % RING;
        c->count--;
    }
    while (c->count >= RING - 1 || (c->count >= 2 && c->rec_ns[c->head] + cc.depth_ns < now)) {
        (void)gs_real_cuEventSynchronize(c->ev[c->head]);
        c->head = (c->head + 1) % RING;
        c->count--;
        now = now_ns();
    }
    __atomic_store_n(&e->inflight_ns, c->count > 0 ? c->rec_ns[c->head] : 0, __ATOMIC_RELAXED);
    t = __atomic_load_n(&L->turn, __ATOMIC_ACQUIRE);
    if (GS_UNLIKELY(GPUSHARDS_TURN_HOLDER(t) != (unsigned)c->m + 1)) {
        /* The turn was taken while we waited for our work in flight. */
        if (cc.stats) st.retakes++;
        __atomic_store_n(&c->ring_lock, 0, __ATOMIC_RELEASE);
        goto again;
    }
    return c; /* gs_compute_launched records the event and unlocks */
unlock:
    __atomic_store_n(&c->ring_lock, 0, __ATOMIC_RELEASE);
    return NULL;
}

void gs_compute_launched(void *token, CUstream stream, CUresult launched)
{
    struct cdev *c = token;
    if (c == NULL) return;
    if (launched == CUDA_SUCCESS) {
        unsigned slot = (c->head + c->count) % RING;
        if (gs_real_cuEventRecord(c->ev[slot], stream) == CUDA_SUCCESS) {
            c->rec_ns[slot] = now_ns();
            if (c->count++ == 0) __atomic_store_n(&c->L->members[c->m].inflight_ns, c->rec_ns[slot], __ATOMIC_RELAXED);
        }
    }
    __atomic_store_n(&c->ring_lock, 0, __ATOMIC_RELEASE);
}

/* After a successful synchronize: the shard waits for nothing on the GPU
 * now, and its next launch needs CPU time first.  While another shard
 * waits, end the turn here (charged to now) instead of holding the GPU
 * idle until the lease ends: a latency-bound shard (a request, then a
 * sync) then holds turns only while its work runs, and comes back owed,
 * taking the next turn at once. */
void gs_compute_synced(void)
{
    if (GS_LIKELY(!conf()) || gs_capturing()) return;
    if (cc.stats) st.syncs++;
    if (!cc.sync_release) return;
    CUdevice dev;
    if (gs_real_cuCtxGetDevice == NULL || gs_real_cuCtxGetDevice(&dev) != CUDA_SUCCESS) return;
    if (dev < 0 || dev >= GS_MAX_ORDINALS || __atomic_load_n(&cdevs[dev].state, __ATOMIC_ACQUIRE) != 1) return;
    struct cdev *c = &cdevs[dev];
    struct gpushards_ledger *L = c->L;
    unsigned me = (unsigned)c->m + 1;
    uint64_t now = now_ns();
    uint64_t t = __atomic_load_n(&L->turn, __ATOMIC_ACQUIRE);
    if (GPUSHARDS_TURN_HOLDER(t) != me) return;
    /* Nobody waits: a waiter refreshes last_wait_ns at least every idle_ns. */
    if (__atomic_load_n(&L->last_wait_ns, __ATOMIC_RELAXED) + STALE_WAIT_NS + cc.idle_ns < now) return;
    uint64_t end = GPUSHARDS_TURN_END_US(t) * 1000ull;
    uint64_t from = __atomic_load_n(&L->since_ns, __ATOMIC_ACQUIRE);
    if (__atomic_compare_exchange_n(&L->turn, &t, GPUSHARDS_TURN(0, GPUSHARDS_TURN_GEN(t) + 1, 0), 0,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        charge(L, me, from, now, end);
        wake_all(L);
        if (cc.stats) st.sync_releases++;
    }
}

void gs_compute_reset_process(void)
{
    memset(cdevs, 0, sizeof cdevs);
    __atomic_store_n(&conf_state, 0, __ATOMIC_RELEASE);
    memset(&cc, 0, sizeof cc);
}
