/* compute_ledger.c — the per-GPU ledger file shared by every shard of the
 * host (gpushards_ledger.h): mapping it, this shard's member entry, the
 * weights its time is divided by, and what a turn's holder is charged. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "compute_internal.h"

struct cdev gs_cdevs[GS_MAX_ORDINALS];

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
    uint64_t t0 = gs_now_ns();
    uint32_t zero = 0;
    while (!__atomic_compare_exchange_n(l, &zero, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        zero = 0;
        /* A process killed inside the (tiny) critical section leaves it
         * held: after 50 ms take it anyway. */
        if (gs_now_ns() - t0 > 50000000ull) break;
        sched_yield();
    }
}

static int claim_member(struct gpushards_ledger *L)
{
    spin_lock(&L->lock);
    int found = -1, free_i = -1;
    uint64_t now = gs_now_ns();
    for (unsigned i = 0; i < GPUSHARDS_LEDGER_MEMBERS; i++) {
        struct gpushards_ledger_member *e = &L->members[i];
        if (strncmp(e->shard, gs_cc.shard, sizeof e->shard) == 0) { found = (int)i; break; }
        uint64_t seen = __atomic_load_n(&e->seen_ns, __ATOMIC_RELAXED);
        int stale = e->shard[0] == '\0' || (now > seen && now - seen > 10ull * ACTIVE_NS);
        if (free_i < 0 && stale && GPUSHARDS_TURN_HOLDER(__atomic_load_n(&L->turn, __ATOMIC_ACQUIRE)) != i + 1)
            free_i = (int)i;
    }
    if (found < 0 && free_i >= 0) {
        struct gpushards_ledger_member *e = &L->members[free_i];
        memset(e, 0, sizeof *e);
        snprintf(e->shard, sizeof e->shard, "%s", gs_cc.shard);
        e->vtime = __atomic_load_n(&L->vclock, __ATOMIC_RELAXED);
        found = free_i;
    }
    if (found >= 0) __atomic_store_n(&L->members[found].seen_ns, now, __ATOMIC_RELAXED);
    __atomic_store_n(&L->lock, 0, __ATOMIC_RELEASE);
    return found;
}

/* The ledger had no free entry: try again at most once a second (until
 * then, launches are not governed and stamp nothing). */
#define CLAIM_RETRY_NS 1000000000ull

