"""Turns handed out on the GPU (#17, docs/compute.md "Known gaps"): two compute_bench.py workers
whose every step waits (cuStreamWaitValue32) for its bit in a word this process flips, A for MS_A
then B for MS_B. Nothing blocks a worker's CPU, so each keeps its queue full while shut out: does
the 25 % side then keep what it loses inside its own turns under libvgpu.so's CPU-side turns?

  python3 gate_pair.py [--secs N] [--kinds train,mm] [--turns 5/15,10/30,20/60] > table

Rows: each kind alone (no gate, then gated but always open), the pair co-located with no gate,
the pair gated 25/75 at three turn lengths. Shares are of the ungated solo rate.
"""
import mmap, os, struct, sys, threading, time

import compute_bench as bench

GATE_FILE = "/dev/shm/gpushards-gate-probe"


def open_gate_page():
    with open(GATE_FILE, "wb") as f:
        f.write(b"\0" * 4096)
    fd = os.open(GATE_FILE, os.O_RDWR)
    return mmap.mmap(fd, 4096)


def set_gate(page, bits):
    struct.pack_into("<I", page, 0, bits)


def turns(page, ms_a, ms_b, stop):
    """Flip the gate A, B, A, ... until stop is set; both open at the end (nothing stays queued)."""
    at = time.perf_counter()
    while not stop.is_set():
        for bits, ms in ((1, ms_a), (2, ms_b)):
            set_gate(page, bits)
            at += ms / 1000
            while (left := at - time.perf_counter()) > 0:
                time.sleep(left if left > 0.0005 else 0)
    set_gate(page, 3)


def gated(bit):
    return {"GS_GATE_FILE": GATE_FILE, "GS_GATE_BIT": str(bit)}


def run_case(page, workers, secs, ms=None):
    """compute_bench.run with the gate turning (from the workers' warm-up on) when ms is given."""
    stop = threading.Event()
    set_gate(page, 3)
    thread = None
    if ms is not None:
        thread = threading.Thread(target=turns, args=(page, ms[0], ms[1], stop), daemon=True)
        thread.start()
    try:
        return bench.run(workers, secs, "gate")
    finally:
        stop.set()
        if thread is not None:
            thread.join()
        set_gate(page, 3)


def main():
    def option(name, default):
        return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default

    secs = float(option("--secs", "8"))
    kinds = option("--kinds", "train,mm").split(",")
    turn_lengths = [tuple(float(ms) for ms in t.split("/")) for t in option("--turns", "5/15,10/30,20/60").split(",")]
    page = open_gate_page()
    rows = []
    try:
        for kind in kinds:
            solo = run_case(page, [(kind, None)], secs)[0]["rate"]
            solo_gated = run_case(page, [(kind, gated(0))], secs)[0]["rate"]
            rows.append((f"{kind} alone, gate open at every step", solo_gated / solo, None))
            plain = run_case(page, [(kind, None), (kind, None)], secs)
            rows.append((f"{kind} pair, no gate", plain[0]["rate"] / solo, plain[1]["rate"] / solo))
            for ms in turn_lengths:
                pair = run_case(page, [(kind, gated(0)), (kind, gated(1))], secs, ms)
                rows.append((f"{kind} pair gated {100 * ms[0] / sum(ms):.0f}/{100 * ms[1] / sum(ms):.0f}, {ms[0]:g}/{ms[1]:g} ms", pair[0]["rate"] / solo, pair[1]["rate"] / solo))
            print(f"# {kind} solo: {solo:.1f} steps/s", flush=True)
    finally:
        os.unlink(GATE_FILE)
    print(f"| case | A % of solo | B % of solo |\n| --- | --- | --- |")
    for name, a, b in rows:
        print(f"| {name} | {100 * a:.1f} | {'' if b is None else f'{100 * b:.1f}'} |")


if __name__ == "__main__":
    main()
