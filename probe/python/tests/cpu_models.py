#!/usr/bin/env python3
"""cpu_models.py — what the watcher takes as the model (ampprobe/_models.py), on the CPU with
whatever torch is installed (Debian's python3-torch 1.13 does): the wrappers it looks through and
the layers it names, and the models trained beside the watched one. Prints a line per case and
"cpu_models: all passed"; exits 1 on a failure, 77 without torch.

  PYTHONPATH=probe/python python3 probe/python/tests/cpu_models.py

Cases. Wrappers: DataParallel on one device or none, an activation-checkpoint wrapper and an
FSDP1 wrapper (modules that hold their module under the names torch gives it) are looked
through in any order; their layers are named without the wrappers' steps, the wrappers listed
apart; a re-run goes through the outermost FSDP1 wrapper. Models beside: of the modules called
to train during the first step outside the watched model, an optimizer's first step names those
holding parameters it updates (once per optimizer: META unwatched, META optimizer and its eps);
a module called without gradients or in eval mode is not one of them (its parameters are counted
as loose tensors); modules called after the first step are not looked at. Under autoattach the
module found is recorded too (its layers named after its class, "#2" for a second of a class,
its modules' layers pushed and popped as they run, META added_models), unless it runs compiled.
A second watch() adds its model from the next step when a forward has begun, says which of its
settings do not apply, and adds neither a model already recorded nor a compiled one; a module it
shares with the model (a tied embedding) stays the model's.
"""
import contextlib
import io
import sys

try:
    import torch
except ImportError:
    print("cpu_models: no torch: skipped")
    sys.exit(77)

import torch.nn as nn

import torch_cases
from ampprobe import _models


class Wrapper(nn.Module):
    """A module that runs the module it holds under the name HOLDS, as torch's wrappers do."""
    HOLDS = None

    def __init__(self, m):
        super().__init__()
        setattr(self, self.HOLDS, m)

    def forward(self, x):
        return getattr(self, self.HOLDS)(x)


class Checkpointed(Wrapper):
    """Stands for torch.distributed's checkpoint_wrapper."""
    HOLDS = "_checkpoint_wrapped_module"


class Sharded(Wrapper):
    """Stands for FSDP1's FullyShardedDataParallel."""
    HOLDS = "_fsdp_wrapped_module"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Encoder(nn.Module):
    def __init__(self, wrap=lambda m: m):
        super().__init__()
        self.blocks = nn.ModuleList([wrap(Block()), wrap(Block())])

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x)


def wrapper_cases():
    model = Encoder(Checkpointed)
    layers, wrappers = _models.layers_of(model)
    names = [n for n, _ in layers]
    want = ["", "blocks", "blocks.0", "blocks.0.fc", "blocks.1", "blocks.1.fc"]
    yield "layers named without the wrappers' steps", names == want, names
    yield ("the wrappers listed apart", wrappers == list(model.blocks),
           [type(w).__name__ for w in wrappers])
    yield ("a wrapped block's layer is the block itself",
           dict(layers)["blocks.0"] is model.blocks[0]._checkpoint_wrapped_module,
           type(dict(layers)["blocks.0"]).__name__)

    # what the loop calls, outside in: DataParallel, FSDP1, a checkpoint wrapper, the model
    inner = Encoder()
    ckpt = Checkpointed(inner)
    fsdp = Sharded(ckpt)
    # (on one GPU, or none: it calls the module as it is)
    outer = nn.DataParallel(fsdp, device_ids=[0] if torch.cuda.is_available() else [])
    steps = [type(m).__name__ for m in _models.chain(outer)]
    yield ("every wrapper looked through, outside in",
           steps == ["DataParallel", "Sharded", "Checkpointed", "Encoder"], steps)
    yield "the model under them", _models.inner(outer) is inner, type(_models.inner(outer))
    yield "DataParallel unwrapped", _models.unwrap(outer) is fsdp, type(_models.unwrap(outer))
    yield ("a re-run goes through the outermost FSDP1 wrapper", _models.runner(outer) is fsdp,
           type(_models.runner(outer)).__name__)
    yield ("a model without FSDP1 runs as itself", _models.runner(ckpt) is inner,
           type(_models.runner(ckpt)).__name__)
    nested = Sharded(Checkpointed(Sharded(inner)))
    yield ("the outermost of two FSDP1 wrappers", _models.runner(nested) is nested,
           type(_models.runner(nested)).__name__)
    compiled = Decoder()
    compiled._compiled_call_impl = compiled.forward  # (as module.compile() leaves it)
    yield ("a module compiled in place is compiled, a plain one not",
           _models.is_compiled(compiled) and not _models.is_compiled(Decoder()), "")


