/* region.c — the per-container shared region file: create, validate, map,
 * and the rare operations that need its robust lock (adding a device,
 * claiming a process slot, reclaiming what dead processes held). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vgpu.h"

_Static_assert(sizeof(pthread_mutex_t) <= sizeof(((struct gpushards_region_header *)0)->lock),
               "pthread_mutex_t must fit the region's lock field");

struct gpushards_region *gs_region;

static pthread_mutex_t *region_mutex(void)
{
    return (pthread_mutex_t *)(void *)gs_region->header.lock;
}

static uint64_t header_checksum(const struct gpushards_region_header *h)
{
    const unsigned char *p = (const unsigned char *)h;
    uint64_t x = 0xcbf29ce484222325ULL;
    for (unsigned i = 0; i < GPUSHARDS_CHECKSUM_BYTES; i++) {
        x ^= p[i];
        x *= 0x100000001b3ULL;
    }
    return x;
}

static void mkdir_parents(const char *path)
{
    char dir[sizeof gs_cfg.region_path];
    snprintf(dir, sizeof dir, "%s", path);
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        /* Several users may share a container: the folder must let each of
         * them add the region, like /tmp itself.  EEXIST is the common case. */
        if (mkdir(dir, 01777) == 0) (void)chmod(dir, 01777);
        *p = '/';
    }
}

/* Build a complete region in a private file and publish it with link(2):
 * link fails if the name exists, so exactly one creator wins and nobody can
 * ever map a half-initialised region. */
static int create_region(const char *path)
{
    char tmp[sizeof gs_cfg.region_path + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    mkdir_parents(path);
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
        gs_log(GS_LOG_WARN, "cannot create %s: %s", tmp, strerror(errno));
        return -1;
    }
    (void)fchmod(fd, 0666); /* undo the umask: every user of the container shares it */
    int rc = -1;
    struct gpushards_region *r = MAP_FAILED;
    if (ftruncate(fd, (off_t)sizeof(struct gpushards_region)) != 0) {
        gs_log(GS_LOG_WARN, "cannot size %s: %s", tmp, strerror(errno));
        goto out;
    }
    r = mmap(NULL, sizeof *r, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (r == MAP_FAILED) {
        gs_log(GS_LOG_WARN, "cannot map %s: %s", tmp, strerror(errno));
        goto out;
    }
    struct gpushards_region_header *h = &r->header;
    h->version = GPUSHARDS_REGION_VERSION;
    h->header_size = sizeof *h;
    h->total_size = sizeof *r;
    h->max_devices = GPUSHARDS_MAX_DEVICES;
    h->max_slots = GPUSHARDS_MAX_SLOTS;
    h->device_size = sizeof(struct gpushards_device);
    h->slot_size = sizeof(struct gpushards_slot);
    h->devices_offset = offsetof(struct gpushards_region, devices);
    h->slots_offset = offsetof(struct gpushards_region, slots);

    pthread_mutexattr_t a;
    int e = pthread_mutexattr_init(&a);
    if (e == 0) e = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    if (e == 0) e = pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    if (e == 0) e = pthread_mutex_init((pthread_mutex_t *)(void *)h->lock, &a);
    pthread_mutexattr_destroy(&a);
    if (e != 0) {
        gs_log(GS_LOG_WARN, "cannot initialise the region lock: %s", strerror(e));
        goto out;
    }
    /* The magic goes in last: the checksum covers it. */
    h->magic = GPUSHARDS_REGION_MAGIC;
    h->checksum = header_checksum(h);

    if (link(tmp, path) == 0) {
        rc = 0;
    } else if (errno == EEXIST) {
        rc = 1; /* another process won the race; use its region */
    } else {
        gs_log(GS_LOG_WARN, "cannot publish %s: %s", path, strerror(errno));
    }
out:
    if (r != MAP_FAILED) munmap(r, sizeof *r);
    close(fd);
    unlink(tmp);
    return rc;
}

static int validate(const struct gpushards_region_header *h, uint64_t file_size, const char *path)
{
    if (h->magic != GPUSHARDS_REGION_MAGIC) {
        gs_log(GS_LOG_ERROR, "%s is not a GPU Shards region (bad magic %#llx)", path, (unsigned long long)h->magic);
        return -1;
    }
    if (h->version != GPUSHARDS_REGION_VERSION) {
        gs_log(GS_LOG_ERROR, "%s has region layout version %u; this libvgpu.so reads version %u", path,
               h->version, GPUSHARDS_REGION_VERSION);
        return -1;
    }
    if (h->checksum != header_checksum(h)) {
        gs_log(GS_LOG_ERROR, "%s has a corrupt header (checksum mismatch)", path);
        return -1;
    }
    if (h->header_size != sizeof *h || h->total_size != sizeof(struct gpushards_region) ||
        h->max_devices != GPUSHARDS_MAX_DEVICES || h->max_slots != GPUSHARDS_MAX_SLOTS ||
        h->device_size != sizeof(struct gpushards_device) || h->slot_size != sizeof(struct gpushards_slot) ||
        h->devices_offset != offsetof(struct gpushards_region, devices) ||
        h->slots_offset != offsetof(struct gpushards_region, slots)) {
        gs_log(GS_LOG_ERROR, "%s has a layout this libvgpu.so does not know", path);
        return -1;
    }
    if (file_size < h->total_size) {
        gs_log(GS_LOG_ERROR, "%s is truncated (%llu of %llu bytes)", path, (unsigned long long)file_size,
               (unsigned long long)h->total_size);
        return -1;
    }
    if (h->device_count > GPUSHARDS_MAX_DEVICES) {
        gs_log(GS_LOG_ERROR, "%s is corrupt (device_count %u)", path, h->device_count);
        return -1;
    }
    return 0;
}

int gs_region_open(const char *path)
{
    int fd = -1;
    for (int attempt = 0; attempt < 3 && fd < 0; attempt++) {
        fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd >= 0 || errno != ENOENT) break;
        int c = create_region(path);
        if (c < 0) return -1;
    }
    if (fd < 0) {
        gs_log(GS_LOG_ERROR, "cannot open %s: %s", path, strerror(errno));
        return errno == ENOENT ? -1 : -2;
    }
    /* lseek, not fstat: fstat binds to a GLIBC_2.33 symbol, and the library
     * must load with glibc 2.17. */
    off_t size = lseek(fd, 0, SEEK_END);
    if (size < (off_t)sizeof(struct gpushards_region_header)) {
        gs_log(GS_LOG_ERROR, "%s is truncated (%lld bytes, the header alone is %zu)", path, (long long)size,
               sizeof(struct gpushards_region_header));
        close(fd);
        return -2;
    }
    struct gpushards_region_header head;
    if (pread(fd, &head, sizeof head, 0) != (ssize_t)sizeof head || validate(&head, (uint64_t)size, path) != 0) {
        close(fd);
        return -2;
    }
    void *m = mmap(NULL, sizeof(struct gpushards_region), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        gs_log(GS_LOG_ERROR, "cannot map %s: %s", path, strerror(errno));
        return -2;
    }
    gs_region = m;
    return 0;
}

