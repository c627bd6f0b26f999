"""One rank of a multi-GPU workload (mg_pair.py starts them; results in RESULTS.md).

Environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT as torchrun sets them, GS_DEVICE (the CUDA
ordinal this rank uses, as it sees them; default RANK), GS_WORKLOAD (nccl, ddp, tp, meminfo), and
GS_JOIN / GS_CONTAINER to join a shard before CUDA is touched (mg_cuda.join_shard). NVLink multicast
stays off (NCCL_NVLS_ENABLE=0 and the rest are set by the caller and checked here).

Protocol: prints one JSON line {"ready": ...} once set up, then for each line on stdin
{"op": ...} one JSON line with what the op measured; {"op": "quit"} ends it.

  nccl     all_reduce bus bandwidth per size (nccl-tests' formula: algbw x 2(n-1)/n), CUDA events
  ddp      DistributedDataParallel training of a small MLP from fixed seeds; steps, losses, a hash of
           the parameters (equal across ranks, and to native when the data and kernels are)
  tp       tensor-parallel decoding of a small transformer built from a config with random weights
           (column/row-parallel linears, all_reduce after attention and MLP), the decode step captured
           in a CUDA graph as inference servers do; greedy tokens and per-token time
  meminfo  what torch.cuda.mem_get_info says at each stage of bringing a process group up
"""
import hashlib
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mg_cuda import join_shard  # noqa: E402

for var, want in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    if os.environ.get(var) != want:
        sys.exit(f"{var} must be {want} here (NVLink multicast stays off)")
if os.environ.get("GS_JOIN"):
    join_shard(os.environ["GS_JOIN"], os.environ["GS_CONTAINER"])

if os.environ["GS_WORKLOAD"] == "ddp":
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
# GS_DRY_CPU=1: the same code on the CPU with gloo (no events, graphs or caps), to try the workloads'
# logic on a machine without a GPU before spending device time.
DRY = os.environ.get("GS_DRY_CPU") == "1"
DEVICE = "cpu" if DRY else "cuda"
DEV = int(os.environ.get("GS_DEVICE", RANK))
WORKLOAD = os.environ["GS_WORKLOAD"]
MiB = 1 << 20


def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def told():
    if DRY:
        return {}
    free, total = torch.cuda.mem_get_info()
    return {"free_mib": round(free / MiB, 1), "total_mib": round(total / MiB, 1)}


def sync():
    if not DRY:
        torch.cuda.synchronize()


class Timer:
    """Milliseconds of GPU time from now to ms() (CUDA events), or of wall time on the CPU."""

    def __init__(self):
        if DRY:
            self.t = time.perf_counter()
        else:
            self.start, self.end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.start.record()

    def ms(self):
        if DRY:
            return (time.perf_counter() - self.t) * 1000
        self.end.record()
        self.end.synchronize()
        return self.start.elapsed_time(self.end)


def refused_past_cap():
    """Whether one allocation of what the shard says is free plus 1 GiB is refused (a capped rank)."""
    free, _ = torch.cuda.mem_get_info()
    try:
        x = torch.empty(free + 1024 * MiB, dtype=torch.uint8, device="cuda")
        del x
        return False
    except torch.OutOfMemoryError:
        return True
    finally:
        torch.cuda.empty_cache()


# ---- nccl ---------------------------------------------------------------------------------------

