"""torch.py — the PyTorch bridge: watch a training loop and record it as libampcore would.

    import ampprobe.torch as ap
    ap.watch(model, scaler=scaler, optimizer=opt, stats_every=1)

Under `ampprobe run` (AMPPROBE_SPOOL_DIR) it writes, through libampcore's record API
(_records.py), the module tree (AMP_LAYERS), per-layer statistics of every module output, its
gradient, every trainable parameter as the step's first forward begins (what the last update
left) and every parameter gradient (before the GradScaler unscales it, as libampcore does) with
overflow/underflow counts against the autocast dtype (AMP_TENSOR_STATS), every GradScaler
update (AMP_SCALE), the steps (AMP_STEPS) and the events (AMP_EVENTS). On op steps (step 1,
then every ops_every steps) a torch function mode also records every function the forward and
the loss computation call, with its layer, autocast policy, dtypes, shapes, analytic FLOPs and
bytes and host interval (AMP_OPS: what the report's precision-placement rule reads, and what
captured kernels are attributed to). Without a recording launcher watch() attaches nothing.

Cost. Each tensor's figures come from libampcore's fused statistics kernel, launched through
libampstats_cuda.so (_devstats.py) on the tensor's memory and PyTorch's current stream, many
tensors per launch: the module outputs held until the forward ends (or 48 of them wait), the
output gradients until the parameter gradients join them at the end of the backward (or 48 of
them, or 256 MiB, wait); the trainable parameters in one launch as the step's first forward
begins. Queuing a tensor is a few list appends; its device, layout and address are read when
its batch launches.
A module output may be written to in place before that (a ReLU(inplace=True) after it): the
first sampled step reads outputs at once and watches their version counters, and a layer whose
output moved is read at once from then on (one that moves only later is named on stderr). The
figures go into a device buffer that one kernel writes into mapped host memory when the step
ends (a flag there raised last); the step is recorded (one C call) a step later, its flag long
raised by then: in the next GradScaler.step(), before its wait for found_inf, else when the next
step ends. A step without statistics launches nothing at its end: its scale after update() is
the next step's scale before it, marked with that step's loss, and it is recorded as that step
ends. Only the loss and found_inf (without a scaler and with check_grads: the count of
NaN/inf among the parameter gradients, summed from their figures on the GPU) are read at once:
as soon as they are computed a small kernel writes them into mapped host memory, and the step's
end waits for that kernel's flag only; a step they show broken is recorded (and re-run, below)
right away. A step ends at scaler.update() (with an enabled GradScaler), else before
optimizer.step() (so parameters are still those of the forward; when step() is handed a closure
that runs the forward, as that closure returns), else at the model's next forward that finds no
parameter gradient held or the parameters updated by hand (gradients held on unchanged
parameters: accumulating). An optimizer.step() called directly while the GradScaler scales the
loss (not scaler.step(optimizer)) is recorded (step_outside_scaler); a loop that never calls
scaler.update() then has its steps end at the next forward. Parameter gradients are read
before the scaler unscales them, as libampcore does (at unscale_, else at scaler.step, whose
fused optimizer unscales them itself); the step's gradient norm is theirs divided by the scale.
stats_every=N computes statistics on every Nth step only. Without the module (a build without
CUDA) or for tensors off the GPU the figures come from eager torch reductions, which cost far
more.

Non-finite values (_diagnose.py). When a step went non-finite (loss, found_inf or a statistic),
the step's forward is run again on the same inputs under an op-level dispatch mode that checks
every op's inputs and outputs, and follows each non-finite value an op makes from finite inputs
to the forward's output: of those that reach it, the first such op is the producer
(nonfinite_producer, with its input ranges; an op that writes into an input, x += y, is judged
on that input as it was before the write); a non-finite model input is data arriving broken
(nonfinite_input), a non-finite parameter or buffer state from an earlier step
(nonfinite_propagated), both named where they first go in. A value that where() or masked_fill()
leaves out on the way (where(p > 0, log(p), 0)) breaks no forward; if the step broke in the
backward there, the backward's producer says so (0 * inf: a NaN gradient at every scale). An
attention mask's -inf (masked_fill/where with -inf, written by item assignment or torch.full, or
a model input or buffer whose only non-finite values are -inf) and what it flows into up to a
GEMM are not faults, nor is whatever memory torch.empty and its kin hand out. If the forward
stays finite, the loss computation between the model's output and backward()/scaler.scale() is
searched: a torch function mode tapes its calls on every step (the functions and their
arguments; of tensors it holds only those taken from elsewhere, such as the labels, not those it
made: a language model's f32 logits would otherwise live to the end of the step) and replays
them on the re-run forward's output, judging each, so a hand-written loss's log(0) is named at
the step it happened, outside any module. If the loss is finite too, found_inf means the
gradients overflowed while the forward stayed finite: a loss-scale overflow (grad_overflow,
info). Then the re-run forward keeps its autograd graph (each node tagged with its module and
function), the taped loss computation is replayed on its output, scaled as the GradScaler did,
and differentiated (autograd.grad: the parameters' .grad are left alone) under a dispatch mode
that stops at the first backward op whose output is non-finite: nonfinite_producer (bwd) names
its layer and the forward function whose backward it was, with the autograd node, the op and
their ranges. When that cannot be done (nothing taped, an in-place op on the user's tensors in
the loss, a break only the statistics saw), the module whose backward first handed on a
non-finite gradient is named from the statistics instead. Re-runs assume the forward is
deterministic (dropout draws again; the random state and the module buffers are restored
afterwards) and are done for the first 10 broken steps and then once per new streak of them.

Overflows absorbed. An fp16 overflow can vanish before anything is non-finite: a hand-written
RMSNorm's x * x past 65504 is inf, and rsqrt(inf) = 0 zeroes its output. When a layer's share of
exact zeros jumps (from below 1% on the last sampled step to 5% or more; the C call that
records the statistics keeps the shares) in a step that stayed finite, that step's forward is run
again op by op, a step later, and the first fp16/bf16 overflow an op left out of its output is
named (overflow_absorbed: the op that made it, its input ranges, the op that left it out), for
the first 3 such steps.

Gradient accumulation (several forwards and backward()s a step): each forward's inputs and loss
computation are kept until the step ends, and a broken step's forwards are searched in turn;
its statistics hold a row per forward and layer; its loss is the sum of what backward() (or
scaler.scale()) took, the mean loss when each micro-batch's loss is divided by their number.

torch.compile: nothing that runs in compiled code is hooked (its hooks would be traced), so a model
compiled as a whole records its output and that output's gradient as the root layer's, its
parameter gradients, the scale and the steps; a compiled part of an eager model is recorded at
its output, its insides not. Broken steps and op steps run the forward again eagerly (the op
step once more, without gradients, under the op recorder). Watch what torch.compile returned.

Sharded parameters (FSDP2's DTensors): each process records its local shard of each gradient.
A model sharded over several processes all-gathers its parameters in the forward, which cannot
run again on one process alone: its broken steps are searched per module, from the statistics
(as is a broken forward whose re-run did not break again).

FSDP1 (FullyShardedDataParallel) and the activation-checkpoint wrapper: a wrapper is no layer of
its own (its module's name; its code looked through by the re-run's judge, not in the op step).
FSDP1's flat parameters (use_orig_params=False) are recorded as they are. A broken forward runs
again through the outermost FSDP1 wrapper; a broken backward does not (FSDP1's backward hooks
reduce the step's gradients and reset them): it is named per module, and a step broken in the
backward alone runs nothing again.
"""
import atexit
import collections
import ctypes
import math
import os
import re
import sys
import threading
import warnings
import weakref

try:
    import torch
