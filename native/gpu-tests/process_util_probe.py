"""What NVML reports per process while shards share a GPU (docs/compute.md, "Seen from the host").

  python3 process_util_probe.py LIBVGPU [--secs S] [--mps]

For each case, compute_bench.py's workers run (native, or under libvgpu.so's turns with the
shares given) while this process samples nvmlDeviceGetProcessUtilization on GPU 0 once a second
with the last timestamp it saw, as an agent would. Prints per case each worker's share of its
solo throughput and the mean smUtil NVML gave its pid over the steady window (seconds 1..S-1),
and how many samples came back. With --mps, an MPS control daemon is started and one case runs
its workers as MPS clients (NVML's view of an MPS client's pid is the question).
"""
import ctypes, json, os, shutil, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compute_bench as cb  # noqa: E402

class Sample(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong), ("smUtil", ctypes.c_uint),
                ("memUtil", ctypes.c_uint), ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]

NVML = ctypes.CDLL("libnvidia-ml.so.1")
assert NVML.nvmlInit_v2() == 0
DEV = ctypes.c_void_p()
assert NVML.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(DEV)) == 0

def sample(last):
    """Samples newer than last (µs); (rc, [samples])."""
    n = ctypes.c_uint(0)
    rc = NVML.nvmlDeviceGetProcessUtilization(DEV, None, ctypes.byref(n), ctypes.c_ulonglong(last))
    if rc not in (0, 7):  # 7: NVML_ERROR_INSUFFICIENT_SIZE, n says how many
        return rc, []
    arr = (Sample * max(n.value, 1))()
    rc = NVML.nvmlDeviceGetProcessUtilization(DEV, arr, ctypes.byref(n), ctypes.c_ulonglong(last))
    return rc, [(s.pid, s.timeStamp, s.smUtil) for s in arr[: n.value]] if rc == 0 else []

def run_case(name, workers, secs, solo):
    procs = []
    for kind, env in workers:
        e = dict(os.environ); e.update(env or {})
        procs.append(subprocess.Popen([sys.executable, "-c", cb.WORKER, kind, str(secs)], env=e, text=True,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    for p in procs:
        if p.stdout.readline().strip() != "ready": raise SystemExit(f"{name}: {p.stderr.read()[-1500:]}")
    t0 = time.time() + 0.3
    for p in procs: p.stdin.write(f"{t0}\n"); p.stdin.flush()
    last = int(time.time() * 1e6); seen = {}; rcs = set()
    while time.time() < t0 + secs:
        time.sleep(1.0)
        rc, got = sample(last); rcs.add(rc)
        for pid, ts, sm in got:
            if t0 + 1 <= ts / 1e6 < t0 + secs - 0.5: seen.setdefault(pid, []).append(sm)
            last = max(last, ts)
    row = {"case": name, "nvml_rc": sorted(rcs), "workers": []}
    for (kind, _), p in zip(workers, procs):
        out, err = p.communicate(timeout=secs + 60)
        r = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
        sm = seen.get(p.pid, [])
        row["workers"].append({"kind": kind, "share_of_solo": round(r["rate"] / solo[kind], 3),
                               "nvml_sm_mean": round(sum(sm) / len(sm), 1) if sm else None, "samples": len(sm)})
    others = {pid: v for pid, v in seen.items() if pid not in [p.pid for p in procs]}
    if others: row["other_pids"] = {pid: round(sum(v) / len(v), 1) for pid, v in others.items()}
    print(json.dumps(row), flush=True)

def main():
    lib = os.path.abspath(sys.argv[1]); secs = 8.0; use_mps = "--mps" in sys.argv
    if "--secs" in sys.argv: secs = float(sys.argv[sys.argv.index("--secs") + 1])
    solo = {k: cb.run([(k, None)], secs, "solo-" + k)[0]["rate"] for k in ("mm", "train")}
    print(json.dumps({"solo": solo}), flush=True)
    led = f"/dev/shm/gs-probe-{os.getpid()}"
    def L(i):
        d = f"{led}-{i}"; shutil.rmtree(d, ignore_errors=True); os.makedirs(d); return d
    run_case("native-alone-mm", [("mm", None)], secs, solo)
    run_case("native-mm+mm", [("mm", None), ("mm", None)], secs, solo)
    l1 = L(1); run_case("turns-25/75-mm", [("mm", cb.ours(lib, l1, "a", 25)), ("mm", cb.ours(lib, l1, "b", 75))], secs, solo)
    l2 = L(2); run_case("turns-25/75-train", [("train", cb.ours(lib, l2, "a", 25)), ("train", cb.ours(lib, l2, "b", 75))], secs, solo)
    l3 = L(3); run_case("turns-25-mm+bypass-mm", [("mm", cb.ours(lib, l3, "a", 25)), ("mm", None)], secs, solo)
    if use_mps:
        cb.mps_start()
        try: run_case("mps-25/75-mm", [("mm", cb.mps(25)), ("mm", cb.mps(75))], secs, solo)
        finally: cb.mps_stop()

if __name__ == "__main__":
    main()
