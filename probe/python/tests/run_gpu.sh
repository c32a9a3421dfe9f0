#!/usr/bin/env bash
# run_gpu.sh — the bridge's GPU checks, on the GPU machine (torch there), from the repository root:
#   probe/python/tests/run_gpu.sh DIST [WORK]
# DIST holds ampprobe, libamprecord.so and python/ as the build leaves them (built elsewhere and
# carried). Each gpu_faults.py case runs, faulty and healthy, under `ampprobe run --torch --trace
# amp` (in parallel) and check_report.py checks the report's first finding (PASS/FAIL lines);
# one faulty case also runs with the compiled statistics; then torch_overhead.py measures the
# step-time cost. Everything lands in WORK (default /tmp/ampprobe-gpu); exits 1 if a check
# failed.
set -u
DIST=$(cd "${1:?usage: run_gpu.sh DIST [WORK]}" && pwd)
WORK=${2:-/tmp/ampprobe-gpu}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$WORK"
python3 -c 'import torch, sys; print("# python", sys.version.split()[0], "torch", torch.__version__, torch.cuda.get_device_name())'

one() { # NAME COMPILE ARGS...
    local name=$1 compile=$2
    shift 2
    AMPPROBE_TORCH_COMPILE=$compile "$DIST/ampprobe" run --torch --trace amp -f -o "$WORK/$name.sqlite" \
        -- python3 "$HERE/gpu_faults.py" "$@" >"$WORK/$name.log" 2>&1
    "$DIST/ampprobe" report "$WORK/$name.sqlite" --format json -o "$WORK/$name.json"
    "$DIST/ampprobe" report "$WORK/$name.sqlite" >"$WORK/$name.txt" 2>&1
}
cases="attn residual nan log0 underflow sawtooth"
for c in $cases; do
    one "$c" 0 --case "$c" &
    one "$c-healthy" 0 --case "$c" --healthy &
done
one attn-compiled 1 --case attn &
wait
fail=0
for c in $cases; do
    python3 "$HERE/check_report.py" "$WORK/$c.json" "$c" || fail=1
    python3 "$HERE/check_report.py" "$WORK/$c-healthy.json" "$c" --healthy || fail=1
done
python3 "$HERE/check_report.py" "$WORK/attn-compiled.json" attn || fail=1

PYTHONPATH="$DIST/python" "$DIST/ampprobe" run --trace amp -f -o "$WORK/overhead.sqlite" -- \
    python3 "$HERE/../bench/torch_overhead.py" >"$WORK/overhead.log" 2>&1 || fail=1
tail -8 "$WORK/overhead.log"
exit $fail
