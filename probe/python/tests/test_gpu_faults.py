"""test_gpu_faults.py — the bridge's failure scripts as pytest cases, on the GPU machine:

    AMPPROBE_DIST=build/cuda python3 -m pytest probe/python/tests/test_gpu_faults.py

Each gpu_faults.py case (attention-logit overflow, residual blow-up, NaN batch, log(0) in an fp16
loss, gradient underflow at scale 1, scale sawtooth, an fp32 island, a learning rate raised
until the training diverges) trains under `ampprobe run
--torch --trace amp`, faulty and healthy: the faulty run's report must lead with the case's cause,
layer and step (check_report.expect, which run_gpu.sh uses too), its healthy twin's report must
hold no error and no warning. The same with the gradients of 4 micro-batches accumulated a step
(the step's loss recorded as the script computed it) and with activation checkpointing of both
kinds and through checkpoint_wrapper (the same statistics rows as without it), through
DistributedDataParallel, FSDP2 and FSDP1 (one process; the same rows as without them, FSDP1's
flat parameters recorded as they are) and DataParallel (one GPU), and compiled
(torch.compile(model), model.compile() and each block compiled, also with CUDA graphs: no graph
break, the statistics a compiled model has; `-k compile`), and in bf16 without autocast (a
model cast to bf16, FSDP2's param_dtype: the NaN batch found, healthy runs clean); a script that
raises or is SIGKILLed mid-run keeps its steps and the report says how it ended; a second module
trained beside the model is recorded from step 1 on, and its own overflow named there (from step
0 when the script calls watch() on each; gpu_join.py); batches from DataLoader workers change
nothing and record nothing; the AMP API's older spellings with CUDA traced find the same and
lose no kernel; a model trained on the CPU with no GPU visible has its NaN batch found, and
there watch()'s bad arguments are refused and a GradScaler used before scale() fails as PyTorch's
does (`-k api`); and
gpu_patterns.py's model shapes (a cell called in a loop, an LSTM, nn.MultiheadAttention, a dict
output, a frozen backbone, zero_grad() between the forward and backward(), a loss computed in the
forward, channels_last convolutions, a residual added in place, logits masked by item
assignment in the loss or in the forward, a float causal mask passed in, a sample padded
whole, a GAN's two models with an optimizer each and one GradScaler), faulty and healthy
(`-k shapes`); Hugging Face's Trainer and Lightning's, fp16 and bf16 (gpu_frameworks.py,
`-k frameworks`); a model cast to fp16 under Adam's eps=1e-8 named with that eps (`-k half`), a
GradScaler kept in bf16 noted (`-k gradscaler`), and a head over a vocabulary of 50257 warned of
its odd GEMM dimension, CUDA traced (gpu_shapes.py, `-k odd_gemm`); gradients clipped before
scaler.unscale_ warned of, after it not (`-k clipped`); with statistics every 5 steps, a fault
at a step without them found as at every step (`-k without_statistics`); every GradScaler
update recorded as the scaler made it, with statistics every step and every 3 (`-k scale`). Skipped
without torch, without a GPU, or without AMPPROBE_DIST (the build folder that holds ampprobe
and python/). run_gpu.sh runs the same cases in parallel and the GPU checks beyond them.
"""
import json
import os
import sqlite3
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_report  # noqa: E402  (the expectations, shared with run_gpu.sh)

torch = pytest.importorskip("torch")
DIST = os.environ.get("AMPPROBE_DIST")
pytestmark = pytest.mark.skipif(not DIST or not torch.cuda.is_available(),
                                reason="needs a GPU and AMPPROBE_DIST (a CUDA build of ampprobe)")
CASES = ["attn", "residual", "nan", "log0", "underflow", "sawtooth", "fp32gemm", "diverge",
         "blowup"]


