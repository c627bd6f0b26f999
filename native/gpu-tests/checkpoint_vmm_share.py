#!/usr/bin/env python3
"""What the driver's checkpoint API does with GPU memory shared through a VMM shareable handle
(issue #30, point 4), beside checkpoint_ipc.py's legacy CUDA IPC.

  python3 checkpoint_vmm_share.py [MIB]
  python3 checkpoint_vmm_share.py --lib LIBVGPU [MIB]

NCCL (NCCL_CUMEM_ENABLE, the default since 2.19) and PyTorch's expandable segments share memory
between the processes of a host with cuMemExportToShareableHandle (a POSIX file descriptor) and
cuMemImportFromShareableHandle, not cuIpcOpenMemHandle. The exporter (this process) creates MIB
(default 1024) with cuMemCreate, fills it with a pattern and passes the descriptor to an importer
(SCM_RIGHTS over a socket pair), which maps it. Each is then moved with the bare API
(checkpoint_raw.py: lock + checkpoint, then restore + unlock): the exporter alone, the importer
alone, both (VMM_ATTEMPTS="importer alone,both" picks some; an importer left checkpointed ends the
run). After each attempt both processes check the shared data. One JSON line per attempt.

With --lib, no checkpoint: does libvgpu.so name the importer in the region (issue #30, point 4)?
Both processes run under LIBVGPU (LD_PRELOAD, a region file in a temporary folder,
CUDA_DEVICE_MEMORY_LIMIT=16g), as a shard's processes run; MIB defaults to 256. The importer
takes REGION_STEPS one at a time (a descriptor of nothing refused; imported, mapped and retained;
unmapped; the retain released; the import released; imported again, mapped and released at
once; unmapped; imported twice; both released) and the exporter reads the region file after each, as the agent reads it
(ipc_region.py's reader): one JSON line per step with whether the importer's slot has its
ipc_importers bit (gpushards_region.h), what it should be, and whether the exporter's has (it
never should). Last line: {"check": "vmm region", "ok": true|false}.
"""
import ctypes
import json
import os
import socket
import subprocess
import sys
import tempfile

from checkpoint_moves import attempts, round_trip

cuda = ctypes.CDLL("libcuda.so.1")


class Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class AllocationProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("location", Location), ("win32HandleMetaData", ctypes.c_void_p),
                ("allocFlags", AllocFlags)]


class AccessDesc(ctypes.Structure):
    _fields_ = [("location", Location), ("flags", ctypes.c_int)]


PINNED, POSIX_FD, DEVICE, READWRITE = 1, 1, 1, 3
PATTERN = 0x5A17C0DE


def error_name(code):
    text = ctypes.c_char_p()
    cuda.cuGetErrorName(code, ctypes.byref(text))
    return text.value.decode() if text.value else str(code)


def check(name, *args):
    code = getattr(cuda, name)(*args)
    if code != 0:
        raise RuntimeError(f"{name}: {error_name(code)}")


