#!/usr/bin/env python3
"""What the driver's checkpoint API does with GPU memory shared over CUDA IPC (issue #30, point 4).

  python3 checkpoint_ipc.py [MIB]

An exporter (this process) allocates MIB (default 1024) and shares it with an importer through
torch.multiprocessing, that is CUDA IPC (cudaIpcGetMemHandle / cudaIpcOpenMemHandle, as PyTorch
DataLoader workers and NCCL's intra-node transport use it). Each is then moved with the bare API
(checkpoint_raw.py: lock + checkpoint, then restore + unlock): the exporter alone, the importer
alone, both. After each attempt both processes sum the shared data again. One JSON line per
attempt: the driver's answers, the processes' states after, and whether the data is intact.
"""
import json
import os
import subprocess
import sys

import torch
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))


def raw(pid, op):
    """The driver's answer, or TIMEOUT: a call that did not return within 20 s (killed)."""
    print(json.dumps({"step": op, "pid": pid}), flush=True)
    try:
        out = subprocess.run([sys.executable, os.path.join(HERE, "checkpoint_raw.py"), str(pid), op],
                             capture_output=True, text=True, check=False, timeout=20)
    except subprocess.TimeoutExpired:
        return "TIMEOUT"
    words = out.stdout.split()
    return words[-1] if words else (out.stderr.strip().splitlines() or ["no answer"])[-1][:200]


def importer(tensors, sums, commands):
    shared = tensors.get()  # opens the exporter's IPC handle
    sums.put(("pid", os.getpid()))
    for command in iter(commands.get, "stop"):
        try:
            sums.put(("sum", int(shared.sum().item())))
        except Exception as error:  # said, so that the exporter does not wait for nothing
            sums.put(("error", f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"))


def main():
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    mp.set_start_method("spawn")
    data = torch.arange(mib * 2**20 // 8, dtype=torch.int64, device="cuda")
    expected = int(data.sum().item())
    tensors, sums, commands = mp.Queue(), mp.Queue(), mp.Queue()
    child = mp.Process(target=importer, args=(tensors, sums, commands))
    child.start()
    tensors.put(data)
    _, importer_pid = sums.get()
    pids = {"exporter": os.getpid(), "importer": importer_pid}

    def intact():
        commands.put("sum")
        try:
            kind, value = sums.get(timeout=20)
        except Exception:
            kind, value = "error", "no answer within 20 s"
        return {"exporter": int(data.sum().item()) == expected,
                "importer": value == expected if kind == "sum" else value}

    print(json.dumps({"check": "ipc shared", "mib": mib, "pids": pids, "intact": intact()}), flush=True)
    attempts = [("exporter alone", ["exporter"]), ("importer alone", ["importer"]),
                ("both", ["importer", "exporter"])]
    only = os.environ.get("IPC_ATTEMPTS")
    for name, who in [a for a in attempts if only is None or a[0] in only.split(",")]:
        suspend = {w: raw(pids[w], "suspend") for w in who}
        states = {w: raw(pids[w], "state") for w in who}
        # Back to running whatever the suspend left: restore + unlock, or unlock alone.
        resume = {w: raw(pids[w], "resume" if states[w] == "CHECKPOINTED" else "unlock")
                  for w in reversed(who) if states[w] in ("CHECKPOINTED", "LOCKED")}
        after = {w: raw(pids[w], "state") for w in who}
        print(json.dumps({"check": "ipc checkpoint", "attempt": name, "suspend": suspend,
                          "suspendedStates": states, "resume": resume, "statesAfter": after,
                          "intact": intact()}), flush=True)
    commands.put("stop")
    child.join(timeout=30)
    if child.is_alive():
        child.kill()


if __name__ == "__main__":
    main()
