#!/bin/sh
# ab_steps.sh ROUNDS "NAME:BENCH:MODULE ..." "WORKLOAD:MODE ..." [--stats] — cuda_bench's median
# step time for builds side by side, alternating (one run of each build in turn, ROUNDS times a
# case), so that the machine's minute-to-minute swings weigh on all alike. BENCH is a cuda_bench
# binary and MODULE the libampcore_cuda.so it loads (AMPPROBE_CUDA_MODULE); --stats turns the full
# per-layer statistics on. One line per round: the case, then each build's milliseconds.
#
#   sh probe/bench/ab_steps.sh 3 "old:old/bench/cuda_bench:old/libampcore_cuda.so \
#       new:build/cuda/bench/cuda_bench:build/cuda/libampcore_cuda.so" "mlp:fp16 gpt:fp16"
set -eu
script=ab_steps.sh
usage='ab_steps.sh ROUNDS "NAME:BENCH:MODULE ..." "WORKLOAD:MODE ..." [--stats]'
rounds=${1:?usage: $usage}
. "$(dirname "$0")/ab-common.sh"
median() { python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['step_ms_median'])"; }
# step_ms BENCH MODULE WORKLOAD MODE: one run's median step (with --stats, its database is
# $tmp/run.sqlite, removed before the next run)
step_ms() {
    if [ -n "$stats" ]; then
        rm -f "$tmp"/run.sqlite*
        AMPPROBE_CUDA_MODULE=$2 AMPPROBE_OUT=$tmp/run.sqlite "$1" --workload "$3" --mode "$4" --stats
    else
        AMPPROBE_CUDA_MODULE=$2 "$1" --workload "$3" --mode "$4"
    fi | median
}
for c in $cases; do
    w=${c%%:*}; m=${c#*:}
    for r in $(seq "$rounds"); do
        line="$w $m${stats:+ stats}"
        for v in $variants; do
            ab_build "$v"
            line="$line  $name $(step_ms "$bench" "$module" "$w" "$m")"
        done
        echo "$line"
    done
done
