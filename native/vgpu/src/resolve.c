/* resolve.c — finding the real driver functions, and handing out ours.
 *
 * Applications reach the driver three ways, and each one must land on our
 * hooks while our hooks reach the real driver, never themselves:
 *   1. linking against libcuda: our exported names win because we are
 *      preloaded (the dynamic linker searches us first);
 *   2. dlopen("libcuda.so.1") + dlsym: a handle-scoped lookup skips
 *      preloaded objects, so we export dlsym itself and answer hooked names;
 *   3. cuGetProcAddress (how the CUDA runtime >= 11.3 finds every entry
 *      point): we call the real one and swap the pointer it returns for our
 *      hook when it is the real function we hook.  Matching the returned
 *      pointer, rather than the requested name and version, follows whatever
 *      version and per-thread-stream choice the driver made; on driver 580
 *      these pointers are the same as the exported symbols.
 * The real functions come from dlopen("libcuda.so.1") and the real dlsym on
 * that handle, which searches libcuda and its dependencies only. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <string.h>

#include "vgpu.h"

typedef void *(*dlsym_fn)(void *, const char *);
/* The real dlsym; the assembly below jumps to it by name. */
void *gs_real_dlsym_next;

#if defined(__x86_64__)
#define GS_GLIBC_BASE "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define GS_GLIBC_BASE "GLIBC_2.17"
#else
#error "libvgpu.so supports x86_64 and aarch64"
#endif

static dlsym_fn real_dlsym_fn(void)
{
    dlsym_fn f = (dlsym_fn)__atomic_load_n(&gs_real_dlsym_next, __ATOMIC_ACQUIRE);
    if (GS_LIKELY(f != NULL)) return f;
    /* dlvsym, not dlsym: asking for dlsym by name would find our own.
     * glibc >= 2.34 defines dlsym@GLIBC_2.34 in libc; older ones only the
     * base version in libdl. */
    f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (f == NULL) f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", GS_GLIBC_BASE);
    if (f == NULL) gs_log(GS_LOG_ERROR, "cannot find the real dlsym");
    __atomic_store_n(&gs_real_dlsym_next, (void *)f, __ATOMIC_RELEASE);
    return f;
}

static void *real_dlsym(void *handle, const char *name)
{
    dlsym_fn f = real_dlsym_fn();
    return f != NULL ? f(handle, name) : NULL;
}

static const struct gs_hook *hook_for_name(const char *name)
{
    const struct gs_hook *tables[] = {gs_cuda_hooks, gs_nvml_hooks, gs_launch_hooks, gs_wake_hooks};
    const size_t counts[] = {gs_cuda_hook_count, gs_nvml_hook_count, gs_launch_hook_count, gs_wake_hook_count};
    for (int t = 0; t < 4; t++)
        for (size_t i = 0; i < counts[t]; i++)
            if (tables[t][i].hook != NULL && strcmp(tables[t][i].name, name) == 0) return &tables[t][i];
    return NULL;
}

/* dlsym itself.  RTLD_NEXT must be answered relative to the caller, and
 * glibc finds the caller from its own return address: a jump (not a call)
 * to the real dlsym leaves the caller's return address in place, so the
 * answer is exactly glibc's.  Everything else goes to gs_dlsym below. */
void *gs_dlsym(void *handle, const char *name);
#if defined(__x86_64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, @function\n"
        "dlsym:\n"
#if defined(__CET__) && (__CET__ & 1)
        "    endbr64\n"
#endif
        "    cmpq $-1, %rdi\n"
        "    jne gs_dlsym\n"
        "    movq gs_real_dlsym_next(%rip), %rax\n"
        "    testq %rax, %rax\n"
        "    je gs_dlsym\n"
        "    jmp *%rax\n"
        ".size dlsym, .-dlsym\n");
#elif defined(__aarch64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, %function\n"
        "dlsym:\n"
        "    cmn x0, #1\n"
        "    b.ne gs_dlsym\n"
        "    adrp x16, gs_real_dlsym_next\n"
        "    ldr x16, [x16, :lo12:gs_real_dlsym_next]\n"
        "    cbz x16, gs_dlsym\n"
        "    br x16\n"
        ".size dlsym, .-dlsym\n");
#endif

/* Set before anything else can run in the process, so the jump above is
 * taken from the first dlsym(RTLD_NEXT) on. */
__attribute__((constructor)) static void find_real_dlsym(void)
{
    real_dlsym_fn();
}