/* A process killed while holding the lock leaves it "owner died": the next
 * locker gets EOWNERDEAD at once and repairs it.  Every critical section
 * below is written so that stopping it half way leaves counts too high, not
 * too low, which is safe to continue from. */
static int lock_region(void)
{
    int e = pthread_mutex_lock(region_mutex());
    if (e == EOWNERDEAD) {
        gs_log(GS_LOG_WARN, "a process died holding the region lock; recovering it");
        e = pthread_mutex_consistent(region_mutex());
    }
    if (e != 0) {
        gs_log(GS_LOG_ERROR, "cannot take the region lock: %s", strerror(e));
        return -1;
    }
    return 0;
}

static void unlock_region(void)
{
    int e = pthread_mutex_unlock(region_mutex());
    if (e != 0) gs_log(GS_LOG_ERROR, "cannot release the region lock: %s", strerror(e));
}

/* UUIDs as NVML and CUDA_VISIBLE_DEVICES write them. */
void gs_uuid_format(const uint8_t u[16], char out[41])
{
    snprintf(out, 41, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
             u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

int gs_uuid_parse(const char *text, uint8_t u[16])
{
    if (strncmp(text, "GPU-", 4) == 0) text += 4;
    int n = 0;
    for (const char *p = text; *p; p++) {
        if (*p == '-') continue;
        int v;
        if (*p >= '0' && *p <= '9') v = *p - '0';
        else if (*p >= 'a' && *p <= 'f') v = *p - 'a' + 10;
        else if (*p >= 'A' && *p <= 'F') v = *p - 'A' + 10;
        else return -1;
        if (n >= 32) return -1;
        if (n % 2 == 0) u[n / 2] = (uint8_t)(v << 4);
        else u[n / 2] |= (uint8_t)v;
        n++;
    }
    return n == 32 ? 0 : -1;
}

int gs_region_find_device(const uint8_t uuid[16])
{
    uint32_t n = __atomic_load_n(&gs_region->header.device_count, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < n && i < GPUSHARDS_MAX_DEVICES; i++) {
        struct gpushards_device *d = &gs_region->devices[i];
        if (__atomic_load_n(&d->state, __ATOMIC_ACQUIRE) == GPUSHARDS_DEVICE_ACTIVE &&
            memcmp(d->uuid, uuid, 16) == 0)
            return (int)i;
    }
    return -1;
}

int gs_region_attach_device(const uint8_t uuid[16], uint64_t total_bytes, int have_limit, uint64_t limit)
{
    int idx = gs_region_find_device(uuid);
    if (idx < 0) {
        if (lock_region() != 0) return -1;
        idx = gs_region_find_device(uuid);
        uint32_t n = gs_region->header.device_count;
        if (idx < 0 && n < GPUSHARDS_MAX_DEVICES) {
            struct gpushards_device *d = &gs_region->devices[n];
            /* A previous attacher may have died after writing parts of this
             * entry; start it afresh. */
            memset(d, 0, sizeof *d);
            memcpy(d->uuid, uuid, 16);
            __atomic_store_n(&d->state, GPUSHARDS_DEVICE_ACTIVE, __ATOMIC_RELEASE);
            __atomic_store_n(&gs_region->header.device_count, n + 1, __ATOMIC_RELEASE);
            idx = (int)n;
        }
        unlock_region();
        if (idx < 0) {
            gs_log(GS_LOG_ERROR, "the region has no room for another GPU (at most %u)", GPUSHARDS_MAX_DEVICES);
            return -1;
        }
    }
    struct gpushards_device *d = &gs_region->devices[idx];
    __atomic_store_n(&d->total_bytes, total_bytes, __ATOMIC_RELAXED);
    /* The environment only fills a limit nobody has set: a limit the agent
     * wrote into the region wins. */
    uint64_t unset = 0;
    if (have_limit && limit != 0)
        __atomic_compare_exchange_n(&d->limit_bytes, &unset, limit, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
    /* Likewise GPUSHARDS_CONTEXT_BYTES, so the agent sees what is charged. */
    unset = 0;
    if (gs_limits == NULL && gs_cfg.context_bytes != 0)
        __atomic_compare_exchange_n(&d->context_bytes, &unset, gs_cfg.context_bytes, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED);
    /* And GPUSHARDS_POOL_GROWTH_BYTES: one step per GPU for every process. */
    unset = 0;
    if (gs_limits == NULL && gs_cfg.pool_growth_bytes != 0)
        __atomic_compare_exchange_n(&d->pool_growth_bytes, &unset, gs_cfg.pool_growth_bytes, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED);
    return idx;
}

/* Clock ticks after boot at which the process started (field 22 of
 * /proc/<pid>/stat); 0 when /proc is not there to ask. */
static uint64_t process_start_time(int pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    /* The command name (field 2) may hold spaces and parentheses: count
     * fields from the last ')'. */
    char *p = strrchr(buf, ')');
    if (p == NULL) return 0;
    int field = 2;
    uint64_t v = 0;
    for (p++; *p; p++) {
        if (*p == ' ') {
            if (++field == 22) {
                for (p++; *p >= '0' && *p <= '9'; p++) v = v * 10 + (uint64_t)(*p - '0');
                return v;
            }
        }
    }
    return 0;
}

static int slot_is_dead(const struct gpushards_slot *s)
{
    int pid = __atomic_load_n(&s->pid, __ATOMIC_ACQUIRE);
    if (pid <= 0) return 0;
    if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
    /* Alive, or not ours to signal (EPERM): a different start time means the
     * pid was reused by a new process. */
    uint64_t st = s->start_time;
    if (st == 0) return 0;
    uint64_t now = process_start_time(pid);
    return now != 0 && now != st;
}

/* The slot's bit in the header's ipc_importers, NULL past the bitmap. */
static uint64_t *importer_word(int slot, uint64_t *bit)
{
    if (slot < 0 || (unsigned)slot >= GPUSHARDS_IPC_IMPORTER_SLOTS) return NULL;
    *bit = 1ull << ((unsigned)slot % 64u);
    return &gs_region->header.ipc_importers[(unsigned)slot / 64u];
}

int gs_region_mark_ipc_importer(int slot, int holds)
{
    if (gs_region == NULL || slot < 0 || (unsigned)slot >= GPUSHARDS_MAX_SLOTS) return -1;
    uint64_t bit;
    uint64_t *word = importer_word(slot, &bit);
    if (word == NULL) {
        /* No bit to clear later: the agent refuses suspends of this shard
         * from now on (gpushards_region.h says why that is the safe side). */
        if (holds) {
            __atomic_store_n(&gs_region->header.ipc_importers_unlisted, 1u, __ATOMIC_RELEASE);
            gs_log(GS_LOG_WARN, "process slot %d is past the %u the region names CUDA IPC importers in: this shard "
                   "cannot be suspended until it restarts", slot, GPUSHARDS_IPC_IMPORTER_SLOTS);
        }
        return -1;
    }
    if (holds) __atomic_fetch_or(word, bit, __ATOMIC_ACQ_REL);
    else __atomic_fetch_and(word, ~bit, __ATOMIC_ACQ_REL);
    return 0;
}

static void reclaim_slot(struct gpushards_slot *s)
{
    for (unsigned d = 0; d < GPUSHARDS_MAX_DEVICES; d++) {
        /* Take the slot's bytes first, then give them back to the device:
         * dying between the two leaves the device over-counted, never under. */
        uint64_t held = __atomic_exchange_n(&s->used_bytes[d], 0, __ATOMIC_ACQ_REL);
        if (held == 0) continue;
        uint64_t *used = &gs_region->devices[d].used_bytes;
        uint64_t cur = __atomic_load_n(used, __ATOMIC_RELAXED);
        uint64_t next;
        do {
            next = cur > held ? cur - held : 0;
        } while (!__atomic_compare_exchange_n(used, &cur, next, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
    }
    /* Its imports went with it; cleared before the slot is free, so the
     * next owner never inherits the bit. */
    uint64_t bit;
    uint64_t *word = importer_word((int)(s - gs_region->slots), &bit);
    if (word != NULL) __atomic_fetch_and(word, ~bit, __ATOMIC_ACQ_REL);
    __atomic_store_n(&s->pid, 0, __ATOMIC_RELEASE);
}

static void reclaim_locked(void)
{
    int me = (int)getpid();
    for (unsigned i = 0; i < GPUSHARDS_MAX_SLOTS; i++) {
        struct gpushards_slot *s = &gs_region->slots[i];
        int pid = __atomic_load_n(&s->pid, __ATOMIC_ACQUIRE);
        if (pid == 0 || pid == me) continue;
        if (slot_is_dead(s)) {
            gs_log(GS_LOG_INFO, "reclaiming memory of exited process %d", pid);
            reclaim_slot(s);
        }
    }
}

void gs_region_reclaim_dead(void)
{
    if (lock_region() != 0) return;
    reclaim_locked();
    unlock_region();
}

int gs_region_claim_slot(void)
{
    int me = (int)getpid();
    uint64_t start = process_start_time(me);
    if (lock_region() != 0) return -1;
    reclaim_locked();
    int found = -1;
    for (unsigned i = 0; i < GPUSHARDS_MAX_SLOTS && found < 0; i++) {
        struct gpushards_slot *s = &gs_region->slots[i];
        if (__atomic_load_n(&s->pid, __ATOMIC_ACQUIRE) != 0) continue;
        s->start_time = start;
        s->last_launch_s = 0; /* not the previous owner's */
        __atomic_store_n(&s->pid, me, __ATOMIC_RELEASE);
        found = (int)i;
    }
    unlock_region();
    if (found < 0) gs_log(GS_LOG_ERROR, "the region has no free process slot (at most %u)", GPUSHARDS_MAX_SLOTS);
    return found;
}

/* At a clean exit the driver frees everything the process held; give it
 * back now instead of waiting for someone to notice the process is gone. */
void gs_region_release_slot(int slot)
{
    if (gs_region == NULL || slot < 0) return;
    struct gpushards_slot *s = &gs_region->slots[slot];
    if (__atomic_load_n(&s->pid, __ATOMIC_ACQUIRE) != (int)getpid()) return;
    reclaim_slot(s);
}
