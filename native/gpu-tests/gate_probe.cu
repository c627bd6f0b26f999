// Can turns be handed out on the GPU itself, so that a shard waiting for its turn keeps queueing
// kernels instead of blocking its CPU thread? (#17: the training pair's 25 % side loses inside its
// own turns, refilling a queue that was empty while it waited.) Each launch would sit behind a
// stream memory wait (cuStreamWaitValue32) on a word in a page all shards share; handing over a
// turn is one CPU store to that word.
//
//   gate_probe cost            what a wait before every launch costs (CPU enqueue, GPU time)
//   gate_probe pair MS_A MS_B  two processes, gated, taking turns of MS_A and MS_B milliseconds;
//                              also each alone, the pair ungated, and one side always shut
//
// Build: nvcc -O2 -arch=sm_90 -o gate_probe gate_probe.cu -lcuda
#include <cuda.h>
#include <cuda_runtime.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK_RT(call)                                                                 \
  do {                                                                                 \
    cudaError_t err_ = (call);                                                         \
    if (err_ != cudaSuccess) {                                                         \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call,                     \
              cudaGetErrorString(err_));                                               \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)
#define CHECK_DRV(call)                                                                \
  do {                                                                                 \
    CUresult err_ = (call);                                                            \
    if (err_ != CUDA_SUCCESS) {                                                        \
      const char *name_ = "?";                                                         \
      cuGetErrorName(err_, &name_);                                                    \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, name_);             \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

// The page both processes share (MAP_SHARED before fork, registered for the GPU by each).
struct shared_page {
  volatile uint32_t gate;       // bit 0: side A may run, bit 1: side B may run
  volatile uint32_t measuring;  // kernels count themselves only while set
  volatile uint32_t stop;       // the sides stop queueing
  volatile uint32_t ready;      // sides that have their context up
  volatile unsigned long long done[2];
  volatile unsigned long long violations[2];  // kernels that started while their gate was shut
};

__device__ static unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Every block spins for `ns`, so one launch holds every SM for about that long.
__global__ void spin(unsigned long long ns, shared_page *page, int side) {
  __shared__ int counted;
  if (threadIdx.x == 0) {
    counted = page != nullptr && page->measuring;
    if (counted && !(page->gate & (1u << side)) && blockIdx.x == 0)
      atomicAdd((unsigned long long *)&page->violations[side], 1ull);
  }
  __syncthreads();
  unsigned long long end = now_ns() + ns;
  while (now_ns() < end) {
  }
  if (threadIdx.x == 0 && blockIdx.x == 0 && counted)
    atomicAdd((unsigned long long *)&page->done[side], 1ull);
}

static double wall_ms() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int sm_count() {
  int count = 0;
  CHECK_RT(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, 0));
  return count;
}

// --- cost -------------------------------------------------------------------------------------

enum gate_kind { NO_GATE, HOST_WORD, DEVICE_WORD };

static void cost_round(enum gate_kind kind, int launches, unsigned long long kernel_ns,
                       CUdeviceptr host_word, CUdeviceptr device_word, double *cpu_us,
                       double *gpu_us) {
  cudaStream_t stream;
  CHECK_RT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start, end;
  CHECK_RT(cudaEventCreate(&start));
  CHECK_RT(cudaEventCreate(&end));
  CHECK_RT(cudaEventRecord(start, stream));
  double t0 = wall_ms();
  for (int i = 0; i < launches; i++) {
    if (kind != NO_GATE)
      CHECK_DRV(cuStreamWaitValue32((CUstream)stream, kind == HOST_WORD ? host_word : device_word,
                                    1, CU_STREAM_WAIT_VALUE_AND));
    spin<<<1, 32, 0, stream>>>(kernel_ns, nullptr, 0);
    CHECK_RT(cudaGetLastError());
  }
  double t1 = wall_ms();
  CHECK_RT(cudaEventRecord(end, stream));
  CHECK_RT(cudaEventSynchronize(end));
  float elapsed = 0;
  CHECK_RT(cudaEventElapsedTime(&elapsed, start, end));
  *cpu_us = (t1 - t0) * 1e3 / launches;
  *gpu_us = elapsed * 1e3 / launches;
  CHECK_RT(cudaEventDestroy(start));
  CHECK_RT(cudaEventDestroy(end));
  CHECK_RT(cudaStreamDestroy(stream));
}