void *gs_dlsym(void *handle, const char *name)
{
    /* RTLD_NEXT lands here only if asked before our constructor ran; the
     * answer is then relative to libvgpu.so rather than the caller. */
    void *p = real_dlsym(handle, name);
    if (handle == RTLD_NEXT || p == NULL) return p;
    int nvml = strncmp(name, "nvml", 4) == 0;
    if (!nvml && (name[0] != 'c' || name[1] != 'u')) return p;
    const struct gs_hook *hk = hook_for_name(name);
    if (hk == NULL) return p;
    void *h = hk->hook;
    /* A copy of the driver in another link-map namespace (dlmopen) is not
     * the one we interpose: answering with our hook would send some of the
     * program's calls to one copy and the rest to the other (its cuInit to
     * ours, its cuDeviceGet to its own: CUDA_ERROR_NOT_INITIALIZED).  Such a
     * program runs on its own copy, uncounted here; the agent's NVML
     * ground truth sees what it takes (docs/interposer.md). */
    if (p != h) {
        if ((nvml ? gs_resolve_nvml() : gs_resolve_cuda()) != 0) return p;
        if (__atomic_load_n(hk->real, __ATOMIC_RELAXED) != p) return p;
    }
    /* A global lookup that found only our export: without the driver
     * loaded, the answer is "no such symbol", as it would be without us
     * (programs probe for CUDA this way). */
    if (p == h && handle == RTLD_DEFAULT) {
        void *lib = dlopen(nvml ? "libnvidia-ml.so.1" : "libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
        if (lib == NULL) return NULL;
        if (dlclose(lib) != 0) gs_log(GS_LOG_WARN, "dlclose: %s", dlerror());
    }
    return h;
}

/* 0 none, 1 resolving, 2 done, 3 failed. */
static int cuda_state, nvml_state, launch_state, wake_state;
static __thread int in_resolve __attribute__((tls_model("initial-exec")));

static int resolve(int *state, const char *lib, const struct gs_hook *hooks, size_t n)
{
    int s = __atomic_load_n(state, __ATOMIC_ACQUIRE);
    if (GS_LIKELY(s == 2)) return 0;
    if (s == 3) return -1;
    /* The library's constructors may call back into an exported hook while
     * we are still inside dlopen: that call gets "not initialised" rather
     * than waiting on itself. */
    if (in_resolve) return -1;
    int expected = 0;
    if (__atomic_compare_exchange_n(state, &expected, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        in_resolve = 1;
        void *h = dlopen(lib, RTLD_LAZY);
        if (h == NULL) {
            gs_log(GS_LOG_ERROR, "cannot load %s: %s", lib, dlerror());
        } else {
            for (size_t i = 0; i < n; i++) {
                void *p = real_dlsym(h, hooks[i].name);
                /* Never keep one of ours as "real": that would recurse. */
                if (p != NULL && p == hooks[i].hook) p = NULL;
                __atomic_store_n(hooks[i].real, p, __ATOMIC_RELAXED);
            }
        }
        in_resolve = 0;
        __atomic_store_n(state, h != NULL ? 2 : 3, __ATOMIC_RELEASE);
        return h != NULL ? 0 : -1;
    }
    while ((s = __atomic_load_n(state, __ATOMIC_ACQUIRE)) == 1) sched_yield();
    return s == 2 ? 0 : -1;
}

void gs_resolve_after_fork(void)
{
    int busy = 1;
    __atomic_compare_exchange_n(&cuda_state, &busy, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
    busy = 1;
    __atomic_compare_exchange_n(&nvml_state, &busy, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
    busy = 1;
    __atomic_compare_exchange_n(&launch_state, &busy, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
    busy = 1;
    __atomic_compare_exchange_n(&wake_state, &busy, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
    in_resolve = 0;
}

int gs_resolve_cuda(void)
{
    if (resolve(&cuda_state, "libcuda.so.1", gs_cuda_hooks, gs_cuda_hook_count) != 0) return -1;
    if (resolve(&launch_state, "libcuda.so.1", gs_launch_hooks, gs_launch_hook_count) != 0) return -1;
    return resolve(&wake_state, "libcuda.so.1", gs_wake_hooks, gs_wake_hook_count);
}

int gs_resolve_nvml(void)
{
    return resolve(&nvml_state, "libnvidia-ml.so.1", gs_nvml_hooks, gs_nvml_hook_count);
}

/* ---- cuGetProcAddress ---------------------------------------------------- */
CUresult (*gs_real_cuGetProcAddress_v2)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
CUresult (*gs_real_cuGetProcAddress)(const char *, void **, int, cuuint64_t);

static void *substitute(void *p)
{
    const struct gs_hook *tables[] = {gs_cuda_hooks, gs_launch_hooks, gs_wake_hooks};
    const size_t counts[] = {gs_cuda_hook_count, gs_launch_hook_count, gs_wake_hook_count};
    for (int t = 0; t < 3; t++)
        for (size_t i = 0; i < counts[t]; i++) {
            const struct gs_hook *h = &tables[t][i];
            if (h->hook != NULL && __atomic_load_n(h->real, __ATOMIC_RELAXED) == p) return h->hook;
        }
    return p;
}

GS_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *symbolStatus)
{
    if (gs_resolve_cuda() != 0 || gs_real_cuGetProcAddress_v2 == NULL) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = gs_real_cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (r == CUDA_SUCCESS && pfn != NULL && *pfn != NULL) *pfn = substitute(*pfn);
    return r;
}

GS_EXPORT CUresult gs_legacy_cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    if (gs_resolve_cuda() != 0 || gs_real_cuGetProcAddress == NULL) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = gs_real_cuGetProcAddress(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS && pfn != NULL && *pfn != NULL) *pfn = substitute(*pfn);
    return r;
}
