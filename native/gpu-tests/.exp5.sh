set -e
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cmake -S native -B /tmp/gsn -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build /tmp/gsn -j16 --target vgpu >/dev/null
cd native/gpu-tests
S=GPUSHARDS_COMPUTE_SYNC_RELEASE=2
python3 compute_bench.py /tmp/gsn/libvgpu.so --secs 6 --only solo-train,solo-mm,solo-infer,ours-25/75-train,ours-25/75-mm,ours-infer50+mm50,ours-4x25-mm \
  --variants "ship1:;sr2-1:$S;ship2:;sr2-2:$S;ship3:;sr2-3:$S" > $OUT/d.jsonl 2>$OUT/d.err || true
python3 - <<'PY'
import json,os
for l in open(os.environ["OUT"]+"/d.jsonl"):
    r=json.loads(l)
    if r["case"]=="solo":
        print("solo", r["kind"], round(r["rate"],1), r.get("p99_us","")); continue
    print(r["case"], [ (r[k]["share_of_solo"], r[k].get("p99_us","")) for k in sorted(r) if k.startswith("s") and k[1:].isdigit()])
PY
