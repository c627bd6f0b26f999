/* runner.c — the native test suite.  Each test starts vgpu-client
 * processes under LD_PRELOAD=libvgpu.so with the fake driver on
 * LD_LIBRARY_PATH, in a fresh folder for the region and the fake's shared
 * state, and checks their exit status, their messages and the region file.
 *
 *   vgpu-tests [FILTER]     runs the tests whose name contains FILTER */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpushards_region.h"
#include "harness.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)
#define GPUS3 "NVIDIA H100 80GB HBM3:80g,NVIDIA L4:24g,NVIDIA A10:24g"

static char dir[256];      /* this test's folder */
static char region[300];   /* dir/region */

/* ---- processes ------------------------------------------------------------- */
struct proc {
    pid_t pid;
    char out[320], err[320];
};

static const char *program = CLIENT;

/* extra: "KEY=VALUE" entries that replace the defaults; "-KEY" drops one. */
static int spawn(struct proc *p, const char *const *extra, const char *mode, const char *scenario, const char *a1,
                 const char *a2)
{
    static int seq;
    char defaults[16][512];
    int nd = 0;
    snprintf(defaults[nd++], 512, "LD_PRELOAD=%s", VGPU_LIB);
    snprintf(defaults[nd++], 512, "LD_LIBRARY_PATH=%s", FAKE_DIR);
    snprintf(defaults[nd++], 512, "GPUSHARDS_REGION_PATH=%s", region);
    snprintf(defaults[nd++], 512, "GPUSHARDS_FAKE_STATE=%s/fake", dir);
    snprintf(defaults[nd++], 512, "GPUSHARDS_FAKE_GPUS=%s", GPUS3);
    snprintf(defaults[nd++], 512, "GPUSHARDS_FAKE_POOL_CHUNK=2m");
    snprintf(defaults[nd++], 512, "GPUSHARDS_POOL_GROWTH_BYTES=2m"); /* what the fake grows by */
    snprintf(defaults[nd++], 512, "GPUSHARDS_TEST_LIBVGPU=%s", VGPU_LIB);
    snprintf(defaults[nd++], 512, "GPUSHARDS_LOG_LEVEL=info");
    snprintf(defaults[nd++], 512, "PATH=/usr/bin:/bin");
    const char *env[64];
    int ne = 0;
    for (int i = 0; extra && extra[i]; i++)
        if (extra[i][0] != '-') env[ne++] = extra[i];
    for (int d = 0; d < nd; d++) {
        size_t klen = strchr(defaults[d], '=') - defaults[d];
        int overridden = 0;
        for (int i = 0; extra && extra[i]; i++) {
            const char *k = extra[i][0] == '-' ? extra[i] + 1 : extra[i];
            if (strncmp(k, defaults[d], klen) == 0 && (k[klen] == '=' || k[klen] == '\0')) overridden = 1;
        }
        if (!overridden) env[ne++] = defaults[d];
    }
    env[ne] = NULL;
    snprintf(p->out, sizeof p->out, "%s/out.%d", dir, seq);
    snprintf(p->err, sizeof p->err, "%s/err.%d", dir, seq++);
    const char *argv[] = {program, mode, scenario, a1, a2, NULL};
    p->pid = fork();
    if (p->pid == 0) {
        int o = open(p->out, O_WRONLY | O_CREAT | O_TRUNC, 0644), e = open(p->err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(o, 1);
        dup2(e, 2);
        execve(program, (char *const *)argv, (char *const *)env);
        _exit(127);
    }
    return p->pid > 0 ? 0 : -1;
}

static void slurp(const char *path, char *buf, size_t len)
{
    buf[0] = '\0';
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    ssize_t n = read(fd, buf, len - 1);
    buf[n > 0 ? n : 0] = '\0';
    close(fd);
}

/* Wait up to ms; -1 on timeout (the process is killed), else the status. */
static int await(struct proc *p, int ms)
{
    for (int waited = 0;; waited += 5) {
        int st;
        pid_t r = waitpid(p->pid, &st, WNOHANG);
        if (r == p->pid) return st;
        if (waited >= ms) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &st, 0);
            return -1;
        }
        usleep(5000);
    }
}

static char out_text[16384], err_text[16384];

/* Run a scenario to completion: 0 when it exited 0. */
static int run(const char *const *extra, const char *mode, const char *scenario, const char *a1, const char *a2)
{
    struct proc p;
    if (spawn(&p, extra, mode, scenario, a1, a2) != 0) return h_fail("fork failed");
    int st = await(&p, 60000);
    slurp(p.out, out_text, sizeof out_text);
    slurp(p.err, err_text, sizeof err_text);
    /* CHECK reports on stdout, the library on stderr: a failure shows both. */
    if (st == -1) return h_fail("%s %s timed out; stdout: %s; stderr: %s", mode, scenario, out_text, err_text);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return h_fail("%s %s exited with status %d; stdout: %s; stderr: %s", mode, scenario, st, out_text, err_text);
    return 0;
}

/* Start a scenario that prints "ready" and waits to be killed. */
static int start_ready(struct proc *p, const char *const *extra, const char *scenario, const char *a1)
{
    if (spawn(p, extra, "link", scenario, a1, NULL) != 0) return -1;
    for (int i = 0; i < 2000; i++) {
        slurp(p->out, out_text, sizeof out_text);
        if (strstr(out_text, "ready")) return 0;
        int st;
        if (waitpid(p->pid, &st, WNOHANG) == p->pid) break;
        usleep(5000);
    }
    slurp(p->err, err_text, sizeof err_text);
    kill(p->pid, SIGKILL);
    return -1;
}

