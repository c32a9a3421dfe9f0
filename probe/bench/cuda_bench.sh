#!/bin/sh
# cuda_bench.sh — the benchmark against PyTorch, in one run on the GPU machine: libampcore's
# cuda_bench and torch_baseline.py on the same workloads, then ours/torch ratios of the median
# step time and of the peak device memory held by tensors (ours in the sizes the tensors asked
# for, as torch.cuda.max_memory_allocated counts; blocks_MiB: in our pool's rounded blocks), and
# the cost of full per-layer statistics.
#
#   probe/bench/cuda_bench.sh BUILD_DIR [OUT_DIR]
set -u
build=${1:?usage: cuda_bench.sh BUILD_DIR [OUT_DIR]}
out=${2:-.}
here=$(dirname "$0")
"$build/bench/cuda_bench" | tee "$out/bench_ours.jsonl"
for w in mlp gpt; do
    for fused in 1 0; do # statistics added by the producing kernels, and read separately
        rm -f /tmp/cuda_bench_$w.sqlite*
        AMPPROBE_STATS_FUSED=$fused AMPPROBE_OUT=/tmp/cuda_bench_$w.sqlite \
            "$build/bench/cuda_bench" --workload $w --mode fp16 --stats | tee -a "$out/bench_ours.jsonl"
    done
done
PYTHONUNBUFFERED=1 python3 "$here/torch_baseline.py" | tee "$out/bench_torch.log"
grep '^{' "$out/bench_torch.log" > "$out/bench_torch.jsonl"
python3 - "$out/bench_ours.jsonl" "$out/bench_torch.jsonl" <<'PY'
import json, sys
ours = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
torch = {(r["workload"], r["mode"]): r for r in map(json.loads, open(sys.argv[2]))}
plain = {(r["workload"], r["mode"]): r for r in ours if r["extra"] == "-"}
# ours_ms: a sync after every step; pipe_ms: steps back to back, one sync (per step)
print("%-10s %-5s %10s %10s %10s %7s %7s %10s %10s %7s %10s" % ("workload", "mode", "ours_ms", "pipe_ms",
      "torch_ms", "ratio", "pipe", "ours_MiB", "torch_MiB", "ratio", "blocks_MiB"))
for (w, m), r in plain.items():
    t = torch.get((w, m))
    if not t: continue
    tm = t["step_ms_median"]
    print("%-10s %-5s %10.3f %10.3f %10.3f %7.3f %7.3f %10.1f %10.1f %7.3f %10.1f" % (w, m, r["step_ms_median"],
          r["pipelined_ms"], tm, r["step_ms_median"] / tm, r["pipelined_ms"] / tm, r["peak_mib"], t["peak_mib"],
          r["peak_mib"] / t["peak_mib"], r.get("peak_block_mib", float("nan"))))
for r in ours:
    if not r["extra"].startswith("stats"): continue
    base = plain.get((r["workload"], r["mode"]))
    how = "fused into the producing kernels" if r["extra"] == "stats" else "read separately"
    if base:
        print("statistics every step (%s), %s %s: %.3f ms vs %.3f ms (%+.1f%%)" % (how, r["workload"], r["mode"],
              r["step_ms_median"], base["step_ms_median"], 100 * (r["step_ms_median"] / base["step_ms_median"] - 1)))
PY
