/* runner_ipc.c — CUDA IPC and VMM shareable-handle imports (issue #30):
 * libvgpu.so names each process holding one in the region
 * (gpushards_region.h, ipc_importers), so that the agent refuses to suspend
 * its shard up front; the fake driver refuses the
 * restore of such a process as the real one does.  Included by runner.c
 * after runner_elastic.c (it shares its helpers); not compiled on its own. */

/* The region's slot of pid, -1 for none. */
static int slot_of_pid(const struct gpushards_region *r, pid_t pid)
{
    for (unsigned i = 0; i < GPUSHARDS_MAX_SLOTS; i++)
        if (__atomic_load_n(&r->slots[i].pid, __ATOMIC_ACQUIRE) == (int32_t)pid) return (int)i;
    return -1;
}

/* 1 when the region names pid as holding CUDA IPC imports, 0 when not, -1
 * when pid has no slot (or there is no region). */
static int importer_named(pid_t pid)
{
    struct gpushards_region *r = region_map();
    if (r == NULL) return -1;
    int s = slot_of_pid(r, pid), named = -1;
    if (s >= 0 && (unsigned)s < GPUSHARDS_IPC_IMPORTER_SLOTS)
        named = (__atomic_load_n(&r->header.ipc_importers[s / 64], __ATOMIC_ACQUIRE) >> (s % 64)) & 1;
    region_unmap(r);
    return named;
}

static uint64_t importer_words_or(void)
{
    struct gpushards_region *r = region_map();
    if (r == NULL) return UINT64_MAX;
    uint64_t any = r->header.ipc_importers_unlisted;
    for (unsigned w = 0; w < GPUSHARDS_IPC_IMPORTER_SLOTS / 64; w++)
        any |= __atomic_load_n(&r->header.ipc_importers[w], __ATOMIC_ACQUIRE);
    region_unmap(r);
    return any;
}

/* A CUipcMemHandle (64 bytes) as the exporter prints it. */
#define IPC_HANDLE_HEX 128

static const char *const ipc_env[] = {"CUDA_DEVICE_MEMORY_LIMIT=4g", NULL};

/* The exporter, started and its handle read into hex. */
static int start_exporter(struct proc *e, char hex[IPC_HANDLE_HEX + 1])
{
    if (spawn(e, ipc_env, "link", "ipc-export", NULL, NULL) != 0) return h_fail("fork");
    if (await_text(e, "handle ") != 0 || await_text(e, "\n") != 0) {
        kill_wait(e);
        return h_fail("the exporter gave no handle: %s", err_text);
    }
    const char *at = strstr(out_text, "handle ");
    if (at == NULL || sscanf(at, "handle %128s", hex) != 1 || strlen(hex) != IPC_HANDLE_HEX) {
        kill_wait(e);
        return h_fail("the exporter's handle: %s", out_text);
    }
    return 0;
}

/* Lets the importer go on to its next step and waits for it to say so. */
static int next_step(struct proc *t, const char *said)
{
    kill(t->pid, SIGUSR1);
    return await_text(t, said);
}

/* An import named from before the open returns until its close; a refused
 * open leaves nothing named; the exporter is never named; and once closed,
 * the importer's memory moves out and back like any process's. */
