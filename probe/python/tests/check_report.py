#!/usr/bin/env python3
"""check_report.py — checks `ampprobe report --format json` of a gpu_faults.py run (run_gpu.sh).

  check_report.py REPORT.json CASE [--healthy | --per-module]
  check_report.py --bwd RUN.sqlite [--per-module]
  check_report.py --ops RUN.sqlite
  check_report.py --same RUN.sqlite OTHER.sqlite [--step N] [--kinds KIND,KIND...]
  check_report.py --same-ops RUN.sqlite OTHER.sqlite
  check_report.py --mem RUN.sqlite
  check_report.py --loss RUN.sqlite RUN.log
  check_report.py --weights RUN.sqlite RUN.log
  check_report.py --weight-names RUN.sqlite NAME,NAME...
  check_report.py --compiled RUN.sqlite RUN.log [--blocks]
  check_report.py --died RUN.sqlite REPORT.json STEP raise|kill
  check_report.py --added RUN.sqlite RUN.log VALUES [--watch]
  check_report.py --joined RUN.sqlite RUN.log
  check_report.py --one-process RUN.sqlite
  check_report.py --captured RUN.sqlite
  check_report.py --cpu-scale RUN.sqlite REPORT.json
  check_report.py --no-model REPORT.json
  check_report.py --bf16-scaler REPORT.json
  check_report.py --odd-gemm REPORT.json [--none]
  check_report.py --clipped REPORT.json [--none]
  check_report.py --own-ops RUN.sqlite
  check_report.py --autocast RUN.sqlite DTYPE

A faulty run's first finding must name the cause, layer and step the case planted (gpu_faults.py);
a healthy twin must have no error and no warning; --per-module: the run's forward was searched per
module (FSDP2 over several processes, a re-run that stayed finite), the attention overflow named at
a module in blocks.1.attn, a NaN batch no longer there at layers.0, the residual stream's overflow
"made in it" where a module's inputs were other modules' outputs. With --bwd, the run's gradient
overflows must have been traced op by op (the backward re-run): a backward nonfinite_producer event
naming a layer, a forward op and the autograd node it ran in; --bwd --per-module: named per module
from the statistics instead, saying so (FSDP1, whose backward hooks rule out a backward re-run).
With --ops, a TinyGPT run's op step (step 1) must be in AMP_OPS with autocast's decisions: the
attention's linear layers in f16 (lower_precision_fp), its softmax upcast to f32
(fp32_set_opt_dtype), the loss's cross_entropy at the top level in f32, every GEMM's FLOPs 2*M*N*K.
With --same, two runs of one seeded script (on different GPUs) must have recorded the same
statistics rows, step by step (--step: that step's; --kinds: of those kinds); with --same-ops, the
same op rows in their op steps (AMP_OPS: layer, op, dtypes, autocast's policy, shapes; a wrapper's
own code is none of the model's ops).
With --mem, the run's AMP_STEPS must hold torch's memory peak at its first step, every 100th and its
last (and only there), never falling. With --loss, every step's loss in AMP_STEPS must be the one
the script printed ("step N loss X": with gradient accumulation, the sum over the micro-batches of
what backward() took). With --weights, of a gpu_faults.py --print-wmax run, every step must have a
weight row per floating parameter (the number it printed), each under its own name and its module's
layer, their largest amax the largest |w| it printed as the step began; with --weight-names, every
step's weight rows must be of the parameters named and no other (a frozen one is not read). With
--compiled, a run of a model compiled as a whole (run with TORCH_LOGS=graph_breaks) must say so in
META, hold the statistics of its output and that output's gradient (the root layer's) and of every
parameter and its gradient at every step, nothing of the modules inside it, and its log no graph
break; with --blocks, of a model whose blocks are compiled (gpu_faults.py --compile blocks): META
says modules, each block's output and its gradient are there at every step, nothing of the modules
inside the blocks, the others as usual.
With --died, of a run that died at the start of STEP (gpu_faults.py --die-at STEP): an exception
must leave every step before STEP in AMP_STEPS (the bridge writes the last one out as Python exits)
and a run-end warning, "failed with exit status 1 after step STEP-1"; SIGKILL (0.3 s after the
script's last step: DESIGN.md's crash safety keeps what was recorded 200 ms before a death) every
step but the last, which the bridge records a step later, and a run-end warning "killed
by SIGKILL after step STEP-2".
With --added, of a run that trained a second top-level module (gpu_faults.py --split) under
`ampprobe run --torch`: META `added_models` must name it, "Linear (VALUES values) from step 1", the
script's output hold the bridge's note, and the statistics rows of step 1 on hold its output (layer
"Linear"), that output's gradient, its weight and that weight's gradient, none of step 0; with
--added ... --watch (gpu_faults.py --split --watch: watch() called on each), the same from step 0,
with watch()'s note. With --joined, of gpu_join.py's run: its second model, watched with its own
GradScaler under the name Critic, recorded in the first one's steps from step 0, and the note that
that GradScaler's updates are not recorded; the first model, a single Linear, with its own output's
rows (a model with no modules inside is read as one); a third model watched after that watcher
closed, in steps 4-6, seven steps and seven scale updates in all.
With --one-process, of a run whose batches came from DataLoader workers (gpu_faults.py --loader):
one process in AMP_PROCESSES and in AMP_STEPS, the training one.
With --captured, of a run with CUDA traced beside the bridge (gpu_faults.py --legacy): kernels in
every step (cudaProfilerStart/Stop do not stop ampprobe's capture), none dropped, a scale update
recorded at every step (the GradScaler made as torch.cuda.amp.GradScaler).
With --cpu-scale, of cpu_faults.py --dtype fp16 --fault scale (no statistics module: torch reads
the marked values): every skipped step's scale update halves the scale (scale_before twice
scale_after), and the report warns of the scale's collapse. With --no-model, of cpu_faults.py
--fault noparams: the run-end warning that the bridge found no model to watch. With --own-ops, of
a CPU run's op step: the bridge's own reductions (no statistics module: torch's) are not among
the program's ops. With --autocast, META must say autocast to DTYPE and hold no compute_dtype
(Hugging Face's Trainer, whose accelerate enters autocast inside the model's forward). With
--bf16-scaler, of a bf16 run that kept its GradScaler (gpu_patterns.py --bf16 --keep-scaler): one
loss-scale note (info) that the scaler protects nothing there. With --odd-gemm, of gpu_shapes.py:
one precision-placement warning naming its head (N=50257) and advising 50304; --none, of its padded
twin (--vocab 50304): no such finding. With --clipped, of gpu_faults.py --clip 0.5 --clip-scaled:
the loss-scale warning that the gradients were clipped while still scaled; --none, of the same
clip after scaler.unscale_: no such finding, no warning.
Prints one PASS/FAIL line; exits 1 on FAIL.
"""
import json
import math
import sqlite3
import sys

