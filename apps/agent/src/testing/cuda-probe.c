/* cuda-probe — a CUDA driver API program for shard tests (built against the fake libcuda).
 *   cuda-probe hold <bytes> [ordinal]   allocates on GPU <ordinal> (default 0), prints
 *                                       {"result":N}, waits for SIGTERM
 *   cuda-probe alloc <bytes> [ordinal]  allocates, prints {"result":N}, exits
 *   cuda-probe keep <bytes> [processes] elastic memory's data: <processes> processes (default
 *                                       1: this one and children forked before any CUDA
 *                                       call) each allocate <bytes> on GPU 0, write a pattern of
 *                                       their own there with cuMemcpyHtoD and print
 *                                       {"kept":<bytes>,"process":k,"result":N}; at each
 *                                       SIGUSR1 (the first passes it on to the others) each
 *                                       reads all of it back with cuMemcpyDtoH (a call that
 *                                       needs the GPU: in a suspended shard it waits in
 *                                       libvgpu.so) and prints
 *                                       {"poke":i,"process":k,"intact":0|1,"result":N}
 *   cuda-probe share <bytes>            CUDA IPC: this process allocates <bytes> on GPU 0 and
 *                                       exports them (cuIpcGetMemHandle), prints
 *                                       {"exported":<bytes>,"result":N}; a child forked before
 *                                       any CUDA call opens them (cuIpcOpenMemHandle) and prints
 *                                       {"imported":1,"pid":<its pid>,"result":N}; both wait for
 *                                       SIGTERM (the child is reaped as soon as it dies)
 *   cuda-probe launch <n> [hold]        launches n kernels on GPU 0 (the compute share's
 *                                       admission decides when each runs), prints
 *                                       {"launched":n,"result":N}; with hold, waits for SIGTERM
 *   cuda-probe stuck                    launches one kernel on GPU 0, prints {"syncing":1}
 *                                       and waits for it in cuEventSynchronize (with
 *                                       GPUSHARDS_FAKE_KERNEL_US long, a CUDA call that does
 *                                       not return soon: a lock of the process times out)
 *   cuda-probe busy <seconds>           keeps GPU 0 busy through libcuda (so through libvgpu.so
 *                                       in a shard: its turns govern every launch) for
 *                                       <seconds> (0: until SIGTERM); prints {"busy":1} once
 *                                       two batches ran, {"launched":n,"result":N} at the end
 *   cuda-probe bypass <seconds>         the same through a libcuda of its own: loaded with
 *                                       dlmopen(LM_ID_NEWLM) and called through that
 *                                       namespace's dlsym, so no libvgpu.so hook sees it (no
 *                                       turn, no ledger stamp): ungoverned GPU work
 *   cuda-probe tamper <path>            tries what a root tenant would to raise its limit:
 *                                       write the limits file, remount it read-write, unmount
 *                                       it; prints {"write":E,"remount":E,"umount":E} (errno,
 *                                       0 when the attempt succeeded)
 *   cuda-probe mps <dir>                what an MPS client of the host's daemon finds: prints
 *                                       {"pipe":"$CUDA_MPS_PIPE_DIRECTORY",
 *                                       "percent":"$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
 *                                       "control":1 when <dir>/control is a socket,
 *                                       "connect":E connecting to it, "create":E making a file
 *                                       in <dir>, "remove":E removing the socket (errno, 0
 *                                       when it succeeded), then "cuinit":N and the two
 *                                       variables as they are after cuInit ("pipe_after",
 *                                       "percent_after": libvgpu.so sets them at cuInit)}
 * N is the CUresult of the first call that failed, 0 when all succeeded. */
#define _GNU_SOURCE
#include "cuda_subset.h"
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static void on_term(int signo)
{
    (void)signo;
    _exit(0);
}

/* The primary context of the GPU at `ordinal`, made current. */
static CUresult current_context(int ordinal)
{
    CUdevice device;
    CUcontext context;
    CUresult r = cuInit(0);
    if (r == CUDA_SUCCESS) r = cuDeviceGet(&device, ordinal);
    if (r == CUDA_SUCCESS) r = cuDevicePrimaryCtxRetain(&context, device);
    if (r == CUDA_SUCCESS) r = cuCtxSetCurrent(context);
    return r;
}

static CUresult allocate(size_t bytes, int ordinal)
{
    CUdeviceptr pointer;
    CUresult r = current_context(ordinal);
    if (r == CUDA_SUCCESS) r = cuMemAlloc(&pointer, bytes);
    return r;
}

/* The word at index i of process k's kept memory: different in every process and position,
 * so memory given back to the wrong process or place reads as damaged. */
static uint32_t kept_word(int process, size_t i)
{
    return (uint32_t)(i * 2654435761u) ^ (0x5eed1234u + (uint32_t)process * 0x01010101u);
}

