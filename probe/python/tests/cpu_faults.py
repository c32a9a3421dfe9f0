#!/usr/bin/env python3
"""cpu_faults.py — the PyTorch bridge on a machine without a GPU: an MLP trained on the CPU under
CPU autocast, whose batch of step 3 carries a NaN (--healthy: it does not), for
`ampprobe run --torch` (run_gpu.sh runs it with CUDA_VISIBLE_DEVICES="", a laptop's view).

  python3 cpu_faults.py [--dtype bf16|fp16] [--healthy]

bf16 (CPU autocast's default) trains without a GradScaler; fp16 with torch.amp.GradScaler("cpu").
The report's first finding must be the NaN in the input data at layers.0, step 3
(check_report.py CASE nan), the healthy twin's none.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

FAULT_STEP = 3


class MLP(nn.Module):
    def __init__(s, d=64, out=10):
        super().__init__()
        s.layers = nn.ModuleList([nn.Linear(d, d) for _ in range(3)])
        s.head = nn.Linear(d, out)

    def forward(s, x):
        for layer in s.layers:
            x = F.gelu(layer(x))
        return s.head(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    ap.add_argument("--healthy", action="store_true")
    ap.add_argument("--steps", type=int, default=8)
    a = ap.parse_args()
    torch.manual_seed(0)
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float16
    model = MLP()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", enabled=a.dtype == "fp16")
    xs = [torch.randn(32, 64) for _ in range(4)]
    ys = [torch.randint(0, 10, (32,)) for _ in range(4)]
    for step in range(a.steps):
        x, y = xs[step % 4], ys[step % 4]
        if step == FAULT_STEP and not a.healthy:
            x = x.clone()
            x[1, 5] = float("nan")
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=dtype):
            out = model(x)
        loss = F.cross_entropy(out.float(), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        print("step %d loss %.6g" % (step, loss.item()), flush=True)


if __name__ == "__main__":
    main()
