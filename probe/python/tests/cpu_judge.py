#!/usr/bin/env python3
"""cpu_judge.py — the PyTorch bridge's judge (ampprobe/_judge.py: Judge under its OpTracer, as a
broken step's re-run uses them) on small CPU models, with whatever torch is installed (it needs
no CUDA and no more of torch than its dispatch modes: Debian's python3-torch 1.13 does on a
machine without a GPU). Prints a line per case and "cpu_judge: all passed"; exits 1 on a
failure, 77 without torch.

  PYTHONPATH=probe/python python3 probe/python/tests/cpu_judge.py

Cases: a -inf that where() leaves out (a log-prior over counts with zeros) is no forward break,
and an overflow after it is named; NaN in the data and a NaN parameter are named where they first
go in, also when where() leaves that parameter's values out; an in-place add is judged on its
input as it was before the write; masks (masked_fill, a float mask passed in, item assignment)
are no fault, a softmax over a row masked whole and a loss of a masked logit are; a router's
entropy over top-2 probabilities carries log's -inf through its mul to the where that leaves it out
(what the backward's producer is told); an fp16 x * x past 65504 that rsqrt turns into 0 (an
RMSNorm's) is an overflow the forward absorbed, the same in f32 nothing, and 1 / 0 that where()
leaves out a pole, no overflow; a wrapper's own code (FSDP1's) is looked through: its
slices of a NaN gradient are no event, the NaN data it casts still the data. Then
ampprobe/_links.py's Links, what names a backward traced per module: what reads each module's
output (a module in a chain, the next block of a residual stream, the code of a router's gate, the
loss for the model's output, code when two modules read it; code that reads it beside one module is
not seen), and which modules' outputs each module's inputs were (what says a forward's first
non-finite output was made in it), also through the identity function FSDP2 puts on a module's
inputs.
"""
import sys

try:
    import torch
    import torch.nn as nn
except ImportError:
    print("cpu_judge: no torch: skipped")
    sys.exit(77)

import torch_cases
from ampprobe import _judge
from ampprobe._links import Links


def judge(model, *args, layers=None, details=None):
    """Runs model(*args) as a broken step's re-run does (layers: the layer stack, [0]); returns
    (events, the judge); the events' details go into the list details."""
    w = torch_cases.Events()
    j = _judge.Judge(w, 3, _judge.float_tensors(args), list(model.buffers()))
    with _judge.OpTracer(j, [0] if layers is None else layers):
        out = model(*args)
    j.finish(out)
    if details is not None:
        details += w.details
    return w.events, j


class Prior(nn.Module):
    def __init__(self, blow=False):
        super().__init__()
        self.lin, self.blow = nn.Linear(8, 4), blow

    def forward(self, x, counts):
        prior = torch.where(counts > 0, counts.log(), torch.zeros(()))
        y = self.lin(x)
        if self.blow:
            y = y * 1e38 * 1e38  # f32 overflow: inf from finite values
        return y + prior


class LeftOutParameter(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor([float("nan"), 1.0]))

    def forward(self, x):
        return torch.where(torch.tensor([False, True]), self.w * x, torch.zeros(()))


class InPlace(nn.Module):  # h += b(x): both terms 3e38, their f32 sum inf
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
        with torch.no_grad():
            for lin in (self.a, self.b):
                lin.weight.zero_()
                lin.bias.fill_(3e38)

    def forward(self, x):
        h = self.a(x)
        h += self.b(x)
        return h


class Attention(nn.Module):  # scores masked where pad is True, or by a float mask added
    def forward(self, q, mask):
        scores = q @ q.transpose(-1, -2)
        if mask.dtype == torch.bool:
            return scores.masked_fill(mask[:, None, :], float("-inf")).softmax(-1)
        return (scores + mask).softmax(-1)


class SetMask(nn.Module):  # class 0 masked by item assignment; a loss over it
    def forward(self, x, y):
        logits = x.clone()
        logits[:, 0] = float("-inf")
        return nn.functional.cross_entropy(logits, y)


class Router(nn.Module):
    def forward(self, p):
        keep = torch.zeros_like(p).scatter(-1, p.topk(2, -1).indices, 1.0)
        p = p * keep / (p * keep).sum(-1, keepdim=True)
        return torch.where(p > 0, p * p.log(), torch.zeros(())).sum(-1).mean()


class RmsNorm(nn.Module):  # x * x in fp16 (autocast would leave it there), the rest in f32
    def __init__(self, f32=False):
        super().__init__()
        self.f32 = f32

    def forward(self, x):
        sq = x.float() * x.float() if self.f32 else (x * x).float()
        return x.float() * torch.rsqrt(sq.mean(-1, keepdim=True) + 1e-6)


class Inverse(nn.Module):  # where(x != 0, 1 / x, 0)
    def forward(self, x):
        return torch.where(x != 0, torch.ones_like(x) / x, torch.zeros_like(x)).float().sum()