FAULT_STEP = 3


def expect(case, f, per_module=False):
    """None when finding f is what case should lead with, else what is wrong. per_module: the
    forward was searched per module (a model sharded over several processes, a re-run that
    stayed finite), so the attention overflow is named at its module, not at the op inside it,
    a NaN batch no longer there at the first module it went through, and the residual stream's
    overflow in a module whose inputs were other modules' finite outputs as made in it."""
    layer, op, first = f.get("layer") or "", f.get("op") or "", (f.get("steps") or {}).get("first")
    checks = {
        "attn": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
                and first == FAULT_STEP
                and ((per_module and layer.startswith("blocks.1.attn")) or
                     (layer == "blocks.1.attn" and op == "mul" and "fp16 overflow" in f["title"])),
        "residual": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
                    and layer.startswith("blocks.") and first == FAULT_STEP
                    # per module: made in it when its inputs were modules' outputs (not fc2's:
                    # a gelu of fc1's output)
                    and (not per_module or ("made in it" in f["title"]) != layer.endswith("fc2")),
        "nan": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
               and layer == "layers.0" and first == FAULT_STEP
               and (f["title"].startswith("NaN/inf in the input data") or
                    (per_module and f["title"].startswith("NaN first in the output of layers.0"))),
        "log0": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error" and op == "log"
                and layer in ("", "the top level") and first == FAULT_STEP,
        "underflow": f["severity"] == "warning" and (
            f["rule"] == "grad-underflow" or
            (f["rule"] == "loss-scale" and "stuck low" in f["title"])),
        "sawtooth": f["rule"] == "loss-scale" and f["severity"] == "warning"
                    and "sawtooth" in f["title"],
        "fp32gemm": f["rule"] == "precision-placement" and f["severity"] == "warning"
                    and layer == "layers.1" and op == "linear" and first == 1,
        # (the learning rate raised at step 3 moves the weights at its end: step 4's loss is the
        # first to show it; a loss that went non-finite after all ends the divergence there)
        "diverge": first is not None and FAULT_STEP < first <= FAULT_STEP + 3 and (
            (f["rule"] == "divergence" and f["severity"] in ("error", "warning")) or
            (f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
             and f["title"].startswith("training diverged"))),
        # (the update at the end of step 3 multiplies the weights a thousandfold: step 4's forward
        # overflows, which no precision would have survived)
        "blowup": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
                  and first == FAULT_STEP + 1 and layer.startswith("layers.")
                  and f["title"].startswith("the weights blew up before step %d"
                                            % (FAULT_STEP + 1)),
        # (model.half() under Adam's eps=1e-8: the first update divides by zero, the weights
        # are non-finite as step 1 begins)
        "halfeps": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
                   and first == 1 and " is stored in fp16 " in f["detail"]
                   and f["advice"].startswith("Keep fp32 master weights"),
        # gpu_patterns.py: model shapes beyond gpu_faults.py's
        "rnn": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
               and layer == "cell" and first == FAULT_STEP and "fp16 overflow" in f["title"],
        "lstm": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
                and layer == "lstm" and first == FAULT_STEP
                and f["title"].startswith("NaN/inf in the input data"),
        # (its q/k/v projection's weight x1e4: the forward stays finite, the loss jumps and
        # the gradients overflow at every scale)
        "mha": f["rule"] == "loss-scale" and f["severity"] == "warning"
               and "collapse" in f["title"] and first == FAULT_STEP,
        "dict": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
                and layer == "head" and first == FAULT_STEP and "fp16 overflow" in f["title"],
        "innerloss": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
                     and op == "log" and layer == "InnerLoss" and first == FAULT_STEP,
        "cl": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
              and layer == "conv" and first == FAULT_STEP
              and f["title"].startswith("NaN/inf in the input data"),
        "inplace": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
                   and op == "add" and layer == "InPlace" and first == FAULT_STEP
                   and "fp16 overflow" in f["title"],
        "setmask": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
                   and op == "cross_entropy" and layer in ("", "the top level")
                   and first == FAULT_STEP and "masked" in f["title"],
        "fwdmask": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
                   and op == "cross_entropy" and layer in ("", "the top level")
                   and first == FAULT_STEP and "masked" in f["title"],
        "tmask": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
                 and layer == "head" and first == FAULT_STEP and "fp16 overflow" in f["title"],
        "padrow": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
                  and layer in ("", "the top level", "PadRow") and first == FAULT_STEP
                  and "every position masked" in f["title"],
        "router": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
                  and op == "mul" and layer in ("", "the top level", "Router")
                  and first == FAULT_STEP and "left out" in f["title"],
        "router-late": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
                       and first == FAULT_STEP and "the optimizer stepped on them" in f["title"]
                       and "the backward of the code that reads gate linear's output"
                       in f["title"],
        # (sqrt's backward at a padding sample's norm of 0: inf at every scale, a division by 0)
        "norm0": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
                 and op == "sqrt" and layer in ("", "the top level", "Norm0")
                 and first == FAULT_STEP and "a division by 0" in f["title"],
        "std1": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
                and op == "std" and layer in ("", "the top level", "Std1")
                and first == FAULT_STEP and "std of a single value" in f["title"],
        "acos": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
                and op == "acos" and layer in ("", "the top level", "Angle")
                and first == FAULT_STEP and "rsqrt of 0" in f["title"],
        "hexp": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
                and op == "exp" and layer in ("", "the top level")
                and first == FAULT_STEP and "f32 overflow" in f["title"],
        # (sgd.step() called directly beside scaler.step(adam): from step 0 on)
        "twoopt": f["rule"] == "loss-scale" and f["severity"] == "error" and op == "SGD"
                  and first == 0 and "outside the GradScaler" in f["title"],
        "rawstep": f["rule"] == "loss-scale" and f["severity"] == "error" and op == "Adam"
                   and first == 0 and "outside the GradScaler" in f["title"],
        # (x * x in fp16 past 65504, then rsqrt(inf) = 0: every loss finite, the norm's zeros)
        "rmsnorm": f["rule"] == "overflow-headroom" and f["severity"] == "warning"
                   and op == "mul" and layer == "blocks.0.norm" and first == FAULT_STEP
                   and "overflow hidden" in f["title"],
        "prior": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
                 and layer == "head" and first == FAULT_STEP and "fp16 overflow" in f["title"],
        "gan": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
               and layer == "Disc.fc1" and first == FAULT_STEP and "fp16 overflow" in f["title"],
        "frozen": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
                  and first == FAULT_STEP and f["title"].startswith("NaN/inf in the input data"),
        # gpu_frameworks.py: Hugging Face's Trainer (the weight blown up by a callback)
        "hf": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
              and layer == "transformer.h.1.mlp.c_fc" and first == FAULT_STEP
              and "fp16 overflow" in f["title"],
        # gpu_faults.py --split --split-gain: the second module (a Linear) overflows
        "split": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
                 and layer == "Linear" and op == "linear" and first == FAULT_STEP
                 and "fp16 overflow" in f["title"],
    }
    checks["smooth"] = checks["setmask"]  # (label smoothing over the masked class)
    checks["zerograd"] = checks["log0"]  # (gpu_patterns.py's hand-written loss, zero_grad inside)
    checks["lightning"] = checks["nan"]  # (gpu_frameworks.py: a NaN batch, the MLP's layers)
    return None if checks[case] else "unexpected first finding"


