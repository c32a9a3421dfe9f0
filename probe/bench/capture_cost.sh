#!/bin/sh
# capture_cost.sh — what CUDA capture costs, on the GPU machine, from the repository root:
#     probe/bench/capture_cost.sh BUILD_DIR [ROUNDS]
# 1. Per kernel launch (build/bench/launch_cost: an empty kernel launched 50,000 times in bursts;
#    host ns per launch call): plain, under `ampprobe run --trace cuda`, the same with only the
#    kernel records (AMPPROBE_CUPTI_SKIP, probe/inject/inject.c), and CUPTI alone
#    (build/bench/libcupti_floor.so: kernel records, then kernel + runtime API records) — the
#    floor any CUPTI-based tracer pays for those records. The runs alternate over ROUNDS
#    (default 3) and each line gives the median over the rounds of each run's median.
# 2. Step time of libampcore's own gpt and mlp (fp16, cuda_bench), plain and under
#    `ampprobe run --trace cuda`, alternating over ROUNDS.
set -u
B=${1:?usage: capture_cost.sh BUILD_DIR [ROUNDS]}
ROUNDS=${2:-3}
T=$(mktemp -d)
skip_all=api,sync,memcpy,memset,overhead,flush
issue() { python3 -c "import json,sys; print([json.loads(l) for l in sys.stdin if l.startswith('{')][-1]['issue_ns_median'])"; }
lc() { # name, then the command prefix
    name=$1; shift
    "$@" "$B/bench/launch_cost" --reps 5 --launches 50000 2>>"$T/err" | issue >>"$T/$name"
}
for r in $(seq "$ROUNDS"); do
    lc plain env
    lc ampprobe env "$B/ampprobe" run --trace cuda -f -o "$T/c.sqlite" --
    lc ampprobe_kernels_only env AMPPROBE_CUPTI_SKIP=$skip_all "$B/ampprobe" run --trace cuda -f -o "$T/c.sqlite" --
    lc cupti_kernels env CUDA_INJECTION64_PATH="$B/bench/libcupti_floor.so"
    lc cupti_kernels_runtime env CUDA_INJECTION64_PATH="$B/bench/libcupti_floor.so" CUPTI_FLOOR_KINDS=runtime
done
echo "== host ns per kernel launch (median of $ROUNDS rounds; each round the median of 5 x 50,000)"
python3 - "$T" <<'PY'
import statistics, sys
d = sys.argv[1]
med = lambda n: statistics.median(float(x) for x in open(f"{d}/{n}"))
base = med("plain")
for n in ["plain", "ampprobe", "ampprobe_kernels_only", "cupti_kernels", "cupti_kernels_runtime"]:
    print(f"  {n:24s} {med(n):8.0f} ns  {med(n) - base:+6.0f} ns")
PY
step() { python3 -c "import json,sys; print([json.loads(l) for l in sys.stdin if l.startswith('{')][-1]['step_ms_median'])"; }
echo "== libampcore cuda_bench fp16 step ms, plain and under ampprobe run --trace cuda"
for r in $(seq "$ROUNDS"); do
    for w in gpt mlp; do
        p=$("$B/bench/cuda_bench" --workload $w --mode fp16 | step)
        c=$("$B/ampprobe" run --trace cuda -f -o "$T/c.sqlite" -- "$B/bench/cuda_bench" --workload $w \
            --mode fp16 2>/dev/null | step)
        python3 -c "print('  $w plain %.3f captured %.3f (%+.1f%%)' % ($p, $c, 100 * ($c / $p - 1)))"
    done
done
rm -rf "$T"
