"""_diagnose.py — what broke in a finished step of the PyTorch bridge, and where: the events the
watcher's statistics show (the first module output or gradient to go non-finite, when nothing
finer can be had) and, while the step's parameters are still those it ran with, its forward run
again op by op on its inputs (_judge.py's tracer), its taped loss computation replayed on that
forward's output, and its backward differentiated op by op (_trace.py). torch.py's Watcher owns
one Diagnoser and hands it each recorded step (emit).
"""
import contextlib
import math
import sys

import torch
from torch.utils._pytree import tree_map

from . import _trace, _vocab
from ._judge import Judge, OpTracer, describe_now, float_tensors
from ._records import ACTIVATION, ACTIVATION_GRAD, WEIGHT, WEIGHT_GRAD
from ._records import PHASE_FWD, PHASE_BWD, PHASE_OPTIM
from ._records import INFO, WARNING, ERROR

# the broken steps searched each; after them only the first step of a streak of broken steps
_RERUNS_BEFORE_STREAKS = 10
# re-runs of steps where a layer's output turned to zeros (an overflow its own code absorbed?)
_ZERO_RERUNS = 3
# a backward that went non-finite without a scaler, seen in the statistics when the step is
# recorded (the next one's end): the event's detail says what would trace it
_LATE = ("traced per module when the step was recorded, after the optimizer had stepped on "
         "these gradients; check_grads (ampprobe run --check-grads) traces it op by op at its "
         "step")
# a backward that broke under FSDP1, whose backward is not run again (Watcher._take_wrappers)
_NO_BWD_RERUN = ("traced per module, not op by op: FSDP1's backward hooks reduce the gradients "
                 "and reset them, so a backward is not run again")
# a step whose parameters changed before its end was seen (Watcher._end_unmarked, or its end at
# on_optimizer_stepped): not re-run
_UPDATED = ("its parameters were written before the step's end was seen (an update by hand, "
            "or the step() of an optimizer whose closure ran the model first), so it cannot "
            "run again as it ran")


def _describe_figures(what, dtype, f):
    """_vocab.describe of a tensor's finished figures (f: _devstats.Figures; its min, max and
    amax None when it holds no finite value)."""
    nan = float("nan")
    return _vocab.describe(what, dtype, (f.numel,), nan if f.min is None else f.min,
                           nan if f.max is None else f.max, nan if f.amax is None else f.amax,
                           f.n_nan, f.n_posinf, f.n_neginf)


def _model_device(w):
    """The GPU index of watcher w's first parameter (0 when none is on a GPU)."""
    p = w._plist[0] if w._plist else None
    return p.device.index or 0 if p is not None and p.is_cuda else 0


def _eager_stance():
    """Compiled modules run eagerly inside (torch.compiler.set_stance, torch 2.6 on)."""
    stance = getattr(torch.compiler, "set_stance", None)
    if stance is None or "torch._dynamo" not in sys.modules:
        return contextlib.nullcontext()
    return stance("force_eager")


