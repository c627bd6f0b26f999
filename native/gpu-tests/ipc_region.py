#!/usr/bin/env python3
"""Does libvgpu.so name a CUDA IPC importer in the region on a real GPU (issue #30, point 4)?

  python3 ipc_region.py LIBVGPU [MIB]

Runs an exporter and an importer under LIBVGPU (LD_PRELOAD, a region file in a temporary folder,
CUDA_DEVICE_MEMORY_LIMIT=16g), as a shard's processes run. The exporter allocates MIB (default
256) on GPU 0 and passes the tensor to the importer with torch.multiprocessing: PyTorch's own CUDA
IPC path (the consumer opens the handle through the CUDA runtime, which reaches the driver's
cuIpcOpenMemHandle through cuGetProcAddress). The exporter reads the region file between steps
and prints one JSON line per step: whether the importer's slot has its ipc_importers bit
(gpushards_region.h), and whether the exporter's has. Expected: the importer named once it holds
the tensor, not after it let go of it (PyTorch closes the handle once the last storage that uses
it is freed), the exporter never. Last line: {"check": "ipc region", "ok": true|false}. With IPC_REGION_HOOK (ipc_agent.mjs sets it,
running the exporter in a container's cgroup), each step also runs the hook and holds the agent's
answer to it: the suspend refused exactly while the importer holds the tensor.
"""
import gc
import json
import os
import shlex
import struct
import subprocess
import sys
import tempfile

MAGIC = 0x3144524853555047  # "GPUSHRD1"
IPC_IMPORTERS = 96  # header offset: 4 little-endian uint64, bit s = slot s
IPC_UNLISTED = 68


def region_view(path, pids):
    """{pid: True/False (its slot's bit), None (no slot)} and the unlisted flag, read as the agent reads it."""
    with open(path, "rb") as f:
        data = f.read()
    magic, version = struct.unpack_from("<QI", data, 0)
    if magic != MAGIC:
        raise SystemExit(f"{path} is not a GPU Shards region (magic {magic:#x})")
    max_slots, _, slot_size = struct.unpack_from("<III", data, 28)
    slots_offset = struct.unpack_from("<Q", data, 48)[0]
    words = struct.unpack_from("<4Q", data, IPC_IMPORTERS)
    unlisted = struct.unpack_from("<I", data, IPC_UNLISTED)[0] != 0
    named = {pid: None for pid in pids}
    for slot in range(max_slots):
        pid = struct.unpack_from("<i", data, slots_offset + slot * slot_size)[0]
        if pid in named:
            named[pid] = slot < 256 and bool((words[slot // 64] >> (slot % 64)) & 1)
    return {"version": version, "named": named, "unlisted": unlisted}


def importer(tensors, replies, commands):
    shared = tensors.get()  # the CUDA IPC open happens here
    replies.put(("opened", os.getpid(), int(shared[:4].sum().item())))
    for command in iter(commands.get, "stop"):
        if command == "drop":
            del shared
            gc.collect()
            import torch

            torch.cuda.synchronize()
            replies.put(("dropped", os.getpid(), 0))


def exporter(mib):
    import torch
    import torch.multiprocessing as mp

    region = os.environ["GPUSHARDS_REGION_PATH"]
    mp.set_start_method("spawn")
    data = torch.ones(mib * 2**20 // 4, dtype=torch.float32, device="cuda")
    tensors, replies, commands = mp.Queue(), mp.Queue(), mp.Queue()
    child = mp.Process(target=importer, args=(tensors, replies, commands))
    child.start()
    tensors.put(data)
    steps = []

    def step(name, want_importer):
        kind, pid, _ = replies.get(timeout=60)
        view = region_view(region, [os.getpid(), pid])
        line = {"check": "ipc region", "step": name, "reply": kind, "importer": pid, "exporter": os.getpid(),
                "importerNamed": view["named"][pid], "exporterNamed": view["named"][os.getpid()],
                "unlisted": view["unlisted"], "want": want_importer}
        line["ok"] = line["importerNamed"] is want_importer and line["exporterNamed"] is False
        hook = os.environ.get("IPC_REGION_HOOK")
        if hook:
            # The agent's own answer (ipc_agent.mjs): refused exactly while the importer holds it.
            answer = subprocess.run(shlex.split(hook), capture_output=True, text=True, check=False, timeout=60)
            verdict = json.loads(answer.stdout.strip().splitlines()[-1]) if answer.stdout.strip() else {
                "agent": "error", "reason": answer.stderr.strip()[-300:]}
            line.update(verdict)
            line["ok"] = line["ok"] and (verdict["agent"] == "refused") is want_importer
        steps.append(line["ok"])
        print(json.dumps(line), flush=True)

    step("the importer holds the tensor", True)
    commands.put("drop")
    step("the importer let go of it", False)
    commands.put("stop")
    child.join(60)
    print(json.dumps({"check": "ipc region", "torch": torch.__version__, "ok": all(steps)}), flush=True)
    return 0 if all(steps) else 1


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--exporter":
        return exporter(int(sys.argv[2]))
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    library = os.path.abspath(sys.argv[1])
    mib = int(sys.argv[2]) if len(sys.argv) > 2 else 256
    with tempfile.TemporaryDirectory(prefix="gpushards-ipc-") as folder:
        env = dict(os.environ, LD_PRELOAD=library, GPUSHARDS_REGION_PATH=os.path.join(folder, "region"),
                   CUDA_DEVICE_MEMORY_LIMIT="16g", GPUSHARDS_LOG_LEVEL="info")
        return subprocess.run([sys.executable, os.path.abspath(__file__), "--exporter", str(mib)], env=env,
                              check=False, timeout=300).returncode


if __name__ == "__main__":
    sys.exit(main())
