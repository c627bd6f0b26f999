"""The interposer's cost without contention (docs/compute.md; results in RESULTS.md).

  python3 alone_overhead.py LIBVGPU [--rounds N] [--secs S] [--kind train]

A training step (compute_bench.py's "train" worker) runs alone, alternately
native and under libvgpu.so (a ledger, a share of 25 %, no neighbour: the
turn is always its own), N rounds of each, so that the card's drift between
runs falls on both sides alike. Prints every run's steps per second, then
the mean and standard deviation of each side and the ratio ours/native with
a 95 % confidence interval over the paired rounds.
"""
import json, os, shutil, statistics, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compute_bench import run, ours  # noqa: E402

def main():
    args = sys.argv[1:]
    lib = os.path.abspath(args[0]); rounds = 6; secs = 6.0; kind = "train"
    i = 1
    while i < len(args):
        if args[i] == "--rounds": rounds = int(args[i + 1])
        elif args[i] == "--secs": secs = float(args[i + 1])
        elif args[i] == "--kind": kind = args[i + 1]
        else: raise SystemExit(f"unknown argument {args[i]}")
        i += 2
    native, mine = [], []
    for r in range(rounds):
        ledger = f"/dev/shm/gs-overhead-{os.getpid()}-{r}"
        shutil.rmtree(ledger, ignore_errors=True); os.makedirs(ledger)
        # Alternate which side goes first, so that neither always follows the other.
        order = [("native", None), ("ours", ours(lib, ledger, "a", 25))]
        if r % 2: order.reverse()
        for side, env in order:
            rate = run([(kind, env)], secs, f"{side}-{r}")[0]["rate"]
            (native if side == "native" else mine).append(rate)
            print(json.dumps({"round": r, "side": side, "rate": rate}), flush=True)
        shutil.rmtree(ledger, ignore_errors=True)
    ratios = [m / n for m, n in zip(mine, native)]
    mean = statistics.mean(ratios)
    half = 1.96 * statistics.stdev(ratios) / len(ratios) ** 0.5 if len(ratios) > 1 else float("nan")
    print(json.dumps({"kind": kind, "rounds": rounds, "secs": secs,
                      "native": {"mean": round(statistics.mean(native), 2), "sd": round(statistics.pstdev(native), 2)},
                      "ours": {"mean": round(statistics.mean(mine), 2), "sd": round(statistics.pstdev(mine), 2)},
                      "ratio": round(mean, 4), "ratio_ci95": [round(mean - half, 4), round(mean + half, 4)]}), flush=True)

if __name__ == "__main__":
    main()
