"""Short table of compute_bench.py's JSON lines: python3 compute_summary.py < run.jsonl

One row per case: each shard's share of solo (target), the inference p50/p99, the GPU's
utilization, and per shard the GPU time libvgpu.so measured and its waits for its own
work in flight (GPUSHARDS_COMPUTE_STATS=1)."""
import json, re, sys

solo = {}
for line in sys.stdin:
    if not line.startswith("{"): continue
    r = json.loads(line)
    if r["case"] == "solo":
        solo[r["kind"]] = r
        extra = f" p50/p99 {round(r['p50_us'])}/{round(r['p99_us'])} us" if "p50_us" in r else ""
        print(f"solo {r['kind']:<7} {r['rate']:.1f}/s{extra}")
        continue
    cells, notes = [], []
    for k in sorted(x for x in r if re.fullmatch(r"s\d+", x)):
        s = r[k]
        share = "-" if s["share_of_solo"] is None else f"{100 * s['share_of_solo']:.1f}"
        tgt = f"({round(100 * s['target'])})" if s.get("target") else ""
        lat = f" p50/p99 {s['p50_us']}/{s['p99_us']}" if "p50_us" in s else ""
        prio = f"[prio {s['prio']['stream']}]" if "prio" in s else ""
        cells.append(f"{s['kind']}{prio} {share}{tgt}{lat}")
        for st in s.get("stats", []):
            m = re.search(r"\[(.*?)\].*handover.*?(\d+) \(waited (\d+) us.*GPU time measured (\d+) us, waits for work in flight (\d+)", st)
            h = re.search(r"turns taken from a busy holder (\d+) \(waited (\d+) us", st)
            g = re.search(r"\[(.*?)\].*GPU time measured (\d+) us, waits for work in flight (\d+)", st)
            if g and h:
                notes.append(f"{g.group(1)}: gpu {int(g.group(2)) / 1e3:.0f} ms, handovers {h.group(1)} waited {int(h.group(2)) / 1e3:.0f} ms, bound waits {g.group(3)}")
    gpu = r.get("gpu", {})
    util = f" | util {gpu['util_pct']}% {gpu['sm_mhz']} MHz" if "util_pct" in gpu else ""
    print(f"{r['case']:<34} " + " / ".join(cells) + util)
    for n in notes: print(f"    {n}")
    if "nvml" in r:
        print("    nvml: " + ", ".join(f"{p['name']}({p['pid']}) {p['mib']} MiB" for p in r["nvml"]["procs"]) +
              f"; workers {r['nvml'].get('workers')}")
