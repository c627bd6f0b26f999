"""What one process can take of a GPU (docs/agent.md, "Capacity"): NVML v1 and v2 with no process,
then PyTorch takes memory in halving steps from 1 GiB until nothing more fits.

  python3 native/gpu-tests/usable_memory.py
"""
import ctypes, json, sys
sys.path.insert(0, __import__("os").path.dirname(__file__))
from nvml_probe import Nvml
lib = ctypes.CDLL("libnvidia-ml.so.1"); lib.nvmlInit_v2()
dev = ctypes.c_void_p(); lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev))
class M2(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong), ("reserved", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]
m = M2(); m.version = ctypes.sizeof(M2) | (2 << 24)
rc = lib.nvmlDeviceGetMemoryInfo_v2(dev, ctypes.byref(m))
MiB = 2**20
print(json.dumps({"v2_rc": rc, "total": m.total / MiB, "reserved": m.reserved / MiB, "free": m.free / MiB, "used": m.used / MiB, "v1_used": Nvml(0).used_bytes() / MiB}))
import torch
torch.cuda.init(); torch.zeros(1, device="cuda")
free, total = torch.cuda.mem_get_info()
held = []; step = 1024 * MiB; got = 0
while step >= 2 * MiB:
    try:
        held.append(torch.cuda.caching_allocator_alloc(step)); got += step
    except RuntimeError:
        torch.cuda.empty_cache(); step //= 2
        continue
f2, _ = torch.cuda.mem_get_info()
print(json.dumps({"torch_free_after_ctx": free / MiB, "total": total / MiB, "allocated": got / MiB, "free_left": f2 / MiB,
                  "nvml_used_now_v1": Nvml(0).used_bytes() / MiB}))
