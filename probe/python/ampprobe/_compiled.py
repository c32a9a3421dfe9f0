"""_compiled.py — the torch-free pieces of watching a torch.compile'd model (torch.py).

  layer_name  a module's qualified name as its layer is named: torch.compile's wrapper of a
              submodule (what torch.compile(module) returned, put in the model) is the module
              itself, so "blocks.0._orig_mod.attn" is "blocks.0.attn".
  Around      callbacks run around the calls of a module compiled in place (module.compile()),
              whose own hooks would run inside the compiled code, traced.

No torch here: the CI tests run it with the system python3.
"""
import types


def layer_name(name):
    """name without torch.compile's "_orig_mod" steps."""
    return ".".join(p for p in name.split(".") if p != "_orig_mod")


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
