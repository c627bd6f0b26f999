/* limits.c — the read-only limits file the agent writes (gpushards_limits.h).
 *
 * When GPUSHARDS_LIMITS_FIXED_PATH exists it is the only source of limits:
 * CUDA_DEVICE_MEMORY_LIMIT and the writable region's limit fields are then
 * ignored, so nothing a process of the container can write raises its cap.
 * GPUSHARDS_LIMITS_PATH is read only when the fixed path does not exist
 * (tests and programs outside a container).  A file that exists but cannot
 * be read or validated fails closed.
 *
 * The file is mapped read-only and shared, so the agent's in-place updates
 * (limit, real usage, memory_state) are seen on the next allocation with one
 * load.  It is mapped at a fixed place inside the library (gs_limits_area),
 * so that the wake gate every hook passes reads memory_state with one load
 * from a fixed address, not through a pointer. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "vgpu.h"

const struct gpushards_limits *gs_limits;
/* The file is mapped here, over zeros (resident) when there is none: the
 * wake gate then reads memory_state at a fixed address with one load. */
union gs_limits_area gs_limits_area __attribute__((aligned(GS_LIMITS_AREA_BYTES)));
/* Region device index -> limits device index + 1; 0 = not looked up yet,
 * -1 = the limits file has no entry for that GPU. */
static int lim_map[GPUSHARDS_MAX_DEVICES];

static uint64_t checksum(const void *p, unsigned n)
{
    const unsigned char *b = p;
    uint64_t x = 0xcbf29ce484222325ULL;
    for (unsigned i = 0; i < n; i++) {
        x ^= b[i];
        x *= 0x100000001b3ULL;
    }
    return x;
}

static int validate(const struct gpushards_limits_header *h, off_t size, const char *path)
{
    if (h->magic != GPUSHARDS_LIMITS_MAGIC) {
        gs_log(GS_LOG_ERROR, "%s is not a GPU Shards limits file (bad magic %#llx)", path,
               (unsigned long long)h->magic);
        return -1;
    }
    if (h->version != GPUSHARDS_LIMITS_VERSION) {
        gs_log(GS_LOG_ERROR, "%s has limits layout version %u; this libvgpu.so reads version %u", path, h->version,
               GPUSHARDS_LIMITS_VERSION);
        return -1;
    }
    if (h->checksum != checksum(h, GPUSHARDS_LIMITS_CHECKSUM_BYTES)) {
        gs_log(GS_LOG_ERROR, "%s has a corrupt header (checksum mismatch)", path);
        return -1;
    }
    if (h->header_size != sizeof *h || h->total_size != sizeof(struct gpushards_limits) ||
        h->max_devices != GPUSHARDS_LIMITS_MAX_DEVICES || h->device_size != sizeof(struct gpushards_limits_device) ||
        h->device_count > GPUSHARDS_LIMITS_MAX_DEVICES) {
        gs_log(GS_LOG_ERROR, "%s has a layout this libvgpu.so does not know", path);
        return -1;
    }
    if ((uint64_t)size < h->total_size) {
        gs_log(GS_LOG_ERROR, "%s is truncated (%lld of %llu bytes)", path, (long long)size,
               (unsigned long long)h->total_size);
        return -1;
    }
    return 0;
}

/* 0: no limits file (the environment and the region decide, as before);
 * 1: mapped; -1: a limits file exists but is unusable (fail closed). */
