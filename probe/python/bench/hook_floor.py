#!/usr/bin/env python3
"""hook_floor.py — what PyTorch's own hook machinery costs a training step, against the bridge.

The bridge runs Python once per module output (a forward hook) and once per output gradient (a
pre-hook on the autograd node that made the output). This measures, on the bench workloads and
alternating in one process, the host time of a step (time in step(), median) and its CUDA-event
time for:

  plain     no hooks
  fwd       a forward hook that does nothing on every submodule (torch's hooked call path)
  fwd+pre   and that hook registers a pre-hook on its output's autograd node, the pre-hook a
            C function (list.append): PyTorch's cost for what the bridge hooks, the bridge's own
            Python left out
  wrap+pre  the same without forward hooks: each submodule's forward replaced by a wrapper
  full      ampprobe.torch.watch (needs `ampprobe run --trace amp`)

  ampprobe run --trace amp -o f.sqlite -- python3 probe/python/bench/hook_floor.py
"""
import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_overhead  # noqa: E402

VARIANTS = ("plain", "fwd", "fwd+pre", "wrap+pre", "full")


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


def run(name, mode, variant):
    sink = []
    if variant == "full":
        step, steps, w = torch_overhead.setup(name, mode, dict(stats_every=1))
    else:
        prep = {"fwd": lambda mdl: _fwd(mdl, sink, False),
                "fwd+pre": lambda mdl: _fwd(mdl, sink, True),
                "wrap+pre": lambda mdl: _wrap(mdl, sink)}.get(variant)
        step, steps, w = torch_overhead.setup(name, mode, model_hook=prep)

    def stepped(i):
        sink.clear()
        return step(i)
    ev, wall, host = torch_overhead.timed(stepped, steps, w)
    return ev, host


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", action="append",
                   choices=sorted(torch_overhead.torch_baseline.WORKLOADS))
    p.add_argument("--mode", action="append", choices=["fp16", "bf16"])
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    print("# torch %s %s" % (torch.__version__, torch.cuda.get_device_name()), flush=True)
    for wl in a.workload or ["simplecnn", "gpt"]:
        for mode in a.mode or ["fp16"]:
            got = {v: [] for v in VARIANTS}
            for _ in range(a.rounds):
                for v in VARIANTS:
                    got[v].append(run(wl, mode, v))
            base_e = statistics.median(e for e, _ in got["plain"])
            base_h = statistics.median(h for _, h in got["plain"])
            for v in VARIANTS:
                e = statistics.median(x for x, _ in got[v])
                h = statistics.median(x for _, x in got[v])
                print("%-10s %-5s %-9s event %8.3f ms (%+6.1f%%)  host %8.3f ms (%+7.3f)"
                      % (wl, mode, v, e, 100 * (e / base_e - 1), h, h - base_h), flush=True)


if __name__ == "__main__":
    main()
