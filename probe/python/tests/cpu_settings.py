#!/usr/bin/env python3
"""cpu_settings.py — the PyTorch bridge's settings (ampprobe/_settings.py) on the CPU with
whatever torch is installed (Debian's python3-torch 1.13 does). Prints a line per case and
"cpu_settings: all passed"; exits 1 on a failure, 77 without torch.

  PYTHONPATH=probe/python python3 probe/python/tests/cpu_settings.py

Cases. The environment variables that stand for watch()'s arguments under `ampprobe run --torch`:
a count of steps is taken from digits within its range, and anything else (unset, empty, below
the least, beyond 2147483647, a sign, a fraction, letters, non-ASCII digits) gives the default,
a bad value said once per variable on stderr with the range; a flag is on for 1/true/yes/on in
any case, off for unset/empty/0/false/no/off, and off with a line on stderr for anything else.
watch()'s arguments: the values it takes pass (None for each, a GradScaler and an optimizer
known by their methods), and each bad one raises the error that names it (a bool is no count of
steps, an int no flag). (cpu_faults.py --fault api checks the same errors through watch() on a
torch the bridge runs with.)
"""
import contextlib
import io
import os
import sys

try:
    import torch
except ImportError:
    print("cpu_settings: no torch: skipped")
    sys.exit(77)

import torch_cases
from ampprobe import _settings


def with_env(var, value, f):
    """f() with var set to value (None: unset), and what it printed on stderr."""
    old = os.environ.pop(var, None)
    if value is not None:
        os.environ[var] = value
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            got = f()
    finally:
        os.environ.pop(var, None)
        if old is not None:
            os.environ[var] = old
    return got, err.getvalue()


def env_cases():
    for value, want in (("7", 7), ("1", 1), ("2147483647", 2147483647), (None, 5), ("", 5)):
        got, err = with_env("AMPPROBE_TEST_STEPS", value,
                            lambda: _settings.env_steps("AMPPROBE_TEST_STEPS", 1, 5))
        yield "steps %r -> %r" % (value, want), got == want and err == "", (got, err)
    said = []
    for value in ("0", "2147483648", "+3", "-1", "2.5", "ten", "\u0663", " 4"):
        var = "AMPPROBE_TEST_BAD%d" % len(said)
        got, err = with_env(var, value, lambda: _settings.env_steps(var, 1, 5))
        said.append(err)
        yield ("steps %r: the default, said" % value,
               got == 5 and err == "ampprobe: %s='%s' is not a number of steps from 1 to "
               "2147483647; using 5\n" % (var, value), (got, err))
    got, err = with_env("AMPPROBE_TEST_BAD0", "0",
                        lambda: _settings.env_steps("AMPPROBE_TEST_BAD0", 1, 5))
    yield "a bad value said once per variable", got == 5 and err == "", (got, err)
    got, err = with_env("AMPPROBE_TEST_OPS", "0",
                        lambda: _settings.env_steps("AMPPROBE_TEST_OPS", 0, 1000))
    yield "0 where 0 is the least", got == 0 and err == "", (got, err)

    for value in ("1", "true", "YES", " On "):
        got, err = with_env("AMPPROBE_TEST_FLAG", value,
                            lambda: _settings.env_flag("AMPPROBE_TEST_FLAG"))
        yield "flag %r on" % value, got is True and err == "", (got, err)
    for value in (None, "", "0", "False", "no", "OFF"):
        got, err = with_env("AMPPROBE_TEST_FLAG", value,
                            lambda: _settings.env_flag("AMPPROBE_TEST_FLAG"))
        yield "flag %r off" % value, got is False and err == "", (got, err)
    got, err = with_env("AMPPROBE_TEST_FLAG2", "2",
                        lambda: _settings.env_flag("AMPPROBE_TEST_FLAG2"))
    yield ("flag '2': off, said", got is False and err == "ampprobe: AMPPROBE_TEST_FLAG2='2' is "
           "not 1 or 0 (true/false, yes/no, on/off); off\n", (got, err))


class Scaler:
    """Has what watch() looks for in a GradScaler."""

    def scale(self, x):
        return x

    unscale_ = step = update = scale

    def is_enabled(self):
        return True


class Optimizer:
    """Has what watch() looks for in an optimizer (torch 2's step hooks, its parameter groups)."""

    param_groups = []

    def register_step_pre_hook(self, hook):
        return None


def raised(**kwargs):
    """The error check_watch_args raises for kwargs (beside a model), or None."""
    args = dict(model=torch.nn.Linear(2, 2), scaler=None, optimizer=None, stats_every=None,
                name=None, ops_every=None, check_grads=None)
    args.update(kwargs)
    try:
        _settings.check_watch_args(**args)
    except (TypeError, ValueError) as e:
        return e
    return None


def shown(kwargs):
    """kwargs as a case's name: a value's repr, an object's type."""
    return ", ".join("%s=%s" % (k, repr(v) if isinstance(v, (int, float, str)) else
                                type(v).__name__) for k, v in sorted(kwargs.items()))


def argument_cases():
    for kwargs in ({}, {"scaler": Scaler(), "optimizer": Optimizer()}, {"stats_every": 1},
                   {"stats_every": 100}, {"ops_every": 0}, {"name": "Net"},
                   {"check_grads": False}, {"check_grads": True}):
        e = raised(**kwargs)
        yield "takes %s" % (shown(kwargs) or "the defaults"), e is None, e
    for kwargs, kind, words in (
            ({"model": "model"}, TypeError, "model must be a torch.nn.Module, not str"),
            ({"scaler": torch.nn.Linear(2, 2)}, TypeError,
             "scaler must be a torch.amp.GradScaler, not Linear"),
            ({"optimizer": Scaler()}, TypeError,
             "optimizer must be a torch.optim.Optimizer, not Scaler"),
            ({"stats_every": 0}, ValueError, "stats_every must be a whole number of steps, 1 "
             "or more (got 0)"),
            ({"stats_every": True}, ValueError, "stats_every must be a whole number"),
            ({"stats_every": 2.0}, ValueError, "(got 2.0)"),
            ({"ops_every": -1}, ValueError, "ops_every must be a whole number of steps, 0 (no "
             "op steps) or more (got -1)"),
            ({"name": ""}, ValueError, "name must be a non-empty string (got '')"),
            ({"check_grads": 1}, TypeError, "check_grads must be True or False (got 1)")):
        e = raised(**kwargs)
        yield ("refuses %s, naming it" % shown(kwargs), type(e) is kind and
               str(e).startswith("ampprobe.torch.watch: ") and words in str(e), repr(e))


if __name__ == "__main__":
    torch_cases.run("cpu_settings", list(env_cases()) + list(argument_cases()))
