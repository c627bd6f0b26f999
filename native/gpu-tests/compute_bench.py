"""Compute-share benchmarks on a real GPU (docs/compute.md; results in RESULTS.md).

  python3 compute_bench.py LIBVGPU [HAMI_LIBVGPU] [--secs N] [--only a,b] [--gpu-sample]
      [--variants 'name:VAR=V,VAR=V;name2:...'] [--mps] > table

Every shard is a process (its own CUDA context, as separate containers are).
Workers import torch, warm up, say "ready", and start together at a time the
parent gives; each counts finished iterations per second for --secs seconds
(the first second is dropped). Throughput is reported as a share of the same
workload's solo throughput (no interposer) measured first. With --gpu-sample,
nvidia-smi is sampled every 100 ms during each case, and the row gets the GPU's
mean utilization, SM clock and power over the steady window. With --variants,
every "ours" case runs once per variant (extra environment for libvgpu.so),
variants alternating case by case; a variant with MPS=<percent> runs them as MPS
clients with that active-thread percentage, after the others. With --mps (or
such a variant), an MPS control daemon is started (pipe and log folders of its
own), the "mps" cases run with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE as the share,
each MPS row gets what NVML reports per process while it runs, and the daemon
is told to quit at the end. GS_STREAM_PRIORITY=high|low|<n> in a worker's environment puts its
work on a stream of that priority (the "-prio" cases give it to one shard).
"""
import json, os, subprocess, sys, time, shutil

