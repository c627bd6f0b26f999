/* runner_fake.c — the fake driver's per-process accounting, as the agent's
 * fence reads it through NVML (included by runner.c). */

/* A process in a PID namespace of its own, with its own /proc (as in a
 * container), that lists NVML sees none of the other processes: it must
 * leave their memory alone.  It used to take itself for the outermost
 * namespace (its /proc shows it at depth 1) and free every entry it could
 * not find: the host's and every other container's. */
static int t_nvml_container_leaves_others(const void *arg)
{
    const char *env[] = {"-LD_PRELOAD", NULL};
    struct proc hidden;
    int ok = spawn_program(&hidden, HIDDEN_ALLOC, env, "0", "1g", "hold", NULL) == 0 &&
             await_text(&hidden, "holding") == 0;
    struct proc inside;
    int inside_ran = ok && spawn_program(&inside, "/bin/sh", env, "-c",
                                         "exec unshare --user --map-root-user --pid --mount --fork --kill-child "
                                         "--mount-proc \"$0\" link procs 0",
                                         CLIENT, NULL) == 0;
    int inside_st = inside_ran ? await(&inside, 30000) : -1;
    int listed = ok ? run(env, "link", "procs", "0", NULL) : 1;
    if (ok) kill_wait(&hidden);
    H_CHECK(ok, "fake-hidden-alloc did not hold: %s", err_text);
    H_CHECK(inside_st >= 0 && WIFEXITED(inside_st) && WEXITSTATUS(inside_st) == 0,
            "the listing in a PID namespace of its own failed (status %d)", inside_st);
    if (listed) return 1;
    char want[128];
    snprintf(want, sizeof want, "pid %d %llu\n", (int)hidden.pid, GiB);
    H_CHECK(strstr(out_text, want) != NULL, "after a listing from inside a namespace, missing \"%s\" in:\n%s", want,
            out_text);
    return 0;
}

/* A process that claims its entry while a listing reads /proc keeps it
 * (native/tests/reap_race.c). */
static int t_reap_race(const void *arg)
{
    const char *bare[] = {"-LD_PRELOAD", NULL};
    program = REAP_RACE;
    int r = run(bare, HIDDEN_ALLOC, NULL, NULL, NULL);
    program = CLIENT;
    if (r) return 1;
    printf("     %s", out_text);
    return 0;
}

/* "pid PID" followed by its percentage in a procutil listing; -1 if absent. */
static int listed_percent(const char *text, pid_t pid)
{
    char want[32];
    snprintf(want, sizeof want, "pid %d ", (int)pid);
    const char *at = strstr(text, want);
    return at == NULL ? -1 : atoi(at + strlen(want));
}

/* NVML's per-process utilization, as the agent's compute fence reads it:
 * a process whose kernels keep the GPU busy is reported near 100 % over the
 * last 100 ms, one with a context that launches nothing is not reported,
 * and once the busy one has died nothing is. */
static int t_nvml_process_utilization(const void *arg)
{
    const char *env[] = {"-LD_PRELOAD", NULL};
    struct proc busy, idle;
    H_CHECK(start_ready(&busy, env, "busy-hold", NULL) == 0, "busy-hold did not start: %s", err_text);
    if (start_ready(&idle, env, "idle-hold", NULL) != 0) {
        kill_wait(&busy);
        return h_fail("idle-hold did not start: %s", err_text);
    }
    int failed = run(env, "link", "procutil", "0", "100");
    char while_busy[sizeof out_text];
    snprintf(while_busy, sizeof while_busy, "%s", out_text);
    kill_wait(&busy);
    int failed_after = failed ? 1 : run(env, "link", "procutil", "0", "100");
    kill_wait(&idle);
    if (failed || failed_after) return 1;
    int percent = listed_percent(while_busy, busy.pid);
    H_CHECK(percent >= 50, "the busy process at %d %% (-1: not listed) in:\n%s", percent, while_busy);
    H_CHECK(listed_percent(while_busy, idle.pid) == -1, "the idle process listed in:\n%s", while_busy);
    H_CHECK(strcmp(out_text, "none\n") == 0, "after the busy process died:\n%s", out_text);
    return 0;
}

static int t_bogus_free(const void *arg)
{
    const char *bare[] = {"-LD_PRELOAD", NULL};
    return run(bare, "link", "bogus-free", NULL, NULL);
}

static void add_fake_tests(struct t *tests, int *n)
{
#define ADDF(nm, f, a) tests[(*n)++] = (struct t){nm, f, a}
    ADDF("fake NVML: a listing from a PID namespace of its own (a container) leaves the others' memory alone",
         t_nvml_container_leaves_others, NULL);
    ADDF("fake NVML: a process that claims its entry while a listing reads /proc is not reaped (e2e cap flake)",
         t_reap_race, NULL);
    ADDF("fake NVML: per-process utilization reports the process whose kernels ran, not an idle or a dead one",
         t_nvml_process_utilization, NULL);
    ADDF("fake driver: freeing an address it never handed out (1, a freed one) is refused and gives back nothing",
         t_bogus_free, NULL);
#undef ADDF
}
