/* gpushards-region — look at or prepare a shared region file from outside
 * the container, with the library's own code (so the file is created with
 * its robust lock, which only C can initialise).
 *
 *   gpushards-region show PATH
 *       the region as JSON: devices (UUID, limit, used, peak, context,
 *       total bytes) and the processes holding memory
 *   gpushards-region set PATH GPU-UUID [limit=SIZE] [context=SIZE] [pool_growth=SIZE]
 *       create the region if needed, add the GPU if needed, and set its
 *       limit (0 = uncapped), per-context charge and stream-ordered pools'
 *       growth step (0 = the library's default); SIZE as in
 *       CUDA_DEVICE_MEMORY_LIMIT (bytes or k/m/g/t)
 *
 * Exit status 0 on success, 1 with a message on stderr otherwise. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "vgpu.h"

static int show(void)
{
    const struct gpushards_region *r = gs_region;
    printf("{\n  \"version\": %u,\n  \"devices\": [", r->header.version);
    uint32_t n = __atomic_load_n(&r->header.device_count, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < n && i < GPUSHARDS_MAX_DEVICES; i++) {
        const struct gpushards_device *d = &r->devices[i];
        char uuid[41];
        gs_uuid_format(d->uuid, uuid);
        printf("%s\n    { \"index\": %u, \"uuid\": \"%s\", \"limitBytes\": %llu, \"usedBytes\": %llu, "
               "\"peakBytes\": %llu, \"contextBytes\": %llu, \"totalBytes\": %llu, \"poolGrowthBytes\": %llu }",
               i ? "," : "", i, uuid, (unsigned long long)d->limit_bytes, (unsigned long long)d->used_bytes,
               (unsigned long long)d->peak_bytes, (unsigned long long)d->context_bytes,
               (unsigned long long)d->total_bytes, (unsigned long long)d->pool_growth_bytes);
    }
    printf("\n  ],\n  \"processes\": [");
    int first = 1;
    for (unsigned s = 0; s < GPUSHARDS_MAX_SLOTS; s++) {
        const struct gpushards_slot *p = &r->slots[s];
        if (p->pid == 0) continue;
        printf("%s\n    { \"pid\": %d, \"startTime\": %llu, \"usedBytes\": [", first ? "" : ",", p->pid,
               (unsigned long long)p->start_time);
        for (uint32_t i = 0; i < n && i < GPUSHARDS_MAX_DEVICES; i++)
            printf("%s%llu", i ? ", " : "", (unsigned long long)p->used_bytes[i]);
        printf("] }");
        first = 0;
    }
    printf("\n  ]\n}\n");
    return 0;
}

static int set(int argc, char **argv)
{
    uint8_t uuid[16];
    if (gs_uuid_parse(argv[0], uuid) != 0) {
        fprintf(stderr, "gpushards-region: \"%s\" is not a GPU UUID\n", argv[0]);
        return 1;
    }
    int idx = gs_region_attach_device(uuid, 0, 0, 0);
    if (idx < 0) return 1;
    struct gpushards_device *d = &gs_region->devices[idx];
    for (int i = 1; i < argc; i++) {
        uint64_t v;
        const char *eq = strchr(argv[i], '=');
        if (eq == NULL || gs_parse_size(eq + 1, &v) != 0) {
            fprintf(stderr, "gpushards-region: expected limit=SIZE, context=SIZE or pool_growth=SIZE, got \"%s\"\n", argv[i]);
            return 1;
        }
        if (strncmp(argv[i], "limit=", 6) == 0) __atomic_store_n(&d->limit_bytes, v, __ATOMIC_RELEASE);
        else if (strncmp(argv[i], "context=", 8) == 0) __atomic_store_n(&d->context_bytes, v, __ATOMIC_RELEASE);
        else if (strncmp(argv[i], "pool_growth=", 12) == 0)
            __atomic_store_n(&d->pool_growth_bytes, v, __ATOMIC_RELEASE);
        else {
            fprintf(stderr, "gpushards-region: unknown setting \"%s\"\n", argv[i]);
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[1], "show") != 0 && strcmp(argv[1], "set") != 0) ||
        (strcmp(argv[1], "set") == 0 && argc < 4)) {
        fprintf(stderr, "usage: gpushards-region show PATH\n"
                        "       gpushards-region set PATH GPU-UUID [limit=SIZE] [context=SIZE] [pool_growth=SIZE]\n");
        return 1;
    }
    gs_log_init();
    if (strlen(argv[2]) >= sizeof gs_cfg.region_path - 32) {
        fprintf(stderr, "gpushards-region: path too long\n");
        return 1;
    }
    /* show never creates: a missing region is an error there. */
    if (strcmp(argv[1], "show") == 0 && access(argv[2], F_OK) != 0) {
        fprintf(stderr, "gpushards-region: no region at %s\n", argv[2]);
        return 1;
    }
    if (gs_region_open(argv[2]) != 0) return 1;
    return strcmp(argv[1], "show") == 0 ? show() : set(argc - 3, argv + 3);
}
