"""_models.py — what the PyTorch bridge records as the model: the wrappers it looks through
(torch.compile's, data-parallel, FSDP1, activation checkpointing), the modules it names as layers,
and the models trained beside the first one (found among the parameters an optimizer updates, or
handed to a second watch()). torch.py's Watcher owns one Models.
"""
import sys

import torch

from . import _vocab
from ._compiled import layer_name

LAYERS = _vocab.LayerTable()  # layer ids are the process's, shared by its watchers


def count(n):
    """12345678 -> '12.3 M'."""
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return "%.3g %s" % (n / size, unit)
    return str(n)


# ---------------------------------------------------------------------------------------------
# Wrappers and layers


def unwrap(model):
    """The model a data-parallel wrapper trains: DistributedDataParallel's, and DataParallel's
    on one GPU, whose forward calls it as it is (on several, each forward calls copies of it,
    made anew: the wrapper is watched, and the copies' module outputs are not recorded)."""
    par = torch.nn.parallel
    if isinstance(model, par.DistributedDataParallel) or (
            isinstance(model, par.DataParallel) and len(model.device_ids or ()) <= 1):
        return model.module
    return model


# torch.compile. A compiled module's calls run as generated code, in which hooks would be traced
# (each a graph break, or worse): nothing inside one is hooked, the hooks of a module compiled in
# place are run around its compiled calls (Around), and an op step or a broken step runs the
# forward again eagerly.
compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)


def is_optimized(m):
    """Whether m is what torch.compile(module) returns (its _orig_mod runs compiled)."""
    ef = sys.modules.get("torch._dynamo.eval_frame")  # not loaded: nothing was compiled
    return ef is not None and isinstance(m, ef.OptimizedModule)


def is_compiled(m):
    """Whether m's calls run compiled: torch.compile(module)'s wrapper, or module.compile()."""
    return is_optimized(m) or getattr(m, "_compiled_call_impl", None) is not None


_FSDP1, _CKPT = "_fsdp_wrapped_module", "_checkpoint_wrapped_module"  # (their wrapped modules)


def is_fsdp1(m):
    """Whether module m is FSDP1's FullyShardedDataParallel."""
    return _FSDP1 in m._modules


def is_wrapper(m):
    """Whether module m wraps one module to run it, under its name (layer_name), and is not a
    layer of its own (its output is the wrapped module's): FSDP1's FullyShardedDataParallel,
    torch.distributed's activation-checkpoint and offload wrappers. (torch.compile's wrapper of
    a module is the layer: its hooks run outside the compiled code.)"""
    return is_fsdp1(m) or _CKPT in m._modules


def step_in(m):
    """The module that m runs as its own forward when m is a wrapper (torch.compile's,
    data-parallel, is_wrapper()), else m."""
    if is_optimized(m):
        return m._orig_mod
    if is_wrapper(m):
        return m._modules[_FSDP1 if is_fsdp1(m) else _CKPT]
    return unwrap(m)


def chain(model):
    """model, then each module that the wrappers around it run in turn, to the model itself
    (inner), in any order of wrapping."""
    while True:
        yield model
        m = step_in(model)
        if m is model:
            return
        model = m


def inner(model):
    """The model under torch.compile's, data-parallel and FSDP1's wrappers: what is named (the
    wrappers are what the loop calls)."""
    for m in chain(model):
        pass
    return m


def runner(outer):
    """What runs inner(outer) again: the outermost FSDP1 wrapper on the way, which gathers the
    parameters it holds first (the model's own would be stale or freed), else the model."""
    for m in chain(outer):
        if is_fsdp1(m):
            return m
    return m


def layers_of(root):
    """root's modules as layers ((layer name, module) list), and the wrappers of them (a
    list): a wrapper (is_wrapper) shares the name of what it wraps, which alone is hooked."""
    layers, wrappers = [], []
    for n, m in root.named_modules():
        if is_wrapper(m):
            wrappers.append(m)
        else:
            layers.append((layer_name(n), m))
    return layers, wrappers


# ---------------------------------------------------------------------------------------------
# The models trained beside the watched one