def check_bwd(path, per_module=False):
    rows = sqlite3.connect(path).execute(
        "SELECT e.step, l.name, e.op, e.detail FROM AMP_EVENTS e LEFT JOIN AMP_LAYERS l "
        "ON l.pid = e.pid AND l.id = e.layer_id WHERE e.kind = 'nonfinite_producer' "
        "AND e.phase = 'bwd' ORDER BY e.id").fetchall()
    ok = bool(rows) and all(name and op and ("traced per module" in (detail or "") if per_module
                                             else (detail or "").startswith("in "))
                            for _, name, op, detail in rows)
    first = rows[0] if rows else None
    print("%s backward producers %s: %d events; first: %s" % (
        "PASS" if ok else "FAIL", "per module" if per_module else "op by op", len(rows),
        "step %s layer %s op %s: %s" % (first[0], first[1], first[2], (first[3] or "")[:160])
        if first else "none"), flush=True)
    return 0 if ok else 1


def check_ops(path):
    rows = sqlite3.connect(path).execute(
        "SELECT o.step, l.name, o.op, o.in_dtypes, o.out_dtype, o.policy, o.shapes, o.flops "
        "FROM AMP_OPS o LEFT JOIN AMP_LAYERS l ON l.pid = o.pid AND l.id = o.layer_id "
        "ORDER BY o.start_ns").fetchall()
    bad = []

    def want(what, ok):
        if not ok:
            bad.append(what)

    want("rows only at step 1", rows and all(r[0] == 1 for r in rows))
    qkv = [r for r in rows if r[1] == "blocks.0.attn.qkv" and r[2] == "linear"]
    want("blocks.0.attn.qkv linear f16 lower_precision_fp, 2*M*N*K",
         qkv and qkv[0][3] == "f16,f16,f16" and qkv[0][4] == "f16"
         and qkv[0][5] == "lower_precision_fp" and qkv[0][7] == 2 * 8 * 32 * 192 * 64)
    soft = [r for r in rows if r[1] == "blocks.1.attn" and r[2] == "softmax"]
    want("blocks.1.attn softmax f16 -> f32 fp32_set_opt_dtype",
         soft and soft[0][3] == "f16" and soft[0][4] == "f32"
         and soft[0][5] == "fp32_set_opt_dtype")
    ce = [r for r in rows if r[2] == "cross_entropy"]
    want("cross_entropy at the top level, f32", ce and ce[0][1] is None and ce[0][4] == "f32")
    print("%s op step: %d AMP_OPS rows%s" % ("FAIL" if bad else "PASS", len(rows),
                                               "; missing: " + "; ".join(bad) if bad else
                                               ", e.g. " + str(qkv[0][1:])), flush=True)
    return 1 if bad else 0


