#!/usr/bin/env python3
"""torch_profiler_inside.py — a PyTorch training script that runs torch.profiler (Kineto, which
subscribes to CUPTI itself) over a few of its steps: what happens to it, and to ampprobe's own
CUDA capture, under `ampprobe run` (tests/helpers/capture_gpu.sh).

Prints the CUDA events the profiler saw and the steps it ran; exits 0 when the script ran to its
end (the profiler's own result is reported, not judged: a second CUPTI client may get nothing).
"""
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile


def main():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10)).cuda()
    opt = torch.optim.Adam(model.parameters())
    scaler = torch.amp.GradScaler("cuda")
    x = torch.randn(64, 256, device="cuda")
    y = torch.randint(0, 10, (64,), device="cuda")

    def step():
        opt.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    steps = 0
    for _ in range(5):
        step()
        steps += 1
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            step()
            steps += 1
        torch.cuda.synchronize()
    cuda = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    print("profiler: %d CUDA events, %d CPU events" % (len(cuda), len(prof.events()) - len(cuda)),
          flush=True)
    for _ in range(5):
        loss = step()
        steps += 1
    torch.cuda.synchronize()
    print("steps %d, final loss %.4f" % (steps, loss.item()), flush=True)


if __name__ == "__main__":
    main()
