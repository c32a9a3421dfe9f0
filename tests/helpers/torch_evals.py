#!/usr/bin/env python3
"""An unmodified PyTorch script whose training loop keeps the GPU busy and which evaluates the way
scripts often do: halfway through its steps and again after the last one, many small batches,
each read back with .item(), the host pacing the GPU (tests/helpers/capture_gpu.sh runs it under
`ampprobe run --torch`). The report's gpu-idle and h2d-copies rules judge the training loop, not
the evaluations: the database must hold no gpu-idle warning, while the evaluations alone would
make the GPU idle most of its time, and the step after the mid-run evaluation must not hold it
(the bridge starts that step where the evaluation's last forward ended).
Prints the steps trained and the evaluations' batches.
"""
import time

import torch
import torch.nn as nn


def evaluate(model, dev, batches):
    """The mean output magnitude over `batches` small batches, each uploaded from pageable
    memory and read back at once."""
    model.eval()
    total = 0.0
    with torch.no_grad():
        for _ in range(batches):
            xb = torch.randn(8, 4096).to(dev)  # a pageable upload a batch
            total += model(xb).float().abs().mean().item()
            time.sleep(0.0005)  # the host's own work between batches
    model.train()
    return total / batches


def main():
    torch.manual_seed(0)
    dev = "cuda"
    model = nn.Sequential(nn.Linear(4096, 8192), nn.GELU(), nn.Linear(8192, 4096)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler("cuda")
    x = torch.randn(4096, 4096, device=dev)
    steps, mid, final = 20, 150, 300
    for i in range(steps):
        if i == steps // 2:
            evaluate(model, dev, mid)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).float().pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
    score = evaluate(model, dev, final)
    print("trained", steps, "steps; evaluated", mid, "batches after step", steps // 2 - 1,
          "and", final, "after the last:", round(score, 4))


if __name__ == "__main__":
    main()
