#!/usr/bin/env bash
# gpu_check.sh — the CUDA backend's checks on the GPU machine in one call, one line each, then a
# count; exit status 1 when one failed (2 for bad usage or no GPU):
#   tests/helpers/gpu_check.sh [BUILD] [OUT]      (default build/cuda and a temporary folder)
# - `ampprobe_tests cuda_gpu`: every case run (none skipped for want of a GPU), none failed;
# - `ampprobe conform --device cuda` on tests/data/golden and tests/data/golden-extra;
# - the samples mlp, simple_cnn and tiny_gpt trained with `--device cuda` in fp32, fp16 and bf16:
#   each one's final loss below its first;
# - tests/helpers/fused_stats_e2e.py: statistics added by the kernels the same as read separately.
set -uo pipefail
build=${1:-build/cuda}
out=${2:-$(mktemp -d)}
here=$(cd "$(dirname "$0")/../.." && pwd)
if [ ! -x "$build/ampprobe_tests" ] || [ ! -x "$build/ampprobe" ]; then
    echo "gpu_check.sh: $build holds no CUDA build (ampprobe_tests, ampprobe):" \
        "cmake -S . -B $build -DAMP_WITH_CUDA=ON -DAMP_STATIC_CHECK=ON" >&2
    exit 2
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_check.sh: no GPU here (nvidia-smi -L failed): run it on the GPU machine" >&2
    exit 2
fi
mkdir -p "$out"
passed=0
failed=0

# check NAME COMMAND...: runs the command (its output to OUT/NAME.log), PASS on exit status 0
check() {
    local name=$1 log="$out/$1.log"
    shift
    if "$@" >"$log" 2>&1; then
        echo "PASS $name"
        passed=$((passed + 1))
    else
        echo "FAIL $name ($log: $(tail -n 1 "$log"))"
        failed=$((failed + 1))
    fi
}

# every case of the suite ran (a case without a GPU says "skipped") and none failed
suite_ran() {
    local o
    o=$("$build/ampprobe_tests" cuda_gpu 2>&1)
    local rc=$?
    echo "$o"
    [ $rc -eq 0 ] || return 1
    if grep -q "skipped" <<<"$o"; then
        echo "cases skipped: the CUDA backend found no GPU"
        return 1
    fi
}

# SAMPLE PRECISION: the final loss below the first
learns() {
    local o
    o=$("$build/samples/$1" --device cuda --precision "$2" 2>&1)
    local rc=$?
    echo "$o"
    [ $rc -eq 0 ] || return 1
    awk '/^final loss/ { gsub(/[(),]/, " "); final = $3; first = $5 }
         END { exit !(final != "" && final + 0 < first + 0) }' <<<"$o" && return
    echo "the final loss is not below the first"
    return 1
}

check cuda_gpu suite_ran
check conform "$build/ampprobe" conform "$here/tests/data/golden" --device cuda
check conform-extra "$build/ampprobe" conform "$here/tests/data/golden-extra" --device cuda
for s in mlp simple_cnn tiny_gpt; do
    for p in fp32 fp16 bf16; do
        check "learns-$s-$p" learns "$s" "$p"
    done
done
check fused-stats python3 "$here/tests/helpers/fused_stats_e2e.py" "$build" "$out/fused"
echo "gpu_check: $passed passed, $failed failed (logs in $out)"
[ "$failed" -eq 0 ]
