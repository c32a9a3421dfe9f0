"""_compiled.py — the torch-free pieces of watching a compiled or wrapped model (torch.py).

  layer_name  a module's qualified name as its layer is named: a wrapper of a submodule is
              the module itself, so "blocks.0._orig_mod.attn" (torch.compile's wrapper, what
              torch.compile(module) returned, put in the model) is "blocks.0.attn", and so is
              "blocks.0._fsdp_wrapped_module._checkpoint_wrapped_module.attn" (FSDP1's
              FullyShardedDataParallel, then the activation-checkpoint wrapper).
  WRAPPED     the names of the modules those wrappers hold.
  Around      callbacks run around the calls of a module compiled in place (module.compile()),
              whose own hooks would run inside the compiled code, traced.

No torch here: the CI tests run it with the system python3.
"""
import types


WRAPPED = ("_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module")


def layer_name(name):
    """name without the wrappers' steps (WRAPPED)."""
    return ".".join(p for p in name.split(".") if p not in WRAPPED)


class Around:
    """A module compiled in place: its calls (module._compiled_call_impl) with callbacks run
    eagerly around them, pre(args, kwargs) before and post(args, output) after. around(m)
    puts one in place (once: later calls add to the same lists)."""

    def __init__(self, compiled):
        self.compiled = compiled
        self.pre, self.post = [], []

    def __call__(self, *args, **kwargs):
        for f in tuple(self.pre):  # (a callback may remove itself)
            f(args, kwargs)
        out = self.compiled(*args, **kwargs)
        for f in tuple(self.post):
            f(args, out)
        return out

    @staticmethod
    def around(m):
        a = m._compiled_call_impl
        if not isinstance(a, Around):
            a = m._compiled_call_impl = Around(a)
        return a

    @staticmethod
    def hook(callbacks, f):
        """f added to callbacks (an Around's pre or post); returns a handle whose remove() takes
        it out (again: nothing)."""
        callbacks.append(f)
        return types.SimpleNamespace(remove=lambda: f in callbacks and callbacks.remove(f))