def _same_rows(q, a, b, what):
    """Whether query q gives the same rows (in any order, some) in databases a and b; said."""
    ra, rb = (sorted(sqlite3.connect(p).execute(q).fetchall(), key=repr) for p in (a, b))
    diff = [r for r in ra if r not in rb][:1] + [r for r in rb if r not in ra][:1]
    ok = bool(ra) and ra == rb
    print("%s the same %s in %s and %s: %d and %d rows%s" % (
        "PASS" if ok else "FAIL", what, a, b, len(ra), len(rb),
        "; first differing: %s" % diff if diff else ""), flush=True)
    return 0 if ok else 1


def check_same(a, b, step=None, kinds=None):
    """The same statistics rows in both databases (step: that step's only; kinds: of those
    kinds only)."""
    where = ([] if step is None else ["step = %d" % step]) + \
        ([] if kinds is None else ["kind IN (%s)" % ", ".join("'%s'" % k for k in kinds)])
    q = ("SELECT step, layer_id, op, kind, dtype, target_dtype, numel, min, max, n_nan, "
         "n_posinf, n_neginf, n_overflow, n_underflow, n_zero FROM AMP_TENSOR_STATS" +
         ("" if not where else " WHERE " + " AND ".join(where)))
    return _same_rows(q, a, b, "statistics rows" + ("" if step is None else " of step %d" % step))


def check_same_ops(a, b):
    """The same op rows (layer, op, dtypes, policy, shapes) in both databases' op steps."""
    q = ("SELECT o.step, l.name, o.op, o.in_dtypes, o.out_dtype, o.policy, o.shapes FROM AMP_OPS o "
         "LEFT JOIN AMP_LAYERS l ON l.pid = o.pid AND l.id = o.layer_id")
    return _same_rows(q, a, b, "op rows")


def check_mem(path):
    rows = sqlite3.connect(path).execute(
        "SELECT step, mem_peak_bytes FROM AMP_STEPS ORDER BY step").fetchall()
    last = rows[-1][0] if rows else None
    want = [(s, p) for s, p in rows if s % 100 == 0 or s == last]
    have = [(s, p) for s, p in rows if p is not None]
    ok = (bool(rows) and [s for s, _ in have] == [s for s, _ in want]
          and all(p > 0 for _, p in have) and all(a[1] <= b[1] for a, b in zip(have, have[1:])))
    print("%s memory peak at steps %s of %d: %s MiB" % (
        "PASS" if ok else "FAIL", [s for s, _ in have], len(rows),
        ", ".join("%.1f" % (p / 1048576) for _, p in have)), flush=True)
    return 0 if ok else 1


def _check_printed(path, log, column, key, what, differ):
    """AMP_STEPS.column against the values a script printed ("step N key X ..."): each printed
    step recorded, differ(recorded, printed) false for each."""
    got = dict(sqlite3.connect(path).execute("SELECT step, %s FROM AMP_STEPS" % column))
    want = {}
    for line in open(log):
        w = line.split()
        if len(w) >= 4 and w[0] == "step" and w[2] == key:
            want[int(w[1])] = float(w[3])
    bad = [(s, got.get(s), v) for s, v in want.items() if s not in got or differ(got[s], v)]
    ok = bool(want) and not bad
    print("%s %s of %d steps as the script printed them%s" % (
        "PASS" if ok else "FAIL", what, len(want), "; first differing (step, recorded, printed): "
        "%s" % (bad[0],) if bad else ""), flush=True)
    return 0 if ok else 1


def check_loss(path, log):
    def differ(g, v):  # (SQLite keeps a NaN as NULL)
        if g is None or math.isnan(g):
            return not math.isnan(v)
        return math.isnan(v) or abs(g - v) > 1e-5 * max(1.0, abs(v))
    return _check_printed(path, log, "loss", "loss", "losses", differ)


def check_grad_norm(path, log):
    """AMP_STEPS.grad_norm against the gradient norms a script printed ("step N grad_norm X"):
    equal to 1e-4 where the printed one is finite, non-finite (or NULL) where it is not."""
    def differ(g, v):
        if not math.isfinite(v):
            return g is not None and math.isfinite(g)
        return g is None or not abs(g - v) <= 1e-4 * max(1e-30, abs(v))
    return _check_printed(path, log, "grad_norm", "grad_norm", "gradient norms", differ)


