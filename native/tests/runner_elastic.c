/* runner_elastic.c — elastic memory (issue #30) and a neighbour's pressure
 * (issue #31): the runner plays the agent.  It drives the fake driver's
 * checkpoint API from a process of its own (gpushards-checkpoint, as the
 * agent calls it through koffi).  Included by runner.c after
 * runner_limits.c (it shares their helpers); not compiled on its own. */

static const char *const bare_env[] = {"-LD_PRELOAD", NULL};

/* gpushards-checkpoint OP PID [ARG]: its exit status (-1: it did not end), its stdout in out_text. */
static int ckpt(const char *op, pid_t pid, const char *arg)
{
    char p[16];
    snprintf(p, sizeof p, "%d", (int)pid);
    struct proc t;
    if (spawn_program(&t, CHECKPOINT_TOOL, bare_env, op, p, arg, NULL) != 0) return -1;
    int st = await(&t, 30000);
    slurp(t.out, out_text, sizeof out_text);
    slurp(t.err, err_text, sizeof err_text);
    return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#define CKPT_SAYS(op, pid, arg, status, said)                                                            \
    H_CHECK(ckpt(op, pid, arg) == (status) && strcmp(out_text, said "\n") == 0,                          \
            "%s %d: wanted \"%s\" (exit %d), got \"%s\" (%s)", op, (int)(pid), said, status, out_text, err_text)
#define CKPT_OK(op, pid) CKPT_SAYS(op, pid, NULL, 0, "ok")
#define CKPT_STATE(pid, state) CKPT_SAYS("state", pid, NULL, 0, state)
#define CKPT_REFUSED(op, pid, error) CKPT_SAYS(op, pid, NULL, 1, error)

/* The fake NVML's listing of GPU 0, from the host, in out_text. */
static int listing(void)
{
    return run(bare_env, "link", "procs", "0", NULL);
}

static int listed(pid_t pid)
{
    char want[32];
    snprintf(want, sizeof want, "pid %d ", (int)pid);
    return strstr(out_text, want) != NULL;
}

/* A target under the interposer with 256 MiB written, waiting for SIGUSR1. */
static int start_target(struct proc *t)
{
    const char *env[] = {"CUDA_DEVICE_MEMORY_LIMIT=4g", NULL};
    if (spawn(t, env, "link", "ckpt-target", "256", NULL) != 0) return h_fail("fork");
    if (await_text(t, "ready") != 0) {
        kill_wait(t);
        return h_fail("the target did not get ready: %s", err_text);
    }
    return 0;
}

/* lock -> the target's call waits -> checkpoint (its memory leaves the card,
 * NVML no longer lists it) -> restore -> unlock -> the call goes on and reads
 * back what was written before. */
static int round_trip(struct proc *t)
{
    CKPT_STATE(t->pid, "running");
    H_CHECK(listing() == 0 && listed(t->pid), "the running target is not listed:\n%s", out_text);
    CKPT_OK("lock", t->pid);
    CKPT_STATE(t->pid, "locked");
    kill(t->pid, SIGUSR1);
    H_CHECK(await_text(t, "calling") == 0, "the target did not call: %s", err_text);
    CKPT_OK("checkpoint", t->pid);
    CKPT_STATE(t->pid, "checkpointed");
    H_CHECK(listing() == 0 && !listed(t->pid) && strstr(out_text, "card 0\n") != NULL,
            "the checkpointed target still holds the card:\n%s", out_text);
    CKPT_OK("restore", t->pid);
    CKPT_STATE(t->pid, "locked");
    char want[64];
    snprintf(want, sizeof want, "pid %d %llu\n", (int)t->pid, 556 * MiB); /* 256m + the 300m context */
    H_CHECK(listing() == 0 && strstr(out_text, want) != NULL, "restored, missing \"%s\" in:\n%s", want, out_text);
    slurp(t->out, out_text, sizeof out_text);
    H_CHECK(strstr(out_text, "done") == NULL, "the locked target's call returned: %s", out_text);
    CKPT_OK("unlock", t->pid);
    H_CHECK(await_text(t, "done ok") == 0, "the call did not go on, or read other data: %s", err_text);
    int st = await(t, 30000);
    H_CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "the target exited %d: %s", st, err_text);
    return 0;
}

