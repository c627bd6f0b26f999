#!/usr/bin/env python3
"""One shard's trials for bench/host-fence/h100.mjs (a PyTorch process past its cap, on a GPU).

  python3 h100_worker.py SHARD_PROCS_OR_SHADOW TRIALS CAP_BYTES TOLERANCE_BYTES INTERVAL_MS

Imports torch once, then per trial forks a child (CUDA is first touched in the child), which
joins the shard (writes its PID into the shard's cgroup.procs, or waits for the agent's shadow
/proc entry), takes a base allocation under the cap, waits a random part of the sampling
interval, and allocates past cap + tolerance in one cudaMalloc; it prints CLOCK_MONOTONIC
nanoseconds before and after that allocation and then holds it. The parent reaps it and prints
how it ended. Lines: "trial <i> pid <pid>", "before <pid> <ns>", "after <pid> <ns>",
"exit <pid> <ns> <signal>".
"""
import os
import random
import signal
import sys
import time

import torch  # imported before any fork; CUDA is initialised only in the children

join, trials, cap, tolerance, interval_ms = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
MiB = 1 << 20


def say(line):
    os.write(1, (line + "\n").encode())


def child():
    pid = os.getpid()
    if join.endswith("cgroup.procs"):
        with open(join, "w") as f:
            f.write(str(pid))
    else:
        while not os.path.exists(os.path.join(join, str(pid), "cgroup")):
            time.sleep(0.001)
    torch.cuda.init()
    base = torch.empty(cap // 2, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    time.sleep(random.random() * interval_ms / 1000)
    say(f"before {pid} {time.monotonic_ns()}")
    over = torch.empty(cap // 2 + tolerance + 512 * MiB, dtype=torch.uint8, device="cuda")
    say(f"after {pid} {time.monotonic_ns()}")
    time.sleep(30)  # the agent kills it long before
    say(f"survived {pid}")
    os._exit(3)


if trials == 0:  # a holder for the CPU measurement: joins, takes a quarter of the cap, holds
    pid = os.getpid()
    if join.endswith("cgroup.procs"):
        with open(join, "w") as f:
            f.write(str(pid))
    say(f"trial 0 pid {pid}")
    while not join.endswith("cgroup.procs") and not os.path.exists(os.path.join(join, str(pid), "cgroup")):
        time.sleep(0.001)
    held = torch.empty(cap // 4, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    say(f"held {pid}")
    time.sleep(120)
    os._exit(0)

for i in range(trials):
    pid = os.fork()
    if pid == 0:
        try:
            child()
        finally:
            os._exit(4)
    say(f"trial {i} pid {pid}")
    _, status = os.waitpid(pid, 0)
    ended = time.monotonic_ns()
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
    say(f"exit {pid} {ended} {signal.Signals(sig).name if sig else 'code' + str(os.WEXITSTATUS(status))}")
