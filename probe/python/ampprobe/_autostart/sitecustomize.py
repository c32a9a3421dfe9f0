"""sitecustomize.py — the startup module of `ampprobe run --torch` (its folder is put first on
PYTHONPATH, with the ampprobe package's folder after it).

Python imports it at startup. When the process records (AMPPROBE_SPOOL_DIR) it waits for the
program to import torch — an import hook, so a program that never does pays nothing and torch
is not imported early — and then calls ampprobe.torch.autoattach(), which watches the model that
trains (when it cannot, the reason goes to stderr and to META `bridge_error`, for the report);
and an uncaught exception is recorded before Python prints it (META `exception`, for the
report). The sitecustomize that this one shadows, if any, runs afterwards as before.
"""
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys


class _TorchImported(importlib.abc.MetaPathFinder):
    """Finds torch as usual and runs autoattach() once its module has executed."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_attach(module):
            exec_module(module)
            try:
                from ampprobe.torch import autoattach
                autoattach()
            except Exception as e:  # the program runs on, unrecorded by the bridge
                why = "%s: %s" % (type(e).__name__, e)
                print("ampprobe: the PyTorch bridge did not attach: " + why, file=sys.stderr,
                      flush=True)
                try:  # (META bridge_error: the report says why there are no numerics)
                    from ampprobe._records import record_meta
                    record_meta("bridge_error", why)
                except Exception:
                    pass

        spec.loader.exec_module = exec_then_attach
        return spec


def _run_shadowed():
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [d for d in sys.path if os.path.abspath(d or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


def _record_uncaught():
    """sys.excepthook records an uncaught exception too (META exception: what a failed run
    died of) before Python prints it; nothing is imported until one comes."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        try:
            from ampprobe._records import record_exception
            record_exception(kind, value)
        except Exception:  # (no library: the program's own traceback still comes)
            pass
        previous(kind, value, tb)

    sys.excepthook = hook


if os.environ.get("AMPPROBE_SPOOL_DIR") or os.environ.get("AMPPROBE_OUT"):
    sys.meta_path.insert(0, _TorchImported())
    _record_uncaught()
_run_shadowed()
