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
 * GPUSHARDS_FAKE_POOL_CHUNK     a memory pool's growth step (default 32m).
 * GPUSHARDS_FAKE_MOVE_GATE      a file the caller's checkpoints and restores
 *                       take passes from (fake_checkpoint.c): a test's seam.
 *
 * Each process's usage is kept with its pid as it sees itself, its PID
 * namespace's inode and its start time, so that NVML called on the host
 * reports a containerised process under its host pid, as the real driver
 * does (fake_procs_on). */
#include <dirent.h>
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
uint64_t fake_reserved_bytes;
uint64_t fake_pool_chunk;
uint64_t fake_pool_jitter_us;

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
    fake_reserved_bytes = env_size("GPUSHARDS_FAKE_RESERVED_BYTES", 0);
    for (int i = 0; i < fake_gpu_count; i++) {
        if (fake_reserved_bytes >= fake_gpus[i].capacity) {
            fprintf(stderr, "[fake-gpu] GPUSHARDS_FAKE_RESERVED_BYTES is not below GPU %d's capacity\n", i);
            setup_rc = -1;
            return;
        }
    }
    fake_pool_chunk = env_size("GPUSHARDS_FAKE_POOL_CHUNK", 32ull << 20);
    if (fake_pool_chunk == 0) fake_pool_chunk = 1;
    fake_pool_jitter_us = env_size("GPUSHARDS_FAKE_POOL_JITTER_US", 0);

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
    uint64_t zero = 0;
    if (!__atomic_compare_exchange_n(&state->magic, &zero, FAKE_STATE_MAGIC, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) &&
        zero != FAKE_STATE_MAGIC) {
        fprintf(stderr, "[fake-gpu] %s was written by another version of the fake driver; remove it\n", path);
        munmap(m, sizeof *state);
        state = NULL;
        setup_rc = -1;
    }
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

/* Clock ticks after boot at which pid started (field 22 of /proc/<pid>/stat);
 * 0 when unknown.  dir is "/proc" or a /proc/<pid> style prefix. */
static uint64_t start_time_of(const char *pid_dir)
{
    char path[320], buf[1024];
    snprintf(path, sizeof path, "%s/stat", pid_dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (p == NULL) return 0;
    int field = 2;
    for (p++; *p; p++) {
        if (*p == ' ' && ++field == 22) return strtoull(p + 1, NULL, 10);
    }
    return 0;
}

/* Inode of a process's PID namespace; 0 when it cannot be read (no /proc,
 * or another user's process). */
static uint64_t ns_inode_of(const char *pid_dir)
{
    char path[320], link[64];
    snprintf(path, sizeof path, "%s/ns/pid", pid_dir);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n <= 0) return 0;
    link[n] = '\0';
    const char *b = strchr(link, '[');
    return b != NULL ? strtoull(b + 1, NULL, 10) : 0;
}

/* The NSpid line of /proc/<pid>/status: how many namespaces deep it is and
 * its pid in the innermost one. */