def check_weights(path, log):
    """The weight rows of a gpu_faults.py --print-wmax run: at every step one row per floating
    parameter (the number the script printed), each under its own name and its module's layer,
    their largest amax what the script printed as the step began (before its forward)."""
    want, params = {}, None
    for line in open(log):
        w = line.split()
        if len(w) == 2 and w[0] == "params":
            params = int(w[1])
        if len(w) == 4 and w[0] == "step" and w[2] == "wmax":
            want[int(w[1])] = float(w[3])
    got = {s: (amax, n, names, nolayer) for s, amax, n, names, nolayer in sqlite3.connect(
        path).execute("SELECT step, max(amax), count(*), count(DISTINCT op), "
                      "sum(layer_id IS NULL OR layer_id < 0) FROM AMP_TENSOR_STATS "
                      "WHERE kind = 'weight' GROUP BY step")}
    bad = [(s, v, got.get(s)) for s, v in sorted(want.items())
           if s not in got or got[s][1:] != (params, params, 0)
           or abs(got[s][0] - v) > 1e-6 * abs(v)]
    ok = bool(want) and params is not None and not bad
    print("%s weight rows of %d steps, %s parameters, their largest |w| as the script printed "
          "it%s" % ("PASS" if ok else "FAIL", len(want), params,
                    "; first differing (step, printed, (recorded, rows, names, no layer)): %s"
                    % (bad[0],) if bad else ""), flush=True)
    return 0 if ok else 1


def check_weight_names(path, names):
    """The weight rows of every step are of these parameters alone (gpu_patterns.py --case
    frozen: its head's, not its frozen backbone's)."""
    db = sqlite3.connect(path)
    got = db.execute(
        "SELECT step, group_concat(op) FROM (SELECT step, op FROM AMP_TENSOR_STATS WHERE kind = "
        "'weight' ORDER BY step, op) GROUP BY step").fetchall()
    steps = db.execute("SELECT count(*) FROM AMP_STEPS").fetchone()[0]
    want = ",".join(sorted(names))
    bad = [(s, ops) for s, ops in got if ops != want]
    ok = bool(got) and len(got) == steps and not bad
    print("%s weight rows of %s alone at %d of %d steps%s" % (
        "PASS" if ok else "FAIL", want, len(got), steps,
        "; first differing (step, names): %s" % (bad[0],) if bad else ""), flush=True)
    return 0 if ok else 1


def check_compiled(path, log, blocks=False):
    db = sqlite3.connect(path)
    meta = db.execute("SELECT value FROM META WHERE key = 'compiled'").fetchall()
    steps = db.execute("SELECT count(*) FROM AMP_STEPS").fetchone()[0]
    breaks = sum("Graph break" in line for line in open(log))
    if blocks:
        return check_compiled_blocks(db, path, meta, steps, breaks)
    rows = db.execute("SELECT l.parent_id IS NULL, s.kind, count(*), count(DISTINCT s.step), "
                      "count(DISTINCT s.layer_id) FROM AMP_TENSOR_STATS s JOIN AMP_LAYERS l "
                      "ON l.pid = s.pid AND l.id = s.layer_id GROUP BY 1, 2").fetchall()
    got = {(bool(root), kind): (n, nsteps, nlayers) for root, kind, n, nsteps, nlayers in rows}
    bad = []
    if meta != [("model",)]:
        bad.append("META compiled %s" % meta)
    for kind in ("activation", "activation_grad"):
        if got.get((True, kind), (0, 0, 0))[1:] != (steps, 1):
            bad.append("root %s rows %s of %d steps" % (kind, got.get((True, kind)), steps))
        if (False, kind) in got:
            bad.append("%s rows inside the compiled model %s" % (kind, got[(False, kind)]))
    for kind in ("weight", "weight_grad"):
        if got.get((False, kind), (0, 0, 0))[1] != steps:
            bad.append("%s rows %s of %d steps" % (kind, got.get((False, kind)), steps))
    if breaks:
        bad.append("%d graph breaks in the log" % breaks)
    print("%s compiled model in %s: %s" % ("FAIL" if bad else "PASS", path, "; ".join(bad) or
                                          "%d steps, rows %s, no graph break" % (steps, got)),
          flush=True)
    return 1 if bad else 0


def check_compiled_blocks(db, path, meta, steps, breaks):
    rows = db.execute("SELECT l.name, count(DISTINCT s.step) FROM AMP_TENSOR_STATS s JOIN "
                      "AMP_LAYERS l ON l.pid = s.pid AND l.id = s.layer_id WHERE s.kind IN "
                      "('activation', 'activation_grad') GROUP BY 1, s.kind").fetchall()
    names = {n.split(".")[0] + "." + n.split(".")[1] for n, _ in rows if n.count(".") >= 1}
    blocks = sorted(n for n in names if n.split(".")[0] in ("blocks", "layers"))
    bad = []
    if meta != [("modules",)]:
        bad.append("META compiled %s" % meta)
    if not blocks:
        bad.append("no block recorded")
    for b in blocks:
        have = [k for n, k in rows if n == b]
        if have != [steps, steps]:
            bad.append("%s: activation and gradient rows at %s of %d steps" % (b, have, steps))
    inner = sorted({n for n, _ in rows if any(n.startswith(b + ".") for b in blocks)})
    if inner:
        bad.append("rows inside the compiled blocks: %s" % inner[:3])
    others = sorted({n for n, _ in rows} - set(blocks))
    if not others:
        bad.append("no module outside the blocks recorded")
    if breaks:
        bad.append("%d graph breaks in the log" % breaks)
    print("%s compiled blocks in %s: %s" % ("FAIL" if bad else "PASS", path, "; ".join(bad) or
                                           "%d steps, blocks %s, others %s, no graph break"
                                           % (steps, blocks, others)), flush=True)
    return 1 if bad else 0


