/* reap_race.c — the fake driver's reaper and a process that appears while it
 * reads /proc (issue 11: the e2e fill probe killed at its cap plus another
 * probe's 256 MiB with the fence sampling every 50 ms).
 *
 * Every NVML listing frees the entries of processes it cannot find in
 * /proc.  A process that claimed its entry after the reading had passed its
 * place was not found, and its entry was freed while it lived: its memory
 * left the listing, and the next process to claim the entry was charged
 * with whatever the first one took afterwards (another shard's bytes under
 * its pid; the fence then killed it).
 *
 * fake_common.c is built here with FAKE_REAP_TEST_SEAM: fake_test_after_scan
 * runs between the reading of /proc and the reaping.  On its first call it
 * starts, in a PID namespace of its own (as in a container), a process that
 * takes 512 MiB and holds it, and waits for its "holding".  The next listing
 * must show that process with its 512 MiB.  Exit status 0 when so.
 *
 *   vgpu-reap-race HIDDEN_ALLOC    (GPUSHARDS_FAKE_STATE etc. from the runner) */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fake_common.h"

#define MiB (1ull << 20)

static const char *hidden_alloc;
static int armed;
static pid_t unshare_pid = -1;
static int holder_ready;

/* Reads the child's stdout until it says "holding" (or ends). */
static int await_holding(int fd)
{
    char buf[256];
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fd, buf + len, sizeof buf - 1 - len);
        if (n <= 0) return -1;
        len += (size_t)n;
        buf[len] = '\0';
        if (strstr(buf, "holding") != NULL) return 0;
        if (len == sizeof buf - 1) len = 0;
    }
}

/* Called by fake_common.c after /proc was read, before anything is reaped. */
void fake_test_after_scan(void)
{
    if (!armed) return;
    armed = 0;
    int out[2];
    if (pipe(out) != 0) return;
    unshare_pid = fork();
    if (unshare_pid == 0) {
        dup2(out[1], 1);
        close(out[0]);
        close(out[1]);
        execlp("unshare", "unshare", "--user", "--map-root-user", "--pid", "--mount", "--fork", "--kill-child",
               "--mount-proc", hidden_alloc, "0", "512m", "hold", (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    holder_ready = unshare_pid > 0 && await_holding(out[0]) == 0;
    close(out[0]);
}

/* The holder: unshare's only child. */
static int holder_pid(void)
{
    char path[64], kids[64] = "";
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)unshare_pid, (int)unshare_pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    if (fgets(kids, sizeof kids, f) == NULL) kids[0] = '\0';
    fclose(f);
    return atoi(kids);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: vgpu-reap-race HIDDEN_ALLOC\n");
        return 2;
    }
    hidden_alloc = argv[1];
    if (fake_setup() != 0) return 2;
    struct fake_proc_usage procs[FAKE_MAX_PROCS];
    armed = 1;
    fake_procs_on(0, procs, FAKE_MAX_PROCS); /* the holder starts within this listing */
    int holder = holder_ready ? holder_pid() : 0;
    int n = fake_procs_on(0, procs, FAKE_MAX_PROCS);
    unsigned long long listed = 0;
    for (int i = 0; i < n && i < FAKE_MAX_PROCS; i++)
        if ((int)procs[i].host_pid == holder) listed = procs[i].used;
    if (unshare_pid > 0) {
        kill(unshare_pid, SIGKILL); /* --kill-child: the holder goes with it */
        waitpid(unshare_pid, NULL, 0);
    }
    if (!holder_ready || holder <= 0) {
        printf("the holder did not start\n");
        return 1;
    }
    printf("a process that took 512 MiB while /proc was being read: listed with %llu MiB afterwards\n",
           listed / MiB);
    return listed == 512 * MiB ? 0 : 1;
}