static void kill_wait(struct proc *p)
{
    int st;
    kill(p->pid, SIGKILL);
    waitpid(p->pid, &st, 0);
}

/* ---- the region, as the agent sees it ------------------------------------ */
static struct gpushards_region *region_map(void)
{
    int fd = open(region, O_RDWR);
    if (fd < 0) return NULL;
    void *m = mmap(NULL, sizeof(struct gpushards_region), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return m == MAP_FAILED ? NULL : m;
}

static void region_unmap(struct gpushards_region *r)
{
    munmap(r, sizeof *r);
}

static struct gpushards_device *device(struct gpushards_region *r, int phys)
{
    const uint8_t u[16] = {0xfa, 0x4e, 0x50, 0, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0, (uint8_t)phys};
    for (uint32_t i = 0; i < r->header.device_count; i++)
        if (memcmp(r->devices[i].uuid, u, 16) == 0) return &r->devices[i];
    return NULL;
}

static uint64_t region_used(int phys)
{
    struct gpushards_region *r = region_map();
    if (r == NULL) return UINT64_MAX;
    struct gpushards_device *d = device(r, phys);
    uint64_t v = d ? d->used_bytes : UINT64_MAX;
    region_unmap(r);
    return v;
}

static uint64_t region_limit(int phys)
{
    struct gpushards_region *r = region_map();
    if (r == NULL) return UINT64_MAX;
    struct gpushards_device *d = device(r, phys);
    uint64_t v = d ? d->limit_bytes : UINT64_MAX;
    region_unmap(r);
    return v;
}

static uint64_t fnv(const void *p, size_t n)
{
    uint64_t x = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) x = (x ^ ((const unsigned char *)p)[i]) * 0x100000001b3ULL;
    return x;
}

/* ---- per-test folders ------------------------------------------------------ */
static void fresh_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/gpushards-test-XXXXXX");
    if (mkdtemp(dir) == NULL) abort();
    snprintf(region, sizeof region, "%s/region", dir);
}

static void remove_dir(void)
{
    DIR *d = opendir(dir);
    if (d == NULL) return;
    struct dirent *e;
    char path[600];
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

struct t {
    const char *name;
    int (*fn)(const void *);
    const void *arg;
};

static int in_fresh_dir(const void *arg)
{
    const struct t *t = arg;
    fresh_dir();
    int r = t->fn(t->arg);
    if (r == 0) remove_dir();
    else {
        char why[sizeof h_why];
        snprintf(why, sizeof why, "%s", h_why);
        h_fail("%s [files kept in %s]", why, dir);
    }
    return r;
}

/* ---- the tests --------------------------------------------------------------- */
struct path_case {
    const char *mode, *scenario;
    const char *env[4];
};

static int t_path(const void *arg)
{
    const struct path_case *c = arg;
    if (run(c->env, c->mode, c->scenario, NULL, NULL)) return 1;
    uint64_t u = region_used(0); /* UINT64_MAX: the scenario made no region */
    H_CHECK(u == 0 || u == UINT64_MAX, "the region shows %llu bytes used after the process exited", (unsigned long long)u);
    return 0;
}

/* NVML's memory queries before nvmlInit and after nvmlShutdown
 * (client_nvml.c names the views). */
struct nvml_uninit_case {
    const char *mode, *view;
    const char *env[2];
};

static int t_nvml_uninit(const void *arg)
{
    const struct nvml_uninit_case *c = arg;
    if (run(c->env, c->mode, "nvml-uninit", c->view, NULL)) return 1;
    H_CHECK(strstr(out_text, "ok") != NULL, "no ok; stdout: %s", out_text);
    uint64_t u = region_used(0);
    H_CHECK(u == 0 || u == UINT64_MAX, "the region shows %llu bytes used after the process exited", (unsigned long long)u);
    return 0;
}

static int t_layout(const void *arg)
{
    FILE *f = popen(REGION_LAYOUT, "r");
    H_CHECK(f != NULL, "cannot run region-layout");
    char buf[16384];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    H_CHECK(pclose(f) == 0, "region-layout failed");
    char want[128];
    snprintf(want, sizeof want, "\"used_bytes\": { \"offset\": %zu, \"size\": 8 }",
             offsetof(struct gpushards_device, used_bytes));
    H_CHECK(strstr(buf, want) != NULL, "missing %s", want);
    snprintf(want, sizeof want, "\"limit_bytes\": { \"offset\": %zu, \"size\": 8 }",
             offsetof(struct gpushards_device, limit_bytes));
    H_CHECK(strstr(buf, want) != NULL, "missing %s", want);
    snprintf(want, sizeof want, "\"pool_growth_bytes\": { \"offset\": 64, \"size\": 8 }");
    H_CHECK(strstr(buf, want) != NULL, "missing %s", want);
    snprintf(want, sizeof want, "\"totalSize\": %zu", sizeof(struct gpushards_region));
    H_CHECK(strstr(buf, want) != NULL, "missing %s", want);
    int depth = 0;
    for (char *p = buf; *p; p++) depth += (*p == '{') - (*p == '}');
    H_CHECK(depth == 0, "unbalanced braces");
    return 0;
}

static int t_glibc(const void *arg)
{
    FILE *f = popen("objdump -T " VGPU_LIB, "r");
    H_CHECK(f != NULL, "cannot run objdump");
    char line[512];
    int worst_major = 0, worst_minor = 0, seen = 0;
    char worst[512] = "";
    while (fgets(line, sizeof line, f)) {
        char *g = strstr(line, "GLIBC_2.");
        if (g == NULL) continue;
        int minor = atoi(g + 8);
        seen++;
        if (minor > worst_minor) {
            worst_major = 2;
            worst_minor = minor;
            snprintf(worst, sizeof worst, "%s", line);
        }
    }
    H_CHECK(pclose(f) == 0, "objdump failed (is binutils installed?)");
    H_CHECK(seen > 0, "objdump -T showed no GLIBC versions");
    H_CHECK(worst_minor <= 17, "needs GLIBC_%d.%d: %s", worst_major, worst_minor, worst);
    printf("     newest glibc version needed: GLIBC_2.%d\n", worst_minor);
    return 0;
}

static int t_threads(const void *arg)
{
    const char *env[] = {"CUDA_DEVICE_MEMORY_LIMIT=1g", NULL};
    if (run(env, "link", "threads", NULL, NULL)) return 1;
    printf("     8 threads x 10000 operations: %s", out_text);
    return 0;
}

/* Stream-ordered pools may not pass the cap, as charged or as the card
 * holds them (client.c, s_pool_cap): the fake grows pools in 32 MiB steps. */
struct pool_cap_case {
    const char *name, *mode, *scenario, *size, *threads, *region_growth;
    const char *env[8];
};

static int t_pool_cap(const void *arg)
{
    const struct pool_cap_case *c = arg;
    if (c->region_growth != NULL) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "%s set %s GPU-fa4e5000-0000-4000-8000-000000000000 pool_growth=%s", REGION_TOOL,
                 region, c->region_growth);
        H_CHECK(system(cmd) == 0, "gpushards-region set failed");
    }
    if (run(c->env, c->mode, c->scenario, c->size, c->threads)) return 1;
    printf("     %s", out_text);
    /* Reserve before allocate: the pool never grows past what was charged
     * for it, in whatever order threads reach the driver. */
    H_CHECK(strstr(err_text, "more than was reserved") == NULL, "a pool grew past its reservation: %s", err_text);
    return 0;
}