except ModuleNotFoundError as e:
    if e.name != "torch":
        raise
    raise ImportError("ampprobe.torch needs PyTorch (2.4 or newer), and this python (%s) has "
                      "none: install torch, or run the python that has it" % sys.executable) from e

# torch.is_autocast_enabled(device) and torch.get_autocast_dtype(device), the autocast state
# of one device type, came in torch 2.4 (the bridge is tested with 2.11)
_NEEDS = (2, 4)
if tuple(int(x) for x in re.findall(r"\d+", str(torch.__version__))[:2]) < _NEEDS:
    raise ImportError("ampprobe.torch needs torch %d.%d or newer; this is torch %s"
                      % (_NEEDS + (torch.__version__,)))

from torch.optim.optimizer import register_optimizer_step_post_hook, \
    register_optimizer_step_pre_hook
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from . import _devstats, _diagnose, _models, _records, _settings, _trace, _updates, _vocab
from ._judge import float_tensors
from ._compiled import Around
from ._updates import LOWP as _LOWP, PLAIN as _PLAIN
from ._links import Links
from ._records import ACTIVATION, ACTIVATION_GRAD, WEIGHT, WEIGHT_GRAD, SUPERSEDED
from ._records import PHASE_OPTIM, WARNING, ERROR

__all__ = ["watch", "Watcher"]

_OPS_EVERY = 1000  # op steps (AMP_OPS): step 1, then every this many steps
_MEM_EVERY = 100  # steps whose AMP_STEPS row gets torch's memory peak (and broken and last ones)
_INF = float("inf")
# A step's scalars: the loss, and with an enabled GradScaler the loss scale and growth tracker
# before update() and found_inf per device, are marked as soon as they are computed
# (Watcher._mark_ready: what tells at once whether the step broke); the scale after update() and
# the growth tracker travel with the step's statistics (StepStats.finish), in these places (a
# step without statistics takes them from the next step's mark: Watcher.flush):
_S_AFTER, _S_TRACKER = 0, 1




def _local(t):
    """The tensor whose memory holds t's values on this process: t itself, a DTensor's local
    shard (FSDP2's parameters and their gradients, tensor parallelism's activations), or None
    for another wrapper subclass, whose address is not that of its values (not recorded)."""
    while type(t) not in _PLAIN and is_traceable_wrapper_subclass(t):
        t = getattr(t, "_local_tensor", None)
    return t


def _spans_processes(p):
    """Whether parameter p is a DTensor on a mesh of several processes (FSDP2 over several
    ranks: the forward all-gathers it)."""
    mesh = getattr(p, "device_mesh", None)
    return mesh is not None and mesh.size() > 1


# ---------------------------------------------------------------------------------------------
# The watcher (the op-level tracing of a broken step it drives: _trace.py)

_graph_task = getattr(torch._C, "_current_graph_task_id", lambda: -1)  # -1: not in a backward
# the bridge's key among a tensor's hooks (Tensor._backward_hooks: Tensor.register_hook's handles
# are numbered, so no handle of the program's can take it)
_HOOK_KEY = "ampprobe"
_watchers = []
_ever_watched = [False]  # a watcher recorded in this process (watch() or autoattach)
_steps_recorded = [0]  # the steps the watchers of this process have ended (the next one's number)
_grad_enabled = torch.is_grad_enabled
_dtype_name = _vocab.dtype_name
_backward_patched = False
_layers = _models.LAYERS  # layer ids are the process's, shared by its watchers


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
        orig(self, *args, **kwargs)
        for w in _watchers:
            if w.scaler is None and w.optimizer is None:
                w._on_backward_end()

    torch.Tensor.backward = backward


_compiling = _models.compiling  # (torch.compile: _models.py)


def _compiled_parts(named, whole):
    """The ids of the modules of named (name, module) that run in compiled code, never hooked,
    and the outermost compiled ones, whose outputs are read from outside (when the model runs
    compiled as a whole, `whole`: every module inside, the first of named outermost)."""
    inside, parts = set(), []
    for _, m in named:
        if id(m) not in inside and (whole or _models.is_compiled(m)):
            inside.update(id(s) for s in m.modules())
            parts.append(m)
    return inside, parts


