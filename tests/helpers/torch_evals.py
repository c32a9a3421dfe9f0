#!/usr/bin/env python3
"""An unmodified PyTorch script whose training loop keeps the GPU busy and which then evaluates
the way scripts often end: many small batches, each read back with .item(), the host pacing the
GPU (tests/helpers/capture_gpu.sh runs it under `ampprobe run --torch`). The report's gpu-idle and
h2d-copies rules judge the training loop, not what follows its last step: the database must hold
no gpu-idle warning, while the evaluation alone would make the GPU idle most of its time.
Prints the steps trained and the evaluation's batches.
"""
import time

import torch
import torch.nn as nn


def main():
    torch.manual_seed(0)
    dev = "cuda"
    model = nn.Sequential(nn.Linear(4096, 8192), nn.GELU(), nn.Linear(8192, 4096)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler("cuda")
    x = torch.randn(4096, 4096, device=dev)
    steps = 20
    for _ in range(steps):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).float().pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
    model.eval()
    batches = 300
    total = 0.0
    with torch.no_grad():
        for _ in range(batches):
            xb = torch.randn(8, 4096).to(dev)  # a pageable upload a batch
            total += model(xb).float().abs().mean().item()
            time.sleep(0.0005)  # the host's own work between batches
    print("trained", steps, "steps; evaluated", batches, "batches:", round(total / batches, 4))


if __name__ == "__main__":
    main()