static int marks(const char *way, struct proc *e, struct proc *t, const char *hex)
{
    if (spawn(t, ipc_env, "link", "ipc-import", hex, way) != 0) return h_fail("fork");
    H_CHECK(await_text(t, "refused") == 0, "%s: the junk handle: %s", way, err_text);
    H_CHECK(importer_named(t->pid) == 0, "%s: a refused open left the importer named (%d)", way,
            importer_named(t->pid));
    H_CHECK(next_step(t, "opened") == 0, "%s: the open failed: %s", way, err_text);
    H_CHECK(importer_named(t->pid) == 1, "%s: the open import is not named (%d)", way, importer_named(t->pid));
    H_CHECK(importer_named(e->pid) == 0, "%s: the exporter is named an importer (%d)", way, importer_named(e->pid));
    H_CHECK(next_step(t, "closed") == 0, "%s: the close failed: %s", way, err_text);
    H_CHECK(importer_named(t->pid) == 0, "%s: still named after its last close", way);
    H_CHECK(importer_words_or() == 0, "%s: some bit is left: %#llx", way, (unsigned long long)importer_words_or());
    CKPT_OK("lock", t->pid);
    CKPT_OK("checkpoint", t->pid);
    CKPT_OK("restore", t->pid);
    CKPT_OK("unlock", t->pid);
    H_CHECK(next_step(t, "opened again") == 0, "%s: the second open failed: %s", way, err_text);
    H_CHECK(importer_named(t->pid) == 1, "%s: the second import is not named", way);
    kill(t->pid, SIGUSR1);
    int st = await(t, 30000);
    t->pid = 0;
    H_CHECK(st == 0, "%s: the importer exited %d: %s", way, st, err_text);
    H_CHECK(importer_words_or() == 0, "%s: a clean exit left a bit: %#llx", way,
            (unsigned long long)importer_words_or());
    return 0;
}

/* The importer t, holding an import, SIGKILLed: no destructor runs, its bit
 * stays until the next process of the shard reclaims its slot, which clears
 * it (the agent never counts it meanwhile: it checks the slot's process is
 * alive). */
static int check_killed_importer(struct proc *t)
{
    H_CHECK(importer_named(t->pid) == 1, "the import is not named");
    pid_t dead = t->pid;
    kill_wait(t);
    t->pid = 0;
    H_CHECK(importer_named(dead) == 1, "nobody reclaimed the slot yet, but the bit is gone");
    struct proc next;
    H_CHECK(start_ready(&next, ipc_env, "hold", "1048576") == 0, "the next process: %s", err_text);
    int slot_gone = importer_named(dead) == -1;
    uint64_t left = importer_words_or();
    kill_wait(&next);
    H_CHECK(slot_gone, "the dead importer's slot was not reclaimed");
    H_CHECK(left == 0, "its bit outlived its slot: %#llx", (unsigned long long)left);
    return 0;
}

/* What driver 580 does on an H200 (native/gpu-tests/RESULTS.md): the
 * importer t locks and checkpoints, its restore is `refusal` and it stays
 * checkpointed; the exporter e moves out and back. */
static int check_restore_refused(struct proc *e, struct proc *t, const char *refusal)
{
    CKPT_OK("lock", e->pid);
    CKPT_OK("checkpoint", e->pid);
    CKPT_OK("restore", e->pid);
    CKPT_OK("unlock", e->pid);
    CKPT_OK("lock", t->pid);
    CKPT_OK("checkpoint", t->pid);
    char said[64];
    snprintf(said, sizeof said, "%s\n", refusal);
    for (int attempt = 1; attempt <= 2; attempt++) {
        H_CHECK(ckpt("restore", t->pid, NULL) == 1 && strcmp(out_text, said) == 0,
                "restore %d (attempt %d): wanted \"%s\" (exit 1), got \"%s\" (%s)", (int)t->pid, attempt, refusal,
                out_text, err_text);
        if (attempt == 1) CKPT_STATE(t->pid, "checkpointed");
    }
    return 0;
}

/* Runs body with an exporter of a CUDA IPC handle, and cleans up. */
static int with_ipc_exporter(int (*body)(const char *, struct proc *, struct proc *, const char *), const char *arg)
{
    struct proc e, t = {0};
    char hex[IPC_HANDLE_HEX + 1];
    if (start_exporter(&e, hex)) return 1;
    int r = body(arg, &e, &t, hex);
    if (t.pid > 0) kill_wait(&t);
    kill_wait(&e);
    return r;
}

static int t_ipc_marks(const void *arg)
{
    return with_ipc_exporter(marks, arg);
}

/* An importer that opened one. */
static int ipc_opened(struct proc *t, const char *hex)
{
    if (spawn(t, ipc_env, "link", "ipc-import", hex, "link") != 0) return h_fail("fork");
    H_CHECK(await_text(t, "refused") == 0 && next_step(t, "opened") == 0, "the open failed: %s", err_text);
    return 0;
}