class Watcher:
    """Records one model's training (see the module's docstring). Made by watch()."""

    def __init__(self, model, scaler=None, optimizer=None, stats_every=None, name=None,
                 recorder=None, ops_every=None, check_grads=None):
        self.rec = recorder or _records.Recorder()
        self.outer = _models.unwrap(model)  # what the loop calls: the model's own hooks are there
        model = _models.inner(self.outer)
        self.model = model
        self.on = self.rec.enabled
        if not self.on:
            return
        self.stats_every = stats_every or _settings.env_steps("AMPPROBE_STATS_EVERY", 1, 1)
        self.ops_every = ops_every if ops_every is not None else \
            _settings.env_steps("AMPPROBE_OPS_EVERY", 0, _OPS_EVERY)
        self.check_grads = check_grads if check_grads is not None else \
            _settings.env_flag("AMPPROBE_CHECK_GRADS")
        named, wrappers = _models.layers_of(model)
        ids = _layers.add_model(name or _vocab.class_name(model),
                                list(dict.fromkeys(n for n, _ in named)))
        self.layer_of = {}
        self._module_info = {}  # id(module) -> its layer, op and its output gradient's hooks
        # (a pre-hook for the node that made it, a tensor hook: _on_output)
        self._plist = []  # the floating parameters
        self._pversion = 0  # their version counters summed at the last forward (no optimizer)
        self._by_hand = False  # META updates said: parameters written with no optimizer seen
        self._pentries = []  # their statistics entries (layer, kind, name, dtype)
        self._wentries = []  # their gradients'
        self.updates = _updates.UpdateCheck(self)  # the 16-bit parameters' updates compared
        self._sharded, self._rerunnable, self._bwd_rerunnable = False, True, True
        self._pswap = False  # the parameters' memory is swapped in the forward (FSDP1, or seen)
        # the parameters are read as a forward begins (at once) until a forward has seen the
        # first _pkept of them keep their memory: then with the forward's outputs, one launch
        # fewer (_pcheck: their (address, numel) as the forward that checks them began)
        self._pkept, self._pcheck = 0, None
        self.quiet = set()  # ids of the wrappers around modules (_trace.layer_stack_hooks)
        self._take_modules(named, lambda n: ids[n], "")
        self._take_wrappers(self.outer, wrappers, ids[""])
        self._runner = _models.runner(self.outer)
        # the model runs compiled as a whole (its output is recorded as the root's), or parts
        # (theirs are recorded from outside: `parts`)
        self.compiled_root = any(_models.is_compiled(m) for m in _models.chain(self.outer))
        inside, parts = _compiled_parts(named, self.compiled_root)
        self.compiled = bool(inside)
        self._lock = threading.Lock()
        self._unread = set()  # the tensor types _local could not read
        # steps go on from those of the watchers closed before in this process (one step
        # number, one step: a model trained after another does not write over its steps)
        self.first = self.step = _steps_recorded[0]
        self.step_start = self.rec.now_ns()
        self._eval_end = None  # when a forward outside training between steps last ended
        self.sampled = True
        self.entries = []  # (layer, kind, op, dtype) of the step's queued statistics
        self._entries_key, self._entries_arr = None, None  # the last step's, as C wants them
        lib, why = _devstats.load_module(self.rec.path)
        if lib is None and torch.cuda.is_available():
            print("ampprobe: %s; statistics run as eager torch reductions (much slower)" % why,
                  file=sys.stderr, flush=True)
        self.stats = _devstats.StepStats(lib)
        self.target = None  # the autocast dtype's name, or the 16-bit dtype the model computes in
        self._against = ("f16", _vocab.DTYPES["f16"])  # what overflow counts against (+bounds)
        self.forwards = []  # the step's forwards (_trace.Forward: several when accumulating)
        self.loss = None  # the step's loss: what backward() was called on, summed over forwards
        self.waiting = None  # the last step, its figures on their way (_Done)
        self.scaler = None
        self._scaled = False  # scaler.scale() ran in this step
        self._in_scaler_step = False  # inside the GradScaler's step()
        self._outside = set()  # ids of optimizers that stepped outside it (_stepped_outside)
        self._outside_pending = False  # one did in this step
        self._updated_once = False  # the loop calls scaler.update()
        self.optimizer = None
        self.tape = _trace.LossTape()
        self.ops = None  # the _trace.OpRecorder of an op step, while it records
        self.rerunning = False
        self.found_in_step = False  # found inside an optimizer's step() (autoattach), still in it
        self.params_queued = self.wgrads_queued = self._wgrads_early = False
        self._wgrad_rows = (0, 0)  # where the step's weight-gradient entries are (superseded)
        self.wgrad_handles = range(0)  # the parameter gradients' handles among the statistics
        self._watch = []  # (layer, weakref, version) of the first sampled step's outputs
        self.links = Links(lambda layer: _layers.rows[layer][1])  # the first forward's
        self._at_once = set()  # layers whose outputs are read at once (_queue)
        self._seen = {}  # id(module) -> the forward (_forwards) that last recorded its output
        self._noted_copies = False  # said that DataParallel's copies are not recorded
        self.diagnoser = _diagnose.Diagnoser(self)  # the recorded steps' events, the re-runs
        self._forwards = 0
        self._handles = []
        # the model and those trained beside it (a second model the optimizer updates, or
        # handed to a second watch())
        self.models = _models.Models(self, model)
        for rid, parent, lname in _layers.pending():
            self.rec.layer(rid, parent, lname)
        self.rec.meta("bridge", "torch " + torch.__version__)
        self.rec.meta("stats_every", str(self.stats_every))
        self.rec.meta("ops_every", str(self.ops_every))
        self._hook_outputs(named, inside, parts)
        if self.compiled:
            self.rec.meta("compiled", "model" if self.compiled_root else "modules")
        if scaler is not None:
            self.attach_scaler(scaler)
        if optimizer is not None:
            self.attach_optimizer(optimizer)
        _patch_backward()
        _watchers.append(self)
        _ever_watched[0] = True

    def _hook_outputs(self, named, inside, parts):
        """Hooks each module's output (a module inside compiled code is not hooked; a compiled
        part is, from outside: `parts`) and the root's forward, before and after."""
        for n, m in named:  # (the model's own output is its last module's, mostly: not read
            # again, unless it has no modules inside, a single nn.Linear)
            if (n or len(named) == 1) and id(m) not in inside:
                self._handles.append(m.register_forward_hook(self._on_output))
        for m in parts if not self.compiled_root else ():
            if _models.is_optimized(m):  # torch.compile's wrapper: its own hooks run outside
                self._handles.append(m.register_forward_hook(self._on_output))
            else:
                self._handles.append(Around.hook(
                    Around.around(m).post,
                    lambda args, out, m=m: self._on_output(m, args, out)))
        outer = self.outer
        if getattr(outer, "_compiled_call_impl", None) is not None:  # compiled in place
            a = Around.around(outer)
            self._handles += [
                Around.hook(a.pre, lambda args, kwargs: self.on_root_pre(outer, args, kwargs)),
                Around.hook(a.post, lambda args, out: self._on_root_post(outer, args, out))]
        else:
            self._handles += [outer.register_forward_pre_hook(self.on_root_pre, with_kwargs=True),
                              outer.register_forward_hook(self._on_root_post)]

    # -- what the loop hands us --------------------------------------------------------------

    def attach_scaler(self, scaler):
        """Ends steps at scaler.update() and records every update (an enabled scaler only)."""
        if not self.on or self.scaler is not None or not scaler.is_enabled():
            return
        self.scaler = scaler
        orig_scale, orig_unscale, orig_update = scaler.scale, scaler.unscale_, scaler.update
        orig_step = scaler.step

        def scale(outputs):
            self._scaled = True
            fwd = self._end_loss_region()
            if isinstance(outputs, torch.Tensor) and not self.rerunning:
                self._take_loss(outputs, fwd)
            return orig_scale(outputs)

        def unscale_(optimizer):
            self._queue_weight_grads()  # as backward left them (scaled), as libampcore reads them
            r = orig_unscale(optimizer)
            self._mark_ready(self._found_infs())
            return r

        def step(optimizer, *args, **kwargs):
            # a fused optimizer (Adam(fused=True)) is handed the scale and unscales the gradients
            # itself, in place: they are read first, as backward left them
            self._queue_weight_grads()
            if self.optimizer is None and not self.models.add_roots:  # (else its hooks are there)
                self.updates.hook(optimizer)
            self.flush(scale_later=True)  # the step before, recorded while the GPU still runs
            # this backward: the host waits for it in step() anyway (its check of found_inf)
            self._in_scaler_step = True
            try:
                return orig_step(optimizer, *args, **kwargs)
            finally:
                self._in_scaler_step = False

        def update(new_scale=None):
            self._updated_once = True
            found = self._found_infs()
            self._ensure_marked(found)  # the scale as it is before the update
            orig_update(new_scale)
            self.end_step(found)

        def once_scaled(ours, orig):
            """ours, or while the scaler has no scale yet (unscale_(), step() or update() before
            any scale()) PyTorch's own method, which raises its own error: nothing recorded."""
            return lambda *a, **k: orig(*a, **k) if scaler._scale is None else ours(*a, **k)

        scaler.scale = scale
        scaler.unscale_ = once_scaled(unscale_, orig_unscale)
        scaler.step = once_scaled(step, orig_step)
        scaler.update = once_scaled(update, orig_update)
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
        self._handles.append(optimizer.register_step_post_hook(
            lambda o, args, kwargs: self.updates.after(o)))

    def _take_modules(self, named, layer_id, prefix):
        """Records the modules named ((qualified name, module): layer_id(name) their layer ids)
        from now on: their outputs' gradient pre-hooks, and their floating parameters' gradients
        (named prefix + the parameter's qualified name)."""
        params = []
        for n, m in named:
            lid = layer_id(n)
            self.layer_of[id(m)] = lid
            op = _vocab.op_name(_vocab.class_name(m))
            self._module_info[id(m)] = (lid, op, self._grad_hook(lid, op, 0),
                                        self._tensor_hook(lid, op))
            for pn, p in m.named_parameters(recurse=False):
                if p.is_floating_point() and p.numel():
                    params.append(p)
                    name, dtype = prefix + (n + "." if n else "") + pn, _vocab.dtype_name(p.dtype)
                    self._pentries.append((lid, WEIGHT, name, dtype))
                    self._wentries.append((lid, WEIGHT_GRAD, name, dtype))
        self._plist += params
        sharded = [p for p in params if type(p) not in _PLAIN]  # DTensors (FSDP2)
        self._sharded |= bool(sharded)
        # a forward that gathers parameters from other processes cannot run again on this one
        # alone (theirs would wait in the collective): a broken step is searched per module
        self._rerunnable &= not any(_spans_processes(p) for p in sharded)

    def _take_wrappers(self, outer, wrappers, root_layer):
        """The wrappers of a model as the loop calls it (outer): those around the model (in
        root_layer) and those in it (wrappers, from _models.layers_of), each in the layer of
        what it wraps, their code quiet (_trace.layer_stack_hooks). FSDP1 rules out running a
        broken step's backward again (its backward hooks reduce the gradients and reset them: a
        re-run cleared those of the step) and, over several processes, its forward (it gathers
        the parameters from the others)."""
        inner = _models.inner(outer)
        for m in _models.chain(outer):  # around the model
            if m is not inner:
                self.layer_of.setdefault(id(m), root_layer)
        for m in wrappers:  # in it, in the layer of what it wraps (found by the module: one
            # wrapped twice is listed once by named_modules(), under one of the names)
            lid = self.layer_of.get(id(_models.inner(m)))
            if lid is not None:
                self.layer_of.setdefault(id(m), lid)
        mods = list(outer.modules())
        self.quiet.update(id(m) for m in mods if _models.is_wrapper(m))
        fsdp1 = [m for m in mods if _models.is_fsdp1(m)]
        if fsdp1:
            self._bwd_rerunnable, self._pswap = False, True
        if any(getattr(m, "world_size", 1) > 1 for m in fsdp1):
            self._sharded, self._rerunnable = True, False

    def on_optimizer_step(self, optimizer, args=(), kwargs=None):
        """An optimizer is about to step (a step pre-hook: args are step()'s, the optimizer
        first): the end of the step when there is no scaler; the first step of each also checks
        what it trains (Models.check_optimizer). A closure handed to step() (Lightning's loop
        without a GradScaler, LBFGS) runs the step's forward and backward inside step(): the
        step ends as the closure first returns, before the update (the hook returns step()'s
        arguments with the closure wrapped); its further calls within the step (LBFGS's line
        search) are not recorded."""
        self._leave_found_step()  # (the step() it was found in raised)
        if self.scaler is not None and self._scaled and not self._in_scaler_step and \
                not self.rerunning:
            self._stepped_outside(optimizer)
        if not self.rerunning:
            self.models.check_optimizer(optimizer)
        self._before_update(optimizer, args, kwargs)
        if self.scaler is None and (self.optimizer is None or self.optimizer is optimizer):
            self.optimizer = optimizer
            kwargs = kwargs or {}
            closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
            if closure is None:
                self.end_step(None)
                return None
            ended = []

            def closure_then_end():
                if ended:  # LBFGS calls it again within the step: evaluations, not steps
                    return self._unrecorded(closure)
                loss = closure()
                ended.append(True)
                self.end_step(None)
                return loss

            if "closure" in kwargs:
                return args, dict(kwargs, closure=closure_then_end)
            return (args[0], closure_then_end) + tuple(args[2:]), kwargs
        return None

    def _stepped_outside(self, optimizer):
        """optimizer.step() called directly while the GradScaler scales the loss (not
        scaler.step(optimizer)): it steps on gradients still multiplied by the scale (or, after
        scaler.unscale_(optimizer), unscaled but with no skip of a step whose gradients hold
        inf/NaN). Recorded once per optimizer (step_outside_scaler: its class, the parameters
        with a gradient, the scale). A loop that never calls scaler.update() ends its steps at
        the next forward (on_root_pre)."""
        self._outside_pending = True
        if id(optimizer) in self._outside:
            return
        self._outside.add(id(optimizer))
        stage = self.scaler._per_optimizer_states[id(optimizer)].get("stage")
        unscaled = getattr(stage, "name", "") == "UNSCALED"
        scale = float(self.scaler._scale) if self.scaler._scale is not None else float("nan")
        n = sum(p.grad is not None for g in optimizer.param_groups for p in g["params"])
        name = type(optimizer).__name__
        if unscaled:
            detail = ("%s.step() called directly after scaler.unscale_(): its gradients are "
                      "unscaled, but a step whose gradients hold inf/NaN is applied, not "
                      "skipped" % name)
        else:
            detail = ("%s.step() called directly: it stepped on gradients still multiplied by "
                      "the loss scale %g" % (name, scale))
        self.rec.event(self.step, -1, name, PHASE_OPTIM, "step_outside_scaler",
                       WARNING if unscaled else ERROR, n, scale, detail)

    def _unrecorded(self, f):
        """f() with the model's forwards and backwards not recorded (as while a step runs
        again)."""
        was, self.rerunning = self.rerunning, True
        try:
            return f()
        finally:
            self.rerunning = was

    def on_optimizer_stepped(self, optimizer):
        """An optimizer stepped (a global post-hook: ampprobe run --torch). A watcher that found
        its model inside the closure step() ran (Lightning without a GradScaler, the first
        step) saw no pre-hook of that step: the step ends here, after its update; the closure's
        further calls in that step() (LBFGS's) were not recorded (on_root_pre)."""
        self.updates.after(optimizer)
        self._leave_found_step()
        if self.scaler is None and self.optimizer is None and self.forwards and \
                not self.rerunning:
            self.optimizer = optimizer
            self.end_step(None, updated=True)

    def _leave_found_step(self):
        """The optimizer's step() that the watcher was found in has ended: recording resumes."""
        if self.found_in_step:
            self.found_in_step = self.rerunning = False

    def on_root_pre(self, module, args, kwargs):
        """The model's forward begins (a forward pre-hook; autoattach calls it for the first)."""
        if _compiling() or self.rerunning:
            return None
        if not torch.is_grad_enabled() or not module.training:
            return None  # (an evaluation: _on_root_post)
        if self.found_in_step and self.forwards:  # a closure's further call in the step() the
            self.rerunning = True  # model was found in (LBFGS): not recorded, up to its end
            return None
        self._end_loss_region()
        if self.scaler is None and self.optimizer is None:
            self._step_by_forward()
        elif self._outside_pending and not self._updated_once:  # no update() ends steps
            self.end_step(None)
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        ac = torch.is_autocast_enabled(dev)
        ac_dtype = torch.get_autocast_dtype(dev)
        if not self._forwards:
            self.rec.meta("device", dev)
        if self._eval_end is not None:
            # an evaluation since the step before ended is neither step's: this one starts after
            if not self.forwards and self._eval_end > self.step_start:
                self.step_start = self._eval_end
            self._eval_end = None
        if ac and self.target is None:
            self._autocast_to(ac_dtype)
        self.forwards.append(_trace.Forward(args, kwargs, dev, ac, ac_dtype))
        self._forwards += 1
        if self.sampled and not self.params_queued:
            self.params_queued = True
            ps = self._plist
            defer = self._pkept == len(ps)
            if not defer and self._pcheck is None and not (self._sharded or self._pswap):
                self._pcheck = [(p.data_ptr(), p.numel()) for p in ps]
            if not all(p.requires_grad for p in ps):  # a frozen one never changes: not read
                ps = [p if p.requires_grad else None for p in ps]
            self._queue_params(ps, self._pentries, defer)
        if self._op_step() and not self.compiled:
            self.ops = _trace.OpRecorder(self, self.step, dev)
            self.ops.start()
        return None

    def _step_by_forward(self):
        """Where nothing else tells where a step ends (no scaler, no optimizer seen: before
        the first optimizer.step(), or parameters updated by hand), a forward begins a step
        when the parameters hold no gradient (zero_grad()) or were written since the forward
        before (an update: p -= lr * p.grad, then p.grad.zero_()); gradients held on unchanged
        parameters are being accumulated, and the forward is the step's next micro-batch. (An
        update through p.data is not seen: its version counter is the data's own.)"""
        version = self._param_version()
        updated = version != self._pversion
        if self._forwards and (updated or not any(p.grad is not None for p in self._plist)):
            self._end_unmarked(updated)
        self._pversion = version

    def _end_unmarked(self, updated):
        """Ends a step that no optimizer or scaler marked (updated: its parameters were written
        since its forward, which META updates says once, so that the report speaks of an
        update, not of an optimizer's step)."""
        if updated and not self._by_hand:
            self._by_hand = True
            self.rec.meta("updates", "by hand")
        self.end_step(None, updated=updated)

    def _param_version(self):
        """The parameters' version counters summed: moved by any in-place write to one."""
        return sum(p._version for p in self._plist)

    def _end_unended(self):
        """At exit (or close()): a step that only the next forward would have ended (no scaler,
        no optimizer seen; or an optimizer stepped outside a scaler that never updates) ends
        here, once a backward ran in it."""
        if not (self.on and self.rec.enabled and self.forwards and self.loss is not None):
            return
        if self.scaler is None and self.optimizer is None:
            self._end_unmarked(self._param_version() != self._pversion)
        elif self._outside_pending and not self._updated_once:
            self.end_step(None)

    def _op_step(self):
        n = self.step - self.first  # the watcher's second step, then every ops_every
        return self.ops_every and n >= 1 and (n - 1) % self.ops_every == 0

    def _on_root_post(self, module, args, output):
        if _compiling() or self.rerunning:
            return
        if not torch.is_grad_enabled() or not module.training:
            if not self.forwards:  # between steps: an evaluation (on_root_pre)
                self._eval_end = self.rec.now_ns()
            return
        if self.sampled:
            if self.compiled_root:  # nothing inside it is hooked: its output is the root's
                self._on_output(self.model, args, output)
            self._check_outputs()
        if self.forwards:
            f = self.forwards[-1]
            if self.compiled and self._op_step() and self.ops is None:
                self.diagnoser.ops_eagerly(f)
                self.ops = _trace.OpRecorder(self, self.step, f.dev, layers=[-1])  # the loss's
                self.ops.start()
            self.tape.begin(f, output)

    def _end_loss_region(self):
        """The loss computation is over (or the step): the tape and an op step stop recording
        (in the reverse order they began). Returns the _trace.Forward whose loss computation was
        being taped, if any."""
        fwd = self.tape.fwd
        self.tape.end()
        if self.ops is not None:
            self.ops.stop()
            self.ops = None
        return fwd

    def _on_backward(self, loss):
        if not self.rerunning:
            self._take_loss(loss, self._end_loss_region())

    def _take_loss(self, loss, fwd):
        """backward() is called on loss (or scaler.scale() is), which ends the loss computation
        of forward fwd (None: none was being taped). The step's loss is the sum of these, one
        per forward (gradient accumulation); backward() on what scale() returned is not counted
        again."""
        if loss.numel() != 1 or (fwd is None and self.loss is not None):
            return
        if fwd is not None and fwd.loss_slot is None:
            fwd.loss_slot = fwd.slot_of(loss)
        self.loss = loss.detach() if self.loss is None else self.loss + loss.detach()
        if self.scaler is None:  # else found_inf decides too: marked after unscale_
            self._mark_ready()

    def _step_scalars(self, found):
        """What is marked of a step: the loss (when backward() was seen on one), and with a
        scaler (found: its found_inf tensors) the scale and growth tracker as they are now
        (what the step before's update() left them: _Done.after) and found."""
        ts = [self.loss] if self.loss is not None else []
        if found is not None:
            ts += [self.scaler._scale, self.scaler._growth_tracker] + found
        return ts

    def _mark_ready(self, found=None):
        """The values that tell whether the step broke (the loss, and after unscale_ the
        scale and found_inf) are computed: marked, so that end_step reads them without waiting
        for the rest of the step."""
        if self.loss is not None:
            ts = self._step_scalars(found)
            with self._lock:
                self.stats.mark(ts)

    def _ensure_marked(self, found, grads_bad=None):
        """Marks the step's scalars now unless _mark_ready marked them all (grads_bad: without
        a scaler, the count of non-finite values in the parameter gradients, marked last)."""
        ts = self._step_scalars(found) + ([grads_bad] if grads_bad is not None else [])
        with self._lock:
            if ts and self.stats.marked_count() != len(ts):
                self.stats.mark(ts)

    def _queue(self, kind, layer, op, t):
        """Queues t's statistics, launched with others in few launches on the current stream
        (nothing waits): a gradient's (read once, then freed) and a module output's, read by
        the end of the forward. The program may write into a module output before that (an
        in-place ReLU after a convolution): on the first sampled step outputs are read at once
        and watched, and a layer whose output was written to in the forward is read at once
        from then on (_check_outputs). Runs for every module output and gradient of a sampled
        step: kept short (StepStats.defer looks at the tensor when its batch launches)."""
        if type(t) not in _PLAIN:
            t = self._local(t)
            if t is None:
                return
        dtype = t.dtype
        if not dtype.is_floating_point:
            return
        numel = t.numel()
        if not numel:
            return
        target, bounds = self._against
        if self.target is None and kind == ACTIVATION and dtype in _LOWP:
            target, bounds = self._computing_in(t)
        with self._lock:
            self.entries.append((layer, kind, op, _dtype_name(dtype)))
            if kind != ACTIVATION:
                self.stats.defer(t, target, bounds, False, dtype, numel)
            elif self._watch is not None:  # the first sampled step
                self.stats.add(t, target, bounds)
                self._watch.append((layer, weakref.ref(t), t._version))
            elif layer in self._at_once:
                self.stats.add(t, target, bounds)
            else:
                self.stats.defer(t, target, bounds, True, dtype, numel)

    def _autocast_to(self, dtype):
        """Autocast casts to dtype: overflow and underflow count against it."""
        self.target = _vocab.dtype_name(dtype)
        self._against = (self.target, _vocab.DTYPES[self.target])
        self.rec.meta("autocast_dtype", self.target)
        return self._against

    def _computing_in(self, t):
        """No autocast as the model's forward began, and a module's output is 16-bit. Autocast
        entered inside the forward (accelerate wraps a model's forward in it: Hugging Face's
        Trainer) is autocast all the same; else the model computes in that dtype (cast to it,
        or FSDP's mixed precision), so overflow and underflow count against it from now on
        (until then, against f16: what an fp32 model would lose in f16)."""
        dev = t.device.type
        if dev in ("cuda", "cpu") and torch.is_autocast_enabled(dev):
            return self._autocast_to(torch.get_autocast_dtype(dev))
        self.target = _vocab.dtype_name(t.dtype)
        self._against = (self.target, _vocab.DTYPES[self.target])
        self.rec.meta("compute_dtype", self.target)
        return self._against

    def _local(self, t):
        """_local(t), and a note on stderr the first time a tensor's type cannot be read."""
        local = _local(t)
        if local is None and type(t) not in self._unread:
            self._unread.add(type(t))
            print("ampprobe: step %d: tensors of type %s are not recorded (a tensor subclass "
                  "without a local tensor that holds its values)" % (self.step, type(t).__name__),
                  file=sys.stderr, flush=True)
        return local

    def _check_outputs(self):
        """The forward has ended: its deferred outputs (and parameters) are read now; on the
        first sampled step, the layers whose output was written to after it returned are marked
        to be read at once. Parameters read as the forward began that kept their memory through
        it are read with the outputs from the next sampled step on (a wrapper seen to swap their
        memory during the forward keeps them read at once)."""
        if self._pcheck is not None:
            n = len(self._pcheck)
            if [(p.data_ptr(), p.numel()) for p in self._plist[:n]] == self._pcheck:
                self._pkept = n
            else:
                self._pswap = True  # (another wrapper's doing): read at once for good
            self._pcheck = None
        with self._lock:
            self.stats.flush()
            if self._watch is not None:
                for layer, ref, version in self._watch:
                    t = ref()
                    if t is not None and t._version != version:
                        self._at_once.add(layer)
                self._watch = None
                self.links.close()
            self._note_modified()

    def _note_modified(self):
        """Deferred module outputs written to before their read (their figures are of the new
        values): said once per layer, and the layer is read at once from then on."""
        handles, self.stats.modified = self.stats.modified, []
        for h in handles:
            layer = self.entries[h][0]
            if layer not in self._at_once:
                self._at_once.add(layer)
                print("ampprobe: step %d: layer %s's output was written to in place after its "
                      "module returned; its statistics at this step are of the new values, from "
                      "now on it is read at once" % (self.step, _layers.rows[layer][2]),
                      file=sys.stderr, flush=True)

    def _grad_hook(self, layer, op, nr):
        """A pre-hook for the autograd node that made a module's output (its output nr): queues
        the output's gradient as the node receives it."""
        queue = self._queue

        def hook(grad_outputs):
            g = grad_outputs[nr]
            if g is not None:
                queue(ACTIVATION_GRAD, layer, op, g)
        return hook

    def _tensor_hook(self, layer, op):
        """A hook for a module output's gradient as a tensor hook (the node's gradient for that
        output alone): _on_output's way when nothing else hooks the output."""
        queue = self._queue

        def hook(grad):
            if grad is not None:
                queue(ACTIVATION_GRAD, layer, op, grad)
        return hook

    def _on_output(self, module, args, output):
        """A module's forward hook: its output's statistics, and a hook for its gradient. Under
        activation checkpointing a module runs again in the backward: that run is left out
        when the forward recorded the module (torch.utils.checkpoint's default, whose backward
        uses the forward's graph), and recorded when it did not (the reentrant kind, whose
        forward runs without gradients and whose recomputed graph is the one differentiated).
        The gradient's hook goes on the output as Tensor.register_hook puts it there (a dict of
        hooks that the autograd node which made it calls with its gradient), without the
        handle object that register_hook and register_prehook make (on an H200's host 1.6-2.0
        us against 2.6-4.1 for a pre-hook on the node and 4.7-4.9 for register_hook:
        bench/hook_costs.py); when the output has hooks already (another module's, the
        program's), it goes on the node as a pre-hook."""
        if _compiling() or not self.sampled or self.rerunning or not module.training or \
                not _grad_enabled():  # (compiling: watch() came before torch.compile())
            return None
        key = id(module)
        info = self._module_info.get(key)
        if info is None:  # a copy DataParallel made of a module for one forward
            if not self._noted_copies:
                self._noted_copies = True
                print("ampprobe: the model runs in copies made for each forward (DataParallel on "
                      "several GPUs): their module outputs are not recorded; "
                      "DistributedDataParallel's are", file=sys.stderr, flush=True)
            return None
        if _graph_task() != -1:  # in a backward
            if self._seen.get(key) == self._forwards:
                return None
        else:
            self._seen[key] = self._forwards
        if isinstance(output, torch.Tensor):
            t = output
        else:
            outs = float_tensors(output)
            if not outs:
                return None
            t = outs[0]
        layer, op, hook, tensor_hook = info
        self._queue(ACTIVATION, layer, op, t)
        if self.links.open:
            self.links.add(layer, args, t)
        if t.requires_grad:
            node = t.grad_fn
            if node is None:  # a leaf (a parameter returned as it is): hooked once for good
                if getattr(t, "_ampprobe_hooked", None) is not self:
                    t._ampprobe_hooked = self
                    t.register_hook(lambda g: self._queue(ACTIVATION_GRAD, layer, op, g)
                                    if self.sampled else None)
            elif type(t) in _PLAIN and t._backward_hooks is None and \
                    hasattr(node, "_register_hook_dict"):
                hooks = t._backward_hooks = collections.OrderedDict()  # (not a dict: the
                hooks[_HOOK_KEY] = tensor_hook  # handles of later register_hook()s weakref it)
                node._register_hook_dict(t)
            else:
                nr = t.output_nr
                node.register_prehook(hook if nr == 0 else self._grad_hook(layer, op, nr))
        return None

    def close(self):
        """Detaches: records the last step, removes the hooks, gives the scaler its own methods
        back."""
        if not self.on:
            return
        self._end_unended()
        self.flush(last=True)
        self._end_loss_region()
        for h in self._handles:
            h.remove()
        self.models.end_first_step()
        if self.scaler is not None:
            del self.scaler.scale, self.scaler.unscale_, self.scaler.step, self.scaler.update
        if self in _watchers:
            _watchers.remove(self)
        self.stats.close()
        self.on = False

    # -- what rounding takes from the updates of 16-bit parameters -----------------------------

    def _before_update(self, optimizer, args=(), kwargs=None):
        """An optimizer is about to update parameters: on a sampled step (not in a re-run, not
        in compiled code) the update check keeps what it will compare (_updates.UpdateCheck)."""
        if self.on and self.sampled and not self.rerunning and not _compiling():
            self.updates.before(optimizer, self.step, args, kwargs)
        else:
            self.updates.drop()

    # -- the end of a step ---------------------------------------------------------------------

    def _queue_weight_grads(self):
        """The parameter gradients' statistics, once a step (before the scaler unscales them)."""
        if self.wgrads_queued:
            return
        self.wgrads_queued = True
        self._read_weight_grads()

    def _read_weight_grads(self):
        """Queues the parameter gradients' statistics as the gradients are now; a read made
        before in the step is superseded (its rows left out of the records)."""
        for k in range(*self._wgrad_rows):
            layer, _, op, dtype = self.entries[k]
            self.entries[k] = (layer, SUPERSEDED, op, dtype)
        self.wgrad_handles = range(0)
        self._wgrad_rows = (0, 0)
        if self.sampled:
            first = len(self.entries)
            self.wgrad_handles = self._queue_params([p.grad for p in self._plist],
                                                    self._wentries)
            self._wgrad_rows = (first, len(self.entries))

    def _on_backward_end(self):
        """backward() returned, with no optimizer or scaler known: the step's end is seen only
        as the next forward begins (_step_by_forward), after an update by hand has used the
        gradients and zeroed them, so they are read now; each backward's read supersedes the
        one before (gradient accumulation), and end_step reads them again when they are still
        there (no update yet: an optimizer's pre-hook)."""
        if self.on and self.forwards and not self.rerunning and not _compiling():
            self.wgrads_queued = self._wgrads_early = True
            self._read_weight_grads()

    def _queue_params(self, ts, entries, defer=False):
        """Launches the statistics of ts, one tensor per parameter (None: none, a gradient of a
        parameter that took no part), under their entries, in one launch with the deferred
        tensors; returns their handles. At once unless defer (the parameters as a forward
        begins, once they are known to keep their memory through it: on_root_pre): a wrapper
        that swaps a parameter's memory (FSDP1's flat parameters, sharded and unsharded around
        each unit's forward) leaves nothing to read later."""
        if self._sharded:  # DTensors (FSDP2): each process records its shards, if it has any
            ts = [None if t is None else self._local(t) for t in ts]
            ts = [None if t is None or not t.numel() else t for t in ts]
        with self._lock:
            if any(t is None for t in ts):
                have = [(t, e) for t, e in zip(ts, entries) if t is not None]
                ts = [t for t, _ in have]
                self.entries.extend(e for _, e in have)
            else:
                self.entries.extend(entries)
            first = len(self.stats.order)
            self.stats.add_many(ts, *self._against, defer=defer)
            return range(first, first + len(ts))

    def _found_infs(self):
        """The scaler's per-device found_inf tensors of this step (as update() will see them)."""
        found = [v for st in self.scaler._per_optimizer_states.values()
                 for v in st.get("found_inf_per_device", {}).values()]
        if len(found) > _devstats.HEAD - 3:  # more GPUs than places beside the loss, scale, tracker
            found = [torch.stack([v.to(found[0].device).reshape(()) for v in found]).sum()]
        return found

    def end_step(self, found, updated=False):
        """Ends the step: starts its figures on their way to the host and records the step
        before it (whose figures are there by now). found: the scaler's found_inf tensors
        (None: no scaler); updated: its parameters were written after its last forward began
        (by hand, by an optimizer the watcher does not know, or by the step() it was found in),
        so a re-run would not see the parameters the step ran with. A step that broke (its loss
        or found_inf is non-finite, or without a scaler its parameter gradients: _marked) is
        recorded at once, while a re-run still sees its parameters (check_grads: without a
        scaler the step's end then waits for the backward, as a GradScaler's step() does). When
        recording has ended under the program (its launcher was killed, the disk filled:
        libamprecord said so on stderr), the watcher detaches (close()): nothing would read what
        it computes."""
        if not self.on:
            return
        if not self.rec.enabled:
            self.close()
            return
        self._close_step(found, updated)
        with self._lock:  # the scale after update() goes with the figures when there are any;
            # else the next step's mark brings it (flush(scale_later)), or a broken one reads it
            copy = self.stats.finish(scalars=[self.scaler._scale, self.scaler._growth_tracker]
                                     if found is not None and self.entries else None)
            self._note_modified()
        loss, before, found_sum, grads_bad, tracker = self._marked(found)
        last = self.waiting
        if last is not None and last.after is None and before is not None:
            last.after, last.tracker = before, tracker  # as the step before's update() left them
        done = _Done(self.step, self.step_start, self.rec.now_ns(), self.entries, copy, loss,
                     before, found_sum, grads_bad, self.forwards, updated)
        broken = not (loss is None or abs(loss) < _INF) or (found_sum or 0) > 0 or grads_bad
        if (self.step - self.first) % _MEM_EVERY == 0 or broken:
            done.mem_peak = self._mem_peak()
        self.flush()
        if broken:
            self._record(done)
        else:  # recorded a step later (flush()); its statistics may still show a break
            self.waiting = done
        self._next_step()

    def _close_step(self, found, updated):
        """What the step left open ends (end_step): its loss region, an unreturned forward's
        links; its parameter gradients are queued as the update will see them, and without a
        scaler (found None) its scalars are marked, with check_grads the count of non-finite
        values among the parameter gradients too."""
        if not self._forwards and self.step == self.first:
            print("ampprobe: step %d ended without an eager forward of the watched model (was it "
                  "compiled after watch(), or called inside a compiled function? watch what "
                  "torch.compile returned): its inputs and module outputs are not recorded"
                  % self.step, file=sys.stderr, flush=True)
        self._end_loss_region()
        if self.links.open:  # (the model's forward did not return: what it saw is kept)
            self.links.close()
        if self._wgrads_early and not updated and \
                any(p.grad is not None for p in self._plist):  # as the update will see them
            self.wgrads_queued = False  # (none held: an update through p.data took them)
        self._queue_weight_grads()
        self.models.end_first_step()
        if found is None:
            bad = None
            if self.check_grads:
                with self._lock:
                    bad = self.stats.nonfinite_count(self.wgrad_handles)
            self._ensure_marked(None, bad)

    def _next_step(self):
        """The step's state emptied for the next one (end_step)."""
        self.step += 1
        self.step_start = self.rec.now_ns()
        self.sampled = (self.step - self.first) % self.stats_every == 0
        _steps_recorded[0] = self.step
        self.entries, self.loss = [], None
        self.forwards = []
        self._scaled = self._outside_pending = False
        self.params_queued = self.wgrads_queued = self._wgrads_early = False
        self._wgrad_rows = (0, 0)

    def flush(self, last=False, scale_later=False):
        """Records the step whose figures are on their way, if any (last: the run's last step,
        which gets the memory peak whatever its number). scale_later: a step whose scale after
        update() did not go with figures waits for the next step's mark (end_step), which
        brings it without a launch of its own."""
        d = self.waiting
        if d is not None and scale_later and d.found is not None and d.after is None and \
                not d.copy.n_scalars:
            self.updates.record(last)
            return
        self.waiting = None
        if d is not None:
            if last and not d.mem_peak:
                d.mem_peak = self._mem_peak()
            self._record(d)
        self.updates.record(last)

    def _mem_peak(self):
        """torch's peak of memory held by tensors on the model's GPU (0: a CPU model). Read
        every _MEM_EVERY steps, not every step: it builds all of the allocator's statistics."""
        dev = self._plist[0].device if self._plist else None
        if dev is None or dev.type != "cuda":
            return 0
        return torch.cuda.max_memory_allocated(dev)

    def _marked(self, found):
        """The step's marked scalars (waiting for them only): the loss (None: none), the scale
        before update() and found_inf summed (None: no scaler; -1: no found_inf), without a
        scaler whether the parameter gradients hold NaN/inf (False: not known), and the growth
        tracker before update() (None: no scaler)."""
        with self._lock:
            vals = self.stats.marked() or []
        loss = vals.pop(0) if self.loss is not None else None
        if found is None:
            return loss, None, None, bool(vals and vals[0] > 0), None
        return loss, vals[0], sum(vals[2:]) if found else -1.0, False, vals[1]

    def _record(self, d):
        """Emits a finished step's records (waits for its figures). The statistics go to C in one
        call; Python reads single figures only when something is wrong."""
        copy = d.copy.wait()
        vals = copy.extras
        loss = d.loss
        scale = None  # before, found_inf (summed; -1: none), after, tracker
        if d.found is not None:
            if vals:
                d.after, d.tracker = vals[_S_AFTER], vals[_S_TRACKER]
            elif d.after is None:  # (a broken step, the last one): as update() left them
                with _devstats._quiet():  # (not the program's ops)
                    d.after = self.scaler._scale.item()
                    d.tracker = float(self.scaler._growth_tracker.item())
            scale = [d.before, d.found, d.after, d.tracker]
        summary, norm = None, None
        if d.entries:
            if d.entries != self._entries_key:  # the same entries step after step: built once
                self._entries_key, self._entries_arr = d.entries, self.rec.entries(d.entries)
            summary = self.rec.tensor_stats_many(d.step, self.target or "f16", self._entries_arr,
                                                 ctypes.addressof(copy.slots))
            if summary.weight_grads:
                norm = _INF if summary.nonfinite[WEIGHT_GRAD] else \
                    math.sqrt(summary.weight_grad_sumsq) / (scale[0] if scale else 1.0)
        self.diagnoser.emit(d, copy, summary, loss, scale)
        self.rec.step(d.step, d.start_ns, d.end_ns, loss, norm, d.mem_peak)
        copy.release()

    def layer_name(self, layer):
        """Layer id's qualified name (the judge's events name a second layer by it)."""
        return _layers.rows[layer][2]

