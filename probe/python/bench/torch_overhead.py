#!/usr/bin/env python3
"""torch_overhead.py — step-time cost of the PyTorch bridge on the bench workloads.

Runs probe/bench/torch_baseline.py's workloads (same models, shapes, batch, Adam, GradScaler)
plainly and with `ampprobe.torch.watch(model, scaler=..., optimizer=..., stats_every=N)`,
alternating in one process (ROUNDS rounds, default 5, each run 10 warm-up steps then the workload's
steps), and prints per run the median CUDA-event step time and the wall-clock time per step (the
latter counts the one host copy per step that the bridge adds, and the host time of its hooks), then
the overhead of the medians over the rounds. N is 1 (statistics every step) unless --stats-every
says otherwise; given more than once, each N is a watched run of its own in every round (what
sampling the statistics saves on a host-bound loop). With --interleave the plain and the watched
model train side by side in each round, a step of each in turn, which weighs the machine's ups and
downs on both alike (the separate runs differ by more than what is measured from one minute to the
next); the times are then each model's steps' alone (the wall-clock time the host spends in them,
its waits for the GPU included); it takes one --stats-every, as a second watched model in one
process joins the first one's watcher and its settings. Run it under `ampprobe run --trace amp`
so that the watched runs record (watch() attaches nothing otherwise):

  ampprobe run --trace amp -o bench.sqlite -- python3 probe/python/bench/torch_overhead.py

--compile trains each model through torch.compile(model) (compiled in the warm-up steps),
watched and plain alike.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import torch_baseline  # noqa: E402  (probe/bench/torch_baseline.py)

import ampprobe.torch as ap  # noqa: E402


COMPILE = False  # --compile: torch.compile(model) is what trains


def setup(name, mode, watch=None, prepare=None, model_hook=None):
    """Workload name's model, Adam, loss and GradScaler (torch_baseline.py's), the model watched
    with ap.watch(**watch) (None: plain; the scaler only in fp16, as torch_baseline enables it)
    and prepare(watcher) applied, or model_hook(model) called, then 10 warm-up steps. Returns
    (step(i), steps, watcher); step.phases lists each step's host seconds in the forward, in
    the loss and backward, and in the optimizer and scaler."""
    torch.manual_seed(0)
    cls, X, Y, steps = torch_baseline.WORKLOADS[name]
    model = cls().cuda()
    if model_hook is not None:
        model_hook(model)
    if COMPILE:
        model = torch.compile(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    crit = nn.CrossEntropyLoss()
    dtype = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}[mode]
    scaler = torch.amp.GradScaler("cuda", enabled=(mode == "fp16"))
    w = None
    if watch is not None:
        w = ap.watch(model, scaler=scaler if mode == "fp16" else None, optimizer=opt, **watch)
        if not w.on:
            sys.exit("%s: not recording: run it under `ampprobe run`" %
                     os.path.basename(sys.argv[0]))
        if prepare is not None:
            prepare(w)
    xs, ys = [X() for _ in range(4)], [Y() for _ in range(4)]
    clock = time.perf_counter
    phases = []  # per step: host seconds in the forward, the loss and backward, the optimizer

    def step(i):
        t0 = clock()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
            out = model(xs[i % 4])
        t1 = clock()
        loss = crit(out.float(), ys[i % 4])
        scaler.scale(loss).backward()
        t2 = clock()
        scaler.step(opt)
        scaler.update()
        phases.append((t1 - t0, t2 - t1, clock() - t2))
        return loss
    step.phases = phases

    for i in range(10):
        step(i)
    torch.cuda.synchronize()
    phases.clear()
    return step, steps, w


def timed(step, steps, w):
    """Runs steps steps and closes the watcher: the median CUDA-event step time, the wall-clock
    time per step and the median host time in step() (ms)."""
    ev, host = [], []
    t0 = time.perf_counter()
    for i in range(steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        h = time.perf_counter()
        step(i)
        host.append(time.perf_counter() - h)
        b.record()
        ev.append((a, b))
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) * 1e3 / steps
    if w is not None:
        w.close()
    return (statistics.median(a.elapsed_time(b) for a, b in ev), wall,
            statistics.median(host) * 1e3)


def arg_parser(doc, rounds, compile=True):
    """The benchmarks' shared options: --workload, --mode (fp16, bf16), --rounds and with
    compile --compile (parse() sets COMPILE)."""
    p = argparse.ArgumentParser(description=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", action="append", choices=sorted(torch_baseline.WORKLOADS))
    p.add_argument("--mode", action="append", choices=["fp16", "bf16"])
    p.add_argument("--rounds", type=int, default=rounds)
    if compile:
        p.add_argument("--compile", action="store_true", help="train torch.compile(model)")
    return p


def parse(p):
    global COMPILE
    a = p.parse_args()
    COMPILE = getattr(a, "compile", False)
    return a


def run(name, mode, every):
    """One run: plain (every 0) or watched with stats_every=every."""
    event, wall, _ = timed(*setup(name, mode, dict(stats_every=every) if every else None))
    return dict(workload=name, mode=mode, watched=bool(every), stats_every=every,
                event_ms=event, wall_ms=wall)


def interleaved(name, mode, everies):
    """The plain run and a watched one per N in everies side by side, a step of each in turn
    (what the machine does that minute weighs on all alike): a dict like run()'s per variant,
    the median of its steps' CUDA-event times and the mean wall-clock time of its steps (the
    host's time in them, the waits for the GPU included)."""
    variants = [0] + everies
    made = [setup(name, mode, dict(stats_every=n) if n else None) for n in variants]
    steps = made[0][1]
    ev, wall = [[] for _ in made], [0.0] * len(made)
    clock = time.perf_counter
    for i in range(steps):
        for k, (step, _, _) in enumerate(made):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t = clock()
            a.record()
            step(i)
            b.record()
            wall[k] += clock() - t
            ev[k].append((a, b))
    torch.cuda.synchronize()
    for _, _, w in made[1:]:
        w.close()
    return [dict(workload=name, mode=mode, watched=bool(n), stats_every=n,
                 wall_ms=wall[k] * 1e3 / steps,
                 event_ms=statistics.median(a.elapsed_time(b) for a, b in ev[k]))
            for k, n in enumerate(variants)]


