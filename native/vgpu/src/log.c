/* log.c — "[gpushards]"-prefixed messages on stderr, filtered by
 * GPUSHARDS_LOG_LEVEL (error, warn, info, debug or 0-3; default warn). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "vgpu.h"

int gs_log_level = GS_LOG_WARN;

void gs_log_init(void)
{
    const char *v = getenv("GPUSHARDS_LOG_LEVEL");
    if (v == NULL || *v == '\0') return;
    static const char *const names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(v, names[i]) == 0 || (v[0] == '0' + i && v[1] == '\0')) {
            gs_log_level = i;
            return;
        }
    }
    gs_log(GS_LOG_WARN, "GPUSHARDS_LOG_LEVEL=%s is not one of error, warn, info, debug; using warn", v);
}

void gs_log(int level, const char *fmt, ...)
{
    static const char *const tags[] = {"error", "warn", "info", "debug"};
    /* One write(2) per line so lines from several threads or processes
     * don't interleave; stdio would also allocate. */
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "[gpushards] %s pid %d: ", tags[level & 3], (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : ((size_t)m < sizeof buf - (size_t)n - 1 ? (size_t)m : sizeof buf - (size_t)n - 2));
    buf[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, buf, len);
    (void)w; /* nowhere better to report a failed write to stderr */
}