class _Done:
    """A finished step whose figures are on their way to the host (Watcher.end_step)."""
    __slots__ = ("step", "start_ns", "end_ns", "entries", "copy", "loss", "before", "found",
                 "forwards", "mem_peak", "grads_bad", "updated", "after", "tracker")

    def __init__(self, step, start_ns, end_ns, entries, copy, loss, before, found, grads_bad,
                 forwards, updated):
        self.step, self.start_ns, self.end_ns, self.entries = step, start_ns, end_ns, entries
        self.copy, self.loss, self.before, self.found = copy, loss, before, found
        self.grads_bad = grads_bad  # no scaler, check_grads: its parameter gradients held NaN/inf
        self.forwards = forwards  # its _Forwards: inputs and taped loss computations
        self.mem_peak = 0  # torch's memory peak at the step's end (0: not read at this step)
        self.updated = updated  # its parameters written after its last forward (end_step)
        self.after = self.tracker = None  # the scale and growth tracker after its update()


def _flush_all():
    """At exit: the last step of every watcher is recorded (autoattach never calls close())."""
    for w in list(_watchers):
        try:
            w._end_unended()
            w.flush(last=True)
        except Exception as e:  # a dying CUDA context must not turn the exit into a traceback
            print("ampprobe: the last step was not recorded: %s" % e, file=sys.stderr)


