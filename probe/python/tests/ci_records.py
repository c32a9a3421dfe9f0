#!/usr/bin/env python3
"""ci_records.py — the torch-free parts of the bridge, for CI (tests/test_pybridge.c runs it with
the system python3 under `ampprobe run --torch`, then checks the database).

Asserts the name bookkeeping (_vocab.py: layers, ops, FSDP2's module classes) and the
torch.compile pieces (_compiled.py), then writes one record of each AMP type through ctypes
(_records.py) with the values test_pybridge.c expects; exits non-zero on a failed assert.
"""
import ctypes
import math
import os
import sys

from ampprobe import _compiled, _records, _vocab

# -- names -------------------------------------------------------------------------------------
t = _vocab.LayerTable()
ids = t.add_model("TinyGPT", ["", "emb", "blocks", "blocks.0", "blocks.0.attn",
                              "blocks.0.attn.qkv", "blocks.1", "head"])
assert ids == {"": 0, "emb": 1, "blocks": 2, "blocks.0": 3, "blocks.0.attn": 4,
               "blocks.0.attn.qkv": 5, "blocks.1": 6, "head": 7}, ids
assert t.pending() == [(0, -1, "TinyGPT"), (1, 0, "emb"), (2, 0, "blocks"), (3, 2, "blocks.0"),
                       (4, 3, "blocks.0.attn"), (5, 4, "blocks.0.attn.qkv"), (6, 2, "blocks.1"),
                       (7, 0, "head")]
assert t.pending() == []
assert t.add("blocks.0.attn") == 4 and t.add("blocks.1.mlp.fc") == 8 and t.pending() == [
    (8, 6, "blocks.1.mlp.fc")]
for given, want in (("Linear", "linear"), ("LayerNorm", "layer_norm"), ("Conv2d", "conv2d"),
                    ("MaxPool2d", "max_pool2d"), ("aten.mm.default", "mm"),
                    ("aten._to_copy.default", "to_copy"), ("__mul__", "mul"), ("__rmul__", "mul"),
                    ("__truediv__", "div"), ("log", "log"), ("masked_fill_", "masked_fill"),
                    ("cross_entropy", "cross_entropy"), ("GELU", "gelu")):
    assert _vocab.op_name(given) == want, (given, _vocab.op_name(given), want)

# what the loss tape leaves out on a tensor from elsewhere (Tensor.grad's getter, zero_grad's
# zero_ and _foreach_zero_, a running total's +=, an item assignment, inplace=True), and what
# it keeps
for name, touches in (("__get__", True), ("zero_", True), ("_foreach_zero_", True),
                      ("__iadd__", True), ("__imatmul__", True), ("__setitem__", True),
                      ("ones", False), ("__mul__", False), ("__radd__", False),
                      ("cross_entropy", False), ("", False)):
    assert _vocab.touches_state(name) == touches, name
assert _vocab.touches_state("relu", {"inplace": True})  # F.relu(x, inplace=True)
assert not _vocab.touches_state("dropout", {"inplace": False, "p": 0.1})


class Block:  # a model's module class, and the class FSDP2's fully_shard gives an instance
    pass


class FSDPModule:
    pass


FSDPBlock = type("FSDPBlock", (FSDPModule, Block), {})
assert _vocab.class_name(Block()) == "Block" and _vocab.class_name(FSDPBlock()) == "Block"
assert _vocab.op_name(_vocab.class_name(FSDPBlock())) == "block"
assert _vocab.class_name(FSDPModule()) == "FSDPModule"
assert _vocab.dtype_name("torch.float16") == "f16"
assert _vocab.dtype_name("torch.bfloat16") == "bf16"
d = _vocab.describe("input 0", "f16", (16, 2, 16, 16), -6.26953, 6.1, 6.26953)
assert d == "input 0 f16 (16, 2, 16, 16) min -6.26953 max 6.1 amax 6.26953; ", d
d = _vocab.describe("output", "f16", (8,), -65440, 65440, 65440, 0, 3913, 3977)
assert d == "output f16 (8,) min -65440 max 65440 amax 65440 (0 nan, 3913 +inf, 3977 -inf); ", d
none = _vocab.describe("output", "f16", (8,), float("nan"), float("nan"), float("nan"), 8, 0, 0)
assert none == "output f16 (8,) no finite value (8 nan, 0 +inf, 0 -inf); ", none
fmax, tiny = _vocab.DTYPES["f16"]
assert fmax == 65520.0 and tiny == 2.0 ** -14
# AMP_OPS columns: dtypes after autocast's casts, shapes, analytic FLOPs and bytes
r = _vocab.op_row("linear", [("f32", (8, 64), 4), ("f32", (32, 64), 4), ("f32", (32,), 4)],
                  ("f16", (8, 32), 2), "lower_precision_fp")