static int t_multiprocess(const void *arg)
{
    const char *env[] = {"CUDA_DEVICE_MEMORY_LIMIT=1g", "CHURN_ITERS=3000", NULL};
    struct proc p[4];
    for (int i = 0; i < 4; i++) H_CHECK(spawn(&p[i], env, i % 2 ? "gpa" : "link", "churn", NULL, NULL) == 0, "fork");
    /* Watch the shared counter from outside while they run. */
    uint64_t peak = 0;
    int running = 4, st[4] = {0};
    while (running > 0) {
        uint64_t u = region_used(0);
        if (u != UINT64_MAX && u > peak) peak = u;
        running = 0;
        for (int i = 0; i < 4; i++) {
            if (p[i].pid == 0) continue;
            if (waitpid(p[i].pid, &st[i], WNOHANG) == p[i].pid) p[i].pid = 0;
            else running++;
        }
        usleep(1000);
    }
    for (int i = 0; i < 4; i++) {
        slurp(p[i].err, err_text, sizeof err_text);
        H_CHECK(WIFEXITED(st[i]) && WEXITSTATUS(st[i]) == 0, "process %d failed: %s", i, err_text);
    }
    H_CHECK(peak <= GiB, "peak usage %llu over the 1 GiB cap", (unsigned long long)peak);
    H_CHECK(region_used(0) == 0, "not back to zero: %llu", (unsigned long long)region_used(0));
    H_CHECK(region_map() != NULL, "region");
    printf("     4 processes, peak %llu MiB of 1024\n", (unsigned long long)(peak >> 20));
    return 0;
}

static int t_sigkill_reclaim(const void *arg)
{
    const char *env[] = {"CUDA_DEVICE_MEMORY_LIMIT=1g", NULL};
    struct proc holder;
    H_CHECK(start_ready(&holder, env, "hold", "314572800") == 0, "holder did not start: %s", err_text);
    H_CHECK(region_used(0) == 300 * MiB, "holder charged %llu", (unsigned long long)region_used(0));
    kill_wait(&holder);
    H_CHECK(region_used(0) == 300 * MiB, "nobody has noticed yet: %llu", (unsigned long long)region_used(0));
    /* "cap" needs the whole GiB: it only passes if the dead holder's
     * 300 MiB came back when it started. */
    return run(env, "link", "cap", NULL, NULL);
}

static int t_fake_shared(const void *arg)
{
    const char *env[] = {"CUDA_DEVICE_MEMORY_LIMIT=1g", NULL};
    struct proc holder;
    H_CHECK(start_ready(&holder, env, "hold", "314572800") == 0, "holder did not start: %s", err_text);
    /* 300 MiB allocated + the fake's 300 MiB context, seen from outside. */
    const char *raw[] = {"-LD_PRELOAD", NULL};
    int r = run(raw, "link", "nvml-used", "629145600", NULL);
    kill_wait(&holder);
    if (r) return 1;
    return run(raw, "link", "nvml-used", "0", NULL); /* a dead process's memory is freed */
}

