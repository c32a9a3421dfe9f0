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
host functions by own time (cProfile of the hooks and full variants) and the GPU time of the
statistics kernels per step (torch.profiler). Run it under `ampprobe run --trace amp`:

  ampprobe run --trace amp -o b.sqlite -- python3 probe/python/bench/bridge_breakdown.py --profile
"""
import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys

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
    w.stats._one = lambda *a: 0
    w.stats.lib = _NoKernels(w.stats.lib)
    w.stats._alloc(torch.device("cuda", torch.cuda.current_device()), w.stats.cap)
    w.stats.scal.fill_(1.0)  # scalars that say "healthy": nothing gathers them now
    w.stats.scal[ap._S_FOUND:].zero_()


def _no_read(w):
    w._broke = lambda found: False


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
        if name in ("ampstats_one", "ampstats_many", "ampstats_gather"):
            return lambda *a: 0
        return getattr(self._lib, name)


def measure(name, mode, variant):
    event, _, host = torch_overhead.timed(*setup(name, mode, variant))
    return event, host


def profile(name, mode, variant):
    """cProfile of a variant's host time, then (full) the statistics kernels' GPU time."""
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
    if variant != "full":
        w.close()
        return
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as p:
        for i in range(10):
            step(i)
        torch.cuda.synchronize()
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
    print("## %s %s: GPU per step: statistics kernels %.3f ms in %d launches, all kernels "
          "%.3f ms in %d" % (name, mode, ours / 10e3, n_ours // 10, total / 10e3, n_all // 10),
          flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", action="append",
                   choices=sorted(torch_overhead.torch_baseline.WORKLOADS))
    p.add_argument("--mode", action="append", choices=["fp16", "bf16"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--profile", action="store_true")
    a = p.parse_args()
    print("# torch %s %s" % (torch.__version__, torch.cuda.get_device_name()), flush=True)
    for wl in a.workload or ["simplecnn", "gpt"]:
        for mode in a.mode or ["fp16", "bf16"]:
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
                profile(wl, mode, "hooks")
                profile(wl, mode, "full")


if __name__ == "__main__":
    main()
