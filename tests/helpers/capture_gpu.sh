#!/usr/bin/env bash
# capture_gpu.sh BUILD OUT — the GPU-machine check of CUDA/NVTX capture (not part of CI, which
# has no GPU): a plain CUDA C program (tests/helpers/cuda_prog.c) and an unmodified PyTorch
# script (tests/helpers/torch_capture.py) each run under `ampprobe run`; per database it prints
# kernels, copies, memsets, API calls, NVTX ranges, incomplete and dropped records, unmatched
# pushes, and the kernels attributed to an NVTX range; a PyTorch script that runs torch.profiler
# (tests/helpers/torch_profiler_inside.py) under `ampprobe run --torch`; a script that evaluates
# halfway through its training loop and after it (tests/helpers/torch_evals.py: the report judges
# the loop alone); a sample under --counters (PM samples
# recorded, on the kernels' clock, used by the report). Then the capture overhead on the
# benchmark workloads (probe/bench/torch_baseline.py, fp16, with and without `ampprobe run`,
# alternating, and once with NVTX capture only), and `ampprobe calibrate`. Exits non-zero when
# a check fails.
set -u
B=$1
OUT=$2
mkdir -p "$OUT"
export HOME=/tmp/capture-home # calibrate's cache
TMPDIR_BENCH=/tmp/capture-bench # the benchmark databases (large; not kept)
mkdir -p "$HOME" "$TMPDIR_BENCH"
fail=0

# Libraries the binaries need, where this machine keeps them (the toolkit, or torch's wheels).
libdirs=$(python3 -c "import glob, site; print(':'.join(glob.glob(site.getsitepackages()[0] + '/nvidia/*/lib')))")
for f in "$B/libampprobe_inject.so" "$B/tests/amp_cuda_prog" "$B/ampprobe"; do
  if ldd "$f" | grep -q "not found"; then
    echo "note: $f misses $(ldd "$f" | grep 'not found' | tr -s ' \t' ' '); adding torch's libraries"
    export LD_LIBRARY_PATH="$B/lib:$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

