"""_judge.py — where a broken step's non-finite values came from, op by op (torch.py's re-run
of a step's forward, and its replay of the loss computation, hand every op here).

  Judge       decides, op by op in execution order: non-finite values that come with the model's
              input data (nonfinite_input) or earlier state, a parameter or buffer
              (nonfinite_propagated), are named where they first go in; values an op makes from
              finite inputs are followed to the end of what is judged (the forward's output, the
              loss), and the first op whose values got there is the producer
              (nonfinite_producer). A mask's -inf is no fault. When none got there, the
              first fp16/bf16 overflow that an op took in and left out of its output
              (rsqrt(inf) = 0: an RMSNorm's x * x past 65504) is named
              (overflow_absorbed): the forward stayed finite, its values did not.
  OpTracer    the dispatch mode of the forward's re-run: every aten op's inputs and outputs.
  Made        values an op made, carried on or left out (where(p > 0, log(p), 0)).

Needs only torch's dispatch modes, no CUDA and none of what the watcher hooks:
probe/python/tests/cpu_judge.py runs it on the CPU.
"""
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from . import _devstats, _vocab
from ._records import ERROR, INFO, PHASE_FWD, WARNING

_INF = float("inf")


def describe_now(what, t, allowed_neginf=False):
    """describe() of t computed now (the op-level tracer: a broken step, syncs are fine), its
    count of non-finite values (its -inf left out when allowed) and its count of -inf."""
    s = _devstats.eager_stats(t, _INF, 0.0).tolist()
    mn, mx = s[0], s[1]
    amax = max(abs(mn), abs(mx)) if mn <= mx else float("nan")
    if mn > mx:
        mn = mx = float("nan")
    bad = int(s[2] + s[3] + (0 if allowed_neginf else s[4]))
    return _vocab.describe(what, _vocab.dtype_name(t.dtype), t.shape, mn, mx, amax,
                           int(s[2]), int(s[3]), int(s[4])), bad, int(s[4])


def tensors(x):
    if isinstance(x, torch.Tensor):
        return [x]
    return [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor)]


def float_tensors(obj):
    return [t for t in tensors(obj) if t.is_floating_point() and t.numel() > 0]


# ---------------------------------------------------------------------------------------------
# The ops

VIEW_OPS = {"view", "reshape", "unsafe_view", "expand", "t", "transpose", "permute", "to_copy",
            "clone", "contiguous", "flatten", "unsqueeze", "squeeze", "slice", "select",
            "detach", "alias", "to", "float", "half", "bfloat16", "as_strided", "split",
            "split_with_sizes", "chunk", "unbind", "getitem"}
MASK_OPS = {"masked_fill", "where"}
# a -inf they write is a mask's too (x[:, pad] = -inf: setitem, or the aten ops it becomes)
# (or torch.full(..., -inf).triu(1), a causal mask made in the forward)
WRITE_MASK_OPS = {"setitem", "index_put", "fill", "lift_fresh", "lift_fresh_copy", "full",
                  "full_like", "new_full", "scalar_tensor"}
# a Python value made a tensor (the -inf of x[i] = -inf): what they take is no op's output
LIFT_OPS = {"lift_fresh", "lift_fresh_copy"}
# no mask's -inf goes into these (one that does is data arriving broken: log(0) features)
GEMM_OPS = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "mv", "addmv", "einsum",
            "convolution", "cudnn_convolution", "conv1d", "conv2d", "conv3d"}
# memory handed out as it is (whatever it held, NaN included): no op makes a value there
UNINIT_OPS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}
# an exact 0 in an input makes their inf (log(0), 1 / 0): a pole, no overflow
POLE_OPS = {"log", "log2", "log10", "xlogy", "div", "reciprocal", "rsqrt", "pow"}
LOW_PRECISION = (torch.float16, torch.bfloat16)


def overflowed(op, inputs, bad_outs):
    """Whether the non-finite values op made from finite inputs are an overflow of its fp16/bf16
    outputs (+inf or -inf past the dtype's largest value), not a NaN nor a pole's inf."""
    if not all(t.dtype in LOW_PRECISION for t in bad_outs):
        return False
    if any(_devstats.eager_stats(t, _INF, 0.0)[2].item() for t in bad_outs):  # a NaN
        return False
    return op not in POLE_OPS or not any(
        _devstats.eager_stats(t, _INF, 0.0)[7].item() for t in inputs)


def is_mask(t):
    """Whether t's non-finite values are -inf alone, and it has some (a broken step: syncs)."""
    if not t.is_floating_point():
        return False
    s = _devstats.eager_stats(t, _INF, 0.0).tolist()  # [2:5]: NaN, +inf, -inf
    return s[4] > 0 and s[2] + s[3] == 0