def check_died(path, report, step, how):
    steps = [s for (s,) in
             sqlite3.connect(path).execute("SELECT step FROM AMP_STEPS ORDER BY step")]
    ends = [f for f in json.load(open(report)).get("findings", []) if f["rule"] == "run-end"]
    title = ends[0]["title"] if ends else None
    last = steps[-1] if steps else -1
    if how == "raise":
        want = "the program failed with exit status 1 after step %d" % (step - 1)
        ok = steps == list(range(step)) and title == want
    else:  # the bridge records a step a step later: the last one died with it
        want = "the program was killed by SIGKILL after step %d" % (step - 2)
        ok = steps == list(range(step - 1)) and title == want
    ok = ok and len(ends) == 1 and ends[0]["severity"] == "warning"
    print("%s a run that died at step %d (%s): steps %s, run-end %s" % (
        "PASS" if ok else "FAIL", step, how, "0-%d" % last if steps else "none",
        [(f["severity"], f["title"]) for f in ends]), flush=True)
    return 0 if ok else 1


def check_added(path, log, values, watched=False):
    db = sqlite3.connect(path)
    rows = db.execute("SELECT value FROM META WHERE key = 'added_models'").fetchall()
    start = 0 if watched else 1
    want = "Linear (%s values) from step %d" % (values, start)
    said = ("recorded beside MLP, watched first, from step 0 on" if watched else
            "recorded too from step 1 on") in open(log).read()
    kinds = db.execute(
        "SELECT s.kind, min(s.step), count(DISTINCT s.step) FROM AMP_TENSOR_STATS s JOIN "
        "AMP_LAYERS l ON l.pid = s.pid AND l.id = s.layer_id WHERE l.name = 'Linear' "
        "GROUP BY s.kind ORDER BY s.kind").fetchall()
    steps = db.execute("SELECT count(*) FROM AMP_STEPS").fetchone()[0]
    ok = rows == [(want,)] and said and [k for k, _, _ in kinds] == [
        "activation", "activation_grad", "weight", "weight_grad"] and all(
        first == start and n == steps - start for _, first, n in kinds)
    print("%s a second model recorded from step %d%s: META %s (want %r), %s, its rows (kind, "
          "first step, steps) %s of %d steps" % (
              "PASS" if ok else "FAIL", start, " (watch() on each)" if watched else "", rows,
              want, "noted" if said else "no note in the log", kinds, steps), flush=True)
    return 0 if ok else 1


def check_joined(path, log):
    """gpu_join.py's run: the second model (watch(..., name="Critic")) recorded in the first
    one's steps from step 0 (every step: its stats_every=5 not applied, as noted), and the note
    that its own GradScaler's updates are not; the first model, a single Linear, with its
    output's rows too; a third, watched after the first watcher closed, in steps 4-6 (the
    steps and the scale updates numbered on, none written over)."""
    db = sqlite3.connect(path)
    meta = db.execute("SELECT value FROM META WHERE key = 'added_models'").fetchall()
    kinds = ("SELECT s.kind, min(s.step), count(DISTINCT s.step) FROM AMP_TENSOR_STATS s JOIN "
             "AMP_LAYERS l ON l.pid = s.pid AND l.id = s.layer_id WHERE l.name = ? "
             "GROUP BY s.kind ORDER BY s.kind")
    critic, gen, after = (db.execute(kinds, (name,)).fetchall()
                          for name in ("Critic", "Linear", "After"))
    steps = db.execute("SELECT count(*) FROM AMP_STEPS").fetchone()[0]
    scales = db.execute("SELECT count(*), count(DISTINCT step), min(step), max(step) "
                        "FROM AMP_SCALE").fetchone()
    text = open(log).read()
    noted = "its GradScaler is not Linear's" in text and "PASS watch()" in text and \
        "stats_every=5 not applied" in text

    def every(first, n):
        return [(kind, first, n) for kind in
                ("activation", "activation_grad", "weight", "weight_grad")]
    ok = meta == [("Critic (9 values) from step 0",)] and noted and critic == every(0, 4) and \
        gen == every(0, 4) and after == every(4, 3) and steps == 7 and scales == (7, 7, 0, 6)
    print("%s watch() on two models: META %s, %s, rows (kind, first step, steps) of Critic %s "
          "and Linear %s; then a third watched after closing: %s; %d steps, AMP_SCALE (rows, "
          "steps, first, last) %s" % (
              "PASS" if ok else "FAIL", meta, "noted" if noted else
              "no note (or no PASS) in the log", critic, gen, after, steps, scales), flush=True)
    return 0 if ok else 1


def check_one_process(path):
    """Only the training process recorded (gpu_faults.py --loader: its DataLoader's worker
    processes, forked or spawned, did not)."""
    db = sqlite3.connect(path)
    procs = db.execute("SELECT count(*) FROM AMP_PROCESSES").fetchone()[0]
    pids = db.execute("SELECT count(DISTINCT pid) FROM AMP_STEPS").fetchone()[0]
    steps = db.execute("SELECT count(*) FROM AMP_STEPS").fetchone()[0]
    ok = procs == 1 and pids == 1 and steps > 0
    print("%s one recording process in %s: %d in AMP_PROCESSES, %d in AMP_STEPS (%d steps)" % (
        "PASS" if ok else "FAIL", path, procs, pids, steps), flush=True)
    return 0 if ok else 1


