/* vgpu-nodriver — a program that does not link the driver, run under the
 * interposer: a global dlsym must not find the driver's entry points until
 * the driver is loaded, as without the interposer. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

int main(void)
{
    if (dlsym(RTLD_DEFAULT, "cuInit") != NULL || dlsym(RTLD_DEFAULT, "nvmlDeviceGetMemoryInfo") != NULL) {
        fprintf(stderr, "a global dlsym found driver entry points with no driver loaded\n");
        return 1;
    }
    if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL) == NULL) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    void *hook = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
    Dl_info info;
    if (hook == NULL || dladdr(hook, &info) == 0 || info.dli_fname == NULL) {
        fprintf(stderr, "cuMemAlloc_v2 not found once the driver is loaded\n");
        return 1;
    }
    printf("cuMemAlloc_v2 from %s\n", info.dli_fname);
    return 0;
}