enum { KEEP_CHUNK_WORDS = 1 << 18, KEEP_MAX_PROCESSES = 16 };
static uint32_t keep_chunk[KEEP_CHUNK_WORDS];
static volatile sig_atomic_t pokes;

static void on_poke(int signo)
{
    (void)signo;
    pokes++;
}

static CUresult keep_write(CUdeviceptr base, size_t words, int process)
{
    CUresult r = CUDA_SUCCESS;
    for (size_t at = 0; r == CUDA_SUCCESS && at < words; at += KEEP_CHUNK_WORDS) {
        size_t n = words - at < KEEP_CHUNK_WORDS ? words - at : KEEP_CHUNK_WORDS;
        for (size_t i = 0; i < n; i++) keep_chunk[i] = kept_word(process, at + i);
        r = cuMemcpyHtoD(base + at * sizeof(uint32_t), keep_chunk, n * sizeof(uint32_t));
    }
    return r;
}

/* 1 when every word reads back as written; *r is the first copy that failed. */
static int keep_intact(CUdeviceptr base, size_t words, int process, CUresult *r)
{
    int intact = 1;
    *r = CUDA_SUCCESS;
    for (size_t at = 0; *r == CUDA_SUCCESS && at < words; at += KEEP_CHUNK_WORDS) {
        size_t n = words - at < KEEP_CHUNK_WORDS ? words - at : KEEP_CHUNK_WORDS;
        *r = cuMemcpyDtoH(keep_chunk, base + at * sizeof(uint32_t), n * sizeof(uint32_t));
        for (size_t i = 0; *r == CUDA_SUCCESS && i < n; i++)
            if (keep_chunk[i] != kept_word(process, at + i)) intact = 0;
    }
    return *r == CUDA_SUCCESS && intact;
}

static int keep(size_t bytes, int processes)
{
    if (processes < 1 || processes > KEEP_MAX_PROCESSES || bytes < sizeof(uint32_t)) {
        printf("{\"error\":\"keep: 1 to %d processes of at least 4 bytes\"}\n", KEEP_MAX_PROCESSES);
        return 2;
    }
    /* SIGUSR1 is blocked but while waiting for it, so that no poke is lost between a check
     * and the wait; children inherit the mask, the handler and the line buffering. */
    sigset_t usr1, waiting;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, &waiting);
    sigdelset(&waiting, SIGUSR1);
    signal(SIGUSR1, on_poke);
    setvbuf(stdout, NULL, _IOLBF, 0);
    pid_t children[KEEP_MAX_PROCESSES];
    int process = 0;
    for (int k = 1; k < processes; k++) {
        pid_t pid = fork();
        if (pid < 0) {
            printf("{\"error\":\"fork: %s\"}\n", strerror(errno));
            return 2;
        }
        if (pid == 0) {
            process = k;
            break;
        }
        children[k] = pid;
    }
    CUdeviceptr base = 0;
    size_t words = bytes / sizeof(uint32_t);
    CUresult r = current_context(0);
    if (r == CUDA_SUCCESS) r = cuMemAlloc(&base, bytes);
    if (r == CUDA_SUCCESS) r = keep_write(base, words, process);
    printf("{\"kept\":%zu,\"process\":%d,\"result\":%d}\n", r == CUDA_SUCCESS ? bytes : 0, process, (int)r);
    for (int answered = 0;;) {
        sigsuspend(&waiting);
        while (answered < pokes) {
            answered++;
            if (process == 0)
                for (int k = 1; k < processes; k++) kill(children[k], SIGUSR1);
            CUresult read = r;
            int intact = r == CUDA_SUCCESS && keep_intact(base, words, process, &read);
            printf("{\"poke\":%d,\"process\":%d,\"intact\":%d,\"result\":%d}\n", answered, process, intact,
                   (int)read);
        }
    }
}

static int share(size_t bytes)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGCHLD, SIG_IGN);
    int handoff[2];
    if (pipe(handoff) != 0) {
        printf("{\"error\":\"pipe: %s\"}\n", strerror(errno));
        return 2;
    }
    pid_t child = fork();
    if (child < 0) {
        printf("{\"error\":\"fork: %s\"}\n", strerror(errno));
        return 2;
    }
    CUipcMemHandle handle;
    CUdeviceptr pointer = 0;
    if (child == 0) {
        close(handoff[1]);
        size_t got = 0;
        while (got < sizeof handle) {
            ssize_t n = read(handoff[0], (char *)&handle + got, sizeof handle - got);
            if (n <= 0) return 2;
            got += (size_t)n;
        }
        CUresult r = current_context(0);
        if (r == CUDA_SUCCESS) r = cuIpcOpenMemHandle_v2(&pointer, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
        printf("{\"imported\":1,\"pid\":%d,\"result\":%d}\n", (int)getpid(), (int)r);
        for (;;) pause();
    }
    close(handoff[0]);
    CUresult r = current_context(0);
    if (r == CUDA_SUCCESS) r = cuMemAlloc(&pointer, bytes);
    if (r == CUDA_SUCCESS) r = cuIpcGetMemHandle(&handle, pointer);
    if (r == CUDA_SUCCESS && write(handoff[1], &handle, sizeof handle) != (ssize_t)sizeof handle) r = CUDA_ERROR_UNKNOWN;
    printf("{\"exported\":%zu,\"result\":%d}\n", r == CUDA_SUCCESS ? bytes : 0, (int)r);
    for (;;) pause();
}