def nccl_setup(args):
    sizes = args.get("sizes", [64 * MiB, 256 * MiB, 1024 * MiB])
    bufs = {s: torch.ones(s // 4, dtype=torch.float32, device=DEVICE) for s in sizes}
    x = torch.full((1024,), float(RANK + 1), device=DEVICE)
    dist.all_reduce(x)
    sync()
    correct = bool(torch.all(x == WORLD * (WORLD + 1) / 2).item())
    return {"bufs": bufs}, {"sum_correct": correct}


def nccl_run(state, op):
    out = {}
    for size, buf in state["bufs"].items():
        for _ in range(op.get("warmup", 5)):
            dist.all_reduce(buf)
        sync()
        iters = op.get("iters", 20)
        timer = Timer()
        for _ in range(iters):
            dist.all_reduce(buf)
        secs = timer.ms() / 1000 / iters
        algbw = size / secs / 1e9
        out[str(size)] = {"us": round(secs * 1e6, 1), "algbw_gbs": round(algbw, 2),
                          "busbw_gbs": round(algbw * 2 * (WORLD - 1) / WORLD, 2)}
    return out


# ---- ddp ----------------------------------------------------------------------------------------

def ddp_setup(args):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(1234)  # the same initial weights on every rank and in every group
    width, depth = args.get("width", 1024), args.get("depth", 4)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width)]
    model = torch.nn.Sequential(*layers).to(DEVICE)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=None if DRY else [torch.cuda.current_device()])
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
    gen = torch.Generator(device=DEVICE).manual_seed(100 + RANK)  # each rank its own data
    target = torch.nn.Linear(width, width).to(DEVICE)  # a fixed function to learn
    state = {"model": model, "ddp": ddp, "opt": opt, "gen": gen, "target": target, "width": width, "step": 0}
    return state, {"params": sum(p.numel() for p in model.parameters())}


def params_hash(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def ddp_run(state, op):
    ddp, opt, gen, width = state["ddp"], state["opt"], state["gen"], state["width"]
    losses = []
    sync()
    t0 = time.perf_counter()
    for i in range(op["steps"]):
        x = torch.randn(64, width, device=DEVICE, generator=gen)
        with torch.no_grad():
            y = state["target"](x)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        state["step"] += 1
        if state["step"] % 50 == 0:
            losses.append(round(loss.item(), 6))
    sync()
    secs = time.perf_counter() - t0
    return {"steps": state["step"], "ms_per_step": round(secs * 1000 / op["steps"], 3), "losses": losses,
            "params_hash": params_hash(state["model"])}


# ---- tp -----------------------------------------------------------------------------------------

CONFIG = {"layers": 8, "d_model": 2048, "heads": 16, "ffn": 5632, "vocab": 32000, "max_seq": 256, "batch": 8}


class TPDecoder:
    """A decoder-only transformer split over the group: attention heads and MLP columns per rank,
    the output projections row-parallel with an all_reduce after each, embedding and head replicated.
    Weights come from generators seeded per (layer, rank), so every group of the same size builds the
    same model. Static buffers (token, position, KV caches) make the decode step graph-capturable."""

    def __init__(self, cfg):
        assert cfg["heads"] % WORLD == 0 and cfg["ffn"] % WORLD == 0
        self.cfg = cfg
        d, h = cfg["d_model"], cfg["heads"]
        self.hd = d // h
        self.lh = h // WORLD
        lf = cfg["ffn"] // WORLD
        dt = torch.float32 if DRY else torch.bfloat16  # gloo reduces no bfloat16

        def rand(seed, *shape, scale):
            g = torch.Generator(device=DEVICE).manual_seed(seed)
            return (torch.randn(*shape, generator=g, device=DEVICE, dtype=torch.float32) * scale).to(dt)

        self.embed = rand(1, cfg["vocab"], d, scale=1.0)
        self.head = rand(2, d, cfg["vocab"], scale=1 / math.sqrt(d))
        self.layers = []
        for i in range(cfg["layers"]):
            s = 1000 * (i + 1) + 10 * RANK
            self.layers.append({
                "qkv": rand(s + 1, d, 3 * self.lh * self.hd, scale=1 / math.sqrt(d)),
                "o": rand(s + 2, self.lh * self.hd, d, scale=1 / math.sqrt(d)),
                "gate_up": rand(s + 3, d, 2 * lf, scale=1 / math.sqrt(d)),
                "down": rand(s + 4, lf, d, scale=1 / math.sqrt(cfg["ffn"])),
                "k": torch.zeros(cfg["batch"], self.lh, cfg["max_seq"], self.hd, device=DEVICE, dtype=dt),
                "v": torch.zeros(cfg["batch"], self.lh, cfg["max_seq"], self.hd, device=DEVICE, dtype=dt),
            })
        self.token = torch.zeros(cfg["batch"], dtype=torch.long, device=DEVICE)
        self.pos = torch.zeros((), dtype=torch.long, device=DEVICE)
        self.slots = torch.arange(cfg["max_seq"], device=DEVICE)

    @staticmethod
    def norm(x):
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype)

    def step(self):
        """One token for every sequence of the batch at self.pos: writes the KV caches, returns the
        next tokens (greedy)."""
        b, lh, hd = self.cfg["batch"], self.lh, self.hd
        x = self.embed[self.token]
        visible = (self.slots <= self.pos).view(1, 1, 1, -1)
        for L in self.layers:
            q, k, v = (self.norm(x) @ L["qkv"]).view(b, 3, lh, hd).unbind(1)
            L["k"].index_copy_(2, self.pos.view(1), k.unsqueeze(2))
            L["v"].index_copy_(2, self.pos.view(1), v.unsqueeze(2))
            scores = (q.unsqueeze(2) @ L["k"].transpose(-1, -2)) / math.sqrt(hd)
            scores = scores.float().masked_fill(~visible, float("-inf")).softmax(-1).to(x.dtype)
            attn = (scores @ L["v"]).reshape(b, lh * hd) @ L["o"]
            dist.all_reduce(attn)
            x = x + attn
            gate, up = (self.norm(x) @ L["gate_up"]).chunk(2, dim=-1)
            mlp = (torch.nn.functional.silu(gate) * up) @ L["down"]
            dist.all_reduce(mlp)
            x = x + mlp
        return (self.norm(x) @ self.head).argmax(-1)

    def generate(self, prompt, n, replay=None):
        """Feeds the prompt then n greedy tokens, one decode step at a time (eager or graph replay);
        returns the generated tokens and the decode steps' time per token."""
        out = []
        times = []
        for i in range(len(prompt) + n):
            if i < len(prompt):
                self.token.copy_(prompt[i])
            self.pos.fill_(i)
            timer = Timer()
            nxt = replay() if replay else self.step()
            if i >= len(prompt):
                times.append(timer.ms())
                out.append(nxt.clone())
            if i >= len(prompt) - 1:
                self.token.copy_(nxt)
        return torch.stack(out, 1), times