static int t_ckpt_round_trip(const void *arg)
{
    struct proc t;
    if (start_target(&t)) return 1;
    int r = round_trip(&t);
    kill_wait(&t);
    return r;
}

/* A restore onto a card without room is refused and leaves the process
 * checkpointed; once room comes back it succeeds. */
static int restore_full(struct proc *t, struct proc *filler)
{
    CKPT_OK("lock", t->pid);
    CKPT_OK("checkpoint", t->pid);
    int ok = spawn_program(filler, HIDDEN_ALLOC, bare_env, "0", "81620m", "hold", NULL) == 0 &&
             await_text(filler, "holding") == 0;
    H_CHECK(ok, "fake-hidden-alloc did not fill the card: %s", err_text);
    CKPT_REFUSED("restore", t->pid, "CUDA_ERROR_OUT_OF_MEMORY");
    CKPT_STATE(t->pid, "checkpointed");
    CKPT_REFUSED("unlock", t->pid, "CUDA_ERROR_ILLEGAL_STATE");
    kill_wait(filler);
    filler->pid = 0;
    CKPT_OK("restore", t->pid);
    CKPT_OK("unlock", t->pid);
    kill(t->pid, SIGUSR1);
    H_CHECK(await_text(t, "done ok") == 0, "after the restore the data did not read back: %s", err_text);
    return 0;
}

static int t_ckpt_restore_full(const void *arg)
{
    struct proc t, filler = {0};
    if (start_target(&t)) return 1;
    int r = restore_full(&t, &filler);
    kill_wait(&t);
    if (filler.pid > 0) kill_wait(&filler);
    return r;
}

/* Each call refused in each state it does not belong to, as the API documents. */
static int wrong_states(struct proc *t)
{
    CKPT_REFUSED("checkpoint", t->pid, "CUDA_ERROR_ILLEGAL_STATE");
    CKPT_REFUSED("restore", t->pid, "CUDA_ERROR_ILLEGAL_STATE");
    CKPT_REFUSED("unlock", t->pid, "CUDA_ERROR_ILLEGAL_STATE");
    CKPT_OK("lock", t->pid);
    CKPT_REFUSED("lock", t->pid, "CUDA_ERROR_ILLEGAL_STATE");
    CKPT_REFUSED("restore", t->pid, "CUDA_ERROR_ILLEGAL_STATE");
    CKPT_OK("checkpoint", t->pid);
    CKPT_REFUSED("checkpoint", t->pid, "CUDA_ERROR_ILLEGAL_STATE");
    CKPT_REFUSED("lock", t->pid, "CUDA_ERROR_ILLEGAL_STATE");
    CKPT_REFUSED("unlock", t->pid, "CUDA_ERROR_ILLEGAL_STATE");
    CKPT_OK("restore", t->pid);
    CKPT_REFUSED("restore", t->pid, "CUDA_ERROR_ILLEGAL_STATE");
    CKPT_OK("unlock", t->pid);
    CKPT_STATE(t->pid, "running");
    H_CHECK(ckpt("restore-tid", t->pid, NULL) == 0 && atoi(out_text) == (int)t->pid, "restore-tid: %s", out_text);
    /* A process with no CUDA in it (this runner), and no process at all. */
    CKPT_REFUSED("state", getpid(), "CUDA_ERROR_INVALID_VALUE");
    CKPT_REFUSED("lock", getpid(), "CUDA_ERROR_INVALID_VALUE");
    struct proc gone;
    H_CHECK(spawn_program(&gone, "/bin/true", bare_env, NULL, NULL, NULL, NULL) == 0 && await(&gone, 10000) == 0,
            "/bin/true");
    CKPT_REFUSED("state", gone.pid, "CUDA_ERROR_INVALID_VALUE");
    /* Bad arguments are the tool's to refuse. */
    H_CHECK(ckpt("state", 0, NULL) == 2 && ckpt("lock", t->pid, "soon") == 2 && ckpt("thaw", t->pid, NULL) == 2,
            "bad arguments were taken: %s", err_text);
    return 0;
}

