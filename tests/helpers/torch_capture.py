#!/usr/bin/env python3
"""An unmodified PyTorch training script for checking CUDA/NVTX capture on the GPU machine
(tests/helpers/capture_gpu.sh runs it under `ampprobe run`). It knows nothing of ampprobe:
bf16 matmuls, a small MLP trained with autocast, torch.cuda.nvtx ranges around each step,
autograd.profiler.emit_nvtx for two steps (one range per op), host<->device copies, and a
forked child that exits through the C library's exit() (the exit handlers it inherits must not
flush the parent's buffers; the interpreter's teardown would touch CUDA in the child). Prints "ok" and the number of steps.
"""
import ctypes, os
import torch, torch.nn as nn

def main():
    torch.manual_seed(0)
    dev = "cuda"
    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x_host = torch.randn(256, 1024).pin_memory()
    a = torch.randn(2048, 2048, device=dev, dtype=torch.bfloat16)
    steps = 20
    for step in range(steps):
        torch.cuda.nvtx.range_push(f"step {step}")
        x = x_host.to(dev, non_blocking=True)
        torch.cuda.nvtx.range_push("matmul")
        a = (a @ a).clamp_(-1, 1)
        torch.cuda.nvtx.range_pop()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            if step in (5, 6):
                with torch.autograd.profiler.emit_nvtx():
                    loss = model(x).float().pow(2).mean()
                    loss.backward()
            else:
                loss = model(x).float().pow(2).mean()
                loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.nvtx.range_pop()
    print("loss", loss.item())  # a device-to-host copy
    torch.cuda.synchronize()
    pid = os.fork()
    if pid == 0:  # exit() of the C library: its exit handlers, not the interpreter's teardown
        ctypes.CDLL(None).exit(0)
    _, status = os.waitpid(pid, 0)
    assert status == 0, status
    print("ok", steps)

if __name__ == "__main__":
    main()
