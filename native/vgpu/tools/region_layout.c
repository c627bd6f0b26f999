/* region-layout — prints the shared region's layout as JSON: every field's
 * byte offset and size, from the same header libvgpu.so is compiled with.
 * The agent's TypeScript reader is tested against this output.  "limits"
 * holds the read-only limits file's layout (gpushards_limits.h) the same way. */
#include <stddef.h>
#include <stdio.h>

#include "gpushards_limits.h"
#include "gpushards_region.h"

#define FIELD(type, name, last)                                                                              \
    printf("      \"%s\": { \"offset\": %zu, \"size\": %zu }%s\n", #name, offsetof(struct type, name),         \
           sizeof(((struct type *)0)->name), (last) ? "" : ",")

int main(void)
{
    printf("{\n");
    printf("  \"magic\": \"0x%016llx\",\n", (unsigned long long)GPUSHARDS_REGION_MAGIC);
    printf("  \"version\": %u,\n", GPUSHARDS_REGION_VERSION);
    printf("  \"byteOrder\": \"little\",\n");
    printf("  \"maxDevices\": %u,\n", GPUSHARDS_MAX_DEVICES);
    printf("  \"maxSlots\": %u,\n", GPUSHARDS_MAX_SLOTS);
    printf("  \"ipcImporterSlots\": %u,\n", GPUSHARDS_IPC_IMPORTER_SLOTS);
    printf("  \"checksum\": { \"algorithm\": \"fnv1a64\", \"coversBytes\": %u },\n", GPUSHARDS_CHECKSUM_BYTES);
    printf("  \"totalSize\": %zu,\n", sizeof(struct gpushards_region));
    printf("  \"structs\": {\n");
    printf("    \"header\": {\n      \"size\": %zu,\n      \"offset\": 0,\n      \"fields\": {\n",
           sizeof(struct gpushards_region_header));
    FIELD(gpushards_region_header, magic, 0);
    FIELD(gpushards_region_header, version, 0);
    FIELD(gpushards_region_header, header_size, 0);
    FIELD(gpushards_region_header, total_size, 0);
    FIELD(gpushards_region_header, max_devices, 0);
    FIELD(gpushards_region_header, max_slots, 0);
    FIELD(gpushards_region_header, device_size, 0);
    FIELD(gpushards_region_header, slot_size, 0);
    FIELD(gpushards_region_header, devices_offset, 0);
    FIELD(gpushards_region_header, slots_offset, 0);
    FIELD(gpushards_region_header, checksum, 0);
    FIELD(gpushards_region_header, device_count, 0);
    FIELD(gpushards_region_header, ipc_importers_unlisted, 0);
    FIELD(gpushards_region_header, wake_requests, 0);
    FIELD(gpushards_region_header, wake_requested_ns, 0);
    FIELD(gpushards_region_header, bell, 0);
    FIELD(gpushards_region_header, ipc_importers, 0);
    FIELD(gpushards_region_header, lock, 1);
    printf("      }\n    },\n");
    printf("    \"device\": {\n      \"size\": %zu,\n      \"offset\": %zu,\n      \"count\": %u,\n      \"fields\": {\n",
           sizeof(struct gpushards_device), offsetof(struct gpushards_region, devices), GPUSHARDS_MAX_DEVICES);
    FIELD(gpushards_device, uuid, 0);
    FIELD(gpushards_device, state, 0);
    FIELD(gpushards_device, limit_bytes, 0);
    FIELD(gpushards_device, used_bytes, 0);
    FIELD(gpushards_device, context_bytes, 0);
    FIELD(gpushards_device, peak_bytes, 0);
    FIELD(gpushards_device, total_bytes, 0);
    FIELD(gpushards_device, pool_growth_bytes, 0);
    FIELD(gpushards_device, last_launch_ns, 0);
    FIELD(gpushards_device, pressure_count, 0);
    FIELD(gpushards_device, pressure_ns, 1);
    printf("      }\n    },\n");
    printf("    \"slot\": {\n      \"size\": %zu,\n      \"offset\": %zu,\n      \"count\": %u,\n      \"fields\": {\n",
           sizeof(struct gpushards_slot), offsetof(struct gpushards_region, slots), GPUSHARDS_MAX_SLOTS);
    FIELD(gpushards_slot, pid, 0);
    FIELD(gpushards_slot, last_launch_s, 0);
    FIELD(gpushards_slot, start_time, 0);
    FIELD(gpushards_slot, used_bytes, 1);
    printf("      }\n    }\n  },\n");
    printf("  \"limits\": {\n");
    printf("    \"path\": \"%s\",\n", GPUSHARDS_LIMITS_FIXED_PATH);
    printf("    \"magic\": \"0x%016llx\",\n", (unsigned long long)GPUSHARDS_LIMITS_MAGIC);
    printf("    \"version\": %u,\n", GPUSHARDS_LIMITS_VERSION);
    printf("    \"byteOrder\": \"little\",\n");
    printf("    \"maxDevices\": %u,\n", GPUSHARDS_LIMITS_MAX_DEVICES);
    printf("    \"checksum\": { \"algorithm\": \"fnv1a64\", \"coversBytes\": %u },\n",
           GPUSHARDS_LIMITS_CHECKSUM_BYTES);
    printf("    \"totalSize\": %zu,\n", sizeof(struct gpushards_limits));
    printf("    \"structs\": {\n");
    printf("    \"header\": {\n      \"size\": %zu,\n      \"offset\": 0,\n      \"fields\": {\n",
           sizeof(struct gpushards_limits_header));
    FIELD(gpushards_limits_header, magic, 0);
    FIELD(gpushards_limits_header, version, 0);
    FIELD(gpushards_limits_header, header_size, 0);
    FIELD(gpushards_limits_header, total_size, 0);
    FIELD(gpushards_limits_header, max_devices, 0);
    FIELD(gpushards_limits_header, device_size, 0);
    FIELD(gpushards_limits_header, device_count, 0);
    FIELD(gpushards_limits_header, checksum, 0);
    FIELD(gpushards_limits_header, shard_id, 0);
    FIELD(gpushards_limits_header, compute_turns, 0);
    FIELD(gpushards_limits_header, memory_state, 0);
    FIELD(gpushards_limits_header, pressure_wait_ms, 1);
    printf("      }\n    },\n");
    printf("    \"device\": {\n      \"size\": %zu,\n      \"offset\": %zu,\n      \"count\": %u,\n"
           "      \"fields\": {\n",
           sizeof(struct gpushards_limits_device), offsetof(struct gpushards_limits, devices),
           GPUSHARDS_LIMITS_MAX_DEVICES);
    FIELD(gpushards_limits_device, uuid, 0);
    FIELD(gpushards_limits_device, state, 0);
    FIELD(gpushards_limits_device, limit_bytes, 0);
    FIELD(gpushards_limits_device, context_bytes, 0);
    FIELD(gpushards_limits_device, pool_growth_bytes, 0);
    FIELD(gpushards_limits_device, real_bytes, 0);
    FIELD(gpushards_limits_device, real_sampled_at_ms, 0);
    FIELD(gpushards_limits_device, compute_share_permille, 0);
    FIELD(gpushards_limits_device, compute_mode, 0);
    FIELD(gpushards_limits_device, mps_thread_percent, 1);
    printf("      }\n    }\n    }\n  }\n}\n");
    return 0;
}
