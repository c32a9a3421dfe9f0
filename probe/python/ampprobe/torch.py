"""torch.py — the PyTorch bridge: watch a training loop and record it as libampcore would.

    import ampprobe.torch as ap
    ap.watch(model, scaler=scaler, optimizer=opt, stats_every=1)

Under `ampprobe run` (AMPPROBE_SPOOL_DIR) it writes, through libampcore's record API
(_records.py), the module tree (AMP_LAYERS), per-layer statistics of every module output, its
gradient and every parameter gradient (before the GradScaler unscales it, as libampcore does)
with overflow/underflow counts against the autocast dtype (AMP_TENSOR_STATS), every GradScaler
update (AMP_SCALE), the steps (AMP_STEPS) and the events (AMP_EVENTS). Without a recording
launcher watch() attaches nothing.

Cost. Each tensor's nine figures are a two-stage reduction (rows, then the rows' figures)
into a device tensor, through torch.compile (AMPPROBE_TORCH_COMPILE=0: eager); nothing waits
until the step ends, where one .cpu() brings the step's figures back. A step ends at
scaler.update() (with an enabled GradScaler), else before optimizer.step() (so parameters are
still those of the forward), else at the model's next forward. Measured on an H200 this is far
from cheap: +270% to +490% step time on probe/bench/torch_baseline.py's workloads at
stats_every=1 (torch_overhead.py): torch.compile hit its recompile limit (8) on the varying
shapes and ran the shapes beyond it eagerly, about twenty full-size kernels per tensor, plus a
Python call per tensor. stats_every=N computes statistics on every Nth step only.

Non-finite values. When a step went non-finite (loss, found_inf or a statistic), the step's
forward is run again on the same inputs under an op-level dispatch mode that checks every op's
inputs and outputs: the first op whose inputs were finite and output was not is the producer
(nonfinite_producer, with its input ranges); a non-finite model input is data arriving broken
(nonfinite_input). An attention mask's -inf (masked_fill/where with -inf) and what it flows into
are not faults. If the forward stays finite, the loss computation between the model's output
and backward()/scaler.scale() is searched: its ops are taped (references only) by a torch
function mode on every step, so a hand-written loss's log(0) is named at the step it happened,
outside any module. If the loss is finite too, found_inf means the gradients overflowed while
the forward stayed finite: a loss-scale overflow (grad_overflow, info), with the module whose
backward first handed on a non-finite gradient (nonfinite_producer, bwd). Re-runs assume the
forward is deterministic (dropout draws again) and are done for the first 10 broken steps and
then once per new streak of them.
"""
import os
import threading

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from . import _records, _vocab
from ._records import ACTIVATION, ACTIVATION_GRAD, WEIGHT_GRAD, PHASE_FWD, PHASE_BWD, PHASE_OPTIM
from ._records import INFO, WARNING, ERROR

__all__ = ["watch", "Watcher"]

_RERUNS_BEFORE_STREAKS = 10
_INF = float("inf")


# ---------------------------------------------------------------------------------------------
# Statistics of one tensor: [min, max, amax, nan, +inf, -inf, overflow, underflow, zero] (f64)

_ROW = 4096  # elements per row of the first reduction stage


def _row_stats(v, fmax: float, tiny: float):
    """The nine figures of each row of v (R, n): (R, 9), counts as float64."""
    v = v.float()
    fin = torch.isfinite(v)
    a = v.abs()
    return torch.stack([
        torch.where(fin, v, _INF).amin(1).double(),
        torch.where(fin, v, -_INF).amax(1).double(),
        torch.where(fin, a, -1.0).amax(1).double(),  # -1: none finite
        torch.isnan(v).sum(1).double(),
        (v == _INF).sum(1).double(),
        (v == -_INF).sum(1).double(),
        (fin & (a >= fmax)).sum(1).double(),
        ((a < tiny) & (v != 0)).sum(1).double(),
        (v == 0).sum(1).double(),
    ], 1)


def _stats_eager(x, fmax: float, tiny: float):
    """x flat. Two stages, rows of _ROW elements then the rows' figures, so that a compiler
    without static sizes still spreads the big reduction over the GPU (one pass over x)."""
    n = x.numel()
    rows = n // _ROW
    parts = [_row_stats(x[: rows * _ROW].view(rows, _ROW), fmax, tiny)]
    if n % _ROW:
        parts.append(_row_stats(x[rows * _ROW:].view(1, -1), fmax, tiny))
    p = torch.cat(parts)
    return torch.cat([p[:, 0].amin().view(1), p[:, 1:3].amax(0), p[:, 3:].sum(0)])