static int tamper(const char *path)
{
    int write_errno = 0, remount_errno = 0, umount_errno = 0;
    int fd = open(path, O_WRONLY);
    if (fd < 0) {
        write_errno = errno;
    } else {
        char big[8] = {(char)0xff, (char)0xff, (char)0xff, (char)0xff, (char)0xff, (char)0xff, 0, 0};
        /* The first device's limit_bytes (offset 128 + 24). */
        if (pwrite(fd, big, sizeof big, 152) != (ssize_t)sizeof big) write_errno = errno;
        close(fd);
    }
    if (mount("none", path, NULL, MS_REMOUNT | MS_BIND, NULL) != 0) remount_errno = errno;
    if (umount2(path, MNT_DETACH) != 0) umount_errno = errno;
    printf("{\"write\":%d,\"remount\":%d,\"umount\":%d}\n", write_errno, remount_errno, umount_errno);
    return 0;
}

static int mps(const char *dir)
{
    char control[sizeof(((struct sockaddr_un *)0)->sun_path)], planted[512];
    struct stat st;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    int connect_errno = 0, create_errno = 0, remove_errno = 0;
    const char *pipe = getenv("CUDA_MPS_PIPE_DIRECTORY");
    const char *percent = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    snprintf(control, sizeof control, "%s/control", dir);
    int is_socket = stat(control, &st) == 0 && S_ISSOCK(st.st_mode);
    memcpy(addr.sun_path, control, sizeof control);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&addr, sizeof addr) != 0) connect_errno = errno;
    if (s >= 0) close(s);
    snprintf(planted, sizeof planted, "%s/planted", dir);
    int fd = open(planted, O_WRONLY | O_CREAT | O_EXCL, 0666);
    if (fd < 0) {
        create_errno = errno;
    } else {
        close(fd);
        unlink(planted);
    }
    if (unlink(control) != 0) remove_errno = errno;
    printf("{\"pipe\":\"%s\",\"percent\":\"%s\",\"control\":%d,\"connect\":%d,\"create\":%d,"
           "\"remove\":%d,",
           pipe ? pipe : "", percent ? percent : "", is_socket, connect_errno, create_errno,
           remove_errno);
    CUresult r = cuInit(0);
    pipe = getenv("CUDA_MPS_PIPE_DIRECTORY");
    percent = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    printf("\"cuinit\":%d,\"pipe_after\":\"%s\",\"percent_after\":\"%s\"}\n", (int)r,
           pipe ? pipe : "", percent ? percent : "");
    return 0;
}

static int launch(long n, int hold)
{
    long done = 0;
    CUresult r = current_context(0);
    for (; r == CUDA_SUCCESS && done < n; done++)
        r = cuLaunchKernel((CUfunction)0x1, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
    if (r == CUDA_SUCCESS) r = cuCtxSynchronize();
    printf("{\"launched\":%ld,\"result\":%d}\n", done, (int)r);
    fflush(stdout);
    if (hold)
        for (;;) pause();
    return r == CUDA_SUCCESS ? 0 : 1;
}

static int stuck(void)
{
    CUresult r = current_context(0);
    CUevent done;
    if (r == CUDA_SUCCESS) r = cuEventCreate(&done, 0);
    if (r == CUDA_SUCCESS) r = cuLaunchKernel((CUfunction)0x1, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
    if (r == CUDA_SUCCESS) r = cuEventRecord(done, NULL);
    if (r == CUDA_SUCCESS) {
        printf("{\"syncing\":1}\n");
        fflush(stdout);
        r = cuEventSynchronize(done);
    }
    printf("{\"result\":%d}\n", (int)r);
    return r == CUDA_SUCCESS ? 0 : 1;
}

/* The driver entry points busy() calls: the ones this program links (libvgpu.so's hooks in a
 * shard), or those of a libcuda loaded into a link-map namespace of its own. */
struct driver {
    CUresult (*init)(unsigned int);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*retain)(CUcontext *, CUdevice);
    CUresult (*set_current)(CUcontext);
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                       CUstream, void **, void **);
    CUresult (*event_create)(CUevent *, unsigned int);
    CUresult (*event_record)(CUevent, CUstream);
    CUresult (*event_synchronize)(CUevent);
};

