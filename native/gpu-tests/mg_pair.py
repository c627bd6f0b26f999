"""Multi-GPU workloads under libvgpu.so against native, side by side (multi_gpu.sh runs these).

  python3 mg_pair.py pair LIBVGPU --workload nccl|ddp|tp --world N [--rounds R]
                     (--limits FILE | --cap-gib G) [--out FILE.jsonl]
  python3 mg_pair.py meminfo LIBVGPU --world N --limits FILE --context-bytes B [--out FILE.jsonl]
  python3 mg_pair.py shard LIBVGPU --workload W --devices 2,3 --limits FILE --region PATH
                     [--join PATH --container HEX] [--rounds R]

pair: two groups of N ranks (mg_rank.py, one process per GPU, GPUs 0..N-1), the same workload and
seeds: "native" without the interposer, "capped" under libvgpu.so with one region for the group (a
shard) and its caps (the agent's limits file, or CUDA_DEVICE_MEMORY_LIMIT). Both stay up; the parent
gives each round to one group, then the other, the order swapped every round, so the two never run
at once and see the same machine state. Ends with each capped rank asking for its free memory plus
1 GiB (refused at the cap), and the group's region per UUID beside NVML's bytes per process.

meminfo: what torch.cuda.mem_get_info says in each rank at each stage of bringing a process group
up (context, init_process_group, first collective, a 256 MiB all_reduce, empty_cache), in four
groups at once: the issue's set-up (CUDA_DEVICE_MEMORY_LIMIT=4g, no context charge), the same with
GPUSHARDS_CONTEXT_BYTES, the agent's limits file, and one CUDA_VISIBLE_DEVICES per rank; after each
stage the region per UUID and NVML per process, read from outside.

shard: one capped group as a shard of the agent's (mg_agent.mjs runs these): runs its rounds,
prints them and holds its memory; on stdin "told" answers what each rank's mem_get_info says,
"check" whether each is refused past its cap, anything else ends it.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from mg_cuda import MiB, Nvml, region  # noqa: E402

LOGS = os.environ.get("GS_LOG_DIR", tempfile.gettempdir())
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Group:
    """N ranks of one workload, kept up; each op goes to every rank and returns every rank's answer."""

    def __init__(self, name, workload, devices, env, args=None, rank_env=None):
        self.name = name
        port = free_port()
        self.procs = []
        self.errs = []
        for rank in range(len(devices)):
            e = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "CUDA_VISIBLE_DEVICES")}
            e.update(MULTICAST_OFF)
            e.update({"RANK": str(rank), "WORLD_SIZE": str(len(devices)), "LOCAL_RANK": str(rank),
                      "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "GS_WORKLOAD": workload,
                      "GS_ARGS": json.dumps(args or {}), "CUDA_VISIBLE_DEVICES": ",".join(map(str, devices)),
                      "PYTHONUNBUFFERED": "1"})
            e.update(env)
            if rank_env:
                e.update(rank_env(rank))
            # stderr to a file: a pipe nobody reads would stop a rank that warns too much
            err = os.path.join(LOGS, f"{name.replace(' ', '_').replace('/', '_')[:40]}-{rank}-{os.getpid()}.err")
            self.errs.append(err)
            with open(err, "w") as f:
                self.procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "mg_rank.py")], env=e, text=True,
                                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=f))
        self.ready = [self._read(p)["ready"] for p in self.procs]
        self.pids = [p.pid for p in self.procs]

    def _read(self, p):
        line = p.stdout.readline()
        if not line:
            p.wait(timeout=30)
            with open(self.errs[self.procs.index(p)]) as f:
                raise RuntimeError(f"{self.name}: a rank exited {p.returncode}: {f.read()[-3000:]}")
        return json.loads(line)

    def op(self, **op):
        for p in self.procs:
            p.stdin.write(json.dumps(op) + "\n")
            p.stdin.flush()
        return [self._read(p) for p in self.procs]

    def close(self):
        for p in self.procs:
            try:
                p.stdin.write('{"op": "quit"}\n')
                p.stdin.flush()
            except (BrokenPipeError, ValueError):
                pass
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:  # a rank whose peer is gone can wait for it forever
                p.kill()
                p.wait()


def capped_env(lib, work, name, limits, cap_gib):
    env = {"LD_PRELOAD": lib, "GPUSHARDS_REGION_PATH": f"{work}/region-{name}"}
    if limits:
        env["GPUSHARDS_LIMITS_PATH"] = limits
    else:
        env["CUDA_DEVICE_MEMORY_LIMIT"] = f"{cap_gib}g"
    return env