static int cost(void) {
  CHECK_RT(cudaSetDevice(0));
  CHECK_RT(cudaFree(nullptr));
  int enabled = 0;
  CUdevice device;
  CHECK_DRV(cuDeviceGet(&device, 0));
  CHECK_DRV(cuDeviceGetAttribute(&enabled, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR,
                                 device));
  printf("stream wait value (NOR) supported: %d\n", enabled);
  uint32_t *host = nullptr;
  CHECK_RT(cudaHostAlloc(&host, 4096, cudaHostAllocMapped));
  *host = 1;
  CUdeviceptr host_word, device_word;
  CHECK_DRV(cuMemHostGetDevicePointer(&host_word, host, 0));
  CHECK_DRV(cuMemAlloc(&device_word, 4));
  CHECK_DRV(cuMemsetD32(device_word, 1, 1));
  const char *names[] = {"no gate", "gate in host memory", "gate in device memory"};
  const unsigned long long kernel_ns[] = {2000, 20000};
  printf("%-24s %10s %14s %14s\n", "launch", "kernel_us", "cpu_us/launch", "gpu_us/launch");
  for (int k = 0; k < 2; k++) {
    for (int kind = NO_GATE; kind <= DEVICE_WORD; kind++) {
      double cpu[3], gpu[3];
      for (int r = 0; r < 3; r++)
        cost_round((enum gate_kind)kind, 5000, kernel_ns[k], host_word, device_word, &cpu[r],
                   &gpu[r]);
      // the middle of three
      double c = cpu[0] + cpu[1] + cpu[2] - fmin(cpu[0], fmin(cpu[1], cpu[2])) -
                 fmax(cpu[0], fmax(cpu[1], cpu[2]));
      double g = gpu[0] + gpu[1] + gpu[2] - fmin(gpu[0], fmin(gpu[1], gpu[2])) -
                 fmax(gpu[0], fmax(gpu[1], gpu[2]));
      printf("%-24s %10.0f %14.2f %14.2f\n", names[kind], kernel_ns[k] / 1e3, c, g);
    }
  }
  return 0;
}

// --- pair -------------------------------------------------------------------------------------

static const unsigned long long KERNEL_NS = 200000;  // a matmul-sized kernel: 200 us on every SM

static void side_main(shared_page *page, int side, int gated) {
  CHECK_RT(cudaSetDevice(0));
  CHECK_DRV(cuMemHostRegister((void *)page, 4096, CU_MEMHOSTREGISTER_DEVICEMAP));
  CUdeviceptr gate_word;
  shared_page *device_page;
  CHECK_DRV(cuMemHostGetDevicePointer(&gate_word, (void *)&page->gate, 0));
  CHECK_RT(cudaHostGetDevicePointer((void **)&device_page, (void *)page, 0));
  cudaStream_t stream;
  CHECK_RT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int blocks = sm_count() * 2;
  spin<<<blocks, 128, 0, stream>>>(1000, nullptr, side);
  CHECK_RT(cudaStreamSynchronize(stream));
  __sync_fetch_and_add(&page->ready, 1);
  while (!page->stop) {
    if (gated)
      CHECK_DRV(cuStreamWaitValue32((CUstream)stream, gate_word, 1u << side,
                                    CU_STREAM_WAIT_VALUE_AND));
    spin<<<blocks, 128, 0, stream>>>(KERNEL_NS, device_page, side);
    CHECK_RT(cudaGetLastError());
  }
  CHECK_RT(cudaStreamSynchronize(stream));
  CHECK_DRV(cuMemHostUnregister((void *)page));
  _exit(0);
}

