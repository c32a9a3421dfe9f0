#!/usr/bin/env python3
"""cpu_devstats.py — the bridge's step statistics (ampprobe/_devstats.py: StepStats) on the CPU,
where they take the eager path (torch reductions, no statistics module), with whatever torch is
installed (Debian's python3-torch 1.13 does). Prints a line per case and "cpu_devstats: all
passed"; exits 1 on a failure, 77 without torch.

  PYTHONPATH=probe/python python3 probe/python/tests/cpu_devstats.py

Cases: tensors queued with add_many() launch at once unless deferred; deferred ones (the
parameters as the bridge queues them once they keep their memory through a forward) wait for the
next flush(), are read as they are then, and keep their places among the step's figures, before
the module outputs deferred after them; a checked tensor (a module output) written to before its
read is listed in `modified`; the figures count against the target dtype (f16's overflow).
"""
import sys

try:
    import torch
except ImportError:
    print("cpu_devstats: no torch: skipped")
    sys.exit(77)

import torch_cases
from ampprobe import _devstats, _vocab

F16 = ("f16", _vocab.DTYPES["f16"])


def figures(st):
    figs, _ = st.finish().result()
    return [(f.numel, f.min, f.max, f.n_posinf, f.n_overflow) for f in figs]


def cases():
    """(name, passed, what was found) per case."""
    st = _devstats.StepStats(None)
    st.add_many([torch.tensor([1.0, -2.0])], *F16)
    got = (len(st.pending), len(st.eager))
    yield "add_many() reads at once (pending, read)", got == (0, 1), got
    got = figures(st)
    yield "its figures", got == [(2, -2.0, 1.0, 0, 0)], got

    st = _devstats.StepStats(None)
    w, b = torch.tensor([1.0, -2.0, 3.0]), torch.tensor([0.5, 7e4])
    st.add_many([w, b], *F16, defer=True)
    got = (len(st.pending), len(st.eager))
    yield "add_many(defer=True) waits for flush() (pending, read)", got == (2, 0), got
    out = torch.tensor([-1.0, float("inf")], dtype=torch.float16)
    st.defer(out, *F16, True, out.dtype, out.numel())
    w.mul_(2)  # before the read: the read sees it
    st.flush()
    got = figures(st)
    yield "deferred tensors read at flush(), in the order queued", \
        got == [(3, -4.0, 6.0, 0, 0), (2, 0.5, 7e4, 0, 1), (2, -1.0, -1.0, 1, 0)], got

    st = _devstats.StepStats(None)
    st.add_many([torch.ones(4)], *F16, defer=True)
    out = torch.zeros(4)
    h = st.defer(out, *F16, True, out.dtype, out.numel())
    out.add_(1)  # a module output written to in place before its read
    st.flush()
    yield "a checked output written to before its read is listed (its handle %d)" % h, \
        st.modified == [h], st.modified


if __name__ == "__main__":
    torch_cases.run("cpu_devstats", cases())
