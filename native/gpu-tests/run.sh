#!/usr/bin/env bash
# Real-GPU checks of libvgpu.so (run on a machine with an NVIDIA GPU, CUDA toolkit and PyTorch):
#   bash native/gpu-tests/run.sh [--prove] [--bench]
# Builds libvgpu.so from native/, builds the CUDA C test, runs check_caps.py (table + pass/fail),
# with --prove the seven ways past the cap of issue 11 (prove.sh: a 4 GiB shard per case, an NVML
# watcher standing in for the agent), and with --bench also bench/interposer. Results land in
# $OUT (or ./gpu-results) when set.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/native/gpu-tests"
out="${OUT:-$root/gpu-results}"
mkdir -p "$out"

echo "== machine"
date -u +%Y-%m-%dT%H:%MZ
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
nvcc --version | tail -1
python3 -c 'import torch, cupy; print("torch", torch.__version__, "cupy", cupy.__version__)'
ldd --version | sed -n 1p

echo "== build libvgpu.so"
cmake -S "$root/native" -B /tmp/gpushards-native -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build /tmp/gpushards-native -j"$(nproc)" >/dev/null
library="$(find /tmp/gpushards-native -name libvgpu.so -type f | sed -n 1p)"
echo "$library"
objdump -T "$library" | grep -o 'GLIBC_[0-9.]*' | sort -uV | sed -n "\$p"

echo "== build the CUDA C test"
nvcc -O2 -o "$here/cap_paths" "$here/cap_paths.cu" -lcuda

echo "== cap checks"
status=0
(cd "$here" && python3 check_caps.py "$library" "$out/gpu-checks.json") 2>&1 | tee "$out/gpu-checks.txt" || status=1

if [ "${1:-}" = "--prove" ] || [ "${2:-}" = "--prove" ]; then
  echo "== the seven ways past the cap"
  bash "$here/prove.sh" "$out" 2>&1 | tee "$out/prove.txt" || status=1
fi

if [ "${1:-}" = "--bench" ] || [ "${2:-}" = "--bench" ]; then
  echo "== benchmarks"
  bash "$root/bench/interposer/run.sh" "$library" 2>&1 | tee "$out/bench.txt" || status=1
fi
exit $status
