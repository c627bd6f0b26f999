#!/usr/bin/env bash
# Multi-GPU shards on real cards, one command (issue 32; results in RESULTS.md):
#   bash native/gpu-tests/multi_gpu.sh [STEP ...]
# On a host with 2 or more NVIDIA GPUs, PyTorch with NCCL, a C compiler and CMake; Node.js 20+ and
# a built agent (apps/agent/dist with its node_modules) for the agent's steps. Steps, in order
# (all by default; the x4 ones only where there are 4 GPUs, mix as 4+2+1+1 there and 2+1+1 on two):
# machine, build, accounting, meminfo,
# fence, share, nccl2, ddp2, tp2, mix, nccl4, ddp4, tp4. NVLink multicast stays off in every
# process (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1).
# Writes $OUT/multi_gpu.log (everything), $OUT/results.jsonl (one JSON line per check) and
# $OUT/ranks.tgz (each rank's stderr); prints a table of the checks last. A step is skipped, and
# says so, when MG_BUDGET_S (default 560) seconds would not leave it the time it needs.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/native/gpu-tests"
out="${OUT:-$root/gpu-results}"
mkdir -p "$out"
exec > >(tee -a "$out/multi_gpu.log") 2>&1
results="$out/results.jsonl"
: >"$results"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export GS_LOG_DIR=/tmp/gpushards-mg-ranks
rm -rf "$GS_LOG_DIR" /tmp/gpushards-mg-state
mkdir -p "$GS_LOG_DIR"
budget="${MG_BUDGET_S:-560}"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(machine build accounting meminfo fence share nccl2 ddp2 tp2 mix nccl4 ddp4 tp4)
gpus="$(nvidia-smi -L | grep -c '^GPU')"
have_node=0
command -v node >/dev/null && [ -d "$root/apps/agent/dist" ] && have_node=1

record() { # a check that did not run, as a row of its own
  printf '{"check": "%s", "ok": null, "skipped": "%s"}\n' "$1" "$2" | tee -a "$results"
}

# step NAME SECONDS_NEEDED COMMAND...: runs COMMAND with a timeout unless the budget is spent.
step() {
  local name="$1" need="$2"
  shift 2
  if [ $((SECONDS + need)) -gt "$budget" ]; then
    record "$name" "$((budget - SECONDS)) s of the budget left, ${need} s needed"
    return
  fi
  echo "== $name ($(date -u +%H:%M:%SZ), ${SECONDS} s in)"
  timeout --kill-after=10 "$need" "$@"
  local rc=$?
  [ $rc -eq 124 ] && record "$name" "timed out after ${need} s"
  echo "== $name: exit $rc after $((SECONDS)) s"
}

limits() { # limits SHARD CAPS: the agent's limits file for GPUs 0..n-1; prints path and context
  node "$here/mg_agent.mjs" limits --state /tmp/gpushards-mg-state --shard "$1" --caps-gib "$2"
}

lib=/tmp/gpushards-native/libvgpu.so
for s in "${steps[@]}"; do
  case "$s" in
  machine)
    echo "== machine"
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv,noheader
    nvidia-smi topo -m
    python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'
    command -v node >/dev/null && node --version
    nproc
    ;;
  build)
    echo "== build libvgpu.so"
    cmake -S "$root/native" -B /tmp/gpushards-native -DCMAKE_BUILD_TYPE=Release >/dev/null &&
      cmake --build /tmp/gpushards-native -j"$(nproc)" --target vgpu gpushards-region >/dev/null
    export GS_REGION_TOOL
    GS_REGION_TOOL="$(find /tmp/gpushards-native -name gpushards-region -type f | sed -n 1p)"
    lib="$(find /tmp/gpushards-native -name libvgpu.so -type f | sed -n 1p)"
    echo "$lib $GS_REGION_TOOL"
    ;;
  accounting) step accounting 45 python3 "$here/mg_accounting.py" "$lib" "$results" ;;
  meminfo)
    if [ $have_node -eq 0 ]; then record meminfo "no node or no agent build"; continue; fi
    caps=4,4
    file="$(limits meminfo "$caps")"
    echo "$file"
    step meminfo 90 python3 "$here/mg_pair.py" meminfo "$lib" --world 2 --out "$results" \
      --limits "$(echo "$file" | python3 -c 'import json,sys; print(json.load(sys.stdin)["file"])')" \
      --context-bytes "$(echo "$file" | python3 -c 'import json,sys; print(json.load(sys.stdin)["contextBytes"])')"
    ;;
  fence | share | mix)
    if [ $have_node -eq 0 ]; then record "$s" "no node or no agent build"; continue; fi
    need=60
    [ "$s" = share ] && need=80
    [ "$s" = mix ] && need=150
    step "$s" "$need" node "$here/mg_agent.mjs" "$s" --lib "$lib" --out "$results"
    ;;
  nccl2 | ddp2 | tp2 | nccl4 | ddp4 | tp4)
    world="${s: -1}"
    workload="${s%?}"
    if [ "$gpus" -lt "$world" ]; then record "$workload x$world" "$gpus GPUs here"; continue; fi
    caps="$(python3 -c "print(','.join(['8'] * $world))")"
    if [ $have_node -eq 1 ]; then
      file="$(limits "pair$world" "$caps" | python3 -c 'import json,sys; print(json.load(sys.stdin)["file"])')"
      cap=(--limits "$file")
    else
      cap=(--cap-gib 8)
    fi
    step "$workload x$world" 90 python3 "$here/mg_pair.py" pair "$lib" --workload "$workload" --world "$world" \
      --rounds 3 "${cap[@]}" --out "$results"
    ;;
  *) record "$s" "unknown step" ;;
  esac
done
tar -czf "$out/ranks.tgz" -C "$GS_LOG_DIR" . 2>/dev/null
echo "== done in ${SECONDS} s"
python3 "$here/mg_table.py" "$results"
