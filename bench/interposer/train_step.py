"""Time of one training step of a small bf16 transformer, native or interposed (the parent sets
LD_PRELOAD). Prints {"ms_per_step": ...}: median of 50 steps after 10 warm-up steps."""

import json
import statistics
import time

import torch

torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096, batch_first=True)
model = torch.nn.TransformerEncoder(layer, num_layers=6).cuda().to(torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
batch = torch.randn(16, 512, 1024, device="cuda", dtype=torch.bfloat16)


def step():
    optimizer.zero_grad(set_to_none=True)
    loss = model(batch).float().pow(2).mean()
    loss.backward()
    optimizer.step()


times = []
for i in range(60):
    torch.cuda.synchronize()
    start = time.perf_counter()
    step()
    torch.cuda.synchronize()
    if i >= 10:
        times.append((time.perf_counter() - start) * 1000)
print(json.dumps({"ms_per_step": statistics.median(times), "min_ms": min(times)}))