assert r == ("linear", "f16,f16,f16", "f16", "(8, 64),(32, 64),(32,)", 2 * 8 * 32 * 64,
             8 * 32 * 2 + (8 * 64 + 32 * 64 + 32) * 4), r
r = _vocab.op_row("softmax", [("f16", (4, 16), 2)], ("f32", (4, 16), 4), "fp32_set_opt_dtype")
assert r == ("softmax", "f16", "f32", "(4, 16)", 64, 64 * 4 + 64 * 2), r
r = _vocab.op_row("layer_norm", [("f16", (4, 16), 2), ("f32", (16,), 4)], ("f32", (4, 16), 4),
                  "fp32")
assert r[1] == "f32,f32" and r[4] == 64, r
r = _vocab.op_row("addmm", [("f16", (32,), 2), ("f16", (8, 64), 2), ("f16", (64, 32), 2)],
                  ("f16", (8, 32), 2), None)
assert r[0] == "addmm" and r[1] == "f16,f16,f16" and r[4] == 2 * 8 * 32 * 64, r
r = _vocab.op_row("conv2d", [("f16", (2, 3, 8, 8), 2), ("f16", (4, 3, 3, 3), 2)],
                  ("f16", (2, 4, 8, 8), 2), "lower_precision_fp")
assert r[4] == 2 * (2 * 4 * 8 * 8) * 27, r
r = _vocab.op_row("__matmul__", [("f32", (2, 8, 8), 4), ("f32", (2, 8, 8), 4)],
                  ("f32", (2, 8, 8), 4), None)
assert r[0] == "matmul" and r[1] == "f32,f32" and r[4] == 2 * 128 * 8, r

# -- wrapped modules' layer names; the callbacks around a module compiled in place --------------
for given, want in (("blocks.0._orig_mod.attn", "blocks.0.attn"),
                    ("blocks.0._orig_mod", "blocks.0"), ("_orig_mod.head", "head"), ("", ""),
                    ("my_orig_mod.fc", "my_orig_mod.fc"),
                    ("blocks.0._fsdp_wrapped_module._checkpoint_wrapped_module.attn",
                     "blocks.0.attn"), ("_fsdp_wrapped_module", ""),
                    ("blocks.0._checkpoint_wrapped_module._fsdp_wrapped_module", "blocks.0")):
    assert _compiled.layer_name(given) == want, (given, _compiled.layer_name(given), want)


class _Module:  # what Around touches of a module compiled in place
    def __init__(self):
        self.calls = []
        self._compiled_call_impl = lambda *a, **k: self.calls.append((a, k)) or "out"


mod, seen = _Module(), []
around = _compiled.Around.around(mod)
assert _compiled.Around.around(mod) is around and mod._compiled_call_impl is around
once = [None]


def pre_once(args, kwargs):  # removes itself while the callbacks run (autoattach's first call)
    seen.append(("once", args))
    once[0].remove()


once[0] = _compiled.Around.hook(around.pre, pre_once)
pre = _compiled.Around.hook(around.pre, lambda args, kwargs: seen.append(("pre", args, kwargs)))
post = _compiled.Around.hook(around.post, lambda args, out: seen.append(("post", args, out)))
assert mod._compiled_call_impl(1, x=2) == "out" and mod.calls == [((1,), {"x": 2})]
assert seen == [("once", (1,)), ("pre", (1,), {"x": 2}), ("post", (1,), "out")], seen
seen.clear()
pre.remove()
pre.remove()  # twice: nothing
assert mod._compiled_call_impl(3) == "out" and seen == [("post", (3,), "out")], seen

# -- records through ctypes --------------------------------------------------------------------
rec = _records.Recorder()
assert rec.path == os.environ["AMPPROBE_LIB"], (rec.path, os.environ.get("AMPPROBE_LIB"))
assert rec.enabled, "recording should be on under ampprobe run"
for i, parent, name in t.rows:
    rec.layer(i, parent, name)
