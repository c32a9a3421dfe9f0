#!/usr/bin/env python3
"""gpu_join.py — watch() called on two models of one loop (a generator and its critic, say),
each with its optimizer, the second also handed a GradScaler of its own (which the loop does not
use), run under `ampprobe run --torch --trace amp`:

  ampprobe run --torch --trace amp -o RUN.sqlite -- python3 gpu_join.py
  check_report.py --joined RUN.sqlite RUN.log

Checks here that watch() of a watched model again, and of a second model, returns the first
watcher; check_report.py --joined checks what was recorded (the second model's rows under the
name given to watch(), from step 0, in every step: the first watch()'s stats_every holds, as
said on stderr; and the note that its GradScaler's updates are not recorded). Then that watcher
is closed and a third model watched and trained alone, for 3 more steps: its steps must go on
from the first watcher's (4-6), not write over them. Exits 1 when a check here fails."""
import sys

import torch
import torch.nn as nn

import ampprobe.torch as ap

STEPS = 4
AFTER = 3  # steps of the model watched after the first watcher is closed


def main():
    torch.manual_seed(0)
    gen, critic = nn.Linear(8, 8).cuda(), nn.Linear(8, 1).cuda()
    s_gen, s_critic = torch.amp.GradScaler("cuda"), torch.amp.GradScaler("cuda")
    o_gen = torch.optim.Adam(gen.parameters())
    o_critic = torch.optim.Adam(critic.parameters())
    w = ap.watch(gen, scaler=s_gen, optimizer=o_gen)
    if not w.on:
        sys.exit("gpu_join.py: run it under `ampprobe run --torch`")
    if ap.watch(gen) is not w or ap.watch(critic, scaler=s_critic, optimizer=o_critic,
                                          name="Critic", stats_every=5) is not w:
        print("FAIL watch() of a watched model, or of a second one, made another watcher")
        return 1
    for _ in range(STEPS):
        o_gen.zero_grad()
        o_critic.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = critic(gen(torch.randn(16, 8, device="cuda"))).float().mean()
        s_gen.scale(loss).backward()
        s_gen.step(o_gen)
        s_gen.step(o_critic)
        s_gen.update()
    print("PASS watch() of a watched model, and of a second one, returned the first watcher "
          "(%d steps)" % w.step)
    w.close()
    after = nn.Linear(8, 8).cuda()
    o_after = torch.optim.Adam(after.parameters())
    w = ap.watch(after, scaler=s_gen, optimizer=o_after, name="After")
    for _ in range(AFTER):
        o_after.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = after(torch.randn(16, 8, device="cuda")).float().mean()
        s_gen.scale(loss).backward()
        s_gen.step(o_after)
        s_gen.update()
    return 0


if __name__ == "__main__":
    sys.exit(main())
