#!/bin/sh
# capture_parts.sh — what CUDA capture costs the PyTorch bench workloads' step time, on the GPU
# machine, from the repository root:  probe/bench/capture_parts.sh BUILD [ROUNDS]
# Runs probe/bench/torch_baseline.py (fp16: gpt, simplecnn, mlp) plainly, under `ampprobe run
# --trace cuda`, the same with only CUPTI's kernel records (AMPPROBE_CUPTI_SKIP, probe/inject/
# inject.c: for measuring, not for users) and under CUPTI alone with kernel records
# (build/bench/libcupti_floor.so), alternating over ROUNDS rounds (default 3); prints each
# round's median step times, then per workload the median over the rounds and its change
# against the plain runs.
set -u
B=$1
ROUNDS=${2:-3}
T=$(mktemp -d)
run() { # config name, then the command prefix
    name=$1; shift
    "$@" python3 probe/bench/torch_baseline.py --mode fp16 --workload gpt --workload simplecnn \
        --workload mlp 2>/dev/null | grep '^{' | sed "s/^/$name /" | tee -a "$T/rows"
}
for round in $(seq "$ROUNDS"); do
    run plain env
    run ampprobe env "$B/ampprobe" run --trace cuda -f -o "$T/c.sqlite" --
    run kernels_only env AMPPROBE_CUPTI_SKIP=api,sync,memcpy,memset,overhead,flush \
        "$B/ampprobe" run --trace cuda -f -o "$T/c.sqlite" --
    run cupti_kernels env CUDA_INJECTION64_PATH="$B/bench/libcupti_floor.so"
done
python3 - "$T/rows" <<'PY'
import json, statistics, sys
times = {}
for line in open(sys.argv[1]):
    name, js = line.split(" ", 1)
    r = json.loads(js)
    times.setdefault((r["workload"], name), []).append(r["step_ms_median"])
print("== median step ms over the rounds (change against plain)")
for w in ["gpt", "simplecnn", "mlp"]:
    base = statistics.median(times[(w, "plain")])
    cells = []
    for name in ["plain", "ampprobe", "kernels_only", "cupti_kernels"]:
        m = statistics.median(times[(w, name)])
        cells.append(f"{name} {m:.3f} ({100 * (m / base - 1):+.1f}%)")
    print(f"  {w:9s} " + "  ".join(cells))
PY
rm -rf "$T"
