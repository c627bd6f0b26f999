/* workload — the program test shards run, built static so an image needs nothing else.
 *   workload sleep             waits; exits 0 on SIGTERM
 *   workload ignore-term       waits and ignores SIGTERM (only SIGKILL ends it)
 *   workload exit <code> [ms]  exits with <code>, after [ms] milliseconds */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void on_term(int signo)
{
    (void)signo;
    _exit(0);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "sleep";
    if (strcmp(mode, "exit") == 0) {
        if (argc > 3) usleep((useconds_t)atoi(argv[3]) * 1000);
        return argc > 2 ? atoi(argv[2]) : 0;
    }
    /* PID 1 of a container ignores signals it has no handler for: say what to do. */
    signal(SIGTERM, strcmp(mode, "ignore-term") == 0 ? SIG_IGN : on_term);
    for (;;) pause();
}
