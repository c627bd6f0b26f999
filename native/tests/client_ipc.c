/* client_ipc.c — scenarios of memory shared between processes, run by
 * runner_ipc.c: an exporter shares an allocation (CUDA IPC, or a VMM
 * shareable handle); an importer opens it the way a program reaches the
 * driver (by symbol, by the pre-CUDA 11 symbol, or through cuGetProcAddress
 * as the CUDA runtime and PyTorch do) and lets it go when the runner says,
 * which reads the region in between. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client_check.h"
#include "client_ipc.h"
#include "client_process.h"
#include "cuda_subset.h"

/* The symbol before CUDA 11's rename, by its own name. */
#undef cuIpcOpenMemHandle
CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags);

typedef CUresult (*open_fn)(CUdeviceptr *, CUipcMemHandle, unsigned int);
typedef CUresult (*close_fn)(CUdeviceptr);

/* 64 MiB shared: "handle HEX" on stdout, then held until killed.  Its own
 * handle is refused to it, as the driver refuses it. */
static int s_export(void)
{
    if (client_begin(NULL)) return 1;
    CUdeviceptr p, self;
    OK(cuMemAlloc_v2(&p, 64u << 20));
    CUipcMemHandle h;
    OK(cuIpcGetMemHandle(&h, p));
    CHECK(cuIpcOpenMemHandle_v2(&self, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS,
          "the exporter opened its own handle");
    printf("handle ");
    for (size_t i = 0; i < sizeof h.reserved; i++) printf("%02x", (unsigned char)h.reserved[i]);
    printf("\n");
    fflush(stdout);
    for (;;) pause();
}

static int parse_handle(const char *hex, CUipcMemHandle *h)
{
    if (strlen(hex) != 2 * sizeof h->reserved) return -1;
    for (size_t i = 0; i < sizeof h->reserved; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1) return -1;
        h->reserved[i] = (char)v;
    }
    return 0;
}

/* way: "link" (cuIpcOpenMemHandle_v2), "legacy" (cuIpcOpenMemHandle) or
 * "gpa" (both calls found through cuGetProcAddress_v2). */