class Made:
    """Non-finite values an op made from finite inputs (nonfinite_producer). They matter once
    they reach the end of what is judged (the forward's output, the loss); a -inf that where()
    or masked_fill() leaves out on the way (where(p > 0, log(p), 0)) does not, though its
    backward may still turn it into a NaN gradient (0 * inf)."""
    __slots__ = ("layer", "op", "count", "detail", "what", "ops", "left_out_by", "left_out_in",
                 "overflow")

    def __init__(self, layer, op, count, detail, what):
        self.layer, self.op, self.count, self.detail, self.what = layer, op, count, detail, what
        self.ops = {op}  # the ops of its layer that carried them on (their backward meets them)
        self.left_out_by = None  # the first op that had them in an input and not in its output
        self.left_out_in = None  # and its layer
        self.overflow = False  # an fp16/bf16 overflow (overflowed())


class Judge:
    """Decides, op by op in execution order, where non-finite values came from: the model's
    input data or earlier state (said at once), or the first op that made ones that reached
    the end."""

    def __init__(self, w, step, data, state=()):
        """data: the model's inputs; state: its buffers (or, judging a loss computation, the
        output of a forward that ran again without an event). Those whose only non-finite
        values are -inf are masks (nn.Transformer.generate_square_subsequent_mask's)."""
        self.w, self.step = w, step
        masks = [t for t in list(data) + list(state) if is_mask(t)]
        self.masked = {id(t) for t in masks}  # ids of tensors whose -inf is a mask's
        self.data = {id(t) for t in data}  # model inputs (and views of them)
        self.keep = list(data) + masks  # the ids above stay valid while we run
        self.made = []  # Made, in order
        self.absorbed = None  # the Made emitted as overflow_absorbed
        self.carriers = {}  # id(tensor) -> (weakref to it, the Made whose values it holds)
        self.event = None

    def _carried(self, t):
        e = self.carriers.get(id(t))
        return e[1] if e is not None and e[0]() is t else None

    def before_write(self, t):
        """A copy of t as it is now, to judge in its place as the input of an op that writes
        into it (x += y turned inf: its input x was finite)."""
        c = t.detach().clone()
        for ids in (self.masked, self.data):
            if id(t) in ids:
                ids.add(id(c))
                self.keep.append(c)
        made = self._carried(t)
        if made is not None:
            self.carriers[id(c)] = (weakref.ref(c), made)
        return c

    def judge(self, op, layer, inputs, outputs):
        """Judges one op. Emits an event and returns its kind when non-finite values came into
        it from the model's input data or from earlier state (a parameter or buffer: from an
        earlier step); values it made from finite inputs become a Made, kept until finish()
        tells whether they reached the end, and those an earlier op made are carried on by its
        outputs or left out. Else None."""
        if op in UNINIT_OPS:
            return
        if op in LIFT_OPS:
            inputs = ()
        detail, in_bad, from_data, carried = "", False, False, None
        allowed = op not in GEMM_OPS and any(id(t) in self.masked for t in inputs)
        for k, t in enumerate(inputs):
            seg, bad, _ = describe_now("input %d" % k, t, allowed and id(t) in self.masked)
            detail += seg
            if bad:
                carried = carried or self._carried(t)
                in_bad |= carried is None
                from_data |= id(t) in self.data
        out_bad, neginf, bad_outs = 0, 0, []
        writes_mask = op in WRITE_MASK_OPS
        for t in outputs:
            seg, bad, n = describe_now("output", t, allowed or writes_mask or op in MASK_OPS)
            if op in MASK_OPS or allowed or (writes_mask and n):
                for m in (t, t._base):  # (x[:, 0] = -inf writes through a view: x is masked)
                    if m is not None:
                        self.masked.add(id(m))
                        self.keep.append(m)
            out_bad += bad
            neginf += n
            if bad:
                bad_outs.append(t)
            detail += seg
        if from_data and op in VIEW_OPS:  # the data, reshaped or cast: still the data
            for t in outputs:
                self.data.add(id(t))
                self.keep.append(t)
            return
        if carried is None and (in_bad or out_bad):
            if in_bad:  # from the data, or non-finite parameters or state of an earlier step
                kind, sev = ("nonfinite_input", ERROR) if from_data else \
                    ("nonfinite_propagated", INFO)
                self.w.rec.event(self.step, layer, op, PHASE_FWD, kind, sev, out_bad or -1,
                                 None, detail)
                self.event = kind
                return kind
            carried = Made(layer, op, out_bad, detail,
                           "-inf" if out_bad == neginf else "NaN/inf")
            carried.overflow = overflowed(op, inputs, bad_outs)
            self.made.append(carried)
        elif carried is not None and layer == carried.layer and bad_outs:
            carried.ops.add(op)
        if carried is not None and not bad_outs and carried.left_out_by is None:
            carried.left_out_by, carried.left_out_in = op, layer
        for t in bad_outs:
            self.carriers[id(t)] = (weakref.ref(t), carried)

    def pass_through(self, inputs, outputs):
        """An op of a wrapper's own code (FSDP1's: the parameters gathered, the inputs cast to
        its param_dtype), which is not the model's: no event, its outputs what its inputs were
        (the data, a mask, carriers of made values)."""
        data = any(id(t) in self.data for t in inputs)
        masked = any(id(t) in self.masked for t in inputs)
        made = next((m for m in map(self._carried, inputs) if m is not None), None)
        for t in outputs:
            if data:
                self.data.add(id(t))
            if masked:
                self.masked.add(id(t))
            if data or masked:
                self.keep.append(t)
            if made is not None:
                self.carriers[id(t)] = (weakref.ref(t), made)

    def finish(self, result):
        """The end of what was judged (result: the forward's output, the loss): emits the
        first Made that reached it and returns its kind, else None. When none did, the first
        overflow left out on the way is emitted (overflow_absorbed, a warning: the forward
        stayed finite, so the search for where the step broke goes on; still None)."""
        reached = [m for m in map(self._carried, float_tensors(result)) if m is not None]
        if reached and self.event is None:
            m = min(reached, key=self.made.index)
            self.w.rec.event(self.step, m.layer, m.op, PHASE_FWD, "nonfinite_producer", ERROR,
                             m.count, None, m.detail)
            self.event = "nonfinite_producer"
        elif self.event is None:
            m = next((m for m in self.made if m.overflow and m.left_out_by), None)
            if m is not None:
                where = "" if m.left_out_in == m.layer else " (in %s)" % (
                    "the top level" if m.left_out_in is None or m.left_out_in < 0
                    else self.w.layer_name(m.left_out_in))
                self.w.rec.event(self.step, m.layer, m.op, PHASE_FWD, "overflow_absorbed",
                                 WARNING, m.count, None,
                                 m.detail + "left out by %s%s" % (m.left_out_by, where))
                self.absorbed = m
        return self.event