WORKER = r'''
import json, os, sys, time, torch
kind = sys.argv[1]; secs = float(sys.argv[2])
torch.backends.cuda.matmul.allow_tf32 = True
dev = "cuda"
if kind in ("mm", "graph", "streams"):
    a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16); b = torch.randn_like(a)
    if kind == "mm":
        def step():
            for _ in range(10): torch.mm(a, b)
    elif kind == "graph":
        outs = torch.empty_like(a)
        s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3): torch.mm(a, b, out=outs)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(10): torch.mm(a, b, out=outs)
        def step(): g.replay()
    else:
        streams = [torch.cuda.Stream() for _ in range(4)]
        def step():
            for i in range(10):
                with torch.cuda.stream(streams[i % 4]): torch.mm(a, b)
elif kind == "ew":
    # A saturating neighbour of many short thread blocks (an elementwise pass over 512 MiB), where the
    # matmul's kernel is one long block per SM: what a stream priority can reorder is blocks not yet started.
    buf = torch.randn(256 << 20, device=dev, dtype=torch.bfloat16)
    def step():
        for _ in range(10): buf.mul_(1.0001)
elif kind == "train":
    model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(4)]).to(dev, torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(2048, 4096, device=dev, dtype=torch.bfloat16)
    def step():
        opt.zero_grad(set_to_none=True); model(x).float().pow(2).mean().backward(); opt.step()
elif kind == "infer":
    model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(3)]).to(dev, torch.bfloat16).eval()
    x = torch.randn(8, 2048, device=dev, dtype=torch.bfloat16)
    def step():
        with torch.no_grad(): model(x)
        torch.cuda.synchronize()
prio = None
if os.environ.get("GS_STREAM_PRIORITY"):
    # Issue the work on a stream of its own with a set priority (driver API: PyTorch's own pool stops
    # at -3, the H100 goes to -5). "high" is the greatest the context offers, "low" the least (the
    # priority of the default stream the other workloads use), or a number.
    import ctypes
    torch.cuda.synchronize()
    cu = ctypes.CDLL("libcuda.so.1"); least, greatest = ctypes.c_int(), ctypes.c_int()
    assert cu.cuCtxGetStreamPriorityRange(ctypes.byref(least), ctypes.byref(greatest)) == 0
    want = os.environ["GS_STREAM_PRIORITY"]
    want = {"high": greatest.value, "low": least.value}.get(want) if want in ("high", "low") else int(want)
    handle, got = ctypes.c_void_p(), ctypes.c_int()
    assert cu.cuStreamCreateWithPriority(ctypes.byref(handle), 1, ctypes.c_int(want)) == 0  # 1: non-blocking
    assert cu.cuStreamGetPriority(handle, ctypes.byref(got)) == 0
    torch.cuda.set_stream(torch.cuda.ExternalStream(handle.value))
    prio = {"stream": got.value, "range": [least.value, greatest.value]}
gate = None
if os.environ.get("GS_GATE_FILE"):
    # gate_pair.py: every step first waits on the GPU (cuStreamWaitValue32, AND) for this worker's
    # bit in a word of a page the parent shares, so the CPU goes on queueing while the gate is shut.
    import ctypes, mmap
    cu = ctypes.CDLL("libcuda.so.1")
    page = mmap.mmap(os.open(os.environ["GS_GATE_FILE"], os.O_RDWR), 4096)
    addr = ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(page)))
    assert cu.cuMemHostRegister_v2(addr, ctypes.c_size_t(4096), ctypes.c_uint(2)) == 0  # DEVICEMAP
    word = ctypes.c_uint64()
    assert cu.cuMemHostGetDevicePointer_v2(ctypes.byref(word), addr, ctypes.c_uint(0)) == 0
    bit = ctypes.c_uint32(1 << int(os.environ["GS_GATE_BIT"]))
    def gate():
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        assert cu.cuStreamWaitValue32_v2(stream, word, bit, ctypes.c_uint(2)) == 0  # 2: AND
t_init = time.perf_counter()
for _ in range(20): step()
torch.cuda.synchronize()
print("ready", flush=True)
t0 = float(sys.stdin.readline())
while time.time() < t0: pass
per_sec = {}; lats = []
end = t0 + secs
sync_every = 1 if kind == "infer" else 4
n = 0
# GS_PROFILE_DIR: the GPU's kernels of this process from t0 + 3 s for 2 s (CUPTI through
# torch.profiler), written as a Chrome trace for pair_timeline.py.
prof_dir = os.environ.get("GS_PROFILE_DIR"); prof = None; prof_done = prof_dir is None
while True:
    if not prof_done:
        now = time.time()
        if prof is None and now >= t0 + 3:
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]); prof.start()
        elif prof is not None and now >= t0 + 5:
            prof.stop(); prof_done = True
    t = time.perf_counter()
    if gate: gate()
    step(); n += 1
    if n % sync_every == 0:
        torch.cuda.synchronize()
    now = time.time()
    if kind == "infer" and now - t0 >= 1.0: lats.append((time.perf_counter() - t) * 1e6)
    if now >= end: break
    if n % sync_every == 0:
        sec = int(now - t0)
        per_sec[sec] = per_sec.get(sec, 0) + sync_every
if prof is not None:
    if not prof_done: prof.stop()
    os.makedirs(prof_dir, exist_ok=True); prof.export_chrome_trace(f"{prof_dir}/{kind}-{os.getpid()}.json")
rates = [per_sec[s] for s in sorted(per_sec) if s >= 1 and s < int(secs)]
out = {"kind": kind, "rate": sum(rates) / max(1, len(rates)), "per_sec": rates}
if prio: out["prio"] = prio
if lats:
    lats.sort(); out["p50_us"] = lats[len(lats) // 2]; out["p99_us"] = lats[int(len(lats) * 0.99)]
print(json.dumps(out), flush=True)
'''

SAMPLE = [False]