class Models:
    """The models watcher w records: its model, then those added beside it (add_root). During
    the first step a global forward pre-hook notes the modules called outside the model to
    train; an optimizer's first step checks what it updates outside the recorded models
    (check_optimizer)."""

    def __init__(self, w, model):
        self.w = w
        self.roots = [model]  # the model, then the modules added (add_root)
        self.add_roots = False  # record the modules an optimizer trains outside (autoattach)
        self._added = []  # what was added, from which step (META added_models)
        # modules outside the model called in training mode during its first step (a second
        # model the optimizer trains too: named when an optimizer's parameters are checked), by
        # id; then (end_first_step) their names and parameters
        self._others = {}
        self._others_hook = torch.nn.modules.module.register_module_forward_pre_hook(
            self._note_other)
        self._checked = set()  # ids of the optimizers checked
        self._unwatched = []  # what each optimizer trains outside the model (META unwatched)

    def _note_other(self, module, args):
        """The first step's global forward pre-hook: a module outside the model, called to
        train."""
        w = self.w
        if w.step == w.first and module.training and id(module) not in w.layer_of and \
                torch.is_grad_enabled() and not w.rerunning and not compiling():
            self._others.setdefault(id(module), module)

    def own_params(self):
        """The ids of the parameters recorded: the model's and those of the models added (a
        second optimizer that trains an added model finds nothing new there)."""
        return {id(p) for r in self.roots for p in r.parameters()}

    def end_first_step(self):
        """Step 0 is over (or an optimizer steps): no module calls looked at any more; of the
        modules seen outside the model, the outermost ones that hold trainable parameters of
        their own are kept with those parameters' ids (DataParallel's copies hold none: they
        go)."""
        if self._others_hook is None:
            return
        self._others_hook.remove()
        self._others_hook = None
        mine = self.own_params()
        seen, summary = set(), []
        for m in self._others.values():  # in call order: a model before its modules
            ids = [id(p) for p in m.parameters()
                   if p.requires_grad and p.is_leaf and id(p) not in mine and id(p) not in seen]
            if ids:
                seen.update(ids)
                summary.append((m, ids))
        self._others = summary

    def check_optimizer(self, optimizer):
        """Once per optimizer: the trainable parameters it updates outside the watched model (a
        second model: an encoder and a decoder called one after the other, a GAN's
        discriminator), found in the outermost modules of step 0 that hold them. Under
        autoattach (add_roots) those modules are recorded too from the next step on
        (add_root); else, or when they cannot be, said on stderr and in META `unwatched`."""
        if id(optimizer) in self._checked:
            return
        w = self.w
        if not self._checked:
            self._note_optimizer(optimizer)
        self._checked.add(id(optimizer))
        self.end_first_step()
        mine = self.own_params()
        other = {id(p): p for g in optimizer.param_groups for p in g["params"]
                 if p.requires_grad and id(p) not in mine}
        if not other:
            return
        added, names, left = [], [], dict(other)
        for m, ids in self._others:
            held = [i for i in ids if i in left]
            if not held:
                continue
            what = "%s (%s values)" % (_vocab.class_name(m), count(sum(left[i].numel()
                                                                      for i in held)))
            for i in held:
                del left[i]
            if self.add_roots and self.add_root(m):
                added.append(what)
            else:
                names.append(what)
        if left:
            names.append("%d tensors of no module called (%s values)" % (
                len(left), count(sum(p.numel() for p in left.values()))))
        model = _vocab.class_name(w.model)
        opt = "an optimizer (%s)" % type(optimizer).__name__  # (one of several, maybe)
        if added:
            self._note_added(", ".join(added), w.step + 1)
            print("ampprobe: %s also trains %s beside the model first called (%s): recorded "
                  "too from step %d on" % (opt, ", ".join(added), model, w.step + 1),
                  file=sys.stderr, flush=True)
        if names:
            what = ", ".join(names)
            self._unwatched.append(what)  # (several optimizers: all of them, in one row)
            w.rec.meta("unwatched", "; ".join(self._unwatched))
            how = "" if self.add_roots else \
                ", or leave watch() out and let ampprobe run --torch find them"
            print("ampprobe: %s also trains parameters outside the watched model (%s): %s; "
                  "their modules' outputs and gradients are not recorded, nor a NaN made there "
                  "traced. To record them, call them from one nn.Module's forward, the model "
                  "that trains%s." % (opt, model, what, how), file=sys.stderr, flush=True)

    def _note_optimizer(self, optimizer):
        """META optimizer (its class) and, of its first parameter group, optimizer.eps and
        optimizer.fused where it has them: what the report explains an update that made the
        weights non-finite with (an eps that is 0 in the parameters' own dtype)."""
        rec = self.w.rec
        rec.meta("optimizer", type(optimizer).__name__)
        group = optimizer.param_groups[0] if optimizer.param_groups else {}
        eps = group.get("eps")
        if isinstance(eps, (int, float)) and not isinstance(eps, bool):
            rec.meta("optimizer.eps", "%.17g" % eps)
        if group.get("fused"):
            rec.meta("optimizer.fused", "1")

    def _note_added(self, what, start):
        """Models recorded beside the model (what) from step start on: META added_models."""
        self._added.append("%s from step %d" % (what, start))
        self.w.rec.meta("added_models", "; ".join(self._added))

    def add_root(self, root, name=None):
        """Records root from now on as the model is recorded (a second model that the optimizer
        trains: its modules' outputs and gradients, its parameters' gradients), its layers
        named after name or its class ("Decoder", "Decoder.layers.0"); what it computes in the
        model's loss computation is replayed in its layers when a step breaks. False when it
        cannot be (it runs compiled)."""
        if any(is_compiled(m) for m in root.modules()):
            return False
        w = self.w
        outer, root = root, inner(root)  # (what DDP wraps: its hooks run in the call)
        base = name or _vocab.class_name(root)
        taken = {r[2] for r in LAYERS.rows}
        name, k = base, 2
        while name in taken:  # two of one class: "MLP", then "MLP#2"
            name, k = "%s#%d" % (base, k), k + 1
        # (a module it shares with the model, a tied embedding, stays the model's)
        layers, wrappers = layers_of(root)
        layers = [(n, m) for n, m in layers if id(m) not in w.layer_of]
        ids = LAYERS.add_model(name, list(dict.fromkeys(name + "." + n for n, _ in layers if n)))
        for rid, parent, lname in LAYERS.pending():
            w.rec.layer(rid, parent, lname)
        stack = w.tape.layers

        def pre(m, args):
            stack.append(w.layer_of.get(id(m), stack[-1]))

        def post(m, args, output):
            if len(stack) > 1:
                stack.pop()

        def key(n):
            return name + "." + n if n else ""

        w._take_modules(layers, lambda n: ids[key(n)], name + ".")
        w._take_wrappers(outer, wrappers, ids[""])
        for n, m in layers:  # (its own output read as the model's is: only when it is one module)
            w._handles += [m.register_forward_pre_hook(pre), m.register_forward_hook(post)]
            if n or len(layers) == 1:
                w._handles.append(m.register_forward_hook(w._on_output))
        self.roots.append(root)
        return True

    def join(self, model, scaler=None, optimizer=None, name=None, settings=None):
        """watch() of a second model while the watcher records (several models trained in one
        loop, as in PyTorch's AMP examples): it is recorded beside the first (add_root), from
        the step whose forward has not begun yet, in the same steps, which end where the
        watcher's end (the first watch()'s scaler or optimizer, else scaler and optimizer
        here), with the watcher's settings; another enabled GradScaler's updates, and settings
        (watch()'s stats_every, ops_every, check_grads) other than the watcher's, are said on
        stderr not to apply. Returns the watcher."""
        w = self.w
        outer = unwrap(model)
        if any(id(m) in w.layer_of for m in (outer, inner(outer))):
            return w  # watched already (the model, an added one or a module inside)
        start = w.step + 1 if w.forwards else w.step
        what = "%s (%s values)" % (name or _vocab.class_name(inner(outer)), count(sum(
            p.numel() for p in outer.parameters() if p.requires_grad)))
        first = _vocab.class_name(w.model)
        if not self.add_root(outer, name):
            print("ampprobe: watch(%s): it runs compiled, which a model watched beside %s cannot; "
                  "not recorded (watch it alone, or compile its blocks)" % (what, first),
                  file=sys.stderr, flush=True)
            return w
        self._note_added(what, start)
        print("ampprobe: watch(%s): recorded beside %s, watched first, from step %d on, in its "
              "steps" % (what, first, start), file=sys.stderr, flush=True)
        if scaler is not None and scaler.is_enabled() and w.scaler is None:
            w.attach_scaler(scaler)
        elif scaler is not None and scaler.is_enabled() and scaler is not w.scaler:
            print("ampprobe: watch(%s): its GradScaler is not %s's: steps end at the first "
                  "one's update(), and this one's updates are not recorded" % (what, first),
                  file=sys.stderr, flush=True)
        if optimizer is not None and w.scaler is None:
            w.attach_optimizer(optimizer)
        mine = {"stats_every": w.stats_every, "ops_every": w.ops_every,
                "check_grads": w.check_grads}
        other = ["%s=%s" % (k, v) for k, v in (settings or {}).items()
                 if v is not None and v != mine[k]]
        if other:
            print("ampprobe: watch(%s): %s not applied: the first watch()'s settings hold for "
                  "both (%s)" % (what, ", ".join(other), ", ".join(
                      "%s=%s" % kv for kv in mine.items())), file=sys.stderr, flush=True)
        return w