class OpTracer(TorchDispatchMode):
    """The forward re-run: every aten op's inputs and outputs, in the innermost module (layers:
    the layer stack, None on top in a wrapper's own code, which is looked through:
    Judge.pass_through). Once the judge has named where the step broke, the rest of the
    forward runs as it is, unjudged: it is not stopped half-way, as code that is not
    exception-safe would be left half-done: torch.utils.checkpoint's non-reentrant form leaves
    its saved-tensor hooks pushed until its suspended generator is collected, and under FSDP1
    with checkpoint_wrapper the training after a NaN step went another way than without
    ampprobe (its losses from two steps on; test_wrapped_trains_as_without_ampprobe)."""

    def __init__(self, judge, layers):
        super().__init__()
        self.j, self.layers = judge, layers

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.j.event is not None:  # named: the rest runs unjudged
            return func(*args, **kwargs)
        if self.layers[-1] is None:  # a wrapper's own code (FSDP1's), not the model's
            out = func(*args, **kwargs)
            self.j.pass_through(float_tensors((args, kwargs)), float_tensors(out))
            return out
        before = {id(t): None if overwritten else self.j.before_write(t)
                  for t, overwritten in written(func, args, kwargs) if t.is_floating_point()}
        out = func(*args, **kwargs)
        ins = [before.get(id(t), t) for t in float_tensors((args, kwargs))]
        ins = [t for t in ins if t is not None]  # (an out= tensor is not an input)
        outs = float_tensors(out)
        if outs:
            self.j.judge(_vocab.op_name(func.overloadpacket.__name__), self.layers[-1], ins, outs)
        return out


# in-place ops that overwrite all of their tensor: what it held is not an input (FSDP's
# all-gather copies into memory torch.empty handed out)
OVERWRITES = {"copy_", "fill_", "zero_", "normal_", "uniform_", "bernoulli_", "random_",
              "exponential_"}


def written(func, args, kwargs):
    """(tensor, is what it held not an input) for each tensor the aten op func writes into, as
    its schema marks them: add_'s self (an input), copy_'s (not), out= (not)."""
    found = []
    for k, arg in enumerate(func._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            x = args[k] if k < len(args) else kwargs.get(arg.name)
            if isinstance(x, torch.Tensor):
                found.append((x, arg.is_out or func.overloadpacket.__name__ in OVERWRITES))
    return found
