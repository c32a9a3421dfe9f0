#!/usr/bin/env python3
"""gpu_inplace.py — module outputs written to in place after their module returned (run_gpu.sh).

  ampprobe run --torch -o RUN.sqlite -- python3 gpu_inplace.py     # trains, records (watch())
  gpu_inplace.py --check RUN.sqlite RUN.log                        # checks what was recorded

The bridge reads module outputs late (with others, by the end of the forward), so a module output
that the program writes into must be read before that: `fc1` is followed by ReLU(inplace=True)
from the start, and `fc2`'s output is halved in place by its parent from step LATE on. What
the bridge must record: fc1's statistics at every step are of its own output (negative values
and all), not of the ReLU's; fc2's are of its own output at every step but LATE (the step where
the write first happens, named on stderr: its maximum there is half the step before's) and of
its own output again after it (read at once from then on: its maximum back to the step before
LATE's); fc3's output, which nobody writes into, is read late and keeps its negative values.
fc3 is a Sequential of one Linear, whose output is fc3's own: the same tensor queued twice in
one batch (and its gradient likewise), read once, and both layers' rows must be the same.
Each step's `weight` rows must hold the parameters as that step's forward saw them (printed by
the script before each forward): read as the forward begins on the first step, with the
forward's outputs from then on, and neither before the update of the step before nor after the
step's own.
"""
import sqlite3
import sys

LATE, STEPS = 4, 8


def train():
    import torch
    import ampprobe.torch as ap

    class Model(torch.nn.Module):
        def __init__(s, d=256):
            super().__init__()
            s.fc1, s.act = torch.nn.Linear(d, d), torch.nn.ReLU(inplace=True)
            s.fc2, s.fc3 = torch.nn.Linear(d, d), torch.nn.Sequential(torch.nn.Linear(d, 10))
            s.step = 0

        def forward(s, x):
            h = s.act(s.fc1(x))
            g = s.fc2(h)
            if s.step >= LATE:
                g.mul_(0.5)  # in place, after fc2 returned
            return s.fc3(g)

    torch.manual_seed(0)
    model = Model().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler()
    ap.watch(model, scaler=scaler, optimizer=opt)
    x = torch.randn(512, 256, device="cuda")
    y = torch.randint(0, 10, (512,), device="cuda")
    for step in range(STEPS):
        model.step = step
        for name, p in model.named_parameters():  # (in the log: check() compares)
            print("param %d %s %r %r" % (step, name, p.min().item(), p.max().item()))
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(x).float(), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    torch.cuda.synchronize()


def check(db, log):
    rows = sqlite3.connect(db).execute(
        "SELECT s.step, l.name, s.min, s.max FROM AMP_TENSOR_STATS s JOIN AMP_LAYERS l "
        "ON l.pid = s.pid AND l.id = s.layer_id WHERE s.kind = 'activation' "
        "ORDER BY s.step").fetchall()
    fig = {(step, name): (mn, mx) for step, name, mn, mx in rows}
    problems = []
    for step in range(STEPS):
        for name in ("fc1", "fc2", "fc3"):
            f = fig.get((step, name))
            if f is None:
                problems.append("no %s statistics at step %d" % (name, step))
            elif not f[0] < 0:
                problems.append("%s at step %d: min %g, the values after an in-place write"
                                % (name, step, f[0]))
        act = fig.get((step, "act"))  # the ReLU's output: fc1's tensor after the write
        if act is not None and act[0] < 0:
            problems.append("act at step %d: min %g < 0 after a ReLU" % (step, act[0]))
    before, at, after = (fig.get((s, "fc2"), (0, 0))[1] for s in (LATE - 1, LATE, LATE + 1))
    if not (abs(at - 0.5 * before) <= 0.05 * before and abs(after - before) <= 0.05 * before):
        problems.append("fc2's max at steps %d, %d, %d: %g, %g, %g (expected x, x/2, x)"
                        % (LATE - 1, LATE, LATE + 1, before, at, after))
    twins = {}  # fc3 and fc3.0: one tensor (and one gradient), the same figures
    for name, step, kind, *f in sqlite3.connect(db).execute(
            "SELECT l.name, s.step, s.kind, s.numel, s.min, s.max, s.n_zero, s.n_underflow "
            "FROM AMP_TENSOR_STATS s JOIN AMP_LAYERS l ON l.pid = s.pid AND l.id = s.layer_id "
            "WHERE l.name IN ('fc3', 'fc3.0') AND s.kind IN ('activation', 'activation_grad')"):
        twins.setdefault((step, kind), {})[name] = f
    odd = [k for k, v in sorted(twins.items()) if len(v) != 2 or v["fc3"] != v["fc3.0"]]
    if len(twins) != 2 * STEPS or odd:
        problems.append("fc3 and fc3.0 differ at (step, kind) %s of %d" % (odd[:3], len(twins)))
    steps = sqlite3.connect(db).execute("SELECT count(*) FROM AMP_STEPS").fetchone()[0]
    if steps != STEPS:  # watch() in the script: `ampprobe run --torch` must not watch again
        problems.append("%d steps recorded, expected %d" % (steps, STEPS))
    text = open(log).read()
    seen = {(int(f[1]), f[2]): (float(f[3]), float(f[4])) for f in
            (line.split() for line in text.splitlines() if line.startswith("param "))}
    rows = {(step, name): (mn, mx) for step, name, mn, mx in sqlite3.connect(db).execute(
        "SELECT step, op, min, max FROM AMP_TENSOR_STATS WHERE kind = 'weight'")}
    wrong = [k for k in sorted(seen) if rows.get(k) != seen[k]]
    if len(seen) != 6 * STEPS or wrong:  # fc1, fc2 and fc3.0: a weight and a bias each
        k = wrong[0] if wrong else None
        problems.append("weight rows: %d of %d parameters as the forward saw them differ%s" % (
            len(wrong), len(seen), " (%s at step %d: %s, not %s)" % (k[1], k[0], rows.get(k),
                                                                     seen[k]) if k else ""))
    want = "step %d: layer fc2's output was written to in place" % LATE
    if want not in text:
        problems.append("no warning '%s' in %s" % (want, log))
    if "layer fc1's output was written to" in text:
        problems.append("fc1 named on stderr (its write happens at the first step: learnt)")
    print("%s in-place module outputs and the parameters' rows: %d steps checked%s" % (
        "FAIL" if problems else "PASS", STEPS, ("; " + "; ".join(problems[:4])) if problems
        else ""), flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--check":
        sys.exit(check(sys.argv[2], sys.argv[3]))
    train()
