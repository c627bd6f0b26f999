#!/usr/bin/env bash
# Interposer benchmarks on a machine with a GPU: bash bench/interposer/run.sh path/to/libvgpu.so
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
library="$1"
build="$(mktemp -d)"
cuda="${CUDA_HOME:-/usr/local/cuda}"
for program in alloc_pairs init_only; do
  gcc -O2 -o "$build/$program" "$here/$program.c" -I"$cuda/include" -L"$cuda/lib64/stubs" -lcuda
done
python3 "$here/compare.py" "$library" "$build"
