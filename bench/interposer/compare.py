"""Runs each interposer benchmark natively and interposed and prints the table for bench/README.md.

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


rows = []

native = {r["size"]: r["ns_per_pair"] for r in json_lines([f"{build}/alloc_pairs"], env_for(False))}
shard = {r["size"]: r["ns_per_pair"] for r in json_lines([f"{build}/alloc_pairs"], env_for(True, name="alloc"))}
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
init_native, init_shard = process_ms(False), process_ms(True)
rows.append(("process start + cuInit + context (median of 30)", f"{init_native:.1f} ms", f"{init_shard:.1f} ms",
             f"+{init_shard - init_native:.2f} ms"))

for label, extra in (("training step, bf16 transformer", {}),
                     ("training step, PYTORCH_NO_CUDA_MEMORY_CACHING=1", {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"})):
    script = [sys.executable, os.path.join(here, "train_step.py")]
    base = json_lines(script, env_for(False, extra))[0]["ms_per_step"]
    interposed = json_lines(script, env_for(True, extra, name=label.replace(" ", "-")))[0]["ms_per_step"]
    rows.append((label, f"{base:.2f} ms", f"{interposed:.2f} ms", f"{base / interposed:.3f} of native speed"))

print("| benchmark | native | interposed | ratio |\n| --- | --- | --- | --- |")
for row in rows:
    print("| " + " | ".join(row) + " |")
