#!/usr/bin/env python3
"""One bursty tenant of an elastic shard, for elastic_agent.mjs (a PyTorch process on a GPU).

  python3 elastic_worker.py JOIN SIZE_MIB BURSTS IDLE_S BURST_S SEED

Joins its shard first (writes its PID into JOIN when it is a cgroup.procs file), prints
"joined <pid>", waits for a line on stdin (the harness says go once the shard is placed), then takes
SIZE_MIB of data on the GPU, filled from SEED, and remembers its checksum. Then, BURSTS times:
sleeps IDLE_S without a CUDA call (the agent may suspend the shard meanwhile), then computes
on its own data for about BURST_S seconds. The first CUDA call of a burst is what wakes a
suspended shard: libvgpu.so holds it until the agent has resumed the shard, so its latency is
the wake latency as the program sees it. After each burst the data's checksum must be the one
it started with.

Lines (CLOCK_MONOTONIC ns; the harness reads them):
  joined <pid>                          in its shard, before any CUDA call
  ready <pid> <bytes> <ns>
  wake <i> <start_ns> <end_ns>          the burst's first CUDA call, issued and returned
  burst <i> <start_ns> <end_ns> <ok>    the whole burst, and whether the data was intact
  done <pid>
"""
import os
import sys
import time

import torch

join, size_mib, bursts, idle_s, burst_s, seed = (
    sys.argv[1],
    int(sys.argv[2]),
    int(sys.argv[3]),
    float(sys.argv[4]),
    float(sys.argv[5]),
    int(sys.argv[6]),
)


def say(line):
    os.write(1, (line + "\n").encode())


CHUNK_WORDS = 16 << 20  # 64 MiB of int32 at a time: the int64 copies stay small beside the cap


def checksum(data):
    # int64 sums of int32 words, chunk by chunk, each weighted by its place: exact, and any changed
    # byte changes it (with overwhelming odds), without an int64 copy of the whole tensor.
    words = data.view(torch.int32)
    total = 0
    for n, start in enumerate(range(0, words.numel(), CHUNK_WORDS)):
        chunk = words[start : start + CHUNK_WORDS].to(torch.int64)
        total ^= (int(chunk.sum().item()) * (n + 1)) ^ int((chunk[::4093] * 2654435761).sum().item())
        del chunk
    return total


pid = os.getpid()
if join.endswith("cgroup.procs"):
    with open(join, "w") as f:
        f.write(str(pid))
say(f"joined {pid}")
sys.stdin.readline()

generator = torch.Generator(device="cuda").manual_seed(seed)
data = torch.randint(-(2**31), 2**31 - 1, (size_mib * (1 << 20) // 4,), dtype=torch.int32, device="cuda", generator=generator)
work = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
expected = checksum(data)
torch.cuda.synchronize()
say(f"ready {pid} {data.numel() * 4} {time.monotonic_ns()}")

for i in range(bursts):
    time.sleep(idle_s)
    start = time.monotonic_ns()
    probe = torch.ones(1, device="cuda")  # the first CUDA call since the idle time: a small copy
    probe.item()
    say(f"wake {i} {start} {time.monotonic_ns()}")
    until = time.monotonic() + burst_s
    acc = work
    while time.monotonic() < until:
        for _ in range(8):
            acc = (acc @ work).clamp_(-1, 1)
        torch.cuda.synchronize()
    ok = checksum(data) == expected
    say(f"burst {i} {start} {time.monotonic_ns()} {int(ok)}")

say(f"done {pid}")
