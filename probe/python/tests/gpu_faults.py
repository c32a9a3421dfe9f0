#!/usr/bin/env python3
"""gpu_faults.py — small fp16 PyTorch training scripts that fail the classic ways, and their
healthy twins, for `ampprobe run --torch` (no ampprobe code in here: the bridge attaches by
itself). run_gpu.sh runs each and checks the report's first finding (check_report.py).

  python3 gpu_faults.py --case attn [--healthy] [--device N]

Cases (the fault switches on at step 3; --healthy leaves it off):
  attn       blocks.1.attn multiplies its q@k^T logits by a gain of 1e6 instead of 1/sqrt(d):
             fp16 overflow of the attention logits (mul in blocks.1.attn)
  residual   an fp16 residual MLP stack without normalisation whose weights are scaled x4 by a
             bad update: the residual stream blows up through the blocks
  nan        the batch of step 3 carries a NaN: NaN in the input data (layers.0)
  log0       a hand-written fp16 loss, -log(softmax(logits / T)) with T = 1e-3 from step 3:
             the label's probability underflows to 0 and log gives -inf, outside any module
  underflow  a loss weighted by 1e-3 under GradScaler(init_scale=1), which never grows: the
             fp16 gradients underflow (healthy: the default scaler)
  sawtooth   GradScaler(growth_interval=1): the scale grows every step into
             an overflow, backs off, grows again (30 steps)
  fp32gemm   the MLP's layers.1 runs with autocast disabled on .float() inputs from the start:
             a third of the GEMM FLOPs miss the Tensor Cores (seen on the op step, step 1)
  diverge    Adam's learning rate raised from 1e-4 to 1.0 at step 3: the loss and the gradient
             norm blow up from step 4 while every loss stays finite (the MLP trains in bf16
             without autocast, --bf16 unless --fsdp-mp is given: bf16 has fp32's range). Not a
             precision problem: the report's divergence
  blowup     Adam's learning rate raised from 1e-4 to 100 at step 3 (fp16 autocast, GradScaler):
             that one update multiplies the MLP's weights a thousandfold and step 4's forward
             overflows fp16. Not a precision problem either: the weights blew up before step 4
  halfeps    the MLP cast to fp16 (model.half(): no fp32 master weights, no autocast, and no
             GradScaler, which refuses fp16 gradients) under Adam's default eps=1e-8, which is 0
             in fp16, from the start: the first update divides by the second moments that
             underflowed to 0, and the weights are non-finite as step 1 begins (healthy: eps=1e-4)

--device N trains on GPU N while the current device stays GPU 0 (a model moved with .to()
alone); the script fails if the current device changes under it. --accum N accumulates the
gradients of N micro-batches a step (the fault in the first: the NaN batch, the weights' blow-up
and the gain are there from it on); --checkpoint reentrant|nonreentrant recomputes each block
(TinyGPT, the residual net) in the backward (torch.utils.checkpoint), or --checkpoint wrapper
through torch.distributed's checkpoint_wrapper put around each block (after --wrap's wrapping,
as Hugging Face Accelerate does). --wrap ddp|dp|fsdp|fsdp1|fsdp1-flat trains the model through
DistributedDataParallel (one process, or one per GPU under torchrun, each rank on the GPU of its
LOCAL_RANK), DataParallel (on every GPU; with --device, on that one), FSDP2
(torch.distributed.fsdp.fully_shard on each block and on the model: parameters and their
gradients are DTensors, sharded across the ranks) or FSDP1 (FullyShardedDataParallel around the
model, each block a unit of its own; fsdp1 with use_orig_params=True, the parameters as they
were, fsdp1-flat with False, one flat parameter a unit).
--compile wrap|inplace|blocks trains the model compiled: torch.compile(model), model.compile(),
or each of its blocks (the MLP's layers) compiled in place; --compile-mode MODE passes
torch.compile's mode (reduce-overhead: CUDA graphs). --bf16 trains in bf16 without autocast and
without a GradScaler: the model cast to bf16. --fsdp-mp fp16|bf16 (with --wrap fsdp, fsdp1 or
fsdp1-flat) trains without autocast in FSDP's mixed precision over fp32 parameters: FSDP2's
MixedPrecisionPolicy(param_dtype=that dtype) with a torch.amp.GradScaler in fp16, or FSDP1's
MixedPrecision(param_dtype, reduce_dtype and buffer_dtype that dtype) with a ShardedGradScaler
in fp16, as FSDP's documentation does; in bf16 without a scaler. --sharded-scaler trains with FSDP's
ShardedGradScaler instead of torch.amp.GradScaler (autocast as usual). --fused trains with
Adam(fused=True), which the GradScaler hands the scale to unscale the gradients itself.
--clip MAX_NORM unscales the gradients (scaler.unscale_) and clips their norm before the step;
with --clip-scaled it clips them still scaled, no unscale_ first (the bug PyTorch's AMP recipe
warns of: every update's norm MAX_NORM divided by the scale).
--scrub cleans the batch in place right after the forward, so that a re-run of a broken step
stays finite (the bridge then names the module from the statistics). --split trains a second
top-level module after the model (a Linear over its output, in the same optimizer), which
`ampprobe run --torch` records from step 1 on; --split-gain G multiplies its weight by G at
step 3 (G = 1e6: its fp16 output overflows, named in its layer). --watch: the script calls
ampprobe.torch.watch() itself, on the model and (--split) on the Linear, with the one scaler and
optimizer (PyTorch's AMP recipe for several models): both recorded from step 0. --loader
fork|spawn: the batches come from a DataLoader with two worker processes started that way (the
same batches, in the same order): nothing but the training process may record. --legacy
trains with the AMP API's older spellings, torch.cuda.amp.GradScaler and torch.cuda.amp.autocast
(deprecated since torch 2.4, still in many scripts), and brackets the steps around the fault's
with torch.cuda.profiler.start()/stop() (cudaProfilerStart/Stop, nsys's capture range).
--die-at STEP ends the script at the start of that step: an exception (--die-how raise, exit
status 1) or, 0.3 s later, SIGKILL (--die-how kill), for what a run that dies leaves in the
database. --print-wmax prints the number of floating parameters ("params N"), then as each step
begins the largest |w| over them ("step N wmax X"), what the weight rows must hold.
"""
import argparse
import contextlib
import os
import signal
import sys
import time
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, TensorDataset

