#!/usr/bin/env python3
"""gpu_devstats.py — the bridge's device statistics (libampstats_cuda.so through _devstats.py)
against eager torch reductions, on the GPU machine; then, with --bench, their throughput.

  PYTHONPATH=DIST/python python3 gpu_devstats.py DIST/libamprecord.so [--bench]

Checks f32, f16 and bf16 tensors of many lengths (empty tail, one vector, many blocks), aligned and
not (a view one element in), with NaN, ±inf, values beyond f16's range, subnormals and zeros, one
tensor per launch, many per launch and deferred ones (launched together later), relative to f16,
bf16 and f32 targets, across a buffer that has to grow, and deferred tensors written to before
their launch (`modified`), nonfinite_count() (NaN and inf of add_many's tensors summed on the GPU),
waits for figures that arrive late (an error, not a hang, for a flag no kernel will raise), a
tensor queued twice in a batch read once, and close() giving back its mapped memory; prints
PASS/FAIL lines and exits 1 on a failure. --bench prints the kernel's read bandwidth on large
tensors next to torch's own amax over the same memory.
"""
import math
import sys
import time

import torch

from ampprobe import _devstats, _vocab


def expect(t, target):
    fmax, tiny = _vocab.DTYPES[target]
    if target == "f32":
        fmax, tiny = math.inf, 0.0
    e = _devstats.eager_stats(t, fmax, tiny).tolist()
    return _devstats.Figures(e[8], e[0], e[1], *e[2:8], e[9])


def same(a, b):
    def close(x, y, rel):
        if x is None or y is None:
            return x is None and y is None
        return abs(x - y) <= rel * max(abs(x), abs(y), 1e-30)
    ints = ("numel", "n_nan", "n_posinf", "n_neginf", "n_overflow", "n_underflow", "n_zero")
    return (all(getattr(a, k) == getattr(b, k) for k in ints) and close(a.min, b.min, 0)
            and close(a.max, b.max, 0) and close(a.amax, b.amax, 0)
            and close(a.sumsq, b.sumsq, 1e-4))


