#!/usr/bin/env bash
# Elastic memory (issue #30) and a neighbour's pressure (issue #31) on one real GPU, one command
# (results in RESULTS.md):
#   bash native/gpu-tests/elastic.sh [STEP ...]      steps: machine build elastic neighbour
# Needs PyTorch with CUDA, a C compiler and CMake, Node.js 20+ and a built agent (stage_carry.sh
# packs Node and the agent for a machine without them). Extra arguments for a step's script go
# in ELASTIC_ARGS / NEIGHBOUR_ARGS. Writes $OUT/elastic.log and $OUT/results.jsonl and prints
# each script's table last. ELASTIC_TIMEOUT (450 s) and NEIGHBOUR_TIMEOUT (300 s) bound the two
# steps; together they pass a 10-minute call, so a device machine runs them as two calls:
#   bash DEST/run.sh elastic.sh machine build elastic;  bash DEST/run.sh elastic.sh build neighbour
# (DEST: stage_carry.sh's folder, carried at the top of the checkout).
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/native/gpu-tests"
out="${OUT:-$root/gpu-results}"
mkdir -p "$out"
exec > >(tee -a "$out/elastic.log") 2>&1
results="$out/results.jsonl"
export PYTHONUNBUFFERED=1
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(machine build elastic neighbour)
lib=/tmp/gpushards-native/libvgpu.so
# After a step: whatever a run stopped by its time limit left in its cgroups is killed (the
# scripts kill their own on SIGTERM; this covers a SIGKILL), and the card's memory in use shown.
leftovers() {
  local kill
  for kill in /sys/fs/cgroup/gpushards-elastic-bench/*/cgroup.kill /sys/fs/cgroup/gpushards-neighbour-bench/*/cgroup.kill; do
    [ -e "$kill" ] && echo 1 >"$kill"
  done
  nvidia-smi --query-gpu=memory.used --format=csv,noheader | sed 's/^/card memory in use after the step: /'
}
for s in "${steps[@]}"; do
  echo "== $s ($(date -u +%H:%M:%SZ), ${SECONDS} s in)"
  case "$s" in
  machine)
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used --format=csv,noheader
    python3 -c 'import torch; print("torch", torch.__version__)'
    node --version
    free -g | sed -n 2p
    ;;
  build)
    cmake -S "$root/native" -B /tmp/gpushards-native -DCMAKE_BUILD_TYPE=Release >/dev/null &&
      cmake --build /tmp/gpushards-native -j"$(nproc)" --target vgpu >/dev/null
    lib="$(find /tmp/gpushards-native -name libvgpu.so -type f | sed -n 1p)"
    echo "$lib"
    ;;
  elastic)
    # shellcheck disable=SC2086
    timeout --kill-after=10 "${ELASTIC_TIMEOUT:-450}" node "$here/elastic_agent.mjs" --lib "$lib" --out "$results" ${ELASTIC_ARGS:-}
    leftovers
    ;;
  neighbour)
    # shellcheck disable=SC2086
    timeout --kill-after=10 "${NEIGHBOUR_TIMEOUT:-300}" node "$here/neighbour_agent.mjs" --lib "$lib" --out "$results" ${NEIGHBOUR_ARGS:-}
    leftovers
    ;;
  *) echo "unknown step $s" ;;
  esac
done
