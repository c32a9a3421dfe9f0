#!/usr/bin/env python3
"""cpu_diagnose.py — the watcher's parts that work from a recorded step's figures, on the CPU with
whatever torch is installed (Debian's python3-torch 1.13 does): the search per module of
ampprobe/_diagnose.py (where the statistics say a forward or a backward first went non-finite,
when the step cannot be traced op by op) and the comparison of 16-bit parameters' updates of
ampprobe/_updates.py. Prints a line per case and "cpu_diagnose: all passed"; exits 1 on a
failure, 77 without torch.

  PYTHONPATH=probe/python python3 probe/python/tests/cpu_diagnose.py

Cases, on a Linear-ReLU-Linear model whose module links come from a real forward: a ReLU output
that goes non-finite from a finite Linear output is made in it; a NaN in the model's input data is
named as such; a parameter that held NaN as the step began is said to have carried it
(nonfinite_propagated); a non-finite gradient of the ReLU's output was made by the backward of
the Linear that reads it, with the gradient that came into it; one of the model's output by the
loss computation; a parameter gradient in its own module. A whole step's events: a loss-scale
overflow (the backward's producer, grad_overflow, the skip, the backoff and the scale row), a
forward that broke (its module, then the loss), a healthy step whose scale grew, an f32 output
beyond f16's range (info), a loss that went non-finite alone. An fp16 weight updated by SGD with a
step below half its last place loses every update that has a gradient (values without one are
not counted), a bf16 one with a large step none, an f32 one is not compared, only the first 4096
values of a weight are; nothing is compared after drop(), for a step() handed a closure, for a
parameter group whose learning rate is 0, or when another optimizer steps.
"""
import math
import sys

try:
    import torch
except ImportError:
    print("cpu_diagnose: no torch: skipped")
    sys.exit(77)

import torch.nn as nn

import torch_cases
from ampprobe import _diagnose, _updates, _vocab
from ampprobe._devstats import Figures
from ampprobe._links import Links
from ampprobe._records import ACTIVATION, ACTIVATION_GRAD, WEIGHT, WEIGHT_GRAD, WEIGHT_UPDATE
from ampprobe._records import StatsSummary


def finite(n=8):
    """A tensor's figures with every value finite."""
    return Figures(n, -1.0, 2.0, 0, 0, 0, 0, 0, 0, 5.0)


def nan(n=8, k=3):
    """A tensor's figures with k NaN among them."""
    return Figures(n, -1.0, 2.0, k, 0, 0, 0, 0, 0, math.nan)


class Watcher(torch_cases.Events):
    """What the diagnoser reads of a watcher: the events it records (torch_cases.Events) and
    the scale updates, the module links of the first forward and each module's layer and op;
    its steps cannot run again (as a model sharded over several processes)."""

    def __init__(self, model, layer_of, ops):
        super().__init__()
        self.scales, self.target = [], "f16"
        self._rerunnable = self._bwd_rerunnable = False
        parents = {layer_of[id(model)]: -1}
        parents.update({layer_of[id(m)]: layer_of[id(model)] for m in model.children()})
        self.links = Links(parents.get)
        self._module_info = {i: (layer, ops[layer], None, None) for i, layer in layer_of.items()
                             if layer in ops}
        handles = [m.register_forward_hook(
            lambda mod, args, out: self.links.add(layer_of[id(mod)], args, out))
            for m in model.modules()]
        model(torch.randn(5, 4))
        for h in handles:
            h.remove()
        self.links.close()

    def scale(self, step, before, after, found, tracker, skipped):
        self.scales.append((step, before, after, found, skipped))


class Step:
    """A recorded step as the diagnoser reads it (torch.py's _Done)."""

    def __init__(self, entries, inputs=()):
        self.step, self.entries = 7, entries
        self.forwards = [type("Forward", (), {"args": inputs, "kwargs": {}})]
        self.updated = self.grads_bad = False


class Copy:
    """A step's figures on the host (_devstats.Copy)."""

    def __init__(self, figures):
        self.figures = figures

    def result(self):
        return self.figures, []


def summary(entries, figures):
    """What the C call that records a step's statistics sums up of them."""
    s = StatsSummary()
    for (_, kind, _, dtype), f in zip(entries, figures):
        s.nonfinite[kind] += f.nonfinite
        if kind == ACTIVATION and dtype == "f32":
            s.f32_overflow += f.n_overflow
    s.zero_jump = -1
    return s