int gs_limits_open(void)
{
    const char *path = GPUSHARDS_LIMITS_FIXED_PATH;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        const char *alt = getenv("GPUSHARDS_LIMITS_PATH");
        if (alt == NULL || *alt == '\0') return 0;
        path = alt;
        fd = open(path, O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0) {
        gs_log(GS_LOG_ERROR, "cannot open the limits file %s: %s; refusing every GPU allocation", path,
               strerror(errno));
        return -1;
    }
    off_t size = lseek(fd, 0, SEEK_END);
    struct gpushards_limits_header h;
    if (size < (off_t)sizeof h || pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h) {
        gs_log(GS_LOG_ERROR, "%s is truncated (%lld bytes); refusing every GPU allocation", path, (long long)size);
        close(fd);
        return -1;
    }
    if (validate(&h, size, path) != 0) {
        gs_log(GS_LOG_ERROR, "refusing every GPU allocation until the agent rewrites %s", path);
        close(fd);
        return -1;
    }
    long page = sysconf(_SC_PAGESIZE);
    void *m = MAP_FAILED;
    if (page > 0 && page <= (long)GS_LIMITS_AREA_BYTES)
        m = mmap(&gs_limits_area, sizeof(struct gpushards_limits), PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
    else
        errno = EINVAL; /* pages larger than the area: not a Linux we run on */
    close(fd);
    if (m == MAP_FAILED) {
        gs_log(GS_LOG_ERROR, "cannot map %s: %s; refusing every GPU allocation", path, strerror(errno));
        return -1;
    }
    gs_limits = &gs_limits_area.l;
    memset(lim_map, 0, sizeof lim_map);
    GS_INFO("limits from %s (%u GPUs); the environment's limits are ignored", path, h.device_count);
    return 1;
}

/* The limits entry of a region device, or NULL when the file has none. */
static const struct gpushards_limits_device *entry(int dev)
{
    int v = __atomic_load_n(&lim_map[dev], __ATOMIC_ACQUIRE);
    if (GS_LIKELY(v > 0)) return &gs_limits->devices[v - 1];
    if (v < 0) return NULL;
    int found = -1;
    uint32_t n = gs_limits->header.device_count;
    for (uint32_t i = 0; i < n && i < GPUSHARDS_LIMITS_MAX_DEVICES; i++) {
        const struct gpushards_limits_device *d = &gs_limits->devices[i];
        if (__atomic_load_n(&d->state, __ATOMIC_ACQUIRE) == GPUSHARDS_LIMITS_ACTIVE &&
            memcmp(d->uuid, gs_region->devices[dev].uuid, 16) == 0) {
            found = (int)i;
            break;
        }
    }
    if (found < 0) {
        char text[41];
        gs_uuid_format(gs_region->devices[dev].uuid, text);
        gs_log(GS_LOG_ERROR, "the limits file has no entry for %s; refusing its allocations", text);
    }
    __atomic_store_n(&lim_map[dev], found < 0 ? -1 : found + 1, __ATOMIC_RELEASE);
    return found < 0 ? NULL : &gs_limits->devices[found];
}

int gs_limits_lookup(int dev, struct gs_dev_limits *out)
{
    const struct gpushards_limits_device *d = entry(dev);
    if (d == NULL) return -1;
    out->limit = __atomic_load_n(&d->limit_bytes, __ATOMIC_ACQUIRE);
    out->real = __atomic_load_n(&d->real_bytes, __ATOMIC_ACQUIRE);
    return 0;
}

uint64_t gs_limits_context_bytes(int dev)
{
    const struct gpushards_limits_device *d = entry(dev);
    return d != NULL ? __atomic_load_n(&d->context_bytes, __ATOMIC_RELAXED) : 0;
}

uint64_t gs_limits_pool_growth_bytes(int dev)
{
    const struct gpushards_limits_device *d = entry(dev);
    return d != NULL ? __atomic_load_n(&d->pool_growth_bytes, __ATOMIC_RELAXED) : 0;
}

/* The agent's bound, which the environment may only shorten: a process that
 * turns its own retry down (GPUSHARDS_PRESSURE_WAIT_MS=0) harms nobody but
 * itself, while a longer wait is the agent's to grant. */
uint32_t gs_limits_pressure_wait_ms(void)
{
    if (gs_limits == NULL) return gs_cfg.pressure_wait_ms;
    uint32_t v = __atomic_load_n(&gs_limits->header.pressure_wait_ms, __ATOMIC_RELAXED);
    if (v == 0) v = GPUSHARDS_PRESSURE_WAIT_DEFAULT_MS;
    return gs_cfg.pressure_wait_ms_set && gs_cfg.pressure_wait_ms < v ? gs_cfg.pressure_wait_ms : v;
}
