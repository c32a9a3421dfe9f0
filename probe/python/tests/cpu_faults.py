#!/usr/bin/env python3
"""cpu_faults.py — the PyTorch bridge on a machine without a GPU: an MLP trained on the CPU under
CPU autocast, whose batch of step 3 carries a NaN (--healthy: it does not), for
`ampprobe run --torch` (run_gpu.sh runs it with CUDA_VISIBLE_DEVICES="", a laptop's view).

  python3 cpu_faults.py [--dtype bf16|fp16] [--healthy] [--fault nan|scale|noparams|api]
                        [--update adam|hand|data|lbfgs] [--accum N]

bf16 (CPU autocast's default) trains without a GradScaler; fp16 with torch.amp.GradScaler("cpu").
The report's first finding must be the NaN in the input data at layers.0, step 3
(check_report.py CASE nan), the healthy twin's none. --fault scale (fp16): the loss is multiplied
by 1e30 from step 3 on, every step overflows and the GradScaler halves its scale each time
(check_report.py --cpu-scale: the scale's updates as they were). --fault noparams: the "model"
has no trainable parameter (check_report.py --no-model). --fault api: watch() with each kind of
bad argument must raise naming it (checked here: exit status 1 when one does not).
--update lbfgs (bf16): torch.optim.LBFGS, whose step() calls the closure (the forward, the loss
and the backward) several times: the step is the first call's, its printed loss what step()
returns (check_report.py --loss), the further calls recorded nowhere. --update hand (bf16): no
optimizer, the parameters updated by hand (p -= lr * p.grad, then p.grad.zero_(): gradients
held at every forward), so the bridge tells where a step ends from the forwards alone; each
step's gradient norm is printed before the update (check_report.py --grad-norm: the norm
recorded is of the gradients the update used). --update data (bf16): the same through p.data,
the gradients then set to None (a version counter the update leaves as it was). --accum N: N
micro-batches a step, their gradients accumulated (each loss divided by N; the step's printed
loss is their sum).
"""
import argparse
import sys

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
    ap.add_argument("--fault", choices=["nan", "scale", "noparams", "api"], default="nan")
    ap.add_argument("--update", choices=["adam", "hand", "data", "lbfgs"], default="adam")
    ap.add_argument("--accum", type=int, default=1, metavar="N")
    a = ap.parse_args()
    if a.update != "adam" and a.dtype != "bf16":
        ap.error("--update %s trains without a GradScaler: --dtype bf16 only" % a.update)
    if a.update == "lbfgs" and a.accum != 1:
        ap.error("--update lbfgs takes one batch a step: not with --accum")
    if a.accum < 1:
        ap.error("--accum must be 1 or more, not %d" % a.accum)
    if a.fault == "api":
        return check_api()
    torch.manual_seed(0)
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float16
    model = MLP()
    if a.fault == "noparams":
        model = Halves()
        for step in range(a.steps):
            with torch.autocast("cpu", dtype=dtype):
                out = model(torch.randn(32, 64))
            print("step %d loss %.6g" % (step, float(out.float().square().mean())), flush=True)
        return 0
    opt = torch.optim.Adam(model.parameters(), lr=1e-3) if a.update == "adam" else \
        torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=3) if a.update == "lbfgs" else None
    scaler = torch.amp.GradScaler("cpu", enabled=a.dtype == "fp16")
    xs = [torch.randn(32, 64) for _ in range(4)]
    ys = [torch.randint(0, 10, (32,)) for _ in range(4)]
    for step in range(a.steps):
        if a.update == "lbfgs":
            x, y = xs[step % 4], ys[step % 4]
            if step == FAULT_STEP and not a.healthy and a.fault == "nan":
                x = x.clone()
                x[1, 5] = float("nan")

            def closure():
                opt.zero_grad(set_to_none=True)
                with torch.autocast("cpu", dtype=dtype):
                    out = model(x)
                loss = F.cross_entropy(out.float(), y)
                loss.backward()
                return loss
            print("step %d loss %.6g" % (step, float(opt.step(closure))), flush=True)
            continue
        if opt is not None:
            opt.zero_grad(set_to_none=True)
        total = 0.0
        for micro in range(a.accum):
            x, y = xs[(step + micro) % 4], ys[(step + micro) % 4]
            if step == FAULT_STEP and micro == 0 and not a.healthy and a.fault == "nan":
                x = x.clone()
                x[1, 5] = float("nan")
            with torch.autocast("cpu", dtype=dtype):
                out = model(x)
            loss = F.cross_entropy(out.float(), y) / a.accum
            if step >= FAULT_STEP and not a.healthy and a.fault == "scale":
                loss = loss * 1e30  # overflows every scaled gradient: each skipped, scale halved
            scaler.scale(loss).backward()
            total += loss.item()
        if opt is None:
            with torch.no_grad():
                norm = torch.stack([p.grad.float().square().sum() for p in model.parameters()])
                print("step %d grad_norm %.9g" % (step, float(norm.sum().sqrt())), flush=True)
                for p in model.parameters():
                    if a.update == "data":
                        p.data -= 0.05 * p.grad
                        p.grad = None
                    else:
                        p -= 0.05 * p.grad
                        p.grad.zero_()
        else:
            scaler.step(opt)
            scaler.update()
        print("step %d loss %.6g" % (step, total), flush=True)
    return 0


