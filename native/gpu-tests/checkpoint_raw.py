#!/usr/bin/env python3
"""The driver's checkpoint API on one process, timed, with nothing of GPU Shards in between.

  python3 checkpoint_raw.py PID suspend|resume|unlock|state

suspend: cuCheckpointProcessLock then cuCheckpointProcessCheckpoint; resume:
cuCheckpointProcessRestore then cuCheckpointProcessUnlock; unlock: cuCheckpointProcessUnlock alone
(a lock whose checkpoint was refused); state: cuCheckpointProcessGetState.
Prints one line: "<op> <pid> <ms of the first call> <ms of the second> <result name>", so
elastic_agent.mjs can hold the agent's orchestration against the raw API in one run.
"""
import ctypes
import sys
import time

STATES = ["RUNNING", "LOCKED", "CHECKPOINTED", "FAILED"]


class LockArgs(ctypes.Structure):
    _fields_ = [("timeoutMs", ctypes.c_uint), ("reserved0", ctypes.c_uint), ("reserved1", ctypes.c_uint64 * 7)]


class Reserved8(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_uint64 * 8)]


class RestoreArgs(ctypes.Structure):
    _fields_ = [
        ("gpuPairs", ctypes.c_void_p),
        ("gpuPairsCount", ctypes.c_uint),
        ("reserved", ctypes.c_char * (52 - 8)),
        ("reserved1", ctypes.c_uint64),
    ]


cuda = ctypes.CDLL("libcuda.so.1")
for name in ("cuCheckpointProcessLock", "cuCheckpointProcessCheckpoint", "cuCheckpointProcessRestore",
             "cuCheckpointProcessUnlock", "cuCheckpointProcessGetState", "cuInit"):
    getattr(cuda, name).restype = ctypes.c_int


def error_name(code):
    text = ctypes.c_char_p()
    getter = cuda.cuGetErrorName
    getter.restype = ctypes.c_int
    return text.value.decode() if getter(code, ctypes.byref(text)) == 0 and text.value else f"CUDA error {code}"


def timed(fn, *args):
    start = time.perf_counter()
    code = fn(*args)
    return (time.perf_counter() - start) * 1000, code


pid, op = int(sys.argv[1]), sys.argv[2]
# Restore needs a driver that is initialised in the caller (or persistence mode).
if cuda.cuInit(0) != 0:
    sys.exit("cuInit failed")
if op == "state":
    state = ctypes.c_int()
    code = cuda.cuCheckpointProcessGetState(pid, ctypes.byref(state))
    print(f"state {pid} 0 0 {STATES[state.value] if code == 0 else error_name(code)}")
elif op == "suspend":
    lock = LockArgs(timeoutMs=10000)
    first, code = timed(cuda.cuCheckpointProcessLock, pid, ctypes.byref(lock))
    second = 0.0
    if code == 0:
        second, code = timed(cuda.cuCheckpointProcessCheckpoint, pid, ctypes.byref(Reserved8()))
    print(f"suspend {pid} {first:.3f} {second:.3f} {error_name(code) if code else 'CUDA_SUCCESS'}")
elif op == "resume":
    first, code = timed(cuda.cuCheckpointProcessRestore, pid, ctypes.byref(RestoreArgs()))
    second = 0.0
    if code == 0:
        second, code = timed(cuda.cuCheckpointProcessUnlock, pid, ctypes.byref(Reserved8()))
    print(f"resume {pid} {first:.3f} {second:.3f} {error_name(code) if code else 'CUDA_SUCCESS'}")
elif op == "unlock":
    first, code = timed(cuda.cuCheckpointProcessUnlock, pid, ctypes.byref(Reserved8()))
    print(f"unlock {pid} {first:.3f} 0 {error_name(code) if code else 'CUDA_SUCCESS'}")
else:
    sys.exit(f"unknown op {op}: suspend, resume, unlock or state")
