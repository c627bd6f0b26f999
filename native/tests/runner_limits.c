/* runner_limits.c — tests of the read-only limits file, the correction by
 * the agent's real reading, and the fake's per-process NVML.  Included by
 * runner.c (it shares runner.c's process and region helpers); not compiled
 * on its own. */

#include "gpushards_limits.h"

#define GPU0 "GPU-fa4e5000-0000-4000-8000-000000000000"

struct lim_entry {
    int phys;
    uint64_t limit, context, real;
};

/* What write_limits_compute puts on every device besides the memory fields. */
struct lim_compute {
    uint32_t share, mode, mps; /* compute_share_permille, compute_mode, mps_thread_percent */
    const char *shard;         /* the header's shard_id; NULL = none */
    uint32_t turns;            /* the header's compute_turns (GPUSHARDS_COMPUTE_TURNS_*) */
};

static char limits_path[320];
static char limits_env[400];

/* Write the limits file as the agent does: the whole file at once.
 * corrupt: NULL, "magic", "version", "checksum", "short", "empty". */
static int write_limits_compute(const struct lim_entry *e, int n, const char *corrupt, const struct lim_compute *compute)
{
    snprintf(limits_path, sizeof limits_path, "%s/limits", dir);
    snprintf(limits_env, sizeof limits_env, "GPUSHARDS_LIMITS_PATH=%s", limits_path);
    struct gpushards_limits l;
    memset(&l, 0, sizeof l);
    l.header.magic = GPUSHARDS_LIMITS_MAGIC;
    l.header.version = GPUSHARDS_LIMITS_VERSION;
    l.header.header_size = sizeof l.header;
    l.header.total_size = sizeof l;
    l.header.max_devices = GPUSHARDS_LIMITS_MAX_DEVICES;
    l.header.device_size = sizeof l.devices[0];
    l.header.device_count = (uint32_t)n;
    for (int i = 0; i < n; i++) {
        const uint8_t u[16] = {0xfa, 0x4e, 0x50, 0, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0, (uint8_t)e[i].phys};
        memcpy(l.devices[i].uuid, u, 16);
        l.devices[i].state = GPUSHARDS_LIMITS_ACTIVE;
        l.devices[i].limit_bytes = e[i].limit;
        l.devices[i].context_bytes = e[i].context;
        l.devices[i].real_bytes = e[i].real;
        l.devices[i].real_sampled_at_ms = e[i].real ? 1 : 0;
        if (compute != NULL) {
            l.devices[i].compute_share_permille = compute->share;
            l.devices[i].compute_mode = compute->mode;
            l.devices[i].mps_thread_percent = compute->mps;
        }
    }
    if (compute != NULL && compute->shard != NULL)
        snprintf(l.header.shard_id, sizeof l.header.shard_id, "%s", compute->shard);
    if (compute != NULL) l.header.compute_turns = compute->turns;
    if (corrupt && !strcmp(corrupt, "version")) l.header.version = 2;
    l.header.checksum = fnv(&l.header, GPUSHARDS_LIMITS_CHECKSUM_BYTES);
    if (corrupt && !strcmp(corrupt, "magic")) l.header.magic ^= 0xff;
    if (corrupt && !strcmp(corrupt, "checksum")) l.header.device_count = 3; /* after the checksum was taken */
    size_t len = sizeof l;
    if (corrupt && !strcmp(corrupt, "short")) len = 1024;
    if (corrupt && !strcmp(corrupt, "empty")) len = 0;
    char tmp[400];
    snprintf(tmp, sizeof tmp, "%s.tmp", limits_path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0444);
    if (fd < 0 || write(fd, &l, len) != (ssize_t)len) return h_fail("cannot write %s", tmp);
    close(fd);
    if (rename(tmp, limits_path) != 0) return h_fail("rename");
    return 0;
}

static int write_limits(const struct lim_entry *e, int n, const char *corrupt)
{
    return write_limits_compute(e, n, corrupt, NULL);
}