class Halves(nn.Module):
    """A module with no parameter: nothing to train."""

    def forward(s, x):
        return x[:, :4] * 2


def check_api():
    """watch() with bad arguments: each must raise, naming the argument."""
    import ampprobe.torch as ap
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cases = [({"model": "model"}, TypeError, "model must be a torch.nn.Module"),
             ({"scaler": model}, TypeError, "scaler must be a torch.amp.GradScaler"),
             ({"optimizer": 3}, TypeError, "optimizer must be a torch.optim.Optimizer"),
             ({"stats_every": 0}, ValueError, "stats_every must be a whole number"),
             ({"stats_every": 2.5}, ValueError, "stats_every must be a whole number"),
             ({"stats_every": -1}, ValueError, "stats_every must be a whole number"),
             ({"ops_every": "x"}, ValueError, "ops_every must be a whole number"),
             ({"name": 5}, ValueError, "name must be a non-empty string"),
             ({"check_grads": "no"}, TypeError, "check_grads must be True or False")]
    bad = 0
    for kwargs, kind, words in cases:
        args = {"model": model, "optimizer": opt}
        args.update(kwargs)
        try:
            ap.watch(**args)
            got = "no error"
        except Exception as e:  # the kind and the words must be right
            got = "%s: %s" % (type(e).__name__, e)
            if isinstance(e, kind) and words in str(e):
                continue
        print("FAIL watch(%s): %s" % (kwargs, got), flush=True)
        bad += 1
    w = ap.watch(model, optimizer=opt, stats_every=2)
    print("%s watch() refused %d bad arguments of %d, took good ones (%s)" % (
        "FAIL" if bad else "PASS", len(cases) - bad, len(cases), type(w).__name__), flush=True)
    w.close()
    return max(1 if bad else 0, check_scaler_order(ap))


def _raised(fn):
    try:
        fn()
        return "no error"
    except Exception as e:
        return "%s: %s" % (type(e).__name__, e)


def check_scaler_order(ap):
    """A watched GradScaler's methods called before any scale() (update(), step(), unscale_())
    must fail as an unwatched one's do, with PyTorch's own error, and leave the watcher working:
    the two steps that follow each are recorded as usual."""
    bad = 0
    for name in ("update", "step", "unscale_"):
        plain_model, model = MLP(), MLP()
        plain = torch.amp.GradScaler("cpu", init_scale=1024.0)
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
        opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (plain_model, model)]
        w = ap.watch(model, scaler=scaler, optimizer=opts[1])
        plain_args, args = ((), ()) if name == "update" else ((opts[0],), (opts[1],))
        want = _raised(lambda: getattr(plain, name)(*plain_args))
        got = _raised(lambda: getattr(scaler, name)(*args))
        if got != want or got == "no error":
            print("FAIL scaler.%s() before scale(): %s (unwatched: %s)" % (name, got, want),
                  flush=True)
            bad += 1
        for _ in range(2):  # then a normal loop
            with torch.autocast("cpu", dtype=torch.float16):
                loss = model(torch.randn(8, 64)).float().square().mean()
            scaler.scale(loss).backward()
            scaler.step(opts[1])
            scaler.update()
            opts[1].zero_grad()
        if w.on and w.step - w.first != 2:  # (not recording: no steps to count)
            print("FAIL after scaler.%s() before scale(): %d steps recorded, not 2" % (
                name, w.step - w.first), flush=True)
            bad += 1
        w.close()
    print("%s a watched GradScaler's update(), step() and unscale_() before scale() fail as an "
          "unwatched one's, and the steps after them are recorded" % ("FAIL" if bad else "PASS"),
          flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
