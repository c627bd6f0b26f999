"""Workloads that run INSIDE a shard (under LD_PRELOAD=libvgpu.so). Each prints one JSON line.

  python3 workloads.py torch          allocate 64 MiB tensors until torch.OutOfMemoryError
  python3 workloads.py cupy           the same through CuPy's default memory pool
  python3 workloads.py hold BYTES     allocate BYTES with PyTorch, print, hold until stdin closes
  python3 workloads.py context        create a CUDA context and report what it costs (no interposer)

The allocator mode (expandable segments, cudaMallocAsync) comes from PYTORCH_CUDA_ALLOC_CONF,
set by the parent, so the same code exercises every allocation path PyTorch has.
"""

import json
import sys

CHUNK = 64 << 20
# After the first refusal, smaller pieces measure how much of the cap is really usable.
TAIL_CHUNK = 2 << 20


def report(**fields):
    print(json.dumps(fields), flush=True)


def torch_until_oom():
    import torch

    free, total = torch.cuda.mem_get_info()
    tensors, raised = [], None
    for size in (CHUNK, TAIL_CHUNK):
        try:
            while True:
                tensors.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
        except torch.OutOfMemoryError as error:
            raised = type(error).__name__
    allocated = sum(t.numel() for t in tensors)
    reserved = torch.cuda.memory_reserved()
    free_after, total_after = torch.cuda.mem_get_info()
    report(
        workload="torch",
        total=total,
        free_before=free,
        allocated=allocated,
        reserved=reserved,
        raised=raised,
        total_after=total_after,
        free_after=free_after,
    )
    # Hold what we took for a moment so the outside monitor samples the peak.
    import time

    time.sleep(0.3)


def cupy_until_oom():
    import cupy

    free, total = cupy.cuda.runtime.memGetInfo()
    arrays, raised = [], None
    for size in (CHUNK, TAIL_CHUNK):
        try:
            while True:
                arrays.append(cupy.empty((size,), dtype=cupy.uint8))
        except cupy.cuda.memory.OutOfMemoryError as error:
            raised = type(error).__name__
    pool = cupy.get_default_memory_pool()
    report(
        workload="cupy",
        total=total,
        free_before=free,
        allocated=sum(a.nbytes for a in arrays),
        reserved=pool.total_bytes(),
        raised=raised,
    )
    import time

    time.sleep(0.3)


def hold(size):
    import torch

    tensor = torch.empty(size, dtype=torch.uint8, device="cuda")
    free, total = torch.cuda.mem_get_info()
    report(workload="hold", held=tensor.numel(), total=total, free=free)
    sys.stdin.read()


def context_cost():
    """A bare CUDA context and a PyTorch one, as the card sees them (run without the interposer)."""
    import subprocess

    probe = (
        "import ctypes,sys,time;"
        "cuda=ctypes.CDLL('libcuda.so.1');"
        "assert cuda.cuInit(0)==0;"
        "dev=ctypes.c_int();assert cuda.cuDeviceGet(ctypes.byref(dev),0)==0;"
        "ctx=ctypes.c_void_p();assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx),dev)==0;"
        "assert cuda.cuCtxSetCurrent(ctx)==0;"
        "print('ready',flush=True);sys.stdin.read()"
    )
    torch_probe = (
        "import sys,torch;torch.zeros(1,device='cuda');"
        "torch.ones(256,256,device='cuda')@torch.ones(256,256,device='cuda');torch.cuda.synchronize();"
        "print('ready',flush=True);sys.stdin.read()"
    )
    from nvml_probe import Nvml

    nvml = Nvml()

    def measure(code):
        before = nvml.used_bytes()
        child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "ready"
        held = nvml.used_bytes() - before
        child.stdin.close()
        child.wait()
        return held

    report(workload="context", bare_context=measure(probe), torch_context=measure(torch_probe))


if __name__ == "__main__":
    kind = sys.argv[1]
    if kind == "torch":
        torch_until_oom()
    elif kind == "cupy":
        cupy_until_oom()
    elif kind == "hold":
        hold(int(sys.argv[2]))
    elif kind == "context":
        context_cost()
    else:
        sys.exit(f"unknown workload {kind!r}; see the module docstring")