static int t_ckpt_wrong_states(const void *arg)
{
    struct proc t;
    if (start_target(&t)) return 1;
    int r = wrong_states(&t);
    kill_wait(&t);
    return r;
}

/* "pid 12 ..." is a sleeping process (its state in /proc/PID/stat). */
static int sleeping(pid_t pid)
{
    char path[64], st[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    slurp(path, st, sizeof st);
    const char *q = strrchr(st, ')');
    return q != NULL && q[2] == 'S';
}

/* A lock waits for the calls under way; past its timeout it gives up with
 * CUDA_ERROR_NOT_READY and leaves the process running. */
static int t_ckpt_lock_timeout(const void *arg)
{
    const char *env[] = {"-LD_PRELOAD", "GPUSHARDS_FAKE_KERNEL_US=600000000", NULL};
    struct proc t;
    H_CHECK(spawn(&t, env, "link", "busy-sync", NULL, NULL) == 0, "fork");
    int in_call = await_text(&t, "syncing") == 0;
    /* Printed, then asleep: inside cuEventSynchronize (single-threaded). */
    for (int i = 0; in_call && !sleeping(t.pid) && i < 4000; i++) usleep(1000);
    int r = 0;
    if (!in_call || !sleeping(t.pid)) r = h_fail("the target never waited in cuEventSynchronize: %s", err_text);
    else if (ckpt("lock", t.pid, "50") != 1 || strcmp(out_text, "CUDA_ERROR_NOT_READY\n") != 0)
        r = h_fail("a lock of a process in a call for 10 minutes: %s (%s)", out_text, err_text);
    else if (ckpt("state", t.pid, NULL) != 0 || strcmp(out_text, "running\n") != 0)
        r = h_fail("after the timed-out lock: %s", out_text);
    kill_wait(&t);
    return r;
}

/* A process that dies checkpointed gives its entry back like any dead
 * process: the driver no longer knows it, and nothing of it is on the card. */
static int died_checkpointed(struct proc *t)
{
    CKPT_OK("lock", t->pid);
    CKPT_OK("checkpoint", t->pid);
    kill_wait(t);
    H_CHECK(listing() == 0 && strstr(out_text, "card 0\n") != NULL, "after the death:\n%s", out_text);
    CKPT_REFUSED("state", t->pid, "CUDA_ERROR_INVALID_VALUE");
    CKPT_REFUSED("restore", t->pid, "CUDA_ERROR_INVALID_VALUE");
    /* And its moved memory was never counted again. */
    H_CHECK(listing() == 0 && strstr(out_text, "card 0\n") != NULL, "after a restore of the dead:\n%s", out_text);
    return 0;
}

static int t_ckpt_died(const void *arg)
{
    struct proc t;
    if (start_target(&t)) return 1;
    return died_checkpointed(&t);
}

/* GPUSHARDS_FAKE_MOVE_GATE: a caller's checkpoint waits at a count of 0, its
 * target still locked, and goes on once given a pass (taking it); a restore
 * waits until the file is gone. */
static int write_text(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    ssize_t n = write(fd, text, strlen(text));
    return close(fd) == 0 && n == (ssize_t)strlen(text) ? 0 : -1;
}

/* Starts gpushards-checkpoint OP on the target through the gate; 0 once it waits
 * there (asleep, not ended), else it is killed. */
static int gated_call(struct proc *c, const char *gate_env, const char *op, pid_t target)
{
    const char *env[] = {"-LD_PRELOAD", gate_env, NULL};
    char pid[16];
    snprintf(pid, sizeof pid, "%d", (int)target);
    if (spawn_program(c, CHECKPOINT_TOOL, env, op, pid, NULL, NULL) != 0) return h_fail("fork");
    for (int i = 0; !sleeping(c->pid) && i < 4000; i++) usleep(1000);
    int st;
    if (waitpid(c->pid, &st, WNOHANG) != 0 || !sleeping(c->pid)) {
        kill_wait(c);
        slurp(c->out, out_text, sizeof out_text);
        return h_fail("the gated %s did not wait: %s", op, out_text);
    }
    return 0;
}

static int gated(struct proc *t)
{
    char gate[320], gate_env[400], count[32];
    snprintf(gate, sizeof gate, "%s/gate", dir);
    snprintf(gate_env, sizeof gate_env, "GPUSHARDS_FAKE_MOVE_GATE=%s", gate);
    struct proc c;
    H_CHECK(write_text(gate, "0\n") == 0, "cannot write %s", gate);
    CKPT_OK("lock", t->pid);
    if (gated_call(&c, gate_env, "checkpoint", t->pid)) return 1;
    int locked = ckpt("state", t->pid, NULL) == 0 && strcmp(out_text, "locked\n") == 0;
    int passed = write_text(gate, "1\n") == 0;
    int st = await(&c, 30000);
    slurp(c.out, out_text, sizeof out_text);
    H_CHECK(locked && passed, "while the checkpoint waited: locked %d, the pass written %d", locked, passed);
    H_CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0 && strcmp(out_text, "ok\n") == 0,
            "the checkpoint given a pass: %d %s", st, out_text);
    CKPT_STATE(t->pid, "checkpointed");
    slurp(gate, count, sizeof count);
    H_CHECK(strcmp(count, "0\n") == 0, "the pass was not taken: %s", count);
    if (gated_call(&c, gate_env, "restore", t->pid)) return 1;
    int still = ckpt("state", t->pid, NULL) == 0 && strcmp(out_text, "checkpointed\n") == 0;
    int gone = unlink(gate) == 0;
    st = await(&c, 30000);
    H_CHECK(still && gone, "while the restore waited: checkpointed %d, the gate removed %d", still, gone);
    H_CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "the restore once the gate was gone: %d", st);
    CKPT_STATE(t->pid, "locked");
    CKPT_OK("unlock", t->pid);
    kill(t->pid, SIGUSR1);
    H_CHECK(await_text(t, "done ok") == 0, "after the gated moves the data did not read back: %s", err_text);
    return 0;
}