def record(tmp_path, case, healthy, extra=(), status=0, script="gpu_faults.py", trace="amp",
           env=None, run_opts=()):
    """Runs the case of script (None: a script without cases) under ampprobe run --torch
    --trace trace and run_opts (torch.compile's graph breaks logged; Python's tracebacks of every
    thread on a fatal signal, for a rare abort at exit; env: more environment), which must exit
    with status; returns the database and the script's output (stdout and stderr)."""
    ampprobe = os.path.join(os.path.abspath(DIST), "ampprobe")
    db = str(tmp_path / ("%s%s%s.sqlite" % (case or script[:-3], "-healthy" if healthy else "",
                                            "".join(extra).replace("-", ""))))
    run = subprocess.run([ampprobe, "run", "--torch", "--trace", trace, *run_opts, "-f", "-o", db,
                          "--", sys.executable, os.path.join(HERE, script)]
                         + (["--case", case] if case else [])
                         + (["--healthy"] if healthy else []) + list(extra),
                         capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, TORCH_LOGS="graph_breaks", PYTHONFAULTHANDLER="1",
                                  **(env or {})))
    assert run.returncode == status, "the script ended with %d:\n" % run.returncode + \
        run.stdout[-2000:] + run.stderr[-2000:]
    return db, run.stdout + run.stderr


def write_log(tmp_path, out):
    """The script's output in a file, for check_report's checks against what it printed."""
    log = tmp_path / "out.log"
    log.write_text(out)
    return log


def report(db):
    """The report of a recorded run, as json."""
    ampprobe = os.path.join(os.path.abspath(DIST), "ampprobe")
    rep = subprocess.run([ampprobe, "report", db, "--format", "json"], capture_output=True,
                         text=True, timeout=300)
    assert rep.returncode == 0, rep.stderr
    return json.loads(rep.stdout)


def report_of(tmp_path, case, healthy, extra=(), script="gpu_faults.py"):
    """Runs the case under ampprobe run --torch; returns its report as json."""
    return report(record(tmp_path, case, healthy, extra, script=script)[0])


def assert_clean(r):
    """A healthy run's report: no error or warning."""
    bad = [f for f in r["findings"] if f["severity"] in ("error", "warning")]
    assert not bad, bad[:2]


def assert_names(r, case, per_module=False):
    """A faulty run's report: its first finding names case's fault (check_report.expect)."""
    assert r["findings"], "no findings"
    top = r["findings"][0]
    assert check_report.expect(case, top, per_module) is None, top


def assert_diagnosed(r, case, healthy):
    """The report of case's run: its first finding names the fault, or the healthy twin's is
    clean."""
    if healthy:
        assert_clean(r)
    else:
        assert_names(r, case)


@pytest.mark.parametrize("case", CASES)
def test_first_finding_names_the_fault(tmp_path, case):
    r = report_of(tmp_path, case, healthy=False)
    assert_names(r, case)


@pytest.mark.parametrize("case", CASES)
def test_healthy_twin_is_clean(tmp_path, case):
    r = report_of(tmp_path, case, healthy=True)
    assert_clean(r)


@pytest.mark.parametrize("case", ["attn", "nan", "log0"])
def test_fault_at_a_step_without_statistics(tmp_path, case):
    """Statistics every 5 steps: the fault's step 3 has none, and its break is found and traced
    as at every step."""
    db, _ = record(tmp_path, case, False, run_opts=("--stats-every", "5"))
    assert_names(report(db), case)


# model shapes (gpu_patterns.py's docstring)
SHAPES = ["rnn", "lstm", "mha", "dict", "frozen", "zerograd", "innerloss", "cl", "inplace",
          "setmask", "fwdmask", "tmask", "padrow", "router", "prior", "norm0", "std1",
          "acos", "hexp", "smooth", "rmsnorm", "twoopt",
          "rawstep", "gan"]


