/* fake_common.c — the simulated GPUs and their shared physical memory.
 *
 * GPUSHARDS_FAKE_GPUS   "NAME:SIZE,NAME:SIZE"  (default one
 *                       "NVIDIA H100 80GB HBM3:80g"); SIZE takes k/m/g/t.
 *                       GPU i gets the UUID GPU-fa4e5000-0000-4000-8000-00ssssssssss ii
 *                       (no space), where s is zero unless a seed is given.
 * GPUSHARDS_FAKE_UUID_SEED  any text, e.g. the agent's host id: simulated hosts get
 *                       distinct UUIDs, as real GPUs have, so a fleet of them can share
 *                       one control plane.
 * GPUSHARDS_FAKE_STATE  the shared file (default /tmp/gpushards-fake-state).
 * GPUSHARDS_FAKE_CONTEXT_BYTES  what a context costs (default 300m).
 * GPUSHARDS_FAKE_POOL_CHUNK     a memory pool's growth step (default 32m). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_common.h"

struct fake_gpu fake_gpus[FAKE_MAX_GPUS];
int fake_gpu_count;
uint64_t fake_context_bytes;
uint64_t fake_pool_chunk;

static struct fake_state *state;
static int my_proc = -1;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int setup_rc;

int fake_parse_size(const char *s, uint64_t *out)
{
    char *end;
    if (s == NULL || *s < '0' || *s > '9') return -1;
    unsigned long long v = strtoull(s, &end, 10);
    switch (*end) {
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    case 'g': case 'G': v <<= 30; end++; break;
    case 't': case 'T': v <<= 40; end++; break;
    default: break;
    }
    if (*end != '\0') return -1;
    *out = v;
    return 0;
}

void fake_uuid_format(const uint8_t u[16], char out[41])
{
    snprintf(out, 41, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
             u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

static uint64_t env_size(const char *name, uint64_t dflt)
{
    uint64_t v;
    const char *s = getenv(name);
    return s != NULL && fake_parse_size(s, &v) == 0 ? v : dflt;
}

/* FNV-1a of the seed, in the five bytes before the GPU index. */
static void seed_uuid(uint8_t uuid[16], const char *seed)
{
    uint64_t hash = 14695981039346656037ull;
    for (const unsigned char *p = (const unsigned char *)seed; *p != '\0'; p++) {
        hash ^= *p;
        hash *= 1099511628211ull;
    }
    for (int i = 0; i < 5; i++) uuid[10 + i] = (uint8_t)(hash >> (8 * i));
}

static void do_setup(void)
{
    const char *uuid_seed = getenv("GPUSHARDS_FAKE_UUID_SEED");
    const char *spec = getenv("GPUSHARDS_FAKE_GPUS");
    if (spec == NULL) spec = "NVIDIA H100 80GB HBM3:80g";
    char buf[2048];
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item && fake_gpu_count < FAKE_MAX_GPUS;
         item = strtok_r(NULL, ",", &save)) {
        char *colon = strrchr(item, ':');
        struct fake_gpu *g = &fake_gpus[fake_gpu_count];
        if (colon == NULL || fake_parse_size(colon + 1, &g->capacity) != 0) {
            fprintf(stderr, "[fake-gpu] bad GPUSHARDS_FAKE_GPUS entry '%s' (want NAME:SIZE)\n", item);
            setup_rc = -1;
            return;
        }
        *colon = '\0';
        snprintf(g->name, sizeof g->name, "%s", item);
        const uint8_t u[16] = {0xfa, 0x4e, 0x50, 0x00, 0x00, 0x00, 0x40, 0x00,
                               0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, (uint8_t)fake_gpu_count};
        memcpy(g->uuid, u, 16);
        if (uuid_seed != NULL && *uuid_seed != '\0') seed_uuid(g->uuid, uuid_seed);
        fake_gpu_count++;
    }
    fake_context_bytes = env_size("GPUSHARDS_FAKE_CONTEXT_BYTES", 300ull << 20);
    fake_pool_chunk = env_size("GPUSHARDS_FAKE_POOL_CHUNK", 32ull << 20);
    if (fake_pool_chunk == 0) fake_pool_chunk = 1;

    const char *path = getenv("GPUSHARDS_FAKE_STATE");
    if (path == NULL) path = "/tmp/gpushards-fake-state";
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
        fprintf(stderr, "[fake-gpu] cannot open %s: %s\n", path, strerror(errno));
        setup_rc = -1;
        return;
    }
    /* Growing a file zero-fills it; racing processes grow it to one size. */
    if (lseek(fd, 0, SEEK_END) < (off_t)sizeof *state && ftruncate(fd, sizeof *state) != 0) {
        fprintf(stderr, "[fake-gpu] cannot size %s: %s\n", path, strerror(errno));
        close(fd);
        setup_rc = -1;
        return;
    }
    void *m = mmap(NULL, sizeof *state, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        setup_rc = -1;
        return;
    }
    state = m;
}

