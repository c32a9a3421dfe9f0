#!/usr/bin/env bash
# run_gpu.sh — the bridge's GPU checks, on the GPU machine (torch there), from the repository root:
#   probe/python/tests/run_gpu.sh DIST [WORK] [--quick]
# DIST holds ampprobe, libamprecord.so and python/ as the build leaves them (built elsewhere and
# carried). Each gpu_faults.py case runs, faulty and healthy, under `ampprobe run --torch --trace
# amp` (in parallel) and check_report.py checks the report's first finding (PASS/FAIL lines); one
# faulty case also runs with the eager (module-less) statistics, and three (the attention overflow,
# the NaN batch, log(0)) with statistics every 5 steps (the fault's step has none); gradient
# accumulation and activation checkpointing (both kinds, and checkpoint_wrapper),
# DistributedDataParallel (one process), DataParallel (one GPU), FSDP2 and FSDP1 (one process;
# FSDP1's flat parameters too, the weight rows theirs), gradient clipping after unscale_, a fused
# Adam (handed the scale), a batch cleaned after its forward (named per module), bf16 without
# autocast (a model cast to it),
# FSDP's mixed precision without autocast (FSDP2's param_dtype and FSDP1's MixedPrecision, fp16
# and bf16) and torch.compile (the model wrapped, compiled in place, or its blocks
# compiled, also with CUDA graphs: and no graph break, the statistics a compiled model has) are
# checked the same way, and against the plain runs (the step's loss as the script computed it; the
# same statistics rows); the weight rows must hold every parameter as each step began (the largest
# |w| the script printed); a script that raises mid-run must leave every step before it, one
# SIGKILLed every step but the last, each with the report's run-end warning; a second top-level
# module that the optimizer trains must be recorded from step 1 (META added_models, a note, its
# rows), leave the findings as they were, and its own overflow be named in its layer (and from step
# 0, in one watcher, when the script calls watch() on each: gpu_join.py with two GradScalers too);
# batches from DataLoader workers (forked, spawned) must leave the finding as it was and one
# recording process; the AMP API's older spellings (torch.cuda.amp.GradScaler, .autocast) with
# cudaProfilerStart/Stop around the fault, CUDA traced too, must give the same findings and every
# step's kernels; an MLP trained on the CPU with no GPU visible (cpu_faults.py, bf16 and fp16)
# must have its NaN batch found, no op of the bridge's own in its op step, its fp16 scale's
# collapse recorded as it was and reported, a "model" with no parameter said to be none,
# watch()'s bad arguments refused by name, and its updates by hand (no optimizer) split into the
# steps the script printed; gpu_patterns.py's model shapes (a cell called in a loop, an LSTM,
# nn.MultiheadAttention, a dict output, a frozen backbone, zero_grad() between the forward and
# backward(), a loss computed in the forward, channels_last convolutions, a residual added in
# place, a loss over logits masked by item assignment, in the loss or in the forward, a float
# causal mask passed in, a padding mask that leaves a sample no key, a -inf that where() leaves
# out, in the backward and in a step broken elsewhere; the first also in bf16 without a GradScaler;
# a hand-written norm's sqrt at 0, a std over a batch of one, acos at 1, a hand-written
# softmax's exp past fp32's range, label smoothing over a masked class)
# are checked faulty and healthy, as are Hugging Face's and Lightning's Trainers
# (gpu_frameworks.py: fp16 and bf16, the autocast accelerate enters inside the forward recorded as
# autocast), and a broken step's replay must leave the random state and the
# program's tensors as they were; with two GPUs or more, one faulty and one healthy case train on
# GPU 1 while GPU 0 stays current (the healthy one must record the same statistics as on GPU 0) and
# FSDP2 and FSDP1 train over two processes (faults found per module); the sawtooth run's
# gradient overflows must be traced op by op, and the op step of a healthy TinyGPT run must be in
# AMP_OPS with autocast's decisions, and its steps carry torch's memory peak where they should;
# a model cast to fp16 under Adam's eps=1e-8 (halfeps) must be named with that eps, a GradScaler
# kept in bf16 get its note, and a head over a vocabulary of 50257 (gpu_shapes.py, CUDA traced)
# the warning on its odd GEMM dimension (its padded twin none; their step times printed);
# gradients clipped before scaler.unscale_ must get the loss-scale warning, after it none;
# a model cast to bf16 under Adam at lr 1e-5 the lost-updates warning, its fp32 twin none;
# gpu_inplace.py
# checks that module outputs written to in place are read before the write; gpu_scale.py that
# every GradScaler update is recorded as the scaler made it (statistics every step and every 3);
# gpu_devstats.py checks the device statistics against eager torch and measures their bandwidth;
# then torch_overhead.py measures the step-time cost (not with --quick). Everything lands in WORK (default
# /tmp/ampprobe-gpu); exits 1 if a check failed.
set -u
DIST=$(cd "${1:?usage: run_gpu.sh DIST [WORK] [--quick]}" && pwd)
WORK=${2:-/tmp/ampprobe-gpu}
QUICK=${3:-}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$WORK" && rm -f "$WORK"/*.rc
python3 -c 'import torch, sys; print("# python", sys.version.split()[0], "torch", torch.__version__, torch.cuda.get_device_name())'