# training frameworks' own loops (gpu_frameworks.py's docstring): Hugging Face's Trainer in fp16
# (its weight blow-up; with gradients accumulated, with gradient checkpointing) and bf16 (healthy
# only: bf16 holds the blow-up), Lightning's Trainer in 16-mixed and bf16-mixed (the NaN batch;
# bf16's optimizer steps with a closure; with gradients accumulated, the last batch's forward in
# that closure)
FRAMEWORKS = [("hf", ()), ("hf", ("--bf16",)), ("hf", ("--accum", "4")), ("hf", ("--ckpt",)),
              ("lightning", ()), ("lightning", ("--bf16",)), ("lightning", ("--accum", "4")),
              ("lightning", ("--bf16", "--accum", "4"))]


@pytest.mark.parametrize("case,extra", FRAMEWORKS)
def test_frameworks(tmp_path, case, extra):
    bf16 = "--bf16" in extra
    if not (case == "hf" and bf16):
        r = report_of(tmp_path, case, False, extra, script="gpu_frameworks.py")
        assert_names(r, case)
    db = record(tmp_path, case, True, extra, script="gpu_frameworks.py")[0]
    assert_clean(report(db))
    assert check_report.check_autocast(db, "bf16" if bf16 else "f16") == 0


@pytest.mark.parametrize("case", SHAPES)
def test_model_shapes(tmp_path, case):
    r = report_of(tmp_path, case, healthy=False, script="gpu_patterns.py")
    assert_names(r, case)
    r = report_of(tmp_path, case, healthy=True, script="gpu_patterns.py")
    assert_clean(r)


# training patterns: the fault found through them, their healthy twins clean
PATTERNS = [("attn", ("--accum", "4")), ("nan", ("--accum", "4")),
            ("attn", ("--checkpoint", "nonreentrant")), ("attn", ("--checkpoint", "reentrant")),
            ("residual", ("--checkpoint", "nonreentrant")), ("attn", ("--wrap", "ddp")),
            ("nan", ("--wrap", "dp", "--device", "0")), ("attn", ("--compile", "wrap")),
            ("residual", ("--compile", "inplace")), ("fp32gemm", ("--compile", "wrap")),
            ("log0", ("--compile", "inplace")), ("nan", ("--compile", "blocks")),
            ("attn", ("--wrap", "fsdp")), ("nan", ("--wrap", "fsdp")),
            ("attn", ("--compile", "wrap", "--compile-mode", "reduce-overhead")),
            ("nan", ("--compile", "blocks", "--compile-mode", "reduce-overhead")),
            ("nan", ("--bf16",)), ("nan", ("--bf16", "--accum", "4")),
            ("nan", ("--wrap", "fsdp", "--fsdp-mp", "bf16")),
            ("underflow", ("--fused",)), ("attn", ("--clip", "1.0")),
            ("attn", ("--wrap", "fsdp1")), ("nan", ("--wrap", "fsdp1-flat")),
            ("residual", ("--wrap", "fsdp1", "--checkpoint", "wrapper")),
            ("attn", ("--checkpoint", "wrapper")),
            # FSDP's mixed precision without autocast (fp16: a GradScaler, FSDP1's sharded)
            ("attn", ("--wrap", "fsdp", "--fsdp-mp", "fp16")),
            ("nan", ("--wrap", "fsdp", "--fsdp-mp", "fp16")),
            ("underflow", ("--wrap", "fsdp", "--fsdp-mp", "fp16")),
            ("attn", ("--wrap", "fsdp1", "--fsdp-mp", "fp16")),
            ("nan", ("--wrap", "fsdp1-flat", "--fsdp-mp", "fp16")),
            ("underflow", ("--wrap", "fsdp1", "--fsdp-mp", "fp16")),
            ("nan", ("--wrap", "fsdp1", "--fsdp-mp", "bf16")),
            ("sawtooth", ("--wrap", "fsdp1", "--sharded-scaler"))]


PATTERN_IDS = ["-".join((c,) + e) for c, e in PATTERNS]  # attn--compile-wrap: -k compile


@pytest.mark.parametrize("case,extra", PATTERNS, ids=PATTERN_IDS)
def test_patterns_first_finding(tmp_path, case, extra):
    r = report_of(tmp_path, case, healthy=False, extra=extra)
    assert_names(r, case)


