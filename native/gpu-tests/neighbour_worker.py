#!/usr/bin/env python3
"""The two shards of the neighbour scenario (issue #31), for neighbour_agent.mjs.

  python3 neighbour_worker.py train JOIN CAP_MIB STEP_MIB STEPS ARM_MIB
  python3 neighbour_worker.py grab JOIN

Both join their shard (write their PID into JOIN, a cgroup.procs file), import torch once and
then fork a child per trial on a line from stdin, so CUDA is first touched in the child and a
trial costs no interpreter start. The parent never touches CUDA.

train (shard N, under libvgpu.so): on "trial <i>", a child runs STEPS training steps of a small
MLP; every step also keeps STEP_MIB more of activation-like buffers, freed back to the driver
when it holds about 90 % of CAP_MIB (so the caching allocator keeps asking the driver, inside
the cap). Once it holds ARM_MIB it prints "armed": the harness then lets the other shard grab
the card. A refused allocation is PyTorch's OutOfMemoryError: the job would have died inside
its cap.
  armed <i> <ns>
  step <i> <step> <start_ns> <end_ns> <held_mib>
  oom <i> <step> <ns> <message>
  done <i> <steps> <ooms>

grab (shard O, without libvgpu.so): on "go <i>", a child takes everything the card has free
in one allocation and holds it (the agent's fence kills it).
  grabbing <i> <pid> <start_ns>   (before the allocation: the fence may kill it before the next line)
  grabbed <i> <pid> <bytes> <start_ns> <end_ns>
  gone <i> <pid> <signal>
"""
import os
import sys
import time

import torch  # before any fork; CUDA only in the children

MiB = 1 << 20


def say(line):
    os.write(1, (line + "\n").encode())


def join(path):
    with open(path, "w") as f:
        f.write(str(os.getpid()))


def train(trial, cap_mib, step_mib, steps, arm_mib):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(2048, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 2048)
    ).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(256, 2048, device="cuda")
    kept = []
    ooms = 0
    armed = False
    limit = int(cap_mib * 0.9) // step_mib
    for i in range(steps):
        start = time.monotonic_ns()
        try:
            loss = model(x).float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            kept.append(torch.empty(step_mib * MiB, dtype=torch.uint8, device="cuda"))
            if len(kept) >= limit:
                del kept[: len(kept) // 2]
                torch.cuda.empty_cache()  # back to the driver: the next growth asks it again
            torch.cuda.synchronize()
        except torch.OutOfMemoryError as error:
            ooms += 1
            say(f"oom {trial} {i} {time.monotonic_ns()} {str(error).splitlines()[0][:120]}")
            del kept[: len(kept) // 2]
            torch.cuda.empty_cache()
            continue
        held = len(kept) * step_mib
        say(f"step {trial} {i} {start} {time.monotonic_ns()} {held}")
        if not armed and held >= arm_mib:
            armed = True
            say(f"armed {trial} {time.monotonic_ns()}")
    say(f"done {trial} {steps} {ooms}")


def grab(trial):
    torch.cuda.init()
    free, _ = torch.cuda.mem_get_info()
    take = free - 64 * MiB
    start = time.monotonic_ns()
    # Said before the allocation: the fence may kill this process before it can say "grabbed".
    say(f"grabbing {trial} {os.getpid()} {start}")
    # The neighbour keeps growing: what was free a moment ago may not be; take a little less.
    while True:
        try:
            held = torch.empty(take, dtype=torch.uint8, device="cuda")
            break
        except torch.OutOfMemoryError:
            take -= 128 * MiB
    torch.cuda.synchronize()
    say(f"grabbed {trial} {os.getpid()} {take} {start} {time.monotonic_ns()}")
    time.sleep(60)  # the agent's fence kills it long before
    del held


role = sys.argv[1]
join(sys.argv[2])
say(f"joined {os.getpid()}")
for line in sys.stdin:
    words = line.split()
    if not words:
        continue
    trial = int(words[1])
    child = os.fork()
    if child == 0:
        try:
            if role == "train":
                train(trial, int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
            else:
                grab(trial)
        except BaseException as error:  # said, so that the harness does not wait for nothing
            say(f"error {trial} {type(error).__name__}: {str(error).splitlines()[0][:200]}")
        finally:
            os._exit(0)
    _, status = os.waitpid(child, 0)
    if role == "grab":
        say(f"gone {trial} {child} {os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0}")
    else:
        say(f"exit {trial} {os.waitstatus_to_exitcode(status)}")
