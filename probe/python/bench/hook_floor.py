#!/usr/bin/env python3
"""hook_floor.py — what PyTorch's own hook machinery costs a training step, against the bridge.

The bridge runs Python once per module output (a forward hook) and once per output gradient (a
pre-hook on the autograd node that made the output). This measures, on the bench workloads and
alternating in one process, the host time of a step (time in step(), median), of its forward
(where the forward hooks run) and of its loss and backward (where the gradient pre-hooks run, on
autograd's thread, while the caller waits) and of its optimizer and scaler calls (where the host
waits for the GPU: GradScaler.step reads found_inf, so in fp16 the host time the bridge spends
before that read is hidden while the GPU still has work), and the step's CUDA-event time for:

  plain     no hooks
  fwd       a forward hook that does nothing on every submodule (torch's hooked call path)
  fwd+pre   and that hook registers a pre-hook on its output's autograd node, the pre-hook a
            C function (list.append): PyTorch's cost for what the bridge hooks, the bridge's own
            Python left out
  wrap+pre  the same without forward hooks: each submodule's forward replaced by a wrapper
  full      ampprobe.torch.watch (needs `ampprobe run --trace amp`)
  every10   the same with stats_every=10 (the statistics on one step in ten; host times as the
            mean over steps, not the median, which would be a step without them)

With --interleave the variants' models train side by side, a step of each in turn, which
weighs the machine's ups and downs on all alike (the separate runs above differ by more than
what is measured from one minute to the next); one process holds one watcher, so full and
every10 interleave with the others but not with each other (every10 only when asked).

  ampprobe run --trace amp -o f.sqlite -- python3 probe/python/bench/hook_floor.py
"""
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_overhead  # noqa: E402

VARIANTS = ("plain", "fwd", "fwd+pre", "wrap+pre", "full", "every10")


def _sub(model):
    return [m for n, m in model.named_modules() if n]


def _fwd(model, sink, pre):
    def hook(m, args, out):
        if pre and isinstance(out, torch.Tensor) and out.grad_fn is not None:
            out.grad_fn.register_prehook(sink.append)
    for m in _sub(model):
        m.register_forward_hook(hook)


def _wrap(model, sink):
    for m in _sub(model):
        orig = m.forward

        def forward(*args, _orig=orig, **kwargs):
            out = _orig(*args, **kwargs)
            if isinstance(out, torch.Tensor) and out.grad_fn is not None:
                out.grad_fn.register_prehook(sink.append)
            return out
        m.forward = forward


def make(name, mode, variant):
    """The workload's (step(i), steps, watcher) with variant's hooks."""
    sink = []
    if variant in ("full", "every10"):
        step, steps, w = torch_overhead.setup(name, mode, dict(
            stats_every=10 if variant == "every10" else 1))
    else:
        prep = {"fwd": lambda mdl: _fwd(mdl, sink, False),
                "fwd+pre": lambda mdl: _fwd(mdl, sink, True),
                "wrap+pre": lambda mdl: _wrap(mdl, sink)}.get(variant)
        step, steps, w = torch_overhead.setup(name, mode, model_hook=prep)

    def stepped(i):
        sink.clear()
        return step(i)
    stepped.phases = step.phases
    return stepped, steps, w


def run(name, mode, variant):
    """One variant's run: CUDA-event, host, forward, loss+backward and optimizer medians (ms)."""
    step, steps, w = make(name, mode, variant)
    ev, wall, host = torch_overhead.timed(step, steps, w)
    fwd, bwd, opt = (statistics.median(p[k] for p in step.phases) * 1e3 for k in (0, 1, 2))
    return ev, host, fwd, bwd, opt


def interleaved(name, mode, variants, rounds):
    """All variants' models at once, their steps taken in turn (what the machine does that
    minute weighs on each alike): per variant, the medians of the host time of a step, of its
    forward, of its loss+backward and of its optimizer and scaler calls (ms)."""
    made = {v: make(name, mode, v) for v in variants}
    steps = made["plain"][1]
    for _ in range(rounds):
        for i in range(steps):
            for v in variants:
                made[v][0](i)
        torch.cuda.synchronize()
    out = {}
    for v, (step, _, w) in made.items():
        if w is not None:
            w.close()
        ph = step.phases
        mid = statistics.fmean if v == "every10" else statistics.median
        out[v] = [mid(sum(p) for p in ph) * 1e3] + [mid(p[k] for p in ph) * 1e3
                                                    for k in (0, 1, 2)]
    return out


def main():
    p = torch_overhead.arg_parser(__doc__, rounds=3, compile=False)
    p.add_argument("--variant", action="append", choices=VARIANTS,
                   help="these variants only (plain always runs)")
    p.add_argument("--interleave", action="store_true",
                   help="all variants in one run, their steps in turn (host times only)")
    a = p.parse_args()
    asked = a.variant or [v for v in VARIANTS if not (a.interleave and v == "every10")]
    if a.interleave and "full" in asked and "every10" in asked:
        p.error("--interleave trains the variants side by side in one process, which holds one "
                "watcher (a second watch() joins the first): --variant full or every10, not both")
    variants = ["plain"] + [v for v in VARIANTS if v != "plain" and v in asked]
    print("# torch %s %s" % (torch.__version__, torch.cuda.get_device_name()), flush=True)
    for wl in a.workload or ["simplecnn", "gpt"]:
        for mode in a.mode or ["fp16"]:
            if a.interleave:
                got = interleaved(wl, mode, variants, a.rounds)
                for v in variants:
                    h, f, b, o = got[v]
                    base = got["plain"]
                    print("%-10s %-5s %-9s host %8.3f ms (%+7.3f)  forward %7.3f ms (%+7.3f)  "
                          "loss+backward %7.3f ms (%+7.3f)  optimizer %7.3f ms (%+7.3f)" % (
                              wl, mode, v, h, h - base[0], f, f - base[1], b, b - base[2], o,
                              o - base[3]), flush=True)
                continue
            got = {v: [] for v in variants}
            for _ in range(a.rounds):
                for v in variants:
                    got[v].append(run(wl, mode, v))
            base = [statistics.median(r[k] for r in got["plain"]) for k in range(5)]
            for v in variants:
                e, h, f, b, o = (statistics.median(r[k] for r in got[v]) for k in range(5))
                print("%-10s %-5s %-9s event %8.3f ms (%+6.1f%%)  host %8.3f ms (%+7.3f)  "
                      "forward %7.3f ms (%+7.3f)  loss+backward %7.3f ms (%+7.3f)  "
                      "optimizer %7.3f ms (%+7.3f)"
                      % (wl, mode, v, e, 100 * (e / base[0] - 1), h, h - base[1], f,
                         f - base[2], b, b - base[3], o, o - base[4]), flush=True)


if __name__ == "__main__":
    main()
