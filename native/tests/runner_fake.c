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

static void add_fake_tests(struct t *tests, int *n)
{
#define ADDF(nm, f, a) tests[(*n)++] = (struct t){nm, f, a}
    ADDF("fake NVML: a listing from a PID namespace of its own (a container) leaves the others' memory alone",
         t_nvml_container_leaves_others, NULL);
    ADDF("fake NVML: a process that claims its entry while a listing reads /proc is not reaped (e2e cap flake)",
         t_reap_race, NULL);
#undef ADDF
}
