"""The seven ways past the cap (issue 11) on a real GPU, each inside a 4 GiB shard.

  python3 prove.py LIBVGPU CAP_WAYS_BINARY OUT.json

A stand-in for the agent runs in this process: it writes the shard's read-only limits file (the
layout of native/vgpu/include/gpushards_limits.h), samples every process of the case's process
group through NVML (nvmlDeviceGetComputeRunningProcesses_v3, ctypes) every SAMPLE_S, writes the
shard's real bytes into the limits file (the correction libvgpu.so budgets against), and
SIGKILLs the group's largest holder when the shard's real usage passes cap + TOLERANCE (the
agent's default "kill" policy). It is a Python stand-in for the TypeScript agent's sampler and
policy (apps/agent), used because the GPU machine has no Docker; the agent itself is tested in
the docker tier. Each case prints one row: what the program saw, the card's peak, how long the
shard's real usage stayed over the cap, and whether the watcher had to kill.
"""

import ctypes
import json
import mmap
import os
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time

LIB, CAP_WAYS, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
MiB, GiB = 1 << 20, 1 << 30
CAP = 4 * GiB
CONTEXT = 527 * MiB  # a bare context on this H100 (RESULTS.md, 2026-11-22)
TOLERANCE = 256 * MiB
SAMPLE_S = 0.005

nvml = ctypes.CDLL("libnvidia-ml.so.1")


class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class ProcessInfo(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


assert nvml.nvmlInit_v2() == 0
handle = ctypes.c_void_p()
assert nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 0
uuid_text = ctypes.create_string_buffer(96)
assert nvml.nvmlDeviceGetUUID(handle, uuid_text, 96) == 0
UUID = bytes.fromhex(uuid_text.value.decode()[4:].replace("-", ""))
procs_buf = (ProcessInfo * 256)()


def processes():
    count = ctypes.c_uint(256)
    r = nvml.nvmlDeviceGetComputeRunningProcesses_v3(handle, ctypes.byref(count), procs_buf)
    if r != 0:
        return {}
    return {procs_buf[i].pid: procs_buf[i].usedGpuMemory for i in range(count.value)}


def card_used():
    m = Memory()
    nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(m))
    return m.used