atexit.register(_flush_all)


def watch(model, scaler=None, optimizer=None, stats_every=None, name=None, ops_every=None,
          check_grads=None):
    """Records model's training when the process records (ampprobe run); returns the Watcher
    (inactive, with nothing attached, when it does not). scaler: an enabled GradScaler (steps
    end at its update()); optimizer: steps end before its step() when there is no scaler;
    stats_every: statistics every N steps (default AMPPROBE_STATS_EVERY, else 1); name: the
    root layer's name (default the model's class); ops_every: op steps (AMP_OPS) at step 1 and
    every N steps after it (default AMPPROBE_OPS_EVERY, else 1000; 0: none); check_grads:
    without a scaler, the end of each sampled step waits for the parameter gradients and reads
    whether they hold NaN/inf, so that a backward that went non-finite is traced op by op at its
    step, before the optimizer steps on it (default AMPPROBE_CHECK_GRADS, else off: 2-9% more
    step time on an H200; without it such a step is named per module, a step late). While a
    watcher records in this process, watch() of another model records it beside that one, in
    its steps and with its settings, and returns that watcher (Models.join)."""
    _settings.check_watch_args(model, scaler, optimizer, stats_every, name, ops_every, check_grads)
    first = next((w for w in _watchers if w.on), None)
    if first is not None:
        return first.models.join(model, scaler=scaler, optimizer=optimizer, name=name,
                                 settings=dict(stats_every=stats_every, ops_every=ops_every,
                                               check_grads=check_grads))
    w = Watcher(model, scaler=scaler, optimizer=optimizer, stats_every=stats_every, name=name,
                ops_every=ops_every, check_grads=check_grads)
    if w.on:
        _note_profiler()
    return w