static int t_ckpt_gate(const void *arg)
{
    struct proc t;
    if (start_target(&t)) return 1;
    int r = gated(&t);
    kill_wait(&t);
    return r;
}

/* ---- the wake gate ------------------------------------------------------------ */
/* The agent's in-place update of a 4-byte field of the limits file's header. */
static int limits_header_store(size_t offset, uint32_t value)
{
    chmod(limits_path, 0644);
    int fd = open(limits_path, O_RDWR);
    chmod(limits_path, 0444);
    if (fd < 0) return h_fail("open %s", limits_path);
    struct gpushards_limits *l = mmap(NULL, sizeof *l, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (l == MAP_FAILED) return h_fail("mmap");
    __atomic_store_n((uint32_t *)(void *)((char *)&l->header + offset), value, __ATOMIC_RELEASE);
    munmap(l, sizeof *l);
    return 0;
}

static int mark(uint32_t memory_state)
{
    return limits_header_store(offsetof(struct gpushards_limits_header, memory_state), memory_state);
}

/* The agent's watch on the region file: inotify on this test's folder (the
 * file may not exist yet), modifications of "region" only. */
static int watch_region(void)
{
    int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd >= 0 && inotify_add_watch(fd, dir, IN_MODIFY) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Rings heard within ms (0: only those already queued). */
static int rings_heard(int fd, int ms)
{
    int rings = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, rings > 0 ? 0 : ms) <= 0) return rings;
        char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
        ssize_t n = read(fd, buf, sizeof buf);
        for (ssize_t off = 0; off < n;) {
            const struct inotify_event *e = (const struct inotify_event *)(void *)(buf + off);
            if (e->len > 0 && strcmp(e->name, "region") == 0) rings++;
            off += (ssize_t)sizeof *e + e->len;
        }
    }
}