class Diagnoser:
    """The events of watcher w's recorded steps (emit), and the forward re-runs they and an op
    step of a compiled model (ops_eagerly) need."""

    def __init__(self, w):
        self.w = w
        self.broken_steps = 0  # broken steps searched
        self.prev_broken = False  # the step before broke
        self.zero_reruns = 0  # steps re-run for an output that turned to zeros

    def emit(self, d, copy, summary, loss, scale):
        """The step's events: what broke and where (the statistics are recorded already)."""
        w = self.w
        step = d.step
        fwd_bad = summary is not None and summary.nonfinite[ACTIVATION] > 0
        if summary is not None and summary.f32_overflow > 0 and w.target == "f16":
            self._f32_overflows(d, copy.result()[0])
        loss_bad = loss is not None and not math.isfinite(loss)
        found_inf = scale is not None and scale[1] > 0
        bwd_bad = found_inf or d.grads_bad
        broken = fwd_bad or loss_bad or bwd_bad
        fwd_event, loss_event, bwd_found = None, None, False
        if broken and (self.broken_steps < _RERUNS_BEFORE_STREAKS or not self.prev_broken):
            self.broken_steps += 1
            why = _UPDATED if d.updated else \
                "a model sharded over several processes cannot run its forward again on one"
            # (a break in the backward alone, which is not run again under FSDP1: the forward
            # is not either, as it could only find what reached a loss that stayed finite)
            if w._rerunnable and not d.updated and \
                    (fwd_bad or loss_bad or w._bwd_rerunnable):
                fwd_event, loss_event, bwd_found = self._search(
                    d, bwd_bad and not loss_bad and w._bwd_rerunnable,
                    scale[0] if scale else 1.0)
                why = "its forward, run again on the step's inputs, did not break or did not run"
            if fwd_bad and fwd_event is None:  # the statistics saw it: named per module
                fwd_event = self._forward_producer(d, copy.result()[0], why)
        self.prev_broken = broken
        if not broken and summary is not None and summary.zero_jump >= 0 and \
                self.zero_reruns < _ZERO_RERUNS and w._rerunnable and not d.updated:
            # a layer's output went to zeros while everything stayed finite: run the forward
            # again op by op for an fp16 overflow its code absorbed (Judge.finish)
            self.zero_reruns += 1
            self._search(d, False, 1.0)
        if loss_bad:
            w.rec.event(step, -1, None, 0, "loss_nonfinite", ERROR, 1, loss,
                        "the forward pass produced non-finite values" if fwd_event else
                        "the loss computation outside the model produced non-finite values"
                        if loss_event else "the loss itself became non-finite")
        fwd_fine = not (fwd_event or loss_event or loss_bad)  # so the backward broke, if it did
        bwd_why = "" if w._bwd_rerunnable else _NO_BWD_RERUN
        if d.updated:
            bwd_why = "traced per module, not op by op: " + _UPDATED
        if found_inf and fwd_fine:
            if not bwd_found:
                self._backward_producer(d, copy.result()[0], bwd_why)
            w.rec.event(step, -1, None, PHASE_BWD, "grad_overflow", INFO, -1, scale[0],
                        "gradients overflowed at loss scale %g while the forward pass stayed "
                        "finite: a loss-scale overflow, the step was skipped and the scale "
                        "backed off to %g" % (scale[0], scale[2]))
        elif d.grads_bad and fwd_fine and not bwd_found:  # no scaler: the optimizer steps on them
            self._backward_producer(d, copy.result()[0], bwd_why)
        elif scale is None and not d.grads_bad and summary is not None and \
                summary.nonfinite[WEIGHT_GRAD] and not fwd_bad and not loss_bad:
            # seen now, a step late (no check_grads): the optimizer has stepped on them
            self._backward_producer(d, copy.result()[0], bwd_why if d.updated else _LATE)
        if scale is not None:
            self._scale_update(step, scale)

    def _f32_overflows(self, d, stats):
        """Under f16 autocast, the f32 module outputs with values beyond f16's range: events of
        what would overflow if they ran in f16."""
        for (layer, kind, op, dtype), f in zip(d.entries, stats):
            if kind == ACTIVATION and dtype == "f32" and f.n_overflow > 0:
                self.w.rec.event(d.step, layer, op, PHASE_FWD, "overflow", INFO, f.n_overflow,
                                 f.amax, "f32 values beyond the f16 range: this output "
                                 "overflows if it runs in f16")

    def _scale_update(self, step, scale):
        """The step's GradScaler update (before, found_inf, after, tracker): its row, and events
        for a skipped step and a scale that moved."""
        before, found, after, tracker = scale
        rec = self.w.rec
        rec.scale(step, before, after, max(found, 0), tracker, found > 0)
        if found > 0:
            rec.event(step, -1, None, PHASE_OPTIM, "step_skipped", WARNING, 1, before)
        if after != before:
            rec.event(step, -1, None, PHASE_OPTIM,
                      "scale_backoff" if after < before else "scale_growth", INFO, -1, after)

    def _forward_producer(self, d, stats, why):
        """Step d's forward searched per module, from its statistics, when it could not be
        traced op by op (why: the reason, for the event's detail): the first module output that
        went non-finite (a module's output is queued as it returns, inner modules first) as
        nonfinite_input when the model's input data holds the NaN/inf, as nonfinite_propagated
        (info) when a parameter did as the step began (an earlier update wrote it), else as
        nonfinite_module: made in that module when all its inputs were module outputs that came
        before it finite (Links.sources), else there or in the code of the one around it (module
        inputs have no statistics). Returns the event kind."""
        w = self.w
        nan = float("nan")
        finite = set()  # the layers whose outputs came before, finite
        held = [name for (_, kind, name, _), f in zip(d.entries, stats)
                if kind == WEIGHT and f.nonfinite]  # parameters non-finite as the step began
        for (layer, kind, op, dtype), f in zip(d.entries, stats):
            if kind != ACTIVATION:
                continue
            if not f.nonfinite:
                finite.add(layer)
                continue
            event, sev, detail = "nonfinite_module", ERROR, ""
            data = float_tensors([(fw.args, fw.kwargs) for fw in d.forwards or ()])
            for k, t in enumerate(data):
                seg, bad, _ = describe_now("input %d" % k, t)
                if bad:
                    event, detail = "nonfinite_input", seg
                    break
            if event == "nonfinite_module" and held:  # carried on from an earlier step's update
                event, sev = "nonfinite_propagated", INFO
                detail = "the parameter%s %s held NaN/inf as the step began; " % (
                    "s" if len(held) > 1 else "", ", ".join(held[:3]) +
                    (" and %d more" % (len(held) - 3) if len(held) > 3 else ""))
            detail += _describe_figures("output", dtype, f)
            sources = w.links.sources(layer)
            if event == "nonfinite_module" and sources and sources <= finite:
                detail += "made in it: its inputs were finite (the output of %s); " % \
                    ", ".join(sorted(w.layer_name(s) for s in sources))
            detail += "not traced op by op: " + why
            w.rec.event(d.step, layer, op, PHASE_FWD, event, sev, f.nonfinite,
                        nan if f.amax is None else f.amax, detail)
            return event
        return None

    def _backward_producer(self, d, stats, note=""):
        """Where step d's backward first made a non-finite gradient, from its statistics (in
        backward order): the first module output whose gradient went non-finite got it from
        what reads that output (Links.reader: a module, the code around it, or the loss
        computation; without links, the module whose output gradient came before), a parameter
        gradient from its own module. note ends the event's detail."""
        w = self.w
        prev = None
        grads = {}  # layer -> its last finite output gradient's (dtype, figures)
        op_of = {lid: op for lid, op, _, _ in w._module_info.values()}
        nan = float("nan")
        for (layer, kind, op, dtype), f in zip(d.entries, stats):
            if kind not in (ACTIVATION_GRAD, WEIGHT_GRAD):
                continue
            if not f.nonfinite:
                if kind == ACTIVATION_GRAD:
                    prev = layer
                    grads[layer] = (dtype, f)
                continue
            how = w.links.reader(layer) if kind == ACTIVATION_GRAD else ("module", layer)
            whose = "the gradient of " + (w.layer_name(layer) + "'s output"
                                          if kind == ACTIVATION_GRAD else op)
            guess = how is None  # (a module the first forward did not run: no links)
            if guess:
                how = ("module", prev) if prev is not None else ("loss", -1)
            if how[0] == "module":
                made = "%s, made by %s's backward%s" % (
                    whose, w.layer_name(how[1]),
                    " (its output's gradient came just before)" if guess else "")
                layer, op = how[1], op_of.get(how[1], "module")
            elif how[0] == "code":
                made = "%s, made by the code that reads it (not one module's input)" % whose
                op = op_of.get(layer, "module")
            else:
                made = "%s, made by the loss computation" % whose
                layer, op = -1, "loss"
            detail = ""
            if how[0] == "module" and layer in grads:
                gd, gf = grads[layer]
                detail = _describe_figures("incoming gradient", gd, gf)
            detail += _describe_figures("gradient", dtype, f) + made
            detail += "; " + note if note else ""
            w.rec.event(d.step, layer, op, PHASE_BWD, "nonfinite_producer", WARNING,
                        f.nonfinite, nan if f.amax is None else f.amax, detail)
            return

    def _search(self, d, backward, scale):
        """Step d's forwards (one, or one per micro-batch when gradients accumulate) searched in
        turn until one names where the step broke: the forward re-run op by op (_rerun), then
        its loss computation replayed on the re-run's output and judged op by op (outside any
        module) and, with backward, differentiated op by op (_rerun_backward). Returns the
        forward's event, the loss computation's event and whether the backward named one."""
        w = self.w
        for f in d.forwards or ():
            fwd_event, out, left = self._rerun(d, f, with_graph=backward)
            if fwd_event is not None:
                return fwd_event, None, False
            if out is None:
                continue
            # (the forward ran again without an event: a -inf in its output is a mask's)
            judge = Judge(w, d.step, [], float_tensors(out))
            try:  # (the random state as before afterwards, as for the re-run forward)
                with torch.random.fork_rng(devices=[torch.cuda.current_device()]
                                           if f.dev == "cuda" else []), \
                        torch.set_grad_enabled(backward):
                    loss = _trace.replay(f, out, judge, graph=backward)
            except Exception as e:  # a call that does not take the re-run's tensors
                print("ampprobe: step %d: the loss computation's replay failed (%s: %s)"
                      % (d.step, type(e).__name__, e), file=sys.stderr)
                continue
            if judge.event is not None:
                return None, judge.event, False
            if backward and loss is not None and \
                    self._rerun_backward(d, loss, scale, left + judge.made):
                return None, None, True
        return None, None, False

    @contextlib.contextmanager
    def again(self, f, grad):
        """Runs forward f again inside: the model to call and its arguments (DataParallel on
        several GPUs: the model itself on the whole batch, on the first GPU), with f's autocast
        state, compiled modules run eagerly, the hooks quiet; the module buffers (batch-norm
        statistics) and the random state are as before afterwards."""
        w = self.w
        model, args, kwargs = w._runner, f.args, f.kwargs
        if isinstance(model, torch.nn.DataParallel):  # on several GPUs: its copies run in
            # threads of their own, where no tracer is; the model itself runs the whole batch
            model = model.module
            dev0 = torch.device("cuda", _model_device(w))
            args, kwargs = tree_map(lambda x: x.to(dev0) if isinstance(x, torch.Tensor) else x,
                                    (args, kwargs))
        buffers = [(b, b.detach().clone()) for r in w.models.roots for b in r.buffers()]
        w.rerunning = True
        try:
            with torch.random.fork_rng(devices=[torch.cuda.current_device()]
                                       if f.dev == "cuda" else []), \
                    torch.set_grad_enabled(grad), \
                    torch.autocast(f.dev, dtype=f.ac_dtype, enabled=f.ac), _eager_stance():
                yield model, args, kwargs
        finally:
            w.rerunning = False
            with torch.no_grad():
                for b, saved in buffers:
                    b.copy_(saved)

    def ops_eagerly(self, f):
        """An op step of a compiled model: forward f run again eagerly, without gradients,
        under the op recorder (what compiled code calls is no Python call to record)."""
        w = self.w
        rec = _trace.OpRecorder(w, w.step, f.dev)
        try:
            with self.again(f, False) as (model, args, kwargs):
                rec.start()
                try:
                    model(*args, **kwargs)
                finally:
                    rec.stop()
        except Exception as e:  # the model refused to run again: said, the ops not recorded
            print("ampprobe: step %d: the eager forward that records a compiled model's ops "
                  "failed (%s: %s)" % (w.step, type(e).__name__, e), file=sys.stderr,
                  flush=True)

    def _rerun(self, d, f, with_graph=False):
        """Runs forward f of step d again (again) under the op tracer (with the parameters as
        they are now: those of step d, unless d's break was only seen a step later). Returns
        the event kind it emitted and, when its output stayed finite, that output (with
        with_graph, its autograd graph, the nodes tagged with layer and op, for
        _rerun_backward) and the non-finite values it made and left out (Made)."""
        w = self.w
        stack = [w.layer_of[id(w.model)]]
        hooks = _trace.layer_stack_hooks(w.layer_of, stack, w.quiet)
        judge = None
        try:
            with self.again(f, with_graph) as (model, args, kwargs):
                judge = Judge(w, d.step, float_tensors((args, kwargs)),
                              [b for r in w.models.roots for b in r.buffers()])
                with OpTracer(judge, stack), \
                        (_trace.NodeTagger(stack) if with_graph else contextlib.nullcontext()):
                    out = model(*args, **kwargs)
        except Exception as e:  # the model refused to run again: said, the step not searched
            # (unless the judge had named the break before the model's own check raised)
            if judge is not None and judge.event is not None:
                return judge.event, None, []
            print("ampprobe: step %d: the forward re-run failed (%s: %s)"
                  % (d.step, type(e).__name__, e), file=sys.stderr, flush=True)
            return None, None, []
        finally:
            for h in hooks:
                h.remove()
        if judge.finish(out):
            return judge.event, None, []
        return None, out, judge.made

    def _rerun_backward(self, d, loss, scale, left):
        """Step d's backward, op by op, from loss, the replayed loss computation on a re-run
        forward: scaled as the GradScaler did, differentiated with autograd.grad (the
        parameters' .grad stay as they are) under a dispatch mode that stops at the first op
        whose output is non-finite. Emits nonfinite_producer (bwd) with the layer and forward op
        of the autograd node it ran in (left: the forward's non-finite values that did not reach
        its end, Made); False when it found none or could not be done."""
        w = self.w
        params = [p for p in w._plist if p.requires_grad]
        if not params:
            return False
        tracer = _trace.BwdTracer(w, d.step, left)
        try:
            with tracer:
                torch.autograd.grad(loss.float() * scale, params, allow_unused=True)
        except Exception as e:
            if tracer.event is None:
                print("ampprobe: step %d: the backward re-run failed (%s: %s); the producer is "
                      "named per module" % (d.step, type(e).__name__, e), file=sys.stderr)
                return False
        finally:  # (the re-run's graph, held by the caller, let go of on this thread)
            _trace.worker_idle({p.device for p in params})
        return tracer.event is not None
