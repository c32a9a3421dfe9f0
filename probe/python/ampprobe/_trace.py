"""_trace.py — the op-level tracing of the PyTorch bridge (torch.py's Watcher drives it): the loss
tape that keeps each step's loss computation and replays it on a broken step's re-run forward, the
modes that tag autograd nodes with their layer and record an op step (AMP_OPS), and the dispatch
mode that finds the first backward op to go non-finite. The judging of each op is _judge.py's.
"""
import functools
import weakref

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from . import _vocab
from ._judge import OVERWRITES, VIEW_OPS, describe_now, float_tensors, tensors
from ._records import PHASE_BWD, PHASE_FWD, WARNING


_autocast_on = functools.partial(torch.is_autocast_enabled,
                                 "cuda" if torch.cuda.is_available() else "cpu")


def _map_args(fn, x):
    """fn applied to each leaf of a call's arguments: through tuples, lists and dicts (cheaper
    than pytree's tree_map, on every taped call)."""
    kind = type(x)
    if kind is tuple or kind is list:
        return kind(_map_args(fn, y) for y in x)
    if kind is dict:
        return {k: _map_args(fn, v) for k, v in x.items()}
    return fn(x)


class _Slot:
    """In a taped call's arguments, a tensor of the forward's loss computation: the model's
    output (its first slots) or what a taped call made. Replayed, it stands for the re-run's."""
    __slots__ = ("n",)

    def __init__(self, n):
        self.n = n


class Forward:
    """One forward of the model in a step (several with gradient accumulation): its inputs and
    autocast state, held until the step ends (what a broken step is re-run from), and its loss
    computation as the tape saw it."""
    __slots__ = ("args", "kwargs", "dev", "ac", "ac_dtype", "tape", "slots", "n_slots",
                 "loss_slot")

    def __init__(self, args, kwargs, dev, ac, ac_dtype):
        self.args, self.kwargs, self.dev, self.ac, self.ac_dtype = args, kwargs, dev, ac, ac_dtype
        self.tape = []  # (func, arguments with _Slots, its first output slot, autocast on, layer)
        self.slots = {}  # id(tensor) -> (weakref to it, its slot), while it lives
        self.n_slots = 0
        self.loss_slot = None  # the slot of the loss backward() was called on

    def slot_all(self, obj):
        """Gives each tensor of obj the next slot; returns the first."""
        first = self.n_slots
        for t in tensors(obj):
            self.slots[id(t)] = (weakref.ref(t), self.n_slots)
            self.n_slots += 1
        return first

    def slot_of(self, t):
        """t's slot if the forward's output or a taped call made it, else None (a tensor that
        came from elsewhere: the labels). An id is only trusted while its tensor lives."""
        e = self.slots.get(id(t))
        return e[1] if e is not None and e[0]() is t else None

    def _arg(self, x):
        if isinstance(x, torch.Tensor):
            n = self.slot_of(x)
            if n is not None:
                return _Slot(n)
        return x


def _first_tensor(args):
    """The tensor a call works on: its first argument (self), or the first of a list of them
    (torch._foreach_*); None when there is none."""
    x = args[0] if args else None
    if type(x) in (list, tuple):
        x = x[0] if x else None
    return x if isinstance(x, torch.Tensor) else None


class LossTape(TorchFunctionMode):
    """Between the model's output and backward(): what the loss computation called, kept until
    the step ends (only replayed when the step broke). The tensors it made are not held (the
    f32 logits of a language model are large): a call's arguments keep them as _Slots; what it
    took from elsewhere (labels, class weights) is held. A call that reads or writes what a
    tensor from elsewhere holds (optimizer.zero_grad() reading each .grad or zeroing it, a
    running total `total += loss.detach()`) is not taped: it is not the loss's computation,
    replayed after the backward it would read the gradients backward() made, and replayed at
    all it would write into the program's tensors again."""

    def __init__(self):
        super().__init__()
        self.fwd = None  # the Forward whose loss computation is being taped
        self.active = False
        self.layers = [-1]  # the innermost running module of a model added later (its layer)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        f = self.fwd
        name = getattr(func, "__name__", "")
        if f is not None and (isinstance(out, (torch.Tensor, tuple, list)) or
                              name == "__setitem__") and \
                (not _vocab.touches_state(name, kwargs) or
                 f.slot_of(_first_tensor(args)) is not None):
            spec = _map_args(f._arg, (args, kwargs or {}))
            f.tape.append((func, spec, f.slot_all(out), _autocast_on(), self.layers[-1]))
        return out

    def begin(self, fwd, output):
        """Tapes fwd's loss computation, which starts from the model's output."""
        del self.layers[1:]  # (a module that raised never popped its layer)
        fwd.slot_all(output)
        self.fwd = fwd
        if not self.active:
            self.active = True
            self.__enter__()

    def end(self):
        if self.active:
            self.active = False
            self.__exit__(None, None, None)
        self.fwd = None


