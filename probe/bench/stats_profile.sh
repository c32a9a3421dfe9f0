#!/bin/sh
# stats_profile.sh BUILD_DIR [WORKLOAD] — where a cuda_bench step's GPU time goes with the
# per-layer statistics off, on (added by the producing kernels) and on but read separately
# (AMPPROBE_STATS_FUSED=0): each run captured under `ampprobe run --trace amp,cuda`, then the
# kernel time per step by kernel name (top 12), the total, the device-to-device copies, the
# GPU's idle time in a step with its largest gaps, and the statistics kernel's launches by grid;
# then what the fused run added, kernel by kernel, and launch by launch for the kernels that grew
# most (a kernel's launches in the two runs paired by their order: both launch it as often).
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
    # cuda_bench runs the warm-up, the timed steps and as many again back to back
    python3 - "$db" "$run" $((2 * steps + 3)) <<'PY'
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
# the GPU's idle time in each step after the first (from the end of one optimizer step to the
# end of the next): the median, and the largest gaps of the median step by the kernels (or
# copies) on either side (the mean would be dominated by the pause between warm-up and timed steps)
acts = db.execute("""SELECT k.start, k.end, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k
                      JOIN StringIds s ON s.id = k.shortName
                      UNION ALL SELECT start, end, 'memcpy' FROM CUPTI_ACTIVITY_KIND_MEMCPY
                      UNION ALL SELECT start, end, 'memset' FROM CUPTI_ACTIVITY_KIND_MEMSET
                      ORDER BY 1""").fetchall()
# a step ends with its optimizer's launches (one or a few in a row)
ends = [e for k, (_, e, name) in enumerate(acts) if name == "optim_kernel"
        and (k + 1 == len(acts) or acts[k + 1][2] != "optim_kernel")]
per_step = []  # (idle ns, [(gap ns, before, after)])
for lo, hi in zip(ends, ends[1:]):
    idle, gaps, last_end, last_name = 0, [], lo, "optim_kernel"
    for start, end, name in acts:
        if start < lo or end > hi:
            continue
        if start > last_end:
            idle += start - last_end
            gaps.append((start - last_end, last_name[:40], name[:40]))
        if end > last_end:
            last_end, last_name = end, name
    per_step.append((idle, gaps))
if per_step:
    per_step.sort(key=lambda x: x[0])
    idle, gaps = per_step[len(per_step) // 2]
    print(f"   GPU idle {idle / 1e6:.3f} ms in the median of {len(per_step)} steps "
          f"({per_step[0][0] / 1e6:.3f}..{per_step[-1][0] / 1e6:.3f}); its largest gaps:")
    for ns, a, b in sorted(gaps, reverse=True)[:6]:
        print(f"  {ns / 1e6:8.3f} ms  after {a} before {b}")
# the statistics kernel's launches by grid: whole waves of blocks are large tensors read again,
# single blocks small ones (scalars), whose cost is the launch's
classes = {}
for grid, ns in db.execute("""SELECT k.gridX, k.end - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k
                              JOIN StringIds s ON s.id = k.shortName
                              WHERE s.value LIKE 'stats_kernel%'"""):
    c = classes.setdefault("1 block" if grid == 1 else "< 32" if grid < 32 else
                           "< 528" if grid < 528 else ">= 528 (a wave on an H200)", [0, 0])
    c[0] += 1
    c[1] += ns
for name, (n, ns) in sorted(classes.items(), key=lambda c: -c[1][1]):
    print(f"   statistics kernel, grids of {name}: {n / steps:.1f} a step, "
          f"{ns / steps / 1e3:.1f} us ({ns / n / 1e3:.1f} us each)")
PY
done
python3 - /tmp/stats_profile_plain.sqlite /tmp/stats_profile_fused.sqlite $((2 * steps + 3)) <<'PY'
import sqlite3, sys
steps = int(sys.argv[3])
def launches(path):  # kernel name -> [(ns, template, grid)] in launch order
    out = {}
    for ns, name, full, gx, gy, gz in sqlite3.connect(path).execute(
            """SELECT k.end - k.start, s.value, d.value, k.gridX, k.gridY, k.gridZ
               FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
               JOIN StringIds d ON d.id = k.demangledName ORDER BY k.start"""):
        out.setdefault(name, []).append((ns, full, (gx, gy, gz)))
    return out
plain, fused = launches(sys.argv[1]), launches(sys.argv[2])
def total(runs, name): return sum(ns for ns, _, _ in runs.get(name, [])) / steps
grew = sorted(set(plain) | set(fused), key=lambda n: total(plain, n) - total(fused, n))
print("== what the statistics added a step, by kernel (us: plain -> fused)")
for name in grew[:12]:
    print(f"  {(total(fused, name) - total(plain, name)) / 1e3:+8.1f}  {total(plain, name) / 1e3:8.1f}"
          f" -> {total(fused, name) / 1e3:8.1f}  {name[:60]}")
for name in grew[:4]:
    a, b = plain.get(name, []), fused.get(name, [])
    if not a or len(a) != len(b) or len(a) % steps:
        continue
    per = len(a) // steps  # launches a step; position i of every step, averaged
    rows = []
    for i in range(per):
        pa = sum(a[s * per + i][0] for s in range(steps)) / steps
        pb = sum(b[s * per + i][0] for s in range(steps)) / steps
        rows.append((pb - pa, pa, pb, a[i], b[i]))
    print(f"== {name[:60]}: the launches that grew most (us, plain -> fused, grid)")
    for d, pa, pb, x, y in sorted(rows, key=lambda r: -r[0])[:4]:
        print(f"  {pa / 1e3:7.1f} -> {pb / 1e3:7.1f}  {y[1][:70]} {x[2]} -> {y[2]}")
PY
