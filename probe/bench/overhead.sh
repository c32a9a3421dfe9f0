#!/usr/bin/env bash
# Instrumentation overhead on the CPU samples: wall time of each sample alone and under
# `ampprobe run` (statistics every step, and every 10 steps), median of 3 runs each.
# Usage: probe/bench/overhead.sh [BUILD_DIR] [STEPS]
set -euo pipefail
build=${1:-build}
steps=${2:-60}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

median3() { printf '%s\n' "$@" | sort -g | sed -n 2p; }
seconds() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null 2>&1; t1=$(date +%s.%N); awk "BEGIN{print $t1 - $t0}"; }
pct() { awk "BEGIN{print ($1 / $2 - 1) * 100}"; }

printf '%-11s %-6s %10s %12s %12s %9s %9s\n' sample prec "plain s" "every step s" "every 10 s" overhead "every 10"
for sample in mlp simple_cnn tiny_gpt; do
  for prec in fp16 bf16; do
    prog=("$build/samples/$sample" --precision "$prec" --steps "$steps" --quiet)
    p=(); a=(); b=()
    for i in 1 2 3; do
      p+=("$(seconds "${prog[@]}")")
      a+=("$(seconds "$build/ampprobe" run --force -o "$tmp/a.sqlite" -- "${prog[@]}")")
      b+=("$(seconds "$build/ampprobe" run --force --stats-every 10 -o "$tmp/b.sqlite" -- "${prog[@]}")")
    done
    mp=$(median3 "${p[@]}"); ma=$(median3 "${a[@]}"); mb=$(median3 "${b[@]}")
    printf '%-11s %-6s %10.3f %12.3f %12.3f %8.1f%% %8.1f%%\n' "$sample" "$prec" "$mp" "$ma" "$mb" \
      "$(pct "$ma" "$mp")" "$(pct "$mb" "$mp")"
  done
done
