"""Cap checks on a real GPU: python3 check_caps.py /path/to/libvgpu.so [results.json]

Runs every workload inside a 4 GiB shard (LD_PRELOAD=libvgpu.so, CUDA_DEVICE_MEMORY_LIMIT=4g),
watches the card from outside through NVML, and prints one table row per check. Exits non-zero
if any check fails. Criteria (issue: "Tests on a real GPU"):
  - the shard's total as the framework sees it is exactly the cap;
  - allocating until failure reaches >= 97% of (cap - charged context) and ends in the
    framework's own out-of-memory error;
  - the card never holds more for the shard than the cap plus the error of the charged context
    size (real context - charged context), both of which are reported.
"""

import json
import os
import subprocess
import sys
import tempfile

from nvml_probe import Nvml, PeakMonitor

GIB = 1 << 30
MIB = 1 << 20
CAP = 4 * GIB
HERE = os.path.dirname(os.path.abspath(__file__))


def run_json(args, env, stdin=None):
    result = subprocess.run(args, env=env, capture_output=True, text=True, input=stdin, cwd=HERE)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        raise RuntimeError(f"{args} exited {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr[-3000:]}")
    return json.loads(lines[-1])


def shard_env(library, region, charged, extra=None):
    env = dict(os.environ)
    env.update(
        LD_PRELOAD=library,
        CUDA_DEVICE_MEMORY_LIMIT="4g",
        GPUSHARDS_REGION_PATH=region,
        GPUSHARDS_CONTEXT_BYTES=str(charged),
    )
    env.update(extra or {})
    return env


def main():
    library = os.path.abspath(sys.argv[1])
    results_path = sys.argv[2] if len(sys.argv) > 2 else None
    nvml = Nvml()
    rows, failures = [], 0
    work = tempfile.mkdtemp(prefix="gpushards-gpu-tests-")

    context = run_json([sys.executable, "workloads.py", "context"], dict(os.environ))
    charged = context["bare_context"]
    print(f"context: bare {charged / MIB:.0f} MiB (charged), with PyTorch kernels {context['torch_context'] / MIB:.0f} MiB")

    def record(name, ok, **numbers):
        nonlocal failures
        failures += 0 if ok else 1
        rows.append({"check": name, "ok": ok, **numbers})
        print(("PASS " if ok else "FAIL ") + name + " " + json.dumps(numbers), flush=True)

    cases = [
        ("torch caching allocator", ["workloads.py", "torch"], {}),
        ("torch expandable_segments (VMM)", ["workloads.py", "torch"], {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
        ("torch cudaMallocAsync backend", ["workloads.py", "torch"], {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}),
        ("cupy default pool", ["workloads.py", "cupy"], {}),
        ("CUDA C cudaMalloc", ["./cap_paths", "malloc"], {}),
        ("CUDA C cudaMallocAsync", ["./cap_paths", "async"], {}),
        ("CUDA C cuMemCreate", ["./cap_paths", "vmm"], {}),
    ]
    for index, (name, args, extra) in enumerate(cases):
        command = [sys.executable, *args] if args[0].endswith(".py") else args
        env = shard_env(library, os.path.join(work, f"region-{index}"), charged, extra)
        with PeakMonitor(nvml) as monitor:
            out = run_json(command, env)
        peak = monitor.peak_above_baseline()
        usable = out["allocated"] / (CAP - charged)
        # What the process really held beyond its allocations: its context as the card saw it.
        real_context = peak - out.get("reserved", out["allocated"])
        context_error = max(0, real_context - charged)
        overshoot = peak - CAP
        refused = out.get("raised") in ("OutOfMemoryError",) or out.get("refusal") == 2
        ok = (
            out["total"] == CAP
            and refused
            and usable >= 0.97
            and overshoot <= context_error + 2 * MIB
        )
        record(
            name,
            ok,
            total_mib=out["total"] // MIB,
            usable_pct=round(100 * usable, 2),
            peak_mib=round(peak / MIB, 1),
            overshoot_mib=round(overshoot / MIB, 1),
            charged_ctx_mib=round(charged / MIB, 1),
            real_ctx_mib=round(real_context / MIB, 1),
            refusal=out.get("raised") or out.get("refusal"),
        )

    # Two processes on one region share one budget.
    region = os.path.join(work, "region-shared")
    holder = subprocess.Popen(
        [sys.executable, "workloads.py", "hold", str(2 * GIB)],
        env=shard_env(library, region, charged),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=HERE,
    )
    held = json.loads(holder.stdout.readline())
    with PeakMonitor(nvml) as monitor:
        second = run_json([sys.executable, "workloads.py", "torch"], shard_env(library, region, charged))
    holder.stdin.close()
    holder.wait()
    together = held["held"] + second["allocated"] + 2 * charged
    expected = CAP - held["held"] - 2 * charged
    ok = together <= CAP and second["allocated"] >= 0.97 * expected and second["raised"] == "OutOfMemoryError"
    record(
        "two processes share one 4 GiB budget",
        ok,
        first_held_mib=held["held"] // MIB,
        second_reached_mib=second["allocated"] // MIB,
        second_expected_mib=expected // MIB,
        charged_together_mib=together // MIB,
        second_saw_free_mib=second["free_before"] // MIB,
    )

    # nvidia-smi reads NVML through dlopen/dlsym: the interposer must answer there too.
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.total,memory.used", "--format=csv,noheader,nounits"],
        env=shard_env(library, os.path.join(work, "region-smi"), charged),
        capture_output=True,
        text=True,
    )
    reported_total = smi.stdout.strip().split(",")[0].strip() if smi.returncode == 0 else smi.stderr.strip()
    record("nvidia-smi shows the shard's total", reported_total == "4096", reported_total_mib=reported_total)

    width = max(len(r["check"]) for r in rows)
    print("\n| check | result | numbers |\n| --- | --- | --- |")
    for r in rows:
        numbers = ", ".join(f"{k}={v}" for k, v in r.items() if k not in ("check", "ok"))
        print(f"| {r['check']:<{width}} | {'pass' if r['ok'] else 'FAIL'} | {numbers} |")
    if results_path:
        with open(results_path, "w") as f:
            json.dump({"context": context, "rows": rows}, f, indent=2)
    print(f"{len(rows) - failures} passed, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