_N = 9
_stats_lock = threading.Lock()
_stats_fn = None


def _stats(t, fmax, tiny):
    """The fused (compiled) statistics when torch.compile works here, else the eager ones. The
    call is made flat, without grad and autocast, so that one compiled graph per dtype serves
    forward outputs, gradients (on autograd's thread) and parameters alike."""
    global _stats_fn
    if _stats_fn is None:
        with _stats_lock:
            if _stats_fn is None:
                use = os.environ.get("AMPPROBE_TORCH_COMPILE", "1") != "0"
                _stats_fn = torch.compile(_stats_eager, dynamic=True) if use else _stats_eager
    x = t.detach().reshape(-1)
    try:
        with torch.no_grad(), torch.autocast(x.device.type, enabled=False):
            return _stats_fn(x, fmax, tiny)
    except Exception as e:  # no compiler toolchain, an unsupported dtype, ...
        if _stats_fn is _stats_eager:
            raise
        _stats_fn = _stats_eager
        print("ampprobe: torch.compile of the statistics failed (%s: %s); using eager ones"
              % (type(e).__name__, str(e).splitlines()[0] if str(e) else ""), flush=True)
        return _stats_eager(x, fmax, tiny)


def _describe_now(what, t, allowed_neginf=False):
    """describe() of t computed now (the op-level tracer: a broken step, syncs are fine)."""
    s = _stats_eager(t.detach().reshape(-1), _INF, 0.0).tolist()
    mn, mx, amax = (s[0], s[1], s[2]) if s[2] >= 0 else (float("nan"),) * 3
    bad = int(s[3] + s[4] + (0 if allowed_neginf else s[5]))
    return _vocab.describe(what, _vocab.dtype_name(t.dtype), t.shape, mn, mx, amax,
                           int(s[3]), int(s[4]), int(s[5])), bad


def _float_tensors(obj):
    return [t for t in tree_flatten(obj)[0]
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 0]


# ---------------------------------------------------------------------------------------------
# Op-level tracing of a broken step

_VIEW_OPS = {"view", "reshape", "unsafe_view", "expand", "t", "transpose", "permute", "to_copy",
             "clone", "contiguous", "flatten", "unsqueeze", "squeeze", "slice", "select",
             "detach", "alias", "to", "float", "half", "bfloat16", "as_strided", "split",
             "split_with_sizes", "chunk", "unbind", "getitem"}
_MASK_OPS = {"masked_fill", "where", "masked_fill_"}


class _Found(Exception):
    pass


class _Judge:
    """Decides, op by op in execution order, which op first made a non-finite value."""

    def __init__(self, w, step, data):
        self.w, self.step = w, step
        self.data = {id(t) for t in data}  # model inputs (and views of them)
        self.masked = set()  # ids of tensors whose -inf is a mask's
        self.keep = list(data)  # the ids above stay valid while we run
        self.event = None

    def judge(self, op, layer, inputs, outputs):
        """Emits and returns the event kind when this op is where it started, else None."""
        detail, in_bad, from_data = "", False, False
        allowed = any(id(t) in self.masked for t in inputs)
        for k, t in enumerate(inputs):
            seg, bad = _describe_now("input %d" % k, t, id(t) in self.masked)
            detail += seg
            if bad:
                in_bad = True
                from_data |= id(t) in self.data
        out_bad = 0
        for t in outputs:
            seg, bad = _describe_now("output", t, allowed or op in _MASK_OPS)
            if op in _MASK_OPS or allowed:
                self.masked.add(id(t))
                self.keep.append(t)
            out_bad += bad
            detail += seg
        if from_data and op in _VIEW_OPS:  # the data, reshaped or cast: still the data
            for t in outputs:
                self.data.add(id(t))
                self.keep.append(t)
            return None
        if not out_bad and not in_bad:
            return None
        if from_data:
            kind, sev = "nonfinite_input", ERROR
        elif not in_bad:
            kind, sev = "nonfinite_producer", ERROR
        else:  # non-finite parameters or state from an earlier step
            kind, sev = "nonfinite_propagated", INFO
        self.w.rec.event(self.step, layer, op, PHASE_FWD, kind, sev, out_bad or -1, None, detail)
        self.event = kind
        return kind