static int t_pid_reuse(const void *arg)
{
    const char *env[] = {"CUDA_DEVICE_MEMORY_LIMIT=1g", NULL};
    if (run(env, "link", "alloc", NULL, NULL)) return 1;
    /* Plant a slot whose pid is alive (ours) but whose start time is not:
     * the pid was reused, its memory belongs to nobody. */
    struct gpushards_region *r = region_map();
    H_CHECK(r != NULL, "region");
    struct gpushards_device *d = device(r, 0);
    long idx = d - r->devices;
    struct gpushards_slot *s = &r->slots[GPUSHARDS_MAX_SLOTS - 1];
    s->start_time = 12345;
    s->used_bytes[idx] = 200 * MiB;
    __atomic_add_fetch(&d->used_bytes, 200 * MiB, __ATOMIC_ACQ_REL);
    __atomic_store_n(&s->pid, (int)getpid(), __ATOMIC_RELEASE);
    region_unmap(r);
    return run(env, "link", "cap", NULL, NULL);
}

static int t_sigkill_lock(const void *arg)
{
    const char *env[] = {"CUDA_DEVICE_MEMORY_LIMIT=1g", NULL};
    struct proc holder;
    H_CHECK(start_ready(&holder, env, "lock", NULL) == 0, "lock holder did not start: %s", err_text);
    kill_wait(&holder);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct proc p;
    H_CHECK(spawn(&p, env, "link", "alloc", NULL, NULL) == 0, "fork");
    int st = await(&p, 1000);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    slurp(p.err, err_text, sizeof err_text);
    H_CHECK(st != -1, "still blocked after a second: %s", err_text);
    H_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "failed: %s", err_text);
    H_CHECK(strstr(err_text, "died holding the region lock") != NULL, "no recovery message: %s", err_text);
    printf("     next process done in %ld ms\n",
           (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000);
    return 0;
}

/* Broken region files: the library must refuse, and say why. */
struct corrupt_case {
    const char *what, *expect;
};

static int t_corrupt(const void *arg)
{
    const struct corrupt_case *c = arg;
    const char *env[] = {"CUDA_DEVICE_MEMORY_LIMIT=1g", NULL};
    if (run(env, "link", "alloc", NULL, NULL)) return 1; /* a good region to break */
    int fd = open(region, O_RDWR);
    H_CHECK(fd >= 0, "open");
    struct gpushards_region_header h;
    H_CHECK(pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h, "read");
    if (!strcmp(c->what, "magic")) {
        h.magic ^= 0xff;
    } else if (!strcmp(c->what, "version")) {
        h.version = 2;
        h.checksum = fnv(&h, GPUSHARDS_CHECKSUM_BYTES);
    } else if (!strcmp(c->what, "checksum")) {
        h.max_slots = 7;
    } else if (!strcmp(c->what, "truncated")) {
        H_CHECK(ftruncate(fd, 4096) == 0, "truncate");
    } else if (!strcmp(c->what, "short")) {
        H_CHECK(ftruncate(fd, 100) == 0, "truncate");
    }
    if (strcmp(c->what, "truncated") && strcmp(c->what, "short"))
        H_CHECK(pwrite(fd, &h, sizeof h, 0) == (ssize_t)sizeof h, "write");
    close(fd);
    if (run(env, "link", "refused", NULL, NULL)) return 1;
    H_CHECK(strstr(err_text, c->expect) != NULL, "stderr lacks \"%s\": %s", c->expect, err_text);
    return 0;
}

struct env_case {
    const char *var, *expect;
};

static int t_bad_env(const void *arg)
{
    const struct env_case *c = arg;
    const char *env[] = {c->var, NULL};
    if (run(env, "link", "refused", NULL, NULL)) return 1;
    H_CHECK(strstr(err_text, c->expect) != NULL, "stderr lacks \"%s\": %s", c->expect, err_text);
    return 0;
}

static int t_good_env(const void *arg)
{
    const char *env[] = {arg, NULL};
    if (run(env, "link", "alloc", NULL, NULL)) return 1;
    H_CHECK(region_limit(0) == GiB, "%s gave a limit of %llu", (const char *)arg, (unsigned long long)region_limit(0));
    return 0;
}

static int t_per_device_env(const void *arg)
{
    const char *env[] = {"CUDA_DEVICE_MEMORY_LIMIT=4g", "CUDA_DEVICE_MEMORY_LIMIT_1=2g", NULL};
    if (run(env, "link", "count", "3", NULL)) return 1;
    H_CHECK(region_limit(0) == 4 * GiB && region_limit(1) == 2 * GiB && region_limit(2) == 4 * GiB,
            "limits %llu %llu %llu", (unsigned long long)region_limit(0), (unsigned long long)region_limit(1),
            (unsigned long long)region_limit(2));
    return 0;
}

static int t_region_limit_wins(const void *arg)
{
    const char *first[] = {"CUDA_DEVICE_MEMORY_LIMIT=1g", NULL};
    if (run(first, "link", "alloc", NULL, NULL)) return 1;
    struct gpushards_region *r = region_map();
    H_CHECK(r != NULL, "region");
    __atomic_store_n(&device(r, 0)->limit_bytes, 512 * 1024, __ATOMIC_RELEASE); /* the agent: 512 KiB */
    region_unmap(r);
    const char *second[] = {"CUDA_DEVICE_MEMORY_LIMIT=2g", NULL};
    if (run(second, "link", "refused", NULL, NULL)) return 1; /* a 1 MiB allocation */
    H_CHECK(region_limit(0) == 512 * 1024, "env overwrote the agent's limit");
    return 0;
}