_profiler_noted = [False]


def _note_profiler():
    """torch.profiler gets its CUDA activity from CUPTI, which serves one client a process: under
    `ampprobe run` tracing CUDA that is ampprobe's capture library, and the profiler's CUDA
    events are missing (Kineto says only that its CUPTI initialization failed). When a profiler
    that wants them starts, says why, once, on stderr."""
    if _profiler_noted[0] or "cuda" not in os.environ.get("AMPPROBE_TRACE", "").split(","):
        return
    _profiler_noted[0] = True
    try:
        from torch.autograd import profiler as autograd_profiler
        profile = autograd_profiler.profile
        prepare = profile._prepare_trace
        cuda = torch._C._profiler.ProfilerActivity.CUDA
    except (ImportError, AttributeError):  # another torch's profiler: nothing said
        return
    said = False

    def prepare_trace(self, *args, **kwargs):
        nonlocal said
        if not said and cuda in (getattr(self, "kineto_activities", None) or ()):
            said = True
            print("ampprobe: torch.profiler records no CUDA activity in this run: `ampprobe run` "
                  "traces CUDA through CUPTI, which serves one client a process (hence Kineto's "
                  "\"CUPTI initialization failed\"); its CPU events are recorded as usual. To "
                  "profile with it under ampprobe, run with --trace amp,nvtx.",
                  file=sys.stderr, flush=True)
        return prepare(self, *args, **kwargs)

    profile._prepare_trace = prepare_trace