def accounting(group, region_path):
    """The group's region per UUID beside NVML's bytes for its processes per physical GPU."""
    nvml = Nvml()
    shown = region(region_path)
    out = {}
    for index in range(nvml.count()):
        uuid = nvml.uuid(index).lower()
        procs = nvml.processes(index)
        mine = sum(b for pid, b in procs.items() if pid in group.pids)
        entry = shown.get(uuid)
        if mine == 0 and entry is None:
            continue
        out[index] = {"nvml_mib": round(mine / MiB, 1),
                      "region_used_mib": None if entry is None else round(entry["usedBytes"] / MiB, 1),
                      "limit_mib": None if entry is None else round(entry["limitBytes"] / MiB, 1),
                      "ranks_here": sum(1 for pid in group.pids if pid in procs)}
    return out


def summarise(workload, rounds):
    """rounds: [(group name, [per-rank answers])] in the order they ran."""
    by = {"native": [], "capped": []}
    for name, answers in rounds:
        by[name].append(answers)
    median = lambda xs: sorted(xs)[len(xs) // 2]
    if workload == "nccl":
        sizes = list(by["native"][0][0].keys())
        table = {}
        for size in sizes:
            n = [a[0][size]["busbw_gbs"] for a in by["native"]]
            c = [a[0][size]["busbw_gbs"] for a in by["capped"]]
            table[f"{int(size) // MiB} MiB"] = {"native_busbw_gbs": n, "capped_busbw_gbs": c,
                                                "capped_over_native": round(median(c) / median(n), 4)}
        ok = all(v["capped_over_native"] >= 0.95 for v in table.values())
        return {"busbw": table, "ok": ok}
    if workload == "ddp":
        same_ranks = all(len({r["params_hash"] for r in a}) == 1 for g in by.values() for a in g)
        same = [n[0]["params_hash"] == c[0]["params_hash"] for n, c in zip(by["native"], by["capped"])]
        return {"steps": by["native"][-1][0]["steps"], "ranks_agree": same_ranks, "capped_equals_native_each_round": same,
                "losses_native": by["native"][-1][0]["losses"], "losses_capped": by["capped"][-1][0]["losses"],
                "ms_per_step_native": [a[0]["ms_per_step"] for a in by["native"]],
                "ms_per_step_capped": [a[0]["ms_per_step"] for a in by["capped"]],
                "ok": same_ranks and all(same)}
    if workload == "tp":
        same_ranks = all(len({r["tokens_hash"] for r in a}) == 1 for g in by.values() for a in g)
        same = all(n[0]["tokens_hash"] == c[0]["tokens_hash"] for n, c in zip(by["native"], by["capped"]))
        n = [a[0]["ms_per_token_p50"] for a in by["native"]]
        c = [a[0]["ms_per_token_p50"] for a in by["capped"]]
        return {"ranks_agree": same_ranks, "capped_tokens_equal_native": same, "ms_per_token_p50_native": n,
                "ms_per_token_p50_capped": c, "capped_over_native_time": round(median(c) / median(n), 4),
                "tokens_per_s_native": median([a[0]["tokens_per_s"] for a in by["native"]]),
                "tokens_per_s_capped": median([a[0]["tokens_per_s"] for a in by["capped"]]),
                "ok": same_ranks and same}
    raise ValueError(workload)


OPS = {"nccl": {"op": "run", "iters": 20}, "ddp": {"op": "run", "steps": 100}, "tp": {"op": "run", "tokens": 128}}


def pair(a, emit):
    work = tempfile.mkdtemp(prefix="gs-pair-")
    devices = list(range(a.world))
    groups = {}
    try:
        groups["native"] = Group("native", a.workload, devices, {})
        groups["capped"] = Group("capped", a.workload, devices, capped_env(a.lib, work, "capped", a.limits, a.cap_gib))
        rounds = []
        for r in range(a.rounds):
            order = ("native", "capped") if r % 2 == 0 else ("capped", "native")
            for name in order:
                rounds.append((name, groups[name].op(**OPS[a.workload])))
        row = {"check": f"{a.workload} x{a.world}", "world": a.world, "rounds": a.rounds,
               **summarise(a.workload, rounds)}
        if a.workload == "ddp" and not row["ok"]:
            # How far apart: the largest difference of any parameter between the groups' rank 0.
            import torch
            saved = {}
            for name, g in groups.items():
                g.op(op="save", path=f"{work}/params-{name}.pt")
                saved[name] = torch.load(f"{work}/params-{name}.pt")
            row["max_abs_param_diff"] = max(float((n - c).abs().max()) for n, c in zip(saved["native"], saved["capped"]))
        row["setup"] = {name: g.ready for name, g in groups.items()}
        row["capped_accounting"] = accounting(groups["capped"], f"{work}/region-capped")
        refused = groups["capped"].op(op="refused_past_cap")
        row["capped_refused_past_cap"] = [x["refused"] for x in refused]
        row["ok"] = row["ok"] and all(row["capped_refused_past_cap"])
        if a.workload == "tp":
            row["ok"] = row["ok"] and all(r["graph_equals_eager"] for g in groups.values() for r in g.ready)
        row["rounds_raw"] = rounds
        emit(row)
    finally:
        for g in groups.values():
            g.close()


STAGES = ["context", "init_process_group", "first_collective", "tensor_256mib_all_reduce", "after_empty_cache"]


def meminfo(a, emit):
    work = tempfile.mkdtemp(prefix="gs-meminfo-")
    devices = list(range(a.world))
    variants = {
        "env cap 4g, no context charge (the issue's set-up)": ({"CUDA_DEVICE_MEMORY_LIMIT": "4g"}, None),
        "env cap 4g + GPUSHARDS_CONTEXT_BYTES": ({"CUDA_DEVICE_MEMORY_LIMIT": "4g",
                                                  "GPUSHARDS_CONTEXT_BYTES": str(a.context_bytes)}, None),
        "the agent's limits file": ({"GPUSHARDS_LIMITS_PATH": a.limits}, None),
        "env cap 4g, one CUDA_VISIBLE_DEVICES per rank": ({"CUDA_DEVICE_MEMORY_LIMIT": "4g"},
                                                          lambda r: {"CUDA_VISIBLE_DEVICES": str(r), "GS_DEVICE": "0"}),
    }
    groups = {}
    try:
        for i, (name, (env, rank_env)) in enumerate(variants.items()):
            groups[name] = (Group(name, "meminfo", devices, {"LD_PRELOAD": a.lib,
                                                              "GPUSHARDS_REGION_PATH": f"{work}/region-{i}", **env},
                                  rank_env=rank_env), f"{work}/region-{i}")
        for stage in STAGES:
            for name, (g, path) in groups.items():
                answers = g.op(op="stage", stage=stage)
                emit({"check": "meminfo", "variant": name, "stage": stage, "ranks": answers,
                      "outside": accounting(g, path) if os.path.exists(path) else None})
    finally:
        for g, _ in groups.values():
            g.close()


def shard(a, emit):
    """One shard's group for mg_agent.mjs; every line it prints is JSON."""
    devices = [int(d) for d in a.devices.split(",")]
    env = {"LD_PRELOAD": a.lib, "GPUSHARDS_REGION_PATH": a.region, "GPUSHARDS_LIMITS_PATH": a.limits}
    if a.join:
        env.update({"GS_JOIN": a.join, "GS_CONTAINER": a.container})
    g = Group(a.name, a.workload, devices, env)
    try:
        emit({"event": "ready", "pids": g.pids, "ready": g.ready})
        rounds = [g.op(**OPS[a.workload]) for _ in range(a.rounds)]
        emit({"event": "ran", "rounds": rounds})
        for line in sys.stdin:
            if line.strip() == "told":
                emit({"event": "told", "told": g.op(op="told")})
            elif line.strip() == "check":
                emit({"event": "checked", "refused_past_cap": [x["refused"] for x in g.op(op="refused_past_cap")]})
            else:
                break
    finally:
        g.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["pair", "meminfo", "shard"])
    ap.add_argument("lib")
    ap.add_argument("--workload", choices=list(OPS))
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--limits")
    ap.add_argument("--cap-gib", type=int, default=8)
    ap.add_argument("--context-bytes", type=int, default=0)
    ap.add_argument("--devices")
    ap.add_argument("--region")
    ap.add_argument("--join")
    ap.add_argument("--container")
    ap.add_argument("--name", default="shard")
    ap.add_argument("--out")
    a = ap.parse_args()
    a.lib = os.path.abspath(a.lib)
    out = open(a.out, "a") if a.out else None
    failed = []

    def emit(row):
        text = json.dumps(row)
        print(text, flush=True)
        if out:
            out.write(text + "\n")
            out.flush()
        if row.get("ok") is False:
            failed.append(row.get("check"))

    try:
        {"pair": pair, "meminfo": meminfo, "shard": shard}[a.mode](a, emit)
    except Exception:
        import traceback
        check = f"{a.workload} x{a.world}" if a.mode == "pair" else a.mode
        emit({"check": check, "ok": False, "problems": [traceback.format_exc()[-3000:]]})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