rec.meta("bridge", "ci")
t0 = rec.now_ns()
assert abs(rec.lib_now_ns() - t0) < 10 ** 9, "now_ns() is not amp_record_now_ns()'s clock"
rec.tensor_stats(0, 4, "linear", _records.ACTIVATION, "f16", "f16", 1024, -3.5, 70000.0, 70000.0,
                 1, 2, 3, 4, 5, 6)
rec.tensor_stats(0, 5, "blocks.0.attn.qkv.weight", _records.WEIGHT_GRAD, "f32", None, 10, None,
                 None, None, 0, 0, 0, -1, -1, 0)
rec.event(0, 4, "mul", _records.PHASE_FWD, "nonfinite_producer", _records.ERROR, 7890, 65440.0,
          d)
rec.event(1, -1, None, _records.PHASE_NONE, "loss_nonfinite", _records.ERROR, 1, math.inf, None)
rec.scale(1, 65536.0, 32768.0, 1, 0, True)
# a step's statistics in one call, as the bridge's end of step makes it (the first weight
# gradient's read superseded by a later one: left out, neither recorded nor counted)
stats = (_records.AmpStats * 3)(
    _records.AmpStats(8, -2.0, 4.0, 0.0, 1, 0, 0, 0, 3, 2, 20.0),
    _records.AmpStats(4, -1.0, 1.0, 0.0, 2, 0, 0, 0, 0, 0, 9.0),
    _records.AmpStats(4, math.inf, -math.inf, 0.0, 0, 4, 0, 0, 0, 0, 0.0))
entries = rec.entries([(7, _records.ACTIVATION_GRAD, "head", "f16"),
                       (5, _records.SUPERSEDED, "blocks.0.attn.qkv.bias", "f32"),
                       (5, _records.WEIGHT_GRAD, "blocks.0.attn.qkv.bias", "f32")])
s = rec.tensor_stats_many(2, "f16", entries, ctypes.addressof(stats))
assert list(s.nonfinite) == [0, 1, 0, 4] and s.f32_overflow == 0, list(s.nonfinite)
assert s.weight_grads == 1 and s.weight_grad_sumsq == 0.0, (s.weight_grads, s.weight_grad_sumsq)
assert s.zero_jump == -1, s.zero_jump  # (no activation)
# each activation's share of exact zeros, kept in its entry from one call to the next: the first
# whose share went from below 1% to 5% or more is zero_jump (-1: none; the first call has nothing
# to compare with; a ReLU's half of zeros, steady, is no jump)
acts = rec.entries([(4, _records.ACTIVATION, "linear", "f16"),
                    (6, _records.ACTIVATION, "blocks.1", "f32")])
for step, zeros, want in ((3, (0, 50), -1), (4, (6, 50), 0), (5, (2, 60), -1), (6, (0, 0), -1),
                          (7, (0, 7), 1)):
    figs = (_records.AmpStats * 2)(*[_records.AmpStats(100, -1.0, 1.0, 0.0, 0, 0, 0, 0, 0, z,
                                                       1.0) for z in zeros])
    s = rec.tensor_stats_many(step, "f16", acts, ctypes.addressof(figs))
    assert s.zero_jump == want, (step, s.zero_jump, want)
# autocast's policies from libampcore's lists, and one op row
for name, want in (("linear", "lower_precision_fp"), ("__matmul__", "lower_precision_fp"),
                   ("softmax", "fp32_set_opt_dtype"), ("layer_norm", "fp32"),
                   ("cross_entropy", "fp32"), ("relu", "native"), ("addcmul", "promote")):
    assert rec.autocast_policy(name) == want, (name, rec.autocast_policy(name), want)
rec.op(1, 5, "linear", _records.PHASE_FWD, "f16,f16,f16", "f16", "lower_precision_fp",
       "(8, 64),(32, 64),(32,)", 32768, 7296, t0 + 100, t0 + 2100)
rec.op(1, -1, "cross_entropy", _records.PHASE_FWD, "f32,i64", "f32", None, "(8, 10),(8,)", 8,
       420, t0 + 3000, t0 + 3500)
rec.step(0, t0, t0 + 1000000, 2.5)
rec.step(1, t0 + 1000000, t0 + 3000000, float("nan"), mem_peak_bytes=3 << 30)
sys.exit(0)