# ---------------------------------------------------------------------------------------------
# `ampprobe run --torch`: attaching with no code change

_scalers = []  # enabled GradScalers in creation order (the last one is the loop's)


class _Attacher:
    """What autoattach() leaves in place: the hooks that find the model that trains, and the
    watcher they give it."""

    def __init__(self):
        self.watcher = None
        self.training = False  # a module ran in training mode
        # the optimizer whose step() runs while no model is watched yet (its closure may call
        # the model first: LBFGS, Lightning's loop)
        self.stepping = None
        self.hooks = []  # first_forward's: a global pre-hook, one around each module compiled
        # in place

    def scaler_made(self, scaler):
        """A GradScaler was made: an enabled one is the loop's from now on."""
        if scaler.is_enabled():
            _scalers.append(scaler)
            if self.watcher is not None:
                self.watcher.attach_scaler(scaler)

    def unhook(self):
        for h in self.hooks:
            h.remove()
        self.hooks.clear()

    def first_forward(self, module, args):
        """Every module's forward, until the model is found: the first called in training mode,
        with grad on, that has trainable parameters (a wrapper's is left to what it wraps)."""
        if _compiling() or self.watcher is not None or not module.training or \
                not torch.is_grad_enabled():  # (compiling: it runs around the compiled call)
            return None
        if any(w.on for w in _watchers):  # the script watches its model itself (watch())
            self.unhook()
            return None
        self.training = True
        if not any(p.requires_grad for p in module.parameters()):
            return None
        if _models.unwrap(module) is not module:  # DistributedDataParallel: watch what it wraps,
            return None  # whose forward it calls next
        self.unhook()
        w = Watcher(module, scaler=_scalers[-1] if _scalers else None)
        w.models.add_roots = True  # a second model the optimizer trains is recorded too
        w.found_in_step = self.stepping is not None
        self.watcher = w
        w.on_root_pre(module, args, {})  # its own pre-hook was registered too late for this call
        return None

    def compiled(self, module):
        """module.compile() ran: its calls run compiled from now on, the global hook traced with
        them; first_forward runs around them instead."""
        if self.hooks and getattr(module, "_compiled_call_impl", None) is not None:
            a = Around.around(module)
            self.hooks.append(Around.hook(a.pre,
                                          lambda args, kwargs: self.first_forward(module, args)))

    def nothing_watched(self):
        """At exit, when modules ran in training mode but none had a trainable parameter (and
        the script watched no model itself): META no_model, for the report of a run without
        steps. Not of a process that trained no module at all (a launcher, a data worker): a
        record would make it a recording process."""
        if self.training and not _ever_watched[0]:
            _records.record_meta("no_model", "no module called in training mode had trainable "
                                 "parameters (requires_grad)")

    def optimizer_step(self, optimizer, args, kwargs):
        if self.watcher is not None:
            return self.watcher.on_optimizer_step(optimizer, args, kwargs)
        self.stepping = optimizer
        return None

    def optimizer_stepped(self, optimizer, args, kwargs):
        self.stepping = None
        if self.watcher is not None:
            self.watcher.on_optimizer_stepped(optimizer)