static int t_tool(const void *arg)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s set %s GPU-fa4e5000-0000-4000-8000-000000000002 limit=512k context=0", REGION_TOOL,
             region);
    H_CHECK(system(cmd) == 0, "gpushards-region set failed");
    /* Ordinal 0 is GPU 2 here; the environment's 8g must not win. */
    const char *env[] = {"CUDA_VISIBLE_DEVICES=2", "CUDA_DEVICE_MEMORY_LIMIT=8g", NULL};
    if (run(env, "link", "refused", NULL, NULL)) return 1;
    H_CHECK(region_limit(2) == 512 * 1024, "limit %llu", (unsigned long long)region_limit(2));
    snprintf(cmd, sizeof cmd, "%s show %s", REGION_TOOL, region);
    FILE *f = popen(cmd, "r");
    char buf[8192];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = '\0';
    H_CHECK(f != NULL && pclose(f) == 0, "gpushards-region show failed");
    H_CHECK(strstr(buf, "\"uuid\": \"GPU-fa4e5000-0000-4000-8000-000000000002\", \"limitBytes\": 524288") != NULL,
            "show: %s", buf);
    return 0;
}

static int t_context_from_region(const void *arg)
{
    const char *env[] = {"CUDA_DEVICE_MEMORY_LIMIT=1g", NULL};
    if (run(env, "link", "count", "3", NULL)) return 1;
    struct gpushards_region *r = region_map();
    H_CHECK(r != NULL, "region");
    __atomic_store_n(&device(r, 0)->context_bytes, 100 * MiB, __ATOMIC_RELEASE); /* measured by the agent */
    region_unmap(r);
    return run(NULL, "link", "primary", NULL, NULL);
}

struct visible_case {
    const char *cvd, *ordinal, *phys, *count;
};

static int t_visible(const void *arg)
{
    const struct visible_case *c = arg;
    char cvd[256];
    snprintf(cvd, sizeof cvd, "CUDA_VISIBLE_DEVICES=%s", c->cvd);
    const char *env[] = {cvd, "CUDA_DEVICE_MEMORY_LIMIT_0=512m", NULL};
    if (run(env, "link", "count", c->count, NULL)) return 1;
    if (run(env, "link", "visible", c->ordinal, c->phys)) return 1;
    /* CUDA_DEVICE_MEMORY_LIMIT_0 names ordinal 0 as this process sees it. */
    int phys0 = -1;
    if (!strcmp(c->cvd, "2,0") || !strncmp(c->cvd, "GPU-fa4e5000-0000-4000-8000-000000000002", 40)) phys0 = 2;
    if (!strcmp(c->cvd, "1")) phys0 = 1;
    if (phys0 >= 0) H_CHECK(region_limit(phys0) == 512 * MiB, "limit of ordinal 0 not on GPU %d", phys0);
    return 0;
}

struct visible_all_case {
    const char *cvd, *phys;
};

static int t_visible_all(const void *arg)
{
    const struct visible_all_case *c = arg;
    char cvd[256];
    snprintf(cvd, sizeof cvd, "CUDA_VISIBLE_DEVICES=%s", c->cvd);
    const char *env[] = {c->cvd[0] != '\0' ? cvd : "GPUSHARDS_NO_CVD=1", "CUDA_DEVICE_MEMORY_LIMIT=1g", NULL};
    return run(env, "link", "visible-all", c->phys, NULL);
}

/* One shard's processes, each with its own form of CUDA_VISIBLE_DEVICES, share the region:
 * each byte lands on the physical GPU it was taken on, whatever ordinal named it. */
static int t_visible_shared(const void *arg)
{
    static const char *forms[] = {"CUDA_VISIBLE_DEVICES=1", "CUDA_VISIBLE_DEVICES=GPU-fa4e5000-0000-4000-8000-000000000001,0",
                                  "CUDA_VISIBLE_DEVICES=2,1"};
    struct proc holders[3];
    int started = 0, ok = 1;
    for (int i = 0; i < 3 && ok; i++) {
        const char *env[] = {forms[i], "CUDA_DEVICE_MEMORY_LIMIT=1g", NULL};
        ok = start_ready(&holders[i], env, "hold", "314572800") == 0; /* 300 MiB on its ordinal 0 */
        started += ok;
    }
    uint64_t u0 = region_used(0), u1 = region_used(1), u2 = region_used(2);
    for (int i = 0; i < started; i++) kill_wait(&holders[i]);
    H_CHECK(ok, "holder %d did not start: %s", started, err_text);
    H_CHECK(u1 == 600 * MiB && u2 == 300 * MiB && (u0 == 0 || u0 == UINT64_MAX),
            "charged GPU 0 %llu, GPU 1 %llu, GPU 2 %llu", (unsigned long long)u0, (unsigned long long)u1,
            (unsigned long long)u2);
    return 0;
}

static int t_race(const void *arg)
{
    const char *env[] = {"CUDA_DEVICE_MEMORY_LIMIT=1g", NULL};
    struct proc p[8];
    for (int i = 0; i < 8; i++) H_CHECK(spawn(&p[i], env, "link", "alloc", NULL, NULL) == 0, "fork");
    for (int i = 0; i < 8; i++) {
        int st = await(&p[i], 30000);
        slurp(p[i].err, err_text, sizeof err_text);
        H_CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "process %d status %d: %s", i, st, err_text);
    }
    struct gpushards_region *r = region_map();
    H_CHECK(r != NULL, "region");
    int n = (int)r->header.device_count;
    region_unmap(r);
    H_CHECK(n == 3, "%d device entries for 3 GPUs", n);
    DIR *d = opendir(dir);
    struct dirent *e;
    int leftovers = 0;
    while ((e = readdir(d)) != NULL) leftovers += strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    H_CHECK(leftovers == 0, "%d temporary region files left behind", leftovers);
    return 0;
}

