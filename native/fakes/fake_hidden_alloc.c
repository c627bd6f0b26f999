/* fake-hidden-alloc — takes fake GPU memory that libvgpu.so cannot see,
 * through the fake driver's gpushards_fake_take_hidden (stand-in for graph
 * memory, a device malloc heap, local memory, or a bypass of the
 * interposer).  It counts in the fake card's capacity and in this
 * process's per-process NVML usage.
 *
 *   fake-hidden-alloc <ordinal> <bytes> [hold]
 *
 * <bytes> takes k/m/g suffixes.  Prints "took <bytes> on <ordinal>" and
 * exits 0; with "hold" it then prints "holding" and waits to be killed (the
 * memory goes back when it dies, as a real driver gives it back).  Exit 2:
 * the card has no room (CUDA_ERROR_OUT_OF_MEMORY); 1: anything else. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int parse_size(const char *s, unsigned long long *out)
{
    char *end;
    if (s == NULL || *s < '0' || *s > '9') return -1;
    unsigned long long v = strtoull(s, &end, 10);
    switch (*end) {
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    case 'g': case 'G': v <<= 30; end++; break;
    default: break;
    }
    if (*end != '\0') return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    unsigned long long bytes;
    if (argc < 3 || argc > 4 || parse_size(argv[2], &bytes) != 0 || (argc == 4 && argv[3][0] != 'h')) {
        fprintf(stderr, "usage: fake-hidden-alloc <ordinal> <bytes> [hold]\n");
        return 1;
    }
    int ordinal = atoi(argv[1]);
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (lib == NULL) {
        fprintf(stderr, "fake-hidden-alloc: %s\n", dlerror());
        return 1;
    }
    int (*take)(int, unsigned long long) = (int (*)(int, unsigned long long))dlsym(lib, "gpushards_fake_take_hidden");
    if (take == NULL) {
        fprintf(stderr, "fake-hidden-alloc: libcuda.so.1 is not the fake driver (no gpushards_fake_take_hidden)\n");
        return 1;
    }
    int r = take(ordinal, bytes);
    if (r != 0) {
        fprintf(stderr, "fake-hidden-alloc: taking %llu bytes on %d failed with CUresult %d\n", bytes, ordinal, r);
        return r == 2 /* CUDA_ERROR_OUT_OF_MEMORY */ ? 2 : 1;
    }
    printf("took %llu on %d\n", bytes, ordinal);
    fflush(stdout);
    if (argc == 4) {
        printf("holding\n");
        fflush(stdout);
        for (;;) pause();
    }
    return 0;
}
