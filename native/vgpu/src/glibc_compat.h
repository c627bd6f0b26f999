/*
 * glibc_compat.h — force-included into every libvgpu.so source file.
 *
 * libvgpu.so is loaded into containers whose glibc may be as old as 2.17, so
 * it must not need any symbol version newer than GLIBC_2.17.  Building
 * against a newer glibc binds some calls to their newest versions (glibc 2.34
 * moved the dl* and pthread_* functions into libc under GLIBC_2.34); the
 * directives below bind them to the versions every glibc since 2.17 has.
 * The test suite checks the built library with objdump -T.
 */
#if defined(__x86_64__)
#define GS_SYMVER(name, ver) __asm__(".symver " #name "," #name "@" ver)
#define GS_BASE "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define GS_SYMVER(name, ver) __asm__(".symver " #name "," #name "@" ver)
#define GS_BASE "GLIBC_2.17"
#endif

#ifdef GS_BASE
GS_SYMVER(dlopen, GS_BASE);
GS_SYMVER(dlclose, GS_BASE);
GS_SYMVER(dlerror, GS_BASE);
GS_SYMVER(dlvsym, GS_BASE);
#if defined(__x86_64__)
GS_SYMVER(pthread_mutex_consistent, "GLIBC_2.12");
GS_SYMVER(pthread_mutexattr_setrobust, "GLIBC_2.12");
#else
GS_SYMVER(pthread_mutex_consistent, GS_BASE);
GS_SYMVER(pthread_mutexattr_setrobust, GS_BASE);
#endif
GS_SYMVER(pthread_mutexattr_setpshared, GS_BASE);
GS_SYMVER(pthread_mutexattr_init, GS_BASE);
GS_SYMVER(pthread_mutexattr_destroy, GS_BASE);
GS_SYMVER(pthread_mutex_init, GS_BASE);
GS_SYMVER(pthread_mutex_lock, GS_BASE);
GS_SYMVER(pthread_mutex_unlock, GS_BASE);
GS_SYMVER(pthread_create, GS_BASE); /* compute_gate.c's turn thread */
#endif