one() { # NAME STATS_MODULE ARGS... (STATS_MODULE empty: the build's; SCRIPT: gpu_faults.py's;
    # TRACE: ampprobe run's --trace, amp unless set; RUN_OPTS: more options of ampprobe run)
    local name=$1 module=$2
    shift 2
    TORCH_LOGS=graph_breaks PYTHONFAULTHANDLER=1 AMPPROBE_STATS_MODULE=$module \
        "$DIST/ampprobe" run --torch --trace "${TRACE:-amp}" \
        ${RUN_OPTS:-} -f -o "$WORK/$name.sqlite" \
        -- python3 "$HERE/${SCRIPT:-gpu_faults.py}" "$@" >"$WORK/$name.log" 2>&1
    echo $? >"$WORK/$name.rc"
    "$DIST/ampprobe" report "$WORK/$name.sqlite" --format json -o "$WORK/$name.json"
    "$DIST/ampprobe" report "$WORK/$name.sqlite" >"$WORK/$name.txt" 2>&1
}
cases="attn residual nan log0 underflow sawtooth fp32gemm diverge blowup"
for c in $cases; do
    one "$c" "" --case "$c" &
    one "$c-healthy" "" --case "$c" --healthy &
done
one attn-eager /nonexistent/libampstats_cuda.so --case attn &
one blowup-wmax "" --case blowup --print-wmax &
one diverge-wmax "" --case diverge --print-wmax &
one blowup-fsdp1-flat-wmax "" --case blowup --print-wmax --wrap fsdp1-flat &
one halfeps "" --case halfeps &  # (no healthy twin: a model.half() loop without a GradScaler
# loses gradients to underflow, which its report rightly warns of)
SCRIPT=gpu_patterns.py one p-dict-bf16-scaler "" --case dict --healthy --bf16 --keep-scaler &
one clip-scaled "" --case nan --healthy --clip 0.5 --clip-scaled &
one clip-unscaled "" --case nan --healthy --clip 0.5 &
one lost-updates "" --case nan --healthy --bf16 --lr 1e-5 &
one kept-updates "" --case nan --healthy --lr 1e-5 &
wait
# statistics every 5 steps: the fault's step 3 has none, its break is still found and traced
for c in attn nan log0; do
    RUN_OPTS="--stats-every 5" one "$c-every5" "" --case "$c" &
done
wait
# a head over a vocabulary of 50257 and its padded twin, alone on the GPU (their step times)
TRACE=amp,cuda SCRIPT=gpu_shapes.py one shapes-odd ""
TRACE=amp,cuda SCRIPT=gpu_shapes.py one shapes-padded "" --vocab 50304
# model shapes beyond gpu_faults.py's (gpu_patterns.py's docstring)
patterns="rnn lstm mha dict frozen zerograd innerloss cl inplace setmask fwdmask tmask padrow
router prior norm0 std1 acos hexp smooth rmsnorm twoopt rawstep gan"
for c in $patterns; do
    SCRIPT=gpu_patterns.py one "p-$c" "" --case "$c" &
    SCRIPT=gpu_patterns.py one "p-$c-healthy" "" --case "$c" --healthy &
done
SCRIPT=gpu_patterns.py one p-running "" --case running &
# (a wave of its own: with the frameworks' processes beside these, four runs on an 80 GB H100
# died of a CUDA error before their first step on 2026-12-06, and passed when run again alone)
wait
# training frameworks' own loops (gpu_frameworks.py's docstring)
for c in hf lightning; do
    SCRIPT=gpu_frameworks.py one "fw-$c" "" --case "$c" &
    SCRIPT=gpu_frameworks.py one "fw-$c-healthy" "" --case "$c" --healthy &
    SCRIPT=gpu_frameworks.py one "fw-$c-bf16-healthy" "" --case "$c" --healthy --bf16 &