static int t_passthrough(const void *arg)
{
    const char *env[] = {"GPUSHARDS_REGION_PATH=/proc/gpushards/region", NULL};
    if (run(env, "link", "passthrough", NULL, NULL)) return 1;
    H_CHECK(strstr(err_text, "not capped or counted") != NULL, "no warning: %s", err_text);
    return 0;
}

static int t_no_region_with_limit(const void *arg)
{
    const char *env[] = {"GPUSHARDS_REGION_PATH=/proc/gpushards/region", "CUDA_DEVICE_MEMORY_LIMIT=1g", NULL};
    if (run(env, "link", "refused", NULL, NULL)) return 1;
    H_CHECK(strstr(err_text, "is unavailable") != NULL, "no message: %s", err_text);
    return 0;
}

static long startup_us(const char *const *env)
{
    long best = -1;
    for (int i = 0; i < 5; i++) {
        if (run(env, "link", "startup", NULL, NULL)) return -1;
        char *s = strstr(out_text, "startup_us ");
        long v = s ? atol(s + 11) : -1;
        if (best < 0 || v < best) best = v;
    }
    return best;
}

static int t_nodriver(const void *arg)
{
    program = NODRIVER;
    int r = run(NULL, "-", "-", NULL, NULL);
    program = CLIENT;
    if (r) return 1;
    H_CHECK(strstr(out_text, "libvgpu.so") != NULL, "not our hook: %s", out_text);
    return 0;
}

static int t_startup(const void *arg)
{
    const char *with[] = {"CUDA_DEVICE_MEMORY_LIMIT=1g", NULL};
    const char *without[] = {"-LD_PRELOAD", NULL};
    long a = startup_us(with), b = startup_us(without);
    H_CHECK(a >= 0 && b >= 0, "startup scenario failed: %s", err_text);
    printf("     cuInit + context + first allocation: %ld us with libvgpu.so, %ld us without\n", a, b);
    H_CHECK(a - b < 5000, "the interposer adds %ld us", a - b);
    return 0;
}

static int t_track_race(const void *arg)
{
    const char *bare[] = {"-LD_PRELOAD", NULL};
    program = TRACK_RACE;
    int r = run(bare, "-", "-", NULL, NULL);
    program = CLIENT;
    if (r) return 1;
    printf("%s", out_text);
    return 0;
}

#include "runner_limits.c"
#include "runner_compute.c"
#include "runner_fake.c"
#include "runner_subset.c"
#include "runner_elastic.c"
#include "runner_ipc.c"

int main(int argc, char **argv)
{
    const char *filter = argc > 1 ? argv[1] : NULL;
    setvbuf(stdout, NULL, _IOLBF, 0);
    static struct path_case paths[3][16];
    static const char *modes[] = {"link", "dlsym", "gpa"};
    static char names[3][16][64];
    struct t tests[256];
    int n = 0;
#define ADD(nm, f, a) tests[n++] = (struct t){nm, f, a}
    ADD("region-layout JSON matches the header", t_layout, NULL);
    ADD("libvgpu.so needs nothing newer than GLIBC_2.17", t_glibc, NULL);
    for (int m = 0; m < 3; m++) {
        struct {
            const char *scenario, *e0, *e1;
        } list[] = {
            {"alloc", NULL, NULL},
            {"pitch", NULL, NULL},
            {"null-out", NULL, NULL},
            {"managed", NULL, NULL},
            {"async", NULL, NULL},
            {"pool", NULL, NULL},
            {"vmm", NULL, NULL},
            {"array", NULL, NULL},
            {"legacy", NULL, NULL},
            {"context", "GPUSHARDS_CONTEXT_BYTES=100m", NULL},
            {"primary", "GPUSHARDS_CONTEXT_BYTES=100m", NULL},
            {"cap", "CUDA_DEVICE_MEMORY_LIMIT=1g", NULL},
            {"info", "CUDA_DEVICE_MEMORY_LIMIT=1g", NULL},
            {"nvml", "CUDA_DEVICE_MEMORY_LIMIT_0=1g", NULL},
            {"uncapped", NULL, NULL},
        };
        for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) {
            struct path_case *c = &paths[m][i];
            *c = (struct path_case){modes[m], list[i].scenario, {list[i].e0, list[i].e1, NULL}};
            snprintf(names[m][i], sizeof names[m][i], "%s: %s", modes[m], list[i].scenario);
            ADD(names[m][i], t_path, c);
        }
    }
    static const struct path_case misc[] = {
        {"gpa", "gpa-variants", {NULL}},
        {"link", "dlsym-next", {NULL}},
        {"link", "fork", {"CUDA_DEVICE_MEMORY_LIMIT=1g", NULL}},
        {"link", "live-limit", {"CUDA_DEVICE_MEMORY_LIMIT=1g", NULL}},
        {"link", "info-clamp", {"CUDA_DEVICE_MEMORY_LIMIT=8g", "GPUSHARDS_FAKE_GPUS=Small GPU:2g", NULL}},
        {"link", "full", {"GPUSHARDS_TRACK_CAPACITY=64", NULL}},
        {"gpa", "threads-async", {"CUDA_DEVICE_MEMORY_LIMIT=128m", NULL}},
        {"dlsym", "nvml-only", {"CUDA_DEVICE_MEMORY_LIMIT=1g", NULL}},
    };
    ADD("cuGetProcAddress: every version and per-thread-stream variant maps to a hook", t_path, &misc[0]);
    ADD("dlsym(RTLD_NEXT) still means after the caller", t_path, &misc[1]);
    ADD("fork: the child is accounted as its own process", t_path, &misc[2]);
    ADD("live limit change through the region", t_path, &misc[3]);
    ADD("a cap larger than the card reports the card", t_path, &misc[4]);
    ADD("a full allocation table: pointers sized by the driver, handles refused", t_path, &misc[5]);
    ADD("8 threads of stream-ordered alloc/free: bounded by the cap, back to zero", t_path, &misc[6]);
    ADD("NVML before any CUDA call reports the shard", t_path, &misc[7]);
    static const struct nvml_uninit_case nvml_uninit[] = {
        {"link", "held", {"CUDA_DEVICE_MEMORY_LIMIT_0=1g", NULL}},
        {"dlsym", "empty", {"CUDA_DEVICE_MEMORY_LIMIT_0=1g", NULL}},
        {"link", "closed", {"CUDA_DEVICE_MEMORY_LIMIT=abc", NULL}},
    };
    ADD("NVML before init and after shutdown: UNINITIALIZED, nothing written (CUDA memory held)", t_nvml_uninit,
        &nvml_uninit[0]);
    ADD("NVML before init and after shutdown: UNINITIALIZED, nothing written (no CUDA call)", t_nvml_uninit,
        &nvml_uninit[1]);
    ADD("NVML before init and after shutdown: UNINITIALIZED, nothing written (failed closed)", t_nvml_uninit,
        &nvml_uninit[2]);