def fnv1a(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def write_limits(path):
    head = struct.pack("<QIIQIIII", 0x31544D494C555047, 1, 128, 128 + 16 * 128, 16, 128, 1, 0)
    head += struct.pack("<Q", fnv1a(head))
    head = head.ljust(128, b"\0")
    dev = UUID + struct.pack("<IIQQQQQ", 1, 0, CAP, CONTEXT, 0, 0, 0)
    body = dev.ljust(128, b"\0") + b"\0" * (15 * 128)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(head + body)
    os.chmod(tmp, 0o444)
    os.rename(tmp, path)
    fd = os.open(path, os.O_RDWR) if os.access(path, os.W_OK) else None
    if fd is None:
        os.chmod(path, 0o644)
        fd = os.open(path, os.O_RDWR)
        os.chmod(path, 0o444)
    m = mmap.mmap(fd, 128 + 16 * 128)
    os.close(fd)
    return m


def group_of(pgid, pids):
    out = []
    for pid in pids:
        try:
            if os.getpgid(pid) == pgid:
                out.append(pid)
        except ProcessLookupError:
            pass
    return out


ONLY = os.environ.get("PROVE_ONLY", "")


def run_case(name, argv, env_extra=None, interposed=True, correct=True, kill=True, timeout=240):
    if ONLY and ONLY not in name:
        return {"case": name, "skipped": True, "detect_to_exit_ms": None}
    work = tempfile.mkdtemp(prefix=f"prove-{name}-")
    limits = write_limits(os.path.join(work, "limits"))
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if interposed:
        env.update(LD_PRELOAD=LIB, GPUSHARDS_LIMITS_PATH=os.path.join(work, "limits"),
                   GPUSHARDS_REGION_PATH=os.path.join(work, "region"), GPUSHARDS_LOG_LEVEL="info")
    env.update(env_extra or {})
    base_card = card_used()
    start = time.monotonic()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    peak_card = peak_shard = 0
    over_s = 0.0
    detect_at = killed_at = None
    killed = None
    last = time.monotonic()
    while p.poll() is None:
        if time.monotonic() - start > timeout:
            os.killpg(p.pid, signal.SIGKILL)
            break
        procs = processes()
        mine = {pid: procs[pid] for pid in group_of(p.pid, procs.keys())}
        shard = sum(mine.values())
        now = time.monotonic()
        if correct:
            limits[128 + 48:128 + 64] = struct.pack("<QQ", shard, int(time.time() * 1000))
        peak_shard = max(peak_shard, shard)
        peak_card = max(peak_card, card_used() - base_card)
        if shard > CAP:
            over_s += now - last
        last = now
        if kill and shard > CAP + TOLERANCE and killed is None:
            detect_at = now
            victim = max(mine, key=mine.get)
            os.kill(victim, signal.SIGKILL)
            killed_at = time.monotonic()
            killed = {"pid": victim, "bytes": mine[victim]}
        time.sleep(SAMPLE_S)
    out, err = p.communicate()
    exited_at = time.monotonic()
    lines = [json.loads(l) for l in out.decode().splitlines() if l.startswith("{")]
    row = {
        "case": name, "rc": p.returncode, "saw": lines,
        "card_peak_mib": round(peak_card / MiB, 1), "shard_peak_mib": round(peak_shard / MiB, 1),
        "over_cap_s": round(over_s, 3), "killed": killed,
        "detect_to_exit_ms": round((exited_at - detect_at) * 1000, 1) if detect_at else None,
        "stderr_tail": err.decode()[-600:],
    }
    print(json.dumps({k: v for k, v in row.items() if k != "stderr_tail"}), flush=True)
    return row


py = sys.executable
here = os.path.dirname(os.path.abspath(__file__))
results = []
results.append(run_case("graph 6 GiB", [CAP_WAYS, "graph"]))
results.append(run_case("graph probe 1 GiB (native)", [CAP_WAYS, "graph-probe"], interposed=False, kill=False))
results.append(run_case("malloc heap 6 GiB", [CAP_WAYS, "heap"]))
results.append(run_case("malloc heap probe 1 GiB (native)", [CAP_WAYS, "heap-probe"], interposed=False, kill=False))
results.append(run_case("16 KiB stack frame after 3 GiB", [CAP_WAYS, "stack"]))
results.append(run_case("1.5 GiB __device__ array after 2 GiB", [CAP_WAYS, "module"]))
results.append(run_case("80 GiB written into the region", [CAP_WAYS, "region"]))
results.append(run_case("dlmopen bypass 6 GiB", [CAP_WAYS, "bypass"]))

LAZY = r"""
import json, time, torch
x = torch.randn(4096, 4096, device="cuda"); y = (x @ x).sum().item()
z = torch.nn.functional.softmax(x, dim=1).sum().item()
t, raised = [], None
for size in (64 << 20, 2 << 20):
    try:
        while True: t.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
    except torch.OutOfMemoryError as e: raised = type(e).__name__
print(json.dumps({"allocated_mib": sum(a.numel() for a in t) >> 20, "raised": raised}), flush=True)
time.sleep(0.5)
"""
for conf in ("", "backend:cudaMallocAsync"):
    results.append(run_case(f"PyTorch lazy kernels then fill ({conf or 'caching'})", [py, "-c", LAZY],
                            {"PYTORCH_CUDA_ALLOC_CONF": conf} if conf else {}))

CAPTURE = r"""
import json, torch
m = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()
inp = torch.randn(64, 1024, device="cuda")
s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3): m(inp)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    out = m(inp)
inp.copy_(torch.randn(64, 1024, device="cuda")); g.replay(); torch.cuda.synchronize()
ok = torch.allclose(out, m(inp), atol=1e-4)
print(json.dumps({"capture": "ok" if ok else "mismatch", "backend": torch.cuda.get_allocator_backend()}), flush=True)
"""
COMPILE = r"""
import json, torch
m = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).cuda()
f = torch.compile(m, mode="reduce-overhead")
inp = torch.randn(32, 512, device="cuda")
for _ in range(4): out = f(inp)
torch.cuda.synchronize()
ok = torch.allclose(out, m(inp), atol=1e-3)
print(json.dumps({"compile": "ok" if ok else "mismatch", "backend": torch.cuda.get_allocator_backend()}), flush=True)
"""
async_conf = {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}
for interposed in (False, True):
    tag = "interposed" if interposed else "native"
    results.append(run_case(f"torch.cuda.graph, cudaMallocAsync ({tag})", [py, "-c", CAPTURE], async_conf,
                            interposed=interposed))
# reduce-overhead's CUDA-graph trees need the caching allocator: with backend:cudaMallocAsync
# PyTorch 2.11 itself refuses (checkPoolLiveAllocations), natively as interposed.
for interposed in (True, False):
    tag = "interposed" if interposed else "native"
    results.append(run_case(f"torch.compile reduce-overhead ({tag})", [py, "-c", COMPILE],
                            {"TORCHINDUCTOR_CACHE_DIR": "/tmp/inductor-cache"}, interposed=interposed,
                            timeout=150 if interposed else 100))

# Time from the first sample over cap + tolerance to the process's exit, repeated.
lat = []
for i in range(int(os.environ.get("KILL_TRIALS", "15")) if not ONLY or ONLY in "kill latency" else 0):
    r = run_case(f"kill latency {i}", [CAP_WAYS, "bypass"])
    if r["detect_to_exit_ms"] is not None:
        lat.append(r["detect_to_exit_ms"])
lat.sort()
summary = {"kill_latency_ms": {"n": len(lat), "p50": statistics.median(lat) if lat else None,
                               "p99": lat[min(len(lat) - 1, int(round(0.99 * (len(lat) - 1))))] if lat else None,
                               "max": lat[-1] if lat else None, "sample_interval_ms": SAMPLE_S * 1000}}
print(json.dumps(summary), flush=True)
with open(OUT, "w") as f:
    json.dump({"results": results, **summary}, f, indent=1)
