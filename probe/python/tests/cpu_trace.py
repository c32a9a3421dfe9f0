#!/usr/bin/env python3
"""cpu_trace.py — the bridge's loss tape and its replay (ampprobe/_trace.py) on the CPU, with
whatever torch is installed (Debian's python3-torch 1.13 does: the tape asks autocast's state
without a device there, as torch before 2.4 takes none). Prints a line per case and "cpu_trace:
all passed"; exits 1 on a failure, 77 without torch.

  PYTHONPATH=probe/python python3 probe/python/tests/cpu_trace.py

Cases: between a model's output and backward() the tape keeps each call of the loss computation
(a running total's `+=` into a tensor from elsewhere left out), holding of the tensors only those
taken from elsewhere (the labels), not those it made; replayed on another output it computes that
output's loss and writes nothing into the program's tensors; judged, the replay names a log of 0 in
the loss computation, outside any module (layer -1), and returns no loss; a forward run under the
layer stack's hooks and the node tagger has each autograd node tagged with the innermost module's
layer and the function that made it, and the backward tracer names the first backward op whose
output is non-finite (sqrt's at 0), once.
"""
import gc
import sys
import weakref

try:
    import torch
except ImportError:
    print("cpu_trace: no torch: skipped")
    sys.exit(77)

import torch.nn as nn
import torch.nn.functional as F

import torch_cases
from ampprobe import _judge, _trace

try:
    torch.is_autocast_enabled("cpu")
except TypeError:  # torch before 2.4: autocast's state without a device
    _trace._autocast_on = torch.is_autocast_enabled


def taped(out, loss_of):
    """The _Forward whose loss computation loss_of(out) the tape saw, and that loss."""
    f = _trace.Forward((), {}, "cpu", False, torch.bfloat16)
    tape = _trace.LossTape()
    tape.begin(f, out)
    try:
        loss = loss_of(out)
    finally:
        tape.end()
    f.loss_slot = f.slot_of(loss)
    return f, loss


def cases():
    """(name, passed, what was found) per case."""
    torch.manual_seed(0)
    lin = nn.Linear(4, 3)
    x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 1, 0])
    total = torch.zeros(())
    made = []

    def loss_of(out):
        logits = out.float()
        made.append(weakref.ref(logits))
        loss = F.cross_entropy(logits, y)
        total.add_(loss.detach())  # a running total: a write into a tensor from elsewhere
        return loss

    f, loss = taped(lin(x), loss_of)
    names = [getattr(func, "__name__", "") for func, *_ in f.tape]
    yield "the loss computation taped, the running total's add_ left out", \
        "cross_entropy" in names and "add_" not in names, names
    held = [t for _, spec, *_ in f.tape for t in _judge.tensors(spec)]
    yield "of tensors the tape holds only the labels", \
        len(held) == 1 and held[0] is y, [tuple(t.shape) for t in held]
    del loss
    gc.collect()
    yield "what it made is not kept alive", made[0]() is None, made[0]()

    out2 = lin(x * 2)
    before = total.clone()
    loss2 = _trace.replay(f, out2)
    want = F.cross_entropy(out2.float(), y)
    yield "replayed on another output: that output's loss", \
        loss2 is not None and torch.allclose(loss2, want), (loss2, want)
    yield "the replay wrote nothing into the program's tensors", torch.equal(total, before), \
        (float(before), float(total))

    f, _ = taped(lin(x), lambda out: -(out - out).log().mean())  # log(0): -inf
    w = torch_cases.Events()
    out3 = lin(x)
    judge = _judge.Judge(w, 3, [], _judge.float_tensors(out3))
    got = _trace.replay(f, out3, judge)
    yield "judged, a log of 0 in the loss computation is named outside any module", \
        got is None and w.events[:1] == [("log", "nonfinite_producer")] and w.layers[:1] == [-1], \
        (w.events, w.layers)

    m = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    layer_of = {id(m): 0, id(m[0]): 1, id(m[1]): 2, id(m[2]): 3}
    stack = [-1]
    hooks = _trace.layer_stack_hooks(layer_of, stack)
    try:
        with _trace.NodeTagger(stack):
            out = m(x).sum()
    finally:
        for h in hooks:
            h.remove()
    tags, node = [], out.grad_fn
    while node is not None and len(tags) < 4:  # down each node's input: sum, linear, relu, linear
        tags.append(node.metadata.get("ampprobe"))
        node = next((n for n, _ in node.next_functions if n is not None and
                     n.name() != "torch::autograd::AccumulateGrad"), None)
    yield "each autograd node of a re-run forward tagged with its innermost module's layer", \
        tags == [(-1, "sum"), (3, "linear"), (2, "relu"), (1, "linear")] and stack == [-1], \
        (tags, stack)

    # the backward of sqrt at 0 divides by 0: the first backward op to go non-finite, named by
    # its node's tag (sqrt, outside any module) where torch says which node runs (2.0 on), else
    # by the aten op (div)
    hooks = _trace.layer_stack_hooks(layer_of, stack)
    try:
        with _trace.NodeTagger(stack):
            h = m(x)
            loss = (h - h.detach()).sqrt().sum()
    finally:
        for hook in hooks:
            hook.remove()
    w = torch_cases.Events()
    tracer = _trace.BwdTracer(w, 3)
    with tracer:
        torch.autograd.grad(loss, list(m.parameters()))
    op = "sqrt" if hasattr(torch._C, "_current_autograd_node") else "div"
    yield "the backward tracer names the first backward op to go non-finite, once", \
        w.events == [(op, "nonfinite_producer")] and w.layers == [-1], (w.events, w.layers)


if __name__ == "__main__":
    torch_cases.run("cpu_trace", cases())