static int nspid_of(const char *pid_dir, int *depth, int *inner)
{
    char path[320], buf[4096];
    snprintf(path, sizeof path, "%s/status", pid_dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = '\0';
    /* A zombie holds no GPU memory: the driver let go at its exit. */
    const char *state_line = strstr(buf, "\nState:");
    if (state_line != NULL && (strncmp(state_line, "\nState:\tZ", 9) == 0 || strncmp(state_line, "\nState:\tX", 9) == 0))
        return -1;
    char *line = strstr(buf, "\nNSpid:");
    if (line == NULL) return -1;
    char *p = line + 7, *end;
    *depth = 0;
    for (;;) {
        long v = strtol(p, &end, 10);
        if (end == p) break;
        *inner = (int)v;
        (*depth)++;
        p = end;
        if (*p == '\n' || *p == '\0') break;
    }
    return *depth > 0 ? 0 : -1;
}

static uint64_t my_ns_inode(void)
{
    static uint64_t v;
    if (v == 0) v = ns_inode_of("/proc/self");
    return v;
}

/* The inode the kernel gives the initial PID namespace (PROC_PID_INIT_INO). */
#define INIT_PID_NS_INODE 0xEFFFFFFCull

static int same_ns(const struct fake_proc *p)
{
    uint64_t ns = __atomic_load_n(&p->ns_inode, __ATOMIC_ACQUIRE);
    return ns == 0 || ns == my_ns_inode();
}

/* pid of an entry being claimed: readers skip it as they skip free ones. */
#define CLAIMING (-1)

/* What an entry stood for when a pass began: which claim (gen) and its pid. */
struct seen {
    int32_t pid;
    uint32_t gen;
};

static void pass(struct seen seen[FAKE_MAX_PROCS], int host[FAKE_MAX_PROCS]);

static struct fake_proc *claim(void)
{
    int me = (int)getpid();
    for (int i = 0; i < FAKE_MAX_PROCS; i++) {
        /* Claimed as CLAIMING (no reader looks at it), described, given a new
         * generation, then published with the pid: a reader never judges a
         * half-written entry (a stale namespace or start time would make it
         * look dead and be reaped), and a reaper can tell this claim from the
         * one it judged (pass). */
        int32_t zero = 0;
        if (__atomic_compare_exchange_n(&state->procs[i].pid, &zero, CLAIMING, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
            struct fake_proc *p = &state->procs[i];
            p->start_time = start_time_of("/proc/self");
            memset(p->busy, 0, sizeof p->busy); /* the kernel time of the entry's last owner */
            memset(p->moved, 0, sizeof p->moved);
            __atomic_store_n(&p->ipc_imports, 0, __ATOMIC_RELAXED);
            __atomic_store_n(&p->vmm_imports, 0, __ATOMIC_RELAXED);
            __atomic_store_n(&p->inflight, 0, __ATOMIC_RELAXED);
            __atomic_store_n(&p->ckpt, FAKE_CKPT_RUNNING, __ATOMIC_RELAXED);
            __atomic_store_n(&p->ns_inode, my_ns_inode(), __ATOMIC_RELEASE);
            __atomic_add_fetch(&p->gen, 1, __ATOMIC_RELEASE);
            __atomic_store_n(&p->pid, me, __ATOMIC_RELEASE);
            my_proc = i;
            return p;
        }
    }
    return NULL;
}

/* Claimed once per process (and once in each fork child).  With every entry
 * taken, the dead are reaped first: processes that only initialised the
 * driver hold an entry too. */
static struct fake_proc *proc(void)
{
    if (my_proc >= 0) return &state->procs[my_proc];
    struct fake_proc *p = claim();
    if (p != NULL) return p;
    struct seen seen[FAKE_MAX_PROCS];
    int host[FAKE_MAX_PROCS];
    pass(seen, host);
    return claim();
}

struct fake_proc *fake_proc_claim(void)
{
    return state != NULL ? proc() : NULL;
}

struct fake_proc *fake_proc_mine(void)
{
    int i = my_proc;
    return state != NULL && i >= 0 ? &state->procs[i] : NULL;
}


/* Every entry's claim as it stands; pid 0 for one free, being claimed or reaped, or changing
 * hands while it was read. */
static void look(struct seen seen[FAKE_MAX_PROCS])
{
    for (int i = 0; i < FAKE_MAX_PROCS; i++) {
        struct fake_proc *p = &state->procs[i];
        uint32_t gen = __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE);
        int32_t pid = __atomic_load_n(&p->pid, __ATOMIC_ACQUIRE);
        int stable = pid > 0 && __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE) == gen;
        seen[i] = stable ? (struct seen){.pid = pid, .gen = gen} : (struct seen){0};
    }
}

/* 1 while the entry still stands for the claim seen. */
static int unchanged(const struct fake_proc *p, struct seen s)
{
    return __atomic_load_n(&p->pid, __ATOMIC_ACQUIRE) == s.pid && __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE) == s.gen;
}

/* Pids, in this process's namespace, of the entries of other namespaces seen:
 * one pass over /proc matching each process's innermost NSpid and start
 * time (and its namespace inode when readable).  host[i] = 0: not found.
 * *nested: this /proc shows processes of PID namespaces below this
 * process's own, so it sees every process of theirs (the host, not a
 * container: inside one, its own /proc shows its processes at depth 1). */