def main():
    ap_ = argparse.ArgumentParser(description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    ap_.add_argument("--workload", action="append", choices=sorted(torch_baseline.WORKLOADS))
    ap_.add_argument("--mode", action="append", choices=["fp32", "fp16", "bf16"])
    ap_.add_argument("--rounds", type=int, default=5)
    ap_.add_argument("--compile", action="store_true", help="train torch.compile(model)")
    ap_.add_argument("--interleave", action="store_true",
                     help="train the plain and the watched model side by side, a step of each "
                          "in turn (wall_ms is then the host's time in a model's steps)")
    ap_.add_argument("--stats-every", type=int, action="append", metavar="N",
                     help="the watched runs' stats_every (default 1); again for another "
                          "watched run per round")
    a = parse(ap_)
    everies = a.stats_every or [1]
    bad = [n for n in everies if n < 1]
    if bad:
        ap_.error("--stats-every: %d: expected a positive number of steps" % bad[0])
    if a.interleave and len(everies) > 1:  # (a second watch() in one process joins the first
        # watcher, whose settings hold for both: its runs would not be sampled as asked)
        ap_.error("--interleave takes one --stats-every (got %s): the watched models of one "
                  "process share the first one's settings" % ", ".join(map(str, everies)))
    print("# torch %s %s, statistics module %s%s" % (
        torch.__version__, torch.cuda.get_device_name(),
        os.environ.get("AMPPROBE_STATS_MODULE") or "of the build",
        ", compiled" if a.compile else ""), flush=True)
    rows = []
    for wl in a.workload or ["simplecnn", "mlp", "gpt"]:
        for mode in a.mode or ["fp16", "bf16"]:
            for r in range(a.rounds):
                for row in (interleaved(wl, mode, everies) if a.interleave else
                            (run(wl, mode, n) for n in [0] + everies)):
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    several = len(everies) > 1  # (then a column says which N a row's watched runs used)
    print("%-10s %-5s %s%12s %12s %9s %12s %12s %9s" % (
        "workload", "mode", "%6s " % "every" if several else "", "event_ms", "+ap", "overhead",
        "wall_ms", "+ap", "overhead"))
    for wl in a.workload or ["simplecnn", "mlp", "gpt"]:
        for mode in a.mode or ["fp16", "bf16"]:
            def med(key, every):
                return statistics.median(r[key] for r in rows if r["workload"] == wl
                                         and r["mode"] == mode and r["stats_every"] == every)
            e0, w0 = med("event_ms", 0), med("wall_ms", 0)
            for n in everies:
                e1, w1 = med("event_ms", n), med("wall_ms", n)
                print("%-10s %-5s %s%12.3f %12.3f %8.1f%% %12.3f %12.3f %8.1f%%"
                      % (wl, mode, "%6d " % n if several else "", e0, e1, 100 * (e1 / e0 - 1),
                         w0, w1, 100 * (w1 / w0 - 1)), flush=True)


if __name__ == "__main__":
    main()
