#!/usr/bin/env bash
# tests/fuzz/make_seeds.sh [BUILD] — writes the fuzz targets' seeds into tests/fuzz/seeds from a
# build (default build/, as tests/run.sh leaves it): for fuzz_spool the records of short recorded
# runs (a spool file less its 64-byte header) of the samples with faults, the record helper (also
# with what the capture library records) and the NVTX program under the injection library; for
# fuzz_conform reference files of tests/data/golden, each behind the byte that picks its kind; for
# fuzz_checkpoint the checkpoint of the model it loads into (written by build/fuzz/fuzz_checkpoint,
# which tests/fuzz/run.sh builds); for fuzz_tui two key sequences and for fuzz_db sixteen writes
# of each kind (their .c files say how the bytes read). Run it again when a format gains a record
# or a field.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
out=tests/fuzz/seeds
spool=$(mktemp -d)
trap 'rm -rf "$spool"' EXIT
mkdir -p "$out/spool" "$out/conform" "$out/checkpoint" "$out/tui" "$out/db"
# seed NAME ENV... -- PROG ARGS...: PROG's spool file, less its header, as NAME, behind
# fuzz_spool's three layout bytes (zeros: one file)
seed() {
    local name=$1 envs=()
    shift
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    rm -f "$spool"/*
    env "${envs[@]}" AMPPROBE_SPOOL_DIR="$spool" "$@" >/dev/null 2>&1
    { printf '\0\0\0' && tail -c +65 "$spool"/*.spool; } >"$out/spool/$name"
}
seed tiny_gpt_attn_overflow AMPPROBE_STATS_EVERY=3 -- "$build/samples/tiny_gpt" --device cpu \
    --precision fp16 --fault attn-overflow --steps 4 --layers 1
seed mlp_nan_input -- "$build/samples/mlp" --device cpu --precision fp16 --fault nan-input --steps 2
seed simple_cnn_bf16 -- "$build/samples/simple_cnn" --device cpu --precision bf16 --steps 1
seed record_helper -- "$build/tests/amp_record_helper" steps 2
seed record_helper_capture AMPPROBE_TRACE=amp,cuda,nvtx -- "$build/tests/amp_record_helper" capture 2
seed nvtx_prog NVTX_INJECTION64_PATH="$PWD/$build/libampprobe_inject.so" -- \
    "$build/tests/amp_nvtx_prog"
# the same records laid out otherwise: mlp's in two files of one pid (an exec: two images), the
# capture's in three files of three pids
{ printf '\x0d\x80\x00' && tail -c +4 "$out/spool/mlp_nan_input"; } \
    >"$out/spool/mlp_nan_input_two_images"
{ printf '\x02\x55\xaa' && tail -c +4 "$out/spool/record_helper_capture"; } \
    >"$out/spool/record_helper_capture_three_pids"
kind=0
for f in scaler_updates.txt unscale.txt autocast_dtypes.txt e2e_mlp_sgd.manifest; do
    printf "\\x$(printf %02x $kind)" >"$out/conform/$f"
    head -n 60 "tests/data/golden/$f" >>"$out/conform/$f" # (the scaler's: its first cases)
    kind=$((kind + 1))
done
# 80x24: every view, sorts, a filter, scrolling, steps, the next process, help; then 60x24 resized
# small and large, a filter edited and left with Esc
printf '\x50\x15''2sssss/attn\n\x81\x81\x83s3s\x83\x804ss\x82[[]]P?x1q' >"$out/tui/views"
printf '\x46\x15''2\x87\x05\x02\x81\x87\xff\xff3\x874\x10/blocks\x7f\x7f\x1b4\x81\x85\x84' \
    >"$out/tui/resize"
python3 -c 'import sys; sys.stdout.buffer.write(b"".join(bytes([i * 7 % 256, i * 5 % 256, i, 0, i % 6])
    + bytes([i * 3 % 256] * 7) for i in range(16)))' >"$out/db/writes"
if [ -x build/fuzz/fuzz_checkpoint ]; then
    AMP_FUZZ_WRITE_SEED="$PWD/$out/checkpoint/adam_scaler.ckpt" build/fuzz/fuzz_checkpoint
else
    echo "make_seeds.sh: no build/fuzz/fuzz_checkpoint (tests/fuzz/run.sh builds it):" \
        "the checkpoint seed is left as it is" >&2
fi
ls -l "$out"/*
