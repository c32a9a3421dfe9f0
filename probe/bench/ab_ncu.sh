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
        out=AMPPROBE_CUDA_MODULE=$module # AMPPROBE_OUT turns the instrumentation on
        [ -z "$stats" ] || out=AMPPROBE_OUT=$tmp/run.sqlite
        env AMPPROBE_CUDA_MODULE="$module" "$out" ncu --clock-control none \
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
    python3 - $csvs <<'PY'
import csv, re, sys
WANT = [("Duration", "us"), ("DRAM Throughput", "dram"), ("Compute (SM) Throughput", "sm"),
        ("Achieved Occupancy", "occ"), ("Registers Per Thread", "regs"),
        ("Warp Cycles Per Issued Instruction", "cpi")]
SCALE = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
runs = [a.split("=", 1) for a in sys.argv[1:]]
table = {}  # (kernel, grid) -> per run: {metric: [values]}
for i, (name, path) in enumerate(runs):
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu's own messages start with ==PROF==
    launches = {}
    for row in csv.DictReader(lines):
        kernel = re.sub(r"^void |\(.*$| ", "", row["Kernel Name"])  # name<template arguments>
        key = (kernel, row["Grid Size"].replace(" ", ""), row["ID"])
        value = row["Metric Value"].replace(",", "")
        try:
            value = float(value)
        except ValueError:
            continue
        if row["Metric Name"] == "Duration":
            value *= SCALE.get(row["Metric Unit"], 1.0)
        launches.setdefault(key, {})[row["Metric Name"]] = value
    for (kernel, grid, _), metrics in launches.items():
        cols = table.setdefault((kernel, grid), [dict() for _ in runs])
        for metric, _ in WANT:
            if metric in metrics:
                cols[i].setdefault(metric, []).append(metrics[metric])
print("%-44s %-14s" % ("kernel", "grid") + "".join("  %-40s" % name for name, _ in runs))
for (kernel, grid), cols in sorted(table.items()):
    cells = []
    for col in cols:
        mean = {m: sum(v) / len(v) for m, v in col.items()}
        n = len(col.get("Duration", []))
        cells.append("%3dx %7.1f %5.1f %5.1f %5.1f %4.0f %6.1f" % (
            n, mean.get("Duration", 0), mean.get("DRAM Throughput", 0),
            mean.get("Compute (SM) Throughput", 0), mean.get("Achieved Occupancy", 0),
            mean.get("Registers Per Thread", 0), mean.get("Warp Cycles Per Issued Instruction", 0)))
    print("%-44s %-14s" % (kernel[:44], grid[:14]) + "".join("  %-40s" % c for c in cells))
PY
done