#define POOL_CAP_ENV(limit, ctx) \
    "CUDA_DEVICE_MEMORY_LIMIT=" limit, "GPUSHARDS_CONTEXT_BYTES=" ctx, "GPUSHARDS_FAKE_CONTEXT_BYTES=" ctx, \
        "GPUSHARDS_FAKE_POOL_CHUNK=32m"
#define POOL_JITTER "GPUSHARDS_FAKE_POOL_JITTER_US=300"
    static const struct pool_cap_case pool_caps[] = {
        {"pools: 1 MiB pieces until refused, default growth step (4g cap, 527m context)", "link", "pool-cap",
         "1048576", "1", NULL, {POOL_CAP_ENV("4g", "527m"), "-GPUSHARDS_POOL_GROWTH_BYTES", NULL}},
        {"pools: 2 MiB pieces until refused (4g cap, 527m context)", "gpa", "pool-cap", "2097152", "1", NULL,
         {POOL_CAP_ENV("4g", "527m"), "GPUSHARDS_POOL_GROWTH_BYTES=32m", NULL}},
        {"pools: 3 MiB pieces until refused", "dlsym", "pool-cap", "3145728", "1", NULL,
         {POOL_CAP_ENV("1g", "300m"), "GPUSHARDS_POOL_GROWTH_BYTES=32m", NULL}},
        {"pools: 1 MiB pieces from a created pool until refused", "link", "pool-cap-from", "1048576", "1", NULL,
         {POOL_CAP_ENV("1g", "300m"), "GPUSHARDS_POOL_GROWTH_BYTES=32m", NULL}},
        {"pools: 8 threads of 1 MiB pieces until refused", "link", "pool-cap", "1048576", "8", NULL,
         {POOL_CAP_ENV("1g", "300m"), "GPUSHARDS_POOL_GROWTH_BYTES=32m", POOL_JITTER, NULL}},
        {"pools: 8 threads of 3 MiB pieces from a created pool until refused", "gpa", "pool-cap-from", "3145728",
         "8", NULL, {POOL_CAP_ENV("1g", "300m"), "GPUSHARDS_POOL_GROWTH_BYTES=32m", POOL_JITTER, NULL}},
        {"pools: the growth step the agent wrote into the region wins over the environment", "link", "pool-cap",
         "1048576", "1", "32m", {POOL_CAP_ENV("1g", "300m"), "GPUSHARDS_POOL_GROWTH_BYTES=2m", NULL}},
    };