class _OpTracer(TorchDispatchMode):
    """The forward re-run: every aten op's inputs and outputs, in the innermost module."""

    def __init__(self, judge, layers):
        super().__init__()
        self.j, self.layers = judge, layers

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        ins = _float_tensors((args, kwargs))
        outs = _float_tensors(out)
        if outs and self.j.judge(_vocab.op_name(func.overloadpacket.__name__),
                                 self.layers[-1], ins, outs):
            raise _Found()
        return out


class _LossTape(TorchFunctionMode):
    """Between the model's output and backward(): what the loss computation called, kept by
    reference until the step ends (only judged when the step broke)."""

    def __init__(self):
        super().__init__()
        self.tape = []  # (op, inputs, outputs)
        self.active = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, (torch.Tensor, tuple, list)):
            outs = _float_tensors(out)
            if outs:
                self.tape.append((_vocab.op_name(func), _float_tensors((args, kwargs)), outs))
        return out

    def begin(self):
        if not self.active:
            self.active = True
            self.__enter__()

    def end(self):
        if self.active:
            self.active = False
            self.__exit__(None, None, None)


# ---------------------------------------------------------------------------------------------
# The watcher

_watchers = []
_backward_patched = False
_layers = _vocab.LayerTable()  # layer ids are the process's, shared by its watchers


def _patch_backward():
    """Tensor.backward tells the watchers where the loss region ends and what the loss was."""
    global _backward_patched
    if _backward_patched:
        return
    _backward_patched = True
    orig = torch.Tensor.backward

    def backward(self, *args, **kwargs):
        for w in _watchers:
            w._on_backward(self)
        return orig(self, *args, **kwargs)

    torch.Tensor.backward = backward


