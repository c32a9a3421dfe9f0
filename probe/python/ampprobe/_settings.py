"""_settings.py — the PyTorch bridge's settings: watch()'s arguments, checked before anything is
hooked (an error that names the one that is wrong), and the environment variables that stand for
them under `ampprobe run --torch` (AMPPROBE_STATS_EVERY, AMPPROBE_OPS_EVERY, AMPPROBE_CHECK_GRADS:
a bad value is said once on stderr and the default used).
"""
import os
import sys

import torch

_said = set()  # the environment variables whose bad values were said


def _bad(var, value, what, instead):
    """Says on stderr, once per variable, that var's value is not what it must be."""
    if var not in _said:
        _said.add(var)
        print("ampprobe: %s='%s' is not %s; %s" % (var, value, what, instead), file=sys.stderr,
              flush=True)


def env_steps(var, least, default):
    """An environment variable that counts steps (digits, least to 2147483647); unset or empty:
    default, and so is anything else, said once on stderr."""
    v = os.environ.get(var, "")
    if v and v.isascii() and v.isdigit() and least <= int(v) <= 2**31 - 1:
        return int(v)
    if v:
        _bad(var, v, "a number of steps from %d to 2147483647" % least, "using %d" % default)
    return default


def env_flag(var):
    """An environment variable that turns something on: 1, true, yes, on (any case); unset,
    empty, 0, false, no, off: off, and so is anything else, said once on stderr."""
    v = os.environ.get(var, "")
    if v.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if v.strip().lower() not in ("", "0", "false", "no", "off"):
        _bad(var, v, "1 or 0 (true/false, yes/no, on/off)", "off")
    return False


def check_watch_args(model, scaler, optimizer, stats_every, name, ops_every, check_grads):
    """watch()'s arguments, before anything is hooked: a TypeError or ValueError that names the
    one that is wrong."""
    def whole(x):
        return isinstance(x, int) and not isinstance(x, bool)

    if not isinstance(model, torch.nn.Module):
        raise TypeError("ampprobe.torch.watch: model must be a torch.nn.Module, not %s"
                        % type(model).__name__)
    if scaler is not None and not all(callable(getattr(scaler, a, None)) for a in (
            "scale", "unscale_", "step", "update", "is_enabled")):
        raise TypeError("ampprobe.torch.watch: scaler must be a torch.amp.GradScaler, not %s"
                        % type(scaler).__name__)
    if optimizer is not None and not (callable(getattr(optimizer, "register_step_pre_hook", None))
                                      and hasattr(optimizer, "param_groups")):
        raise TypeError("ampprobe.torch.watch: optimizer must be a torch.optim.Optimizer, not %s"
                        % type(optimizer).__name__)
    if stats_every is not None and not (whole(stats_every) and stats_every >= 1):
        raise ValueError("ampprobe.torch.watch: stats_every must be a whole number of steps, 1 "
                         "or more (got %r)" % (stats_every,))
    if ops_every is not None and not (whole(ops_every) and ops_every >= 0):
        raise ValueError("ampprobe.torch.watch: ops_every must be a whole number of steps, 0 "
                         "(no op steps) or more (got %r)" % (ops_every,))
    if name is not None and not (isinstance(name, str) and name):
        raise ValueError("ampprobe.torch.watch: name must be a non-empty string (got %r)"
                         % (name,))
    if check_grads is not None and not isinstance(check_grads, bool):
        raise TypeError("ampprobe.torch.watch: check_grads must be True or False (got %r)"
                        % (check_grads,))