static int ipc_killed(const char *way, struct proc *e, struct proc *t, const char *hex)
{
    (void)way;
    (void)e;
    return ipc_opened(t, hex) || check_killed_importer(t);
}

static int t_ipc_killed(const void *arg)
{
    return with_ipc_exporter(ipc_killed, arg);
}

static int ipc_restore_refused(const char *way, struct proc *e, struct proc *t, const char *hex)
{
    (void)way;
    return ipc_opened(t, hex) || check_restore_refused(e, t, "CUDA_ERROR_INVALID_VALUE");
}

static int t_ipc_restore_refused(const void *arg)
{
    return with_ipc_exporter(ipc_restore_refused, arg);
}

/* ---- VMM shareable handles ------------------------------------------------ */

/* The exporter, started, and the path of its descriptor read into path. */
static int start_vmm_exporter(struct proc *e, char *path, size_t len)
{
    if (spawn(e, ipc_env, "link", "vmm-export", NULL, NULL) != 0) return h_fail("fork");
    if (await_text(e, "share ") != 0 || await_text(e, "\n") != 0) {
        kill_wait(e);
        return h_fail("the exporter gave no descriptor: %s", err_text);
    }
    const char *at = strstr(out_text, "share ");
    char fmt[16];
    snprintf(fmt, sizeof fmt, "share %%%zus", len - 1);
    if (at == NULL || sscanf(at, fmt, path) != 1) {
        kill_wait(e);
        return h_fail("the exporter's descriptor: %s", out_text);
    }
    return 0;
}

/* Lets the importer take its next step, then checks whether it is named. */
#define VMM_STEP(said, named)                                                                            \
    do {                                                                                                 \
        H_CHECK(next_step(t, said) == 0, "%s: no \"%s\": %s", way, said, err_text);                       \
        H_CHECK(importer_named(t->pid) == (named), "%s: after \"%s\" named %d, want %d", way, said,        \
                importer_named(t->pid), named);                                                          \
    } while (0)

/* Named from before the import returns while its handle has a reference or
 * a mapping: a retain's reference outlives the unmap and the import's own
 * release ends it; a handle mapped and released at once is held until
 * unmapped.  A refused import names nobody, the exporter is never named, and
 * once let go the importer's memory moves out and back like any process's. */
static int vmm_marks(const char *way, struct proc *e, struct proc *t, const char *path)
{
    if (spawn(t, ipc_env, "link", "vmm-import", path, way) != 0) return h_fail("fork");
    H_CHECK(await_text(t, "1 refused") == 0, "%s: the junk descriptor: %s", way, err_text);
    H_CHECK(importer_named(t->pid) == 0, "%s: a refused import left the importer named (%d)", way,
            importer_named(t->pid));
    VMM_STEP("2 imported, mapped, retained", 1);
    H_CHECK(importer_named(e->pid) == 0, "%s: the exporter is named an importer (%d)", way, importer_named(e->pid));
    VMM_STEP("3 unmapped, two references", 1);
    VMM_STEP("4 the retain released", 1);
    VMM_STEP("5 the import released", 0);
    H_CHECK(importer_words_or() == 0, "%s: some bit is left: %#llx", way, (unsigned long long)importer_words_or());
    CKPT_OK("lock", t->pid);
    CKPT_OK("checkpoint", t->pid);
    CKPT_OK("restore", t->pid);
    CKPT_OK("unlock", t->pid);
    VMM_STEP("6 mapped, then released", 1);
    VMM_STEP("7 unmapped", 0);
    VMM_STEP("8 held", 1);
    kill(t->pid, SIGUSR1);
    int st = await(t, 30000);
    t->pid = 0;
    H_CHECK(st == 0, "%s: the importer exited %d: %s", way, st, err_text);
    H_CHECK(importer_words_or() == 0, "%s: a clean exit left a bit: %#llx", way,
            (unsigned long long)importer_words_or());
    return 0;
}