def context():
    check("cuInit", 0)
    device, ctx = ctypes.c_int(), ctypes.c_void_p()
    check("cuDeviceGet", ctypes.byref(device), 0)
    check("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), device)
    check("cuCtxSetCurrent", ctx)


def prop():
    return AllocationProp(type=PINNED, requestedHandleTypes=POSIX_FD, location=Location(DEVICE, 0))


def map_handle(handle, size):
    ptr = ctypes.c_uint64()
    check("cuMemAddressReserve", ctypes.byref(ptr), ctypes.c_size_t(size), ctypes.c_size_t(0), ctypes.c_uint64(0), ctypes.c_uint64(0))
    check("cuMemMap", ptr, ctypes.c_size_t(size), ctypes.c_size_t(0), handle, ctypes.c_uint64(0))
    desc = AccessDesc(location=Location(DEVICE, 0), flags=READWRITE)
    check("cuMemSetAccess", ptr, ctypes.c_size_t(size), ctypes.byref(desc), ctypes.c_size_t(1))
    return ptr


def create_shared(mib):
    """MIB (rounded up to the granularity) created shareable, mapped and filled with PATTERN."""
    granularity = ctypes.c_size_t()
    p = prop()
    check("cuMemGetAllocationGranularity", ctypes.byref(granularity), ctypes.byref(p), 0)
    size = -(-mib * 2**20 // granularity.value) * granularity.value
    handle = ctypes.c_uint64()
    check("cuMemCreate", ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(p), ctypes.c_uint64(0))
    ptr = map_handle(handle, size)
    check("cuMemsetD32_v2", ptr, ctypes.c_uint(PATTERN), ctypes.c_size_t(size // 4))
    check("cuCtxSynchronize")
    return handle, ptr, size


def intact(ptr, size):
    """Every 4-byte word is the pattern (read back in 64 MiB pieces)."""
    piece = 64 * 2**20
    buffer = (ctypes.c_uint32 * (piece // 4))()
    expected = bytes(ctypes.c_uint32(PATTERN)) * (piece // 4)
    for offset in range(0, size, piece):
        check("cuMemcpyDtoH_v2", buffer, ctypes.c_uint64(ptr.value + offset), ctypes.c_size_t(piece))
        if bytes(buffer) != expected:
            return False
    return True


def importer(sock_fd, size):
    """Maps the exporter's memory and answers 'check' with whether it is intact."""
    sock = socket.socket(fileno=sock_fd)
    context()
    _, fds, _, _ = socket.recv_fds(sock, 16, 1)
    handle = ctypes.c_uint64()
    check("cuMemImportFromShareableHandle", ctypes.byref(handle), ctypes.c_void_p(fds[0]), POSIX_FD)
    ptr = map_handle(handle, size)
    sock.sendall(f"pid {os.getpid()}\n".encode())
    for line in sock.makefile():
        if line.strip() == "stop":
            break
        try:
            sock.sendall(f"{'intact' if intact(ptr, size) else 'changed'}\n".encode())
        except RuntimeError as error:
            sock.sendall(f"error {error}\n".encode())


# What the importer does, one step at a time, and whether the region should name it after.
REGION_STEPS = [
    ("a descriptor of nothing refused", False),
    ("imported, mapped and retained", True),
    ("unmapped, two references left", True),
    ("the retain released", True),
    ("the import released", False),
    ("imported again, mapped and released at once", True),
    ("unmapped", False),
    ("imported twice", True),
    ("both imports released", False),
]


def region_steps(fd, size):
    """The importer's side of REGION_STEPS: one generator step each, yielding what it saw."""
    junk = os.open("/dev/null", os.O_RDONLY)
    handle = ctypes.c_uint64()
    code = cuda.cuMemImportFromShareableHandle(ctypes.byref(handle), ctypes.c_void_p(junk), POSIX_FD)
    os.close(junk)
    if code == 0:
        raise RuntimeError("cuMemImportFromShareableHandle took /dev/null")
    yield {"junk": error_name(code)}
    check("cuMemImportFromShareableHandle", ctypes.byref(handle), ctypes.c_void_p(fd), POSIX_FD)
    ptr = map_handle(handle, size)
    retained = ctypes.c_uint64()
    check("cuMemRetainAllocationHandle", ctypes.byref(retained), ctypes.c_void_p(ptr.value))
    yield {"intact": intact(ptr, size), "retainedSameHandle": retained.value == handle.value}
    check("cuMemUnmap", ptr, ctypes.c_size_t(size))
    check("cuMemAddressFree", ptr, ctypes.c_size_t(size))
    yield {}
    check("cuMemRelease", retained)
    yield {}
    check("cuMemRelease", handle)
    yield {}
    check("cuMemImportFromShareableHandle", ctypes.byref(handle), ctypes.c_void_p(fd), POSIX_FD)
    ptr = map_handle(handle, size)
    check("cuMemRelease", handle)
    yield {"intact": intact(ptr, size)}
    check("cuMemUnmap", ptr, ctypes.c_size_t(size))
    check("cuMemAddressFree", ptr, ctypes.c_size_t(size))
    yield {}
    # Whether the driver hands back the same handle value for a second import (then it takes one
    # release per import) or a new one: libvgpu.so must clear the bit only after both releases.
    second = ctypes.c_uint64()
    check("cuMemImportFromShareableHandle", ctypes.byref(handle), ctypes.c_void_p(fd), POSIX_FD)
    check("cuMemImportFromShareableHandle", ctypes.byref(second), ctypes.c_void_p(fd), POSIX_FD)
    yield {"sameHandleValue": handle.value == second.value}
    check("cuMemRelease", handle)
    check("cuMemRelease", second)
    yield {}


def region_importer(sock_fd, size):
    """Takes one of REGION_STEPS per 'next' and answers with a JSON line of what it saw."""
    sock = socket.socket(fileno=sock_fd)
    context()
    _, fds, _, _ = socket.recv_fds(sock, 16, 1)
    sock.sendall(f"pid {os.getpid()}\n".encode())
    steps = region_steps(fds[0], size)
    for line in sock.makefile():
        if line.strip() != "next":
            break
        try:
            seen = {"done": True, **next(steps)}
        except (RuntimeError, StopIteration) as error:
            seen = {"done": False, "error": str(error) or type(error).__name__}
        sock.sendall((json.dumps(seen) + "\n").encode())


def share_with_importer(mib, mode):
    """Creates MIB with a pattern, exports it and passes the descriptor to a child started in
    `mode`; the mapping, its size, the socket to the child, its replies and the child."""
    handle, ptr, size = create_shared(mib)
    fd = ctypes.c_int()
    check("cuMemExportToShareableHandle", ctypes.byref(fd), handle, POSIX_FD, ctypes.c_uint64(0))
    mine, theirs = socket.socketpair()
    child = subprocess.Popen([sys.executable, __file__, mode, str(theirs.fileno()), str(size)],
                             pass_fds=[theirs.fileno()])
    theirs.close()
    socket.send_fds(mine, [b"fd"], [fd.value])
    return ptr, size, mine, mine.makefile(), child


def region_run(mib):
    """The exporter under libvgpu.so: shares MIB, walks the importer through REGION_STEPS."""
    from ipc_region import region_view

    region = os.environ["GPUSHARDS_REGION_PATH"]
    context()
    ptr, size, mine, replies, child = share_with_importer(mib, "--region-importer")
    importer_pid = int(replies.readline().split()[1])
    oks = []
    for name, want in REGION_STEPS:
        mine.sendall(b"next\n")
        seen = json.loads(replies.readline())
        view = region_view(region, [os.getpid(), importer_pid])
        line = {"check": "vmm region", "step": name, "importer": importer_pid, "exporter": os.getpid(),
                "importerNamed": view["named"][importer_pid], "want": want,
                "exporterNamed": view["named"][os.getpid()], "unlisted": view["unlisted"], "seen": seen}
        line["ok"] = (seen["done"] and seen.get("intact", True) and line["importerNamed"] is want
                      and line["exporterNamed"] is False)
        oks.append(line["ok"])
        print(json.dumps(line), flush=True)
        if not seen["done"]:
            break
    mine.sendall(b"stop\n")
    try:
        child.wait(timeout=30)
    except subprocess.TimeoutExpired:
        child.kill()
    ok = len(oks) == len(REGION_STEPS) and all(oks)
    print(json.dumps({"check": "vmm region", "mib": size // 2**20, "ok": ok}), flush=True)
    return 0 if ok else 1


def region_main(library, mib):
    with tempfile.TemporaryDirectory(prefix="gpushards-vmm-") as folder:
        env = dict(os.environ, LD_PRELOAD=library, GPUSHARDS_REGION_PATH=os.path.join(folder, "region"),
                   CUDA_DEVICE_MEMORY_LIMIT="16g", GPUSHARDS_LOG_LEVEL="info")
        return subprocess.run([sys.executable, os.path.abspath(__file__), "--region-exporter", str(mib)], env=env,
                              check=False, timeout=300).returncode


def main():
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    context()
    ptr, size, mine, replies, child = share_with_importer(mib, "--importer")
    pids = {"exporter": os.getpid(), "importer": int(replies.readline().split()[1])}

    def both_intact():
        mine.sendall(b"check\n")
        return {"exporter": intact(ptr, size), "importer": replies.readline().strip()}

    print(json.dumps({"check": "vmm shared", "mib": size // 2**20, "pids": pids, "intact": both_intact()}), flush=True)
    for name, who in attempts("VMM_ATTEMPTS"):
        moved = round_trip(pids, who)
        stuck = [w for w in who if moved["statesAfter"][w] != "RUNNING"]
        print(json.dumps({"check": "vmm checkpoint", "attempt": name, **moved,
                          "intact": both_intact() if not stuck else f"not checked: {stuck} not running"}),
              flush=True)
        if stuck:
            break
    mine.sendall(b"stop\n")
    try:
        child.wait(timeout=30)
    except subprocess.TimeoutExpired:
        child.kill()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--importer":
        importer(int(sys.argv[2]), int(sys.argv[3]))
    elif len(sys.argv) > 1 and sys.argv[1] == "--region-importer":
        region_importer(int(sys.argv[2]), int(sys.argv[3]))
    elif len(sys.argv) > 1 and sys.argv[1] == "--region-exporter":
        sys.exit(region_run(int(sys.argv[2])))
    elif len(sys.argv) > 2 and sys.argv[1] == "--lib":
        sys.exit(region_main(os.path.abspath(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 256))
    else:
        main()
