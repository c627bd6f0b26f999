"""What one CUDA context costs in GPU memory with and without MPS (docs/agent.md, "Context size").

  python3 mps_context.py > table

The agent measures a context at start the way `measure()` below does (apps/agent/src/gpus/cuda.ts:
retain the primary context of GPU 0, NVML's used bytes before and after) and charges each shard's
processes that much. Under MPS the first client also starts the MPS server, and a client's context
may live partly in the server. For plain contexts and MPS clients in turn this starts holders one
after another (each retains a primary context, or runs a PyTorch tensor op, and waits), and reads
from outside after each: the card's used bytes (NVML), each process's own figure and the server's.
Prints one JSON line per step; the MPS daemon is told to quit at the end.
"""
import json, os, subprocess, sys, time

import compute_bench as cb
from nvml_probe import Nvml

HOLDER = {
    # What the agent does: the primary context only (driver API, no runtime, no allocation).
    "ctx": r'''
import ctypes, sys
cu = ctypes.CDLL("libcuda.so.1")
assert cu.cuInit(0) == 0
dev = ctypes.c_int(); assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
ctx = ctypes.c_void_p(); rc = cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
assert rc == 0, rc
assert cu.cuCtxSetCurrent(ctx) == 0
free, total = ctypes.c_size_t(), ctypes.c_size_t(); assert cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0
print("ready", flush=True); sys.stdin.readline()
''',
    # A PyTorch process after its first kernel (the runtime, cuBLAS not loaded).
    "torch": r'''
import sys, torch
x = torch.ones(1, device="cuda") + 1; torch.cuda.synchronize()
print("ready", flush=True); sys.stdin.readline()
''',
}


def mib(b):
    return round(b / 2**20, 1)


def settle(nvml):
    """The card's used bytes once they stop moving (a starting server allocates in steps)."""
    last = nvml.used_bytes()
    for _ in range(20):
        time.sleep(0.05)
        now = nvml.used_bytes()
        if now == last:
            return now
        last = now
    return last


def series(nvml, kind, env, label, count=3):
    holders = []
    base = settle(nvml)
    print(json.dumps({"series": label, "kind": kind, "baseline_mib": mib(base)}), flush=True)
    prev = base
    try:
        for i in range(count):
            p = subprocess.Popen([sys.executable, "-c", HOLDER[kind]], env={**os.environ, **env}, text=True,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            holders.append(p)
            line = p.stdout.readline().strip()
            if line != "ready":
                print(json.dumps({"series": label, "kind": kind, "holder": i + 1, "error": f"holder said {line!r}",
                                  "rc": p.poll()}), flush=True)
                return
            used = settle(nvml)
            procs = cb.nvml_processes()["procs"]
            mine = {h.pid for h in holders}
            print(json.dumps({
                "series": label, "kind": kind, "holder": i + 1,
                "card_delta_mib": mib(used - prev), "card_total_delta_mib": mib(used - base),
                "holders_own_mib": [q["mib"] for q in procs if q["pid"] in mine],
                "others": [(q["name"], q["mib"]) for q in procs if q["pid"] not in mine],
            }), flush=True)
            prev = used
    finally:
        for p in holders:
            try:
                p.stdin.write("\n"); p.stdin.flush()
            except OSError:
                pass
            p.wait(timeout=30)


def main():
    nvml = Nvml(0)
    for kind in ("ctx", "torch"):
        series(nvml, kind, {}, "plain")
    cb.mps_start()
    try:
        for kind in ("ctx", "torch"):
            series(nvml, kind, cb.mps(100), "mps")
        # The server stays up between series while a client of it lives; measure a fresh one too.
        subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True, env={**os.environ, **cb.MPS})
        time.sleep(1)
        subprocess.run(["nvidia-cuda-mps-control", "-d"], env={**os.environ, **cb.MPS}, check=True)
        series(nvml, "ctx", cb.mps(100), "mps, fresh daemon", count=1)
        series(nvml, "ctx", cb.mps(30), "mps at 30 %")
    finally:
        cb.mps_stop()
    left = [q for q in cb.nvml_processes()["procs"]]
    print(json.dumps({"left_on_gpu": left}), flush=True)


if __name__ == "__main__":
    main()
