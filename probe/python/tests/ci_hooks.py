#!/usr/bin/env python3
"""ci_hooks.py — the bridge's hooks in C (_ampprobe_hooks, probe/python/amphooks.c) without torch.

    PYTHONPATH=build/python python3 ci_hooks.py build/_ampprobe_hooks.abi3.so

Drives Hooks.on_output, Hooks.queue and the gradient pre-hooks with stand-ins for a tensor, an
autograd node, a module, the Watcher and its StepStats (the attributes ampprobe/torch.py's have,
as amphooks.c reads them) and checks what lands in the watcher's entries and the statistics'
pending lists, which cases go to the Python hooks, the flushes, the lock, errors, and that a
watcher and its hooks are collected. Exits 1 on the first failed check.
"""
import gc
import os
import sys
import weakref

os.environ.pop("AMPPROBE_PY_HOOKS", None)
os.environ["AMPPROBE_HOOKS_MODULE"] = sys.argv[1]
from ampprobe import _hot  # noqa: E402

ACT, GRAD = 1, 2  # the record kinds (any two ints)
BATCH, BATCH_BYTES = 4, 1000


class DType:
    def __init__(self, name):
        self.name = name


F16, F32, F64, I64, C64 = DType("f16"), DType("f32"), DType("f64"), DType("i64"), DType("c64")
DTYPES = {F16: ("f16", 1, 2), F32: ("f32", 0, 4), F64: ("f64", None, 8), I64: (None, None, 0)}


class Node:
    def __init__(self):
        self.hooks = []

    def register_prehook(self, hook):
        self.hooks.append(hook)
        return "handle"


class Tensor:
    def __init__(self, dtype=F16, n=10, requires_grad=True, leaf=False, output_nr=0, version=0):
        self.dtype, self.n, self.requires_grad = dtype, n, requires_grad
        self.grad_fn = None if leaf or not requires_grad else Node()
        self.output_nr, self._version = output_nr, version

    def numel(self):
        return self.n


class Module:
    training = True


class Lock:
    def __init__(self):
        self.held, self.acquired = False, 0

    def acquire(self):
        assert not self.held, "lock taken twice"
        self.held = True
        self.acquired += 1
        return True

    def release(self):
        assert self.held, "lock released while free"
        self.held = False


class Stats:
    """StepStats's attributes as defer() leaves them."""

    def __init__(self):
        self.order, self.pending, self._pending_handles = [], [], []
        self._pending_codes, self._pending_numels, self._pending_checks = [], [], []
        self._pending_bytes, self._pending_target = 0, "f16"
        self.flushes, self.fail = 0, False

    def flush(self):
        if self.fail:
            raise RuntimeError("flush failed")
        self.flushes += 1
        self.pending, self._pending_handles, self._pending_bytes = [], [], 0
        self._pending_codes, self._pending_numels, self._pending_checks = [], [], []


class Watcher:
    def __init__(self, mod):
        self.sampled, self.rerunning, self._watch = True, False, None
        self.entries, self._against = [], ("f16", (65504.0, 6e-8))
        self.stats, self.lock, self.grad_on = Stats(), Lock(), True
        self.info, self.at_once, self.python = {}, set(), []
        self.hot = mod.Hooks(self, self.stats, self.info, self.at_once, self.lock, DTYPES,
                             Tensor, lambda: self.grad_on, self.queue_py, self.output_py,
                             self.leaf_py, ACT, GRAD, BATCH, BATCH_BYTES)

    def add(self, module, layer, op):
        self.info[id(module)] = (layer, op, self.hot.grad_hook(layer, op, 0))

    def queue_py(self, kind, layer, op, t):
        self.python.append(("queue", kind, layer, op, t))

    def output_py(self, module, args, out):
        self.python.append(("output", module, out))

    def leaf_py(self, t, layer, op):
        self.python.append(("leaf", t, layer, op))


failed = []


def check(cond, what):
    print(("PASS " if cond else "FAIL ") + what)
    if not cond:
        failed.append(what)


def collected(mod):
    """Whether a watcher whose hooks were used is collected once its tensors are gone."""
    w = Watcher(mod)
    m = Module()
    w.add(m, 0, "linear")
    t = Tensor(output_nr=1)
    w.hot.on_output(m, (), t)
    ref = weakref.ref(w)
    del w, t
    gc.collect()
    return ref() is None