static void translate_foreign(const struct seen seen[FAKE_MAX_PROCS], int host[FAKE_MAX_PROCS], int *nested)
{
    memset(host, 0, sizeof(int) * FAKE_MAX_PROCS);
    *nested = 0;
    int any = 0;
    for (int i = 0; i < FAKE_MAX_PROCS && !any; i++) any = seen[i].pid > 0 && !same_ns(&state->procs[i]);
    if (!any) return;
    DIR *d = opendir("/proc");
    if (d == NULL) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
        char dir[300];
        snprintf(dir, sizeof dir, "/proc/%s", e->d_name);
        int depth, inner;
        if (nspid_of(dir, &depth, &inner) != 0 || depth < 2) continue;
        *nested = 1;
        uint64_t st = 0, ns = 0;
        int have_st = 0, have_ns = 0;
        for (int i = 0; i < FAKE_MAX_PROCS; i++) {
            struct fake_proc *p = &state->procs[i];
            if (seen[i].pid != inner || same_ns(p)) continue;
            if (!have_st) st = start_time_of(dir), have_st = 1;
            if (p->start_time != 0 && st != 0 && p->start_time != st) continue;
            if (!have_ns) ns = ns_inode_of(dir), have_ns = 1;
            if (ns != 0 && ns != p->ns_inode) continue;
            host[i] = atoi(e->d_name);
        }
    }
    closedir(d);
}

static int alive_here(const struct fake_proc *p, int pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
    char dir[32];
    snprintf(dir, sizeof dir, "/proc/%d", pid);
    int depth, inner;
    if (nspid_of(dir, &depth, &inner) != 0 && access(dir, F_OK) == 0) {
        /* A zombie (or unreadable): dead if its status says so. */
        char path[48], buf[512];
        snprintf(path, sizeof path, "%s/stat", dir);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            ssize_t n = read(fd, buf, sizeof buf - 1);
            close(fd);
            buf[n > 0 ? n : 0] = '\0';
            const char *q = strrchr(buf, ')');
            if (q != NULL && (q[2] == 'Z' || q[2] == 'X')) return 0;
        }
    }
    uint64_t st = start_time_of(dir);
    return p->start_time == 0 || st == 0 || st == p->start_time;
}

/* Frees the entry of a process found dead, if it still stands for the claim
 * that was judged: taken as CLAIMING first, so that no other reaper frees it
 * twice and no new owner's memory is taken with it. */
