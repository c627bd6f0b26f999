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
import sys

import torch
import torch.multiprocessing as mp

from checkpoint_moves import attempts, round_trip


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
    for name, who in attempts("IPC_ATTEMPTS"):
        moved = round_trip(pids, who)
        print(json.dumps({"check": "ipc checkpoint", "attempt": name, **moved, "intact": intact()}), flush=True)
    commands.put("stop")
    child.join(timeout=30)
    if child.is_alive():
        child.kill()


if __name__ == "__main__":
    main()
