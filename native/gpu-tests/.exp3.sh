set -e
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cmake -S native -B /tmp/gsn -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build /tmp/gsn -j16 --target vgpu >/dev/null
cmake -S native -B /tmp/gsn64 -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=-DGS_RING=64u >/dev/null && cmake --build /tmp/gsn64 -j16 --target vgpu >/dev/null
cd native/gpu-tests
python3 compute_bench.py /tmp/gsn/libvgpu.so --secs 8 --only solo-train,solo-mm,ours-alone-train-capped-100,ours-alone-train-noshare,ours-25/75-train \
  --variants 'ship:;lease:GPUSHARDS_COMPUTE_DEPTH_TO_LEASE=1' > $OUT/a.jsonl 2>$OUT/a.err || true
SOLO=$(python3 -c "
import json,os
r=[json.loads(l) for l in open(os.environ['OUT']+'/a.jsonl') if '\"solo\"' in l]
print(','.join(f\"{x['kind']}={x['rate']}\" for x in r))")
echo "solo $SOLO"
python3 compute_bench.py /tmp/gsn64/libvgpu.so --secs 8 --solo "$SOLO" --only ours-alone-train-capped-100,ours-25/75-train,ours-25/75-mm \
  --variants 'ship64:;lease64:GPUSHARDS_COMPUTE_DEPTH_TO_LEASE=1' > $OUT/b.jsonl 2>$OUT/b.err || true
python3 - <<'PY'
import json,os
for f in ("a","b"):
  for l in open(os.environ["OUT"]+f"/{f}.jsonl"):
    r=json.loads(l)
    if r["case"]=="solo": continue
    print(f, r["case"], [ (r[k]["share_of_solo"]) for k in sorted(r) if k.startswith("s") and k[1:].isdigit()])
PY
tail -3 $OUT/a.err $OUT/b.err