static void reap(struct fake_proc *p, struct seen s)
{
    int32_t expected = s.pid;
    if (!__atomic_compare_exchange_n(&p->pid, &expected, CLAIMING, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) return;
    if (__atomic_load_n(&p->gen, __ATOMIC_ACQUIRE) != s.gen) {
        /* Claimed again meanwhile, by a process of the same pid: not dead. */
        __atomic_store_n(&p->pid, s.pid, __ATOMIC_RELEASE);
        return;
    }
    for (int g = 0; g < FAKE_MAX_GPUS; g++) {
        uint64_t v = __atomic_exchange_n(&p->used[g], 0, __ATOMIC_ACQ_REL);
        if (v) __atomic_sub_fetch(&state->used[g], v, __ATOMIC_ACQ_REL);
    }
    /* What a checkpoint moved out is host memory of the dead process: gone
     * with it, never taken back. */
    memset(p->moved, 0, sizeof p->moved);
    __atomic_store_n(&p->ipc_imports, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&p->vmm_imports, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&p->ckpt, FAKE_CKPT_RUNNING, __ATOMIC_RELEASE);
    __atomic_store_n(&p->pid, 0, __ATOMIC_RELEASE);
}

#ifdef FAKE_REAP_TEST_SEAM
/* Tests only (native/tests/reap_race.c): runs between reading /proc and reaping. */
void fake_test_after_scan(void);
#define FAKE_AFTER_SCAN() fake_test_after_scan()
#else
#define FAKE_AFTER_SCAN() ((void)0)
#endif

/* A real driver frees everything a process held when it dies.  One look at
 * every entry: those of dead processes freed, the host pids of the others
 * found.  An entry is judged by the claim seen before /proc was read: one
 * claimed while /proc was being read may have been missed by the reading,
 * and is left for the next pass.  A process of this namespace is checked
 * directly; one of another namespace only by a process that sees every
 * process of it: in the initial PID namespace, or one whose /proc shows
 * namespaces below its own.  A process in a container sees neither, and
 * leaves the others' memory alone. */
static void pass(struct seen seen[FAKE_MAX_PROCS], int host[FAKE_MAX_PROCS])
{
    look(seen);
    int nested;
    translate_foreign(seen, host, &nested);
    FAKE_AFTER_SCAN();
    int outer = -1;
    for (int i = 0; i < FAKE_MAX_PROCS; i++) {
        struct fake_proc *p = &state->procs[i];
        struct seen s = seen[i];
        if (s.pid <= 0 || i == my_proc) continue;
        if (same_ns(p)) {
            if (!alive_here(p, s.pid)) reap(p, s);
            continue;
        }
        if (host[i] != 0) continue;
        if (outer < 0) outer = nested || my_ns_inode() == INIT_PID_NS_INODE;
        if (outer) reap(p, s);
    }
}

static int try_take(int g, uint64_t bytes)
{
    uint64_t cur = __atomic_load_n(&state->used[g], __ATOMIC_RELAXED);
    do {
        uint64_t usable = fake_gpus[g].capacity - fake_reserved_bytes;
        if (bytes > usable || cur > usable - bytes) return -1;
    } while (!__atomic_compare_exchange_n(&state->used[g], &cur, cur + bytes, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
    return 0;
}

int fake_phys_take(int g, uint64_t bytes)
{
    struct fake_proc *p = proc();
    if (p == NULL) return -1;
    if (try_take(g, bytes) != 0) {
        struct seen seen[FAKE_MAX_PROCS];
        int host[FAKE_MAX_PROCS];
        pass(seen, host);
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

int fake_phys_reserve(int g, uint64_t bytes)
{
    if (try_take(g, bytes) == 0) return 0;
    struct seen seen[FAKE_MAX_PROCS];
    int host[FAKE_MAX_PROCS];
    pass(seen, host);
    return try_take(g, bytes);
}

void fake_phys_unreserve(int g, uint64_t bytes)
{
    __atomic_sub_fetch(&state->used[g], bytes, __ATOMIC_ACQ_REL);
}

struct fake_proc *fake_proc_named(int pid, uint32_t *gen)
{
    if (state == NULL || pid <= 0) return NULL;
    struct seen seen[FAKE_MAX_PROCS];
    int host[FAKE_MAX_PROCS];
    pass(seen, host);
    for (int i = 0; i < FAKE_MAX_PROCS; i++) {
        struct fake_proc *p = &state->procs[i];
        struct seen s = seen[i];
        if (s.pid <= 0 || (same_ns(p) ? s.pid : host[i]) != pid || !unchanged(p, s)) continue;
        *gen = s.gen;
        return p;
    }
    return NULL;
}

int fake_proc_index(const struct fake_proc *p)
{
    return (int)(p - state->procs);
}

struct fake_proc *fake_proc_at(int index)
{
    return state != NULL && index >= 0 && index < FAKE_MAX_PROCS ? &state->procs[index] : NULL;
}

int fake_proc_still(const struct fake_proc *p, uint32_t gen)
{
    return __atomic_load_n(&p->pid, __ATOMIC_ACQUIRE) > 0 && __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE) == gen;
}

uint64_t fake_phys_used(int g)
{
    if (state == NULL) return 0;
    struct seen seen[FAKE_MAX_PROCS];
    int host[FAKE_MAX_PROCS];
    pass(seen, host);
    return __atomic_load_n(&state->used[g], __ATOMIC_ACQUIRE);
}

/* One process that a listing of a GPU shows, with what was measured of it. */
struct listed {
    unsigned int host_pid;
    uint64_t value;
};

/* What a listing measures of a process on GPU g over [from, to); 0: not listed. */
typedef uint64_t (*proc_measure)(const struct fake_proc *p, int g, uint64_t from, uint64_t to);

/* The processes a listing of GPU g shows, as the driver lists them: after a
 * pass (the dead reaped), every claimed entry with a pid visible from here
 * (its own in this namespace, its host pid for one of another), a nonzero
 * measure, and the same claim after it was measured (not reaped or claimed
 * again since: its host pid would be another process's).  In table order;
 * returns how many. */
static int list_procs(int g, proc_measure measure, uint64_t from, uint64_t to, struct listed out[FAKE_MAX_PROCS])
{
    struct seen seen[FAKE_MAX_PROCS];
    int host[FAKE_MAX_PROCS];
    pass(seen, host);
    int n = 0;
    for (int i = 0; i < FAKE_MAX_PROCS; i++) {
        struct fake_proc *p = &state->procs[i];
        struct seen s = seen[i];
        if (s.pid <= 0) continue;
        int visible_pid = same_ns(p) ? s.pid : host[i];
        uint64_t value = measure(p, g, from, to);
        if (visible_pid == 0 || value == 0 || !unchanged(p, s)) continue;
        out[n++] = (struct listed){.host_pid = (unsigned int)visible_pid, .value = value};
    }
    return n;
}

/* Bytes p holds on GPU g now (a proc_measure; the window is not used). */
static uint64_t used_on(const struct fake_proc *p, int g, uint64_t from, uint64_t to)
{
    return __atomic_load_n(&p->used[g], __ATOMIC_ACQUIRE);
}

int fake_procs_on(int g, struct fake_proc_usage *out, int max)
{
    if (state == NULL || g < 0 || g >= FAKE_MAX_GPUS) return 0;
    struct listed listed[FAKE_MAX_PROCS];
    int n = list_procs(g, used_on, 0, 0, listed);
    for (int i = 0; i < n && i < max; i++)
        out[i] = (struct fake_proc_usage){.host_pid = listed[i].host_pid, .used = listed[i].value};
    return n;
}

/* ---- kernel time per process (NVML's per-process utilization) ------------ */

void fake_busy_note(int g, uint64_t from_ns, uint64_t to_ns)
{
    if (state == NULL || g < 0 || g >= FAKE_MAX_GPUS || to_ns <= from_ns) return;
    struct fake_proc *p = proc();
    if (p == NULL) return;
    while (from_ns < to_ns) {
        uint64_t bucket = from_ns / FAKE_BUSY_BUCKET_NS, end = (bucket + 1) * FAKE_BUSY_BUCKET_NS;
        if (end > to_ns) end = to_ns;
        uint64_t us = (end - from_ns + 500u) / 1000u, tag = bucket & 0xffffffffull;
        uint64_t *slot = &p->busy[g][bucket % FAKE_BUSY_BUCKETS];
        uint64_t cur = __atomic_load_n(slot, __ATOMIC_RELAXED), next;
        do {
            uint64_t held = (cur >> 32) == tag ? cur & 0xffffffffull : 0; /* an older bucket's count is dropped */
            next = tag << 32 | (held + us);
        } while (!__atomic_compare_exchange_n(slot, &cur, next, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
        from_ns = end;
    }
}

/* Nanoseconds of kernel time p's buckets put in [from, to): a bucket that
 * straddles an end counts in proportion to the part of it inside (the part
 * up to `to` for the bucket still being filled, whose count may include
 * work queued past it), never more than that part. */
static uint64_t busy_within(const struct fake_proc *p, int g, uint64_t from, uint64_t to)
{
    uint64_t total = 0;
    for (uint64_t b = from / FAKE_BUSY_BUCKET_NS; b <= (to - 1) / FAKE_BUSY_BUCKET_NS; b++) {
        uint64_t v = __atomic_load_n(&p->busy[g][b % FAKE_BUSY_BUCKETS], __ATOMIC_ACQUIRE);
        if ((v >> 32) != (b & 0xffffffffull)) continue;
        uint64_t ns = (v & 0xffffffffull) * 1000u;
        uint64_t start = b * FAKE_BUSY_BUCKET_NS, end = start + FAKE_BUSY_BUCKET_NS;
        uint64_t filled_to = end < to ? end : to;
        uint64_t lo = start > from ? start : from;
        uint64_t inside = filled_to - lo, span = filled_to - start;
        uint64_t part = (uint64_t)((double)ns * (double)inside / (double)span);
        total += part < inside ? part : inside;
    }
    return total;
}

int fake_busy_on(int g, uint64_t from_ns, uint64_t to_ns, struct fake_proc_busy *out, int max)
{
    if (state == NULL || g < 0 || g >= FAKE_MAX_GPUS || to_ns <= from_ns) return 0;
    uint64_t history = (FAKE_BUSY_BUCKETS - 1) * FAKE_BUSY_BUCKET_NS;
    if (to_ns - from_ns > history) from_ns = to_ns - history;
    struct listed listed[FAKE_MAX_PROCS];
    int n = list_procs(g, busy_within, from_ns, to_ns, listed);
    for (int i = 0; i < n && i < max; i++) {
        uint64_t percent = (listed[i].value * 100u + (to_ns - from_ns) / 2u) / (to_ns - from_ns);
        out[i] = (struct fake_proc_busy){.host_pid = listed[i].host_pid,
                                         .percent = (unsigned int)(percent > 100 ? 100 : percent)};
    }
    return n;
}
