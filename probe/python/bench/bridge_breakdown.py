#!/usr/bin/env python3
"""bridge_breakdown.py — where the PyTorch bridge's step-time cost goes, on the bench workloads.

torch_overhead.py says how much the bridge costs; this says why. Per workload and precision it
runs, alternating in one process over ROUNDS rounds, the plain loop and the watched loop in
variants that each leave one part of the bridge out:

  plain     no ampprobe
  hooks     watched with statistics off for the measured steps (stats_every huge): module
            hooks, the loss tape, the end of the step, the records
  nokernel  watched, the statistics launches replaced by a Python function that returns 0
            (the bridge's host time without its kernels or their ctypes calls)
  noread    watched, the per-step read of the loss and found_inf left out
  atonce    watched, every module output read by a launch of its own as the module returns
            (not held and read with others by the end of the forward)
  full      watched as users run it
  opsteps   watched, every step an op step (AMP_OPS; by default one step in 1000 is)

and prints the median CUDA-event step time and the host time of a step (time spent in step(),
which in fp16 includes GradScaler's own wait for found_inf). With --profile it also prints the
host functions by own time (cProfile of the plain, hooks and full variants) and the GPU time of
all kernels and of the statistics kernels per step (plain and full; torch.profiler). With
--self-time it prints the host time the bridge's own entry points (hooks, the end of the step)
take per step in the full and hooks variants, timed one by one with perf_counter (not sampled:
what the loop waits for when it is host-bound), and among them the C calls (the statistics
module's CUDA work, libamprecord's records). --compile trains torch.compile(model) in every
variant.
Run it under `ampprobe run --trace amp`:

  ampprobe run --trace amp -o b.sqlite -- python3 probe/python/bench/bridge_breakdown.py --profile
"""
import cProfile
import gc
import io
import os
import pstats
import statistics
import sys
import time
import timeit
from array import array

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_overhead  # noqa: E402  (the workloads' loop, shared)

import ampprobe.torch as ap  # noqa: E402

VARIANTS = ("plain", "hooks", "nokernel", "noread", "atonce", "full", "opsteps")


def setup(name, mode, variant):
    """torch_overhead.setup() for one variant: (step(i), steps, watcher)."""
    if variant == "plain":
        return torch_overhead.setup(name, mode)
    return torch_overhead.setup(name, mode, dict(stats_every=10**9 if variant == "hooks" else 1,
                                                 ops_every=1 if variant == "opsteps" else 0),
                                PREPARE.get(variant))


def _no_kernels(w):
    w.stats.lib = _NoKernels(w.stats.lib)


def _no_read(w):
    w._marked = lambda found: (None, None, None, False, None)  # no loss, scale or found_inf read


def _at_once(w):
    w._watch = None
    w._at_once.update(w.layer_of.values())


PREPARE = {"nokernel": _no_kernels, "noread": _no_read, "atonce": _at_once}


class _NoKernels:
    """The statistics module with its launches turned into nothing (the slots' reset and the
    reads still work, so that the empty slots read as healthy)."""

    def __init__(self, lib):
        self._lib = lib

    def __getattr__(self, name):
        if name == "ampstats_many":
            return lambda *a: 0
        return getattr(self._lib, name)


def measure(name, mode, variant):
    event, _, host = torch_overhead.timed(*setup(name, mode, variant))
    return event, host