done
SCRIPT=gpu_frameworks.py one fw-lightning-bf16 "" --case lightning --bf16 &
SCRIPT=gpu_frameworks.py one fw-hf-accum "" --case hf --accum 4 &
SCRIPT=gpu_frameworks.py one fw-hf-ckpt "" --case hf --ckpt &
SCRIPT=gpu_frameworks.py one fw-lightning-accum "" --case lightning --accum 4 &
SCRIPT=gpu_frameworks.py one fw-lightning-bf16-accum "" --case lightning --bf16 --accum 4 &
RUN_OPTS=--check-grads SCRIPT=gpu_patterns.py one p-router-bf16 "" --case router --bf16 &
RUN_OPTS=--check-grads SCRIPT=gpu_patterns.py one p-router-bf16-healthy "" --case router --bf16 \
    --healthy &
SCRIPT=gpu_patterns.py one p-router-bf16-late "" --case router --bf16 &
# training patterns: gradient accumulation, activation checkpointing of both kinds
one attn-accum "" --case attn --accum 4 &
one nan-accum "" --case nan --accum 4 &
one nan-bf16-accum "" --case nan --bf16 --accum 4 &
one attn-healthy-accum "" --case attn --healthy --accum 4 &
one attn-ckpt "" --case attn --checkpoint nonreentrant &
one residual-ckptr "" --case residual --checkpoint reentrant &
one attn-healthy-ckpt "" --case attn --healthy --checkpoint nonreentrant &
one attn-healthy-ckptr "" --case attn --healthy --checkpoint reentrant &
# FSDP1 (FullyShardedDataParallel), with checkpoint_wrapper around the blocks, alone too
one attn-fsdp1 "" --case attn --wrap fsdp1 &
one nan-fsdp1-flat "" --case nan --wrap fsdp1-flat &
one residual-fsdp1-ckptw "" --case residual --wrap fsdp1 --checkpoint wrapper &
one attn-healthy-fsdp1 "" --case attn --healthy --wrap fsdp1 &
one attn-healthy-fsdp1-flat "" --case attn --healthy --wrap fsdp1-flat &
one attn-healthy-ckptw "" --case attn --healthy --checkpoint wrapper &
one attn-ckptw "" --case attn --checkpoint wrapper &
one attn-healthy-fsdp1-ckptw "" --case attn --healthy --wrap fsdp1 --checkpoint wrapper &
one sawtooth-fsdp1 "" --case sawtooth --wrap fsdp1 &
one nan-fsdp1-ckptw "" --case nan --wrap fsdp1 --checkpoint wrapper &
# FSDP's mixed precision without autocast (FSDP2's param_dtype in fp16 with a GradScaler;
# FSDP1's MixedPrecision in fp16 with a ShardedGradScaler, and in bf16), and a ShardedGradScaler
# under autocast
one attn-fsdp2-mp16 "" --case attn --wrap fsdp --fsdp-mp fp16 &
one attn-healthy-fsdp2-mp16 "" --case attn --healthy --wrap fsdp --fsdp-mp fp16 &
one attn-fsdp1-mp16 "" --case attn --wrap fsdp1 --fsdp-mp fp16 &
one underflow-fsdp1-mp16 "" --case underflow --wrap fsdp1 --fsdp-mp fp16 &
one attn-healthy-fsdp1-mp16 "" --case attn --healthy --wrap fsdp1 --fsdp-mp fp16 &
one nan-fsdp1-mpbf16 "" --case nan --wrap fsdp1 --fsdp-mp bf16 &
one attn-healthy-fsdp1-mpbf16 "" --case attn --healthy --wrap fsdp1 --fsdp-mp bf16 &
one sawtooth-fsdp1-sharded "" --case sawtooth --wrap fsdp1 --sharded-scaler &
one attn-ddp "" --case attn --wrap ddp &
one attn-healthy-ddp "" --case attn --healthy --wrap ddp &
one nan-dp "" --case nan --wrap dp --device 0 &
one attn-fsdp "" --case attn --wrap fsdp &
one nan-fsdp "" --case nan --wrap fsdp &
one attn-healthy-fsdp "" --case attn --healthy --wrap fsdp &
one attn-healthy-fused "" --case attn --healthy --fused &
one underflow-fused "" --case underflow --fused &
one attn-clip "" --case attn --clip 1.0 &
one nan-scrub "" --case nan --scrub &
one nan-split "" --case nan --split &
one attn-healthy-split "" --case attn --healthy --split &
one attn-split-overflow "" --case attn --healthy --split --split-gain 1e6 &
one nan-watch2 "" --case nan --split --watch &
SCRIPT=gpu_join.py one join "" &
one nan-fork "" --case nan --loader fork &
one nan-spawn "" --case nan --loader spawn &
one attn-split-overflow-watch2 "" --case attn --healthy --split --split-gain 1e6 --watch &
one attn-died "" --case attn --healthy --die-at 6 &
one attn-killed "" --case attn --healthy --die-at 6 --die-how kill &
one attn-healthy-clip "" --case attn --healthy --clip 1e9 &
# the older spellings (torch.cuda.amp.*) and cudaProfilerStart/Stop, with CUDA traced too (not
# in the healthy twin: its tiny model's idle GPU is a warning of the report's)
TRACE=amp,cuda,nvtx one attn-legacy "" --case attn --legacy &
one attn-healthy-legacy "" --case attn --healthy --legacy &
# no GPU in sight (a laptop's view): CPU autocast, bf16 alone and fp16 with GradScaler("cpu")
for d in bf16 fp16; do
    CUDA_VISIBLE_DEVICES= SCRIPT=cpu_faults.py one "cpu-$d" "" --dtype "$d" &
    CUDA_VISIBLE_DEVICES= SCRIPT=cpu_faults.py one "cpu-$d-healthy" "" --dtype "$d" --healthy &
