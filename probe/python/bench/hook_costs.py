#!/usr/bin/env python3
"""hook_costs.py — what the calls that the bridge's hooks make cost on this host, one by one.

The bridge's host time is spread over its hooks (bridge_breakdown.py --self-time), each a few torch
attribute reads, checks and list appends; on a slow host these cost more than they look. This times
each of them alone (best of REPEAT runs of NUMBER calls, microseconds a call) on a module output of
gpt's size on the GPU, then a loss computation plain, under an empty TorchFunctionMode and under
the bridge's loss tape, and then a watched MLP block's (LayerNorm, Linear, GELU, Linear) forward
hook and gradient hooks (as a node's pre-hook, as a tensor hook) as the bridge runs them (needs
`ampprobe run --trace amp`; without it only the primitives are timed):

  ampprobe run --trace amp -o c.sqlite -- python3 probe/python/bench/hook_costs.py
"""
import threading
import timeit

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode

import ampprobe.torch as ap

NUMBER, REPEAT = 20000, 5


def cost(stmt, env):
    """Microseconds a call of stmt (a string run with env's names), best of REPEAT."""
    t = timeit.Timer(stmt, globals=env)
    return min(t.repeat(REPEAT, NUMBER)) / NUMBER * 1e6


def primitives():
    x = torch.randn(16, 512, 768, device="cuda", dtype=torch.float16, requires_grad=True)
    t = x * 2
    env = dict(torch=torch, t=t, lock=threading.Lock(), d={}, lst=[],
               compiling=ap._compiling, grad_enabled=torch.is_grad_enabled,
               graph_task=ap._graph_task, plain=ap._PLAIN, f=lambda g: None,
               name=ap._dtype_name, dt=t.dtype)
    rows = [
        ("a Python call of a function that returns None", "f(None)"),
        ("torch.compiler.is_compiling()", "compiling()"),
        ("torch.is_grad_enabled()", "grad_enabled()"),
        ("torch._C._current_graph_task_id()", "graph_task()"),
        ("type(t) not in (Tensor, Parameter)", "type(t) not in plain"),
        ("isinstance(t, torch.Tensor)", "isinstance(t, torch.Tensor)"),
        ("t.dtype", "t.dtype"),
        ("t.dtype.is_floating_point", "t.dtype.is_floating_point"),
        ("t.numel()", "t.numel()"),
        ("t.requires_grad", "t.requires_grad"),
        ("t.grad_fn", "t.grad_fn"),
        ("t.output_nr", "t.output_nr"),
        ("t._version", "t._version"),
        ("t.data_ptr()", "t.data_ptr()"),
        ("t.get_device()", "t.get_device()"),
        ("t.is_contiguous()", "t.is_contiguous()"),
        ("the dtype's name (_vocab.dtype_name)", "name(dt)"),
        ("with lock: (a threading.Lock)", "with lock: pass"),
        ("list.append of a 4-tuple", "lst.append((1, 2, 3, 4)); lst.clear()"),
    ]
    for what, stmt in rows:
        print("%-52s %7.3f us" % (what, cost(stmt, env)), flush=True)
    # registering a pre-hook: a fresh node each time (a node keeps every hook registered on it)
    n = 2000
    outs = [x * 2 for _ in range(n)]
    t0 = timeit.default_timer()
    for o in outs:
        o.grad_fn.register_prehook(env["f"])
    print("%-52s %7.3f us" % ("t.grad_fn.register_prehook(f) (fresh nodes)",
                              (timeit.default_timer() - t0) / n * 1e6), flush=True)
    outs = [x * 2 for _ in range(n)]
    f = env["f"]
    t0 = timeit.default_timer()
    for o in outs:
        o._backward_hooks = {"k": f}
        o.grad_fn._register_hook_dict(o)
    print("%-52s %7.3f us" % ("t._backward_hooks = {k: f}; grad_fn._register_hook_dict(t)",
                              (timeit.default_timer() - t0) / n * 1e6), flush=True)
    outs = [x * 2 for _ in range(n)]
    t0 = timeit.default_timer()
    for o in outs:
        o.register_hook(f)
    print("%-52s %7.3f us" % ("t.register_hook(f) (fresh tensors)",
                              (timeit.default_timer() - t0) / n * 1e6), flush=True)


