#!/usr/bin/env python3
"""gpu_shapes.py — a language model's head over a vocabulary of 50257 (GPT-2's), trained in fp16
under autocast with a GradScaler, for `ampprobe run --torch` (no ampprobe code in here): its
768 x 50257 GEMMs have an N that is not a multiple of 8, which cuBLAS runs several times slower;
the report's precision-placement rule must name the head and advise 50304. --vocab 50304: the
padded twin, which must get no such finding. Prints each step's time (CUDA events) and, at the
end, the median: what the padding saves.

  python3 gpu_shapes.py [--vocab N] [--steps N]
"""
import argparse
import statistics

import torch
import torch.nn as nn
import torch.nn.functional as F


class Lm(nn.Module):
    def __init__(s, vocab, d=768):
        super().__init__()
        s.emb = nn.Embedding(50257, d)  # the tokens are GPT-2's whatever the head's size
        s.mix = nn.Linear(d, d)
        s.head = nn.Linear(d, vocab)

    def forward(s, idx):
        return s.head(F.gelu(s.mix(s.emb(idx))))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--steps", type=int, default=12)
    a = ap.parse_args()
    torch.manual_seed(0)
    model = Lm(a.vocab).cuda().train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler("cuda")
    idx = torch.randint(0, 50257, (8, 1024), device="cuda")
    times = []
    for step in range(a.steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        with torch.autocast("cuda", dtype=torch.float16):
            logits = model(idx[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), idx[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
        print("step %d loss %.6g ms %.3f" % (step, loss.item(), times[-1]), flush=True)
    print("vocab %d median step %.3f ms" % (a.vocab, statistics.median(times[2:])), flush=True)


if __name__ == "__main__":
    main()
