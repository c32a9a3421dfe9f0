#!/usr/bin/env python3
"""gpu_scale.py — the GradScaler's updates as the bridge records them (run_gpu.sh, pytest).

  ampprobe run --torch -o RUN.sqlite -- python3 gpu_scale.py [--stats-every N] > RUN.log
  gpu_scale.py --check RUN.sqlite RUN.log                     # checks what was recorded

A small model trains STEPS steps under watch() with a GradScaler that grows every 3 steps; its
gradients overflow at the steps in OVERFLOW (the loss multiplied past the fp16 range: skipped,
the scale backed off), and at step NEW_SCALE the script sets the scale by update(new_scale).
After each update the script prints what the scaler holds (read with .item(): the truth), and
AMP_SCALE must hold the same, row for row: the scale before and after, found_inf, the growth
tracker and the skip. The scale after a step's update() reaches the host with its statistics,
or, at a step without them, with the next step's mark (or read at once when the step broke or
is the last): --stats-every 3 puts steps without statistics on every path (an overflow at one
and at one with statistics, the new scale at one without, the last step without).
"""
import argparse
import sqlite3
import sys

STEPS, OVERFLOW, NEW_SCALE = 14, (4, 5, 9), 7


def train(stats_every):
    import torch
    import ampprobe.torch as ap

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(init_scale=2.0 ** 12, growth_interval=3)
    ap.watch(model, scaler=scaler, optimizer=opt, stats_every=stats_every)
    x = torch.randn(128, 64, device="cuda")
    y = torch.randint(0, 10, (128,), device="cuda")
    for step in range(STEPS):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(x).float(), y)
        if step in OVERFLOW:
            loss = loss * 1e30  # the scaled gradients overflow fp16: the step is skipped
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        found = sum(float(v) for st in scaler._per_optimizer_states.values()
                    for v in st["found_inf_per_device"].values())
        before = scaler.get_scale()
        scaler.update(2.0 ** 10 if step == NEW_SCALE else None)
        print("scale %d %r %r %d %d" % (step, before, scaler.get_scale(), found,
                                        scaler._growth_tracker.item()), flush=True)


def check(db, log):
    rows = sqlite3.connect(db).execute(
        "SELECT step, scale_before, scale_after, found_inf, growth_tracker, skipped "
        "FROM AMP_SCALE ORDER BY step").fetchall()
    seen = []
    for f in (line.split() for line in open(log).read().splitlines()):
        if f and f[0] == "scale":
            step, before, after, found, tracker = int(f[1]), float(f[2]), float(f[3]), \
                int(f[4]), int(f[5])
            seen.append((step, before, after, found, tracker, int(found > 0)))
    problems = []
    if len(seen) != STEPS:
        problems.append("%d updates printed in %s, expected %d" % (len(seen), log, STEPS))
    wrong = [(s, r) for s, r in zip(seen, rows) if s != tuple(r)]
    if len(rows) != len(seen) or wrong:
        problems.append("%d AMP_SCALE rows for %d updates, %d differ%s" % (
            len(rows), len(seen), len(wrong), " (first: recorded %s, the scaler %s)" % (
                tuple(wrong[0][1]), wrong[0][0]) if wrong else ""))
    skipped = [s[0] for s in seen if s[5]]
    if tuple(skipped) != OVERFLOW:
        problems.append("the script skipped steps %s, not %s" % (skipped, OVERFLOW))
    print("%s the GradScaler's updates in %s: %d rows checked%s" % (
        "FAIL" if problems else "PASS", db, len(rows), ("; " + "; ".join(problems))
        if problems else ""), flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--check":
        sys.exit(check(sys.argv[2], sys.argv[3]))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--stats-every", type=int, default=1)
    train(p.parse_args().stats_every)