static void sleep_until(double at_ms) {
  double left;
  while ((left = at_ms - wall_ms()) > 0.05) {
    if (left > 0.3) {
      struct timespec t = {0, (long)((left - 0.2) * 1e6)};
      nanosleep(&t, nullptr);
    }
  }
}

struct pair_result {
  double done[2];  // kernels per second
  double violations[2];
};

// Runs the sides named in `sides` (bit per side) for 1 s of warm-up and 4 s measured, the gate
// turning A for ms_a then B for ms_b; a side with ms 0 is never let in.
static struct pair_result run_pair(shared_page *page, int sides, int gated, double ms_a,
                                   double ms_b) {
  memset((void *)page, 0, sizeof *page);
  page->gate = gated ? 0u : 3u;
  pid_t pids[2] = {0, 0};
  int count = 0;
  for (int side = 0; side < 2; side++) {
    if (!(sides & (1 << side))) continue;
    count++;
    pid_t pid = fork();
    if (pid < 0) {
      perror("fork");
      exit(1);
    }
    if (pid == 0) side_main(page, side, gated);
    pids[side] = pid;
  }
  while (page->ready < (uint32_t)count) usleep(1000);
  double start = wall_ms(), at = start;
  const double warmup_ms = 1000, measured_ms = 4000;
  int measuring = 0;
  while (at - start < warmup_ms + measured_ms) {
    if (!measuring && at - start >= warmup_ms) {
      page->measuring = 1;
      measuring = 1;
    }
    if (gated) {
      if (ms_a > 0) {
        page->gate = 1u;
        at += ms_a;
        sleep_until(at);
      }
      if (ms_b > 0) {
        page->gate = 2u;
        at += ms_b;
        sleep_until(at);
      }
    } else {
      at += 10;
      sleep_until(at);
    }
  }
  page->measuring = 0;
  page->stop = 1;
  page->gate = 3u;
  for (int side = 0; side < 2; side++)
    if (pids[side]) waitpid(pids[side], nullptr, 0);
  struct pair_result result;
  for (int side = 0; side < 2; side++) {
    result.done[side] = page->done[side] / (measured_ms / 1e3);
    result.violations[side] = page->violations[side];
  }
  return result;
}

static int pair(double ms_a, double ms_b) {
  shared_page *page = (shared_page *)mmap(nullptr, 4096, PROT_READ | PROT_WRITE,
                                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  double target_a = ms_a / (ms_a + ms_b);
  struct pair_result solo_a = run_pair(page, 1, 1, 1, 0);
  struct pair_result solo_b = run_pair(page, 2, 1, 0, 1);
  struct pair_result plain = run_pair(page, 3, 0, 0, 0);
  struct pair_result turns = run_pair(page, 3, 1, ms_a, ms_b);
  struct pair_result shut = run_pair(page, 3, 1, 0, 1);
  printf("kernel: %llu us on every SM; turns %.1f ms / %.1f ms (A's target %.1f %%)\n",
         KERNEL_NS / 1000, ms_a, ms_b, 100 * target_a);
  printf("%-34s %10s %10s %8s %8s %8s %8s\n", "case", "A k/s", "B k/s", "A %solo", "B %solo",
         "A viol", "B viol");
  struct {
    const char *name;
    struct pair_result *r;
  } rows[] = {{"A alone (gate open)", &solo_a},
              {"B alone (gate open)", &solo_b},
              {"pair, no gate (plain co-location)", &plain},
              {"pair, gated turns", &turns},
              {"pair, A always shut", &shut}};
  for (auto &row : rows)
    printf("%-34s %10.1f %10.1f %8.1f %8.1f %8.0f %8.0f\n", row.name, row.r->done[0],
           row.r->done[1], 100 * row.r->done[0] / solo_a.done[0],
           100 * row.r->done[1] / solo_b.done[1], row.r->violations[0], row.r->violations[1]);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "cost") == 0) return cost();
  if (argc >= 4 && strcmp(argv[1], "pair") == 0) return pair(atof(argv[2]), atof(argv[3]));
  fprintf(stderr, "usage: gate_probe cost | gate_probe pair MS_A MS_B\n");
  return 2;
}
