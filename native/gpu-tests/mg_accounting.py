"""Every process's memory charged to the right physical GPU, whatever the form of CUDA_VISIBLE_DEVICES.

  python3 mg_accounting.py LIBVGPU OUT.jsonl

One process per form (indices in order and reordered, full UUIDs reordered, UUID prefixes, a single
hidden-others GPU, an index then a UUID and the reverse, unset), all at once, each under libvgpu.so with a
region of its own and an 8 GiB cap per GPU. Each takes (k + 1) x 256 MiB on its ordinal k, reads
cuMemGetInfo with each ordinal current, then holds. From outside (NVML, not interposed) the parent
reads each process's bytes per physical GPU and the region per UUID: the region must hold
(k + 1) x 256 MiB under the UUID of the card ordinal k is, NVML must show the process on exactly those
cards, growing by that much over its context there, and cuMemGetInfo with ordinal k current must say
free = 8 GiB - (k + 1) x 256 MiB. Prints one JSON line per form and appends them to OUT.jsonl.
Runs against the fake driver too (put native/build/fake-driver on LD_LIBRARY_PATH).
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mg_cuda import GiB, MiB, Cuda, Nvml, region  # noqa: E402

CAP = 8 * GiB
STEP = 256 * MiB


def child():
    """Under libvgpu.so: contexts on every ordinal first (the parent reads NVML's context bytes), then
    the allocations, then cuMemGetInfo per ordinal; one JSON line after each phase."""
    cuda = Cuda()
    n = cuda.count()
    uuids = [cuda.uuid(k) for k in range(n)]
    for k in range(n):
        cuda.use(k)
    print(json.dumps({"phase": "contexts", "uuids": uuids}), flush=True)
    sys.stdin.readline()
    for k in range(n):
        cuda.use(k)
        cuda.alloc((k + 1) * STEP)
    told = []
    for k in range(n):
        cuda.use(k)
        free, total = cuda.mem_get_info()
        told.append({"ordinal": k, "current": cuda.current_ordinal(), "free": free, "total": total})
    print(json.dumps({"phase": "held", "told": told}), flush=True)
    sys.stdin.readline()


def forms(uuids):
    """(name, CUDA_VISIBLE_DEVICES or None) for the host's physical UUIDs."""
    n = len(uuids)
    # The shortest prefix, past "GPU-" and 4 digits, that still names each card alone.
    cut = next(c for c in range(8, 41) if len({u[:c] for u in uuids}) == n)
    rev = list(range(n - 1, -1, -1))
    out = [("unset", None), ("indices", ",".join(map(str, range(n)))), ("indices reordered", ",".join(map(str, rev))),
           ("UUIDs reordered", ",".join(uuids[i] for i in rev)),
           ("UUID prefixes reordered", ",".join(uuids[i][:cut] for i in rev)),
           ("one card by UUID (the last)", uuids[-1]),
           ("index then UUID", f"{n - 1},{uuids[0]}"), ("UUID then index", f"{uuids[-1]},0")]
    if n >= 4:
        out.append(("a subset reordered", "3,1"))
    return out


def main():
    lib, out_path = os.path.abspath(sys.argv[1]), sys.argv[2]
    nvml = Nvml()
    phys = nvml.by_uuid()
    uuids = [nvml.uuid(i) for i in range(nvml.count())]
    work = tempfile.mkdtemp(prefix="gs-accounting-")
    procs = []
    for i, (name, cvd) in enumerate(forms(uuids)):
        env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
        env.update({"LD_PRELOAD": lib, "GPUSHARDS_REGION_PATH": f"{work}/region-{i}",
                    "CUDA_DEVICE_MEMORY_LIMIT": str(CAP), "GPUSHARDS_CONTEXT_BYTES": "0"})
        if cvd is not None:
            env["CUDA_VISIBLE_DEVICES"] = cvd
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child"], env=env, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        procs.append((name, cvd, f"{work}/region-{i}", p))

    def line(p):
        text = p.stdout.readline()
        if not text:
            raise RuntimeError(p.stderr.read()[-2000:])
        return json.loads(text)

    def per_card(pid):
        return {u: nvml.processes(i).get(pid, 0) for u, i in phys.items()}

    results = []
    states = {}
    for name, cvd, path, p in procs:
        try:
            seen = line(p)
            states[name] = {"uuids": seen["uuids"], "ctx": per_card(p.pid)}
        except Exception as e:  # a form the driver refuses shows as such; the others go on
            states[name] = {"error": str(e)}
        try:
            p.stdin.write("go\n")
            p.stdin.flush()
        except BrokenPipeError:
            pass
    for name, cvd, path, p in procs:
        row = {"check": "accounting", "form": name, "CUDA_VISIBLE_DEVICES": cvd}
        state = states[name]
        try:
            if "error" in state:
                raise RuntimeError(state["error"])
            held = line(p)
            after = per_card(p.pid)
            shown = region(path)
            problems = []
            charged = {}
            for k, u in enumerate(state["uuids"]):
                want = (k + 1) * STEP
                got = shown.get(u.lower(), {}).get("usedBytes")
                grew = after[u] - state["ctx"][u]
                charged[f"{k}->{u[:12]}"] = {"region_mib": None if got is None else got / MiB,
                                             "nvml_growth_mib": grew / MiB, "physical": phys[u]}
                if got != want:
                    problems.append(f"ordinal {k} ({u}): region holds {got}, want {want}")
                if grew < want:
                    problems.append(f"ordinal {k} ({u}): NVML grew {grew} < {want}")
                told = held["told"][k]
                if told["current"] != k or told["total"] != CAP or told["free"] != CAP - want:
                    problems.append(f"ordinal {k}: cuMemGetInfo said {told}")
            others = [u for u in phys if u not in state["uuids"] and after[u] != 0]
            if others:
                problems.append(f"present on cards it cannot see: {others}")
            extra = [u for u in shown if u.upper() not in {x.upper() for x in state["uuids"]}]
            if extra:
                problems.append(f"region entries for cards it cannot see: {extra}")
            row.update({"visible": [phys[u] for u in state["uuids"]], "charged": charged, "ok": not problems,
                        "problems": problems})
        except Exception as e:
            row.update({"ok": False, "problems": [str(e)[-600:]]})
        finally:
            try:
                p.stdin.write("done\n")
                p.stdin.flush()
            except BrokenPipeError:
                pass
            p.wait(timeout=60)
            p.stderr.close()
        results.append(row)
        print(json.dumps(row), flush=True)
    with open(out_path, "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in results)
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    if sys.argv[1:] == ["--child"]:
        child()
    else:
        sys.exit(main())