def check_captured(path):
    """CUDA traced beside the bridge (gpu_faults.py --legacy: cudaProfilerStart/Stop around the
    fault's steps): kernels in every step, none dropped, and the scale updates of the older
    GradScaler's spelling recorded at every step."""
    db = sqlite3.connect(path)
    q = lambda sql: db.execute(sql).fetchone()[0]  # noqa: E731
    steps = q("SELECT count(*) FROM AMP_STEPS")
    without = q("SELECT count(*) FROM AMP_STEPS s WHERE NOT EXISTS (SELECT 1 FROM "
                "CUPTI_ACTIVITY_KIND_KERNEL k WHERE k.start >= s.start_ns AND k.start < s.end_ns)")
    kernels = q("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    dropped = q("SELECT value FROM META WHERE key = 'cupti_dropped'")
    scales = q("SELECT count(*) FROM AMP_SCALE")
    ok = steps > 0 and without == 0 and kernels > 0 and dropped == "0" and scales == steps
    print("%s CUDA traced with the bridge in %s: %d steps, %d without a kernel, %d kernels, "
          "dropped %s, %d scale updates" % ("PASS" if ok else "FAIL", path, steps, without,
                                            kernels, dropped, scales), flush=True)
    return 0 if ok else 1


def check_cpu_scale(path, report):
    db = sqlite3.connect(path)
    rows = db.execute("SELECT step, scale_before, scale_after, skipped FROM AMP_SCALE "
                      "ORDER BY step").fetchall()
    skipped = [r for r in rows if r[3]]
    halved = [r for r in skipped if r[1] == 2 * r[2]]
    r = json.load(open(report))
    rules = [(f["rule"], f["severity"], f["title"]) for f in r.get("findings", [])]
    collapse = [t for t in rules if t[0] == "loss-scale" and "collapse" in t[2]]
    ok = len(skipped) >= 3 and len(halved) == len(skipped) and bool(collapse)
    print("%s the GradScaler's updates on the CPU in %s: %d skipped, %d halving the scale "
          "(first %s); the report: %s" % ("PASS" if ok else "FAIL", path, len(skipped),
                                          len(halved), skipped[:1], collapse or rules[:3]),
          flush=True)
    return 0 if ok else 1


def check_no_model(report):
    r = json.load(open(report))
    fs = r.get("findings", [])
    said = [f for f in fs if f["rule"] == "run-end" and f["severity"] == "warning"
            and "found no model to watch" in f["title"]]
    ok = bool(said) and r["verdict"].startswith("No training step was recorded")
    print("%s a run with no model to watch: %s" % ("PASS" if ok else "FAIL", r["verdict"]),
          flush=True)
    return 0 if ok else 1


# the titles of the findings the checks below look for
BF16_SCALER = "a GradScaler in a bf16 run"
ODD_GEMM = "16-bit GEMMs with a dimension not a multiple of 8"
CLIPPED = "gradients clipped while still scaled"
LOST_UPDATES = "optimizer updates rounded away in"


def titled(r, start):
    """The findings of report r (json) whose title starts with start."""
    return [f for f in r.get("findings", []) if f["title"].startswith(start)]


def _check_titled(r, start, what, ok_of):
    """Report r's findings titled start, judged by ok_of(them): one PASS/FAIL line."""
    found = titled(r, start)
    ok = ok_of(found)
    print("%s %s: %s" % ("PASS" if ok else "FAIL", what, [f["title"] for f in found] or "none"),
          flush=True)
    return 0 if ok else 1


def _one(found, rule, severity):
    return len(found) == 1 and found[0]["rule"] == rule and found[0]["severity"] == severity


def check_bf16_scaler(r):
    """gpu_patterns.py --bf16 --keep-scaler: one loss-scale note that the scaler is needless."""
    return _check_titled(r, BF16_SCALER, "a GradScaler kept in bf16",
                         lambda found: _one(found, "loss-scale", "info"))


def check_odd_gemm(r, padded):
    """gpu_shapes.py's head over 50257 named, 50304 advised; its padded twin (--none) clean."""
    return _check_titled(
        r, ODD_GEMM, "odd GEMM dimensions" + (" (padded)" if padded else ""),
        lambda found: not found if padded else
        _one(found, "precision-placement", "warning") and found[0]["layer"] == "head" and
        "N 50257 -> 50304" in found[0]["advice"])


def check_lost_updates(r, kept):
    """gpu_faults.py --bf16 --lr 1e-5 (the model cast to bf16, Adam over it): the lost-updates
    warning, nearly every update rounded away, its advice fp32 master weights under autocast;
    --none, of the same run with fp32 weights under autocast: no such finding."""
    return _check_titled(
        r, LOST_UPDATES, "updates of bf16 weights " + ("kept (fp32 master weights)" if kept
                                                       else "rounded away"),
        lambda found: not found if kept else
        _one(found, "lost-updates", "warning") and
        found[0]["evidence"]["lost_share"] > 0.9 and
        "torch.autocast(\"cuda\", dtype=torch.bfloat16)" in found[0]["advice"])


def check_clipped(r, unscaled):
    """gpu_faults.py --clip 0.5 --clip-scaled: the loss-scale warning, its advice the recipe's
    order; --none, of the same clip after unscale_: no such finding and no warning at all."""
    return _check_titled(
        r, CLIPPED, "gradients clipped " + ("after unscale_" if unscaled else "while scaled"),
        lambda found: not [f for f in r.get("findings", [])
                           if f["severity"] in ("error", "warning")] if unscaled else
        _one(found, "loss-scale", "warning") and
        "clip_grad_norm_(params, 0.5)" in found[0]["advice"])


def check_autocast(path, dtype):
    """Autocast to dtype recorded (META autocast_dtype), and no compute_dtype: an autocast that
    a framework enters inside the model's forward (accelerate's) is autocast all the same."""
    meta = dict(sqlite3.connect(path).execute(
        "SELECT key, value FROM META WHERE key IN ('autocast_dtype', 'compute_dtype')"))
    ok = meta == {"autocast_dtype": dtype}
    print("%s autocast to %s in %s: %s" % ("PASS" if ok else "FAIL", dtype, path, meta or "none"),
          flush=True)
    return 0 if ok else 1


def check_own_ops(path):
    db = sqlite3.connect(path)
    ops = db.execute("SELECT count(*) FROM AMP_OPS").fetchone()[0]
    own = db.execute("SELECT op, in_dtypes, out_dtype, count(*) FROM AMP_OPS WHERE op IN "
                     "('where', 'amax', 'amin', 'isnan', 'isfinite', 'stack', 'abs') OR "
                     "out_dtype = 'f64' GROUP BY 1, 2, 3").fetchall()
    ok = ops > 0 and not own
    print("%s the op step of %s: %d ops, of the bridge's own %s" % (
        "PASS" if ok else "FAIL", path, ops, own or "none"), flush=True)
    return 0 if ok else 1


def main():
    if sys.argv[1] == "--cpu-scale":
        return check_cpu_scale(sys.argv[2], sys.argv[3])
    if sys.argv[1] == "--no-model":
        return check_no_model(sys.argv[2])
    if sys.argv[1] == "--bf16-scaler":
        return check_bf16_scaler(json.load(open(sys.argv[2])))
    if sys.argv[1] == "--lost-updates":
        return check_lost_updates(json.load(open(sys.argv[2])), "--none" in sys.argv[3:])
    if sys.argv[1] == "--clipped":
        return check_clipped(json.load(open(sys.argv[2])), "--none" in sys.argv[3:])
    if sys.argv[1] == "--odd-gemm":
        return check_odd_gemm(json.load(open(sys.argv[2])), "--none" in sys.argv[3:])
    if sys.argv[1] == "--autocast":
        return check_autocast(sys.argv[2], sys.argv[3])
    if sys.argv[1] == "--own-ops":
        return check_own_ops(sys.argv[2])
    if sys.argv[1] == "--captured":
        return check_captured(sys.argv[2])
    if sys.argv[1] == "--one-process":
        return check_one_process(sys.argv[2])
    if sys.argv[1] == "--joined":
        return check_joined(sys.argv[2], sys.argv[3])
    if sys.argv[1] == "--added":
        return check_added(sys.argv[2], sys.argv[3], sys.argv[4], "--watch" in sys.argv[5:])
    if sys.argv[1] == "--died":
        return check_died(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    if sys.argv[1] == "--compiled":
        return check_compiled(sys.argv[2], sys.argv[3], "--blocks" in sys.argv[4:])
    if sys.argv[1] == "--loss":
        return check_loss(sys.argv[2], sys.argv[3])
    if sys.argv[1] == "--grad-norm":
        return check_grad_norm(sys.argv[2], sys.argv[3])
    if sys.argv[1] == "--weights":
        return check_weights(sys.argv[2], sys.argv[3])
    if sys.argv[1] == "--weight-names":
        return check_weight_names(sys.argv[2], sys.argv[3].split(","))
    if sys.argv[1] == "--mem":
        return check_mem(sys.argv[2])
    if sys.argv[1] == "--same":
        opts = dict(zip(sys.argv[4::2], sys.argv[5::2]))
        return check_same(sys.argv[2], sys.argv[3],
                          int(opts["--step"]) if "--step" in opts else None,
                          opts["--kinds"].split(",") if "--kinds" in opts else None)
    if sys.argv[1] == "--same-ops":
        return check_same_ops(sys.argv[2], sys.argv[3])
    if sys.argv[1] == "--bwd":
        return check_bwd(sys.argv[2], "--per-module" in sys.argv[3:])
    if sys.argv[1] == "--ops":
        return check_ops(sys.argv[2])
    path, case = sys.argv[1], sys.argv[2]
    healthy = "--healthy" in sys.argv[3:]
    r = json.load(open(path))
    fs = r.get("findings", [])
    top = fs[0] if fs else None
    desc = ("%s %s layer=%s op=%s steps=%s: %s" % (top["rule"], top["severity"], top.get("layer"),
            top.get("op"), top.get("steps"), top["title"])) if top else "no findings"
    if healthy:
        bad = r["counts"]["error"] + r["counts"]["warning"]
        ok = bad == 0
        why = "" if ok else "%d error/warning findings" % bad
    else:
        why = expect(case, top, "--per-module" in sys.argv[3:]) if top else "no findings"
        ok = why is None
    print("%s %s%s: %s%s" % ("PASS" if ok else "FAIL", case, " (healthy)" if healthy else "",
                             desc, "" if ok else "  <- " + why), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