@pytest.mark.parametrize("case,extra", PATTERNS, ids=PATTERN_IDS)
def test_patterns_healthy_twin_is_clean(tmp_path, case, extra):
    r = report_of(tmp_path, case, healthy=True, extra=extra)
    assert_clean(r)


# bf16 without autocast: statistics against bf16, so a healthy run's small gradients are not
# reported as lost to fp16's underflow (the model cast to bf16 trains at lr 1e-3, gpu_faults.py's
# default there: at 1e-4 most of its updates round away, 70-86% on 2026-12-04, which the
# lost-updates rule rightly warns of; at 1e-3 7-21% do, a note)
BF16 = [("attn", ("--bf16",)), ("residual", ("--bf16",)),
        ("residual", ("--wrap", "fsdp", "--fsdp-mp", "bf16")),
        ("attn", ("--wrap", "fsdp1", "--fsdp-mp", "bf16"))]


@pytest.mark.parametrize("case,extra", BF16, ids=["-".join((c,) + e) for c, e in BF16])
def test_bf16_without_autocast_is_clean(tmp_path, case, extra):
    r = report_of(tmp_path, case, healthy=True, extra=extra)
    assert_clean(r)


def test_a_gradscaler_in_bf16_is_a_note(tmp_path):
    """bf16 autocast with its GradScaler kept: a healthy run, with a note (loss-scale, info) that
    the scaler protects nothing; the fp16 twin has none."""
    r = report_of(tmp_path, "dict", True, ("--bf16", "--keep-scaler"), script="gpu_patterns.py")
    assert_clean(r)
    assert check_report.check_bf16_scaler(r) == 0
    fp16 = report_of(tmp_path, "dict", True, script="gpu_patterns.py")
    assert not check_report.titled(fp16, check_report.BF16_SCALER)


@pytest.mark.parametrize("scaled", [False, True], ids=["unscaled", "scaled"])
def test_gradients_clipped_while_scaled_are_named(tmp_path, scaled):
    """clip_grad_norm_ before scaler.unscale_ (--clip-scaled): the loss-scale warning that every
    step's gradient norm was max_norm divided by the scale; the same clip after unscale_, as
    PyTorch's recipe does it: no such finding, no warning."""
    extra = ("--clip", "0.5") + (("--clip-scaled",) if scaled else ())
    assert check_report.check_clipped(report_of(tmp_path, "nan", True, extra), not scaled) == 0


@pytest.mark.parametrize("kept", [False, True], ids=["bf16-weights", "fp32-weights"])
def test_updates_rounded_away_in_bf16_weights_are_named(tmp_path, kept):
    """The MLP cast to bf16 (--bf16: no fp32 master weights) under Adam at lr 1e-5: nearly every
    update is below half a unit in the last place of its weight, the lost-updates warning; the
    same run over fp32 weights under autocast (what its advice says to do): no such finding."""
    extra = ("--lr", "1e-5") + (() if kept else ("--bf16",))
    r = report_of(tmp_path, "nan", True, extra)
    assert check_report.check_lost_updates(r, kept) == 0
    if not kept:  # (the gradient statistics against bf16 still say nothing)
        assert [f["rule"] for f in r["findings"] if f["severity"] in ("error", "warning")] == \
            ["lost-updates"], r["findings"][:3]


def test_odd_gemm_dimensions_are_named(tmp_path):
    """A head over a vocabulary of 50257 (an N that is not a multiple of 8), CUDA traced: the
    precision-placement warning names it and advises 50304; its padded twin gets none."""
    for extra, padded in (((), False), (("--vocab", "50304"), True)):
        db, _ = record(tmp_path, None, False, extra, script="gpu_shapes.py", trace="amp,cuda")
        assert check_report.check_odd_gemm(report(db), padded) == 0