/* Runs body with an exporter of a VMM shareable handle, and cleans up. */
static int with_vmm_exporter(int (*body)(const char *, struct proc *, struct proc *, const char *), const char *arg)
{
    struct proc e, t = {0};
    char path[128];
    if (start_vmm_exporter(&e, path, sizeof path)) return 1;
    int r = body(arg, &e, &t, path);
    if (t.pid > 0) kill_wait(&t);
    kill_wait(&e);
    return r;
}

static int t_vmm_marks(const void *arg)
{
    return with_vmm_exporter(vmm_marks, arg);
}

/* An importer that imported one (and was refused a junk descriptor first). */
static int vmm_imported(const char *way, struct proc *t, const char *path)
{
    if (spawn(t, ipc_env, "link", "vmm-import", path, way) != 0) return h_fail("fork");
    H_CHECK(await_text(t, "1 refused") == 0 && next_step(t, "2 imported") == 0, "the import failed: %s", err_text);
    return 0;
}

/* SIGKILLed holding an import: its bit goes when its slot is reclaimed. */
static int vmm_killed(const char *way, struct proc *e, struct proc *t, const char *path)
{
    (void)e;
    return vmm_imported(way, t, path) || check_killed_importer(t);
}

static int t_vmm_killed(const void *arg)
{
    return with_vmm_exporter(vmm_killed, arg);
}

static int vmm_restore_refused(const char *way, struct proc *e, struct proc *t, const char *path)
{
    return vmm_imported(way, t, path) || check_restore_refused(e, t, "CUDA_ERROR_NOT_SUPPORTED");
}

static int t_vmm_restore_refused(const void *arg)
{
    return with_vmm_exporter(vmm_restore_refused, arg);
}

/* Past the table of imports followed, the process stays named after every
 * release: the safe side (hooks_vmm_import.c says why). */
static int vmm_many(const char *way, struct proc *e, struct proc *t, const char *path)
{
    (void)e;
    (void)way;
    if (spawn(t, ipc_env, "link", "vmm-import-many", path, NULL) != 0) return h_fail("fork");
    H_CHECK(await_text(t, "released all") == 0, "the imports failed: %s", err_text);
    H_CHECK(importer_named(t->pid) == 1, "imports not followed were forgotten (%d)", importer_named(t->pid));
    kill(t->pid, SIGUSR1);
    int st = await(t, 30000);
    t->pid = 0;
    H_CHECK(st == 0, "the importer exited %d: %s", st, err_text);
    H_CHECK(importer_words_or() == 0, "a clean exit left a bit: %#llx", (unsigned long long)importer_words_or());
    return 0;
}

static int t_vmm_many(const void *arg)
{
    return with_vmm_exporter(vmm_many, arg);
}

static void add_ipc_tests(struct t *tests, int *n)
{
#define ADDI(nm, f, a) tests[(*n)++] = (struct t){nm, f, a}
    ADDI("CUDA IPC by symbol: the importer is named in the region from open to last close, the exporter never",
         t_ipc_marks, "link");
    ADDI("CUDA IPC by the pre-CUDA 11 symbol: the importer is named from open to last close", t_ipc_marks,
         "legacy");
    ADDI("CUDA IPC through cuGetProcAddress: the importer is named from open to last close", t_ipc_marks, "gpa");
    ADDI("CUDA IPC: a SIGKILLed importer's bit goes when the next process reclaims its slot", t_ipc_killed, NULL);
    ADDI("fake checkpoint API: an importer's restore is INVALID_VALUE and it stays checkpointed; the exporter moves",
         t_ipc_restore_refused, NULL);
    ADDI("VMM import by symbol: named while its handle has a reference or a mapping, the exporter never",
         t_vmm_marks, "link");
    ADDI("VMM import through cuGetProcAddress: named while its handle has a reference or a mapping", t_vmm_marks,
         "gpa");
    ADDI("VMM import: a SIGKILLed importer's bit goes when the next process reclaims its slot", t_vmm_killed, "link");
    ADDI("VMM import: more imports than libvgpu.so follows keep the importer named until it exits", t_vmm_many, NULL);
    ADDI("fake checkpoint API: a VMM importer's restore is NOT_SUPPORTED and it stays checkpointed; the exporter "
         "moves",
         t_vmm_restore_refused, "link");
#undef ADDI
}