done
# ... the GradScaler's scale collapsing, a "model" with nothing to train, watch()'s arguments
CUDA_VISIBLE_DEVICES= SCRIPT=cpu_faults.py one cpu-scale "" --dtype fp16 --fault scale --steps 12 &
CUDA_VISIBLE_DEVICES= SCRIPT=cpu_faults.py one cpu-noparams "" --fault noparams &
CUDA_VISIBLE_DEVICES= SCRIPT=cpu_faults.py one cpu-api "" --fault api &
# ... no optimizer: the parameters updated by hand, gradients zeroed in place (and accumulated)
for n in 1 2; do
    CUDA_VISIBLE_DEVICES= SCRIPT=cpu_faults.py one "cpu-hand$n" "" --update hand --accum $n &
    CUDA_VISIBLE_DEVICES= SCRIPT=cpu_faults.py one "cpu-hand$n-healthy" "" --update hand \
        --accum $n --healthy &
done
wait
# bf16 without autocast or GradScaler: the model cast to bf16, FSDP2's param_dtype
one attn-healthy-bf16 "" --case attn --healthy --bf16 &
one residual-healthy-bf16 "" --case residual --healthy --bf16 &
one nan-bf16 "" --case nan --bf16 &
one residual-healthy-fsdp-bf16 "" --case residual --healthy --wrap fsdp --fsdp-mp bf16 &
one nan-fsdp-bf16 "" --case nan --wrap fsdp --fsdp-mp bf16 &
"$DIST/ampprobe" run --torch --trace amp -f -o "$WORK/inplace.sqlite" -- \
    python3 "$HERE/gpu_inplace.py" >"$WORK/inplace.log" 2>&1 &
for n in 1 3; do
    "$DIST/ampprobe" run --torch --trace amp -f -o "$WORK/scale$n.sqlite" -- \
        python3 "$HERE/gpu_scale.py" --stats-every $n >"$WORK/scale$n.log" 2>&1 &
done
wait
# torch.compile: the model wrapped (torch.compile(model)), compiled in place (model.compile()),
# or each block compiled in place
one attn-compile "" --case attn --compile wrap &
one nan-compile-blocks "" --case nan --compile blocks &
one attn-healthy-compile-blocks "" --case attn --healthy --compile blocks &
one residual-compile-inplace "" --case residual --compile inplace &
one fp32gemm-compile "" --case fp32gemm --compile wrap &
one log0-compile-inplace "" --case log0 --compile inplace &
one attn-healthy-compile "" --case attn --healthy --compile wrap &
one attn-healthy-compile-inplace "" --case attn --healthy --compile inplace &
wait
# torch.compile's CUDA graphs (mode="reduce-overhead")
one attn-compile-graphs "" --case attn --compile wrap --compile-mode reduce-overhead &
one nan-compile-blocks-graphs "" --case nan --compile blocks --compile-mode reduce-overhead &
one attn-healthy-compile-graphs "" --case attn --healthy --compile wrap --compile-mode reduce-overhead &
wait
two() { # NAME PORT ARGS...: gpu_faults.py in two processes (torchrun), one GPU each
    local name=$1 port=$2
    shift 2
    "$DIST/ampprobe" run --torch --trace amp -f -o "$WORK/$name.sqlite" -- python3 -m \
        torch.distributed.run --nproc_per_node 2 --master_port "$port" "$HERE/gpu_faults.py" "$@" \
        >"$WORK/$name.log" 2>&1
    echo $? >"$WORK/$name.rc"
    "$DIST/ampprobe" report "$WORK/$name.sqlite" --format json -o "$WORK/$name.json"
}
gpus=$(python3 -c 'import torch; print(torch.cuda.device_count())')
if [ "$gpus" -ge 2 ]; then # a model on GPU 1, the current device GPU 0
    one attn-gpu1 "" --case attn --device 1 &
    one residual-healthy-gpu1 "" --case residual --healthy --device 1 &
    wait
    # FSDP2 over two processes: broken steps searched per module (no forward re-run)
    two attn-fsdp2 29510 --case attn --wrap fsdp &
    two nan-fsdp2 29511 --case nan --wrap fsdp &
    two residual-fsdp2 29512 --case residual --wrap fsdp &
    two attn-healthy-fsdp2 29513 --case attn --healthy --wrap fsdp &
    # FSDP1 over two processes (sharded: not run yet on two GPUs, 2026-12-03)
    two attn-fsdp1x2 29514 --case attn --wrap fsdp1 &
    two attn-healthy-fsdp1x2 29515 --case attn --healthy --wrap fsdp1-flat &
    wait
