"""Does a stream priority shorten the inference step beside a saturating matmul IN ONE PROCESS
(one context, where the hardware honours priorities between streams), and what the two
workloads' kernels look like (grid, block, duration). The control for compute_bench.py's
"-prio" cases, where the two sit in different processes (MPS clients).

  python3 stream_priority_probe.py [--secs N] [--neighbour mm|ew]    JSON lines, then a table

The same inference step, matmul (mm) and elementwise pass (ew) as compute_bench.py's workers.
A thread issues the neighbour on a least-priority stream, ten at a time, waiting on an event
after each ten (so its queue stays short and it holds the GIL only while launching); the main
thread times inference steps on a stream of the case's priority, synchronising that stream alone.
"""
import json, sys, threading, time, torch

secs = float(sys.argv[sys.argv.index("--secs") + 1]) if "--secs" in sys.argv else 5.0
neighbour = sys.argv[sys.argv.index("--neighbour") + 1] if "--neighbour" in sys.argv else "mm"
dev = "cuda"
a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16); b = torch.randn_like(a)
t_ew = torch.randn(256 << 20, device=dev, dtype=torch.bfloat16) if neighbour == "ew" else None
model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(3)]).to(dev, torch.bfloat16).eval()
x = torch.randn(8, 2048, device=dev, dtype=torch.bfloat16)
torch.cuda.synchronize()
import ctypes
_least, _greatest = ctypes.c_int(), ctypes.c_int()  # the driver's range (PyTorch's stops at -3)
assert ctypes.CDLL("libcuda.so.1").cuCtxGetStreamPriorityRange(ctypes.byref(_least), ctypes.byref(_greatest)) == 0
least, greatest = _least.value, _greatest.value


def stream(priority):
    # PyTorch's own pool stops at -3; the driver's own stream goes to the card's greatest.
    import ctypes
    cu = ctypes.CDLL("libcuda.so.1"); h = ctypes.c_void_p()
    assert cu.cuStreamCreateWithPriority(ctypes.byref(h), 1, ctypes.c_int(priority)) == 0
    return torch.cuda.ExternalStream(h.value)


def kernels():
    """Names, grids, blocks and durations of one matmul's and one inference step's kernels."""
    from torch.profiler import profile, ProfilerActivity
    import tempfile, os
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.mm(a, b)
        if t_ew is not None: t_ew.mul_(1.0001)
        with torch.no_grad(): model(x)
        torch.cuda.synchronize()
    path = os.path.join(tempfile.mkdtemp(), "trace.json"); prof.export_chrome_trace(path)
    out = []
    for e in json.load(open(path))["traceEvents"]:
        if e.get("cat") == "kernel":
            args = e.get("args", {})
            out.append({"name": e["name"][:90], "grid": args.get("grid"), "block": args.get("block"),
                        "us": round(e.get("dur", 0), 1), "regs": args.get("registers per thread"),
                        "smem": args.get("shared memory")})
    return out


def case(name, infer_priority, with_mm):
    stop = threading.Event(); mm_done = [0]
    ms = stream(least)  # made here: the driver call needs this thread's current context
    def matmul():
        torch.cuda.set_device(0); ev = torch.cuda.Event()
        with torch.cuda.stream(ms):
            while not stop.is_set():
                for _ in range(10):
                    if t_ew is None: torch.mm(a, b)
                    else: t_ew.mul_(1.0001)
                ev.record(ms); ev.synchronize(); mm_done[0] += 10
    t = threading.Thread(target=matmul) if with_mm else None
    s = stream(infer_priority)
    with torch.cuda.stream(s):
        for _ in range(20):
            with torch.no_grad(): model(x)
        s.synchronize()
        if t: t.start(); time.sleep(0.5)
        lats = []; t0 = time.perf_counter(); mm0 = mm_done[0]
        while time.perf_counter() - t0 < secs:
            t1 = time.perf_counter()
            with torch.no_grad(): model(x)
            s.synchronize()
            lats.append((time.perf_counter() - t1) * 1e6)
        elapsed = time.perf_counter() - t0; mm_rate = (mm_done[0] - mm0) / 10 / elapsed
    stop.set()
    if t: t.join()
    torch.cuda.synchronize()
    lats.sort()
    row = {"case": name, "infer_priority": infer_priority, "mm_priority": least if with_mm else None,
           "steps": len(lats), "p50_us": round(lats[len(lats) // 2]), "p99_us": round(lats[int(len(lats) * 0.99)]),
           "mm_steps_per_s": round(mm_rate, 1) if with_mm else None}
    print(json.dumps(row), flush=True)
    return row


try: seen = kernels()
except Exception as error: seen = f"profiler failed: {error!r}"
print(json.dumps({"priority_range": [least, greatest], "kernels": seen}), flush=True)
n = neighbour
rows = [case("alone", least, False), case(f"beside-{n}, same priority", least, True),
        case(f"beside-{n}, infer greatest", greatest, True), case(f"beside-{n}, same priority (again)", least, True),
        case(f"beside-{n}, infer greatest (again)", greatest, True)]
print(f"one process, {n} thread on a least-priority stream (10 kernels a step):")
for r in rows:
    mm = f"{n} {r['mm_steps_per_s']} steps/s" if r["mm_steps_per_s"] else ""
    print(f"  {r['case']:<36} infer prio {r['infer_priority']:>2}: p50/p99 {r['p50_us']}/{r['p99_us']} us {mm}")