static uint64_t header_field(size_t offset)
{
    struct gpushards_region *r = region_map();
    if (r == NULL) return UINT64_MAX;
    uint64_t v = __atomic_load_n((uint64_t *)(void *)((char *)&r->header + offset), __ATOMIC_ACQUIRE);
    region_unmap(r);
    return v;
}

static uint64_t monotonic_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static int suspended_limits(void)
{
    const struct lim_entry e[] = {{0, 4 * GiB, 0, 0}};
    return write_limits(e, 1, NULL);
}

/* A call of a resident process of a shard the agent then suspends: it waits,
 * rings (the count, its time, an inotify event on the region), and goes on
 * once the shard is resident again. */
static int wake_on(const char *call, struct proc *t, int watch)
{
    if (mark(GPUSHARDS_MEMORY_SUSPENDED)) return 1;
    uint64_t before = monotonic_ns();
    kill(t->pid, SIGUSR1);
    H_CHECK(await_text(t, "calling") == 0, "%s: the process did not call: %s", call, err_text);
    H_CHECK(rings_heard(watch, 30000) > 0, "%s: no ring heard on the region file", call);
    uint64_t requests = header_field(offsetof(struct gpushards_region_header, wake_requests));
    uint64_t at = header_field(offsetof(struct gpushards_region_header, wake_requested_ns));
    H_CHECK(requests >= 1 && requests != UINT64_MAX, "%s: wake_requests %llu", call, (unsigned long long)requests);
    H_CHECK(at >= before && at <= monotonic_ns(), "%s: wake_requested_ns %llu not within the call", call,
            (unsigned long long)at);
    H_CHECK(header_field(offsetof(struct gpushards_region_header, bell)) == 0, "%s: the bell is not zero", call);
    slurp(t->out, out_text, sizeof out_text);
    H_CHECK(strstr(out_text, "done") == NULL, "%s went on while the shard was suspended: %s", call, out_text);
    if (mark(GPUSHARDS_MEMORY_RESIDENT)) return 1;
    H_CHECK(await_text(t, "done 0") == 0, "%s: did not go on once resident: %s", call, err_text);
    int st = await(t, 30000);
    slurp(t->err, err_text, sizeof err_text);
    H_CHECK(st == 0, "%s: exited %d: %s", call, st, err_text);
    H_CHECK(strstr(err_text, "waits for the agent to resume it") != NULL, "%s: no word of the wait: %s", call,
            err_text);
    return 0;
}

static int t_wake(const void *arg)
{
    const char *call = arg;
    if (suspended_limits()) return 1;
    const char *env[] = {limits_env, NULL};
    struct proc t;
    H_CHECK(start_ready(&t, env, "wake-call", call) == 0, "%s: not ready: %s", call, err_text);
    int watch = watch_region();
    int r = watch >= 0 ? wake_on(call, &t, watch) : h_fail("inotify");
    if (watch >= 0) close(watch);
    kill_wait(&t);
    return r;
}

/* A process that starts while the shard is suspended waits at its first
 * call that needs the GPU (its context), and rings. */
