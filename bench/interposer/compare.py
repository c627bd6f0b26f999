"""Runs each interposer benchmark natively and interposed and prints the table for bench/README.md.

Native and interposed runs alternate (ROUNDS of each), and each figure is the median over rounds,
so GPU clock drift and warm-up order cannot favour either side.

  python3 compare.py /path/to/libvgpu.so BUILD_DIR
BUILD_DIR holds alloc_pairs and init_only, built by run.sh.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

library, build = os.path.abspath(sys.argv[1]), sys.argv[2]
here = os.path.dirname(os.path.abspath(__file__))
region_dir = tempfile.mkdtemp(prefix="gpushards-bench-")


def env_for(interposed, extra=None, name="bench"):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if interposed:
        env.update(LD_PRELOAD=library, CUDA_DEVICE_MEMORY_LIMIT="64g",
                   GPUSHARDS_REGION_PATH=os.path.join(region_dir, name))
    env.update(extra or {})
    return env


def json_lines(args, env):
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


ROUNDS = 3
rows = []


def alternating(run_native, run_interposed):
    """Medians of ROUNDS alternating runs of each side."""
    natives, interposeds = [], []
    for _ in range(ROUNDS):
        natives.append(run_native())
        interposeds.append(run_interposed())
    return natives, interposeds


def alloc_run(interposed):
    lines = json_lines([f"{build}/alloc_pairs"], env_for(interposed, name="alloc"))
    return {r["size"]: r["ns_per_pair"] for r in lines}


native_runs, shard_runs = alternating(lambda: alloc_run(False), lambda: alloc_run(True))
native = {size: statistics.median(run[size] for run in native_runs) for size in native_runs[0]}
shard = {size: statistics.median(run[size] for run in shard_runs) for size in shard_runs[0]}
for size in sorted(native):
    label = f"{size >> 10} KiB" if size < (1 << 20) else f"{size >> 20} MiB"
    rows.append((f"cuMemAlloc+cuMemFree {label}", f"{native[size] / 1000:.2f} µs", f"{shard[size] / 1000:.2f} µs",
                 f"{shard[size] / native[size]:.3f}"))


def process_ms(interposed, runs=30):
    samples = []
    for i in range(runs):
        start = time.perf_counter()
        subprocess.run([f"{build}/init_only"], env=env_for(interposed, name=f"init-{i}"), check=True)
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


process_ms(False, 3)
init_natives, init_shards = alternating(lambda: process_ms(False, 10), lambda: process_ms(True, 10))
init_native, init_shard = statistics.median(init_natives), statistics.median(init_shards)
rows.append(("process start + cuInit + context (median of 3 × 10)", f"{init_native:.1f} ms", f"{init_shard:.1f} ms",
             f"+{init_shard - init_native:.2f} ms"))

for label, extra in (("training step, bf16 transformer", {}),
                     ("training step, PYTORCH_NO_CUDA_MEMORY_CACHING=1", {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"})):
    script = [sys.executable, os.path.join(here, "train_step.py")]
    name = label.replace(" ", "-").replace("=", "-")
    bases, shards = alternating(lambda: json_lines(script, env_for(False, extra))[0]["ms_per_step"],
                                lambda: json_lines(script, env_for(True, extra, name=name))[0]["ms_per_step"])
    base, interposed = statistics.median(bases), statistics.median(shards)
    rows.append((label, f"{base:.2f} ms", f"{interposed:.2f} ms", f"{base / interposed:.3f} of native speed"))

print("| benchmark | native | interposed | ratio |\n| --- | --- | --- | --- |")
for row in rows:
    print("| " + " | ".join(row) + " |")