def test_a_half_model_under_adams_eps_is_named(tmp_path):
    """model.half() under Adam's eps=1e-8, which is 0 in fp16: the weights non-finite as step 1
    begins, the eps named, fp32 master weights advised. Its twin with eps=1e-4 trains on, with
    no error (its fp16 gradients lost to underflow without a GradScaler, a warning, are real)."""
    r = report_of(tmp_path, "halfeps", healthy=False)
    assert_names(r, "halfeps")
    r = report_of(tmp_path, "halfeps", healthy=True)
    assert not [f for f in r["findings"] if f["severity"] == "error"], r["findings"][:2]
    assert r["findings"][0]["rule"] == "grad-underflow", r["findings"][0]


@pytest.mark.parametrize("wrap", ["fsdp", "fsdp1"])
def test_advice_without_autocast_keeps_the_module_in_fp32(tmp_path, wrap):
    """FSDP's mixed precision in fp16, no autocast: the overflow's fix keeps the module's
    parameters in fp32, it does not say to disable an autocast that is not there."""
    r = report_of(tmp_path, "attn", healthy=False, extra=("--wrap", wrap, "--fsdp-mp", "fp16"))
    advice = r["findings"][0]["advice"]
    assert "no autocast here" in advice and "enabled=False" not in advice, advice


def test_fused_optimizer_gradients_as_scaled(tmp_path):
    """Adam(fused=True) unscales the gradients itself: they are read before it does."""
    plain, _ = record(tmp_path, "attn", True)
    fused, _ = record(tmp_path, "attn", True, ("--fused",))
    assert check_report.check_same(plain, fused, step=0) == 0


def test_rerun_that_stays_finite_is_named_per_module(tmp_path):
    """The NaN batch cleaned in place after its forward: the re-run stays finite, the statistics
    name the first module whose output went non-finite."""
    r = report_of(tmp_path, "nan", False, ("--scrub",))
    assert_names(r, "nan", per_module=True)


@pytest.mark.parametrize("how,status", [("raise", 1), ("kill", 137)])
def test_a_run_that_dies_keeps_its_steps_and_says_how(tmp_path, how, status):
    """A script that raises (exit 1) or is SIGKILLed at step 6: its steps are in the database
    (all of them when Python could exit), the report's run-end finding says how it ended."""
    db, _ = record(tmp_path, "attn", True, ("--die-at", "6", "--die-how", how), status=status)
    rep = tmp_path / "report.json"
    ampprobe = os.path.join(os.path.abspath(DIST), "ampprobe")
    subprocess.run([ampprobe, "report", db, "--format", "json", "-o", str(rep)], check=True,
                   timeout=300)
    assert check_report.check_died(db, str(rep), 6, how) == 0


def test_a_second_trained_module_is_recorded(tmp_path):
    """A Linear after the model, trained by the same optimizer: recorded from step 1 on (META
    added_models, a note on stderr, its rows), the NaN batch still found."""
    db, out = record(tmp_path, "nan", False, ("--split",))
    log = write_log(tmp_path, out)
    assert check_report.check_added(db, str(log), "110") == 0
    r = report(db)
    assert r["summary"]["added_models"] == "Linear (110 values) from step 1"
    assert_names(r, "nan")


def test_an_overflow_in_the_second_module_is_named_there(tmp_path):
    r = report_of(tmp_path, "attn", True, ("--split", "--split-gain", "1e6"))
    assert_names(r, "split")


def test_watch_called_on_each_model_records_both_from_step_0(tmp_path):
    """The script calls watch() on the model and on the Linear after it: one watcher, both
    recorded from step 0; the NaN batch still found; gpu_join.py: two GradScalers, a name."""
    db, out = record(tmp_path, "nan", False, ("--split", "--watch"))
    log = write_log(tmp_path, out)
    assert check_report.check_added(db, str(log), "110", watched=True) == 0
    r = report(db)
    assert_names(r, "nan")
    r = report_of(tmp_path, "attn", True, ("--split", "--split-gain", "1e6", "--watch"))
    assert_names(r, "split")
    db, out = record(tmp_path, None, False, script="gpu_join.py")
    log.write_text(out)
    assert check_report.check_joined(db, str(log)) == 0


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_dataloader_workers_record_nothing(tmp_path, start):
    """Batches from a DataLoader's two workers: the NaN batch found as without them, and only
    the training process recorded."""
    db, _ = record(tmp_path, "nan", False, ("--loader", start))
    r = report(db)
    assert_names(r, "nan")
    assert check_report.check_one_process(db) == 0


