#!/usr/bin/env bash
# tests/fuzz/run.sh [--ci | SECONDS] — builds the libFuzzer targets with clang into build/fuzz
# (AddressSanitizer and UBSan, -DAMP_FUZZ=ON) and runs each on its corpus:
#   fuzz_spool    spool files' records (one to three files, of one process image or several)
#                 into the collector, then the report (every format, and a diff) and the TUI's
#                 every view on the database it made
#   fuzz_conform  one reference file of `ampprobe conform` (scaler updates, unscale cases, the
#                 autocast table, an e2e manifest)
#   fuzz_checkpoint  a checkpoint file (its CRC made right) loaded into a model: it loads, or
#                 fails naming the file with nothing changed
#   fuzz_tui      keys and terminal sizes driving the TUI over a run of two processes
#   fuzz_db       values written into that run's database (NULLs, edge integers and reals, text,
#                 deleted rows), then the report and the TUI's every view on it
# SECONDS (default 300) each, growing build/fuzz/corpus-NAME from the seeds in tests/fuzz/seeds;
# --ci: a fixed number of inputs from a fixed seed over the checked-in seeds alone (what .ci/run
# runs; about a minute and a half here; the databases the collector makes hold times, so runs
# differ a little: one may find what another did not). A crash, a sanitizer's report or a failed check of the readers fails the
# script and leaves the input in build/fuzz/crashes (replay it: build/fuzz/fuzz_NAME FILE).
set -euo pipefail
cd "$(dirname "$0")/../.."
mode=${1:-300}
if ! command -v clang >/dev/null 2>&1; then
    echo "tests/fuzz/run.sh: needs clang and its libFuzzer (apt-get install clang libclang-rt-dev)" >&2
    exit 2
fi
if [ "$mode" != --ci ] && ! [[ "$mode" =~ ^[0-9]+$ ]]; then
    echo "tests/fuzz/run.sh: '$mode' is neither --ci nor a number of seconds" >&2
    exit 2
fi
cmake -S . -B build/fuzz -DCMAKE_C_COMPILER=clang -DAMP_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    >/dev/null
targets=(spool conform checkpoint tui db)
cmake --build build/fuzz -j"$(nproc)" --target "${targets[@]/#/fuzz_}" >/dev/null
mkdir -p build/fuzz/crashes
status=0
for target in "${targets[@]}"; do
    # --ci: how many inputs (a spool input makes a database and reports on it: ~50 a second)
    # -timeout: a hang's limit, by SIGALRM, which the targets that run the suites' readers in a
    # Check runner must not see (its handler would kill the process group: fuzz.h)
    timeout=20
    case $target in
    spool) runs=1500 timeout=0 ;;
    conform) runs=100000 ;;
    checkpoint) runs=50000 ;;
    tui) runs=3000 ;;
    db) runs=1000 timeout=0 ;;
    esac
    seeds=tests/fuzz/seeds/$target
    if [ "$mode" = --ci ]; then # (what it finds goes to the first folder: a scratch one)
        rm -rf "build/fuzz/ci-$target" && mkdir -p "build/fuzz/ci-$target"
        args=(-seed=1 -runs="$runs" "build/fuzz/ci-$target" "$seeds")
    else
        corpus=build/fuzz/corpus-$target
        mkdir -p "$corpus"
        args=(-max_total_time="$mode" "$corpus" "$seeds")
    fi
    echo "fuzz_$target: ${args[*]}"
    if ! build/fuzz/fuzz_$target -artifact_prefix=build/fuzz/crashes/$target- -timeout="$timeout" \
        -print_final_stats=1 "${args[@]}" >build/fuzz/$target.log 2>&1; then
        status=1
        echo "fuzz_$target FAILED (build/fuzz/$target.log):" >&2
        grep -aE "^fuzz_|ERROR|SUMMARY|Test unit written" build/fuzz/$target.log >&2 ||
            tail -20 build/fuzz/$target.log >&2
    else
        grep -aE "^stat::(number_of_executed_units|new_units_added)" build/fuzz/$target.log |
            tr '\n' ' '
        echo
    fi
done
exit $status