static int start_suspended(struct proc *t, int watch)
{
    H_CHECK(rings_heard(watch, 30000) > 0, "no ring from a process starting in a suspended shard");
    slurp(t->out, out_text, sizeof out_text);
    H_CHECK(strstr(out_text, "ready") == NULL, "it got a context while suspended: %s", out_text);
    if (mark(GPUSHARDS_MEMORY_RESIDENT)) return 1;
    H_CHECK(await_text(t, "ready") == 0, "not ready once resident: %s", err_text);
    kill(t->pid, SIGUSR1);
    H_CHECK(await_text(t, "done 0") == 0, "its allocation failed: %s", err_text);
    return 0;
}

static int t_wake_at_start(const void *arg)
{
    if (suspended_limits() || mark(GPUSHARDS_MEMORY_SUSPENDED)) return 1;
    const char *env[] = {limits_env, NULL};
    int watch = watch_region();
    H_CHECK(watch >= 0, "inotify");
    struct proc t;
    int r = spawn(&t, env, "link", "wake-call", "alloc", NULL) == 0 ? start_suspended(&t, watch) : h_fail("fork");
    close(watch);
    kill_wait(&t);
    return r;
}

/* A resident shard's calls never ring: no event on the region, no count. */
static int t_wake_resident(const void *arg)
{
    if (suspended_limits()) return 1;
    const char *env[] = {limits_env, NULL};
    int watch = watch_region();
    H_CHECK(watch >= 0, "inotify");
    int r = run(env, "link", "wake-all", NULL, NULL);
    int rings = rings_heard(watch, 0);
    close(watch);
    if (r) return 1;
    H_CHECK(rings == 0, "a resident shard rang %d times", rings);
    uint64_t requests = header_field(offsetof(struct gpushards_region_header, wake_requests));
    H_CHECK(requests == 0, "wake_requests %llu", (unsigned long long)requests);
    return 0;
}

/* ---- a neighbour's pressure (issue #31) ------------------------------------------ */
#define SMALL_GPU "GPUSHARDS_FAKE_GPUS=Small GPU:4g"

/* The shard: a 2 GiB cap on a 4 GiB card, its context charged as the fake's
 * costs, and how long it retries what the driver refuses inside the cap. */
static int pressure_limits(uint32_t wait_ms)
{
    const struct lim_entry e[] = {{0, 2 * GiB, 300 * MiB, 0}};
    if (write_limits(e, 1, NULL)) return 1;
    return limits_header_store(offsetof(struct gpushards_limits_header, pressure_wait_ms), wait_ms);
}

static uint64_t pressure_count(void)
{
    struct gpushards_region *r = region_map();
    if (r == NULL) return UINT64_MAX;
    struct gpushards_device *d = device(r, 0);
    uint64_t v = d != NULL ? __atomic_load_n(&d->pressure_count, __ATOMIC_ACQUIRE) : UINT64_MAX;
    region_unmap(r);
    return v;
}

/* A shard's process under its cap, ready to allocate by path; expect as the
 * client's "pressure" scenario takes it. */
static int start_pressure(struct proc *t, const char *const *env, const char *path, const char *expect)
{
    if (spawn(t, env, "link", "pressure", path, expect) != 0) return h_fail("fork");
    if (await_text(t, "ready") != 0) {
        kill_wait(t);
        return h_fail("%s: not ready: %s", path, err_text);
    }
    return 0;
}

/* A process outside the interposer takes all but 16 MiB of what the card
 * has free (the shard's process holds its 300 MiB context). */
static int grab(struct proc *offender)
{
    const char *env[] = {"-LD_PRELOAD", SMALL_GPU, NULL};
    if (spawn_program(offender, HIDDEN_ALLOC, env, "0", "3780m", "hold", NULL) != 0 ||
        await_text(offender, "holding") != 0)
        return h_fail("the offender did not take the card: %s", err_text);
    return 0;
}

/* The shard allocates while the card is full; the runner, as the agent's
 * fence, hears the pressure ring and kills the offender; the allocation,
 * retried meanwhile, succeeds. */
