"""Device-level memory readings through NVML, from a process that is NOT interposed.

The interposer rewrites what NVML reports inside a shard, so every check that compares a
shard's real footprint with its cap reads the card from outside, through this module.
"""

import ctypes
import threading
import time


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class Nvml:
    def __init__(self, index=0):
        self._lib = ctypes.CDLL("libnvidia-ml.so.1")
        self._check(self._lib.nvmlInit_v2(), "nvmlInit_v2")
        self._device = ctypes.c_void_p()
        self._check(self._lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self._device)), "GetHandleByIndex")

    @staticmethod
    def _check(code, what):
        if code != 0:
            raise RuntimeError(f"NVML {what} failed with code {code}")

    def used_bytes(self):
        memory = _Memory()
        self._check(self._lib.nvmlDeviceGetMemoryInfo(self._device, ctypes.byref(memory)), "GetMemoryInfo")
        return memory.used

    def total_bytes(self):
        memory = _Memory()
        self._check(self._lib.nvmlDeviceGetMemoryInfo(self._device, ctypes.byref(memory)), "GetMemoryInfo")
        return memory.total


class PeakMonitor:
    """Samples the card's used memory every millisecond; peak_above_baseline() is the most any
    process started after construction held at once, as the card saw it."""

    def __init__(self, nvml, period_s=0.001):
        self._nvml = nvml
        self._period = period_s
        self.baseline = nvml.used_bytes()
        self._peak = self.baseline
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self._peak = max(self._peak, self._nvml.used_bytes())
            time.sleep(self._period)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def peak_above_baseline(self):
        return self._peak - self.baseline
