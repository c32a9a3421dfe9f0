"""_hot.py — loads _ampprobe_hooks, the bridge's per-module hooks in C (probe/python/amphooks.c;
no torch here).

The build leaves _ampprobe_hooks.abi3.so next to libamprecord.so (a CPython extension on the
stable ABI: one build for every CPython from 3.8 on). ampprobe/torch.py's Watcher uses it for
its forward hooks and gradient pre-hooks and falls back to its Python ones (the reference,
slower) without it or when AMPPROBE_PY_HOOKS is set.
"""
import importlib.util
import os

MODULE = "_ampprobe_hooks.abi3.so"
_loaded = {}  # path -> module (an extension module loads once per process)


def load(next_to):
    """The module from next_to's folder (or $AMPPROBE_HOOKS_MODULE), or (None, why)."""
    if os.environ.get("AMPPROBE_PY_HOOKS", "") not in ("", "0"):
        return None, "AMPPROBE_PY_HOOKS is set"
    path = os.environ.get("AMPPROBE_HOOKS_MODULE") or os.path.join(
        os.path.dirname(os.path.abspath(next_to)), MODULE)
    if path in _loaded:
        return _loaded[path], None
    if not os.path.isfile(path):
        return None, "%s not found (a build without Python's headers?)" % path
    try:
        spec = importlib.util.spec_from_file_location("_ampprobe_hooks", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    except (ImportError, OSError) as e:
        return None, "cannot load %s: %s" % (path, e)
    _loaded[path] = mod
    return mod, None