def tp_setup(args):
    cfg = {**CONFIG, **args.get("config", {})}
    model = TPDecoder(cfg)
    prompt = torch.randint(0, cfg["vocab"], (16, cfg["batch"]), device=DEVICE,
                           generator=torch.Generator(device=DEVICE).manual_seed(7))
    eager, eager_ms = model.generate(prompt, 16)  # also warms NCCL up before the capture
    if DRY:
        return {"model": model, "prompt": prompt, "replay": None}, {"config": cfg, "graph_equals_eager": True}
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            model.step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            captured = model.step()
    except Exception as e:  # reported, and the rest measured eagerly
        torch.cuda.synchronize()
        return {"model": model, "prompt": prompt, "replay": None}, {
            "config": cfg, "graph_equals_eager": False, "graph_error": f"{type(e).__name__}: {e}"[:400]}

    def replay():
        graph.replay()
        return captured

    replayed, _ = model.generate(prompt, 16, replay)
    params = sum(t.numel() for t in [model.embed, model.head]) + sum(
        L[k].numel() for L in model.layers for k in ("qkv", "o", "gate_up", "down"))
    state = {"model": model, "prompt": prompt, "replay": replay}
    return state, {"config": cfg, "params_this_rank": params, "graph_equals_eager": bool(torch.equal(eager, replayed)),
                   "eager_ms_per_token": round(sorted(eager_ms)[len(eager_ms) // 2], 3)}


def tp_run(state, op):
    tokens, times = state["model"].generate(state["prompt"], op.get("tokens", 128), state["replay"])
    times.sort()
    return {"tokens_hash": hashlib.sha256(tokens.cpu().numpy().tobytes()).hexdigest()[:16],
            "first_tokens": tokens[0, :8].tolist(), "ms_per_token_p50": round(times[len(times) // 2], 4),
            "ms_per_token_p99": round(times[int(len(times) * 0.99)], 4),
            "tokens_per_s": round(state["model"].cfg["batch"] * 1000 / (sum(times) / len(times)), 1)}


# ---- meminfo ------------------------------------------------------------------------------------

def meminfo_run(state, op):
    """One stage of bringing a process group up; the caller reads NVML and the region after each."""
    stage = op["stage"]
    if stage == "context":
        torch.zeros(1, device=DEVICE)
    elif stage == "first_collective":
        x = torch.ones(1, device=DEVICE)
        dist.all_reduce(x)
        sync()
    elif stage == "tensor_256mib_all_reduce":
        state["t"] = torch.ones(64 * MiB, device=DEVICE)
        dist.all_reduce(state["t"])
        sync()
    elif stage == "after_empty_cache":
        state.pop("t", None)
        torch.cuda.empty_cache()
    import ctypes
    cu = ctypes.CDLL("libcuda.so.1")
    dev = ctypes.c_int(-1)
    rc = cu.cuCtxGetDevice(ctypes.byref(dev))
    return {"stage": stage, "told": told(), "torch_device": torch.cuda.current_device(), "ctx_device": dev.value,
            "ctx_rc": rc, "torch_reserved_mib": round(torch.cuda.memory_reserved() / MiB, 1)}


SETUP = {"nccl": nccl_setup, "ddp": ddp_setup, "tp": tp_setup}
RUN = {"nccl": nccl_run, "ddp": ddp_run, "tp": tp_run}


def main():
    args = json.loads(os.environ.get("GS_ARGS", "{}"))
    if not DRY:
        torch.cuda.set_device(DEV)
    if WORKLOAD == "meminfo":
        # The stages are the point: the process group comes up only when asked (lazily, as
        # init_process_group without device_id leaves NCCL's communicator until the first collective).
        state = {}
        say({"ready": {"rank": RANK, "pid": os.getpid()}})
        for line in sys.stdin:
            op = json.loads(line)
            if op["op"] == "quit":
                break
            if op["stage"] == "init_process_group":
                dist.init_process_group("nccl", rank=RANK, world_size=WORLD)
            say(meminfo_run(state, op))
        if dist.is_initialized():
            dist.destroy_process_group()
        return
    if DRY:
        dist.init_process_group("gloo", rank=RANK, world_size=WORLD)
    else:
        dist.init_process_group("nccl", rank=RANK, world_size=WORLD, device_id=torch.device("cuda", DEV))
    state, info = SETUP[WORKLOAD](args)
    sync()
    dist.barrier()
    say({"ready": {"rank": RANK, "pid": os.getpid(), "device": DEV, "told": told(), **info}})
    for line in sys.stdin:
        op = json.loads(line)
        if op["op"] == "quit":
            break
        if op["op"] == "save":  # ddp: the parameters, for a comparison when the hashes differ
            if RANK == 0:
                torch.save([p.detach().cpu() for p in state["model"].parameters()], op["path"])
            say({"saved": RANK == 0})
            continue
        if op["op"] == "told":
            say(told())
            continue
        if op["op"] == "refused_past_cap":
            say({"refused": refused_past_cap(), "told": told()})
            continue
        say(RUN[WORKLOAD](state, op))
    if WORKLOAD == "tp":
        # No destroy_process_group after a captured graph: on the H200s (2026-11-28) a rank
        # asked to quit waited there for its peer until it was killed.
        sys.stdout.flush()
        os._exit(0)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