static int fence_frees(const char *path, struct proc *t, struct proc *offender, int watch)
{
    kill(t->pid, SIGUSR1);
    H_CHECK(await_text(t, "calling") == 0, "%s: did not call: %s", path, err_text);
    H_CHECK(rings_heard(watch, 30000) > 0, "%s: no pressure ring on the region file", path);
    uint64_t count = pressure_count();
    H_CHECK(count >= 1 && count != UINT64_MAX, "%s: pressure_count %llu", path, (unsigned long long)count);
    uint64_t wakes = header_field(offsetof(struct gpushards_region_header, wake_requests));
    H_CHECK(wakes == 0, "%s: a pressure ring counted as a wake (%llu)", path, (unsigned long long)wakes);
    kill_wait(offender);
    offender->pid = 0;
    int st = await(t, 30000);
    slurp(t->out, out_text, sizeof out_text);
    slurp(t->err, err_text, sizeof err_text);
    H_CHECK(st == 0, "%s: the shard's allocation failed once the memory was free (%d): %s %s", path, st, out_text,
            err_text);
    return 0;
}

static int t_pressure_fenced(const void *arg)
{
    const char *path = arg;
    if (pressure_limits(600000)) return 1; /* the bound never decides: the fence does */
    const char *env[] = {limits_env, SMALL_GPU, NULL};
    struct proc t, offender = {0};
    if (start_pressure(&t, env, path, "ok")) return 1;
    int watch = grab(&offender) == 0 ? watch_region() : -1;
    int r = watch >= 0 ? fence_frees(path, &t, &offender, watch) : 1;
    if (watch >= 0) close(watch);
    kill_wait(&t);
    if (offender.pid > 0) kill_wait(&offender);
    return r;
}

/* No fence: the retries give up after the bound, the caller sees the
 * driver's out of memory, the charge rolled back (the client checks both). */
static int unfenced(const char *path, struct proc *t, const char *bound)
{
    kill(t->pid, SIGUSR1);
    int st = await(t, 30000);
    slurp(t->out, out_text, sizeof out_text);
    slurp(t->err, err_text, sizeof err_text);
    H_CHECK(st == 0, "%s: %s %s", path, out_text, err_text);
    uint64_t count = pressure_count();
    H_CHECK(count >= 1 && count != UINT64_MAX, "%s: pressure_count %llu", path, (unsigned long long)count);
    return 0;
}

static int t_pressure_unfenced(const void *arg)
{
    const char *path = arg;
    if (pressure_limits(100)) return 1;
    const char *env[] = {limits_env, SMALL_GPU, NULL};
    struct proc t, offender = {0};
    if (start_pressure(&t, env, path, "100")) return 1;
    int r = grab(&offender) == 0 ? unfenced(path, &t, "100") : 1;
    kill_wait(&t);
    if (offender.pid > 0) kill_wait(&offender);
    return r;
}

/* Outside a shard GPUSHARDS_PRESSURE_WAIT_MS=0 turns the retry off: the
 * refusal comes at once, and is still rung. */
static int t_pressure_env_off(const void *arg)
{
    const char *env[] = {"CUDA_DEVICE_MEMORY_LIMIT=2g", "GPUSHARDS_PRESSURE_WAIT_MS=0", SMALL_GPU, NULL};
    struct proc t, offender = {0};
    if (start_pressure(&t, env, "linear", "0")) return 1;
    int r = grab(&offender) == 0 ? unfenced("linear", &t, "0") : 1;
    kill_wait(&t);
    if (offender.pid > 0) kill_wait(&offender);
    return r;
}

/* Inside a shard the environment may only shorten the agent's bound: 0
 * refuses at once; a longer wait than the file's is not granted (the client
 * checks the give-up comes after the file's 100 ms, well before 600 s). */