class Wrapper(nn.Module):
    """FSDP1's wrapper, as the re-run sees it: its own code (the layer stack's top None, as
    torch.py's hooks push it) casts the inputs to the parameters' dtype and slices its flat
    gradient (NaN: the broken step's), then the wrapped module runs."""

    def __init__(self, layers):
        super().__init__()
        self.layers, self.inner = layers, nn.Linear(8, 4)
        self.flat_grad = torch.full((40,), float("nan"))

    def forward(self, x):
        self.layers.append(None)
        x = x.to(torch.float32)
        self.flat_grad.split(32)  # (the gradients' views FSDP1 makes, and drops)
        self.layers.pop()
        return self.inner(x)


class Bracketed(nn.Module):
    """Code that is not exception-safe (torch.utils.checkpoint's non-reentrant form, whose
    saved-tensor hooks stay pushed when its function raises): opened, closed at the end."""

    def __init__(self):
        super().__init__()
        self.lin, self.open = nn.Linear(8, 4), False

    def forward(self, x):
        self.open = True
        y = self.lin(x).relu() * 2
        self.open = False
        return y


def cases():
    torch.manual_seed(0)
    x = torch.randn(2, 8)
    counts = torch.tensor([[0.0, 1, 2, 0], [1, 0, 3, 1]])
    ev, j = judge(Prior(), x, counts)
    yield "a -inf left out by where", ev == [] and [(m.op, m.left_out_by) for m in j.made] == \
        [("log", "where")], (ev, [(m.op, m.left_out_by) for m in j.made])
    ev, _ = judge(Prior(blow=True), x, counts)
    yield "an overflow after it", ev == [("mul", "nonfinite_producer")], ev
    bad = x.clone()
    bad[0, 0] = float("nan")
    ev, _ = judge(Prior(), bad, counts)
    yield "NaN in the data", ev == [("addmm", "nonfinite_input")], ev
    m = Prior()
    with torch.no_grad():
        m.lin.weight[0, 0] = float("nan")
    ev, _ = judge(m, x, counts)
    yield "a NaN parameter", len(ev) == 1 and ev[0][1] == "nonfinite_propagated", ev
    ev, _ = judge(LeftOutParameter(), torch.ones(2))
    yield "a NaN parameter left out by where", ev == [("mul", "nonfinite_propagated")], ev
    ev, _ = judge(InPlace(), torch.randn(2, 4))
    yield "an in-place add judged on its input before the write", \
        ev == [("add", "nonfinite_producer")], ev
    q = torch.randn(2, 3, 4)
    pad = torch.zeros(2, 3, dtype=torch.bool)
    pad[:, -1] = True
    ev, _ = judge(Attention(), q, pad)
    yield "a padding mask's -inf", ev == [], ev
    pad[0] = True
    ev, _ = judge(Attention(), q, pad)
    yield "a softmax over a row masked whole", ev == [("softmax", "nonfinite_producer")], ev
    ev, _ = judge(Attention(), q, torch.triu(torch.full((3, 3), float("-inf")), 1))
    yield "a float causal mask passed in", ev == [], ev
    ev, _ = judge(SetMask(), torch.randn(4, 5), torch.tensor([1, 1, 2, 3]))
    yield "a mask written by item assignment", ev == [], ev
    ev, _ = judge(SetMask(), torch.randn(4, 5), torch.tensor([0, 1, 2, 3]))
    yield "a loss of a masked logit", len(ev) == 1 and ev[0][0].startswith("nll_loss") and \
        ev[0][1] == "nonfinite_producer", ev
    ev, j = judge(Router(), torch.randn(4, 8).softmax(-1))
    made = [(m.op, sorted(m.ops), m.left_out_by, m.what) for m in j.made]
    yield "a router's entropy", ev == [] and made == [("log", ["log", "mul"], "where", "-inf")], \
        (ev, made)
    x = (torch.randn(4, 8) * torch.tensor([[1.0], [1.0], [400.0], [1.0]])).half()
    details = []
    ev, j = judge(RmsNorm(), x, details=details)
    yield "an fp16 overflow rsqrt absorbs", ev == [("mul", "overflow_absorbed")] and \
        details[0].endswith("left out by rsqrt") and "input 0 f16" in details[0], (ev, details)
    ev, _ = judge(RmsNorm(f32=True), x)
    yield "the same in f32", ev == [], ev
    x = torch.tensor([[0.0, 1.0], [2.0, 3.0]]).half()
    ev, j = judge(Inverse(), x)  # 1 / 0 left out by where: a pole, no overflow
    yield "a pole left out is no overflow", ev == [] and \
        [(m.op, m.overflow, m.left_out_by) for m in j.made] == [("div", False, "where")], \
        (ev, [(m.op, m.overflow, m.left_out_by) for m in j.made])
    layers = [0]
    ev, _ = judge(Wrapper(layers), torch.randn(2, 8, dtype=torch.float64), layers=layers)
    yield "a wrapper's own code on a NaN gradient", ev == [], ev
    bad = torch.randn(2, 8, dtype=torch.float64)
    bad[1, 2] = float("nan")
    ev, _ = judge(Wrapper(layers), bad, layers=layers)
    yield "NaN data cast by a wrapper", ev == [("addmm", "nonfinite_input")], ev
    m = Bracketed()
    ev, _ = judge(m, bad.float())
    yield "named, the forward runs on to its end unjudged", \
        ev == [("addmm", "nonfinite_input")] and not m.open, (ev, m.open)


