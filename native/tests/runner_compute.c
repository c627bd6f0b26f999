/* runner_compute.c — tests of the compute share (launch admission against
 * the per-GPU ledger, docs/compute.md) on the fake driver, whose launches
 * take simulated kernel time (fake_launch.c).  Included by runner.c; not
 * compiled on its own.  Nothing here asserts a timing: each test waits for
 * a condition and checks what the ledger says. */

#include "gpushards_ledger.h"

static char ledger_dir[320], ledger_env[400];

static struct gpushards_ledger *ledger_map(void)
{
    char path[700];
    snprintf(path, sizeof path, "%s/GPU-fa4e5000-0000-4000-8000-000000000000", ledger_dir);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return NULL;
    void *m = mmap(NULL, sizeof(struct gpushards_ledger), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    return m == MAP_FAILED ? NULL : m;
}

static const struct gpushards_ledger_member *ledger_member(const struct gpushards_ledger *L, const char *shard)
{
    for (unsigned i = 0; i < GPUSHARDS_LEDGER_MEMBERS; i++)
        if (strcmp(L->members[i].shard, shard) == 0) return &L->members[i];
    return NULL;
}

static void ledger_fresh(void)
{
    snprintf(ledger_dir, sizeof ledger_dir, "%s/ledger", dir);
    snprintf(ledger_env, sizeof ledger_env, "GPUSHARDS_LEDGER_DIR=%s", ledger_dir);
    mkdir(ledger_dir, 0777);
}

static int t_compute_off(const void *arg)
{
    /* No ledger folder: launches pass and no ledger appears. */
    ledger_fresh();
    const char *env[] = {"GPUSHARDS_COMPUTE_SHARE=25", NULL};
    if (run(env, "link", "compute-launch", NULL, NULL)) return 1;
    H_CHECK(ledger_map() == NULL, "a ledger was created without GPUSHARDS_LEDGER_DIR");
    return 0;
}

static int t_compute_records(const void *arg)
{
    ledger_fresh();
    const char *env[] = {ledger_env, "GPUSHARDS_SHARD_ID=shard-a", "GPUSHARDS_COMPUTE_SHARE=25",
                         "GPUSHARDS_COMPUTE_SLICE_US=100", NULL};
    if (run(env, "link", "compute-busy", NULL, NULL)) return 1;
    struct gpushards_ledger *L = ledger_map();
    H_CHECK(L != NULL, "no ledger for GPU 0");
    const struct gpushards_ledger_member *m = ledger_member(L, "shard-a");
    H_CHECK(m != NULL, "no member for shard-a");
    H_CHECK(m->share_permille == 250 && m->mode == GPUSHARDS_COMPUTE_GUARANTEED, "share %u mode %u",
            m->share_permille, m->mode);
    H_CHECK(m->busy_ns > 0 && m->last_kernel_ns > 0, "busy %llu last %llu", (unsigned long long)m->busy_ns,
            (unsigned long long)m->last_kernel_ns);
    /* The same launches in the container's own region, where the agent reads them. */
    struct gpushards_region *r = region_map();
    H_CHECK(r != NULL, "no region");
    const struct gpushards_device *d = device(r, 0);
    uint64_t stamped = d != NULL ? d->last_launch_ns : 0;
    region_unmap(r);
    /* Stamped as the launch is admitted, before its turn (the ledger's stamp). */
    H_CHECK(stamped > 0 && stamped <= m->last_kernel_ns && m->last_kernel_ns - stamped < 1000000000ull,
            "region last launch %llu, ledger %llu",
            (unsigned long long)stamped, (unsigned long long)m->last_kernel_ns);
    munmap(L, sizeof *L);
    return 0;
}

static int t_compute_process_stamp(const void *arg)
{
    /* A live process that launched: its own slot says in which second. */
    ledger_fresh();
    const char *env[] = {ledger_env, "GPUSHARDS_SHARD_ID=a", NULL};
    struct proc holder;
    H_CHECK(start_ready(&holder, env, "compute-hold", NULL) == 0, "holder did not start: %s", err_text);
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    struct gpushards_region *r = region_map();
    int found = 0;
    uint32_t stamp = 0;
    for (unsigned i = 0; r != NULL && i < GPUSHARDS_MAX_SLOTS; i++) {
        if (r->slots[i].pid != (int32_t)holder.pid) continue;
        found = 1;
        stamp = r->slots[i].last_launch_s;
    }
    if (r != NULL) region_unmap(r);
    kill_wait(&holder);
    H_CHECK(found, "no slot for the holder");
    H_CHECK(stamp != 0 && stamp <= (uint32_t)t.tv_sec && (uint32_t)t.tv_sec - stamp <= 5,
            "its launch second %u, now %ld", stamp, (long)t.tv_sec);
    return 0;
}

/* Turns on the GPU (GPUSHARDS_COMPUTE_TURNS=gpu, compute_gate.c), for the
 * tests run with GPU_TURNS: the fake holds a stream wait's caller until the
 * gate word lets it pass, so each hangs (and fails on the runner's timeout)
 * unless the turn thread takes the turn and opens the gate. */
#define GPU_TURNS "GPUSHARDS_COMPUTE_TURNS=gpu"

/* "launches queued behind the gate N" from a process's exit statistics. */
static long gated_launches(const char *stats)
{
    const char *at = strstr(stats, "launches queued behind the gate ");
    return at == NULL ? -1 : atol(at + strlen("launches queued behind the gate "));
}

/* arg: NULL, or an extra setting of the waiting shard (turns on the GPU). */
static int t_compute_dead_holder(const void *arg)
{
    /* A holds the turn with a 300 ms lease and is killed; B must get the
     * GPU once the lease ends, and A is charged no more than its lease. */
    ledger_fresh();
    const char *ea[] = {ledger_env, "GPUSHARDS_SHARD_ID=a", "GPUSHARDS_COMPUTE_SLICE_US=300000", NULL};
    const char *eb[] = {ledger_env, "GPUSHARDS_SHARD_ID=b", "GPUSHARDS_COMPUTE_SLICE_US=1000", (const char *)arg, NULL};
    struct proc holder;
    H_CHECK(start_ready(&holder, ea, "compute-hold", NULL) == 0, "holder did not start: %s", err_text);
    kill_wait(&holder);
    if (run(eb, "link", "compute-busy", NULL, NULL)) return 1;
    struct gpushards_ledger *L = ledger_map();
    H_CHECK(L != NULL, "no ledger");
    const struct gpushards_ledger_member *a = ledger_member(L, "a"), *b = ledger_member(L, "b");
    H_CHECK(a != NULL && b != NULL, "members missing");
    H_CHECK(a->busy_ns <= 300000000ull, "the dead holder was charged %llu ns, past its lease",
            (unsigned long long)a->busy_ns);
    H_CHECK(b->busy_ns > 0, "b never held the GPU");
    munmap(L, sizeof *L);
    return 0;
}

static int t_compute_two_shards(const void *arg)
{
    /* Two shards launching at once on one GPU, in separate processes:
     * both finish, both are charged, each under its own entry. */
    ledger_fresh();
    const char *ea[] = {ledger_env, "GPUSHARDS_SHARD_ID=a", "GPUSHARDS_COMPUTE_SHARE=25",
                        "GPUSHARDS_COMPUTE_SLICE_US=200", NULL};
    const char *eb[] = {ledger_env, "GPUSHARDS_SHARD_ID=b", "GPUSHARDS_COMPUTE_SHARE=75",
                        "GPUSHARDS_COMPUTE_SLICE_US=200", NULL};
    struct proc pa, pb;
    H_CHECK(spawn(&pa, ea, "link", "compute-busy", NULL, NULL) == 0, "fork");
    H_CHECK(spawn(&pb, eb, "link", "compute-busy", NULL, NULL) == 0, "fork");
    int sa = await(&pa, 60000), sb = await(&pb, 60000);
    H_CHECK(sa == 0 && sb == 0, "exit statuses %d %d", sa, sb);
    struct gpushards_ledger *L = ledger_map();
    H_CHECK(L != NULL, "no ledger");
    const struct gpushards_ledger_member *a = ledger_member(L, "a"), *b = ledger_member(L, "b");
    H_CHECK(a != NULL && b != NULL && a != b, "members missing");
    H_CHECK(a->share_permille == 250 && b->share_permille == 750, "shares %u %u", a->share_permille,
            b->share_permille);
    munmap(L, sizeof *L);
    return 0;
}

static int t_compute_resize(const void *arg)
{
    /* The agent changes the share in the limits file in place: the ledger
     * shows the new share after the next turn boundary. */
    ledger_fresh();
    struct lim_entry e = {0, 8 * GiB, 0, 0};
    H_CHECK(write_limits(&e, 1, NULL) == 0, "cannot write the limits file");
    int fd = open(limits_path, O_WRONLY);
    uint32_t share = 250;
    H_CHECK(fd >= 0 && pwrite(fd, &share, 4, 128 + 64) == 4, "cannot set the share");
    close(fd);
    const char *env[] = {ledger_env, limits_env, "GPUSHARDS_SHARD_ID=r", "GPUSHARDS_COMPUTE_SHARE=90",
                         "GPUSHARDS_COMPUTE_SLICE_US=100", (const char *)arg, NULL};
    return run(env, "link", "compute-resize", "250", "500");
}

static int t_compute_graph(const void *arg)
{
    /* cuGraphLaunch goes through the admission: the shard's graph
     * launches alone put GPU time and a last launch in the ledger. */
    ledger_fresh();
    const char *env[] = {ledger_env, "GPUSHARDS_SHARD_ID=g", "GPUSHARDS_COMPUTE_SHARE=25",
                         "GPUSHARDS_COMPUTE_SLICE_US=100", NULL};
    if (run(env, "link", "compute-graph", NULL, NULL)) return 1;
    struct gpushards_ledger *L = ledger_map();
    H_CHECK(L != NULL, "no ledger");
    const struct gpushards_ledger_member *m = ledger_member(L, "g");
    H_CHECK(m != NULL && m->share_permille == 250 && m->busy_ns > 0, "graph launches not governed");
    munmap(L, sizeof *L);
    return 0;
}

static int t_compute_sync_release(const void *arg)
{
    /* A holds a 1 s lease; B waits for the GPU, may not preempt, and takes
     * A for idle only after 1 s.  A's synchronize hands the turn over
     * (A checks it right after the call), and B's launches then finish. */
    ledger_fresh();
    const char *ea[] = {ledger_env, "GPUSHARDS_SHARD_ID=a", "GPUSHARDS_COMPUTE_SLICE_US=1000000",
                        "GPUSHARDS_COMPUTE_IDLE_US=1000000", "GPUSHARDS_COMPUTE_PREEMPT=0", NULL};
    const char *eb[] = {ledger_env, "GPUSHARDS_SHARD_ID=b", "GPUSHARDS_COMPUTE_PREEMPT=0",
                        "GPUSHARDS_COMPUTE_IDLE_US=1000000", NULL};
    struct proc holder, pb;
    H_CHECK(start_ready(&holder, ea, "compute-sync-release", NULL) == 0, "holder did not start: %s", err_text);
    H_CHECK(spawn(&pb, eb, "link", "compute-launch", NULL, NULL) == 0, "fork");
    int sa = await(&holder, 60000), sb = await(&pb, 60000);
    H_CHECK(sa == 0, "the holder kept the turn after synchronizing (exit %d)", sa);
    H_CHECK(sb == 0, "the waiting shard did not finish (exit %d)", sb);
    return 0;
}

static int t_compute_measured(const void *arg)
{
    /* A capped shard records its launches even alone; charged GPU time, it
     * measures them with timed events. */
    ledger_fresh();
    const char *env[] = {ledger_env, "GPUSHARDS_SHARD_ID=t", "GPUSHARDS_COMPUTE_SHARE=50",
                         "GPUSHARDS_COMPUTE_MODE=capped", "GPUSHARDS_COMPUTE_CHARGE=gpu", NULL};
    if (run(env, "link", "compute-measured", NULL, NULL)) return 1;
    struct gpushards_ledger *L = ledger_map();
    H_CHECK(L != NULL, "no ledger");
    const struct gpushards_ledger_member *m = ledger_member(L, "t");
    H_CHECK(m != NULL && m->gpu_ns > 0, "no GPU time measured");
    /* Virtual time comes from the measured GPU time alone (GPU ns * 1000 /
     * share 500), not from the wall time the turn was held. */
    H_CHECK(m->vtime == 2 * m->gpu_ns, "virtual time %llu is not twice the measured %llu ns",
            (unsigned long long)m->vtime, (unsigned long long)m->gpu_ns);
    munmap(L, sizeof *L);
    return 0;
}

static int t_compute_queue_end(const void *arg)
{
    /* Bound by time, a capped shard publishes the estimated end of its
     * queue (what a shard taking the turn from it waits for). */
    ledger_fresh();
    const char *env[] = {ledger_env, "GPUSHARDS_SHARD_ID=q", "GPUSHARDS_COMPUTE_SHARE=50",
                         "GPUSHARDS_COMPUTE_MODE=capped", "GPUSHARDS_COMPUTE_DEPTH_BY=time", NULL};
    return run(env, "link", "compute-queue-end", NULL, NULL);
}

static int t_compute_isolated(const void *arg)
{
    /* A holds the turn; an isolated shard (compute mode 3 in its limits
     * file) launches beside it without taking or waiting for a turn: the
     * turn word and the ledger's last wait stay as they were, and the
     * isolated shard's entry shows its share, mode and activity. */
    ledger_fresh();
    const char *ea[] = {ledger_env, "GPUSHARDS_SHARD_ID=a", "GPUSHARDS_COMPUTE_SLICE_US=1000000", NULL};
    struct proc holder;
    H_CHECK(start_ready(&holder, ea, "compute-hold", NULL) == 0, "holder did not start: %s", err_text);
    struct gpushards_ledger *L = ledger_map();
    H_CHECK(L != NULL, "no ledger");
    uint64_t turn = __atomic_load_n(&L->turn, __ATOMIC_ACQUIRE);
    uint64_t last_wait = __atomic_load_n(&L->last_wait_ns, __ATOMIC_ACQUIRE);
    struct lim_entry e = {0, 8 * GiB, 0, 0};
    struct lim_compute isolated = {300, GPUSHARDS_COMPUTE_ISOLATED, 0, NULL, 0};
    H_CHECK(write_limits_compute(&e, 1, NULL, &isolated) == 0, "cannot write the limits file");
    const char *ei[] = {ledger_env, limits_env, "GPUSHARDS_SHARD_ID=i", NULL};
    int failed = run(ei, "link", "compute-launch", NULL, NULL);
    kill_wait(&holder);
    if (failed) return 1;
    H_CHECK(__atomic_load_n(&L->turn, __ATOMIC_ACQUIRE) == turn, "the isolated shard took a turn");
    H_CHECK(__atomic_load_n(&L->last_wait_ns, __ATOMIC_ACQUIRE) == last_wait, "the isolated shard waited for a turn");
    const struct gpushards_ledger_member *m = ledger_member(L, "i");
    H_CHECK(m != NULL, "no member for the isolated shard");
    H_CHECK(m->mode == GPUSHARDS_COMPUTE_ISOLATED && m->share_permille == 300, "mode %u share %u", m->mode,
            m->share_permille);
    H_CHECK(m->last_kernel_ns > 0 && m->busy_ns > 0 && m->vtime == 0, "last %llu busy %llu vtime %llu",
            (unsigned long long)m->last_kernel_ns, (unsigned long long)m->busy_ns, (unsigned long long)m->vtime);
    munmap(L, sizeof *L);
    return 0;
}

static int t_compute_limits_names_shard(const void *arg)
{
    /* The shard id in the limits file wins over GPUSHARDS_SHARD_ID: a
     * process of the shard cannot take another shard's ledger entry. */
    ledger_fresh();
    struct lim_entry e = {0, 8 * GiB, 0, 0};
    struct lim_compute named = {250, GPUSHARDS_COMPUTE_GUARANTEED, 0, "from-file", 0};
    H_CHECK(write_limits_compute(&e, 1, NULL, &named) == 0, "cannot write the limits file");
    const char *env[] = {ledger_env, limits_env, "GPUSHARDS_SHARD_ID=impostor", "GPUSHARDS_COMPUTE_SLICE_US=100", NULL};
    if (run(env, "link", "compute-launch", NULL, NULL)) return 1;
    struct gpushards_ledger *L = ledger_map();
    H_CHECK(L != NULL, "no ledger");
    const struct gpushards_ledger_member *m = ledger_member(L, "from-file");
    H_CHECK(m != NULL && m->last_kernel_ns > 0, "no launches under the limits file's shard id");
    H_CHECK(ledger_member(L, "impostor") == NULL, "the environment's shard id got a ledger entry");
    munmap(L, sizeof *L);
    return 0;
}

/* arg: NULL, or an extra setting of the victim (turns on the GPU, where it
 * must also open its own gate). */
static int t_compute_rogue_holder(const void *arg)
{
    /* A process writes the ledger itself and holds the turn forever: a
     * shard waiting for it gives up after MAX_WAIT_NS and launches without
     * turns (plain co-location) instead of stalling. */
    ledger_fresh();
    const char *er[] = {ledger_env, "GPUSHARDS_SHARD_ID=rogue-setup", NULL};
    const char *ev[] = {ledger_env, "GPUSHARDS_SHARD_ID=victim", "GPUSHARDS_COMPUTE_STATS=1", (const char *)arg, NULL};
    struct proc rogue;
    H_CHECK(start_ready(&rogue, er, "compute-rogue", NULL) == 0, "the rogue did not start: %s", err_text);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int failed = run(ev, "link", "compute-launch", NULL, NULL);
    kill_wait(&rogue);
    if (failed) return 1;
    H_CHECK(strstr(err_text, "gave up waiting 1") != NULL, "the victim did not give up waiting once: %s", err_text);
    if (arg != NULL)
        H_CHECK(gated_launches(err_text) > 0, "the victim queued nothing behind its gate: %s", err_text);
    /* Its launches without turns still show in its entry (the agent's
     * compute fence reads them): the last one came after the second it waited. */
    struct gpushards_ledger *L = ledger_map();
    H_CHECK(L != NULL, "no ledger");
    const struct gpushards_ledger_member *v = ledger_member(L, "victim");
    uint64_t waited_until = (uint64_t)t0.tv_sec * 1000000000ull + (uint64_t)t0.tv_nsec + 1000000000ull;
    int shown = v != NULL && v->last_kernel_ns >= waited_until;
    munmap(L, sizeof *L);
    H_CHECK(shown, "the victim's launches without turns left no trace in its entry");
    return 0;
}

/* Runs shard b's scenario (turns on the GPU, statistics on, and extra, which
 * may be NULL) beside a busy shard a that takes turns on the GPU, and, with
 * a scribbler, beside a third shard writing zeros over the ledger's header;
 * 0 when b's run succeeded, its statistics then in err_text.  The ledger is
 * fresh. */
static int b_beside_busy(const char *scenario, const char *extra, int scribbler)
{
    ledger_fresh();
    const char *ea[] = {ledger_env, GPU_TURNS, "GPUSHARDS_SHARD_ID=a", "GPUSHARDS_COMPUTE_SLICE_US=2000", NULL};
    const char *es[] = {ledger_env, "GPUSHARDS_SHARD_ID=scribbler", NULL};
    const char *eb[] = {ledger_env, GPU_TURNS, "GPUSHARDS_SHARD_ID=b", "GPUSHARDS_COMPUTE_SLICE_US=2000",
                        "GPUSHARDS_COMPUTE_STATS=1", extra, NULL};
    struct proc busy, writer;
    H_CHECK(start_ready(&busy, ea, "busy-hold", NULL) == 0, "a did not start: %s", err_text);
    if (scribbler && start_ready(&writer, es, "ledger-scribble", NULL) != 0) {
        kill_wait(&busy);
        return h_fail("the scribbler did not start: %s", err_text);
    }
    int failed = run(eb, "link", scenario, NULL, NULL);
    if (scribbler) kill_wait(&writer);
    kill_wait(&busy);
    return failed;
}

static int t_gpu_turns_beside_busy(const void *arg)
{
    /* A keeps the GPU busy; B's launches, made while A holds the turn, wait
     * behind B's gate until B's turn thread takes the turn for it. */
    if (b_beside_busy("compute-busy", NULL, 0)) return 1;
    long gated = gated_launches(err_text);
    H_CHECK(gated > 0, "b queued nothing behind its gate (%ld): %s", gated, err_text);
    struct gpushards_ledger *L = ledger_map();
    H_CHECK(L != NULL, "no ledger");
    const struct gpushards_ledger_member *a = ledger_member(L, "a"), *b = ledger_member(L, "b");
    int charged = a != NULL && b != NULL && a->busy_ns > 0 && b->busy_ns > 0;
    munmap(L, sizeof *L);
    H_CHECK(charged, "both shards should have held the GPU");
    return 0;
}

/* Where a shard waits for its turns, as the host's agent wrote it into the
 * shard's limits file, against what the shard's own environment says. */
struct turns_case {
    uint32_t file;   /* compute_turns in the limits file */
    const char *env; /* the shard's own setting, or NULL */
    int gated;       /* 1: its launches must queue behind its gate; 0: none may */
};

static int t_compute_turns_from_limits(const void *arg)
{
    /* A keeps the GPU busy (turns on the GPU, from its environment); b's
     * launches queue behind b's gate only when b's limits file says GPU. */
    const struct turns_case *c = arg;
    ledger_fresh();
    struct lim_entry e = {0, 8 * GiB, 0, 0};
    struct lim_compute named = {0, 0, 0, "b", c->file};
    H_CHECK(write_limits_compute(&e, 1, NULL, &named) == 0, "cannot write the limits file");
    const char *ea[] = {ledger_env, GPU_TURNS, "GPUSHARDS_SHARD_ID=a", "GPUSHARDS_COMPUTE_SLICE_US=2000", NULL};
    /* compute-busy looks for b's entry under GPUSHARDS_SHARD_ID. */
    const char *eb[] = {ledger_env, limits_env, "GPUSHARDS_SHARD_ID=b", "GPUSHARDS_COMPUTE_SLICE_US=2000",
                        "GPUSHARDS_COMPUTE_STATS=1", c->env, NULL};
    struct proc busy;
    H_CHECK(start_ready(&busy, ea, "busy-hold", NULL) == 0, "a did not start: %s", err_text);
    int failed = run(eb, "link", "compute-busy", NULL, NULL);
    kill_wait(&busy);
    if (failed) return 1;
    long gated = gated_launches(err_text);
    if (c->gated) H_CHECK(gated > 0, "b queued nothing behind its gate (%ld): %s", gated, err_text);
    else H_CHECK(gated == 0, "b queued %ld launches behind a gate: %s", gated, err_text);
    int warned = strstr(err_text, "compute_turns is") != NULL;
    int known = c->file <= GPUSHARDS_COMPUTE_TURNS_GPU;
    H_CHECK(warned != known, "a compute_turns of %u %s: %s", c->file, known ? "was warned about" : "went unwarned",
            err_text);
    struct gpushards_ledger *L = ledger_map();
    H_CHECK(L != NULL, "no ledger");
    const struct gpushards_ledger_member *b = ledger_member(L, "b");
    int charged = b != NULL && b->busy_ns > 0;
    munmap(L, sizeof *L);
    H_CHECK(charged, "b never held the GPU under the limits file's shard id");
    return 0;
}

static const struct turns_case turns_gpu_file = {GPUSHARDS_COMPUTE_TURNS_GPU, NULL, 1};
static const struct turns_case turns_cpu_file = {GPUSHARDS_COMPUTE_TURNS_CPU, GPU_TURNS, 0};
static const struct turns_case turns_bad_file = {7, GPU_TURNS, 0};

static int t_gpu_turns_scribbled(const void *arg)
{
    /* Beside a busy shard, a third writes zeros over the ledger's header in a
     * loop: every process keeps its gate in a page of its own, so b's gated
     * work still runs at b's turns, and b never falls back to launching
     * without turns. */
    if (b_beside_busy("compute-busy", NULL, 1)) return 1;
    H_CHECK(gated_launches(err_text) > 0, "b queued nothing behind its gate: %s", err_text);
    H_CHECK(strstr(err_text, "gave up waiting 0") != NULL, "b fell back to launching without turns: %s", err_text);
    return 0;
}

static int t_gpu_turns_ctx_anew(const void *arg)
{
    /* Beside a busy shard, b launches in a context it then destroys, then in
     * a second one: its gate is mapped anew in the second (once per context
     * that registered one), and the second's gated work runs. */
    if (b_beside_busy("compute-ctx-anew", NULL, 0)) return 1;
    H_CHECK(strstr(err_text, "gate pages mapped 2") != NULL, "b's gate was not mapped once per context: %s", err_text);
    return 0;
}

static int t_gpu_turns_per_gpu(const void *arg)
{
    /* Waiting for one GPU's turn (held from outside for a second) holds up
     * no other GPU's launches: each GPU has a turn thread of its own. */
    ledger_fresh();
    const char *er[] = {ledger_env, "GPUSHARDS_SHARD_ID=rogue-setup", NULL};
    const char *ev[] = {ledger_env, GPU_TURNS, "GPUSHARDS_SHARD_ID=two", NULL};
    struct proc rogue;
    H_CHECK(start_ready(&rogue, er, "compute-rogue", NULL) == 0, "the rogue did not start: %s", err_text);
    int failed = run(ev, "link", "compute-two-gpus", NULL, NULL);
    kill_wait(&rogue);
    return failed;
}

static int t_compute_full_ledger(const void *arg)
{
    /* Every entry of the GPU's ledger is in use when a shard starts: it
     * launches without turns, and takes an entry that is freed later
     * (looking again once a second), so its launches show again. */
    ledger_fresh();
    const char *es[] = {ledger_env, "GPUSHARDS_SHARD_ID=first", NULL};
    if (run(es, "link", "compute-launch", NULL, NULL)) return 1; /* the ledger file exists */
    char path[700];
    snprintf(path, sizeof path, "%s/GPU-fa4e5000-0000-4000-8000-000000000000", ledger_dir);
    int fd = open(path, O_RDWR);
    struct gpushards_ledger *L =
        fd < 0 ? MAP_FAILED : mmap(NULL, sizeof *L, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fd >= 0) close(fd);
    H_CHECK(L != MAP_FAILED, "cannot map the ledger read-write");
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    uint64_t now = (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
    for (unsigned i = 0; i < GPUSHARDS_LEDGER_MEMBERS; i++) {
        if (L->members[i].shard[0] == '\0') snprintf(L->members[i].shard, sizeof L->members[i].shard, "other-%u", i);
        __atomic_store_n(&L->members[i].seen_ns, now, __ATOMIC_RELAXED);
    }
    const char *el[] = {ledger_env, "GPUSHARDS_SHARD_ID=late", NULL};
    struct proc late;
    if (start_ready(&late, el, "compute-claim-later", NULL) != 0) {
        munmap(L, sizeof *L);
        return h_fail("the late shard did not start: %s", err_text);
    }
    memset(L->members[GPUSHARDS_LEDGER_MEMBERS - 1].shard, 0, sizeof L->members[0].shard);
    int st = await(&late, 20000);
    munmap(L, sizeof *L);
    slurp(late.err, err_text, sizeof err_text);
    H_CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "the late shard never took the freed entry: %s",
            err_text);
    return 0;
}

/* A pipe folder where the fake driver finds an MPS control daemon or not. */
static void mps_pipes(char *env, size_t size, int daemon)
{
    char pipes[400], control[450];
    snprintf(pipes, sizeof pipes, "%s/mps", dir);
    mkdir(pipes, 0755);
    snprintf(control, sizeof control, "%s/control", pipes);
    if (daemon) close(open(control, O_WRONLY | O_CREAT, 0644));
    else unlink(control);
    snprintf(env, size, "GPUSHARDS_MPS_PIPE_PATH=%s", pipes);
}

static int t_mps_forced(const void *arg)
{
    /* The limits file makes the shard an MPS client at 40 %: cuInit sets
     * that and the pipe folder, whatever the process's environment said. */
    char pipes_env[500], pipes[400];
    mps_pipes(pipes_env, sizeof pipes_env, 1);
    snprintf(pipes, sizeof pipes, "%s/mps", dir);
    struct lim_entry e = {0, 8 * GiB, 0, 0};
    struct lim_compute client = {0, 0, 40, NULL, 0};
    H_CHECK(write_limits_compute(&e, 1, NULL, &client) == 0, "cannot write the limits file");
    const char *env[] = {limits_env, pipes_env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100",
                         "CUDA_MPS_PIPE_DIRECTORY=/nowhere", NULL};
    return run(env, "link", "mps-client", "40", pipes);
}

static int t_mps_refused(const void *arg)
{
    /* No control daemon in the pipe folder: the process would be a plain
     * context beside the MPS clients, so CUDA is refused. */
    char pipes_env[500];
    mps_pipes(pipes_env, sizeof pipes_env, 0);
    struct lim_entry e = {0, 8 * GiB, 0, 0};
    struct lim_compute client = {0, 0, 60, NULL, 0};
    H_CHECK(write_limits_compute(&e, 1, NULL, &client) == 0, "cannot write the limits file");
    const char *env[] = {limits_env, pipes_env, NULL};
    return run(env, "link", "mps-refused", NULL, NULL);
}

static int t_mps_rest_bound_by_time(const void *arg)
{
    /* A shard of a partition's rest (an MPS client, turns in the ledger)
     * bounds its work in flight by queued GPU time, and so publishes its
     * queue's end, though its environment asks for the bound by age. */
    ledger_fresh();
    char pipes_env[500];
    mps_pipes(pipes_env, sizeof pipes_env, 1);
    struct lim_entry e = {0, 8 * GiB, 0, 0};
    struct lim_compute rest = {500, GPUSHARDS_COMPUTE_CAPPED, 50, NULL, 0};
    H_CHECK(write_limits_compute(&e, 1, NULL, &rest) == 0, "cannot write the limits file");
    const char *env[] = {ledger_env, limits_env, pipes_env, "GPUSHARDS_SHARD_ID=q", "GPUSHARDS_COMPUTE_DEPTH_BY=age",
                         NULL};
    return run(env, "link", "compute-queue-end", NULL, NULL);
}

/* The "waits for work in flight" count of the stats a run printed at exit. */
static long inflight_waits(void)
{
    const char *at = strstr(err_text, "waits for work in flight ");
    return at == NULL ? -1 : strtol(at + strlen("waits for work in flight "), NULL, 10);
}

static int t_compute_graph_depth(const void *arg)
{
    /* While bound (capped), ten launches queued at once with a 1 s depth:
     * kernel launches never wait (none is older than 1 s, and ten fit the
     * ring), graph launches wait whenever two are unfinished (how often
     * depends on where the capped shard's turns end, which drain too). */
    ledger_fresh();
    const char *env[] = {ledger_env, "GPUSHARDS_SHARD_ID=d", "GPUSHARDS_COMPUTE_SHARE=50",
                         "GPUSHARDS_COMPUTE_MODE=capped", "GPUSHARDS_COMPUTE_DEPTH_US=1000000",
                         "GPUSHARDS_FAKE_KERNEL_US=2000", "GPUSHARDS_COMPUTE_STATS=1", NULL};
    if (run(env, "link", "compute-depth", "kernel", NULL)) return 1;
    long kernel = inflight_waits();
    if (run(env, "link", "compute-depth", "graph", NULL)) return 1;
    long graph = inflight_waits();
    H_CHECK(kernel == 0, "kernel launches waited %ld times for work in flight (expected none)", kernel);
    H_CHECK(graph > 0, "graph launches never waited for work in flight (ten queued at once)");
    return 0;
}

static void add_compute_tests(struct t *tests, int *n)
{
#define ADDC(nm, f, a) tests[(*n)++] = (struct t){nm, f, a}
    ADDC("compute: no ledger folder, launches pass ungoverned", t_compute_off, NULL);
    ADDC("compute: a shard's turns are recorded in the GPU's ledger", t_compute_records, NULL);
    ADDC("compute: a holder killed mid-slice stalls nobody past its lease", t_compute_dead_holder, NULL);
    ADDC("compute: two shards in two processes share one ledger", t_compute_two_shards, NULL);
    ADDC("compute: a share changed in the limits file reaches the ledger", t_compute_resize, NULL);
    ADDC("compute, turns on the GPU: a share changed in the limits file reaches the ledger", t_compute_resize,
         GPU_TURNS);
    ADDC("compute: graph launches take turns like kernel launches", t_compute_graph, NULL);
    ADDC("compute: graph launches keep at most two in flight while bound, whatever their age", t_compute_graph_depth, NULL);
    ADDC("compute: a synchronize hands the turn to a waiting shard", t_compute_sync_release, NULL);
    ADDC("compute: GPU time is measured from timed events and charged as virtual time", t_compute_measured, NULL);
    ADDC("compute: bound by time, a holder publishes when its queue ends", t_compute_queue_end, NULL);
    ADDC("compute: an isolated shard launches beside the turn's holder without taking turns", t_compute_isolated,
         NULL);
    ADDC("mps: the limits file's percentage and pipe folder win over the process's environment", t_mps_forced, NULL);
    ADDC("mps: a shard that must be an MPS client is refused CUDA when no control daemon answers", t_mps_refused,
         NULL);
    ADDC("mps: the rest's shards bound their work in flight by queued GPU time", t_mps_rest_bound_by_time, NULL);
    ADDC("compute: the limits file's shard id wins over GPUSHARDS_SHARD_ID", t_compute_limits_names_shard, NULL);
    ADDC("compute: a process holding the ledger's turn from outside libvgpu.so stalls nobody for long",
         t_compute_rogue_holder, NULL);
    ADDC("compute: a launching process's own region slot names the second of its last launch", t_compute_process_stamp, NULL);
    ADDC("compute: a shard that finds the ledger full takes an entry freed later", t_compute_full_ledger, NULL);
    ADDC("compute, turns on the GPU: launches made while a busy shard holds the turn wait behind the gate until "
         "the turn thread takes it",
         t_gpu_turns_beside_busy, NULL);
    ADDC("compute, turns on the GPU: a shard writing zeros over the ledger's header holds up nobody's gated work",
         t_gpu_turns_scribbled, NULL);
    ADDC("compute, turns on the GPU: a gate registered in a context the application destroys is mapped anew in "
         "the next",
         t_gpu_turns_ctx_anew, NULL);
    ADDC("compute, turns on the GPU: waiting for one GPU's turn holds up no other GPU's launches",
         t_gpu_turns_per_gpu, NULL);
    ADDC("compute, turns on the GPU: a holder killed mid-slice stalls nobody's gated work past its lease",
         t_compute_dead_holder, GPU_TURNS);
    ADDC("compute, turns on the GPU: a turn held from outside libvgpu.so is given up on, and the gate opened",
         t_compute_rogue_holder, GPU_TURNS);
    ADDC("compute, turns on the GPU: a shard whose limits file says GPU turns (its environment nothing) queues "
         "launches behind its gate beside a busy shard",
         t_compute_turns_from_limits, &turns_gpu_file);
    ADDC("compute, turns on the GPU: a limits file that says CPU turns wins over GPUSHARDS_COMPUTE_TURNS=gpu",
         t_compute_turns_from_limits, &turns_cpu_file);
    ADDC("compute, turns on the GPU: an unknown compute_turns in the limits file is warned about and means CPU "
         "turns",
         t_compute_turns_from_limits, &turns_bad_file);
#undef ADDC
}