static int t_pressure_env_inside(const void *arg)
{
    const int longer = arg != NULL;
    if (pressure_limits(longer ? 100 : 600000)) return 1;
    const char *env[] = {limits_env, longer ? "GPUSHARDS_PRESSURE_WAIT_MS=600000" : "GPUSHARDS_PRESSURE_WAIT_MS=0",
                         SMALL_GPU, NULL};
    const char *bound = longer ? "100" : "0";
    struct proc t, offender = {0};
    if (start_pressure(&t, env, "linear", bound)) return 1;
    int r = grab(&offender) == 0 ? unfenced("linear", &t, bound) : 1;
    kill_wait(&t);
    if (offender.pid > 0) kill_wait(&offender);
    return r;
}

static void add_elastic_tests(struct t *tests, int *n)
{
#define ADDE(nm, f, a) tests[(*n)++] = (struct t){nm, f, a}
    ADDE("fake checkpoint API: lock, call waits, checkpoint frees the card, restore, unlock, call goes on, data intact",
         t_ckpt_round_trip, NULL);
    ADDE("fake checkpoint API: a restore onto a full card is refused (OUT_OF_MEMORY, still checkpointed), then succeeds",
         t_ckpt_restore_full, NULL);
    ADDE("fake checkpoint API: calls in the wrong state are ILLEGAL_STATE, a pid without CUDA INVALID_VALUE",
         t_ckpt_wrong_states, NULL);
    ADDE("fake checkpoint API: a lock times out with NOT_READY while a call is under way, the process still running",
         t_ckpt_lock_timeout, NULL);
    ADDE("fake checkpoint API: a process that dies checkpointed is forgotten and leaves nothing on the card",
         t_ckpt_died, NULL);
    ADDE("fake checkpoint API: GPUSHARDS_FAKE_MOVE_GATE holds the caller's checkpoint at 0 passes and its restore until the gate is gone",
         t_ckpt_gate, NULL);
    static const char *const calls[] = {"alloc",    "launch",      "htod",       "dtoh-async",  "memset",
                                        "ctx-sync", "stream-sync", "event-sync", "stream-wait", "htod-ptds"};
    static char names[10][120];
    for (int i = 0; i < 10; i++) {
        snprintf(names[i], sizeof names[i], "wake gate: %s of a suspended shard waits, rings the bell, goes on once resident",
                 calls[i]);
        ADDE(names[i], t_wake, calls[i]);
    }
    ADDE("wake gate: a process that starts while its shard is suspended waits at its context and rings",
         t_wake_at_start, NULL);
    ADDE("wake gate: a resident shard's calls never ring (no inotify event, no count)", t_wake_resident, NULL);
    static const char *const fenced[] = {"linear", "managed", "pitch", "legacy", "vmm",  "async",
                                         "array",  "mipmap",  "ctx",   "graph",  "heap"};
    static char fnames[11][120];
    for (int i = 0; i < 11; i++) {
        snprintf(fnames[i], sizeof fnames[i],
                 "pressure: %s refused by a full card inside the cap rings, is retried, succeeds once the fence frees it",
                 fenced[i]);
        ADDE(fnames[i], t_pressure_fenced, fenced[i]);
    }
    static const char *const unfenced_paths[] = {"linear", "vmm", "async", "array"};
    static char unames[4][120];
    for (int i = 0; i < 4; i++) {
        snprintf(unames[i], sizeof unames[i],
                 "pressure: %s with no fence gives up after the bound, the driver's OOM, the charge rolled back",
                 unfenced_paths[i]);
        ADDE(unames[i], t_pressure_unfenced, unfenced_paths[i]);
    }
    ADDE("pressure: GPUSHARDS_PRESSURE_WAIT_MS=0 outside a shard refuses at once, and still rings",
         t_pressure_env_off, NULL);
    ADDE("pressure: inside a shard GPUSHARDS_PRESSURE_WAIT_MS=0 turns the agent's retry off for that process",
         t_pressure_env_inside, NULL);
    ADDE("pressure: inside a shard a GPUSHARDS_PRESSURE_WAIT_MS longer than the agent's bound is not granted",
         t_pressure_env_inside, "longer");
#undef ADDE
}