class Block(nn.Module):  # x + lin(ln(x))
    def __init__(self):
        super().__init__()
        self.ln, self.lin = nn.LayerNorm(8), nn.Linear(8, 8)

    def forward(self, x):
        return x + self.lin(self.ln(x))


class Model(nn.Module):  # a residual stream, a chain, a router's gate, an output read twice
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.chain = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
        self.gate, self.a, self.b = nn.Linear(8, 4), nn.Linear(8, 8), nn.Linear(8, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        h = self.chain(x)
        ent = self.gate(h).float().softmax(-1)
        h = self.a(h)
        return self.head(self.b(h) + h.relu()), ent.sum()


class RegisterPostBackwardFunction(torch.autograd.Function):  # FSDP2's, as it works
    @staticmethod
    def forward(ctx, module, *inputs):
        return inputs

    @staticmethod
    def backward(ctx, *grads):
        return (None,) + grads


def links_of(model, x):
    """Links of one forward of model, recorded by forward hooks as Watcher._on_output records
    them; returns (Links, name -> layer id)."""
    names = [n for n, _ in model.named_modules()]
    ids = {n: i for i, n in enumerate(names)}
    parents = [-1] + [ids[n.rsplit(".", 1)[0]] if "." in n else 0 for n in names[1:]]
    links = Links(lambda layer: parents[layer])
    for n, m in model.named_modules():
        m.register_forward_hook(lambda m, args, out, lid=ids[n]: links.add(
            lid, args, out if isinstance(out, torch.Tensor) else out[0]))
    model(x)
    links.close()
    return links, ids


def link_cases():
    links, ids = links_of(Model(), torch.randn(2, 8))
    names = {i: n for n, i in ids.items()}

    def reader(name):
        how = links.reader(ids[name])
        return how and (how[0], names.get(how[1], how[1]))
    expect = {"blocks.0": ("module", "blocks.1"),  # (its ln inside it left out)
              "blocks.0.ln": ("module", "blocks.0.lin"),
              "blocks.0.lin": ("code", "blocks.0.lin"),  # the residual add
              "blocks.1": ("module", "chain"),
              "chain.0": ("module", "chain.1"),
              "chain.2": ("code", "chain.2"),  # the chain's output: gate, a (two modules)
              "gate": ("code", "gate"),  # .float().softmax()
              "a": ("module", "b"),  # (the relu beside b is code: not seen)
              "head": ("loss", -1)}  # the model's output (its first)
    got = {n: reader(n) for n in expect}
    yield "what reads each module's output", got == expect, got

    def sources(name):
        srcs = links.sources(ids[name])
        return srcs and sorted(names[s] for s in srcs)
    expect = {"blocks.0": None,  # the data
              "blocks.0.ln": None,  # blocks.0's input: the data
              "blocks.0.lin": ["blocks.0.ln"],
              "blocks.1.ln": ["blocks.0"],
              "chain": ["blocks.1"],
              "chain.2": ["chain.1"],
              "gate": ["chain.2"],  # (the chain's output is chain.2's: the innermost named)
              "head": None}  # what code made (b's output + a relu)
    got = {n: sources(n) for n in expect}
    yield "which modules' outputs each module's inputs are", got == expect, got
    # a wrapper's identity function on a module's inputs (FSDP2's, by name) is looked through
    chain = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    chain[1].register_forward_pre_hook(
        lambda m, args: RegisterPostBackwardFunction.apply(m, *args))
    links, ids = links_of(chain, torch.randn(2, 8))
    got = links.reader(ids["0"]), links.sources(ids["1"])
    yield "through FSDP2's function on a module's inputs", got == (("module", ids["1"]),
                                                                   {ids["0"]}), got
    fresh, lin = Links(lambda layer: -1), nn.Linear(8, 8)
    fresh.add(0, (), lin(torch.randn(2, 8)))
    got = fresh.reader(0), fresh.sources(0)
    fresh.close()
    got += (fresh.reader(0),)
    yield "nothing named before the forward ends", got == (None, None, ("loss", -1)), got


if __name__ == "__main__":
    torch_cases.run("cpu_judge", list(cases()) + list(link_cases()))
