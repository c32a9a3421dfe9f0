#!/bin/sh
# stats_profile.sh BUILD_DIR [WORKLOAD] — where a cuda_bench step's GPU time goes with the
# per-layer statistics off, on (added by the producing kernels) and on but read separately
# (AMPPROBE_STATS_FUSED=0): each run captured under `ampprobe run --trace amp,cuda`, then the
# kernel time per step by kernel name (top 12), the total, and the device-to-device copies.
set -u
build=${1:?usage: stats_profile.sh BUILD_DIR [WORKLOAD]}
w=${2:-gpt}
steps=10
for run in plain fused separate; do
    db=/tmp/stats_profile_$run.sqlite
    rm -f "$db"*
    case $run in
    plain) "$build/ampprobe" run --trace cuda -o "$db" -- "$build/bench/cuda_bench" --workload "$w" \
        --mode fp16 --warmup 3 --steps $steps >/dev/null ;;
    fused) "$build/ampprobe" run --trace amp,cuda -o "$db" -- "$build/bench/cuda_bench" --workload "$w" \
        --mode fp16 --warmup 3 --steps $steps --stats >/dev/null ;;
    separate) AMPPROBE_STATS_FUSED=0 "$build/ampprobe" run --trace amp,cuda -o "$db" -- \
        "$build/bench/cuda_bench" --workload "$w" --mode fp16 --warmup 3 --steps $steps --stats >/dev/null ;;
    esac
    python3 - "$db" "$run" $((steps + 3)) <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1]); steps = int(sys.argv[3])
rows = db.execute("""SELECT s.value, sum(k.end - k.start), count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k
                     JOIN StringIds s ON s.id = k.shortName GROUP BY 1 ORDER BY 2 DESC""").fetchall()
total = sum(r[1] for r in rows)
copies = db.execute("SELECT coalesce(sum(end - start), 0), count(*), coalesce(sum(bytes), 0) FROM "
                    "CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 8").fetchone()  # device to device
print(f"== {sys.argv[2]}: {total / steps / 1e6:.3f} ms of kernels a step ({sum(r[2] for r in rows) / steps:.0f} launches); "
      f"device-to-device copies {copies[0] / steps / 1e6:.3f} ms ({copies[1] / steps:.0f}, {copies[2] / steps / 2**20:.0f} MiB)")
for name, ns, n in rows[:12]:
    print(f"  {ns / steps / 1e6:8.3f} ms {n / steps:6.1f}x  {name[:90]}")
PY
done