class Watcher:
    """Records one model's training (see the module's docstring). Made by watch()."""

    def __init__(self, model, scaler=None, optimizer=None, stats_every=None, name=None,
                 recorder=None):
        self.rec = recorder or _records.Recorder()
        self.model = model
        self.on = self.rec.enabled
        if not self.on:
            return
        env_every = os.environ.get("AMPPROBE_STATS_EVERY", "")
        self.stats_every = int(stats_every or (env_every if env_every.isdigit() else 0) or 1)
        named = list(model.named_modules())
        ids = _layers.add_model(name or type(model).__name__, [n for n, _ in named])
        self.layer_of = {id(m): ids[n] for n, m in named}
        self.op_of = {id(m): _vocab.op_name(type(m).__name__) for _, m in named}
        self.params = []  # (parameter, its name, its module's layer)
        for mn, m in named:
            for pn, p in m.named_parameters(recurse=False):
                self.params.append((p, (mn + "." if mn else "") + pn, ids[mn]))
        self.step = 0
        self.step_start = self.rec.now_ns()
        self.sampled = True
        self.entries, self.results = [], []  # (kind, layer, op, dtype, numel), device stats
        self.target = None  # autocast dtype name, once seen
        self.fwd = None  # the last forward's (args, kwargs, autocast state)
        self.loss = None
        self.scaler = None
        self.optimizer = None
        self.tape = _LossTape()
        self.rerunning = False
        self.wgrads_queued = False
        self.broken_steps = 0
        self.prev_broken = False
        self._forwards = 0
        self._handles = []
        self._lock = threading.Lock()
        for rid, parent, lname in _layers.pending():
            self.rec.layer(rid, parent, lname)
        self.rec.meta("bridge", "torch " + torch.__version__)
        self.rec.meta("stats_every", str(self.stats_every))
        for n, m in named:
            if n:
                self._handles.append(m.register_forward_hook(self._on_output))
        self._handles.append(model.register_forward_pre_hook(self.on_root_pre, with_kwargs=True))
        self._handles.append(model.register_forward_hook(self._on_root_post))
        if scaler is not None:
            self.attach_scaler(scaler)
        if optimizer is not None:
            self.attach_optimizer(optimizer)
        _patch_backward()
        _watchers.append(self)

    # -- what the loop hands us --------------------------------------------------------------

    def attach_scaler(self, scaler):
        """Ends steps at scaler.update() and records every update (an enabled scaler only)."""
        if not self.on or self.scaler is not None or not scaler.is_enabled():
            return
        self.scaler = scaler
        orig_scale, orig_unscale, orig_update = scaler.scale, scaler.unscale_, scaler.update

        def scale(outputs):
            if isinstance(outputs, torch.Tensor) and outputs.numel() == 1:
                self._on_backward(outputs)
            return orig_scale(outputs)

        def unscale_(optimizer):  # the gradients as backward left them (scaled), as libampcore
            self._queue_weight_grads()
            return orig_unscale(optimizer)

        def update(new_scale=None):
            extra = self._scaler_before()
            orig_update(new_scale)
            self.end_step(extra)

        scaler.scale, scaler.unscale_, scaler.update = scale, unscale_, update
        for key, attr in (("init_scale", "_init_scale"), ("growth_factor", "_growth_factor"),
                          ("backoff_factor", "_backoff_factor"),
                          ("growth_interval", "_growth_interval")):
            if hasattr(scaler, attr):
                self.rec.meta("scaler." + key, "%.17g" % float(getattr(scaler, attr)))

    def attach_optimizer(self, optimizer):
        """Without a scaler, a step ends just before optimizer.step()."""
        if not self.on or self.optimizer is not None:
            return
        self.optimizer = optimizer
        self._handles.append(optimizer.register_step_pre_hook(self.on_optimizer_step))

    def on_optimizer_step(self, optimizer, args=(), kwargs=None):
        """An optimizer is about to step: the end of the step when there is no scaler."""
        if self.scaler is None and (self.optimizer is None or self.optimizer is optimizer):
            self.optimizer = optimizer
            self.end_step(None)

    def on_root_pre(self, module, args, kwargs):
        """The model's forward begins (a forward pre-hook; autoattach calls it for the first)."""
        if self.rerunning or not torch.is_grad_enabled() or not module.training:
            return None
        self.tape.end()
        if self.scaler is None and self.optimizer is None and self._forwards:
            self.end_step(None)  # nothing else tells where a step ends
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        ac = torch.is_autocast_enabled(dev)
        ac_dtype = torch.get_autocast_dtype(dev)
        if not self._forwards:
            self.rec.meta("device", dev)
        if ac and self.target is None:
            self.target = _vocab.dtype_name(ac_dtype)
            self.rec.meta("autocast_dtype", self.target)
        self.fwd = (args, kwargs, dev, ac, ac_dtype)
        self._forwards += 1
        return None

    def _on_root_post(self, module, args, output):
        if not self.rerunning and torch.is_grad_enabled() and module.training:
            self.tape.begin()

    def _on_backward(self, loss):
        if self.rerunning:
            return
        self.tape.end()
        if self.loss is None and loss.numel() == 1:
            self.loss = loss.detach()

    def _bounds(self):
        return _vocab.DTYPES.get(self.target or "f16")

    def _queue(self, kind, layer, op, t):
        if not self.sampled or t.numel() == 0 or not t.is_floating_point():
            return
        fmax, tiny = self._bounds()
        r = _stats(t, fmax, tiny)
        with self._lock:
            self.entries.append((kind, layer, op, _vocab.dtype_name(t.dtype), t.numel()))
            self.results.append(r)

    def _on_output(self, module, args, output):
        if self.rerunning or not self.sampled or not torch.is_grad_enabled() or not module.training:
            return None
        outs = _float_tensors(output)
        if not outs:
            return None
        t = outs[0]
        layer, op = self.layer_of.get(id(module), -1), self.op_of.get(id(module), "module")
        self._queue(ACTIVATION, layer, op, t)
        if t.requires_grad:
            t.register_hook(lambda g, layer=layer, op=op: self._queue(ACTIVATION_GRAD, layer, op, g))
        return None

    def close(self):
        """Detaches: removes the hooks, gives the scaler its own methods back."""
        if not self.on:
            return
        self.tape.end()
        for h in self._handles:
            h.remove()
        if self.scaler is not None:
            del self.scaler.scale, self.scaler.unscale_, self.scaler.update  # ours
        if self in _watchers:
            _watchers.remove(self)
        self.on = False

    # -- the end of a step ---------------------------------------------------------------------

    def _queue_weight_grads(self):
        """The parameter gradients' statistics, once a step (before the scaler unscales them)."""
        if self.wgrads_queued:
            return
        self.wgrads_queued = True
        for p, pname, layer in self.params:
            if p.grad is not None:
                self._queue(WEIGHT_GRAD, layer, pname, p.grad)

    def _scaler_before(self):
        """Device tensors read before scaler.update(): scale, summed found_inf (or None)."""
        s = self.scaler
        found = [v for st in s._per_optimizer_states.values()
                 for v in st.get("found_inf_per_device", {}).values()]
        before = s._scale.detach().clone().double().reshape(1)
        f = torch.stack([v.double().reshape(()) for v in found]).sum().reshape(1) if found \
            else torch.full((1,), -1.0, dtype=torch.float64, device=before.device)
        return before, f

    def end_step(self, scaler_extra):
        """Reads the step's figures back (one copy) and emits its records."""
        if not self.on:
            return
        self.tape.end()
        self._queue_weight_grads()
        parts = [r.reshape(-1) for r in self.results]
        dev = self.results[0].device if self.results else None
        if self.loss is not None:
            dev = self.loss.device
            parts.append(self.loss.double().reshape(1))
        if scaler_extra is not None:
            s = self.scaler
            before, found = scaler_extra
            dev = before.device
            parts += [before, found, s._scale.double().reshape(1),
                      s._growth_tracker.double().reshape(1)]
        vals = torch.cat([p.to(dev) for p in parts]).cpu().tolist() if parts else []
        n = len(self.entries) * _N
        stats = [vals[i:i + _N] for i in range(0, n, _N)]
        k = n
        loss = None
        if self.loss is not None:
            loss = vals[k]
            k += 1
        scale = None
        if scaler_extra is not None:
            scale = vals[k:k + 4]  # before, found_inf (-1: none), after, growth tracker
        self._emit(stats, loss, scale)
        self.rec.step(self.step, self.step_start, self.rec.now_ns(), loss)
        self.step += 1
        self.step_start = self.rec.now_ns()
        self.sampled = self.step % self.stats_every == 0
        self.entries, self.results, self.loss = [], [], None
        self.wgrads_queued = False
        self.tape.tape = []

    def _emit(self, stats, loss, scale):
        target = self.target or "f16"
        fwd_bad = False
        for (kind, layer, op, dtype, numel), s in zip(self.entries, stats):
            none_finite = s[2] < 0
            mn, mx, amax = (None, None, None) if none_finite else (s[0], s[1], s[2])
            self.rec.tensor_stats(self.step, layer, op, kind, dtype, target, numel, mn, mx, amax,
                                  int(s[3]), int(s[4]), int(s[5]), int(s[6]), int(s[7]),
                                  int(s[8]))
            if kind == ACTIVATION:
                fwd_bad |= s[3] + s[4] + s[5] > 0
                if s[6] > 0 and dtype == "f32" and self.target == "f16":
                    self.rec.event(self.step, layer, op, PHASE_FWD, "overflow", WARNING,
                                   int(s[6]), amax, "f32 values beyond the f16 range: this "
                                   "output overflows if it runs in f16")
        loss_bad = loss is not None and not (abs(loss) < _INF)
        found_inf = scale is not None and scale[1] > 0
        broken = fwd_bad or loss_bad or found_inf
        fwd_event, loss_event = None, None
        if broken and (self.broken_steps < _RERUNS_BEFORE_STREAKS or not self.prev_broken):
            self.broken_steps += 1
            fwd_event = self._rerun()
            if fwd_event is None:
                loss_event = self._judge_tape()
        self.prev_broken = broken
        if loss_bad:
            self.rec.event(self.step, -1, None, 0, "loss_nonfinite", ERROR, 1, loss,
                           "the forward pass produced non-finite values" if fwd_event else
                           "the loss computation outside the model produced non-finite values"
                           if loss_event else "the loss itself became non-finite")
        if found_inf and not fwd_event and not loss_event and not loss_bad:
            self._backward_producer(stats)
            self.rec.event(self.step, -1, None, PHASE_BWD, "grad_overflow", INFO, -1, scale[0],
                           "gradients overflowed at loss scale %g while the forward pass stayed "
                           "finite: a loss-scale overflow, the step was skipped and the scale "
                           "backed off to %g" % (scale[0], scale[2]))
        if scale is not None:
            before, found, after, tracker = scale
            self.rec.scale(self.step, before, after, max(found, 0), tracker, found > 0)
            if found > 0:
                self.rec.event(self.step, -1, None, PHASE_OPTIM, "step_skipped", WARNING, 1,
                               before)
            if after != before:
                self.rec.event(self.step, -1, None, PHASE_OPTIM,
                               "scale_backoff" if after < before else "scale_growth", INFO, -1,
                               after)

    def _backward_producer(self, stats):
        """The module whose backward first handed on a non-finite gradient (backward order)."""
        prev = None
        for (kind, layer, op, dtype, numel), s in zip(self.entries, stats):
            if kind not in (ACTIVATION_GRAD, WEIGHT_GRAD):
                continue
            bad = int(s[3] + s[4] + s[5])
            if not bad:
                if kind == ACTIVATION_GRAD:
                    prev = (layer, op, dtype, numel, s)
                continue
            detail = ""
            if prev is not None:
                pl, pop, pd, pn, ps = prev
                detail = _vocab.describe("incoming gradient", pd, (pn,), ps[0], ps[1], ps[2])
                layer, op = pl, pop
            elif kind == ACTIVATION_GRAD:
                layer, op = -1, "loss"
            mn, mx, amax = (s[0], s[1], s[2]) if s[2] >= 0 else (float("nan"),) * 3
            detail += _vocab.describe("gradient", dtype, (numel,), mn, mx, amax, int(s[3]),
                                      int(s[4]), int(s[5]))
            self.rec.event(self.step, layer, op, PHASE_BWD, "nonfinite_producer", WARNING, bad,
                           amax, detail)
            return

    def _rerun(self):
        """Runs the step's forward again under the op tracer; the event kind it emitted."""
        if self.fwd is None:
            return None
        args, kwargs, dev, ac, ac_dtype = self.fwd
        judge = _Judge(self, self.step, _float_tensors((args, kwargs)))
        stack = [self.layer_of[id(self.model)]]

        def pre(m, inputs):
            stack.append(self.layer_of.get(id(m), stack[-1]))

        def post(m, inputs, output):
            stack.pop()

        hooks = [torch.nn.modules.module.register_module_forward_pre_hook(pre),
                 torch.nn.modules.module.register_module_forward_hook(post)]
        self.rerunning = True
        try:
            with torch.no_grad(), torch.autocast(dev, dtype=ac_dtype, enabled=ac), \
                    _OpTracer(judge, stack):
                self.model(*args, **kwargs)
        except _Found:
            pass
        finally:
            self.rerunning = False
            for h in hooks:
                h.remove()
        return judge.event

    def _judge_tape(self):
        """The loss computation's first producer (outside any module), from the tape."""
        judge = _Judge(self, self.step, [])
        for op, ins, outs in self.tape.tape:
            if judge.judge(op, -1, ins, outs):
                return judge.event
        return None


