"""The CUDA driver and NVML through ctypes, for the multi-GPU checks (multi_gpu.sh).

No PyTorch: these helpers start in milliseconds and run against the fake driver too
(LD_LIBRARY_PATH=native/build/fake-driver), so the checks that use them can be tried without a GPU.
Every return code is checked. NVML is read from processes that are not interposed (the shard's own
view of NVML is the interposer's).
"""
import ctypes
import json
import os
import subprocess

MiB = 1 << 20
GiB = 1 << 30


class CudaError(RuntimeError):
    def __init__(self, what, code):
        super().__init__(f"{what} failed with CUDA error {code}")
        self.code = code


def uuid_text(raw: bytes) -> str:
    h = raw.hex()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


class Cuda:
    """The driver API a process needs to take memory on several ordinals and read what it is told."""

    OUT_OF_MEMORY = 2

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self._ok(self.lib.cuInit(0), "cuInit")
        self.contexts = {}

    def _ok(self, code, what):
        if code != 0:
            raise CudaError(what, code)

    def count(self) -> int:
        n = ctypes.c_int()
        self._ok(self.lib.cuDeviceGetCount(ctypes.byref(n)), "cuDeviceGetCount")
        return n.value

    def uuid(self, ordinal: int) -> str:
        raw = (ctypes.c_ubyte * 16)()
        self._ok(self.lib.cuDeviceGetUuid(raw, ctypes.c_int(ordinal)), "cuDeviceGetUuid")
        return uuid_text(bytes(raw))

    def use(self, ordinal: int):
        """Makes ordinal's primary context current (retained once per process)."""
        if ordinal not in self.contexts:
            ctx = ctypes.c_void_p()
            self._ok(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), ctypes.c_int(ordinal)), "cuDevicePrimaryCtxRetain")
            self.contexts[ordinal] = ctx
        self._ok(self.lib.cuCtxSetCurrent(self.contexts[ordinal]), "cuCtxSetCurrent")

    def current_ordinal(self) -> int:
        dev = ctypes.c_int()
        self._ok(self.lib.cuCtxGetDevice(ctypes.byref(dev)), "cuCtxGetDevice")
        return dev.value

    def alloc(self, size: int) -> int:
        """cuMemAlloc on the current context; raises CudaError (code 2 past the cap)."""
        ptr = ctypes.c_uint64()
        self._ok(self.lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size)), "cuMemAlloc_v2")
        return ptr.value

    def try_alloc(self, size: int):
        """(pointer, 0) or (None, error code)."""
        try:
            return self.alloc(size), 0
        except CudaError as e:
            return None, e.code

    def free(self, ptr: int):
        self._ok(self.lib.cuMemFree_v2(ctypes.c_uint64(ptr)), "cuMemFree_v2")

    def mem_get_info(self):
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._ok(self.lib.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo_v2")
        return free.value, total.value


class _ProcessInfo(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong), ("gpuInstanceId", ctypes.c_uint),
                ("computeInstanceId", ctypes.c_uint)]


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class Nvml:
    """The card as the host sees it: physical indices, UUIDs, memory per process."""

    def __init__(self):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        self._ok(self.lib.nvmlInit_v2(), "nvmlInit_v2")

    def _ok(self, code, what):
        if code != 0:
            raise RuntimeError(f"NVML {what} failed with code {code}")

    def _handle(self, index):
        dev = ctypes.c_void_p()
        self._ok(self.lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(dev)), "GetHandleByIndex")
        return dev

    def count(self) -> int:
        n = ctypes.c_uint()
        self._ok(self.lib.nvmlDeviceGetCount_v2(ctypes.byref(n)), "GetCount")
        return n.value

    def uuid(self, index) -> str:
        buf = ctypes.create_string_buffer(96)
        self._ok(self.lib.nvmlDeviceGetUUID(self._handle(index), buf, ctypes.c_uint(96)), "GetUUID")
        return buf.value.decode()

    def used(self, index) -> int:
        m = _Memory()
        self._ok(self.lib.nvmlDeviceGetMemoryInfo(self._handle(index), ctypes.byref(m)), "GetMemoryInfo")
        return m.used

    def processes(self, index) -> dict:
        """pid -> bytes on physical GPU `index` (compute processes)."""
        n = ctypes.c_uint(256)
        arr = (_ProcessInfo * 256)()
        self._ok(self.lib.nvmlDeviceGetComputeRunningProcesses_v3(self._handle(index), ctypes.byref(n), arr),
                 "GetComputeRunningProcesses_v3")
        return {p.pid: p.usedGpuMemory for p in arr[: n.value]}

    def by_uuid(self) -> dict:
        """UUID -> physical index."""
        return {self.uuid(i): i for i in range(self.count())}


def region(path: str, tool: str = None) -> dict:
    """A region as the agent reads it (gpushards-region show): UUID -> its device entry."""
    tool = tool or os.environ.get("GS_REGION_TOOL", "gpushards-region")
    shown = json.loads(subprocess.run([tool, "show", path], check=True, capture_output=True, text=True).stdout)
    return {d["uuid"].lower(): d for d in shown["devices"]}


def join_shard(how: str, container: str):
    """Puts this process into a shard before it touches CUDA: `how` is a cgroup.procs file (a real
    cgroup v2 named after the container, as Docker makes one) or a shadow /proc folder the agent's
    ProcessOwners reads instead."""
    pid = os.getpid()
    if how.endswith("cgroup.procs"):
        with open(how, "w") as f:
            f.write(str(pid))
    else:
        os.makedirs(os.path.join(how, str(pid)), exist_ok=True)
        with open(os.path.join(how, str(pid), "cgroup"), "w") as f:
            f.write(f"0::/docker/{container}\n")
