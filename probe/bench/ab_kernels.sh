#!/bin/sh
# ab_kernels.sh AMPPROBE "NAME:BENCH:MODULE ..." "WORKLOAD:MODE ..." [--stats] — where a
# cuda_bench step's GPU time goes, for builds side by side: each build's run captured under
# `AMPPROBE run --trace cuda` (amp,cuda with --stats), then the kernel time per step and launches
# per step by kernel name, the builds in columns, and the totals. BENCH and MODULE as in
# ab_steps.sh.
set -eu
script=ab_kernels.sh
usage='ab_kernels.sh AMPPROBE "NAME:BENCH:MODULE ..." "WORKLOAD:MODE ..." [--stats]'
ampprobe=${1:?usage: $usage}
. "$(dirname "$0")/ab-common.sh"
trace=cuda; [ -z "$stats" ] || trace=amp,cuda
steps=10 # cuda_bench runs 3 warm-up steps, the timed steps and as many again back to back
for c in $cases; do
    w=${c%%:*}; m=${c#*:}; dbs=""
    for v in $variants; do
        ab_build "$v"
        db=$tmp/${name}_${w}_$m.sqlite
        AMPPROBE_CUDA_MODULE=$module "$ampprobe" run --trace $trace -o "$db" -- "$bench" --workload "$w" \
            --mode "$m" --warmup 3 --steps $steps $stats >/dev/null
        dbs="$dbs $name=$db"
    done
    echo "== $w $m${stats:+ with statistics}: per step"
    python3 - $((2 * steps + 3)) $dbs <<'PY'
import sqlite3, sys
steps = int(sys.argv[1]); runs = [a.split("=", 1) for a in sys.argv[2:]]
table = {}
for i, (name, db) in enumerate(runs):
    q = """SELECT s.value, sum(k.end - k.start), count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k
           JOIN StringIds s ON s.id = k.shortName GROUP BY 1"""
    for kernel, ns, n in sqlite3.connect(db).execute(q):
        table.setdefault(kernel[:60], [(0.0, 0.0)] * len(runs))[i] = (ns / steps / 1e3, n / steps)
print("%-60s" % "kernel" + "".join("%18s" % name for name, _ in runs))
total = [0.0] * len(runs)
for kernel, cols in sorted(table.items(), key=lambda kv: -max(us for us, _ in kv[1])):
    for i, (us, _) in enumerate(cols):
        total[i] += us
    print("%-60s" % kernel + "".join("%10.1f us %5.1fx" % col for col in cols))
print("%-60s" % "total" + "".join("%10.1f us       " % t for t in total))
PY
done