CHECKPOINT = None  # None, or use_reentrant for torch.utils.checkpoint of each block

FAULT_STEP = 3


class Attention(nn.Module):
    def __init__(s, d, h):
        super().__init__()
        s.qkv, s.proj, s.h, s.gain = nn.Linear(d, 3 * d), nn.Linear(d, d), h, 1.0

    def forward(s, x):  # (B, T, C)
        B, T, C = x.shape
        q, k, v = s.qkv(x).split(C, dim=2)
        q, k, v = [t.view(B, T, s.h, C // s.h).transpose(1, 2) for t in (q, k, v)]
        att = (q @ k.transpose(-2, -1)) * (s.gain / (C // s.h) ** 0.5)
        mask = torch.triu(torch.ones(T, T, device=x.device, dtype=torch.bool), 1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        return s.proj((att @ v).transpose(1, 2).reshape(B, T, C))


class Mlp(nn.Module):
    def __init__(s, d):
        super().__init__()
        s.fc1, s.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(s, x):
        return s.fc2(F.gelu(s.fc1(x)))


class Block(nn.Module):
    def __init__(s, d, h):
        super().__init__()
        s.ln1, s.attn, s.ln2, s.mlp = nn.LayerNorm(d), Attention(d, h), nn.LayerNorm(d), Mlp(d)

    def forward(s, x):
        x = x + s.attn(s.ln1(x))
        return x + s.mlp(s.ln2(x))


def _block(b, x):
    """A block's forward, recomputed in the backward under --checkpoint."""
    if CHECKPOINT is None or not torch.is_grad_enabled():
        return b(x)
    return checkpoint(b, x, use_reentrant=CHECKPOINT)


class TinyGPT(nn.Module):
    def __init__(s, vocab=128, d=64, h=4, L=2, T=32):
        super().__init__()
        s.emb, s.pos = nn.Embedding(vocab, d), nn.Parameter(torch.zeros(1, T, d))
        s.blocks = nn.ModuleList([Block(d, h) for _ in range(L)])
        s.ln, s.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(s, idx):
        x = s.emb(idx) + s.pos[:, : idx.shape[1]]
        for b in s.blocks:
            x = _block(b, x)
        return s.head(s.ln(x)).flatten(0, 1)


class ResBlock(nn.Module):  # no normalisation: the residual stream carries its growth on
    def __init__(s, d):
        super().__init__()
        s.mlp = Mlp(d)

    def forward(s, x):
        return x + s.mlp(x)


class ResNet(nn.Module):
    def __init__(s, d=64, L=8, out=10):
        super().__init__()
        s.inp = nn.Linear(d, d)
        s.blocks = nn.ModuleList([ResBlock(d) for _ in range(L)])
        s.head = nn.Linear(d, out)

    def forward(s, x):
        x = s.inp(x)
        for b in s.blocks:
            x = _block(b, x)
        return s.head(x)


class MLP(nn.Module):
    def __init__(s, d=256, out=10):
        super().__init__()
        s.layers = nn.ModuleList([nn.Linear(d, d) for _ in range(3)])
        s.head = nn.Linear(d, out)

        s.fp32_layer = None  # the index of a layer kept out of autocast (case fp32gemm)

    def forward(s, x):
        for k, l in enumerate(s.layers):
            if k == s.fp32_layer:  # "for stability": an fp32 island in the fp16 model
                with torch.autocast("cuda", enabled=False):
                    x = F.gelu(l(x.float()))
            else:
                x = F.gelu(l(x))
        return s.head(x)


def _loaded(xs, ys, dev, start):
    """xs and ys, in that order over and over, through a DataLoader whose two workers are
    started by start (fork, spawn), moved to dev."""
    ds = TensorDataset(torch.stack([x.cpu() for x in xs]), torch.stack([y.cpu() for y in ys]))
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True,
                        multiprocessing_context=start)
    while True:
        for x, y in loader:
            yield x.to(dev), y.to(dev)


def gathered(model, wrap):
    """Where the script may write to the blocks' weights in place: FSDP1's unsharded parameters
    are written back to its shards afterwards."""
    if wrap is None or not wrap.startswith("fsdp1"):
        return contextlib.nullcontext()
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    return FSDP.summon_full_params(model, writeback=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", required=True,
                    choices=["attn", "residual", "nan", "log0", "underflow", "sawtooth",
                             "fp32gemm", "diverge", "blowup", "halfeps"])
    ap.add_argument("--healthy", action="store_true")
    ap.add_argument("--print-wmax", action="store_true",
                    help="print the number of floating parameters, then as each step begins the "
                    "largest |w| over them (\"step N wmax X\")")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--device", type=int, metavar="N",
                    help="train on GPU N, the current device left as it is (GPU 0)")
    ap.add_argument("--accum", type=int, default=1, metavar="N",
                    help="micro-batches a step, their gradients accumulated")
    ap.add_argument("--wrap", choices=["ddp", "dp", "fsdp", "fsdp1", "fsdp1-flat"],
                    help="train through DistributedDataParallel (one process), DataParallel, "
                    "FSDP2 (fully_shard) or FSDP1 (FullyShardedDataParallel, use_orig_params "
                    "True, or False: fsdp1-flat)")
    ap.add_argument("--checkpoint", choices=["reentrant", "nonreentrant", "wrapper"],
                    help="recompute each block in the backward (torch.utils.checkpoint in the "
                    "model's forward, or checkpoint_wrapper around each block)")
    ap.add_argument("--compile", choices=["wrap", "inplace", "blocks"],
                    help="train the model compiled: torch.compile(model), model.compile() or "
                    "block.compile() for each block")
    ap.add_argument("--compile-mode", choices=["default", "reduce-overhead", "max-autotune"],
                    default="default", help="torch.compile's mode (default: %(default)s)")
    ap.add_argument("--bf16", action="store_true",
                    help="train in bf16 without autocast or GradScaler: the model cast to bf16")
    ap.add_argument("--lr", type=float,
                    help="Adam's learning rate (default: 1e-4, 1e-3 for a model cast to bf16, "
                    "where at 1e-4 most updates round away in its weights, 70-86%% of them on "
                    "2026-12-04: the lost-updates warning; 1e-5 loses nearly all)")
    ap.add_argument("--fsdp-mp", choices=["fp16", "bf16"],
                    help="with --wrap fsdp, fsdp1 or fsdp1-flat: FSDP's mixed precision in this "
                    "dtype instead of autocast (fp16 with a GradScaler, FSDP1's sharded one)")
    ap.add_argument("--sharded-scaler", action="store_true",
                    help="FSDP's ShardedGradScaler instead of torch.amp.GradScaler")
    ap.add_argument("--fused", action="store_true",
                    help="Adam(fused=True): the GradScaler hands it the scale, it unscales")
    ap.add_argument("--scrub", action="store_true",
                    help="clean the batch in place right after the forward (nan_to_num_), as a "
                    "loader that reuses its buffers would overwrite it: a re-run of the step "
                    "stays finite")
    ap.add_argument("--clip", type=float, metavar="MAX_NORM",
                    help="clip the gradients' norm after scaler.unscale_(opt), as PyTorch's AMP "
                    "recipe does")
    ap.add_argument("--clip-scaled", action="store_true",
                    help="with --clip: clip before scaler.unscale_ (the gradients still scaled)")
    ap.add_argument("--split", action="store_true",
                    help="a second top-level module after the model (a Linear over its output) "
                    "that the optimizer trains too: recorded from step 1 on")
    ap.add_argument("--split-gain", type=float, metavar="G",
                    help="with --split, the Linear's weight times G from the fault's step on "
                    "(with G large its output overflows fp16)")
    ap.add_argument("--watch", action="store_true",
                    help="call ampprobe.torch.watch() in the script: on the model, and with "
                    "--split on the Linear too (the same scaler and optimizer)")
    ap.add_argument("--loader", choices=["fork", "spawn"],
                    help="the batches from a DataLoader with two workers started this way")
    ap.add_argument("--die-at", type=int, metavar="STEP",
                    help="die at the start of that step: raise an exception (a script's error, "
                    "a CUDA out-of-memory) or, with --die-how kill, SIGKILL itself (the OOM "
                    "killer)")
    ap.add_argument("--die-how", choices=["raise", "kill"], default="raise")
    ap.add_argument("--legacy", action="store_true",
                    help="torch.cuda.amp.GradScaler and torch.cuda.amp.autocast, and "
                    "torch.cuda.profiler.start()/stop() around the fault's steps")
    a = ap.parse_args()
    if a.fsdp_mp and not (a.wrap or "").startswith("fsdp"):
        ap.error("--fsdp-mp needs --wrap fsdp, fsdp1 or fsdp1-flat")
    if a.fsdp_mp and (a.bf16 or a.legacy):
        ap.error("--fsdp-mp takes the place of autocast: not with --bf16 or --legacy")
    if a.sharded_scaler and a.wrap not in ("ddp", "fsdp", "fsdp1", "fsdp1-flat"):
        ap.error("--sharded-scaler needs --wrap ddp, fsdp, fsdp1 or fsdp1-flat (it all-reduces "
                 "found_inf over a process group)")
    if a.clip_scaled and a.clip is None:
        ap.error("--clip-scaled needs --clip MAX_NORM")
    if a.loader and a.accum != 1:
        ap.error("--loader takes one batch a step: not with --accum")
    global CHECKPOINT
    if a.checkpoint in ("reentrant", "nonreentrant"):
        CHECKPOINT = a.checkpoint == "reentrant"
    ranks = int(os.environ.get("WORLD_SIZE", "1"))  # torchrun's
    dist_wrap = a.wrap in ("ddp", "fsdp", "fsdp1", "fsdp1-flat")
    if dist_wrap and ranks > 1:
        a.device = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(a.device)  # (FSDP2's device mesh would pick it otherwise)
    steps = a.steps or (30 if a.case == "sawtooth" else 12)
    if a.case == "diverge" and not a.fsdp_mp:
        a.bf16 = True
    torch.manual_seed(0)
    dev = "cuda" if a.device is None else "cuda:%d" % a.device
    current = torch.cuda.current_device()
    gpt = a.case in ("attn", "log0")
    if gpt:
        model = TinyGPT().to(dev)
        xs = [torch.randint(0, 128, (8, 32), device=dev) for _ in range(4)]
        ys = [torch.randint(0, 128, (8 * 32,), device=dev) for _ in range(4)]
    else:
        model = (ResNet() if a.case == "residual" else MLP()).to(dev)
        d = 64 if a.case == "residual" else 256
        xs = [torch.randn(64, d, device=dev) for _ in range(4)]
        ys = [torch.randint(0, 10, (64,), device=dev) for _ in range(4)]
    if a.case == "fp32gemm" and not a.healthy:
        model.fp32_layer = 1
    half = a.case == "halfeps"
    if a.bf16 or half:
        low = torch.float16 if half else torch.bfloat16
        model.to(low)
        xs = [x if not x.is_floating_point() else x.to(low) for x in xs]
    net = model  # the model itself, where the faults are planted
    index = torch.device(dev).index or 0
    blocks = list(getattr(net, "blocks", None) or net.layers)
    if dist_wrap:
        import torch.distributed as dist
        low = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.fsdp_mp)
        store = "/tmp/gpu_faults-%d.store" % os.getpid()
        if ranks > 1:
            dist.init_process_group("nccl")  # torchrun's environment
        else:
            dist.init_process_group("nccl", init_method="file://" + store, rank=0, world_size=1)
        if a.wrap == "ddp":
            model = nn.parallel.DistributedDataParallel(net, device_ids=[index])
        elif a.wrap.startswith("fsdp1"):
            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
            from torch.distributed.fsdp import MixedPrecision
            from torch.distributed.fsdp.wrap import ModuleWrapPolicy
            mp = MixedPrecision(low, low, low) if low else None
            model = FSDP(net, auto_wrap_policy=ModuleWrapPolicy({type(blocks[0])}),
                         use_orig_params=a.wrap == "fsdp1", device_id=index, mixed_precision=mp)
        else:
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
            mp = MixedPrecisionPolicy(param_dtype=low)
            for b in blocks:
                fully_shard(b, mp_policy=mp)
            fully_shard(net, mp_policy=mp)
    elif a.wrap == "dp":
        model = nn.DataParallel(net, device_ids=None if a.device is None else [index])
    if a.checkpoint == "wrapper":
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
            apply_activation_checkpointing)
        ids = {id(b) for b in blocks}
        apply_activation_checkpointing(model, check_fn=lambda m: id(m) in ids)
    mode = dict(mode=a.compile_mode)
    if a.compile == "wrap":
        model = torch.compile(model, **mode)
    elif a.compile == "inplace":
        model.compile(**mode)
    elif a.compile == "blocks":
        for b in blocks:
            b.compile(**mode)
    classes = 128 if gpt else 10
    extra = nn.Linear(classes, classes).to(dev) if a.split else None
    params = list(model.parameters()) + (list(extra.parameters()) if extra else [])
    lr = a.lr if a.lr is not None else 1e-3 if a.bf16 else 1e-4
    opt = torch.optim.Adam(params, lr=lr,  # after fully_shard made them DTensors
                           eps=1e-4 if half and a.healthy else 1e-8, fused=a.fused or None)
    kw = {}
    if a.case == "underflow" and not a.healthy:
        kw = dict(init_scale=1.0, growth_interval=10 ** 9)
    if a.case == "sawtooth" and not a.healthy:
        kw = dict(growth_interval=1)
    autocast = not a.bf16 and not a.fsdp_mp and not half
    scaling = not a.bf16 and a.fsdp_mp != "bf16" and not half
    if a.legacy:
        warnings.filterwarnings("ignore", category=FutureWarning)  # (their deprecation)
        scaler = torch.cuda.amp.GradScaler(enabled=scaling, **kw)
    elif a.sharded_scaler or (a.fsdp_mp and a.wrap.startswith("fsdp1")):
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
        scaler = ShardedGradScaler("cuda", enabled=scaling, **kw)
    else:
        scaler = torch.amp.GradScaler("cuda", enabled=scaling, **kw)
    if a.watch:
        import ampprobe.torch as amp_torch
        amp_torch.watch(model, scaler=scaler, optimizer=opt)
        if extra is not None:
            amp_torch.watch(extra, scaler=scaler, optimizer=opt)
    batches = _loaded(xs, ys, dev, a.loader) if a.loader else None
    if a.print_wmax:
        print("params %d" % sum(p.is_floating_point() for p in params), flush=True)
    for step in range(steps):
        if step == a.die_at:
            if a.die_how == "kill":  # what was recorded 200 ms before must be on disk
                time.sleep(0.3)
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError("gpu_faults.py: dying at step %d as asked (--die-at)" % step)
        fault = not a.healthy and step >= FAULT_STEP
        if a.legacy and step == FAULT_STEP - 1:
            torch.cuda.profiler.start()
        if a.legacy and step == FAULT_STEP + 2:
            torch.cuda.profiler.stop()
        if a.case == "attn" and fault:
            blocks[1].attn.gain = 1e6
        if extra is not None and a.split_gain and step == FAULT_STEP:
            with torch.no_grad():
                extra.weight.mul_(a.split_gain)
        if a.case in ("diverge", "blowup") and step == FAULT_STEP and not a.healthy:
            for g in opt.param_groups:
                g["lr"] = 1.0 if a.case == "diverge" else 100.0
        if a.case == "residual" and step == FAULT_STEP and not a.healthy:
            with torch.no_grad(), gathered(model, a.wrap):
                for b in blocks:
                    b.mlp.fc1.weight.mul_(4)
                    b.mlp.fc2.weight.mul_(4)
        if a.print_wmax:
            with torch.no_grad():
                wmax = max(p.detach().abs().max().item() for p in params)
            print("step %d wmax %.9g" % (step, wmax), flush=True)
        opt.zero_grad(set_to_none=True)
        total = 0.0  # the step's loss: the mean over its micro-batches
        for micro in range(a.accum):
            x, y = next(batches) if batches else (xs[(step + micro) % 4], ys[(step + micro) % 4])
            if a.case == "nan" and step == FAULT_STEP and micro == 0 and not a.healthy:
                x = x.clone()
                x[1, 5] = float("nan")
            with (torch.cuda.amp.autocast(enabled=autocast) if a.legacy else
                  torch.autocast("cuda", dtype=torch.float16, enabled=autocast)):
                out = model(x)
                if extra is not None:
                    out = extra(out)
            if a.scrub and x.is_floating_point():
                x.nan_to_num_(0.0)
            if a.case == "log0":  # the hand-written fp16 loss
                t = 1e-3 if fault else 1.0
                p = torch.softmax(out.half() / t, -1)
                loss = -torch.log(p.gather(1, y[:, None])).float().mean()
            else:
                loss = F.cross_entropy(out.float(), y)
                if a.case == "underflow":
                    loss = loss * 1e-3
            if a.accum > 1:
                loss = loss / a.accum
            total += loss.item()
            scaler.scale(loss).backward()
        if a.clip is not None:
            if not a.clip_scaled:
                scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        scaler.step(opt)
        scaler.update()
        print("step %d loss %.8g scale %g" % (step, total, scaler.get_scale()), flush=True)
        if torch.cuda.current_device() != current:
            sys.exit("gpu_faults.py: the current device moved from %d to %d during step %d" % (
                current, torch.cuda.current_device(), step))
    if dist_wrap:
        torch.distributed.destroy_process_group()
        if os.path.exists(store):
            os.remove(store)


if __name__ == "__main__":
    main()
