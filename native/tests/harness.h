/* harness.h — a tiny test harness: one line per test, a final
 * "N passed, N failed" line, exit status 1 if anything failed or nothing
 * ran. */
#ifndef GPUSHARDS_HARNESS_H
#define GPUSHARDS_HARNESS_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static int h_passed, h_failed;
static char h_why[4096];

/* Record why the running test failed and return 1 from it. */
static int h_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), unused));
static int h_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h_why, sizeof h_why, fmt, ap);
    va_end(ap);
    return 1;
}

#define H_CHECK(cond, ...)                                                                               \
    do {                                                                                                 \
        if (!(cond)) return h_fail(__VA_ARGS__);                                                         \
    } while (0)

static void h_run(const char *name, int (*fn)(const void *), const void *arg)
{
    struct timespec t0, t1;
    h_why[0] = '\0';
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int failed = fn(arg);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    if (failed) {
        h_failed++;
        printf("FAIL %s (%ld ms): %s\n", name, ms, h_why);
    } else {
        h_passed++;
        printf("ok   %s (%ld ms)\n", name, ms);
    }
    fflush(stdout);
}

static int h_finish(void)
{
    printf("%d passed, %d failed\n", h_passed, h_failed);
    return h_failed == 0 && h_passed > 0 ? 0 : 1;
}

#endif