check() { # DB LABEL: the figures, and the pass/fail checks
  python3 - "$1" "$2" <<'EOF' || fail=1
import sqlite3, sys
db = sqlite3.connect(sys.argv[1]); q = lambda s: db.execute(s).fetchone()[0]
m = dict(db.execute("SELECT key, value FROM META WHERE pid != 0 AND key LIKE 'cu%'").fetchall())
r = dict(
    kernels=q("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL"),
    memcpy=q("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY"),
    memset=q("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMSET"),
    api=q("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME"),
    sync=q("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"),
    nvtx_ranges=q("SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59"),
    nvtx_unended=q("SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND end IS NULL"),
    zero_ts=sum(q(f"SELECT count(*) FROM {t} WHERE start <= 0 OR end < start") for t in
                ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")),
    kernels_with_api=q("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE EXISTS (SELECT 1 FROM "
                       "CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId = k.correlationId)"),
    gpu=db.execute("SELECT name, smCount, totalMemory, clockRate, memoryBandwidth FROM TARGET_INFO_GPU").fetchall(),
    processes=db.execute("SELECT pid, name, status, records FROM AMP_PROCESSES").fetchall(),
)
print(sys.argv[2], r, "META:", m)
top = db.execute("""SELECT s.value, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
                    GROUP BY 1 ORDER BY 2 DESC LIMIT 5""").fetchall()
print(sys.argv[2], "top kernels:", top)
# attribution: the innermost NVTX range of the launching thread around each kernel's launch call
attr = db.execute("""
WITH launch AS (SELECT k.rowid AS kernel, (SELECT r.rowid FROM CUPTI_ACTIVITY_KIND_RUNTIME r
  WHERE r.correlationId = k.correlationId AND r.globalTid >> 24 = k.globalPid >> 24
  ORDER BY r.eventClass LIMIT 1) AS api FROM CUPTI_ACTIVITY_KIND_KERNEL k),
ranges AS (SELECT l.kernel, (SELECT n.rowid FROM CUPTI_ACTIVITY_KIND_RUNTIME r, NVTX_EVENTS n
  WHERE r.rowid = l.api AND n.globalTid = r.globalTid AND n.eventType IN (59, 60)
  AND n.start <= r.start AND n.end >= r.end ORDER BY n.start DESC, n.rangeId DESC LIMIT 1) AS range FROM launch l)
SELECT coalesce(n.text, s.value, '(none)'), count(*) FROM ranges a LEFT JOIN NVTX_EVENTS n ON n.rowid = a.range
  LEFT JOIN StringIds s ON s.id = n.textId GROUP BY 1 ORDER BY 2 DESC LIMIT 8""").fetchall()
print(sys.argv[2], "kernels by innermost range:", attr)
bad = [k for k, ok in (("kernels", r["kernels"] > 0), ("zero_ts", r["zero_ts"] == 0),
                       ("dropped", m.get("cupti_dropped") == "0"), ("push==pop", r["nvtx_unended"] == 0),
                       ("nvtx", r["nvtx_ranges"] > 0), ("gpu_info", len(r["gpu"]) > 0)) if not ok]
print(sys.argv[2], "FAILED: " + ", ".join(bad) if bad else "PASS")
sys.exit(1 if bad else 0)
EOF
}

echo "== plain CUDA C program"
timeout -k 5 150 "$B/ampprobe" run -o "$OUT/cuda.sqlite" -- "$B/tests/amp_cuda_prog" || fail=1
check "$OUT/cuda.sqlite" cuda_prog

echo "== unmodified PyTorch script"
timeout -k 5 150 "$B/ampprobe" run -o "$OUT/torch.sqlite" -- python3 tests/helpers/torch_capture.py || fail=1
check "$OUT/torch.sqlite" torch

echo "== a PyTorch script that runs torch.profiler, a second CUPTI client, under ampprobe run --torch"
# the script runs to its end, ampprobe's capture keeps its kernels, the bridge its steps, and the
# bridge says once why the profiler has no CUDA events
timeout -k 5 150 "$B/ampprobe" run --torch -o "$OUT/profiler.sqlite" -- \
  python3 tests/helpers/torch_profiler_inside.py >"$OUT/profiler.txt" 2>&1 || fail=1
grep -E "^profiler:|^steps|^ampprobe: torch.profiler" "$OUT/profiler.txt"
python3 - "$OUT/profiler.sqlite" "$OUT/profiler.txt" <<'EOF' || fail=1
import sqlite3, sys
db = sqlite3.connect(sys.argv[1]); q = lambda s: db.execute(s).fetchone()[0]
out = open(sys.argv[2]).read()
kernels, steps = q("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL"), q("SELECT count(*) FROM AMP_STEPS")
dropped = q("SELECT value FROM META WHERE key = 'cupti_dropped'")
notes = out.count("ampprobe: torch.profiler records no CUDA activity in this run")
print("profiler: kernels", kernels, "steps", steps, "dropped", dropped, "notes", notes)
bad = [k for k, ok in (("ran", "steps 13," in out), ("kernels", kernels > 0), ("steps", steps == 13),
                       ("dropped", dropped == "0"), ("note", notes == 1)) if not ok]
print("profiler", "FAILED: " + ", ".join(bad) if bad else "PASS")
sys.exit(1 if bad else 0)
EOF

echo "== a PyTorch script that evaluates after its GPU-bound training loop, under ampprobe run --torch"
# the report judges the loop: the evaluations' idle GPU and pageable uploads, halfway and after the
# last step, are not the loop's (no gpu-idle warning, no h2d-copies finding; the evaluations
# alone, host-paced loops of small batches, keep the GPU idle most of its time), and the step
# after the mid-run one does not hold it (the bridge starts that step where it ended)
timeout -k 5 150 "$B/ampprobe" run --torch -o "$OUT/evals.sqlite" -- \
  python3 tests/helpers/torch_evals.py || fail=1
"$B/ampprobe" report "$OUT/evals.sqlite" --format json -o "$OUT/evals.json" || fail=1
python3 - "$OUT/evals.sqlite" "$OUT/evals.json" <<'EOF' || fail=1
import json, sqlite3, statistics, sys
db = sqlite3.connect(sys.argv[1]); q = lambda s: db.execute(s).fetchone()[0]
findings = json.load(open(sys.argv[2]))["findings"]
steps, end = q("SELECT count(*) FROM AMP_STEPS"), q("SELECT max(end_ns) FROM AMP_STEPS")
after = q(f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE start > {end or 0}")
times = [e - s for s, e in db.execute("SELECT start_ns, end_ns FROM AMP_STEPS ORDER BY step")]
gap = q("SELECT b.start_ns - a.end_ns FROM AMP_STEPS a JOIN AMP_STEPS b ON b.step = a.step + 1 "
        "AND b.pid = a.pid WHERE a.step = 9")
between = q("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN AMP_STEPS a ON a.step = 9 "
            "JOIN AMP_STEPS b ON b.step = 10 WHERE k.start > a.end_ns AND k.start < b.start_ns")
median = statistics.median(times[1:]) if len(times) > 1 else 0
loop = [(f["rule"], f["severity"]) for f in findings if f["rule"] in ("gpu-idle", "h2d-copies")]
print("evals: steps", steps, "median step ms", round(median / 1e6, 3), "step 10 ms",
      round(times[10] / 1e6, 3) if len(times) > 10 else None, "between steps 9 and 10 ms",
      round((gap or 0) / 1e6, 3), "kernels there", between, "kernels after the last step", after,
      "loop findings", loop)
bad = [k for k, ok in (("steps", steps == 20),
                       ("mid-run evaluation", (gap or 0) >= 50e6 and between >= 300),
                       ("step 10", len(times) > 10 and times[10] < 3 * median),
                       ("final evaluation", after >= 600),
                       ("gpu-idle", ("gpu-idle", "warning") not in loop),
                       ("h2d-copies", not any(r == "h2d-copies" for r, _ in loop))) if not ok]
print("evals", "FAILED: " + ", ".join(bad) if bad else "PASS")
sys.exit(1 if bad else 0)
EOF

echo "== --counters: PM samples next to the kernels of a libampcore sample"
timeout -k 5 150 "$B/ampprobe" run --counters -o "$OUT/counters.sqlite" -- "$B/samples/tiny_gpt" \
  --device cuda --precision fp16 --steps 300 >/dev/null || fail=1
python3 - "$OUT/counters.sqlite" <<'EOF' || fail=1
import sqlite3, sys
db = sqlite3.connect(sys.argv[1]); q = lambda s: db.execute(s).fetchone()
n, shortest, longest = q("SELECT count(*), min(end - timestamp), max(end - timestamp) FROM GPU_METRICS")
names = q("SELECT count(*) FROM TARGET_INFO_GPU_METRICS")[0]
s0, s1 = q("SELECT min(timestamp), max(end) FROM GPU_METRICS")
kernels = q("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0]
inside = q(f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE start >= {s0 or 0} AND end <= {s1 or 0}")[0]
k0 = q("SELECT min(start) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0] or 0
started = int(q("SELECT value FROM META WHERE key = 'counters_start_ns_gpu0'")[0] or 0)
print("counters: rows", n, "metrics", names, "sample ns", shortest, "..", longest,
      "kernels inside the sampled span", inside, "of", kernels,
      "sampling began %.1f ms after the first kernel" % ((started - k0) / 1e6))
bad = [k for k, ok in (("rows", n > 0), ("metrics", names == 4), ("interval", (longest or 0) < 1000000),
                       ("clock", inside >= 0.5 * kernels)) if not ok]
print("counters", "FAILED: " + ", ".join(bad) if bad else "PASS")
sys.exit(1 if bad else 0)
EOF
"$B/ampprobe" report "$OUT/counters.sqlite" --rule roofline | grep -q "Hardware counters:" ||
  { echo "counters FAILED: the report does not use them"; fail=1; }

echo "== overhead: probe/bench/torch_baseline.py fp16, alternating plain / under ampprobe run"
for round in 1 2 3; do
  python3 probe/bench/torch_baseline.py --mode fp16 | grep '^{' | sed "s/^/plain$round /"
  timeout -k 5 150 "$B/ampprobe" run -o "$TMPDIR_BENCH/bench$round.sqlite" -- python3 probe/bench/torch_baseline.py --mode fp16 \
    | grep '^{' | sed "s/^/traced$round /"
done
# capture plus hardware counters: what PM sampling adds
timeout -k 5 150 "$B/ampprobe" run --counters -o "$TMPDIR_BENCH/counters.sqlite" -- python3 probe/bench/torch_baseline.py --mode fp16 \
  | grep '^{' | sed "s/^/counters /"
# NVTX only (no CUPTI): what the CUDA activity tracing costs by itself
timeout -k 5 150 "$B/ampprobe" run --trace amp,nvtx -o "$TMPDIR_BENCH/nvtx.sqlite" -- python3 probe/bench/torch_baseline.py --mode fp16 \
  | grep '^{' | sed "s/^/nvtx-only /"
python3 -c "
import sqlite3, sys
for i in (1, 2, 3):
    db = sqlite3.connect('$TMPDIR_BENCH/bench%d.sqlite' % i)
    print('bench%d' % i, 'kernels', db.execute('SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()[0],
          dict(db.execute(\"SELECT key, value FROM META WHERE key IN ('cupti_dropped', 'cupti_incomplete', 'cupti_overhead_ns', 'cupti_api_calls')\").fetchall()))
"

echo "== calibrate"
"$B/ampprobe" calibrate || fail=1
cp "$HOME"/.cache/ampprobe/ceilings-*.txt "$OUT/" 2>/dev/null
echo "capture_gpu: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
