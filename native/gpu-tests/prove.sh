#!/usr/bin/env bash
# The seven ways past the cap (issue 11) on a real GPU: bash native/gpu-tests/prove.sh [OUT_DIR]
# Builds libvgpu.so and cap_ways.cu, then runs prove.py (a 4 GiB shard per case, an NVML watcher
# standing in for the agent). Prints one JSON line per case and the kill latency; writes prove.json.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/native/gpu-tests"
out="${1:-${OUT:-$root/gpu-results}}"
mkdir -p "$out"
date -u +%Y-%m-%dT%H:%MZ
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
cmake -S "$root/native" -B /tmp/gpushards-native -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build /tmp/gpushards-native -j"$(nproc)" --target vgpu >/dev/null
library="$(find /tmp/gpushards-native -name libvgpu.so -type f | sed -n 1p)"
nvcc -O2 -arch=sm_90 -o /tmp/cap_ways "$here/cap_ways.cu"
python3 "$here/prove.py" "$library" /tmp/cap_ways "$out/prove.json"