class _Empty(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def loss_tape():
    """A loss computation as the bench loops write it (crit(out.float(), y), on simplecnn's
    logits: small enough that the host's time is what counts) plain, under a TorchFunctionMode
    that only calls through, and under the bridge's loss tape (begun on the model's output and
    ended, as each step does)."""
    crit = nn.CrossEntropyLoss()
    out = torch.randn(64, 10, device="cuda", dtype=torch.float16, requires_grad=True) * 1
    y = torch.randint(0, 10, (64,), device="cuda")
    tape, empty = ap._trace.LossTape(), _Empty()

    def plain():
        return crit(out.float(), y)

    def under_empty():
        with empty:
            return crit(out.float(), y)

    def taped():
        tape.begin(ap._trace.Forward((), {}, "cuda", False, None), out)
        loss = crit(out.float(), y)
        tape.end()
        return loss
    env = dict(plain=plain, under_empty=under_empty, taped=taped)
    got = [cost(f + "()", env) for f in ("plain", "under_empty", "taped")]
    print("%-52s %7.2f us  an empty mode %7.2f us  the tape %7.2f us" % (
        "crit(out.float(), y) on (64, 10) logits: plain", *got), flush=True)


class Block(nn.Module):
    def __init__(self, c=768):
        super().__init__()
        self.ln, self.fc, self.act, self.proj = nn.LayerNorm(c), nn.Linear(c, 4 * c), nn.GELU(), \
            nn.Linear(4 * c, c)

    def forward(self, x):
        return x + self.proj(self.act(self.fc(self.ln(x))))


def watched():
    """The bridge's forward hook and gradient hooks on a watched block's module outputs, as a
    training step calls them (the statistics queued and launched as they would be)."""
    model = Block().cuda()
    opt = torch.optim.Adam(model.parameters())
    scaler = torch.amp.GradScaler("cuda")
    w = ap.watch(model, scaler=scaler, optimizer=opt)
    if not w.on:
        print("(not recording: run it under `ampprobe run --trace amp` for the bridge's hooks)")
        return
    x = torch.randn(16, 512, 768, device="cuda")

    def step():
        opt.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).float().pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    for _ in range(3):
        step()
    mods = [m for n, m in model.named_modules() if n]
    with torch.autocast("cuda", dtype=torch.float16):
        outs = [m(x if m is model.ln or m is model.fc else
                  torch.randn(16, 512, 3072 if m is model.proj else 768, device="cuda",
                              dtype=torch.float16)) for m in mods]
    n = 400
    for m, o in zip(mods, outs):
        # each call queues the output (launched with others, 50 at a time, as the end of a
        # forward does) and hooks its gradient; each gets a fresh view of it (a new node)
        views = [o.view_as(o) for _ in range(n)]
        t0 = timeit.default_timer()
        for k in range(n):
            w._on_output(m, (x,), views[k])
            if k % 50 == 49:
                w._check_outputs()
        per = (timeit.default_timer() - t0) / n * 1e6
        info = w._module_info[id(m)]  # (the bridge of 2026-11-30 had no tensor hook)
        node_hook, tensor_hook = info[2], info[3] if len(info) > 3 else None
        g = torch.ones_like(o)
        took = []
        for hook, arg in ((node_hook, (g,)), (tensor_hook, g)):
            if hook is None:
                took.append(float("nan"))
                continue
            t0 = timeit.default_timer()
            for k in range(n):
                hook(arg)
                if k % 50 == 49:
                    w.stats.flush()
            took.append((timeit.default_timer() - t0) / n * 1e6)
        print("%-12s forward hook %7.2f us  gradient hook: on the node %7.2f us, on the "
              "tensor %7.2f us" % (type(m).__name__, per, took[0], took[1]), flush=True)
    w.close()


def main():
    print("# torch %s %s" % (torch.__version__, torch.cuda.get_device_name()), flush=True)
    primitives()
    loss_tape()
    watched()


if __name__ == "__main__":
    main()