def main():
    mod, why = _hot.load(sys.argv[0])
    check(mod is not None, "the module loads (%s)" % why)
    if mod is None:
        sys.exit(1)
    w = Watcher(mod)
    m, m2 = Module(), Module()
    w.add(m, 3, "linear")
    w.add(m2, 4, "gelu")
    st = w.stats

    # a module output: its entry, queued checked (version noted), a pre-hook on its node
    t = Tensor(F16, 10, version=7)
    check(w.hot.on_output(m, (), t) is None, "on_output returns None")
    check(w.entries == [(3, ACT, "linear", "f16")], "output entry %r" % w.entries)
    check(st.pending == [t] and st._pending_handles == [0] and st.order == [None],
          "output pending, handle 0")
    check(st._pending_codes == [1] and st._pending_numels == [10], "code and numel")
    check(st._pending_checks == [(0, 0, 7)] and st._pending_bytes == 0,
          "output checked (index, handle, version), not counted in bytes")
    check(len(t.grad_fn.hooks) == 1 and t.grad_fn.hooks[0] is w.info[id(m)][2],
          "output 0's node gets the module's pre-hook")
    check(w.lock.acquired == 1 and not w.lock.held, "the lock taken once and released")

    # its gradient through the pre-hook: unchecked, counted in bytes
    g = Tensor(F16, 100)
    check(t.grad_fn.hooks[0]((g,)) is None, "a pre-hook returns None (gradients unchanged)")
    check(w.entries[-1] == (3, GRAD, "linear", "f16") and st.pending[-1] is g,
          "gradient entry and pending")
    check(st._pending_bytes == 200 and len(st._pending_checks) == 1,
          "gradient counted in bytes (100 x 2), not checked")
    t.grad_fn.hooks[0]((None,))
    check(len(w.entries) == 2, "a None gradient queues nothing")

    # an output with output_nr 1 gets a pre-hook of its own reading grads[1]
    t1 = Tensor(F32, 5, output_nr=1)
    w.hot.on_output(m2, (), t1)
    h1 = t1.grad_fn.hooks[0]
    check(h1 is not w.info[id(m2)][2] and type(h1).__name__ == "GradHook",
          "output 1 gets a GradHook of its own")
    g1 = Tensor(F32, 3)
    h1((None, g1))  # the fourth pending tensor: a batch launches
    check(st.flushes == 1 and st.pending == [] and st._pending_bytes == 0,
          "BATCH (%d) pending tensors flush" % BATCH)
    check(w.entries[-1] == (4, GRAD, "gelu", "f32") and st.order == [None] * 4,
          "output 1's gradient queued as grads[1]")

    # bytes: an unchecked gradient over BATCH_BYTES flushes at once
    w.hot.queue(GRAD, 4, "gelu", Tensor(F32, 300))
    check(st.flushes == 2, "BATCH_BYTES of gradients flush")

    # what queues nothing
    n = len(w.entries)
    w.hot.queue(ACT, 3, "linear", Tensor(I64, 10))
    w.hot.queue(ACT, 3, "linear", Tensor(F16, 0))
    check(len(w.entries) == n and not w.python, "integer and empty tensors queue nothing")
    for attr, value in (("sampled", False), ("rerunning", True)):
        setattr(w, attr, value)
        w.hot.on_output(m, (), Tensor())
        setattr(w, attr, not value)
        check(len(w.entries) == n, "nothing when %s is %s" % (attr, value))
    m.training = False
    w.hot.on_output(m, (), Tensor())
    m.training = True
    w.grad_on = False
    w.hot.on_output(m, (), Tensor())
    w.grad_on = True
    check(len(w.entries) == n, "nothing in eval mode or with grad disabled")
    nograd = Tensor(requires_grad=False)
    w.hot.on_output(m, (), nograd)
    check(len(w.entries) == n + 1 and nograd.grad_fn is None,
          "an output without grad: its statistics, no pre-hook")

    # what goes to the Python hooks
    before = len(w.entries)
    pair = (Tensor(), Tensor())
    w.hot.on_output(m, (), pair)
    check(w.python[-1] == ("output", m, pair), "a container output goes to Python's hook")
    stranger = Module()
    x = Tensor()
    w.hot.on_output(stranger, (), x)
    check(w.python[-1] == ("output", stranger, x), "a module unknown to the watcher: Python's")
    leaf = Tensor(leaf=True)
    w.hot.on_output(m, (), leaf)
    check(w.python[-1] == ("leaf", leaf, 3, "linear"), "a leaf output's gradient: Python's")
    y = Tensor(C64)
    w.hot.queue(ACT, 3, "linear", y)
    check(w.python[-1] == ("queue", ACT, 3, "linear", y), "a dtype not in the table: Python's")
    w._watch = []
    z = Tensor()
    w.hot.queue(ACT, 3, "linear", z)
    check(w.python[-1] == ("queue", ACT, 3, "linear", z), "the first sampled step: Python's")
    w._watch = None
    w.at_once.add(3)
    w.hot.queue(ACT, 3, "linear", z)
    check(len(w.python) == 6, "a layer read at once: Python's")
    w.hot.queue(GRAD, 3, "linear", z)
    check(len(w.python) == 6, "... but not its gradient")
    w.at_once.clear()
    w._against = ("bf16", (3e38, 1e-38))
    w.hot.queue(GRAD, 3, "linear", z)
    check(len(w.python) == 7, "a target other than the pending one: Python's")
    w._against = ("f16", (65504.0, 6e-8))
    check(len(w.entries) == before + 2, "the C path queued the leaf's output and one gradient")

    # errors: a failing flush propagates, the lock is released
    st.fail = True
    try:
        for _ in range(BATCH):
            w.hot.queue(GRAD, 3, "linear", Tensor())
        check(False, "a failing flush raises")
    except RuntimeError as e:
        check(str(e) == "flush failed" and not w.lock.held,
              "a failing flush raises, the lock released")
    st.fail = False
    try:
        w.hot.on_output(m, ())
        check(False, "a bad call raises")
    except TypeError:
        check(True, "on_output with two arguments raises TypeError")
    try:
        mod.Hooks(w)
        check(False, "Hooks() checks its arguments")
    except TypeError:
        check(True, "Hooks() with one argument raises TypeError")
    check(collected(mod), "a watcher and its hooks (cycles through the pre-hooks) are collected")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
