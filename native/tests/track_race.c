/* track_race.c — the gs_track slot race (issue 11), against track.c itself.
 *
 * A caller that found an entry by its handle and then changed the slot it
 * found could change another handle's entry: between the find and the
 * change, another thread may free the handle and a new allocation reuse the
 * slot.  gs_track_update and gs_track_take hold the entry's lock and re-check
 * the key, so they act on the handle they name or on nothing.
 *
 * track.c is built here with GS_TRACK_TEST_SEAM: gs_track_test_seam, on its first
 * call it does what the other thread would, at the worst moment — frees K1 and
 * inserts K2 into the very slot K1 left.  The update of K1 must then change
 * nothing, K2's counter must be what it was inserted with, and a take of K1
 * must not take K2.  Exit status 0 when so. */
#include <stdint.h>
#include <stdio.h>

#include "vgpu.h"

#define K1 0x7f0000200000ull

static struct gs_table table;
static uint64_t k2;
static int armed;

static void put(uint64_t key, uint64_t c1)
{
    struct gs_entry e = {.key = key, .kind = GS_T_VMM, .dev = 0, .size = 1, .c1 = c1};
    if (gs_track_insert(&table, &e) != 0) fprintf(stderr, "insert of %#llx failed\n", (unsigned long long)key);
}

/* Called by track.c between its find and its lock. */
void gs_track_test_seam(struct gs_entry *found)
{
    if (!armed) return;
    armed = 0;
    struct gs_entry out;
    gs_track_take(&table, K1, GS_T_VMM, &out);
    put(k2, 7);
    if (gs_track_find(&table, k2, GS_T_VMM) != found) fprintf(stderr, "K2 did not land in K1's slot\n");
}

int main(void)
{
    if (gs_track_init(&table, 64) != 0) return 2;
    put(K1, 0);
    struct gs_entry *slot = gs_track_find(&table, K1, GS_T_VMM), out, after;
    /* A second handle that lands in K1's slot once K1 is gone. */
    gs_track_take(&table, K1, GS_T_VMM, &out);
    for (uint64_t k = K1 + 0x200000; k2 == 0; k += 0x200000) {
        put(k, 0);
        if (gs_track_find(&table, k, GS_T_VMM) == slot) k2 = k;
        gs_track_take(&table, k, GS_T_VMM, &out);
    }
    int failed = 0;

    put(K1, 0);
    armed = 1;
    int updated = gs_track_update(&table, K1, GS_T_VMM, 1, &after);
    struct gs_entry *now = gs_track_find(&table, k2, GS_T_VMM);
    printf("update of a freed handle: returned %d; the slot's new owner's counter %llu (inserted 7)\n", updated,
           now ? (unsigned long long)now->c1 : 0ull);
    if (updated != 0 || now == NULL || now->c1 != 7) failed = 1;
    gs_track_take(&table, k2, GS_T_VMM, &out);

    put(K1, 0);
    armed = 1;
    int took = gs_track_take(&table, K1, GS_T_VMM, &out);
    now = gs_track_find(&table, k2, GS_T_VMM);
    printf("take of a freed handle: returned %d; the slot's new owner %s\n", took, now ? "still there" : "gone");
    if (took != 0 || now == NULL) failed = 1;
    return failed;
}
