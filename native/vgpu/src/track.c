/* track.c — what this process holds: handle -> (kind, device, size, owner).
 *
 * A fixed-capacity open-addressing table allocated once with mmap at
 * initialisation.  Inserts and lookups are lock-free: a slot is claimed by
 * CAS on its key (EMPTY or TOMB -> BUSY), filled, then published with a
 * release store of the real key; removal is a CAS from the key to TOMB, so
 * exactly one of two racing frees wins.  Removal and in-place updates hold
 * the entry's own spin lock for a few instructions, so an update can never
 * land on a slot that was freed and reused meanwhile.  Nothing here calls
 * malloc or makes a system call after init.
 *
 * Probing is bounded to GS_PROBE_WINDOW slots from the key's hash.  Freed
 * slots become tombstones that inserts reuse; without the bound, a long-lived
 * process would end with no EMPTY slot left and every miss would scan the
 * whole table.  With the bound every operation costs at most a window, and
 * "full" means a window with no free slot, which needs the table to be
 * nearly full of live entries. */
#include <string.h>
#include <sys/mman.h>

#include "vgpu.h"

#define GS_KEY_EMPTY 0ull
#define GS_KEY_TOMB 1ull
#define GS_KEY_BUSY 2ull
#define GS_PROBE_WINDOW 128u

struct gs_table gs_allocs;

static uint32_t slot_of(const struct gs_table *t, uint64_t key)
{
    /* splitmix64's finaliser: device pointers share their low bits
     * (alignment) and high bits (one VA range), so spread them. */
    uint64_t x = key;
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return (uint32_t)x & t->mask;
}

static uint32_t window(const struct gs_table *t)
{
    return t->mask + 1 < GS_PROBE_WINDOW ? t->mask + 1 : GS_PROBE_WINDOW;
}

int gs_track_init(struct gs_table *t, uint32_t capacity)
{
    uint32_t cap = 64;
    while (cap < capacity) cap <<= 1;
    void *m = mmap(NULL, (size_t)cap * sizeof(struct gs_entry), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return -1;
    t->e = m;
    t->mask = cap - 1;
    return 0;
}

/* A fork child starts with nothing: what the parent holds is the parent's.
 * Fresh anonymous pages instead of memset, so the child does not copy the
 * parent's table page by page. */
void gs_track_drop_all(struct gs_table *t)
{
    if (t->e == NULL) return;
    size_t bytes = ((size_t)t->mask + 1) * sizeof(struct gs_entry);
    void *m = mmap(t->e, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (m == MAP_FAILED) memset(t->e, 0, bytes);
}

int gs_track_insert(struct gs_table *t, const struct gs_entry *e)
{
    if (t->e == NULL || e->key <= GS_KEY_BUSY) return -1;
    uint32_t start = slot_of(t, e->key), n = window(t);
    for (uint32_t i = 0; i < n; i++) {
        struct gs_entry *s = &t->e[(start + i) & t->mask];
        uint64_t k = __atomic_load_n(&s->key, __ATOMIC_RELAXED);
        if (k != GS_KEY_EMPTY && k != GS_KEY_TOMB) continue;
        if (!__atomic_compare_exchange_n(&s->key, &k, GS_KEY_BUSY, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            continue;
        s->kind = e->kind;
        s->dev = e->dev;
        s->size = e->size;
        s->owner = e->owner;
        __atomic_store_n(&s->c1, e->c1, __ATOMIC_RELAXED);
        __atomic_store_n(&s->c2, e->c2, __ATOMIC_RELAXED);
        __atomic_store_n(&s->flags, e->flags, __ATOMIC_RELAXED);
        __atomic_store_n(&s->key, e->key, __ATOMIC_RELEASE);
        return 0;
    }
    return -1;
}

struct gs_entry *gs_track_find(struct gs_table *t, uint64_t key, uint32_t kinds)
{
    if (t->e == NULL || key <= GS_KEY_BUSY) return NULL;
    uint32_t start = slot_of(t, key), n = window(t);
    for (uint32_t i = 0; i < n; i++) {
        struct gs_entry *s = &t->e[(start + i) & t->mask];
        uint64_t k = __atomic_load_n(&s->key, __ATOMIC_ACQUIRE);
        if (k == GS_KEY_EMPTY) return NULL;
        if (k == key && (s->kind & kinds) != 0) return s;
    }
    return NULL;
}

/* A test seam: native/tests/track_race.c builds this file with code that frees
 * and reuses the slot right here, between the find and the lock, where
 * another thread could.  Nothing in libvgpu.so. */
#ifdef GS_TRACK_TEST_SEAM
void gs_track_test_seam(struct gs_entry *found);
#define GS_TRACK_AFTER_FIND(s) gs_track_test_seam(s)
#else
#define GS_TRACK_AFTER_FIND(s) ((void)0)
#endif

static void entry_lock(struct gs_entry *s)
{
    while (__atomic_exchange_n(&s->lock, 1, __ATOMIC_ACQUIRE) != 0)
        while (__atomic_load_n(&s->lock, __ATOMIC_RELAXED) != 0) {
        }
}

static void entry_unlock(struct gs_entry *s)
{
    __atomic_store_n(&s->lock, 0, __ATOMIC_RELEASE);
}

/* A slot found by key may be taken and reused by another thread before the
 * finder touches it; the entry's lock, held by every taker, closes that gap:
 * under it the key cannot change from one live handle to another. */
int gs_track_update(struct gs_table *t, uint64_t key, uint32_t kinds, int64_t delta, struct gs_entry *after)
{
    struct gs_entry *s = gs_track_find(t, key, kinds);
    if (s == NULL) return 0;
    GS_TRACK_AFTER_FIND(s);
    entry_lock(s);
    int ok = __atomic_load_n(&s->key, __ATOMIC_ACQUIRE) == key && (s->kind & kinds) != 0;
    if (ok) {
        __atomic_add_fetch(&s->c1, (uint64_t)delta, __ATOMIC_ACQ_REL);
        *after = *s;
        after->lock = 0;
    }
    entry_unlock(s);
    return ok;
}

int gs_track_take(struct gs_table *t, uint64_t key, uint32_t kinds, struct gs_entry *out)
{
    struct gs_entry *s = gs_track_find(t, key, kinds);
    if (s == NULL) return 0;
    GS_TRACK_AFTER_FIND(s);
    entry_lock(s);
    struct gs_entry copy = *s;
    uint64_t k = key;
    /* Fields read before the CAS are the winner's to use: once the slot is
     * TOMB another insert may overwrite them.  A lost CAS means a racing
     * free of the same handle won. */
    int won = (copy.kind & kinds) != 0 &&
              __atomic_compare_exchange_n(&s->key, &k, GS_KEY_TOMB, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
    entry_unlock(s);
    if (!won) return 0;
    *out = copy;
    out->key = key;
    out->lock = 0;
    return 1;
}

void gs_track_each(struct gs_table *t, void (*fn)(struct gs_entry *e, void *arg), void *arg)
{
    if (t->e == NULL) return;
    for (uint32_t i = 0; i <= t->mask; i++) {
        struct gs_entry *s = &t->e[i];
        if (__atomic_load_n(&s->key, __ATOMIC_ACQUIRE) > GS_KEY_BUSY) fn(s, arg);
    }
}