class Meta:
    """What a recorder is told of the run: META rows and layers."""

    def __init__(self):
        self.rows, self.layers = {}, []

    def meta(self, key, value):
        self.rows[key] = value

    def layer(self, layer, parent, name):
        self.layers.append((layer, parent, name))


class Watcher:
    """What Models reads of a watcher: its step, its model's layers, its recorder, and (for a
    model added) where the modules it takes go."""

    def __init__(self, model):
        self.model, self.rec = model, Meta()
        self.step = self.first = 0
        self.rerunning = False
        self.forwards = []
        self.scaler = self.optimizer = None
        self.stats_every, self.ops_every, self.check_grads = 1, 1000, False
        layers = _models.layers_of(model)[0]
        ids = _models.LAYERS.add_model(type(model).__name__, [n for n, _ in layers])
        self.layer_of = {id(m): ids[n] for n, m in layers}
        self.taken, self.wrapped, self._handles = [], [], []
        self.tape = type("Tape", (), {"layers": [-1]})()
        self.models = _models.Models(self, model)

    def _take_modules(self, named, layer_id, prefix):
        for n, m in named:
            self.layer_of[id(m)] = layer_id(n)
            self.taken.append(prefix + n)

    def _take_wrappers(self, outer, wrappers, root_layer):
        self.wrapped.append((outer, root_layer))

    def _on_output(self, module, args, output):
        return None

    def attach_optimizer(self, optimizer):
        self.optimizer = optimizer


def first_step(w, *others, loose=(), eval_mod=None, nograd_mod=None):
    """Step 0: the watched model, then the others on its output, eval_mod in eval mode and
    nograd_mod without gradients; the optimizer (Adam) returned trains all of them and the
    loose tensors."""
    x = torch.randn(3, 4)
    y = w.model(x)
    for m in others:
        y = m(y)
    if eval_mod is not None:
        eval_mod.eval()
        eval_mod(x)
    if nograd_mod is not None:
        with torch.no_grad():
            nograd_mod(x)
    params = [p for m in (w.model,) + others for p in m.parameters()] + list(loose)
    for m in (eval_mod, nograd_mod):
        if m is not None:
            params += list(m.parameters())
    return torch.optim.Adam(params, lr=1e-3)