class NodeTagger(TorchFunctionMode):
    """The forward re-run with a graph: tags the autograd node behind each function's output
    with the innermost module's layer and the function (what a backward op is then named by)."""

    def __init__(self, layers):
        super().__init__()
        self.layers = layers

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.layers[-1] is not None:  # (None: a wrapper's own code)
            tag_nodes(out, self.layers[-1], func)
        return out


def tag_nodes(out, layer, func):
    """Tags the autograd nodes behind out's tensors (those not tagged yet) with layer and func."""
    for t in tree_flatten(out)[0]:
        node = t.grad_fn if isinstance(t, torch.Tensor) else None
        if node is not None and "ampprobe" not in node.metadata:
            node.metadata["ampprobe"] = (layer, _vocab.op_name(getattr(func, "__name__",
                                                                        str(func))))


def layer_stack_hooks(layer_of, stack, quiet=frozenset()):
    """Global module hooks that keep stack[-1] the layer of the innermost module running (the
    bottom entry stays), None in the code of a wrapper (quiet: their ids) around the module it
    wraps (FSDP1's: its parameters gathered and viewed, the inputs cast to its param_dtype),
    which is not the model's; returns their handles."""
    def pre(m, inputs):
        stack.append(None if id(m) in quiet else layer_of.get(id(m), stack[-1]))

    def post(m, inputs, output):
        if len(stack) > 1:
            stack.pop()

    return [torch.nn.modules.module.register_module_forward_pre_hook(pre),
            torch.nn.modules.module.register_module_forward_hook(post)]


_CASTS = {"to", "float", "half", "bfloat16", "double", "type", "type_as"}  # recorded as "to"
_NOT_OPS = (VIEW_OPS - _CASTS) | {"size", "dim", "numel", "data_ptr", "is_contiguous",
                                  "get_device", "requires_grad_", "retain_grad", "item"}


class OpRecorder(TorchFunctionMode):
    """An op step (AMP_OPS): every torch function the forward and the loss computation call,
    with the innermost module's layer, its host interval, autocast's policy for it, the dtypes
    after autocast's casts, shapes, analytic FLOPs and bytes (_vocab.op_row). Views and
    metadata are left out, and casts that change nothing."""

    def __init__(self, w, step, dev, layers=None):
        super().__init__()
        self.w, self.step, self.dev = w, step, dev
        # begun in the model's pre-hook: its own layer, or None in a wrapper's code (after the
        # model: outside any module)
        self.layers = layers or [-1, None if id(w.outer) in w.quiet else w.layer_of[id(w.model)]]
        self.hooks = []

    def start(self):
        self.hooks = layer_stack_hooks(self.w.layer_of, self.layers, self.w.quiet)
        self.__enter__()

    def stop(self):
        self.__exit__(None, None, None)
        for h in self.hooks:
            h.remove()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        rec = self.w.rec
        start = rec.now_ns()
        out = func(*args, **(kwargs or {}))
        end = rec.now_ns()
        name = getattr(func, "__name__", "")
        op = _vocab.op_name(name)
        if name.startswith("__get") or op in _NOT_OPS or self.layers[-1] is None:
            return out
        outs = float_tensors(out)
        ins = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if not outs or not ins:
            return out
        dt = _vocab.dtype_name
        rows = [(dt(t.dtype), tuple(t.shape), t.element_size()) for t in ins]
        o = outs[0]
        res = (dt(o.dtype), tuple(o.shape), o.element_size())
        if op in _CASTS:
            if rows[0][0] == res[0]:
                return out  # a cast to the dtype it had
            name = "to"
        policy = rec.autocast_policy(name) if torch.is_autocast_enabled(self.dev) else None
        op, in_dtypes, out_dtype, shapes, flops, nbytes = _vocab.op_row(name, rows, res, policy)
        rec.op(self.step, self.layers[-1], op, PHASE_FWD, in_dtypes, out_dtype, policy, shapes,
               flops, nbytes, start, end)
        return out


_current_node = getattr(torch._C, "_current_autograd_node", lambda: None)