def tensors(gen):
    out = []
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for n in (1, 7, 8, 9, 4095, 4096, 65537, 3 * 2 ** 20 + 5):
            x = torch.randn(n + 1, generator=gen, device="cuda").mul_(3).to(dtype)
            if n > 100:
                x[5] = float("nan")
                x[17] = float("inf")
                x[n // 2] = float("-inf")
                x[n // 3] = 0
                x[n // 4] = 1e-6 if dtype != torch.bfloat16 else 1e-39
                if dtype != torch.float16:
                    x[n // 5] = 7e4
            out.append(x[:n])       # aligned
            out.append(x[1:n + 1])  # one element in: the unvectorised path
    out.append(torch.full((3000,), float("nan"), device="cuda", dtype=torch.float16))
    out.append(torch.zeros(5000, device="cuda", dtype=torch.bfloat16))
    # the batch's other ways: a transposed view (a dense copy is read), a dtype the kernel does
    # not read and a tensor off the GPU (both eager)
    out.append(torch.randn(64, 48, generator=gen, device="cuda").mul_(3).half().t())
    out.append(torch.randn(100, generator=gen, device="cuda", dtype=torch.float64))
    out.append(torch.arange(-50, 50, dtype=torch.float32))
    return out


def check(lib):
    gen = torch.Generator(device="cuda").manual_seed(1)
    ts = tensors(gen)
    fail = 0
    scalar_values = [2.5, -0.75, 65504.0, 3.0, -1.0, 1e300]
    scalars = [torch.tensor(v, device="cuda", dtype=d) for v, d in zip(
        scalar_values, (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64,
                        torch.float64))]
    st = _devstats.StepStats(lib)
    st.mark(scalars)
    scalars[0].add_(1.0)  # after the mark in stream order: not seen
    got = st.marked()
    scalars[0].sub_(1.0)
    st.mark([torch.tensor(7.0), scalars[3]])  # one off the GPU: torch reads them
    cpu = st.marked()
    ok = got == scalar_values and cpu == [7.0, 3.0] and st.marked() is None
    print("%s devstats mark/marked: %s, %s" % ("PASS" if ok else "FAIL", got, cpu))
    fail |= not ok
    fail |= check_waits(lib, st, scalars, scalar_values)
    for target in ("f16", "bf16", "f32"):
        st = _devstats.StepStats(lib, capacity=4)  # grows while the step runs
        bounds = _vocab.DTYPES[target]
        def queue():  # each tensor at once, then deferred (one launch with add_many), then
            for k, t in enumerate(ts):  # deferred until finish()
                st.add(t, target, bounds, defer=k % 2 == 1)
            st.add_many(ts, target, bounds)
            for t in ts[:3]:
                st.add(t, target, bounds, defer=True)

        queue()
        for rnd in range(2):  # the slots come back emptied for the next step
            st.put(0, scalars)
            st.put(len(scalars), [torch.tensor(7.0)])  # off the GPU: torch's copy
            copy = st.finish(len(scalars) + 1)  # round 1 reuses round 0's pinned buffer
            got, extra = copy.result()
            copy.release()
            want = [expect(t, target) for t in ts + ts + ts[:3]]
            bad = [i for i, (g, w) in enumerate(zip(got, want)) if not same(g, w)]
            ok = not bad and len(got) == len(want) and extra == scalar_values + [7.0]
            print("%s devstats target=%s round %d: %d tensors%s" % (
                "PASS" if ok else "FAIL", target, rnd, len(got),
                "" if ok else " mismatch at %s: got %s want %s" % (
                    bad[:3], vars_of(got[bad[0]]) if bad else "-",
                    vars_of(want[bad[0]]) if bad else "-")))
            fail |= not ok
            queue()
    fail |= check_versions(lib)
    fail |= check_twins(lib)
    fail |= check_nonfinite_count(lib, ts)
    fail |= check_close(lib, scalars)
    return fail


def check_waits(lib, st, scalars, values):
    """marked() and a Copy wait for a kernel queued behind 50 ms of GPU work (their flag is
    raised late), and a flag that no kernel will raise is an error, not a hang."""
    torch.cuda._sleep(100_000_000)  # about 50 ms on an H200
    st.mark(scalars[:3])
    late = st.marked()
    x = torch.ones(4096, device="cuda", dtype=torch.float16)
    torch.cuda._sleep(100_000_000)
    st.add(x, "f16", _vocab.DTYPES["f16"])
    copy = st.finish(scalars=scalars[:1])
    figs, extras = copy.result()
    copy.release()
    buf = st._mapped(4096)
    torch.cuda.synchronize()
    t = time.perf_counter()
    rc = lib.ampstats_poll(buf[0], st._seq + 1, torch.cuda.current_stream().cuda_stream,
                           torch.cuda.current_device())
    lib.ampstats_host_free(buf[0])
    ok = (late == values[:3] and extras == values[:1] and figs[0].numel == 4096
          and rc != 0 and time.perf_counter() - t < 1.0)
    print("%s devstats waits: marked %s, figures of %d values, %s, a flag never raised: %s" % (
        "PASS" if ok else "FAIL", late, figs[0].numel if figs else 0, extras,
        lib.ampstats_error(rc).decode()))
    return not ok


def check_twins(lib):
    """A tensor queued twice in one batch (itself, and a view of all of it) is read once and
    both get its figures; a view of part of it from the same address is read on its own."""
    gen = torch.Generator(device="cuda").manual_seed(2)
    x = torch.randn(4096, generator=gen, device="cuda").mul_(3e4).half()
    y = torch.randn(1000, generator=gen, device="cuda")
    st = _devstats.StepStats(lib)
    bounds = _vocab.DTYPES["f16"]
    for t in (x, y, x.view(64, 64), x[:1000], x):
        st.defer(t, "f16", bounds)
    st.flush()
    twins = list(st._twins)
    got, _ = st.read()
    want = [expect(t, "f16") for t in (x, y, x, x[:1000], x)]
    ok = twins == [(2, 0), (4, 0)] and all(same(g, w) for g, w in zip(got, want)) and \
        len(got) == 5 and st._twins == []
    print("%s devstats twins: %s read once, %d figures as torch's" % (
        "PASS" if ok else "FAIL", twins, sum(same(g, w) for g, w in zip(got, want))))
    return not ok


def check_nonfinite_count(lib, ts):
    """nonfinite_count() over add_many's slots (parameter gradients without a GradScaler):
    their NaN and +-inf summed on the GPU; None when some went the eager way."""
    dense = [t for t in ts if t.is_cuda and t.is_contiguous() and
             t.dtype in (torch.float32, torch.float16, torch.bfloat16)]
    st = _devstats.StepStats(lib)
    st.add(ts[0], "f16", _vocab.DTYPES["f16"])  # (a slot before them)
    first = len(st.order)
    st.add_many(dense, "f16", _vocab.DTYPES["f16"])
    got = st.nonfinite_count(range(first, first + len(dense)))
    got = None if got is None else int(got)
    want = sum(int((~torch.isfinite(t)).sum()) for t in dense)
    first = len(st.order)
    st.add_many(ts, "f16", _vocab.DTYPES["f16"])  # a float64 and a CPU tensor among them
    mixed = st.nonfinite_count(range(first, first + len(ts)))
    st.read()
    ok = got == want and want > 0 and mixed is None
    print("%s devstats nonfinite_count: %s of %d tensors (torch: %d), with eager ones: %s" % (
        "PASS" if ok else "FAIL", got, len(dense), want, mixed))
    return not ok


def check_close(lib, scalars):
    """close() gives back the mapped memory, a mark still in flight included, and a Copy
    released after it frees its own; many watchers' worth do not pile up."""
    bounds = _vocab.DTYPES["f16"]
    x = torch.ones(4096, device="cuda", dtype=torch.float16)
    ok = True
    for _ in range(200):
        st = _devstats.StepStats(lib)
        st.add(x, "f16", bounds)
        st.finish().release()  # into the pool
        st.add(x, "f16", bounds)
        late = st.finish()
        st.mark(scalars[:2])  # not read before close()
        st.close()
        got, _ = late.result()
        late.release()
        ok &= (st._pool == [] and st._mark_buf is None
               and got[0].numel == 4096 and got[0].max == 1.0)
    free, total = torch.cuda.mem_get_info()
    print("%s devstats close: 200 StepStats opened and closed (%.0f MiB of %.0f free)" % (
        "PASS" if ok else "FAIL", free / 2**20, total / 2**20))
    return not ok


def check_versions(lib):
    """Deferred tensors with check=True: one written to in place before the launch is listed
    in `modified` (and its figures are of the new values), the others are not."""
    st = _devstats.StepStats(lib)
    bounds = _vocab.DTYPES["f16"]
    a, b, c = (torch.full((1000,), v, device="cuda", dtype=torch.float16) for v in (1, -2, 3))
    handles = [st.add(a, "f16", bounds, defer=True, check=True),
               st.add(b, "f16", bounds, defer=True, check=True),
               st.add(c, "f16", bounds, defer=True)]  # not checked: not listed
    b.mul_(0.5)
    c.mul_(0.5)
    st.flush()
    got, _ = st.read()
    ok = (st.modified == [handles[1]] and handles == [0, 1, 2] and got[1].min == -1.0
          and got[0].min == 1.0)
    print("%s devstats version checks: modified %s of handles %s, minima %s" % (
        "PASS" if ok else "FAIL", st.modified, handles, [f.min for f in got]))
    return not ok


def vars_of(f):
    return {k: getattr(f, k) for k in f.__slots__}


def bench(lib):
    """Read bandwidth of the statistics kernel and of torch's amax on tensors of a transformer
    step's sizes and on large ones: GPU time only (the calls are captured in a CUDA graph and
    replayed, so host launch costs do not count), each size cycling through enough tensors
    (512 MiB) that the L2 cache holds none of them from one call to the next."""
    print("%-6s %10s %14s %14s" % ("dtype", "MiB", "stats GB/s", "amax GB/s"))
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for mib in (12, 24, 48, 256):
            n = mib * 2 ** 20 // torch.finfo(dtype).bits * 8
            xs = [torch.randn(n, device="cuda").to(dtype) for _ in range(max(2, 512 // mib))]
            reps = 4 * len(xs)
            st = _devstats.StepStats(lib, capacity=reps + 1)

            def timed(fn):
                for x in xs:  # warm, and the buffers allocated before the capture
                    fn(x)
                st.read()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    for k in range(reps):
                        fn(xs[k % len(xs)])
                g.replay()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                g.replay()
                b.record()
                torch.cuda.synchronize()
                st.read()
                return a.elapsed_time(b) / reps

            ms = timed(lambda x: st.add(x, "f16", _vocab.DTYPES["f16"]))
            ref = timed(lambda x: x.amax())
            gb = n * xs[0].element_size() / 1e9
            print("%-6s %10d %14.0f %14.0f" % (str(dtype).split(".")[1], mib, gb / ms * 1e3,
                                               gb / ref * 1e3))


def main():
    lib, why = _devstats.load_module(sys.argv[1])
    if lib is None:
        sys.exit("gpu_devstats.py: " + why)
    fail = check(lib)
    if "--bench" in sys.argv:
        bench(lib)
    sys.exit(1 if fail else 0)


if __name__ == "__main__":
    main()
