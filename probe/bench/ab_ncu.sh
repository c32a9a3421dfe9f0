#!/bin/sh
# ab_ncu.sh KERNELS "NAME:BENCH:MODULE ..." "WORKLOAD:MODE ..." [--stats] — the hardware counters
# of the kernels whose names match the regular expression KERNELS, for builds side by side: each
# build's cuda_bench run (one warm-up step and one timed one) under Nsight Compute (`ncu
# --clock-control none`: the clocks are left as they are), its first $AB_NCU_COUNT (60) matching
# launches, then one line per kernel and grid with each build's launches, mean duration (µs), DRAM
# and SM throughput (% of peak), achieved occupancy (%), registers and warp cycles per issued
# instruction. BENCH and MODULE as in ab_steps.sh; ncu's own CSV stays in $AB_NCU_KEEP when that
# is set (a folder): its launches in order, which `ncu_pair.py A.csv B.csv` pairs launch by launch
# (a run without statistics against one with them, say).
#
#   sh probe/bench/ab_ncu.sh 'transpose|convert_kernel' "old:$B:old.so new:$B:new.so" gpt:fp16 --stats
set -eu
script=ab_ncu.sh
usage='ab_ncu.sh KERNELS "NAME:BENCH:MODULE ..." "WORKLOAD:MODE ..." [--stats]'
kernels=${1:?usage: $usage}
. "$(dirname "$0")/ab-common.sh"
command -v ncu >/dev/null || { echo "$script: ncu (Nsight Compute) is not on PATH" >&2; exit 2; }
for c in $cases; do
    w=${c%%:*}; m=${c#*:}; csvs=""
    for v in $variants; do
        ab_build "$v"
        csv=$tmp/${name}_${w}_$m${stats:+_stats}.csv
        rm -f "$tmp"/run.sqlite*
        set -- # AMPPROBE_OUT turns the instrumentation on: only with --stats
        [ -z "$stats" ] || set -- "AMPPROBE_OUT=$tmp/run.sqlite"
        env AMPPROBE_CUDA_MODULE="$module" "$@" ncu --clock-control none \
            -k "regex:$kernels" --launch-count "${AB_NCU_COUNT:-60}" --section SpeedOfLight \
            --section Occupancy --section LaunchStats --section WarpStateStats --csv --page details \
            "$bench" --workload "$w" --mode "$m" --warmup 1 --steps 1 $stats \
            >"$csv" 2>"$tmp/ncu.err" || {
            echo "$script: ncu failed on $name $w $m:" >&2; tail -5 "$tmp/ncu.err" >&2; exit 1; }
        [ -z "${AB_NCU_KEEP:-}" ] || cp "$csv" "$AB_NCU_KEEP/"
        csvs="$csvs $name=$csv"
    done
    echo "== $w $m${stats:+ with statistics}, per kernel and grid; each build's launches, us, dram%," \
        "sm%, occupancy%, registers, cycles per issue"
    python3 - "$(dirname "$0")" $csvs <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from ncu_pair import METRICS, launches  # noqa: E402 (the launches of one run, in order)
runs = [a.split("=", 1) for a in sys.argv[2:]]
table = {}  # (kernel, grid) -> per run: {metric: [values]}
for i, (name, path) in enumerate(runs):
    for launch in launches(path):
        cols = table.setdefault((launch["name"], launch["grid"]), [dict() for _ in runs])
        for metric in METRICS:
            if metric in launch:
                cols[i].setdefault(metric, []).append(launch[metric])
print("%-44s %-14s" % ("kernel", "grid") + "".join("  %-40s" % name for name, _ in runs))
for (kernel, grid), cols in sorted(table.items()):
    cells = []
    for col in cols:
        mean = [sum(v) / len(v) if v else 0.0 for v in (col.get(m, []) for m in METRICS)]
        cells.append("%3dx %7.1f %5.1f %5.1f %5.1f %4.0f %6.1f" % (len(col.get("Duration", [])),
                                                                  *mean))
    print("%-44s %-14s" % (kernel[:44], grid[:14]) + "".join("  %-40s" % c for c in cells))
PY
done