def diagnosis_cases():
    """(name, passed, what was found) per case of the diagnosis: the search per module, then
    whole steps' events."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    layer_of = {id(model): 0, id(model[0]): 1, id(model[1]): 2, id(model[2]): 3}
    ops = {1: "linear", 2: "relu", 3: "linear"}

    def forward(weight_fig, relu_fig, data):
        w = Watcher(model, layer_of, ops)
        d = Step([(1, WEIGHT, "0.weight", "f32"), (1, ACTIVATION, "linear", "f32"),
                  (2, ACTIVATION, "relu", "f32"), (3, ACTIVATION, "linear", "f32")], data)
        got = _diagnose.Diagnoser(w)._forward_producer(d, [weight_fig, finite(), relu_fig,
                                                           nan()], "why")
        return got, w

    got, w = forward(finite(), nan(), (torch.randn(5, 4),))
    yield "a ReLU output non-finite from a finite Linear output was made in it", \
        got == "nonfinite_module" and w.events == [("relu", "nonfinite_module")] and \
        w.layers == [2] and "made in it: its inputs were finite (the output of layer1)" in \
        w.details[0] and w.details[0].endswith("not traced op by op: why"), \
        (got, w.events, w.layers, w.details)

    data = torch.randn(5, 4)
    data[1, 2] = float("nan")
    got, w = forward(finite(), nan(), (data,))
    yield "a NaN in the model's input data is named as such", \
        got == "nonfinite_input" and w.layers == [2] and w.details[0].startswith("input 0 f32"), \
        (got, w.layers, w.details)

    got, w = forward(nan(), nan(), (torch.randn(5, 4),))
    yield "a parameter that held NaN as the step began carried it", \
        got == "nonfinite_propagated" and "the parameter 0.weight held NaN/inf" in w.details[0], \
        (got, w.details)

    def backward(entries, figs):
        w = Watcher(model, layer_of, ops)
        _diagnose.Diagnoser(w)._backward_producer(Step(entries), figs, "a note")
        return w

    grads = [(3, ACTIVATION_GRAD, "linear", "f32"), (2, ACTIVATION_GRAD, "relu", "f32"),
             (1, ACTIVATION_GRAD, "linear", "f32")]
    w = backward(grads, [finite(), nan(), nan()])
    yield "a non-finite gradient of the ReLU's output was made by the Linear that reads it", \
        w.events == [("linear", "nonfinite_producer")] and w.layers == [3] and \
        w.details[0].startswith("incoming gradient f32") and \
        "made by layer3's backward; a note" in w.details[0], (w.events, w.layers, w.details)

    w = backward(grads, [nan(), nan(), nan()])
    yield "a non-finite gradient of the model's output was made by the loss computation", \
        w.events == [("loss", "nonfinite_producer")] and w.layers == [-1], \
        (w.events, w.layers, w.details)

    w = backward([(3, ACTIVATION_GRAD, "linear", "f32"), (3, WEIGHT_GRAD, "2.weight", "f32")] +
                 grads[1:], [finite(), nan(), nan(), nan()])
    yield "a non-finite parameter gradient was made in its own module", \
        w.events == [("linear", "nonfinite_producer")] and w.layers == [3] and \
        "the gradient of 2.weight, made by layer3's backward" in w.details[0], \
        (w.events, w.layers, w.details)

    # whole steps' events (emit), from their figures and scalars
    def emit(entries, figs, loss, scale):
        w = Watcher(model, layer_of, ops)
        d = Step(entries, (torch.randn(5, 4),))
        _diagnose.Diagnoser(w).emit(d, Copy(figs), summary(entries, figs), loss, scale)
        return w

    w = emit(grads, [finite(), nan(), nan()], 2.5, [65536.0, 1.0, 32768.0, 0.0])
    yield "a loss-scale overflow: the backward's producer, the overflow, the skip, the backoff", \
        w.events == [("linear", "nonfinite_producer"), (None, "grad_overflow"),
                     (None, "step_skipped"), (None, "scale_backoff")] and \
        "backed off to 32768" in w.details[1] and w.scales == [(7, 65536.0, 32768.0, 1.0, True)], \
        (w.events, w.details, w.scales)

    acts = [(1, ACTIVATION, "linear", "f16"), (2, ACTIVATION, "relu", "f16"),
            (3, ACTIVATION, "linear", "f16")]
    w = emit(acts, [finite(), nan(), nan()], float("nan"), [65536.0, 1.0, 32768.0, 0.0])
    yield "a forward that broke: its module, the loss, no gradient overflow", \
        w.events[:2] == [("relu", "nonfinite_module"), (None, "loss_nonfinite")] and \
        w.details[1] == "the forward pass produced non-finite values" and \
        (None, "grad_overflow") not in w.events, (w.events, w.details)

    w = emit(acts, [finite(), finite(), finite()], 2.5, [1024.0, 0.0, 2048.0, 0.0])
    yield "a healthy step whose scale grew: that growth only", \
        w.events == [(None, "scale_growth")] and w.scales == [(7, 1024.0, 2048.0, 0.0, False)], \
        (w.events, w.scales)

    over = Figures(8, -7e4, 7e4, 0, 0, 0, 2, 0, 0, 1e10)  # two values beyond f16's range
    w = emit([(1, ACTIVATION, "linear", "f32")] + acts[1:], [over, finite(), finite()], 2.5,
             [1024.0, 0.0, 1024.0, 1.0])
    yield "an f32 output beyond the f16 range: noted (info), nothing broke", \
        w.events == [("linear", "overflow")] and w.layers == [1] and \
        "overflows if it runs in f16" in w.details[0], (w.events, w.layers, w.details)

    w = emit(acts, [finite(), finite(), finite()], float("inf"), None)
    yield "a loss that went non-finite alone (no scaler)", \
        w.events == [(None, "loss_nonfinite")] and \
        w.details == ["the loss itself became non-finite"] and w.scales == [], \
        (w.events, w.details)


class Recorder:
    """The watcher's parts the update check reads: its parameters, their gradients' entries
    and the rows it records."""

    def __init__(self, params):
        self._plist = params
        self._wentries = [(10 + k, WEIGHT_GRAD, "p%d" % k, _vocab.dtype_name(p.dtype))
                          for k, p in enumerate(params)]
        self._handles, self.rows = [], []
        self.rec = self

    def tensor_stats(self, step, layer, name, kind, dtype, shape, numel, mn, mx, amax, n_nan,
                     n_posinf, n_neginf, n_overflow, n_underflow, n_zero):
        self.rows.append((step, layer, name, kind, dtype, numel, n_zero))


def param(dtype, n, grad, moving=None):
    """A parameter of n ones, its gradient grad where moving (a count from the start; all when
    None), 0 elsewhere."""
    p = nn.Parameter(torch.ones(n, dtype=dtype))
    g = torch.full((n,), grad, dtype=dtype)
    if moving is not None:
        g[moving:] = 0
    p.grad = g
    return p


def update_cases():
    """(name, passed, what was found) per case of the update check."""
    p16 = param(torch.float16, 100, 1e-3, moving=60)  # lr * grad = 1e-5: below 1.0's half ulp
    pbf = param(torch.bfloat16, 50, 10.0)  # lr * grad = 0.1: moves every value
    p32 = param(torch.float32, 20, 1e-3)
    big = param(torch.float16, 5000, 1e-3)
    w = Recorder([p16, pbf, p32, big])
    check = _updates.UpdateCheck(w)
    opt = torch.optim.SGD([p16, pbf, p32, big], lr=1e-2)
    check.before(opt, 4)
    opt.step()
    check.after(opt)
    check.record(True)
    got = list(w.rows)  # (step, layer, name, kind, dtype, values compared, values unchanged)
    want = [(4, 10, "p0", WEIGHT_UPDATE, "f16", 60, 60),
            (4, 11, "p1", WEIGHT_UPDATE, "bf16", 50, 0),
            (4, 13, "p3", WEIGHT_UPDATE, "f16", 4096, 4096)]
    yield "an fp16 update below half an ulp is lost, a large bf16 one is not, f32 not compared", \
        got == want, got

    def compared(run):
        w.rows.clear()
        run()
        check.record(True)
        return list(w.rows)

    def dropped():
        check.before(opt, 5)
        check.drop()
        opt.step()
        check.after(opt)

    def closure():
        check.before(opt, 5, (), {"closure": lambda: None})
        opt.step()
        check.after(opt)

    def another():
        check.before(opt, 5)
        other = torch.optim.SGD([p16], lr=1e-2)
        other.step()
        check.after(other)

    still = torch.optim.SGD([p16], lr=0.0)

    def no_rate():
        check.before(still, 5)
        still.step()
        check.after(still)

    for what, run in (("after drop()", dropped), ("for a step() handed a closure", closure),
                      ("when another optimizer steps", another),
                      ("for a parameter group whose learning rate is 0", no_rate)):
        got = compared(run)
        yield "nothing compared " + what, got == [], got


if __name__ == "__main__":
    torch_cases.run("cpu_diagnose", list(diagnosis_cases()) + list(update_cases()))
