/* dlmopen_client.c — a program that loads the driver into a link-map
 * namespace of its own (dlmopen) and calls it through that namespace's
 * dlsym, as some sandboxing runtimes do.  It must work the same with
 * libvgpu.so preloaded as without (it then runs uncounted by the
 * interposer: the agent's NVML ground truth sees it).  Exit 0 and "ok". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

#include "cuda_subset.h"

int main(void)
{
    void *h = dlmopen(LM_ID_NEWLM, "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        fprintf(stderr, "dlmopen: %s\n", dlerror());
        return 1;
    }
    CUresult (*init)(unsigned int) = (CUresult(*)(unsigned int))dlsym(h, "cuInit");
    CUresult (*get)(CUdevice *, int) = (CUresult(*)(CUdevice *, int))dlsym(h, "cuDeviceGet");
    CUresult (*create)(CUcontext *, unsigned int, CUdevice) =
        (CUresult(*)(CUcontext *, unsigned int, CUdevice))dlsym(h, "cuCtxCreate_v2");
    CUresult (*alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))dlsym(h, "cuMemAlloc_v2");
    CUresult (*release)(CUdeviceptr) = (CUresult(*)(CUdeviceptr))dlsym(h, "cuMemFree_v2");
    if (!init || !get || !create || !alloc || !release) {
        fprintf(stderr, "missing entry points\n");
        return 1;
    }
    CUdevice d;
    CUcontext c;
    CUdeviceptr p;
    CUresult r;
    if ((r = init(0)) != CUDA_SUCCESS || (r = get(&d, 0)) != CUDA_SUCCESS || (r = create(&c, 0, d)) != CUDA_SUCCESS ||
        (r = alloc(&p, 1 << 20)) != CUDA_SUCCESS || (r = release(p)) != CUDA_SUCCESS) {
        fprintf(stderr, "CUDA error %d\n", (int)r);
        return 1;
    }
    printf("ok\n");
    return 0;
}