class BwdTracer(TorchDispatchMode):
    """The backward re-run: the first aten op whose output is non-finite made it (its inputs are
    gradients from finite ops and saved forward values of a finite forward, masks' -inf aside).
    Named by the tag of the autograd node it ran in, else of the last tagged node the backward
    went through (an untagged node is an inner one of the same function or module). When the
    forward's values that op carried were non-finite and left out after it (where(p > 0,
    log(p), 0): log's -inf), the detail says so: its backward multiplies a zero gradient by
    them (0 * inf = NaN). After that op the backward runs on untraced: raising would end the
    backward while autograd's worker thread still unwinds Python frames and lets go of nodes (see
    worker_idle)."""

    def __init__(self, w, step, left=()):
        super().__init__()
        self.w, self.step, self.left = w, step, [m for m in left if m.left_out_by]
        self.tag = (-1, None)
        self.event = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.event is not None:
            return out
        node = _current_node()
        tag = node.metadata.get("ampprobe") if node is not None else None
        if tag is not None:
            self.tag = tag
        outs = float_tensors(out)
        if outs and not all(bool(torch.isfinite(t).all()) for t in outs):
            layer, op = self.tag
            aten = _vocab.op_name(func.overloadpacket.__name__)
            detail = "in %s (%s); " % (node.name() if node is not None else "the engine", aten)
            for m in self.left:
                if m.layer == layer and op in m.ops:
                    detail = "its forward made %s (%s) that %s left out: the backward still " \
                        "goes through them; %s" % (m.what, m.op, m.left_out_by, detail)
                    break
            for k, t in enumerate(float_tensors((args, kwargs))):
                detail += describe_now("input %d" % k, t, True)[0]
            bad, amax = 0, float("nan")
            for t in outs:
                seg, n, _ = describe_now("gradient", t)
                detail += seg
                bad += n
                fin = t[torch.isfinite(t)]
                if fin.numel():
                    amax = float(fin.abs().max())
            self.w.rec.event(self.step, layer, op or aten, PHASE_BWD, "nonfinite_producer",
                             WARNING, bad, amax, detail)
            self.event = "nonfinite_producer"
        return out


def worker_idle(devices):
    """Returns once autograd's worker thread of each CUDA device in devices is done with the
    backward it ran last. backward() and autograd.grad() return as soon as the last node ran,
    while the worker goes on letting go of that backward (its graph task, with the dispatch mode
    it ran under; nodes whose metadata or hooks are Python objects), which takes the GIL: at
    exit, with the interpreter finalizing, that kills the process ("terminate called without an
    active exception", SIGABRT). The worker takes a new backward only once it let go of the
    last, so a tiny one run to its end on each device waits for that: a backward into a leaf no
    Python code sees (not Tensor.backward: the watchers take that for a loss; autograd.grad
    would leave its result, a Python tensor, in the graph task the worker lets go of last)."""
    for dev in devices:
        if dev.type == "cuda":
            try:
                torch.autograd.backward(torch.zeros((), device=dev, requires_grad=True) * 2.0)
            except RuntimeError:  # a CUDA context that failed: its worker runs nothing more
                return


def replay(f, out, judge=None, graph=False):
    """The taped loss computation of forward f run again on out, the re-run forward's output:
    with judge, each call's inputs and outputs are judged (Judge.judge) in the layer they were
    taped in (-1: outside any module; a module of a model added later: Models.add_root), up to the
    loss (else the last call's output: Judge.finish); with graph, the autograd nodes it makes
    are tagged so. Returns the tensor that stands for the loss backward() was called on (None:
    not there, or the loss is not a one-element tensor that needs gradients), or None when it
    cannot be replayed (a tensor a call took from the loss computation is gone) or the judge
    named where it broke. Nothing it runs writes into the
    program's tensors: the tape leaves out writes into tensors from elsewhere (LossTape)."""
    vals = dict(enumerate(tensors(out)))
    missing, outs = [], []

    def arg(x):
        if isinstance(x, _Slot):
            if x.n not in vals:
                missing.append(x.n)
            return vals.get(x.n)
        return x

    for func, spec, first, ac, layer in f.tape:
        a, k = _map_args(arg, spec)
        if missing:
            return None
        name = getattr(func, "__name__", "")
        target = _first_tensor(a) if name != "__get__" and _vocab.touches_state(name, k) else None
        before = judge.before_write(target) if judge is not None and target is not None and \
            target.is_floating_point() and name not in OVERWRITES else None
        with torch.autocast(f.dev, dtype=f.ac_dtype, enabled=ac):
            r = func(*a, **k)
        if graph:
            tag_nodes(r, layer, func)  # outside the model (-1), or in a model added later
        for n, t in enumerate(tensors(r)):
            vals[first + n] = t
        outs = float_tensors(a[:1] if r is None else r)  # (None: __setitem__ wrote into a[0])
        if judge is not None and outs:
            ins = [before if t is target else t for t in float_tensors((a, k))]
            ins = [t for t in ins if t is not None]  # (what copy_ or fill_ overwrites is none)
            if judge.judge(_vocab.op_name(func), layer, ins, outs):
                return None
    loss = vals.get(f.loss_slot) if f.loss_slot is not None else None
    if judge is not None and judge.finish(outs if loss is None else loss):
        return None
    return loss if loss is not None and loss.requires_grad and loss.numel() == 1 else None
