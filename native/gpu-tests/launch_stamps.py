"""libvgpu.so stamps every launch in the container's own region (docs/agent.md, "Compute fence"):
checked on a real GPU through PyTorch, for plain launches and for a CUDA graph's replays.

  python3 launch_stamps.py LIBVGPU

A PyTorch process under libvgpu.so (a ledger, a region, a 25 % share) runs matmuls, then only
graph replays, then nothing; after each phase it prints, and this script reads from outside,
the region's `last_launch_ns` for GPU 0, the process's own slot's `last_launch_s` and the ledger
member's `last_kernel_ns`. Prints one JSON line per phase.
"""
import json, os, shutil, struct, subprocess, sys, time

WORKER = r'''
import sys, time, torch
a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
def phase(name):
    torch.cuda.synchronize(); print(name, flush=True); sys.stdin.readline()
for _ in range(50): torch.mm(a, a)
phase("matmul")
out = torch.empty_like(a); s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    torch.mm(a, a, out=out)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    for _ in range(5): torch.mm(a, a, out=out)
phase("captured")
for _ in range(20): g.replay()
phase("graph")
time.sleep(0.2)
phase("idle")
'''

DEVICES_OFFSET, DEVICE_SIZE, LAST_LAUNCH = 256, 128, 72
SLOTS_OFFSET, SLOT_SIZE, MAX_SLOTS = 256 + 128 * 16, 144, 1024
LEDGER_HEADER, MEMBER_SIZE, LAST_KERNEL = 128, 128, 72


def region_stamp(path):
    b = open(path, "rb").read()
    count = struct.unpack_from("<I", b, 64)[0]
    for i in range(count):
        base = DEVICES_OFFSET + i * DEVICE_SIZE
        if struct.unpack_from("<I", b, base + 16)[0] == 1:
            return struct.unpack_from("<Q", b, base + LAST_LAUNCH)[0]
    return None


def slot_stamp(path, pid):
    """The process's own slot: the CLOCK_MONOTONIC second of its last launch."""
    b = open(path, "rb").read()
    for i in range(MAX_SLOTS):
        base = SLOTS_OFFSET + i * SLOT_SIZE
        if struct.unpack_from("<i", b, base)[0] == pid:
            return struct.unpack_from("<I", b, base + 4)[0]
    return None


def ledger_stamp(folder, shard):
    for name in os.listdir(folder):
        if not name.startswith("GPU-"): continue
        b = open(os.path.join(folder, name), "rb").read()
        for i in range(32):
            base = LEDGER_HEADER + i * MEMBER_SIZE
            if b[base:base + 48].split(b"\0")[0].decode() == shard:
                return struct.unpack_from("<Q", b, base + LAST_KERNEL)[0]
    return None


def main():
    lib = os.path.abspath(sys.argv[1])
    work = f"/dev/shm/gs-stamps-{os.getpid()}"; shutil.rmtree(work, ignore_errors=True); os.makedirs(work)
    env = {**os.environ, "LD_PRELOAD": lib, "GPUSHARDS_LEDGER_DIR": work, "GPUSHARDS_SHARD_ID": "s",
           "GPUSHARDS_REGION_PATH": f"{work}/region", "GPUSHARDS_COMPUTE_SHARE": "25"}
    p = subprocess.Popen([sys.executable, "-c", WORKER], env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    before = None
    try:
        for _ in range(4):
            name = p.stdout.readline().strip()
            now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            region, ledger = region_stamp(f"{work}/region"), ledger_stamp(work, "s")
            slot = slot_stamp(f"{work}/region", p.pid)
            print(json.dumps({"phase": name, "region_last_launch_ms_ago": None if not region else round((now - region) / 1e6, 2),
                              "ledger_last_kernel_ms_ago": None if not ledger else round((now - ledger) / 1e6, 2),
                              "region_advanced": before is not None and region is not None and region > before,
                              "slot_second": slot, "now_second": now // 1_000_000_000}), flush=True)
            before = region
            p.stdin.write("\n"); p.stdin.flush()
        p.wait(timeout=30)
    finally:
        p.kill(); shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
