"""A process of a shard that takes memory when told (mg_agent.mjs drives it; no PyTorch).

  GS_JOIN=... GS_CONTAINER=... python3 mg_holder.py ORDINAL

Joins the shard (mg_cuda.join_shard) before CUDA, makes ORDINAL's primary context current, prints
{"ready": pid, "uuid": ...}, then answers one JSON line per command on stdin:
  alloc BYTES   {"ok": true} or {"ok": false, "code": CUDA error}
  info          {"free": ..., "total": ...} (cuMemGetInfo: the shard's view under libvgpu.so)
It holds what it took until stdin closes or it is killed.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mg_cuda import Cuda, join_shard  # noqa: E402

if os.environ.get("GS_JOIN"):
    join_shard(os.environ["GS_JOIN"], os.environ["GS_CONTAINER"])
ordinal = int(sys.argv[1])
cuda = Cuda()
cuda.use(ordinal)
held = []


def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


say({"ready": os.getpid(), "uuid": cuda.uuid(ordinal)})
for line in sys.stdin:
    word, _, arg = line.strip().partition(" ")
    if word == "alloc":
        ptr, code = cuda.try_alloc(int(arg))
        if ptr is not None:
            held.append(ptr)
        say({"ok": ptr is not None, "code": code})
    elif word == "info":
        free, total = cuda.mem_get_info()
        say({"free": free, "total": total})
    else:
        say({"error": f"unknown command {word!r}"})
