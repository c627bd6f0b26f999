/* config.c — the environment, read once per process at initialisation
 * (never on the allocation path). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vgpu.h"

struct gs_config gs_cfg;

#define GS_DEFAULT_REGION_PATH "/tmp/gpushards/region"
#define GS_DEFAULT_TRACK_CAPACITY (1u << 16)

/* HAMi-core syntax: decimal bytes, or a number with a k, m, g or t suffix
 * (any case, 1024-based).  Anything else — empty, signs, spaces, decimals,
 * exponents, overflow — is rejected so that a typo can never turn into an
 * uncapped container. */
int gs_parse_size(const char *text, uint64_t *out)
{
    if (text == NULL || *text == '\0') return -1;
    uint64_t v = 0;
    const char *p = text;
    if (*p < '0' || *p > '9') return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    unsigned shift = 0;
    switch (*p) {
    case '\0': break;
    case 'k': case 'K': shift = 10; p++; break;
    case 'm': case 'M': shift = 20; p++; break;
    case 'g': case 'G': shift = 30; p++; break;
    case 't': case 'T': shift = 40; p++; break;
    default: return -1;
    }
    if (*p != '\0') return -1;
    if (shift != 0 && v > (UINT64_MAX >> shift)) return -1;
    *out = v << shift;
    return 0;
}

static int read_limit(const char *name, int *have, uint64_t *value)
{
    const char *v = getenv(name);
    if (v == NULL) return 0;
    uint64_t bytes;
    if (gs_parse_size(v, &bytes) != 0) {
        gs_log(GS_LOG_ERROR,
               "%s=\"%s\" is not a size (bytes, or a number with k, m or g); "
               "refusing every GPU allocation rather than running uncapped",
               name, v);
        return -1;
    }
    /* HAMi-core treats 0 as "no limit"; so do we. */
    *have = bytes != 0;
    *value = bytes;
    gs_cfg.any_limit = 1;
    return 0;
}

void gs_config_load(void)
{
    memset(&gs_cfg, 0, sizeof gs_cfg);
    if (read_limit("CUDA_DEVICE_MEMORY_LIMIT", &gs_cfg.have_global_limit, &gs_cfg.global_limit) != 0)
        gs_cfg.limits_bad = 1;
    for (int i = 0; i < GS_MAX_ORDINALS; i++) {
        char name[48];
        snprintf(name, sizeof name, "CUDA_DEVICE_MEMORY_LIMIT_%d", i);
        if (read_limit(name, &gs_cfg.have_limit[i], &gs_cfg.limit[i]) != 0) gs_cfg.limits_bad = 1;
    }

    const char *ctx = getenv("GPUSHARDS_CONTEXT_BYTES");
    if (ctx != NULL && gs_parse_size(ctx, &gs_cfg.context_bytes) != 0) {
        gs_log(GS_LOG_ERROR, "GPUSHARDS_CONTEXT_BYTES=\"%s\" is not a size; refusing every GPU allocation", ctx);
        gs_cfg.context_bytes_bad = 1;
        gs_cfg.context_bytes = 0;
    }

    /* A typo here must not quietly shrink the reservation that keeps pools
     * under the cap, so it fails closed like a bad limit. */
    const char *growth = getenv("GPUSHARDS_POOL_GROWTH_BYTES");
    if (growth != NULL && gs_parse_size(growth, &gs_cfg.pool_growth_bytes) != 0) {
        gs_log(GS_LOG_ERROR, "GPUSHARDS_POOL_GROWTH_BYTES=\"%s\" is not a size; refusing every GPU allocation",
               growth);
        gs_cfg.pool_growth_bad = 1;
        gs_cfg.pool_growth_bytes = 0;
    }

    gs_cfg.track_capacity = GS_DEFAULT_TRACK_CAPACITY;
    const char *cap = getenv("GPUSHARDS_TRACK_CAPACITY");
    uint64_t c;
    if (cap != NULL) {
        if (gs_parse_size(cap, &c) == 0 && c >= 64 && c <= (1u << 24))
            gs_cfg.track_capacity = (uint32_t)c;
        else
            gs_log(GS_LOG_WARN, "GPUSHARDS_TRACK_CAPACITY=\"%s\" ignored (64 to 16m); using %u", cap,
                   GS_DEFAULT_TRACK_CAPACITY);
    }

    /* Outside a shard the bound; inside one it may only shorten the agent's
     * (gs_limits_pressure_wait_ms).  A typo keeps the default. */
    gs_cfg.pressure_wait_ms = GPUSHARDS_PRESSURE_WAIT_DEFAULT_MS;
    gs_cfg.pressure_wait_ms_set = 0;
    const char *wait = getenv("GPUSHARDS_PRESSURE_WAIT_MS");
    if (wait != NULL) {
        char *end;
        unsigned long long ms = strtoull(wait, &end, 10);
        if (*wait >= '0' && *wait <= '9' && *end == '\0' && ms <= 600000) {
            gs_cfg.pressure_wait_ms = (uint32_t)ms;
            gs_cfg.pressure_wait_ms_set = 1;
        }
        else
            gs_log(GS_LOG_ERROR, "GPUSHARDS_PRESSURE_WAIT_MS=\"%s\" is not a number of ms (0 to 600000); using %u", wait,
                   GPUSHARDS_PRESSURE_WAIT_DEFAULT_MS);
    }

    gs_cfg.visible_devices_set = getenv("CUDA_VISIBLE_DEVICES") != NULL;

    const char *path = getenv("GPUSHARDS_REGION_PATH");
    if (path == NULL || *path == '\0') path = GS_DEFAULT_REGION_PATH;
    if (strlen(path) >= sizeof gs_cfg.region_path - 32) {
        gs_log(GS_LOG_ERROR, "GPUSHARDS_REGION_PATH is too long; refusing every GPU allocation");
        gs_cfg.limits_bad = 1;
        path = GS_DEFAULT_REGION_PATH;
    }
    strcpy(gs_cfg.region_path, path);
}

int gs_config_limit_for(int ordinal, uint64_t *limit)
{
    if (ordinal >= 0 && ordinal < GS_MAX_ORDINALS && gs_cfg.have_limit[ordinal]) {
        *limit = gs_cfg.limit[ordinal];
        return 1;
    }
    if (gs_cfg.have_global_limit) {
        *limit = gs_cfg.global_limit;
        return 1;
    }
    return 0;
}