def watch(model, scaler=None, optimizer=None, stats_every=None, name=None):
    """Records model's training when the process records (ampprobe run); returns the Watcher
    (inactive, with nothing attached, when it does not). scaler: an enabled GradScaler (steps
    end at its update()); optimizer: steps end before its step() when there is no scaler;
    stats_every: statistics every N steps (default AMPPROBE_STATS_EVERY, else 1); name: the
    root layer's name (default the model's class)."""
    return Watcher(model, scaler=scaler, optimizer=optimizer, stats_every=stats_every, name=name)


# ---------------------------------------------------------------------------------------------
# `ampprobe run --torch`: attaching with no code change

_scalers = []  # enabled GradScalers in creation order (the last one is the loop's)


def autoattach():
    """Watches the model that trains: the first module called in training mode, with grad on,
    that has trainable parameters, with the last enabled GradScaler made so far (or made later);
    without one, steps end before each optimizer.step(). Called by the startup module that
    `ampprobe run --torch` puts on PYTHONPATH, right after `import torch`."""
    if not _records.Recorder().enabled:
        return
    state = {"watcher": None}
    orig_init = torch.amp.GradScaler.__init__

    def scaler_init(self, *args, **kwargs):
        orig_init(self, *args, **kwargs)
        if self.is_enabled():
            _scalers.append(self)
            if state["watcher"] is not None:
                state["watcher"].attach_scaler(self)

    torch.amp.GradScaler.__init__ = scaler_init

    def first_forward(module, args):
        if state["watcher"] is not None or not module.training or not torch.is_grad_enabled():
            return None
        if not any(p.requires_grad for p in module.parameters()):
            return None
        handle.remove()
        w = Watcher(module, scaler=_scalers[-1] if _scalers else None)
        state["watcher"] = w
        w.on_root_pre(module, args, {})  # its own pre-hook was registered too late for this call
        return None

    handle = torch.nn.modules.module.register_module_forward_pre_hook(first_forward)

    def optimizer_step(optimizer, args, kwargs):
        if state["watcher"] is not None:
            state["watcher"].on_optimizer_step(optimizer, args, kwargs)

    register_optimizer_step_pre_hook(optimizer_step)