def autoattach():
    """Watches the model that trains: the first module called in training mode, with grad on,
    that has trainable parameters, with the last enabled GradScaler made so far (or made later);
    without one, steps end before each optimizer.step(). A script that called watch() itself
    by then is left to its own watcher. Called by the startup module that
    `ampprobe run --torch` puts on PYTHONPATH, right after `import torch`."""
    if not _records.Recorder().enabled:
        return
    _note_profiler()
    at = _Attacher()
    orig_init = torch.amp.GradScaler.__init__

    def scaler_init(self, *args, **kwargs):
        orig_init(self, *args, **kwargs)
        at.scaler_made(self)

    torch.amp.GradScaler.__init__ = scaler_init
    at.hooks.append(torch.nn.modules.module.register_module_forward_pre_hook(at.first_forward))
    atexit.register(at.nothing_watched)
    # until the model is found, torch.compile's wrapper would warn of this hook on every run
    warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when there are "
                            "global hooks")
    compile_in_place = getattr(torch.nn.Module, "compile", None)
    if compile_in_place is not None:
        def compile_then_watch(module, *args, **kwargs):
            compile_in_place(module, *args, **kwargs)
            at.compiled(module)

        torch.nn.Module.compile = compile_then_watch
    register_optimizer_step_pre_hook(at.optimizer_step)
    register_optimizer_step_post_hook(at.optimizer_stepped)
