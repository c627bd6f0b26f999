"""The short table multi_gpu.sh prints last: one line per check of results.jsonl.

  python3 mg_table.py results.jsonl
"""
import json
import sys


def pct(x):
    return f"{x * 100:.1f} %"


def summary(r):
    c = r["check"]
    if r.get("skipped"):
        return f"not run: {r['skipped']}"
    if r.get("problems") and r.get("ok") is False and len(r) <= 3:
        return "failed: " + r["problems"][0].strip().splitlines()[-1][:160]
    if c == "accounting":
        return f"{r['form']}: ordinals -> physical GPUs {r.get('visible')}" + (f"; {r['problems']}" if r.get("problems") else "")
    if c == "meminfo":
        ranks = "; ".join(f"rank {i}: free {a['told']['free_mib']:.0f} / total {a['told']['total_mib']:.0f}"
                          for i, a in enumerate(r["ranks"]))
        used = {k: v["region_used_mib"] for k, v in (r.get("outside") or {}).items()}
        nvml = {k: v["nvml_mib"] for k, v in (r.get("outside") or {}).items()}
        return f"{r['variant'][:34]:34} {r['stage']:26} {ranks}; region {used}; NVML {nvml}"
    if c == "agent discovery":
        return f"{len(r['gpus'])} x {r['gpus'][0]['model']}, {r['gpus'][0]['totalMiB']:.0f} MiB, context {r['contextMiB']} MiB, {r['cgroups']}"
    if c.startswith("agent fence"):
        v = r.get("violations", [])
        return (f"real {r.get('realMiB')} MiB; P1 refused 3 GiB: {not r.get('p1ThreeGiBMore', {}).get('ok', True)}, "
                f"P0 got 1 GiB: {r.get('p0OneGiBMore', {}).get('ok')}; acted on {[x['gpu'][:12] for x in v]} "
                f"in {r.get('killMs')} ms; after {r.get('realAfterMiB')}")
    if c.startswith("compute share"):
        return "; ".join(f"{x['worker']} {x['percentOfSolo']} % (target {x['targetPercent']:.0f}, ledger busy {x['ledgerBusyPercent']})"
                         for x in r["rows"])
    if c.startswith("nccl"):
        return "; ".join(f"{k}: native {sorted(v['native_busbw_gbs'])[1]} / capped {sorted(v['capped_busbw_gbs'])[1]} GB/s "
                         f"({pct(v['capped_over_native'])})" for k, v in r["busbw"].items())
    if c.startswith("ddp"):
        return (f"{r['steps']} steps, capped = native each round: {r['capped_equals_native_each_round']}, ranks agree: "
                f"{r['ranks_agree']}, ms/step {r['ms_per_step_native']} / {r['ms_per_step_capped']}, "
                f"refused past cap {r['capped_refused_past_cap']}")
    if c.startswith("tp"):
        g = all(x.get("graph_equals_eager") for x in r["setup"]["capped"] + r["setup"]["native"])
        return (f"tokens equal: {r['capped_tokens_equal_native']}, graph = eager: {g}, ms/token p50 "
                f"{r['ms_per_token_p50_native']} / {r['ms_per_token_p50_capped']} ({pct(r['capped_over_native_time'])}), "
                f"{r['tokens_per_s_native']} / {r['tokens_per_s_capped']} tok/s, refused past cap {r['capped_refused_past_cap']}")
    if c.startswith("mix"):
        cards = {s: {g: v["agentRealMiB"] for g, v in per.items() if v["agentRealMiB"]} for s, per in r.get("perCard", {}).items()}
        told = {s: [(t["gpu"], t["toldFreeMiB"], t["expectedFreeMiB"]) for t in ts] for s, ts in r.get("told", {}).items()}
        return (f"agent MiB per shard per card {cards}; (GPU, told free, cap - max(charged, real)) {told}; "
                f"problems {r.get('problems', [])[:3]}")
    return json.dumps(r)[:200]


def main():
    rows = []
    for line in open(sys.argv[1]):
        line = line.strip()
        if line.startswith("{"):
            rows.append(json.loads(line))
    print(f"{'check':42} {'ok':5} summary")
    for r in rows:
        ok = {True: "yes", False: "NO", None: "-"}[r.get("ok")]
        try:
            text = summary(r)
        except Exception as e:  # a row of an unexpected shape still shows
            text = f"({type(e).__name__}) " + json.dumps(r)[:200]
        print(f"{r['check'][:42]:42} {ok:5} {text}")
    failed = [r["check"] for r in rows if r.get("ok") is False]
    print(f"{len(rows) - len(failed)} passed or not run, {len(failed)} failed")


if __name__ == "__main__":
    main()