def profile(name, mode, variant):
    """cProfile of a variant's host time, then (full, plain) the kernels' GPU time."""
    step, steps, w = setup(name, mode, variant)
    prof = cProfile.Profile()
    prof.enable()
    for i in range(steps):
        step(i)
    torch.cuda.synchronize()
    prof.disable()
    out = io.StringIO()
    st = pstats.Stats(prof, stream=out)
    st.sort_stats("tottime").print_stats(24)
    print("## %s %s %s: host functions by own time over %d steps" % (name, mode, variant,
                                                                      steps))
    print("\n".join(out.getvalue().splitlines()[:40]))
    if variant not in ("full", "plain"):
        w.close()
        return
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as p:
        for i in range(10):
            step(i)
        torch.cuda.synchronize()
    if w is not None:
        w.close()
    ours, total, n_ours, n_all = 0.0, 0.0, 0, 0
    for e in p.key_averages():
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if e.key.startswith(("cuda", "Memcpy", "Memset")) or t <= 0:
            continue
        total += t
        n_all += e.count
        if "stats" in e.key or "gather" in e.key:
            ours += t
            n_ours += e.count
            print("   %-60s %5d x %8.1f us" % (e.key[:60], e.count // 10, t / e.count))
    print("## %s %s %s: GPU per step: statistics kernels %.3f ms in %d launches, all kernels "
          "%.3f ms in %d" % (name, mode, variant, ours / 10e3, n_ours // 10, total / 10e3,
                             n_all // 10), flush=True)


# the bridge's entry points: (class, method) and, for the grad pre-hooks, the factory
_ENTRIES = [("Watcher", "_on_output"), ("Watcher", "on_root_pre"), ("Watcher", "_on_root_post"),
            ("Watcher", "_on_backward"), ("Watcher", "_take_loss"),
            ("Watcher", "_queue_weight_grads"), ("Watcher", "_mark_ready"),
            ("Watcher", "_found_infs"), ("Watcher", "_ensure_marked"), ("Watcher", "end_step"),
            ("Watcher", "_queue"), ("Watcher", "_record"),
            ("LossTape", "__torch_function__"), ("StepStats", "flush"), ("StepStats", "defer"),
            ("StepStats", "finish"), ("StepStats", "put"), ("StepStats", "mark"),
            ("Watcher", "_marked"), ("Diagnoser", "emit"), ("Watcher", "_end_loss_region"),
            ("LossTape", "begin"), ("LossTape", "end"), ("Copy", "wait")]


class _TimedLib:
    """A ctypes library whose functions are timed (timed(key, fn) wraps each)."""

    def __init__(self, lib, prefix, timed):
        self._lib, self._prefix, self._timed, self._fns = lib, prefix, timed, {}

    def __getattr__(self, name):
        fn = self._fns.get(name)
        if fn is None:
            fn = self._fns[name] = self._timed(self._prefix + name, getattr(self._lib, name))
        return fn


def self_time(name, mode, variant="full"):
    """A variant (full, or hooks: the steps without statistics) with the bridge's entry points
    timed: per entry point, calls and host microseconds per step (nested calls are listed but
    counted once in the total)."""
    spent, calls, depth = {}, {}, [0]
    clock = time.perf_counter

    def timed(key, fn):
        def wrapper(*args, **kwargs):
            depth[0] += 1
            t = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                dt = clock() - t
                depth[0] -= 1
                spent[key] = spent.get(key, 0.0) + dt
                calls[key] = calls.get(key, 0) + 1
                if not depth[0]:
                    spent["total"] = spent.get("total", 0.0) + dt
        return wrapper

    def gc_timer(phase, info):  # the collector's runs, wherever they interrupt
        if phase == "start":
            depth.append(clock())
            return
        key = "(garbage collection, gen %d)" % info["generation"]
        spent[key] = spent.get(key, 0.0) + clock() - depth.pop()
        calls[key] = calls.get(key, 0) + 1

    saved = []
    homes = [m for m in (ap, getattr(ap, "_trace", None), getattr(ap, "_diagnose", None),
                         ap._devstats) if m is not None]  # (where the package's classes are)
    for cls, meth in _ENTRIES:
        c = next((vars(m)[cls] for m in homes if cls in vars(m)), None)
        if c is not None and meth in c.__dict__:  # (an older bridge may lack one)
            saved.append((c, meth, c.__dict__[meth]))
    factory = ap.Watcher._grad_hook  # the pre-hooks are made per module: time what it makes
    try:
        for c, meth, fn in saved:
            setattr(c, meth, timed("%s.%s" % (c.__name__, meth), fn))
        ap.Watcher._grad_hook = lambda self, *a: timed("grad pre-hook", factory(self, *a))
        step, steps, w = setup(name, mode, variant)
        # the C calls (CUDA work in the statistics module, records in libamprecord) timed too
        w.stats.lib = _TimedLib(w.stats.lib, "C stats.", timed)
        w.rec._lib = _TimedLib(w.rec._lib, "C record.", timed)
        spent.clear()
        calls.clear()
        gc.callbacks.append(gc_timer)
        t0 = time.perf_counter()
        for i in range(steps):
            step(i)
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / steps
        w.close()
        w.rec._lib = w.rec._lib._lib  # (the recorder may be shared with later watchers)
    finally:
        if gc_timer in gc.callbacks:
            gc.callbacks.remove(gc_timer)
        for c, meth, fn in saved:
            setattr(c, meth, fn)
        ap.Watcher._grad_hook = factory
    us = 1e6 / steps
    print("## %s %s %s: the bridge's host time per step (wall %.3f ms a step)" % (
        name, mode, variant, wall * 1e3))
    for key in sorted(spent, key=lambda k: -spent[k]):
        n = calls.get(key, steps)
        print("   %-34s %6.1f calls %8.1f us/call %8.1f us/step" % (
            key, n / steps, spent[key] * 1e6 / n, spent[key] * us), flush=True)


def host_costs(lib):
    """What a few host operations cost on this machine (microseconds): the scale for the
    figures above."""
    t = torch.ones(4096, device="cuda", requires_grad=True)
    y = t * 2
    f = (lambda: None)
    st = ap._devstats.StepStats(lib)
    xs = [torch.ones(1 << 20, device="cuda", dtype=torch.float16) for _ in range(32)]
    b = ap._vocab.DTYPES["f16"]

    st.defer(xs[0], "f16", b)  # a slot buffer for the bare launch below
    st.flush()
    one = [array("Q", [xs[0].data_ptr()]), array("q", [xs[0].numel()]), array("i", [1])]
    raw = torch.cuda.current_stream().cuda_stream

    def batch():  # 32 tensors queued, then launched together
        for x in xs:
            st.defer(x, "f16", b)
        st.flush()
        st.finish().release()

    items = [("python call", lambda: f()), ("perf_counter", time.perf_counter),
             ("tensor.dtype", lambda: t.dtype),
             ("tensor.data_ptr()", t.data_ptr), ("tensor.is_contiguous()", t.is_contiguous),
             ("ctypes call", lib.ampstats_slot_bytes),
             ("node.register_prehook", lambda: y.grad_fn.register_prehook(f)),
             ("torch add (launch)", lambda: t.detach().add(1)),
             ("32 x defer + flush + finish", batch),
             ("a statistics launch (C)", lambda: lib.ampstats_many(
                 1, *[a.buffer_info()[0] for a in one], 0, st._base, 1, raw, st._dev))]
    print("## host costs: " + ", ".join(
        "%s %.2f us" % (k, min(timeit.repeat(fn, number=200, repeat=5)) / 200 * 1e6)
        for k, fn in items), flush=True)
    print("## gc: thresholds %s, counts %s, tracked objects %d" % (
        gc.get_threshold(), gc.get_count(), len(gc.get_objects())), flush=True)


def main():
    p = torch_overhead.arg_parser(__doc__, rounds=3)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--self-time", action="store_true")
    a = torch_overhead.parse(p)
    print("# torch %s %s%s" % (torch.__version__, torch.cuda.get_device_name(),
                               ", compiled" if a.compile else ""), flush=True)
    if a.self_time:
        lib, why = ap._devstats.load_module(ap._records.Recorder().path)
        if lib is not None:
            host_costs(lib)
    for wl in a.workload or ["simplecnn", "gpt"]:
        for mode in a.mode or ["fp16", "bf16"]:
            if a.self_time:
                self_time(wl, mode)
                self_time(wl, mode, "hooks")
            if not a.rounds:
                continue
            got = {v: [] for v in VARIANTS}
            for _ in range(a.rounds):
                for v in VARIANTS:
                    got[v].append(measure(wl, mode, v))
            base = statistics.median(e for e, _ in got["plain"])
            for v in VARIANTS:
                e = statistics.median(x for x, _ in got[v])
                h = statistics.median(x for _, x in got[v])
                print("%-10s %-5s %-9s event %8.3f ms (%+6.1f%%)  host %8.3f ms"
                      % (wl, mode, v, e, 100 * (e / base - 1), h), flush=True)
            if a.profile:
                for v in ("plain", "hooks", "full"):
                    profile(wl, mode, v)


if __name__ == "__main__":
    main()