#undef POOL_CAP_ENV
#undef POOL_JITTER
    for (size_t i = 0; i < sizeof pool_caps / sizeof pool_caps[0]; i++) ADD(pool_caps[i].name, t_pool_cap, &pool_caps[i]);
    ADD("8 threads x 10000 random alloc/free never pass the cap", t_threads, NULL);
    ADD("4 processes on one region never pass the cap together", t_multiprocess, NULL);
    ADD("a SIGKILLed holder's memory is reclaimed", t_sigkill_reclaim, NULL);
    ADD("fake NVML in another process sees the card's used memory, context included", t_fake_shared, NULL);
    ADD("a reused pid (start time differs) is reclaimed", t_pid_reuse, NULL);
    ADD("SIGKILL while holding the region lock: others go on within a second", t_sigkill_lock, NULL);
    static const struct corrupt_case corrupt[] = {
        {"magic", "bad magic"},       {"version", "layout version 2"}, {"checksum", "checksum mismatch"},
        {"truncated", "is truncated"}, {"short", "is truncated"},
    };
    static char cnames[5][64];
    for (int i = 0; i < 5; i++) {
        snprintf(cnames[i], sizeof cnames[i], "region with %s %s fails closed", corrupt[i].what,
                 i < 3 ? "wrong" : "size");
        ADD(cnames[i], t_corrupt, &corrupt[i]);
    }
    static const struct env_case bad[] = {
        {"CUDA_DEVICE_MEMORY_LIMIT=abc", "not a size"},
        {"CUDA_DEVICE_MEMORY_LIMIT=-1", "not a size"},
        {"CUDA_DEVICE_MEMORY_LIMIT=1e99", "not a size"},
        {"CUDA_DEVICE_MEMORY_LIMIT=", "not a size"},
        {"CUDA_DEVICE_MEMORY_LIMIT=99999999999999999999", "not a size"},
        {"CUDA_DEVICE_MEMORY_LIMIT=17179869184t", "not a size"},
        {"CUDA_DEVICE_MEMORY_LIMIT=1.5g", "not a size"},
        {"CUDA_DEVICE_MEMORY_LIMIT_0=12x", "not a size"},
        {"GPUSHARDS_CONTEXT_BYTES=lots", "not a size"},
        {"GPUSHARDS_POOL_GROWTH_BYTES=lots", "not a size"},
    };
    static char bnames[10][96];
    for (int i = 0; i < 10; i++) {
        snprintf(bnames[i], sizeof bnames[i], "bad env %s fails closed", bad[i].var);
        ADD(bnames[i], t_bad_env, &bad[i]);
    }
    static const char *good[] = {"CUDA_DEVICE_MEMORY_LIMIT=1073741824", "CUDA_DEVICE_MEMORY_LIMIT=1048576k",
                                 "CUDA_DEVICE_MEMORY_LIMIT=1024M", "CUDA_DEVICE_MEMORY_LIMIT=1G",
                                 "CUDA_DEVICE_MEMORY_LIMIT=1g"};
    static char gnames[5][96];
    for (int i = 0; i < 5; i++) {
        snprintf(gnames[i], sizeof gnames[i], "env %s is 1 GiB", good[i]);
        ADD(gnames[i], t_good_env, good[i]);
    }
    ADD("CUDA_DEVICE_MEMORY_LIMIT_<i> overrides the global limit for ordinal i", t_per_device_env, NULL);
    ADD("a limit the agent wrote into the region wins over the environment", t_region_limit_wins, NULL);
    ADD("context size read from the region", t_context_from_region, NULL);
    ADD("gpushards-region prepares a limit by UUID that wins over env and ordinals", t_tool, NULL);
    static const struct visible_case vis[] = {
        {"2,0", "0", "2", "2"},
        {"2,0", "1", "0", "2"},
        {"1", "0", "1", "1"},
        {"GPU-fa4e5000-0000-4000-8000-000000000002,GPU-fa4e5000-0000-4000-8000-000000000000", "0", "2", "2"},
        {"GPU-fa4e5000-0000-4000-8000-000000000001", "0", "1", "1"},
        {"1,7,0", "0", "1", "1"},
    };
    static char vnames[6][160];
    for (int i = 0; i < 6; i++) {
        snprintf(vnames[i], sizeof vnames[i], "CUDA_VISIBLE_DEVICES=%.90s: ordinal %s charges GPU %s", vis[i].cvd,
                 vis[i].ordinal, vis[i].phys);
        ADD(vnames[i], t_visible, &vis[i]);
    }
    static const struct visible_all_case every[] = {
        {"", "0,1,2"},
        {"2,0,1", "2,0,1"},
        {"GPU-fa4e5000-0000-4000-8000-000000000001,GPU-fa4e5000-0000-4000-8000-000000000002,"
         "GPU-fa4e5000-0000-4000-8000-000000000000",
         "1,2,0"},
        /* An index then a UUID, or the reverse: the list ends where its kind changes. */
        {"2,GPU-fa4e5000-0000-4000-8000-000000000000", "2"},
        {"GPU-fa4e5000-0000-4000-8000-000000000001,2", "1"},
    };
    static char enames[5][200];
    for (int i = 0; i < 5; i++) {
        snprintf(enames[i], sizeof enames[i], "every ordinal at once under CUDA_VISIBLE_DEVICES=%.100s charges GPUs %s",
                 every[i].cvd[0] ? every[i].cvd : "(unset)", every[i].phys);
        ADD(enames[i], t_visible_all, &every[i]);
    }
    ADD("one shard's processes under different CUDA_VISIBLE_DEVICES forms charge the same physical GPU",
        t_visible_shared, NULL);
    ADD("8 processes creating the region at once", t_race, NULL);
    ADD("no region and no limit: pass-through", t_passthrough, NULL);
    ADD("no region but a limit: fails closed", t_no_region_with_limit, NULL);
    ADD("a global dlsym finds no driver entry points until the driver is loaded", t_nodriver, NULL);
    ADD("gs_track: an update never lands on a slot freed and reused meanwhile (slot race)", t_track_race, NULL);
    ADD("startup cost of the interposer", t_startup, NULL);
    add_limits_tests(tests, &n);
    add_compute_tests(tests, &n);
    add_fake_tests(tests, &n);
    add_subset_tests(tests, &n);
    add_elastic_tests(tests, &n);
    add_ipc_tests(tests, &n);

    for (int i = 0; i < n; i++) {
        if (filter && !strstr(tests[i].name, filter)) continue;
        h_run(tests[i].name, in_fresh_dir, &tests[i]);
    }
    return h_finish();
}