struct cdev *gs_compute_lookup(CUdevice dev)
{
    if (GS_UNLIKELY(dev < 0 || dev >= GS_MAX_ORDINALS)) return NULL;
    struct cdev *c = &gs_cdevs[dev];
    int s = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
    if (GS_LIKELY(s == 1)) return c;
    if (s == -1) return NULL;
    if (s == -2) {
        uint64_t now = gs_now_ns(), due = __atomic_load_n(&c->claim_retry_ns, __ATOMIC_RELAXED);
        if (now < due || !__atomic_compare_exchange_n(&c->claim_retry_ns, &due, now + CLAIM_RETRY_NS, 0,
                                                      __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            return NULL;
    }
    CUuuid u;
    CUresult r = gs_real_cuDeviceGetUuid_v2 != NULL ? gs_real_cuDeviceGetUuid_v2(&u, dev)
                 : gs_real_cuDeviceGetUuid != NULL ? gs_real_cuDeviceGetUuid(&u, dev) : CUDA_ERROR_NOT_FOUND;
    struct gpushards_ledger *L = s == -2 ? c->L : NULL; /* mapped when it was full */
    int m = -1;
    if (r == CUDA_SUCCESS) {
        char id[41], path[1100];
        gs_uuid_format((const uint8_t *)u.bytes, id);
        snprintf(path, sizeof path, "%s/%s", gs_cc.dir, id);
        if (L == NULL) L = map_ledger(path);
        if (L != NULL) m = claim_member(L);
    } else {
        gs_log(GS_LOG_ERROR, "cannot read the UUID of device %d (error %d); its compute is not governed", dev, (int)r);
    }
    /* Two threads may get here at once: the second mapping is harmless. */
    if (m < 0 && L != NULL && r == CUDA_SUCCESS) {
        if (s != -2)
            gs_log(GS_LOG_ERROR, "the compute ledger has no free member entry (at most %u shards per GPU): "
                                 "launching without turns, trying again every second", GPUSHARDS_LEDGER_MEMBERS);
        c->L = L;
        __atomic_store_n(&c->claim_retry_ns, gs_now_ns() + CLAIM_RETRY_NS, __ATOMIC_RELAXED);
        __atomic_store_n(&c->state, -2, __ATOMIC_RELEASE);
        return NULL;
    }
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
    uint32_t share, mode;
    gs_compute_share_of(c, &share, &mode);
    c->isolated = mode == GPUSHARDS_COMPUTE_ISOLATED;
    if (c->isolated) {
        /* Published once: the others leave it out of turns and weights. */
        __atomic_store_n(&L->members[m].share_permille, share, __ATOMIC_RELAXED);
        __atomic_store_n(&L->members[m].mode, mode, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&c->state, 1, __ATOMIC_RELEASE);
    return c;
}

/* ---- decisions (slow path: at turn boundaries and while waiting) ------- */
void gs_compute_share_of(struct cdev *c, uint32_t *share, uint32_t *mode)
{
    uint32_t s = gs_cc.env_share, md = gs_cc.env_mode;
    if (gs_limits != NULL && c->lim >= 0) {
        /* The agent's file wins, and is read at every turn: a live change
         * takes effect at the next turn. */
        const struct gpushards_limits_device *d = &gs_limits->devices[c->lim];
        uint32_t ls = __atomic_load_n(&d->compute_share_permille, __ATOMIC_RELAXED);
        uint32_t lm = __atomic_load_n(&d->compute_mode, __ATOMIC_RELAXED);
        if (ls != 0 && ls <= 1000) s = ls;
        if (lm == GPUSHARDS_COMPUTE_GUARANTEED || lm == GPUSHARDS_COMPUTE_CAPPED ||
            lm == GPUSHARDS_COMPUTE_ISOLATED)
            md = lm;
    }
    *share = s;
    *mode = md;
}

/* The weight a member's time is divided by: its share, or for one with no
 * share an equal split of what active members with a share leave. */
uint32_t gs_compute_weight(struct gpushards_ledger *L, unsigned i, uint64_t now)
{
    uint32_t s = __atomic_load_n(&L->members[i].share_permille, __ATOMIC_RELAXED);
    if (s != 0) return s;
    uint32_t taken = 0, unset = 0;
    for (unsigned j = 0; j < GPUSHARDS_LEDGER_MEMBERS; j++) {
        struct gpushards_ledger_member *e = &L->members[j];
        uint64_t seen = __atomic_load_n(&e->seen_ns, __ATOMIC_RELAXED);
        if (e->shard[0] == '\0' || now - seen > ACTIVE_NS || gs_compute_is_isolated(e)) continue;
        uint32_t sj = __atomic_load_n(&e->share_permille, __ATOMIC_RELAXED);
        if (sj != 0) taken += sj;
        else unset++;
    }
    uint32_t left = taken < 1000 ? 1000 - taken : 0;
    uint32_t w = unset > 0 ? left / unset : left;
    return w < MIN_WEIGHT ? MIN_WEIGHT : w;
}

/* An isolated shard runs in an MPS partition of its own: it takes no
 * turns, and the shards that do leave it out of their weights and of
 * "another shard used the GPU". */
int gs_compute_is_isolated(const struct gpushards_ledger_member *e)
{
    return __atomic_load_n(&e->mode, __ATOMIC_RELAXED) == GPUSHARDS_COMPUTE_ISOLATED;
}

/* An isolated shard's launch: only its activity is kept.  busy_ns, which
 * for the others is GPU time held, is here the time between launches less
 * than the idle threshold apart (a shard launching steadily is busy). */
void gs_compute_note_isolated(struct cdev *c, uint64_t now)
{
    struct gpushards_ledger_member *e = &c->L->members[c->m];
    uint64_t last = __atomic_exchange_n(&e->last_kernel_ns, now, __ATOMIC_RELAXED);
    if (last != 0 && now > last && now - last < gs_cc.idle_ns)
        __atomic_add_fetch(&e->busy_ns, now - last, __ATOMIC_RELAXED);
    /* Keep the entry ours (a stale one is reused after 10 s). */
    if (now - __atomic_load_n(&e->seen_ns, __ATOMIC_RELAXED) > ACTIVE_NS / 4)
        __atomic_store_n(&e->seen_ns, now, __ATOMIC_RELAXED);
}

/* Charge the holder for [from, min(to, lease_end)]: a holder that died is
 * charged to the end of its lease, not beyond.  busy_ns (activity) and a
 * capped shard's paid-up time always follow the wall time held; virtual
 * time does only when the holder is charged wall time (GS_CHARGE_WALL),
 * otherwise gs_compute_charge_gpu adds what its launches measured. */
void gs_compute_charge(struct gpushards_ledger *L, unsigned holder_plus1, uint64_t from, uint64_t to,
                       uint64_t lease_end)
{
    if (holder_plus1 == 0 || holder_plus1 > GPUSHARDS_LEDGER_MEMBERS || from == 0) return;
    uint64_t end = to < lease_end ? to : lease_end;
    if (end <= from) return;
    uint64_t d = end - from;
    struct gpushards_ledger_member *e = &L->members[holder_plus1 - 1];
    uint32_t w = gs_compute_weight(L, holder_plus1 - 1, to);
    __atomic_add_fetch(&e->busy_ns, d, __ATOMIC_RELAXED);
    if (__atomic_load_n(&e->mode, __ATOMIC_RELAXED) == GPUSHARDS_COMPUTE_CAPPED) {
        uint32_t s = __atomic_load_n(&e->share_permille, __ATOMIC_RELAXED);
        if (s == 0) s = w;
        uint64_t c = __atomic_load_n(&e->cap_ns, __ATOMIC_RELAXED);
        if (c < from) c = from;
        __atomic_store_n(&e->cap_ns, c + d * 1000u / s, __ATOMIC_RELAXED);
    }
    if (gs_cc.charge != GS_CHARGE_WALL) return;
    uint64_t v = __atomic_add_fetch(&e->vtime, d * 1000u / w, __ATOMIC_RELAXED);
    uint64_t vc = __atomic_load_n(&L->vclock, __ATOMIC_RELAXED);
    if (v > vc) __atomic_store_n(&L->vclock, v, __ATOMIC_RELAXED);
}

/* GPU time this process's launches took (measured), charged to its shard. */
void gs_compute_charge_gpu(struct cdev *c, uint64_t gpu_ns)
{
    struct gpushards_ledger *L = c->L;
    struct gpushards_ledger_member *e = &L->members[c->m];
    __atomic_add_fetch(&e->gpu_ns, gpu_ns, __ATOMIC_RELAXED);
    if (gs_cc.stats) gs_cst.measured_us += gpu_ns / 1000u;
    if (gs_cc.charge != GS_CHARGE_GPU) return;
    uint32_t w = gs_compute_weight(L, (unsigned)c->m, gs_now_ns());
    uint64_t v = __atomic_add_fetch(&e->vtime, gpu_ns * 1000u / w, __ATOMIC_RELAXED);
    uint64_t vc = __atomic_load_n(&L->vclock, __ATOMIC_RELAXED);
    if (v > vc) __atomic_store_n(&L->vclock, v, __ATOMIC_RELAXED);
}

int gs_compute_eligible(struct gpushards_ledger_member *e, uint64_t now)
{
    return __atomic_load_n(&e->mode, __ATOMIC_RELAXED) != GPUSHARDS_COMPUTE_CAPPED ||
           __atomic_load_n(&e->cap_ns, __ATOMIC_RELAXED) <= now;
}

/* 1 when no other shard waiting (and eligible) has less virtual time. */
int gs_compute_most_entitled(struct gpushards_ledger *L, unsigned m, uint64_t now)
{
    uint64_t mine = __atomic_load_n(&L->members[m].vtime, __ATOMIC_RELAXED);
    for (unsigned j = 0; j < GPUSHARDS_LEDGER_MEMBERS; j++) {
        if (j == m) continue;
        struct gpushards_ledger_member *e = &L->members[j];
        uint64_t hb = __atomic_load_n(&e->wait_hb_ns, __ATOMIC_RELAXED);
        if (hb == 0 || hb + STALE_WAIT_NS < now || !gs_compute_eligible(e, now)) continue;
        if (__atomic_load_n(&e->vtime, __ATOMIC_RELAXED) < mine) return 0;
    }
    return 1;
}

void gs_compute_wake_all(struct gpushards_ledger *L)
{
    syscall(SYS_futex, (uint32_t *)(void *)&L->turn, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}