def gpu_sampler():
    # Line-buffered: a pipe would hold nvidia-smi's lines until it exits, and it is terminated.
    return subprocess.Popen(["stdbuf", "-oL", "nvidia-smi", "--query-gpu=timestamp,utilization.gpu,clocks.sm,power.draw",
                             "--format=csv,noheader,nounits", "-lms", "100"], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

def gpu_summary(sampler, t0, secs):
    """Mean utilization %, SM MHz and W over [t0 + 1, t0 + secs) from the sampler's lines."""
    sampler.terminate(); out, _ = sampler.communicate()
    rows = []
    for line in out.splitlines():
        f = [x.strip() for x in line.split(",")]
        try:
            at = time.mktime(time.strptime(f[0].split(".")[0], "%Y/%m/%d %H:%M:%S")) + float("0." + f[0].split(".")[1])
            rows.append((at, float(f[1]), float(f[2]), float(f[3])))
        except (ValueError, IndexError):
            continue
    steady = [r for r in rows if t0 + 1 <= r[0] < t0 + secs]
    if not steady: return {"samples": 0, "seen": len(rows), "first": out.splitlines()[:2]}
    mean = lambda i: round(sum(r[i] for r in steady) / len(steady), 1)
    return {"util_pct": mean(1), "sm_mhz": mean(2), "power_w": mean(3), "samples": len(steady)}

class _ProcInfo(__import__("ctypes").Structure):
    import ctypes as _c
    _fields_ = [("pid", _c.c_uint), ("usedGpuMemory", _c.c_ulonglong), ("gpuInstanceId", _c.c_uint),
                ("computeInstanceId", _c.c_uint)]

def nvml_processes():
    """What NVML (outside any interposer) lists as compute processes on GPU 0: pid, name, MiB."""
    import ctypes
    lib = ctypes.CDLL("libnvidia-ml.so.1"); lib.nvmlInit_v2()
    dev = ctypes.c_void_p(); lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev))
    n = ctypes.c_uint(64); arr = (_ProcInfo * 64)()
    rc = lib.nvmlDeviceGetComputeRunningProcesses_v3(dev, ctypes.byref(n), arr)
    out = []
    for p in arr[: n.value] if rc == 0 else []:
        try: name = open(f"/proc/{p.pid}/comm").read().strip()
        except OSError: name = "?"
        mib = None if p.usedGpuMemory >= (1 << 63) else round(p.usedGpuMemory / 2**20)
        out.append({"pid": p.pid, "name": name, "mib": mib})
    return {"rc": rc, "procs": out}