fi
fail=0
PYTHONPATH="$DIST/python" python3 "$HERE/gpu_devstats.py" "$DIST/libamprecord.so" --bench || fail=1
for f in "$WORK"/*.rc; do # a script that died records little: that fails, healthy or not
    case $(basename "$f") in attn-died.rc | attn-killed.rc) continue ;; esac # (died on purpose)
    [ "$(cat "$f")" = 0 ] || { echo "FAIL $(basename "$f" .rc): exit status $(cat "$f")"; grep -m 3 -E "Error|error:" "${f%.rc}.log"; tail -5 "${f%.rc}.log"; fail=1; }
done
python3 "$HERE/check_report.py" "$WORK/nan-split.json" nan || fail=1
python3 "$HERE/check_report.py" "$WORK/attn-healthy-split.json" attn --healthy || fail=1
python3 "$HERE/check_report.py" "$WORK/attn-split-overflow.json" split || fail=1
python3 "$HERE/check_report.py" --added "$WORK/nan-split.sqlite" "$WORK/nan-split.log" 110 || fail=1
python3 "$HERE/check_report.py" --added "$WORK/attn-healthy-split.sqlite" \
    "$WORK/attn-healthy-split.log" "16.5 k" || fail=1
# watch() called on the model and on the second module: both recorded from step 0, one watcher
python3 "$HERE/check_report.py" "$WORK/nan-watch2.json" nan || fail=1
python3 "$HERE/check_report.py" "$WORK/attn-split-overflow-watch2.json" split || fail=1
python3 "$HERE/check_report.py" --added "$WORK/nan-watch2.sqlite" "$WORK/nan-watch2.log" 110 \
    --watch || fail=1
python3 "$HERE/check_report.py" --joined "$WORK/join.sqlite" "$WORK/join.log" || fail=1
# batches from DataLoader workers, forked or spawned: the same finding, one recording process
for s in fork spawn; do
    python3 "$HERE/check_report.py" "$WORK/nan-$s.json" nan || fail=1
    python3 "$HERE/check_report.py" --one-process "$WORK/nan-$s.sqlite" || fail=1
done
python3 "$HERE/check_report.py" "$WORK/attn-legacy.json" attn || fail=1
python3 "$HERE/check_report.py" "$WORK/attn-healthy-legacy.json" attn --healthy || fail=1
python3 "$HERE/check_report.py" --captured "$WORK/attn-legacy.sqlite" || fail=1
for d in bf16 fp16; do
    python3 "$HERE/check_report.py" "$WORK/cpu-$d.json" nan || fail=1
    python3 "$HERE/check_report.py" "$WORK/cpu-$d-healthy.json" nan --healthy || fail=1
    python3 "$HERE/check_report.py" --own-ops "$WORK/cpu-$d-healthy.sqlite" || fail=1
done
python3 "$HERE/check_report.py" --cpu-scale "$WORK/cpu-scale.sqlite" "$WORK/cpu-scale.json" || fail=1
python3 "$HERE/check_report.py" --no-model "$WORK/cpu-noparams.json" || fail=1
grep -h -e "watch() refused" -e "before scale()" "$WORK/cpu-api.log"
for n in 1 2; do
    python3 "$HERE/check_report.py" "$WORK/cpu-hand$n.json" nan || fail=1
    python3 "$HERE/check_report.py" "$WORK/cpu-hand$n-healthy.json" nan --healthy || fail=1
    python3 "$HERE/check_report.py" --loss "$WORK/cpu-hand$n-healthy.sqlite" \
        "$WORK/cpu-hand$n-healthy.log" || fail=1
    python3 "$HERE/check_report.py" --grad-norm "$WORK/cpu-hand$n-healthy.sqlite" \
        "$WORK/cpu-hand$n-healthy.log" || fail=1
done
python3 "$HERE/check_report.py" --died "$WORK/attn-died.sqlite" "$WORK/attn-died.json" 6 raise || fail=1
python3 "$HERE/check_report.py" --died "$WORK/attn-killed.sqlite" "$WORK/attn-killed.json" 6 kill || fail=1
[ "$(cat "$WORK/attn-died.rc")" = 1 ] || { echo "FAIL attn-died: exit status $(cat "$WORK/attn-died.rc"), not 1"; fail=1; }
[ "$(cat "$WORK/attn-killed.rc")" = 137 ] || { echo "FAIL attn-killed: exit status $(cat "$WORK/attn-killed.rc"), not 137"; fail=1; }
for c in $cases; do
    python3 "$HERE/check_report.py" "$WORK/$c.json" "$c" || fail=1
    python3 "$HERE/check_report.py" "$WORK/$c-healthy.json" "$c" --healthy || fail=1
done
for c in attn nan log0; do
    python3 "$HERE/check_report.py" "$WORK/$c-every5.json" "$c" || fail=1
done
python3 "$HERE/check_report.py" "$WORK/halfeps.json" halfeps || fail=1
python3 "$HERE/check_report.py" "$WORK/p-dict-bf16-scaler.json" dict --healthy || fail=1
python3 "$HERE/check_report.py" --bf16-scaler "$WORK/p-dict-bf16-scaler.json" || fail=1
python3 "$HERE/check_report.py" --clipped "$WORK/clip-scaled.json" || fail=1
python3 "$HERE/check_report.py" --clipped "$WORK/clip-unscaled.json" --none || fail=1
python3 "$HERE/check_report.py" --lost-updates "$WORK/lost-updates.json" || fail=1
python3 "$HERE/check_report.py" --lost-updates "$WORK/kept-updates.json" --none || fail=1
python3 "$HERE/check_report.py" --odd-gemm "$WORK/shapes-odd.json" || fail=1
python3 "$HERE/check_report.py" --odd-gemm "$WORK/shapes-padded.json" --none || fail=1
tail -qn1 "$WORK/shapes-odd.log" "$WORK/shapes-padded.log"
for c in $patterns; do
    python3 "$HERE/check_report.py" "$WORK/p-$c.json" "$c" || fail=1
    python3 "$HERE/check_report.py" "$WORK/p-$c-healthy.json" "$c" --healthy || fail=1
done
for c in hf lightning; do
    python3 "$HERE/check_report.py" "$WORK/fw-$c.json" "$c" || fail=1
    python3 "$HERE/check_report.py" "$WORK/fw-$c-healthy.json" "$c" --healthy || fail=1
    python3 "$HERE/check_report.py" "$WORK/fw-$c-bf16-healthy.json" "$c" --healthy || fail=1
    python3 "$HERE/check_report.py" --autocast "$WORK/fw-$c-healthy.sqlite" f16 || fail=1
    python3 "$HERE/check_report.py" --autocast "$WORK/fw-$c-bf16-healthy.sqlite" bf16 || fail=1
done
# (Lightning's bf16 loop hands the optimizer a closure that runs the forward and backward)
for c in hf-accum hf-ckpt lightning-bf16 lightning-accum lightning-bf16-accum; do
    python3 "$HERE/check_report.py" "$WORK/fw-$c.json" "${c%%-*}" || fail=1
done
# bf16 without a GradScaler: with --check-grads a NaN gradient is traced at its step (the
# parameter gradients' NaN/inf read at the step's end); without, per module when the step is
# recorded, the report saying what would trace it
python3 "$HERE/check_report.py" "$WORK/p-router-bf16.json" router || fail=1
python3 "$HERE/check_report.py" "$WORK/p-router-bf16-healthy.json" router --healthy || fail=1
python3 "$HERE/check_report.py" "$WORK/p-router-bf16-late.json" router-late || fail=1
# the bridge's replay of a broken step's loss computation leaves the program's state as it was:
# the random state (a dropout in the loss: the same batches and losses as without ampprobe) and
# the program's tensors (a running total of the loss: the same totals)
# (and a broken step's forward run again through FSDP1 leaves its training as it was)
same_steps() { # NAME LOG PLAIN_LOG
    if [ -n "$(grep '^step' "$2")" ] && diff <(grep '^step' "$3") <(grep '^step' "$2") >/dev/null
    then
        echo "PASS $1: the losses and totals printed with and without ampprobe are the same"
    else
        echo "FAIL $1: the losses or totals printed with and without ampprobe differ"; fail=1
    fi
}
for c in zerograd running gan; do
    python3 "$HERE/gpu_patterns.py" --case $c >"$WORK/p-$c-plain.log" 2>&1
    same_steps "$c" "$WORK/p-$c.log" "$WORK/p-$c-plain.log"
done
python3 "$HERE/gpu_frameworks.py" --case hf >"$WORK/fw-hf-plain.log" 2>&1
same_steps hf "$WORK/fw-hf.log" "$WORK/fw-hf-plain.log"
plain_twin() { # NAME ARGS...: gpu_faults.py ARGS without ampprobe prints run NAME's steps
    local name=$1
    shift
    python3 "$HERE/gpu_faults.py" "$@" >"$WORK/$name-plain.log" 2>&1
    same_steps "$name" "$WORK/$name.log" "$WORK/$name-plain.log"
}
plain_twin sawtooth-fsdp1 --case sawtooth --wrap fsdp1
plain_twin attn-fsdp1 --case attn --wrap fsdp1
# (a re-run stopped half-way through checkpoint_wrapper changed this one's training)
plain_twin nan-fsdp1-ckptw --case nan --wrap fsdp1 --checkpoint wrapper
python3 "$HERE/check_report.py" "$WORK/attn-eager.json" attn || fail=1
python3 "$HERE/check_report.py" --bwd "$WORK/sawtooth.sqlite" || fail=1
python3 "$HERE/check_report.py" --bwd "$WORK/sawtooth-fsdp1.sqlite" --per-module || fail=1
python3 "$HERE/check_report.py" "$WORK/sawtooth-fsdp1.json" sawtooth || fail=1
# without autocast (FSDP's mixed precision) the fix keeps the module's parameters in fp32
for c in attn-fsdp2-mp16 attn-fsdp1-mp16; do
    if grep -q "no autocast here" "$WORK/$c.json" && ! grep -q "enabled=False" "$WORK/$c.json"; then
        echo "PASS $c: the advice has no autocast to disable"
    else
        echo "FAIL $c: the advice says to disable autocast in a run without it"; fail=1
    fi
done
for k in fsdp1 fsdp1-flat ckptw; do # the model's ops alone in the op step, not the wrappers'
    python3 "$HERE/check_report.py" --same-ops "$WORK/attn-healthy.sqlite" \
        "$WORK/attn-healthy-$k.sqlite" || fail=1
done
python3 "$HERE/check_report.py" --ops "$WORK/attn-healthy.sqlite" || fail=1
python3 "$HERE/check_report.py" --mem "$WORK/attn-healthy.sqlite" || fail=1
for c in attn-accum:attn nan-accum:nan attn-ckpt:attn residual-ckptr:residual attn-ddp:attn \
    nan-dp:nan attn-fsdp:attn nan-fsdp:nan attn-compile-graphs:attn nan-compile-blocks-graphs:nan \
    nan-bf16:nan nan-fsdp-bf16:nan underflow-fused:underflow attn-clip:attn attn-fsdp1:attn \
    nan-fsdp1-flat:nan residual-fsdp1-ckptw:residual attn-ckptw:attn nan-fsdp1-ckptw:nan \
    attn-fsdp2-mp16:attn attn-fsdp1-mp16:attn underflow-fsdp1-mp16:underflow \
    nan-fsdp1-mpbf16:nan nan-bf16-accum:nan \
    sawtooth-fsdp1-sharded:sawtooth; do
    python3 "$HERE/check_report.py" "$WORK/${c%%:*}.json" "${c##*:}" || fail=1
done
for c in attn-compile:attn residual-compile-inplace:residual fp32gemm-compile:fp32gemm \
    log0-compile-inplace:log0 nan-compile-blocks:nan; do
    python3 "$HERE/check_report.py" "$WORK/${c%%:*}.json" "${c##*:}" || fail=1
done
for c in attn-healthy-compile attn-healthy-compile-inplace attn-healthy-compile-graphs; do
    python3 "$HERE/check_report.py" "$WORK/$c.json" attn --healthy || fail=1
    python3 "$HERE/check_report.py" --compiled "$WORK/$c.sqlite" "$WORK/$c.log" || fail=1
done
python3 "$HERE/check_report.py" "$WORK/attn-healthy-compile-blocks.json" attn --healthy || fail=1
python3 "$HERE/check_report.py" --compiled "$WORK/attn-healthy-compile-blocks.sqlite" \
    "$WORK/attn-healthy-compile-blocks.log" --blocks || fail=1
python3 "$HERE/check_report.py" "$WORK/attn-healthy-accum.json" attn --healthy || fail=1
python3 "$HERE/check_report.py" "$WORK/nan-scrub.json" nan --per-module || fail=1
python3 "$HERE/check_report.py" --same "$WORK/attn-healthy.sqlite" "$WORK/attn-healthy-fused.sqlite" \
    --step 0 || fail=1  # the gradients as backward left them, before the fused Adam unscales them
for c in attn-healthy-bf16:attn residual-healthy-bf16:residual residual-healthy-fsdp-bf16:residual \
    attn-healthy-fused:attn attn-healthy-fsdp2-mp16:attn attn-healthy-fsdp1-mp16:attn \
    attn-healthy-fsdp1-mpbf16:attn; do
    python3 "$HERE/check_report.py" "$WORK/${c%%:*}.json" "${c##*:}" --healthy || fail=1
done
for k in ddp fsdp clip fsdp1 ckptw fsdp1-ckptw; do
    python3 "$HERE/check_report.py" "$WORK/attn-healthy-$k.json" attn --healthy || fail=1
    python3 "$HERE/check_report.py" --same "$WORK/attn-healthy.sqlite" \
        "$WORK/attn-healthy-$k.sqlite" || fail=1
done
python3 "$HERE/check_report.py" --loss "$WORK/attn-healthy-accum.sqlite" \
    "$WORK/attn-healthy-accum.log" || fail=1
# the weight rows: every parameter as each step began
for c in blowup diverge blowup-fsdp1-flat; do
    python3 "$HERE/check_report.py" --weights "$WORK/$c-wmax.sqlite" "$WORK/$c-wmax.log" || fail=1
done
# FSDP1's flat parameters: the outputs' rows as the plain model's, the weights' the units'
python3 "$HERE/check_report.py" "$WORK/attn-healthy-fsdp1-flat.json" attn --healthy || fail=1
python3 "$HERE/check_report.py" --same "$WORK/attn-healthy.sqlite" \
    "$WORK/attn-healthy-fsdp1-flat.sqlite" --kinds activation,activation_grad || fail=1
python3 "$HERE/check_report.py" --weight-names "$WORK/attn-healthy-fsdp1-flat.sqlite" \
    _flat_param,blocks.0._flat_param,blocks.1._flat_param || fail=1
# ... but a frozen one (the frozen backbone's)
python3 "$HERE/check_report.py" --weight-names "$WORK/p-frozen-healthy.sqlite" \
    head.weight,head.bias || fail=1
for k in ckpt ckptr; do
    python3 "$HERE/check_report.py" "$WORK/attn-healthy-$k.json" attn --healthy || fail=1
    python3 "$HERE/check_report.py" --same "$WORK/attn-healthy.sqlite" \
        "$WORK/attn-healthy-$k.sqlite" || fail=1
done
if [ "$gpus" -ge 2 ]; then
    python3 "$HERE/check_report.py" "$WORK/attn-gpu1.json" attn || fail=1
    python3 "$HERE/check_report.py" --same "$WORK/residual-healthy.sqlite" \
        "$WORK/residual-healthy-gpu1.sqlite" || fail=1
    python3 "$HERE/check_report.py" "$WORK/attn-fsdp2.json" attn --per-module || fail=1
    python3 "$HERE/check_report.py" "$WORK/nan-fsdp2.json" nan || fail=1
    python3 "$HERE/check_report.py" "$WORK/residual-fsdp2.json" residual --per-module || fail=1
    python3 "$HERE/check_report.py" "$WORK/attn-healthy-fsdp2.json" attn --healthy || fail=1
    python3 "$HERE/check_report.py" "$WORK/attn-fsdp1x2.json" attn --per-module || fail=1
    python3 "$HERE/check_report.py" "$WORK/attn-healthy-fsdp1x2.json" attn --healthy || fail=1
else
    echo "SKIP a model on GPU 1 with GPU 0 current, FSDP2 and FSDP1 over two processes: one GPU"
fi
python3 "$HERE/gpu_inplace.py" --check "$WORK/inplace.sqlite" "$WORK/inplace.log" || fail=1
for n in 1 3; do
    python3 "$HERE/gpu_scale.py" --check "$WORK/scale$n.sqlite" "$WORK/scale$n.log" || fail=1
done
grep -q "eager torch reductions" "$WORK/attn-eager.log" || { echo "FAIL attn-eager: no warning"; fail=1; }

if [ "$QUICK" != --quick ]; then
    PYTHONPATH="$DIST/python" "$DIST/ampprobe" run --trace amp -f -o "$WORK/overhead.sqlite" -- \
        python3 "$HERE/../bench/torch_overhead.py" >"$WORK/overhead.log" 2>&1 || fail=1
    tail -8 "$WORK/overhead.log"
fi
exit $fail