static int s_import(const char *hex, const char *way)
{
    client_block_usr1();
    CUipcMemHandle h;
    CHECK(parse_handle(hex, &h) == 0, "not a handle: %s", hex);
    if (client_begin(NULL)) return 1;
    open_fn open = cuIpcOpenMemHandle_v2;
    close_fn close = cuIpcCloseMemHandle;
    if (!strcmp(way, "legacy")) open = cuIpcOpenMemHandle;
    if (!strcmp(way, "gpa")) {
        void *o = NULL, *c = NULL;
        CUdriverProcAddressQueryResult st;
        OK(cuGetProcAddress_v2("cuIpcOpenMemHandle", &o, 12000, 0, &st));
        OK(cuGetProcAddress_v2("cuIpcCloseMemHandle", &c, 12000, 0, &st));
        CHECK(o != NULL && c != NULL, "cuGetProcAddress found no IPC entry points");
        open = (open_fn)o;
        close = (close_fn)c;
    }
    CUdeviceptr p, bad;
    /* A handle that names nothing: refused, and nothing is left named. */
    CUipcMemHandle junk;
    memset(&junk, 0x5a, sizeof junk);
    CHECK(open(&bad, junk, 0) != CUDA_SUCCESS, "a junk handle was opened");
    client_say_then_wait("refused");
    OK(open(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CHECK(cuMemFree_v2(p) != CUDA_SUCCESS, "an import was freed like an allocation");
    client_say_then_wait("opened");
    OK(close(p));
    CHECK(close(p) != CUDA_SUCCESS, "an import was closed twice");
    client_say_then_wait("closed");
    OK(open(&p, h, 0));
    client_say_then_wait("opened again");
    return 0;
}

/* ---- VMM shareable handles (NCCL's and PyTorch's expandable segments' way) */

#define SHARED_BYTES (64u << 20)
#define POSIX_FD CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR

typedef CUresult (*import_fn)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType);
typedef CUresult (*release_fn)(CUmemGenericAllocationHandle);

static CUmemAllocationProp shareable(CUmemAllocationHandleType types)
{
    return (CUmemAllocationProp){.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .requestedHandleTypes = types,
                                 .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
}

/* 64 MiB created, mapped and exported: "share PATH" on stdout, a path of its
 * descriptor that the importer opens again (a program passes it over a Unix
 * socket; the fake's is a memfd, which /proc reopens), then held until
 * killed.  A handle created without the type is refused export. */
static int s_vmm_export(void)
{
    if (client_begin(NULL)) return 1;
    CUmemAllocationProp plain = shareable(CU_MEM_HANDLE_TYPE_NONE), prop = shareable(POSIX_FD);
    CUmemGenericAllocationHandle h;
    int fd;
    OK(cuMemCreate(&h, 2u << 20, &plain, 0));
    CHECK(cuMemExportToShareableHandle(&fd, h, POSIX_FD, 0) != CUDA_SUCCESS, "exported without the type requested");
    OK(cuMemRelease(h));
    OK(cuMemCreate(&h, SHARED_BYTES, &prop, 0));
    CUdeviceptr va;
    OK(cuMemAddressReserve(&va, SHARED_BYTES, 0, 0, 0));
    OK(cuMemMap(va, SHARED_BYTES, 0, h, 0));
    OK(cuMemExportToShareableHandle(&fd, h, POSIX_FD, 0));
    printf("share /proc/%d/fd/%d\n", (int)getpid(), fd);
    fflush(stdout);
    for (;;) pause();
}

static int map_import(CUmemGenericAllocationHandle h, CUdeviceptr *va)
{
    CUmemAccessDesc rw = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                          .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    OK(cuMemAddressReserve(va, SHARED_BYTES, 0, 0, 0));
    OK(cuMemMap(*va, SHARED_BYTES, 0, h, 0));
    OK(cuMemSetAccess(*va, SHARED_BYTES, &rw, 1));
    return 0;
}

/* way: "link" (by symbol) or "gpa" (import and release found through
 * cuGetProcAddress_v2, as the CUDA runtime and PyTorch find them).  Each step
 * is said, then waits for the runner, which reads the region meanwhile. */
static int s_vmm_import(const char *path, const char *way)
{
    client_block_usr1();
    if (client_begin(NULL)) return 1;
    import_fn import = cuMemImportFromShareableHandle;
    release_fn release = cuMemRelease;
    if (!strcmp(way, "gpa")) {
        void *i = NULL, *r = NULL;
        CUdriverProcAddressQueryResult st;
        OK(cuGetProcAddress_v2("cuMemImportFromShareableHandle", &i, 12000, 0, &st));
        OK(cuGetProcAddress_v2("cuMemRelease", &r, 12000, 0, &st));
        CHECK(i != NULL && r != NULL, "cuGetProcAddress found no VMM import entry points");
        import = (import_fn)i;
        release = (release_fn)r;
    }
    int fd = open(path, O_RDONLY), junk = open("/dev/null", O_RDONLY);
    CHECK(fd >= 0 && junk >= 0, "cannot open %s", path);
    CUmemGenericAllocationHandle h, again;
    CUdeviceptr va;
    CHECK(import(&h, (void *)(intptr_t)junk, POSIX_FD) != CUDA_SUCCESS, "a descriptor of nothing was imported");
    client_say_then_wait("1 refused");
    /* Mapped and retained (as NCCL retains before it frees): two references. */
    OK(import(&h, (void *)(intptr_t)fd, POSIX_FD));
    if (map_import(h, &va)) return 1;
    OK(cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)va));
    CHECK(again == h, "the retain named another handle");
    client_say_then_wait("2 imported, mapped, retained");
    OK(cuMemUnmap(va, SHARED_BYTES));
    client_say_then_wait("3 unmapped, two references");
    OK(release(again));
    client_say_then_wait("4 the retain released");
    OK(release(h));
    client_say_then_wait("5 the import released");
    /* The usual idiom: mapped and released at once, held until unmapped. */
    OK(import(&h, (void *)(intptr_t)fd, POSIX_FD));
    if (map_import(h, &va)) return 1;
    OK(release(h));
    client_say_then_wait("6 mapped, then released");
    OK(cuMemUnmap(va, SHARED_BYTES));
    client_say_then_wait("7 unmapped");
    OK(import(&h, (void *)(intptr_t)fd, POSIX_FD));
    client_say_then_wait("8 held");
    return 0; /* a clean exit with the import held */
}

/* More imports at once than libvgpu.so follows (hooks_vmm_import.c's
 * IMPORTED_HANDLES, 128), all released: "released all". */
static int s_vmm_import_many(const char *path)
{
    client_block_usr1();
    if (client_begin(NULL)) return 1;
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0, "cannot open %s", path);
    enum { MANY = 200 };
    static CUmemGenericAllocationHandle h[MANY];
    for (int i = 0; i < MANY; i++) OK(cuMemImportFromShareableHandle(&h[i], (void *)(intptr_t)fd, POSIX_FD));
    for (int i = 0; i < MANY; i++) OK(cuMemRelease(h[i]));
    client_say_then_wait("released all");
    return 0;
}

int ipc_scenario(const char *s, int argc, char **argv)
{
    if (!strcmp(s, "ipc-export")) return s_export();
    if (!strcmp(s, "ipc-import") && argc > 4) return s_import(argv[3], argv[4]);
    if (!strcmp(s, "vmm-export")) return s_vmm_export();
    if (!strcmp(s, "vmm-import") && argc > 4) return s_vmm_import(argv[3], argv[4]);
    if (!strcmp(s, "vmm-import-many") && argc > 3) return s_vmm_import_many(argv[3]);
    return -1;
}