static void child_after_fork(void)
{
    my_proc = -1;
}

int fake_setup(void)
{
    pthread_once(&once, do_setup);
    static int atfork_done;
    if (!__atomic_exchange_n(&atfork_done, 1, __ATOMIC_ACQ_REL)) pthread_atfork(NULL, NULL, child_after_fork);
    return setup_rc;
}

static struct fake_proc *proc(void)
{
    if (my_proc >= 0) return &state->procs[my_proc];
    int me = (int)getpid();
    for (int i = 0; i < FAKE_MAX_PROCS; i++) {
        int32_t zero = 0;
        if (__atomic_compare_exchange_n(&state->procs[i].pid, &zero, me, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
            my_proc = i;
            return &state->procs[i];
        }
    }
    return NULL;
}

/* A real driver frees everything a process held when it dies. */
static void reap_dead(void)
{
    for (int i = 0; i < FAKE_MAX_PROCS; i++) {
        struct fake_proc *p = &state->procs[i];
        int pid = __atomic_load_n(&p->pid, __ATOMIC_ACQUIRE);
        if (pid == 0 || pid == (int)getpid() || kill(pid, 0) == 0 || errno != ESRCH) continue;
        for (int g = 0; g < FAKE_MAX_GPUS; g++) {
            uint64_t v = __atomic_exchange_n(&p->used[g], 0, __ATOMIC_ACQ_REL);
            if (v) __atomic_sub_fetch(&state->used[g], v, __ATOMIC_ACQ_REL);
        }
        __atomic_store_n(&p->pid, 0, __ATOMIC_RELEASE);
    }
}

static int try_take(int g, uint64_t bytes)
{
    uint64_t cur = __atomic_load_n(&state->used[g], __ATOMIC_RELAXED);
    do {
        if (bytes > fake_gpus[g].capacity || cur > fake_gpus[g].capacity - bytes) return -1;
    } while (!__atomic_compare_exchange_n(&state->used[g], &cur, cur + bytes, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
    return 0;
}

int fake_phys_take(int g, uint64_t bytes)
{
    struct fake_proc *p = proc();
    if (p == NULL) return -1;
    if (try_take(g, bytes) != 0) {
        reap_dead();
        if (try_take(g, bytes) != 0) return -1;
    }
    __atomic_add_fetch(&p->used[g], bytes, __ATOMIC_ACQ_REL);
    return 0;
}

void fake_phys_give(int g, uint64_t bytes)
{
    /* A fork child may free what its parent took: clamp its own count. */
    struct fake_proc *p = proc();
    if (p != NULL) {
        uint64_t cur = __atomic_load_n(&p->used[g], __ATOMIC_RELAXED);
        while (!__atomic_compare_exchange_n(&p->used[g], &cur, cur > bytes ? cur - bytes : 0, 1, __ATOMIC_ACQ_REL,
                                            __ATOMIC_RELAXED)) {
        }
    }
    __atomic_sub_fetch(&state->used[g], bytes, __ATOMIC_ACQ_REL);
}

uint64_t fake_phys_used(int g)
{
    if (state == NULL) return 0;
    reap_dead();
    return __atomic_load_n(&state->used[g], __ATOMIC_ACQUIRE);
}