/* The agent's in-place update of one 8-byte field of device entry i. */
static int limits_store(int i, size_t field_offset, uint64_t value)
{
    int fd = open(limits_path, O_RDWR);
    if (fd < 0) {
        /* The file is 0444 as in the container; the agent is its owner. */
        chmod(limits_path, 0644);
        fd = open(limits_path, O_RDWR);
        chmod(limits_path, 0444);
    }
    if (fd < 0) return h_fail("open %s", limits_path);
    struct gpushards_limits *l = mmap(NULL, sizeof *l, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (l == MAP_FAILED) return h_fail("mmap");
    __atomic_store_n((uint64_t *)(void *)((char *)&l->devices[i] + field_offset), value, __ATOMIC_RELEASE);
    munmap(l, sizeof *l);
    return 0;
}

/* The limits file is the only source: the environment asks for 80g, the
 * file says 1g, and client.c's "cap" scenario checks a 1g cap. */
static int t_limits_only_source(const void *arg)
{
    const struct lim_entry e[] = {{0, GiB, 0, 0}};
    if (write_limits(e, 1, NULL)) return 1;
    const char *env[] = {limits_env, "CUDA_DEVICE_MEMORY_LIMIT=80g", "CUDA_DEVICE_MEMORY_LIMIT_0=80g", NULL};
    if (run(env, "link", "cap", NULL, NULL)) return 1;
    H_CHECK(region_limit(0) == 0, "the environment's limit went into the region: %llu",
            (unsigned long long)region_limit(0));
    return 0;
}

/* A tenant (any user, even root in the container) writes 80g into the
 * writable region's limit: ignored. */
static int t_limits_region_ignored(const void *arg)
{
    const struct lim_entry e[] = {{0, GiB, 0, 0}};
    if (write_limits(e, 1, NULL)) return 1;
    const char *env[] = {limits_env, NULL};
    if (run(env, "link", "alloc", NULL, NULL)) return 1;
    struct gpushards_region *r = region_map();
    H_CHECK(r != NULL && device(r, 0) != NULL, "region");
    __atomic_store_n(&device(r, 0)->limit_bytes, 80 * GiB, __ATOMIC_RELEASE);
    region_unmap(r);
    if (run(env, "link", "cap", NULL, NULL)) return 1;
    if (run(env, "link", "try", "2147483648", NULL)) return 1;
    H_CHECK(strncmp(out_text, "oom", 3) == 0, "2 GiB under a 1 GiB cap: %s", out_text);
    return 0;
}

struct lim_corrupt {
    const char *what, *expect;
};

static int t_limits_corrupt(const void *arg)
{
    const struct lim_corrupt *c = arg;
    const struct lim_entry e[] = {{0, GiB, 0, 0}};
    if (write_limits(e, 1, c->what)) return 1;
    const char *env[] = {limits_env, "CUDA_DEVICE_MEMORY_LIMIT=80g", NULL};
    if (run(env, "link", "refused", NULL, NULL)) return 1;
    H_CHECK(strstr(err_text, c->expect) != NULL, "stderr lacks \"%s\": %s", c->expect, err_text);
    return 0;
}

static int t_limits_missing_named(const void *arg)
{
    snprintf(limits_env, sizeof limits_env, "GPUSHARDS_LIMITS_PATH=%s/nowhere", dir);
    const char *env[] = {limits_env, NULL};
    if (run(env, "link", "refused", NULL, NULL)) return 1;
    H_CHECK(strstr(err_text, "cannot open the limits file") != NULL, "stderr: %s", err_text);
    return 0;
}

static int t_limits_no_entry(const void *arg)
{
    const struct lim_entry e[] = {{1, GiB, 0, 0}};
    if (write_limits(e, 1, NULL)) return 1;
    const char *env[] = {limits_env, "CUDA_DEVICE_MEMORY_LIMIT=80g", NULL};
    if (run(env, "link", "refused", NULL, NULL)) return 1;
    H_CHECK(strstr(err_text, "no entry for " GPU0) != NULL, "stderr: %s", err_text);
    return 0;
}

/* The agent's real reading shrinks the budget (hidden growth), and its
 * in-place updates are seen by the next allocation. */
static int t_limits_real_correction(const void *arg)
{
    const struct lim_entry e[] = {{0, GiB, 0, 900 * MiB}};
    if (write_limits(e, 1, NULL)) return 1;
    const char *env[] = {limits_env, NULL};
    char b[32];
    snprintf(b, sizeof b, "%llu", 200 * MiB);
    if (run(env, "link", "try", b, NULL)) return 1;
    H_CHECK(strncmp(out_text, "oom free 130023424\n", 19) == 0, "200m with 900m really held: %s", out_text);
    snprintf(b, sizeof b, "%llu", 50 * MiB);
    if (run(env, "link", "try", b, NULL)) return 1;
    H_CHECK(strncmp(out_text, "ok", 2) == 0, "50m with 900m really held: %s", out_text);
    if (limits_store(0, offsetof(struct gpushards_limits_device, real_bytes), 0)) return 1;
    snprintf(b, sizeof b, "%llu", 200 * MiB);
    if (run(env, "link", "try", b, NULL)) return 1;
    H_CHECK(strncmp(out_text, "ok", 2) == 0, "200m after real went to 0: %s", out_text);
    if (limits_store(0, offsetof(struct gpushards_limits_device, limit_bytes), 100 * MiB)) return 1;
    if (run(env, "link", "try", b, NULL)) return 1;
    H_CHECK(strncmp(out_text, "oom", 3) == 0, "200m after the limit went to 100m: %s", out_text);
    return 0;
}

/* Zeroing the writable usage counters does not get a process past the cap
 * once the agent has written what the shard really holds. */
static int t_limits_zeroed_counters(const void *arg)
{
    const struct lim_entry e[] = {{0, GiB, 0, 0}};
    if (write_limits(e, 1, NULL)) return 1;
    const char *env[] = {limits_env, NULL};
    struct proc holder;
    char b[32];
    snprintf(b, sizeof b, "%llu", 600 * MiB);
    H_CHECK(start_ready(&holder, env, "hold", b) == 0, "holder did not start: %s", err_text);
    /* The agent samples NVML: the fake card holds the holder's 600m plus its
     * context (GPUSHARDS_FAKE_CONTEXT_BYTES, 300m by default). */
    int rc = limits_store(0, offsetof(struct gpushards_limits_device, real_bytes), 900 * MiB);
    /* The tenant zeroes every counter it can write. */
    struct gpushards_region *r = region_map();
    if (rc == 0 && r != NULL && device(r, 0) != NULL) {
        __atomic_store_n(&device(r, 0)->used_bytes, 0, __ATOMIC_RELEASE);
        for (unsigned i = 0; i < GPUSHARDS_MAX_SLOTS; i++)
            for (unsigned d = 0; d < GPUSHARDS_MAX_DEVICES; d++) r->slots[i].used_bytes[d] = 0;
    }
    if (r) region_unmap(r);
    int ran = rc == 0 && r != NULL ? run(env, "link", "try", b, NULL) : 1;
    kill_wait(&holder);
    if (ran) return 1;
    H_CHECK(strncmp(out_text, "oom", 3) == 0, "600m more after zeroing the counters: %s", out_text);
    return 0;
}

/* Wait until the process at p prints want; 0 when it did. */
static int await_text(struct proc *p, const char *want)
{
    for (int i = 0; i < 4000; i++) {
        slurp(p->out, out_text, sizeof out_text);
        if (strstr(out_text, want)) return 0;
        int st;
        if (waitpid(p->pid, &st, WNOHANG) == p->pid) break;
        usleep(5000);
    }
    slurp(p->err, err_text, sizeof err_text);
    return -1;
}

/* Runs program with up to four arguments (spawn's slots). */
static int spawn_program(struct proc *p, const char *prog, const char *const *extra, const char *a0, const char *a1,
                         const char *a2, const char *a3)
{
    const char *saved = program;
    program = prog;
    int r = spawn(p, extra, a0, a1, a2, a3);
    program = saved;
    return r;
}

/* The host's fake NVML reports each process's real usage under its host
 * pid: one charged through libvgpu.so, one holding hidden memory, and one
 * holding hidden memory in a PID namespace of its own (as in a container,
 * where it is pid 1). */
static int t_nvml_per_process(const void *arg)
{
    const char *env[] = {"CUDA_DEVICE_MEMORY_LIMIT=4g", NULL};
    struct proc charged, hidden, nested;
    char b[32];
    snprintf(b, sizeof b, "%llu", 256 * MiB);
    H_CHECK(start_ready(&charged, env, "hold", b) == 0, "holder did not start: %s", err_text);
    int ok = spawn_program(&hidden, HIDDEN_ALLOC, env, "0", "1g", "hold", NULL) == 0 &&
             await_text(&hidden, "holding") == 0;
    int ok2 = ok && spawn_program(&nested, "/bin/sh", env, "-c",
                                  "exec unshare --user --map-root-user --pid --mount --fork --kill-child --mount-proc \"$0\" 0 512m hold",
                                  HIDDEN_ALLOC, NULL) == 0 &&
              await_text(&nested, "holding") == 0;
    /* unshare forks: the holder is its only child. */
    int nested_pid = 0;
    if (ok2) {
        char path[64], kids[64];
        snprintf(path, sizeof path, "/proc/%d/task/%d/children", nested.pid, nested.pid);
        slurp(path, kids, sizeof kids);
        nested_pid = atoi(kids);
    }
    const char *host[] = {"-LD_PRELOAD", NULL};
    int ran = ok2 ? run(host, "link", "procs", "0", NULL) : 1;
    char text[sizeof out_text];
    snprintf(text, sizeof text, "%s", out_text);
    kill_wait(&charged);
    if (ok) kill_wait(&hidden);
    if (nested_pid > 1) kill(nested_pid, SIGKILL);
    if (ok2) kill_wait(&nested);
    /* It is its namespace's init: wait until it has exited (gone or a zombie). */
    for (int i = 0; nested_pid > 1 && i < 400; i++) {
        char path[64], st[512];
        snprintf(path, sizeof path, "/proc/%d/stat", nested_pid);
        slurp(path, st, sizeof st);
        const char *q = strrchr(st, ')');
        if (q == NULL || q[2] == 'Z' || q[2] == 'X') break;
        usleep(5000);
    }
    H_CHECK(ok, "fake-hidden-alloc did not hold: %s", err_text);
    H_CHECK(ok2, "fake-hidden-alloc in a PID namespace did not hold: %s", err_text);
    if (ran) return 1;
    char want[128];
    snprintf(want, sizeof want, "pid %d %llu\n", (int)charged.pid, 556 * MiB); /* 256m + the 300m context */
    H_CHECK(strstr(text, want) != NULL, "missing \"%s\" in:\n%s", want, text);
    snprintf(want, sizeof want, "pid %d %llu\n", (int)hidden.pid, GiB);
    H_CHECK(strstr(text, want) != NULL, "missing \"%s\" in:\n%s", want, text);
    H_CHECK(nested_pid > 1, "no child of unshare");
    snprintf(want, sizeof want, "pid %d %llu\n", nested_pid, 512 * MiB);
    H_CHECK(strstr(text, want) != NULL, "missing \"%s\" (the host pid of pid 1 in its namespace) in:\n%s", want, text);
    snprintf(want, sizeof want, "card %llu\n", 556 * MiB + GiB + 512 * MiB);
    H_CHECK(strstr(text, want) != NULL, "missing \"%s\" in:\n%s", want, text);
    /* Their memory goes back when they die, as a real driver gives it back. */
    if (run(host, "link", "procs", "0", NULL)) return 1;
    H_CHECK(strstr(out_text, "card 0\n") != NULL && strstr(out_text, "pid ") == NULL, "after the deaths:\n%s",
            out_text);
    return 0;
}

/* Hidden memory counts on the card: with the agent's reading in the limits
 * file, libvgpu.so turns it into a clean OOM. */
static int t_hidden_then_correction(const void *arg)
{
    const struct lim_entry e[] = {{0, GiB, 0, 0}};
    if (write_limits(e, 1, NULL)) return 1;
    const char *env[] = {limits_env, "GPUSHARDS_FAKE_GPUS=Small GPU:2g", NULL};
    struct proc hidden;
    H_CHECK(spawn_program(&hidden, HIDDEN_ALLOC, env, "0", "800m", "hold", NULL) == 0 &&
                await_text(&hidden, "holding") == 0,
            "fake-hidden-alloc: %s", err_text);
    const char *host[] = {"-LD_PRELOAD", "GPUSHARDS_FAKE_GPUS=Small GPU:2g", NULL};
    int ran = run(host, "link", "procs", "0", NULL);
    unsigned long long card = 0;
    const char *c = strstr(out_text, "card ");
    if (c) card = strtoull(c + 5, NULL, 10);
    /* The agent writes what it measured. */
    int rc = ran == 0 ? limits_store(0, offsetof(struct gpushards_limits_device, real_bytes), card) : 1;
    char b[32];
    snprintf(b, sizeof b, "%llu", 400 * MiB);
    int tried = rc == 0 ? run(env, "link", "try", b, NULL) : 1;
    kill_wait(&hidden);
    H_CHECK(ran == 0 && card == 800 * MiB, "NVML saw %llu on the card", card);
    if (tried) return 1;
    H_CHECK(strncmp(out_text, "oom", 3) == 0, "400m with 800m hidden under a 1g cap: %s", out_text);
    return 0;
}

static int t_pitch_legacy(const void *arg)
{
    const char *env[] = {"CUDA_DEVICE_MEMORY_LIMIT=1g", "GPUSHARDS_FAKE_PITCH_ALIGN=2k", NULL};
    if (run(env, "link", "pitch-legacy", NULL, NULL)) return 1;
    uint64_t u = region_used(0);
    H_CHECK(u == 0, "the region shows %llu bytes after exit", (unsigned long long)u);
    return 0;
}

static int t_capture(const void *arg)
{
    const char *env[] = {"CUDA_DEVICE_MEMORY_LIMIT=1g", NULL};
    if (run(env, "link", "capture", NULL, NULL)) return 1;
    uint64_t u = region_used(0);
    H_CHECK(u == 0, "the region shows %llu bytes after exit", (unsigned long long)u);
    return 0;
}

static int t_ctx_limits(const void *arg)
{
    const char *env[] = {"CUDA_DEVICE_MEMORY_LIMIT=1g", NULL};
    return run(env, "link", "ctx-limits", NULL, NULL);
}

/* A program that runs the driver in a dlmopen namespace of its own works
 * with the interposer preloaded as without it. */
static int t_dlmopen(const void *arg)
{
    const char *native[] = {"-LD_PRELOAD", NULL};
    const char *interposed[] = {"CUDA_DEVICE_MEMORY_LIMIT=1g", NULL};
    const char *saved = program;
    program = DLMOPEN_CLIENT;
    int a = run(native, NULL, NULL, NULL, NULL);
    int b = a == 0 ? run(interposed, NULL, NULL, NULL, NULL) : 1;
    program = saved;
    char why[sizeof h_why];
    snprintf(why, sizeof why, "%s", h_why);
    if (a) return h_fail("without the interposer: %s", why);
    if (b) return h_fail("with the interposer: %s", why);
    return 0;
}

static int t_missing(const void *arg)
{
    const char *env[] = {"CUDA_DEVICE_MEMORY_LIMIT=1g", NULL};
    return run(env, "link", "missing", NULL, NULL);
}

static void add_limits_tests(struct t *tests, int *n)
{
#define ADDL(nm, f, a) tests[(*n)++] = (struct t){nm, f, a}
    ADDL("limits file: the only source of the cap (the environment's 80g ignored)", t_limits_only_source, NULL);
    ADDL("limits file: a tenant's 80g in the writable region is ignored", t_limits_region_ignored, NULL);
    static const struct lim_corrupt corrupt[] = {
        {"magic", "bad magic"},      {"version", "limits layout version 2"}, {"checksum", "checksum mismatch"},
        {"short", "is truncated"}, {"empty", "is truncated"},
    };
    static char names[5][80];
    for (int i = 0; i < 5; i++) {
        snprintf(names[i], sizeof names[i], "limits file with %s fails closed", corrupt[i].what);
        ADDL(names[i], t_limits_corrupt, &corrupt[i]);
    }
    ADDL("limits file named but missing fails closed", t_limits_missing_named, NULL);
    ADDL("limits file without an entry for the GPU refuses its allocations", t_limits_no_entry, NULL);
    ADDL("real_bytes from the agent shrinks the budget; in-place updates seen", t_limits_real_correction, NULL);
    ADDL("zeroed usage counters do not pass the cap once real_bytes is set", t_limits_zeroed_counters, NULL);
    ADDL("fake NVML: per-process usage under host pids, PID namespace included", t_nvml_per_process, NULL);
    ADDL("hidden memory seen by NVML turns into a clean OOM through real_bytes", t_hidden_then_correction, NULL);
    ADDL("legacy cuMemAllocPitch refuses what the driver padded past the cap", t_pitch_legacy, NULL);
    ADDL("stream capture with stream-ordered allocations is not invalidated; graph memory charged at launch, refused past the cap, released on destroy + trim", t_capture, NULL);
    ADDL("cuCtxSetLimit: heap, stack and printf FIFO charged, refused past the cap, given back", t_ctx_limits, NULL);
    ADDL("a dlmopen program works under the interposer as without it", t_dlmopen, NULL);
    ADDL("hooks whose driver function is missing answer CUDA_ERROR_NOT_FOUND and charge nothing (no crash)",
         t_missing, NULL);
#undef ADDL
}