def test_older_amp_spellings_with_cuda_traced(tmp_path):
    """torch.cuda.amp.GradScaler and torch.cuda.amp.autocast, cudaProfilerStart/Stop around the
    fault, CUDA traced too: the same first finding, kernels in every step, none dropped."""
    db, _ = record(tmp_path, "attn", False, ("--legacy",), trace="amp,cuda,nvtx")
    r = report(db)
    assert_names(r, "attn")
    assert check_report.check_captured(db) == 0


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("healthy", [False, True])
def test_cpu_training_without_a_gpu(tmp_path, dtype, healthy):
    """cpu_faults.py with no GPU visible: CPU autocast (fp16 with GradScaler("cpu")), its NaN
    batch named at layers.0, step 3; the healthy twin clean."""
    db, _ = record(tmp_path, None, healthy, ("--dtype", dtype), script="cpu_faults.py",
                   env={"CUDA_VISIBLE_DEVICES": ""})
    assert_diagnosed(report(db), "nan", healthy)


def test_api_errors(tmp_path):
    """cpu_faults.py --fault api: watch()'s bad arguments refused by name, and a watched
    GradScaler's update(), step() and unscale_() before any scale() failing with PyTorch's own
    error, the steps after them recorded."""
    db, out = record(tmp_path, None, False, ("--fault", "api"), script="cpu_faults.py",
                     env={"CUDA_VISIBLE_DEVICES": ""})
    assert "FAIL" not in out, out[-2000:]
    assert "PASS watch() refused" in out and "before scale() fail as" in out, out[-2000:]
    con = sqlite3.connect(db)
    steps = [r[0] for r in con.execute("SELECT step FROM AMP_STEPS ORDER BY step")]
    grads = dict(con.execute("SELECT step, count(*) FROM AMP_TENSOR_STATS "
                             "WHERE kind = 'weight_grad' GROUP BY step"))
    assert len(steps) == 6, steps  # two after each failed call, each with its 8 gradients
    assert all(grads.get(s) == 8 for s in steps), (steps, grads)


@pytest.mark.parametrize("accum", ["1", "2"])
@pytest.mark.parametrize("healthy", [False, True])
def test_updates_by_hand(tmp_path, accum, healthy):
    """cpu_faults.py --update hand: no optimizer and no GradScaler, the parameters updated by
    hand and their gradients zeroed in place (held at every forward): each step's loss and
    gradient norm as the script printed them (a step per update, its micro-batches together;
    the gradients the update used, not the zeros it left), the NaN batch named at step 3 (the
    later steps, on the weights the NaN gradients reached, no error of their own, and the
    report says that the update, not an optimizer, used them), the healthy twin clean."""
    db, out = record(tmp_path, None, healthy, ("--update", "hand", "--accum", accum),
                     script="cpu_faults.py", env={"CUDA_VISIBLE_DEVICES": ""})
    log = write_log(tmp_path, out)
    assert check_report.check_loss(db, str(log)) == 0
    assert check_report.check_grad_norm(db, str(log)) == 0
    r = report(db)
    assert_diagnosed(r, "nan", healthy)
    errors = [f for f in r["findings"] if f["severity"] == "error"]
    assert len(errors) == (0 if healthy else 1), errors[:2]
    if not healthy:
        assert "the parameters were updated with the non-finite gradients of step 3 (no " \
            "optimizer.step() was seen" in errors[0]["detail"], errors[0]["detail"]