static int own_driver(struct driver *d)
{
    void *h = dlmopen(LM_ID_NEWLM, "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        printf("{\"error\":\"dlmopen: %s\"}\n", dlerror());
        return -1;
    }
    *(void **)&d->init = dlsym(h, "cuInit");
    *(void **)&d->device_get = dlsym(h, "cuDeviceGet");
    *(void **)&d->retain = dlsym(h, "cuDevicePrimaryCtxRetain");
    *(void **)&d->set_current = dlsym(h, "cuCtxSetCurrent");
    *(void **)&d->launch = dlsym(h, "cuLaunchKernel");
    *(void **)&d->event_create = dlsym(h, "cuEventCreate");
    *(void **)&d->event_record = dlsym(h, "cuEventRecord");
    *(void **)&d->event_synchronize = dlsym(h, "cuEventSynchronize");
    if (!d->init || !d->device_get || !d->retain || !d->set_current || !d->launch || !d->event_create ||
        !d->event_record || !d->event_synchronize) {
        printf("{\"error\":\"missing entry points\"}\n");
        return -1;
    }
    return 0;
}

static double seconds_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Batches of 500 launches (50 ms of the fake's 100 us kernels), the next one queued once the
 * one before it has run, so that work is always waiting however the process is scheduled. */
static int busy(const struct driver *d, double seconds)
{
    CUdevice device;
    CUcontext context;
    CUevent done[2];
    long launched = 0;
    double until = seconds > 0 ? seconds_now() + seconds : 0;
    CUresult r = d->init(0);
    if (r == CUDA_SUCCESS) r = d->device_get(&device, 0);
    if (r == CUDA_SUCCESS) r = d->retain(&context, device);
    if (r == CUDA_SUCCESS) r = d->set_current(context);
    if (r == CUDA_SUCCESS) r = d->event_create(&done[0], 0);
    if (r == CUDA_SUCCESS) r = d->event_create(&done[1], 0);
    for (unsigned batch = 0; r == CUDA_SUCCESS && (until == 0 || seconds_now() < until); batch++) {
        for (int i = 0; r == CUDA_SUCCESS && i < 500; i++, launched++)
            r = d->launch((CUfunction)0x1, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
        if (r == CUDA_SUCCESS) r = d->event_record(done[batch % 2], NULL);
        if (r == CUDA_SUCCESS && batch > 0) r = d->event_synchronize(done[(batch - 1) % 2]);
        if (batch == 2) {
            printf("{\"busy\":1}\n");
            fflush(stdout);
        }
    }
    printf("{\"launched\":%ld,\"result\":%d}\n", launched, (int)r);
    return r == CUDA_SUCCESS ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "tamper") == 0) return tamper(argv[2]);
    if (argc == 3 && strcmp(argv[1], "mps") == 0) return mps(argv[2]);
    if (argc == 3 && (strcmp(argv[1], "busy") == 0 || strcmp(argv[1], "bypass") == 0)) {
        struct driver d = {cuInit, cuDeviceGet, cuDevicePrimaryCtxRetain, cuCtxSetCurrent, cuLaunchKernel,
                           cuEventCreate, cuEventRecord, cuEventSynchronize};
        signal(SIGTERM, on_term);
        if (strcmp(argv[1], "bypass") == 0 && own_driver(&d) != 0) return 2;
        return busy(&d, strtod(argv[2], NULL));
    }
    if (argc == 2 && strcmp(argv[1], "stuck") == 0) {
        signal(SIGTERM, on_term);
        return stuck();
    }
    if ((argc == 3 || argc == 4) && strcmp(argv[1], "keep") == 0) {
        signal(SIGTERM, on_term);
        return keep(strtoull(argv[2], NULL, 10), argc == 4 ? atoi(argv[3]) : 1);
    }
    if (argc == 3 && strcmp(argv[1], "share") == 0) {
        signal(SIGTERM, on_term);
        return share(strtoull(argv[2], NULL, 10));
    }
    if ((argc == 3 || argc == 4) && strcmp(argv[1], "launch") == 0) {
        signal(SIGTERM, on_term);
        return launch(strtol(argv[2], NULL, 10), argc == 4 && strcmp(argv[3], "hold") == 0);
    }
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: cuda-probe hold|alloc <bytes> [ordinal] | keep <bytes> [processes] | share <bytes> | stuck | launch <n> [hold] | busy|bypass <seconds> | tamper <path> | mps <dir>\n");
        return 2;
    }
    signal(SIGTERM, on_term);
    CUresult r = allocate(strtoull(argv[2], NULL, 10), argc == 4 ? atoi(argv[3]) : 0);
    printf("{\"result\":%d}\n", (int)r);
    fflush(stdout);
    if (strcmp(argv[1], "hold") == 0)
        for (;;) pause();
    return 0;
}