def run(workers, secs, tag, probe=False):
    """workers: list of (kind, env-dict or None for native). Returns results."""
    procs = []
    for i, (kind, env) in enumerate(workers):
        e = dict(os.environ)
        if env: e.update(env)
        procs.append(subprocess.Popen([sys.executable, "-c", WORKER, kind, str(secs)], env=e, text=True,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    for p in procs:
        line = p.stdout.readline()
        if line.strip() != "ready":
            raise SystemExit(f"{tag}: worker failed: {line} {p.stderr.read()[-2000:]}")
    sampler = gpu_sampler() if SAMPLE[0] else None
    t0 = time.time() + 0.3
    for p in procs:
        p.stdin.write(f"{t0}\n"); p.stdin.flush()
    seen = None
    if probe:
        time.sleep(2)
        seen = nvml_processes(); seen["workers"] = [p.pid for p in procs]
    res = []
    for p in procs:
        out, err = p.communicate(timeout=secs + 120)
        lines = [l for l in out.splitlines() if l.startswith("{")]
        if p.returncode != 0 or not lines:
            raise SystemExit(f"{tag}: worker exit {p.returncode}: {err[-2000:]}")
        r = json.loads(lines[-1])
        stats = [l for l in err.splitlines() if l.startswith("gpushards compute")]
        if stats: r["stats"] = stats  # GPUSHARDS_COMPUTE_STATS=1
        res.append(r)
    if sampler is not None:
        gpu = gpu_summary(sampler, t0, secs)
        if gpu: res[0]["gpu"] = gpu
    if seen is not None: res[0]["nvml"] = seen
    return res

def ours(lib, ledger, shard, share=None, mode=None, extra=None):
    e = {"LD_PRELOAD": lib, "GPUSHARDS_LEDGER_DIR": ledger, "GPUSHARDS_SHARD_ID": shard,
         "GPUSHARDS_REGION_PATH": f"{ledger}/region-{shard}"}
    if share: e["GPUSHARDS_COMPUTE_SHARE"] = str(share)
    if mode: e["GPUSHARDS_COMPUTE_MODE"] = mode
    if extra: e.update(extra)
    return e

def gpu0_uuid():
    out = subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader", "-i", "0"], text=True,
                         capture_output=True, check=True).stdout.strip()
    return bytes.fromhex(out.removeprefix("GPU-").replace("-", ""))

def write_limits(path, share_permille, mode, mps_percent, limit_bytes=20 << 30):
    """The limits file the agent writes (native/vgpu/include/gpushards_limits.h), one GPU."""
    import struct
    header = struct.pack("<QIIQIIII", 0x31544D494C555047, 1, 128, 128 + 16 * 128, 16, 128, 1, 0)
    x = 0xcbf29ce484222325
    for b in header[:40]: x = ((x ^ b) * 0x100000001b3) & (2**64 - 1)
    header = (header + struct.pack("<Q", x)).ljust(128, b"\0")
    device = (gpu0_uuid() + struct.pack("<IIQQQQQIII", 1, 0, limit_bytes, 0, 0, 0, 0, share_permille, mode,
                                         mps_percent)).ljust(128, b"\0")
    with open(path, "wb") as f: f.write(header + device + b"\0" * 128 * 15)

def prod(lib, ledger, shard, share_percent, mode, mps_percent, extra=None):
    """A shard as the agent starts it on an MPS host: limits file, ledger, pipe folder (standing in
    for the mount); its own environment asks for 100 % and a wrong pipe folder."""
    limits = f"{ledger}/limits-{shard}"
    write_limits(limits, int(share_percent * 10), mode, mps_percent)
    return {"LD_PRELOAD": lib, "GPUSHARDS_LEDGER_DIR": ledger, "GPUSHARDS_SHARD_ID": shard,
            "GPUSHARDS_REGION_PATH": f"{ledger}/region-{shard}", "GPUSHARDS_LIMITS_PATH": limits,
            "GPUSHARDS_MPS_PIPE_PATH": MPS["CUDA_MPS_PIPE_DIRECTORY"],
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100", "CUDA_MPS_PIPE_DIRECTORY": "/nowhere", **(extra or {})}

MPS = {}
HIGH = {"GS_STREAM_PRIORITY": "high"}  # the worker's work on the greatest-priority stream

def mps(pct):
    return {**MPS, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(pct)}

def mps_start():
    d = f"/tmp/gs-mps-{os.getpid()}"
    MPS.update({"CUDA_MPS_PIPE_DIRECTORY": d + "/pipe", "CUDA_MPS_LOG_DIRECTORY": d + "/log"})
    for k in ("pipe", "log"): os.makedirs(f"{d}/{k}", exist_ok=True)
    subprocess.run(["nvidia-cuda-mps-control", "-d"], env={**os.environ, **MPS}, check=True)

def mps_stop():
    if MPS:
        subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True, env={**os.environ, **MPS})
        time.sleep(1)

def hami(lib, tag, i, sm):
    return {"LD_PRELOAD": lib, "CUDA_DEVICE_SM_LIMIT": str(sm), "CUDA_DEVICE_MEMORY_LIMIT": "16g",
            "CUDA_DEVICE_MEMORY_SHARED_CACHE": f"/tmp/hami-{tag}-{i}.cache"}

def main():
    args = sys.argv[1:]
    lib = os.path.abspath(args[0]); hlib = None; secs = 8.0; only = None; extra = {}; given = {}
    variants = []; use_mps = False
    i = 1
    while i < len(args):
        if args[i] == "--secs": secs = float(args[i + 1]); i += 2
        elif args[i] == "--only": only = set(args[i + 1].split(",")); i += 2
        elif args[i] == "--env": k, v = args[i + 1].split("=", 1); extra[k] = v; i += 2
        elif args[i] == "--gpu-sample": SAMPLE[0] = True; i += 1
        elif args[i] == "--variants":
            for part in args[i + 1].split(";"):
                name, _, kvs = part.partition(":")
                variants.append((name, dict(kv.split("=", 1) for kv in kvs.split(",") if kv)))
            i += 2
        elif args[i] == "--mps": use_mps = True; i += 1
        elif args[i] == "--solo":  # reuse solo rates measured earlier: mm=488,train=384.8
            for kv in args[i + 1].split(","): k, v = kv.split("="); given[k] = {"kind": k, "rate": float(v)}
            i += 2
        else: hlib = os.path.abspath(args[i]); i += 1
    solo = dict(given)
    def want(name): return only is None or name in only
    for k in ("mm", "train", "infer", "graph", "streams", "ew"):
        if k not in solo and (want("solo") or want("solo-" + k)):
            r = run([(k, None)], secs, "solo-" + k)[0]; solo[k] = r
            print(json.dumps({"case": "solo", **r}), flush=True)
    n = [0]
    def ledger():
        n[0] += 1; d = f"/dev/shm/gs-ledger-{os.getpid()}-{n[0]}"; shutil.rmtree(d, ignore_errors=True); os.makedirs(d); return d
    def report(case, res, targets=None):
        row = {"case": case}
        if "nvml" in res[0]: row["nvml"] = res[0]["nvml"]
        for j, r in enumerate(res):
            s = r["rate"] / solo[r["kind"]]["rate"] if r["kind"] in solo and solo[r["kind"]]["rate"] else None
            row[f"s{j}"] = {"kind": r["kind"], "share_of_solo": round(s, 3) if s is not None else None,
                            "target": targets[j] if targets else None,
                            **({"p50_us": round(r["p50_us"]), "p99_us": round(r["p99_us"])} if "p50_us" in r else {}),
                            **({"stats": r["stats"]} if "stats" in r else {}),
                            **({"prio": r["prio"]} if "prio" in r else {})}
        if res and "gpu" in res[0]: row["gpu"] = res[0]["gpu"]
        print(json.dumps(row), flush=True)
    cases = []
    for k in ("mm", "train"):
        cases.append((f"native-25/75-{k}", lambda L, k=k: [(k, None), (k, None)], None))
        cases.append((f"ours-25/75-{k}", lambda L, k=k: [(k, ours(lib, L, "a", 25, extra=extra)), (k, ours(lib, L, "b", 75, extra=extra))], [0.25, 0.75]))
    cases.append(("native-4x25-mm", lambda L: [("mm", None)] * 4, None))
    cases.append(("ours-4x25-mm", lambda L: [("mm", ours(lib, L, f"s{j}", 25, extra=extra)) for j in range(4)], [0.25] * 4))
    cases.append(("ours-alone-guaranteed-25", lambda L: [("mm", ours(lib, L, "a", 25, "guaranteed", extra=extra))], [1.0]))
    cases.append(("ours-alone-capped-25", lambda L: [("mm", ours(lib, L, "a", 25, "capped", extra=extra))], [0.25]))
    # Alone, but bound as if contended (capped binds always; at 100 % its cap never waits): what
    # the in-flight bound costs a training step by itself.
    cases.append(("ours-alone-train-capped-100", lambda L: [("train", ours(lib, L, "a", 100, "capped", extra=extra))], [1.0]))
    cases.append(("ours-alone-train-noshare", lambda L: [("train", ours(lib, L, "a", extra=extra))], [1.0]))
    cases.append(("native-infer+mm", lambda L: [("infer", None), ("mm", None)], None))
    cases.append(("ours-infer50+mm50", lambda L: [("infer", ours(lib, L, "i", 50, extra=extra)), ("mm", ours(lib, L, "m", 50, extra=extra))], [0.5, 0.5]))
    # "-prio": the inference (or named) shard issues its work on the greatest-priority stream.
    cases.append(("native-infer-prio+mm", lambda L: [("infer", HIGH), ("mm", None)], None))
    cases.append(("ours-infer50-prio+mm50", lambda L: [("infer", ours(lib, L, "i", 50, extra={**extra, **HIGH})), ("mm", ours(lib, L, "m", 50, extra=extra))], [0.5, 0.5]))
    cases.append(("ours-25/75-graph", lambda L: [("graph", ours(lib, L, "a", 25, extra=extra)), ("graph", ours(lib, L, "b", 75, extra=extra))], [0.25, 0.75]))
    cases.append(("ours-25/75-streams", lambda L: [("streams", ours(lib, L, "a", 25, extra=extra)), ("streams", ours(lib, L, "b", 75, extra=extra))], [0.25, 0.75]))
    if hlib:
        cases.append(("hami-25/75-mm", lambda L: [("mm", hami(hlib, "a", 0, 25)), ("mm", hami(hlib, "b", 1, 75))], [0.25, 0.75]))
        cases.append(("hami-25/75-train", lambda L: [("train", hami(hlib, "c", 0, 25)), ("train", hami(hlib, "d", 1, 75))], [0.25, 0.75]))
        cases.append(("hami-4x25-mm", lambda L: [("mm", hami(hlib, "e", j, 25)) for j in range(4)], [0.25] * 4))
        cases.append(("hami-alone-25", lambda L: [("mm", hami(hlib, "f", 0, 25))], [0.25]))
        cases.append(("hami-infer50+mm50", lambda L: [("infer", hami(hlib, "g", 0, 50)), ("mm", hami(hlib, "g", 1, 50))], [0.5, 0.5]))
    if use_mps:
        cases.append(("mps-25/75-mm", lambda L: [("mm", mps(25)), ("mm", mps(75))], [0.25, 0.75]))
        cases.append(("mps-25/75-train", lambda L: [("train", mps(25)), ("train", mps(75))], [0.25, 0.75]))
        cases.append(("mps-4x25-mm", lambda L: [("mm", mps(25)) for j in range(4)], [0.25] * 4))
        cases.append(("mps-alone-25", lambda L: [("mm", mps(25))], [0.25]))
        cases.append(("mps-alone-train-100", lambda L: [("train", mps(100))], [1.0]))
        cases.append(("mps-infer50+mm50", lambda L: [("infer", mps(50)), ("mm", mps(50))], [0.5, 0.5]))
        cases.append(("mps-infer100+mm100", lambda L: [("infer", mps(100)), ("mm", mps(100))], None))
        cases.append(("mps-alone-infer", lambda L: [("infer", mps(100))], None))
        cases.append(("mps-infer100+ew100", lambda L: [("infer", mps(100)), ("ew", mps(100))], None))
        cases.append(("mps-infer100-prio+ew100", lambda L: [("infer", {**mps(100), **HIGH}), ("ew", mps(100))], None))
        cases.append(("mps-infer100-prio+mm100", lambda L: [("infer", {**mps(100), **HIGH}), ("mm", mps(100))], None))
        cases.append(("mps-infer50-prio+mm50", lambda L: [("infer", {**mps(50), **HIGH}), ("mm", mps(50))], [0.5, 0.5]))
        cases.append(("mps-25/75-train-prio25", lambda L: [("train", {**mps(25), **HIGH}), ("train", mps(75))], [0.25, 0.75]))
        cases.append(("mps-25/75-train-prio75", lambda L: [("train", mps(25)), ("train", {**mps(75), **HIGH})], [0.25, 0.75]))
        cases.append(("mps-25/75-graph", lambda L: [("graph", mps(25)), ("graph", mps(75))], [0.25, 0.75]))
        # A latency shard in an MPS partition of its own (P = 50 % of the SMs, libvgpu.so loaded
        # but outside the ledger: no turns), every other shard an MPS client at 100 - P taking
        # libvgpu.so's turns inside the rest (docs/compute.md, "Known gaps": the design next).
        iso = lambda: {"LD_PRELOAD": lib, **mps(50)}
        rest = lambda L, t, share: ours(lib, L, t, share, extra={**extra, **mps(50)})
        cases.append(("part-alone-infer", lambda L: [("infer", iso())], None))
        cases.append(("part-alone-mm", lambda L: [("mm", rest(L, "m", 50))], None))
        cases.append(("part-infer+mm", lambda L: [("infer", iso()), ("mm", rest(L, "m", 50))], [None, 0.5]))
        cases.append(("part-infer+mm+mm", lambda L: [("infer", iso()), ("mm", rest(L, "a", 25)), ("mm", rest(L, "b", 25))], [None, 0.25, 0.25]))
        cases.append(("part-infer+train+train", lambda L: [("infer", iso()), ("train", rest(L, "a", 25)), ("train", rest(L, "b", 25))], [None, 0.25, 0.25]))
        cases.append(("part-infer+graph+mm", lambda L: [("infer", iso()), ("graph", rest(L, "a", 25)), ("mm", rest(L, "b", 25))], [None, 0.25, 0.25]))
        cases.append(("part-infer+graph+graph", lambda L: [("infer", iso()), ("graph", rest(L, "a", 25)), ("graph", rest(L, "b", 25))], [None, 0.25, 0.25]))
        # Each of the rest's two shards confined to half the rest (25 % of the SMs): were the
        # rest's clients running at once, together they could not reach the latency shard's SMs.
        quarter = lambda L, t, share: ours(lib, L, t, share, extra={**extra, **mps(25)})
        cases.append(("part-infer+graph+graph@25", lambda L: [("infer", iso()), ("graph", quarter(L, "a", 25)), ("graph", quarter(L, "b", 25))], [None, 0.25, 0.25]))
        cases.append(("part-infer+mm+mm@25", lambda L: [("infer", iso()), ("mm", quarter(L, "a", 25)), ("mm", quarter(L, "b", 25))], [None, 0.25, 0.25]))
        # The rest split 25/75 between two training shards (12.5 % and 37.5 % of the GPU).
        cases.append(("part-infer+train13+train37", lambda L: [("infer", iso()), ("train", rest(L, "a", 13)), ("train", rest(L, "b", 37))], [None, 0.125, 0.375]))
        # The same partition as the product sets it up (docs/compute.md, "Isolated shards"): each
        # shard's limits file, as the agent writes it, carries its mode, share and MPS percentage;
        # libvgpu.so makes it that MPS client at cuInit. Every worker's own environment asks for
        # 100 % and a wrong pipe folder (a tenant lifting its limit), which libvgpu.so overrides.
        prod_iso = lambda L, t, share: prod(lib, L, t, share, 3, share)
        prod_rest = lambda L, t, share: prod(lib, L, t, share, 1, 50)
        cases.append(("prod-infer+mm+mm", lambda L: [("infer", prod_iso(L, "i", 50)), ("mm", prod_rest(L, "a", 25)), ("mm", prod_rest(L, "b", 25))], [None, 0.25, 0.25]))
        cases.append(("prod-infer+train13+train37", lambda L: [("infer", prod_iso(L, "i", 50)), ("train", prod_rest(L, "a", 12.5)), ("train", prod_rest(L, "b", 37.5))], [None, 0.125, 0.375]))
        cases.append(("prod-infer+graph+mm", lambda L: [("infer", prod_iso(L, "i", 50)), ("graph", prod_rest(L, "a", 25)), ("mm", prod_rest(L, "b", 25))], [None, 0.25, 0.25]))
        cases.append(("prod-infer+graph+graph", lambda L: [("infer", prod_iso(L, "i", 50)), ("graph", prod_rest(L, "a", 25)), ("graph", prod_rest(L, "b", 25))], [None, 0.25, 0.25]))
        cases.append(("prod-alone-infer", lambda L: [("infer", prod(lib, L, "i", 50, 3, 50))], None))
        cases.append(("prod-alone-mm-rest", lambda L: [("mm", prod(lib, L, "m", 50, 1, 50))], None))
        cases.append(("mps-alone-mm-100", lambda L: [("mm", mps(100))], None))
    # A variant with MPS=<percent> runs its "ours" cases as MPS clients (libvgpu.so as well).
    def run_ours(name, mk, targets, vname, venv):
        base = dict(extra); venv = dict(venv)
        if "MPS" in venv: venv.update(mps(venv.pop("MPS")))
        extra.update(venv)
        try: report(f"{name}@{vname}", run(mk(ledger()), secs, name, probe="CUDA_MPS_PIPE_DIRECTORY" in venv), targets)
        finally: extra.clear(); extra.update(base)
    deferred = []
    for name, mk, targets in cases:
        if not want(name) or name.startswith(("mps-", "part-", "prod-")): continue
        if name.startswith("ours-") and variants:
            for vname, venv in variants:
                if "MPS" in venv: deferred.append((name, mk, targets, vname, venv))
                else: run_ours(name, mk, targets, vname, venv)
        else:
            report(name, run(mk(ledger()), secs, name, probe=name == "native-infer+mm"), targets)
    mcases = [c for c in cases if c[0].startswith(("mps-", "part-", "prod-")) and want(c[0])]
    if mcases or deferred:
        mps_start()
        try:
            for d in deferred: run_ours(*d)
            for name, mk, targets in mcases:
                report(name, run(mk(ledger() if name.startswith(("part-", "prod-")) else None), secs, name, probe=True), targets)
        finally:
            mps_stop()

if __name__ == "__main__":
    main()
