set -e
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cmake -S native -B /tmp/gsn -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build /tmp/gsn -j16 >/dev/null
L=/tmp/gsn/libvgpu.so
cd native/gpu-tests
python3 process_util_probe.py $L --secs 8 --mps > $OUT/probe.jsonl 2>$OUT/probe.err || true
cat $OUT/probe.jsonl
python3 compute_bench.py $L --secs 10 --only solo-train,ours-25/75-train \
  --variants 'r1:;p0:GPUSHARDS_COMPUTE_PREEMPT=0;r2:;s8:GPUSHARDS_COMPUTE_SLICE_US=8000;r3:' > $OUT/exp2.jsonl 2>$OUT/exp2.err || true
python3 - <<'PY'
import json,os
for l in open(os.environ["OUT"]+"/exp2.jsonl"):
    r=json.loads(l)
    if r["case"]=="solo": print("solo", r["kind"], round(r["rate"],1)); continue
    print(r["case"], [ (r[k]["share_of_solo"]) for k in sorted(r) if k.startswith("s") and k[1:].isdigit()])
PY
ps -C nvidia-cuda-mps-control,nvidia-cuda-mps-server || true