def test_updates_through_data(tmp_path):
    """cpu_faults.py --update data: the parameters updated through p.data (their version
    counters unmoved) and their gradients set to None: a step per update, each with the
    gradient norm the update used (read as backward() returned, not superseded by the step's
    end, which finds none)."""
    db, out = record(tmp_path, None, True, ("--update", "data"), script="cpu_faults.py",
                     env={"CUDA_VISIBLE_DEVICES": ""})
    log = write_log(tmp_path, out)
    assert check_report.check_loss(db, str(log)) == 0
    assert check_report.check_grad_norm(db, str(log)) == 0


@pytest.mark.parametrize("healthy", [False, True])
def test_lbfgs_calls_its_closure_again(tmp_path, healthy):
    """cpu_faults.py --update lbfgs: LBFGS's step() calls the closure several times; the step
    is its first call's (the loss step() returns, as the script printed it), the further calls
    are not recorded, the NaN batch named at step 3, the healthy twin clean."""
    db, out = record(tmp_path, None, healthy, ("--update", "lbfgs"), script="cpu_faults.py",
                     env={"CUDA_VISIBLE_DEVICES": ""})
    log = write_log(tmp_path, out)
    assert check_report.check_loss(db, str(log)) == 0
    assert_diagnosed(report(db), "nan", healthy)


@pytest.mark.parametrize("case,extra", [("blowup", ()), ("diverge", ()),
                                        ("blowup", ("--wrap", "fsdp1-flat"))],
                         ids=["blowup", "diverge", "blowup-fsdp1-flat"])
def test_weights_recorded_as_each_step_begins(tmp_path, case, extra):
    """Every parameter at every step, as the update before it left it (fp32 parameters under
    autocast; a model cast to bf16; FSDP1's flat parameters)."""
    db, out = record(tmp_path, case, False, ("--print-wmax",) + extra)
    log = write_log(tmp_path, out)
    assert check_report.check_weights(db, str(log)) == 0


@pytest.mark.parametrize("every", ["1", "3"])
def test_scale_updates_recorded_as_the_scaler_made_them(tmp_path, every):
    """Every GradScaler update (skips, growth, update(new_scale)) in AMP_SCALE as the script read
    it from the scaler, with statistics every step and every 3 (gpu_scale.py)."""
    import gpu_scale
    db, out = record(tmp_path, None, False, ("--stats-every", every), script="gpu_scale.py")
    assert gpu_scale.check(db, str(write_log(tmp_path, out))) == 0


def test_frozen_parameters_are_not_read(tmp_path):
    """A frozen backbone's parameters never change: only the trained head's have weight rows."""
    db, _ = record(tmp_path, "frozen", True, script="gpu_patterns.py")
    assert check_report.check_weight_names(db, ["head.weight", "head.bias"]) == 0


@pytest.mark.parametrize("extra", [(), ("--bf16",), ("--wrap", "fsdp1", "--fsdp-mp", "bf16"),
                                   ("--wrap", "fsdp1-flat", "--fsdp-mp", "bf16")],
                         ids=lambda e: "-".join(e).strip("-") or "fp16")
def test_accumulated_loss_is_the_sum(tmp_path, extra):
    """Four micro-batches a step: one step each, its loss their sum; without a GradScaler
    (bf16) the first step's micro-batches too, before an optimizer.step() was seen (FSDP1's
    unsharding must not look like an update between them)."""
    db, out = record(tmp_path, "attn", True, ("--accum", "4") + extra)
    log = write_log(tmp_path, out)
    assert check_report.check_loss(db, str(log)) == 0


@pytest.mark.parametrize("extra", [("--checkpoint", "nonreentrant"),
                                   ("--checkpoint", "reentrant"), ("--wrap", "ddp"),
                                   ("--wrap", "fsdp"), ("--clip", "1e9"), ("--wrap", "fsdp1"),
                                   ("--checkpoint", "wrapper"),
                                   ("--wrap", "fsdp1", "--checkpoint", "wrapper")],
                         ids=lambda e: "-".join(e).strip("-"))
def test_wrapped_or_checkpointed_records_the_same_rows(tmp_path, extra):
    """The wrappers' modules are not layers: the rows of the model's own, under its names."""
    plain, _ = record(tmp_path, "attn", True)
    other, _ = record(tmp_path, "attn", True, extra)
    assert check_report.check_same(plain, other) == 0


