set -e
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader
cmake -S native -B /tmp/gsn -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build /tmp/gsn -j16 >/dev/null
L=/tmp/gsn/libvgpu.so
cd native/gpu-tests
python3 compute_bench.py $L --secs 8 --only solo-mm,solo-train,ours-25/75-train,ours-25/75-mm \
  --variants 'ship:;time:GPUSHARDS_COMPUTE_DEPTH_BY=time;lease:GPUSHARDS_COMPUTE_DEPTH_TO_LEASE=1;leasetime:GPUSHARDS_COMPUTE_DEPTH_TO_LEASE=1,GPUSHARDS_COMPUTE_DEPTH_BY=time' > $OUT/exp1.jsonl 2>$OUT/exp1.err || true
python3 - <<'PY'
import json,os
for l in open(os.environ["OUT"]+"/exp1.jsonl"):
    r=json.loads(l)
    if r["case"]=="solo": print("solo", r["kind"], round(r["rate"],1)); continue
    print(r["case"], [ (r[k]["share_of_solo"]) for k in sorted(r) if k.startswith("s") and k[1:].isdigit()])
PY
python3 alone_overhead.py $L --rounds 5 --secs 6 > $OUT/overhead.jsonl 2>$OUT/overhead.err || true
tail -1 $OUT/overhead.jsonl
ps -C nvidia-cuda-mps-control,nvidia-cuda-mps-server || true