def said(f):
    """What f() printed on stderr."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        f()
    return err.getvalue()


def beside_cases():
    w = Watcher(Encoder())
    dec = Decoder()
    loose = nn.Parameter(torch.zeros(7))
    scorer, frozen = Decoder(), Decoder()
    opt = first_step(w, dec, loose=[loose], eval_mod=scorer, nograd_mod=frozen)
    err = said(lambda: w.models.check_optimizer(opt))
    unwatched = w.rec.rows.get("unwatched")
    yield ("an optimizer that trains a second model names it and the loose tensors",
           unwatched == "Decoder (20 values), 5 tensors of no module called (47 values)",
           unwatched)
    yield ("said on stderr, with the way to record it",
           "also trains parameters outside the watched model (Encoder)" in err and
           "ampprobe run --torch find them" in err, err.strip())
    yield ("META optimizer and its eps", w.rec.rows.get("optimizer") == "Adam" and
           w.rec.rows.get("optimizer.eps") == "1e-08", w.rec.rows)
    again = said(lambda: w.models.check_optimizer(opt))
    yield ("an optimizer checked once", again == "" and w.rec.rows.get("unwatched") == unwatched,
           again)
    other = torch.optim.SGD(w.model.parameters(), lr=0.1)
    yield ("an optimizer of the model alone names nothing",
           said(lambda: w.models.check_optimizer(other)) == "" and
           w.rec.rows.get("unwatched") == unwatched, w.rec.rows.get("unwatched"))
    late = Decoder()
    late(torch.randn(2, 4))
    yield ("modules called after the first step are not looked at",
           all(m is not late for m, _ in w.models._others), len(w.models._others))

    # autoattach: the module found is recorded from the next step
    w = Watcher(Encoder())
    w.models.add_roots = True
    dec, dec2 = Decoder(), Decoder()
    compiled = Decoder()  # its fc compiled in place (module.compile(): its calls run compiled,
    compiled.fc._compiled_call_impl = compiled.fc.forward  # no hook of theirs on torch 2)
    opt = first_step(w, dec, dec2, compiled)
    err = said(lambda: w.models.check_optimizer(opt))
    added = w.rec.rows.get("added_models")
    yield ("the modules found recorded from step 1",
           added == "Decoder (20 values), Decoder (20 values) from step 1", added)
    names = [n for _, _, n in w.rec.layers]
    yield ("their layers named after their class, a second one's with #2",
           names[-4:] == ["Decoder", "Decoder.fc", "Decoder#2", "Decoder#2.fc"], names)
    yield ("their modules taken with the layers' prefix",
           w.taken == ["Decoder.", "Decoder.fc", "Decoder#2.", "Decoder#2.fc"], w.taken)
    yield ("their wrappers taken in their root layers",
           w.wrapped == [(dec, w.layer_of[id(dec)]), (dec2, w.layer_of[id(dec2)])],
           [(type(outer).__name__, layer) for outer, layer in w.wrapped])
    yield ("a compiled one cannot be: named unwatched",
           w.rec.rows.get("unwatched") == "Decoder (20 values)" and
           "recorded too from step 1" in err and "ampprobe run --torch" not in err,
           (w.rec.rows.get("unwatched"), err.strip()))
    yield ("the models recorded are the model and the two added",
           w.models.roots == [w.model, dec, dec2] and
           {id(p) for p in dec2.parameters()} <= w.models.own_params(), len(w.models.roots))
    seen = []
    dec.fc.register_forward_pre_hook(lambda m, args: seen.append(list(w.tape.layers)))
    dec(torch.randn(2, 4))
    want = [-1, w.layer_of[id(dec)], w.layer_of[id(dec.fc)]]
    yield ("an added model's modules push their layers as they run, and pop them",
           seen == [want] and w.tape.layers == [-1], (seen, w.tape.layers))


def join_cases():
    w = Watcher(Encoder())
    dec = Decoder()
    w.forwards = ["the step's forward"]  # a forward of step 0 has begun
    err = said(lambda: w.models.join(dec, optimizer="opt", settings={"stats_every": 5,
                                                                     "ops_every": None}))
    added = w.rec.rows.get("added_models")
    yield "a second watch() adds its model from the next step", \
        added == "Decoder (20 values) from step 1", added
    yield ("its settings that differ are said not to apply",
           "stats_every=5 not applied" in err and "ops_every" not in err.split("(")[0],
           err.strip().replace("\n", " / "))
    yield "its optimizer ends the steps (no scaler)", w.optimizer == "opt", w.optimizer
    before = dict(w.rec.rows)
    yield ("a model recorded already is not added again",
           w.models.join(dec) is w and said(lambda: w.models.join(w.model)) == "" and
           w.rec.rows == before, w.rec.rows.get("added_models"))
    compiled = Decoder()
    compiled._compiled_call_impl = compiled.forward
    err = said(lambda: w.models.join(compiled))
    yield ("a compiled model is not added", "runs compiled" in err and
           w.rec.rows.get("added_models") == added, err.strip())
    tied = Decoder()
    tied.shared = w.model.blocks[0].fc  # (a tied embedding)
    said(lambda: w.models.join(tied, name="Tied"))
    yield ("a module shared with the model stays the model's",
           "Tied.fc" in w.taken and "Tied.shared" not in w.taken, w.taken)


if __name__ == "__main__":
    torch_cases.run("cpu_models", list(wrapper_cases()) + list(beside_cases()) +
                    list(join_cases()))