@pytest.mark.parametrize("extra", [("--wrap", "fsdp1"), ("--wrap", "fsdp1-flat"),
                                   ("--checkpoint", "wrapper")],
                         ids=lambda e: "-".join(e).strip("-"))
def test_wrapped_model_records_the_same_ops(tmp_path, extra):
    """The op step holds the model's ops, none of the wrappers' own code (FSDP1's)."""
    plain, _ = record(tmp_path, "attn", True)
    other, _ = record(tmp_path, "attn", True, extra)
    assert check_report.check_same_ops(plain, other) == 0


@pytest.mark.parametrize("extra", [(), ("--wrap", "fsdp1"), ("--wrap", "fsdp1-flat")],
                         ids=lambda e: "-".join(e).strip("-") or "plain")
def test_gradient_overflows_traced(tmp_path, extra):
    """The sawtooth's overflowing backward re-run op by op; under FSDP1, whose backward hooks
    reset the step's gradients, named per module, and the training goes on as it would."""
    db, _ = record(tmp_path, "sawtooth", False, extra)
    assert check_report.check_bwd(db, per_module=bool(extra)) == 0
    r = report(db)
    assert_names(r, "sawtooth")


@pytest.mark.parametrize("case,extra", [("sawtooth", ("--wrap", "fsdp1")),
                                        ("attn", ("--wrap", "fsdp1-flat")),
                                        ("nan", ("--wrap", "fsdp1", "--checkpoint", "wrapper")),
                                        ("nan", ("--checkpoint", "wrapper")),
                                        ("sawtooth", ("--wrap", "fsdp1", "--fsdp-mp", "fp16"))],
                         ids=["sawtooth-fsdp1", "attn-fsdp1-flat", "nan-fsdp1-ckptw", "nan-ckptw",
                              "sawtooth-fsdp1-mp-fp16"])
def test_wrapped_trains_as_without_ampprobe(tmp_path, case, extra):
    """A broken step's forward run again through FSDP1 or activation checkpointing leaves the
    training as it was: the losses and scales the script prints are those it prints without
    ampprobe (the re-run is not stopped half-way through checkpoint's saved-tensor hooks:
    nan-fsdp1-ckptw failed so, its losses from step 5 on another run's)."""
    _, out = record(tmp_path, case, False, extra)
    plain = subprocess.run([sys.executable, os.path.join(HERE, "gpu_faults.py"), "--case", case]
                           + list(extra), capture_output=True, text=True, timeout=600)
    assert plain.returncode == 0, plain.stderr[-2000:]
    steps = [[line for line in o.splitlines() if line.startswith("step ")]
             for o in (out, plain.stdout)]
    assert steps[0] and steps[0] == steps[1], steps


def test_fsdp1_flat_parameters_are_recorded_as_they_are(tmp_path):
    """FSDP1 with use_orig_params=False trains one flat parameter a unit: the weight rows are
    theirs, named after the unit's module, and the outputs' rows those of the plain model."""
    plain, _ = record(tmp_path, "attn", True)
    flat, _ = record(tmp_path, "attn", True, ("--wrap", "fsdp1-flat"))
    assert check_report.check_same(plain, flat, kinds=("activation", "activation_grad")) == 0
    assert check_report.check_weight_names(
        flat, ["_flat_param", "blocks.0._flat_param", "blocks.1._flat_param"]) == 0


@pytest.mark.parametrize("how", ["wrap", "inplace", "blocks", "graphs"])
def test_compiled_model_keeps_its_graphs(tmp_path, how):
    extra = ("--compile", "wrap", "--compile-mode", "reduce-overhead") if how == "graphs" \
        else ("--compile", how)
    db, out = record(tmp_path, "attn", True, extra)
    log = write_log(tmp_path, out)
    assert check_report.check_compiled(db, str(log), blocks=how == "blocks") == 0
