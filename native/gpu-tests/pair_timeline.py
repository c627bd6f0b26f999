"""Where a GPU's time goes when processes share it: their kernels merged into one timeline.

  python3 pair_timeline.py TRACE.json [TRACE.json ...]

Each trace is one process's Chrome trace from torch.profiler (compute_bench.py with
GS_PROFILE_DIR). Over the window every trace covers: how busy the GPU was (the union of all
kernels), each process's kernel time, its *runs* (kernels with no other process's kernel between
them: a turn, under libvgpu.so's turns), the idle time inside its runs (its own CPU gaps) and the
idle time before each of its runs (the hand-over), and how long kernels of two processes ran at
once (time-sliced). Prints one JSON line.
"""
import json, sys


def kernels(path):
    trace = json.load(open(path))
    base = trace.get("baseTimeNanoseconds", 0) / 1000.0
    out = []
    for e in trace.get("traceEvents", []):
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            out.append((base + e["ts"], base + e["ts"] + e.get("dur", 0)))
    out.sort()
    return out


def union(intervals):
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s; end = e
        elif e > end:
            total += e - end; end = e
    return total


def main():
    procs = [kernels(p) for p in sys.argv[1:]]
    lo = max(k[0][0] for k in procs if k); hi = min(k[-1][1] for k in procs if k)
    procs = [[(max(s, lo), min(e, hi)) for s, e in k if e > lo and s < hi] for k in procs]
    span = hi - lo
    events = sorted((s, e, i) for i, k in enumerate(procs) for s, e in k)
    busy_all = union([(s, e) for s, e, _ in events])
    res = {"window_ms": round(span / 1000, 1), "gpu_busy_pct": round(100 * busy_all / span, 1), "procs": []}
    overlap = sum(union(procs[i]) for i in range(len(procs))) - busy_all
    res["time_sliced_pct"] = round(100 * overlap / span, 1)
    for i, k in enumerate(procs):
        runs = []  # [start, end, own kernel time union, own idle inside]
        prev_other_end = lo
        cur = None
        for s, e, j in events:
            if j != i:
                if cur is not None: runs.append(cur); cur = None
                prev_other_end = max(prev_other_end, e)
                continue
            if cur is None:
                cur = {"start": s, "end": e, "ivals": [(s, e)], "handover_gap": max(0.0, s - prev_other_end)}
            else:
                cur["ivals"].append((s, e)); cur["end"] = max(cur["end"], e)
        if cur is not None: runs.append(cur)
        own = union(k)
        inside = sum((r["end"] - r["start"]) - union(r["ivals"]) for r in runs)
        hand = sum(r["handover_gap"] for r in runs[1:])
        lens = sorted(r["end"] - r["start"] for r in runs)
        res["procs"].append({
            "trace": sys.argv[1 + i].rsplit("/", 1)[-1], "kernel_pct": round(100 * own / span, 1),
            "runs": len(runs), "run_ms_p50": round(lens[len(lens) // 2] / 1000, 2) if lens else 0,
            "idle_inside_runs_pct": round(100 * inside / span, 1),
            "idle_before_runs_pct": round(100 * hand / span, 1),
            "idle_before_run_us_mean": round(hand / max(1, len(runs) - 1), 1),
        })
    print(json.dumps(res))


if __name__ == "__main__":
    main()
