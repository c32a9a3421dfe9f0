#!/usr/bin/env python3
"""gpu_patterns.py — fp16 PyTorch training scripts of model shapes gpu_faults.py does not cover,
for `ampprobe run --torch` (no ampprobe code in here). run_gpu.sh runs each, faulty and healthy,
and check_report.py checks the report's first finding.

  python3 gpu_patterns.py --case rnn [--healthy]

Cases (the fault switches on at step 3; --healthy leaves it off; --bf16 trains in bf16 without a
GradScaler, --keep-scaler with one, which bf16 does not need):
  rnn     one cell (a Linear over [x_t, h]) called 12 times a forward, h = relu(cell(...)):
          the input times 1e5 turns inf in autocast's cast to fp16 (in cell)
  lstm    nn.LSTM (cuDNN) and a Linear head: a NaN in the batch (NaN in the input data, lstm)
  mha     nn.MultiheadAttention (need_weights=False: the fused attention), its in_proj_weight
          times 1e4 at step 3: the forward stays finite, the loss jumps and the gradients
          overflow at every scale (the scale's collapse)
  dict    a model that returns a dict {"logits", "aux"}, the loss from both; its logits'
          Linear's weight times 1e6 turns inf in autocast's cast to fp16 (in head)
  frozen  a frozen backbone (requires_grad False, BatchNorm in eval) under a trained head: a
          NaN in the batch (NaN in the input data, first seen by the model's own mean)
  zerograd  a hand-written fp16 loss, -log(softmax(dropout(logits) / T)) with T = 1e-3 at
          step 3 only (log of 0 outside any module), and optimizer.zero_grad(set_to_none=False)
          between the forward and backward(): the loss computation is still replayed and
          judged, and its replay leaves the random state as it was (the batches after it, and
          so the losses printed, are those of a run without ampprobe)
  running a running total of the loss (total += loss.detach()) and a value halved in place
          each step (F.leaky_relu(decay, 0.5, inplace=True)) under a GradScaler whose
          first scale (2**40) overflows the fp16 gradients for several steps (a backward break
          with a finite loss, whose loss computation the bridge replays): the totals printed
          are those of a run without ampprobe (healthy: the default scale)
  innerloss the model computes its loss in its forward (a Hugging Face model given labels),
          the same hand-written loss: log of 0 in the model's own layer
  cl      a convolution net in channels_last (module outputs not contiguous): a NaN in the
          batch (NaN in the input data, conv)
  inplace a residual added in place in the model's forward (h += b(m)): both terms 4e4 at
          step 3 on, their fp16 sum inf (fp16 overflow in add, in the model's own layer)
  setmask a hand-written loss over logits whose class 0 is masked by item assignment
          (logits[:, 0] = -inf): a batch labelled 0 at step 3 alone makes it inf there
          (cross_entropy of a masked logit, outside any module)
  fwdmask the same mask written by the model's forward (through a view of its logits), the
          loss F.cross_entropy: the same finding, the mask's -inf no fault of the forward
  tmask   nn.TransformerEncoderLayer given nn.Transformer.generate_square_subsequent_mask's
          float causal mask (-inf above the diagonal) as an input; its head's weight times 1e6
          at step 3 (fp16 overflow in head: the mask's -inf is no data arriving broken)
  padrow  attention written by hand, its scores masked_fill'ed with -inf where a padding
          mask pads the last 4 keys; at step 3 the first sample is padding whole (the softmax
          over its rows, masked whole: NaN). (nn.MultiheadAttention's key_padding_mask gives
          no NaN there in torch 2.11.)
  router  a router's entropy, where(p > 0, p * log(p), 0), over its top-2 probabilities
          (the others multiplied by 0) from step 3 on: the forward stays finite (where leaves
          log's -inf out), its backward is NaN (0 * -inf) at every scale (a NaN gradient
          through a value the forward left out, in the model's own layer); healthy: the top-2
          as well, the log taken of where(p > 0, p, 1), the fix the report advises
  prior   a log-prior added to the logits, where(counts > 0, log(counts), 0) over counts with
          zeros (a -inf every step, left out, the counts need no gradient); its head's weight
          times 1e6 at step 3 (fp16 overflow in head, not the log)
  norm0   a feature-norm penalty written by hand, (h * h).sum(-1).sqrt() of a bias-free
          projection h of the batch's mean; from step 3 on the first sample is padding (zeros),
          its norm 0: the forward stays finite, sqrt's backward divides by that 0 (inf, then 0 *
          inf = NaN) at every scale (a NaN gradient at sqrt's singular point, in the model's own
          layer, no loss-scale overflow); healthy: an eps inside the sqrt, the fix the report
          advises
  std1    per-batch standardisation written by hand, (h - h.mean(0)) / h.std(0), and at step 3
          a short batch of one sample (an epoch's last): the unbiased std of one value is NaN
          (std of a single value, in the model's own layer); healthy: correction=0 and an eps
          in the divisor, the fix the report advises
  acos    the angle between two projections, acos(cosine_similarity(u, v).clamp(-1, 1)); from
          step 3 on v is u (cos 1): acos's backward is the rsqrt of 1 - 1 = 0 (inf at every
          scale, in the model's own layer); healthy: clamped to [-1 + 1e-6, 1 - 1e-6]
  hexp    a hand-written softmax cross-entropy, exp(z) / exp(z).sum(-1) of the logits over a
          temperature of 1e-3 from step 3 on: autocast runs exp in fp32, and logits above 88.7
          give inf there (an f32 overflow in exp, outside any module); healthy: no temperature,
          the loss as a log-sum-exp with the row max subtracted first, the fix the report
          advises
  smooth  the setmask loss (class 0 masked to -inf, no label on it) with label_smoothing=0.1
          from step 3 on: smoothing takes in every class, the masked one too (cross_entropy of
          a masked logit, outside any module); healthy: smoothed, the mask left out
  rmsnorm an RMSNorm written by hand, x * rsqrt((x * x).mean(-1) + eps) * weight, in a
          residual net whose input features arrive 1000 times larger from step 3 on: autocast
          leaves x * x in fp16 (x.pow(2) it would run in fp32), where values past 256 square to
          inf, and rsqrt(inf) = 0 zeroes those rows, so every loss stays finite while the norms
          put out zeros (an fp16 overflow hidden in blocks.0.norm); healthy: the mean square
          taken in fp32, the fix the report advises
  twoopt  two optimizers, Adam over fc1 and SGD over the head fc2, under one GradScaler:
          scaler.step(adam), then sgd.step() called directly (not scaler.step(sgd)), from step
          0 on: SGD steps on gradients still multiplied by the loss scale (65536 times too
          large; an optimizer stepped outside the GradScaler); healthy: scaler.step(sgd)
  rawstep a loop that scales the loss and then calls opt.step() itself (Adam), never
          scaler.step(opt) nor scaler.update() (AMP half switched on): every step on gradients
          multiplied by the scale, no skip (an optimizer stepped outside the GradScaler; the
          steps still end and are recorded without update()); healthy: scaler.step(opt) and
          scaler.update()
  gan     a generator and a discriminator, two top-level models with an Adam each and one
          GradScaler, trained as PyTorch's AMP examples train several models: the
          discriminator's loss backward and its optimizer's scaler.step(), then the
          generator's, then one scaler.update(); the discriminator's fc1 weight times 1e6 at
          step 3 (fp16 overflow in Disc.fc1, the model the bridge finds beside the generator)
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

FAULT_STEP = 3
STEPS = 8


class Rnn(nn.Module):
    def __init__(s, d=64, out=10):
        super().__init__()
        s.d, s.cell, s.head = d, nn.Linear(2 * d, d), nn.Linear(d, out)

    def forward(s, x):  # (B, T, d)
        h = x.new_zeros(x.shape[0], s.d)
        for t in range(x.shape[1]):
            h = F.relu(s.cell(torch.cat([x[:, t], h], 1)))
        return s.head(h)


class Lstm(nn.Module):
    def __init__(s, d=64, out=10):
        super().__init__()
        s.lstm, s.head = nn.LSTM(d, d, batch_first=True), nn.Linear(d, out)

    def forward(s, x):
        y, _ = s.lstm(x)
        return s.head(y[:, -1])


class Mha(nn.Module):
    def __init__(s, d=64, out=10):
        super().__init__()
        s.attn, s.head = nn.MultiheadAttention(d, 4, batch_first=True), nn.Linear(d, out)

    def forward(s, x):
        y, _ = s.attn(x, x, x, need_weights=False)
        return s.head(y.mean(1))


class DictOut(nn.Module):
    def __init__(s, d=64, out=10):
        super().__init__()
        s.body, s.head, s.aux = nn.Linear(d, d), nn.Linear(d, out), nn.Linear(d, 1)

    def forward(s, x):
        h = F.gelu(s.body(x.mean(1)))
        return {"logits": s.head(h), "aux": s.aux(h)}


class Frozen(nn.Module):
    def __init__(s, d=64, out=10):
        super().__init__()
        s.backbone = nn.Sequential(nn.Linear(d, d), nn.BatchNorm1d(d), nn.ReLU())
        s.head = nn.Linear(d, out)
        s.backbone.requires_grad_(False)

    def train(s, mode=True):  # the backbone stays in eval (its BatchNorm's running stats)
        super().train(mode)
        s.backbone.eval()
        return s

    def forward(s, x):
        return s.head(s.backbone(x.mean(1)))


class Mlp(nn.Module):
    def __init__(s, d=64, out=10):
        super().__init__()
        s.fc1, s.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, out)

    def forward(s, x):
        return s.fc2(F.gelu(s.fc1(x.mean(1))))


class InnerLoss(Mlp):
    temp = 1.0

    def forward(s, x, y):
        p = F.softmax(super().forward(x) / s.temp, -1, dtype=torch.float16)
        return -p.gather(1, y[:, None]).log().mean()


class Conv(nn.Module):
    def __init__(s, out=10):
        super().__init__()
        s.conv, s.head = nn.Conv2d(3, 16, 3, padding=1), nn.Linear(16, out)

    def forward(s, x):
        return s.head(F.relu(s.conv(x)).mean((2, 3)))


class InPlace(nn.Module):
    def __init__(s, d=64, out=10):
        super().__init__()
        s.a, s.b, s.head = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, out)

    def forward(s, x):
        m = x.mean(1)
        h = s.a(m)
        h += s.b(m)
        return s.head(h)


class FwdMask(Mlp):
    def forward(s, x):
        logits = super().forward(x)
        logits[:, 0] = float("-inf")  # class 0 is never predicted
        return logits


class TMask(nn.Module):
    def __init__(s, d=64, out=10):
        super().__init__()
        s.enc = nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True)
        s.head = nn.Linear(d, out)

    def forward(s, x, mask):
        return s.head(s.enc(x, src_mask=mask).mean(1))


class PadRow(nn.Module):
    def __init__(s, d=64, out=10):
        super().__init__()
        s.qkv, s.head = nn.Linear(d, 3 * d), nn.Linear(d, out)

    def forward(s, x, pad):  # pad: (B, T), True where a key is padding
        q, k, v = s.qkv(x).chunk(3, -1)
        att = (q @ k.transpose(1, 2)) / q.shape[-1] ** 0.5
        att = att.masked_fill(pad[:, None, :], float("-inf")).softmax(-1)
        return s.head((att @ v).mean(1))


class Router(nn.Module):
    def __init__(s, d=64, out=10, experts=8):
        super().__init__()
        s.gate, s.head = nn.Linear(d, experts), nn.Linear(d, out)
        s.top2, s.safe = False, False

    def forward(s, x):
        h = x.mean(1)
        p = s.gate(h).float().softmax(-1)
        if s.top2:  # the other experts' probabilities are 0 (multiplied by a 0/1 mask: a
            # scatter of the top 2 would take their gradients only, the NaN left behind)
            keep = torch.zeros_like(p).scatter(-1, p.topk(2, -1).indices, 1.0)
            p = p * keep / (p * keep).sum(-1, keepdim=True)
        if s.safe:  # the left-out branch made finite before it is computed
            ent = p * torch.where(p > 0, p, 1.0).log()
        else:
            ent = torch.where(p > 0, p * p.log(), 0.0)
        return s.head(h), ent.sum(-1).mean()


class Prior(nn.Module):
    def __init__(s, d=64, out=10):
        super().__init__()
        s.body, s.head = nn.Linear(d, d), nn.Linear(d, out)

    def forward(s, x, counts):  # counts: (B, out), with zeros
        prior = torch.where(counts > 0, counts.log(), 0.0)
        return s.head(F.relu(s.body(x.mean(1)))) + prior


class Norm0(nn.Module):
    def __init__(s, d=64, out=10):
        super().__init__()
        s.proj, s.head = nn.Linear(d, d, bias=False), nn.Linear(d, out)
        s.eps = 0.0

    def forward(s, x):
        h = s.proj(x.mean(1)).float()
        return s.head(h), ((h * h).sum(-1) + s.eps).sqrt().mean()


class Std1(nn.Module):
    def __init__(s, d=64, out=10):
        super().__init__()
        s.body, s.head = nn.Linear(d, d), nn.Linear(d, out)
        s.safe = False

    def forward(s, x):
        h = s.body(x.mean(1)).float()
        if s.safe:
            return s.head((h - h.mean(0)) / (h.std(0, correction=0) + 1e-5))
        return s.head((h - h.mean(0)) / h.std(0))


class Angle(nn.Module):
    def __init__(s, d=64, out=10):
        super().__init__()
        s.a, s.b, s.head = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, out)
        s.tie, s.eps = False, 0.0

    def forward(s, x):
        u = s.a(x.mean(1)).float()
        v = u if s.tie else s.b(x.mean(1)).float()
        cos = F.cosine_similarity(u, v, -1).clamp(-1 + s.eps, 1 - s.eps)
        return s.head(u), torch.acos(cos).mean()


class RMSNorm(nn.Module):
    def __init__(s, d, eps=1e-6):
        super().__init__()
        s.weight, s.eps, s.f32 = nn.Parameter(torch.ones(d)), eps, False

    def forward(s, x):
        if s.f32:  # (as Llama's RMSNorm does)
            return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + s.eps)
                    ).to(x.dtype) * s.weight
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + s.eps) * s.weight


class RmsBlock(nn.Module):
    def __init__(s, d):
        super().__init__()
        s.norm, s.ff = RMSNorm(d), nn.Linear(d, d)

    def forward(s, h):
        return h + s.ff(F.gelu(s.norm(h)))


class RmsNet(nn.Module):
    def __init__(s, d=64, out=10):
        super().__init__()
        s.proj = nn.Linear(d, d)
        s.blocks = nn.ModuleList([RmsBlock(d), RmsBlock(d)])
        s.norm, s.head = RMSNorm(d), nn.Linear(d, out)
        s.gain = 1.0

    def forward(s, x):
        h = s.proj(x.mean(1) * s.gain)
        for b in s.blocks:
            h = b(h)
        return s.head(s.norm(h))


class Gen(nn.Module):
    def __init__(s, z=16, d=64):
        super().__init__()
        s.fc1, s.fc2 = nn.Linear(z, d), nn.Linear(d, d)

    def forward(s, z):
        return s.fc2(F.relu(s.fc1(z)))


class Disc(nn.Module):
    def __init__(s, d=64):
        super().__init__()
        s.fc1, s.fc2 = nn.Linear(d, d), nn.Linear(d, 1)

    def forward(s, x):
        return s.fc2(F.leaky_relu(s.fc1(x), 0.2))


def gan(a):
    """The gan case's loop (PyTorch's AMP recipe for several models, losses and optimizers)."""
    dev = "cuda"
    gen, disc = Gen().to(dev), Disc().to(dev)
    o_gen = torch.optim.Adam(gen.parameters(), lr=1e-4)
    o_disc = torch.optim.Adam(disc.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler("cuda")
    bce = F.binary_cross_entropy_with_logits
    for step in range(STEPS):
        if not a.healthy and step == FAULT_STEP:
            with torch.no_grad():
                disc.fc1.weight.mul_(1e6)
        real, z = torch.randn(16, 64, device=dev), torch.randn(16, 16, device=dev)
        ones, zeros = torch.ones(16, 1, device=dev), torch.zeros(16, 1, device=dev)
        with torch.autocast("cuda", dtype=torch.float16):
            fake = gen(z)
            loss_d = bce(disc(real), ones) + bce(disc(fake.detach()), zeros)
        o_disc.zero_grad()
        scaler.scale(loss_d).backward()
        scaler.step(o_disc)
        with torch.autocast("cuda", dtype=torch.float16):
            loss_g = bce(disc(fake), ones)
        o_gen.zero_grad()
        scaler.scale(loss_g).backward()
        scaler.step(o_gen)
        scaler.update()
        print("step %d loss_d %.6g loss_g %.6g scale %g" % (
            step, loss_d.item(), loss_g.item(), scaler.get_scale()), flush=True)


MODELS = {"rnn": Rnn, "lstm": Lstm, "mha": Mha, "dict": DictOut, "frozen": Frozen,
          "zerograd": Mlp, "innerloss": InnerLoss, "cl": Conv, "running": Mlp,
          "inplace": InPlace, "setmask": Mlp, "fwdmask": FwdMask,
          "tmask": TMask, "padrow": PadRow, "router": Router, "prior": Prior,
          "norm0": Norm0, "std1": Std1, "acos": Angle, "hexp": Mlp,
          "smooth": Mlp, "rmsnorm": RmsNet, "twoopt": Mlp,
          "rawstep": Mlp}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", required=True, choices=sorted(list(MODELS) + ["gan"]))
    ap.add_argument("--healthy", action="store_true")
    ap.add_argument("--bf16", action="store_true",
                    help="autocast to bf16 and no GradScaler (backward() and step() plainly)")
    ap.add_argument("--keep-scaler", action="store_true",
                    help="with --bf16: the GradScaler kept (a needless one, as some loops keep "
                    "it when they switch to bf16)")
    a = ap.parse_args()
    if a.keep_scaler and not a.bf16:
        ap.error("--keep-scaler goes with --bf16 (an fp16 run keeps its GradScaler anyway)")
    torch.manual_seed(0)
    if a.case == "gan":
        return gan(a)
    dev = "cuda"
    model = MODELS[a.case]().to(dev).train()
    if a.case == "cl":
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    opt2 = None
    if a.case == "twoopt":
        opt = torch.optim.Adam(model.fc1.parameters(), lr=1e-3)
        opt2 = torch.optim.SGD(model.fc2.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0**40 if a.case == "running" and
                                  not a.healthy else 2.0**16,
                                  enabled=not a.bf16 or a.keep_scaler)
    total, decay = torch.zeros((), device=dev), torch.full((), -1.0, device=dev)
    for step in range(STEPS):
        fault = not a.healthy and step >= FAULT_STEP
        n = 1 if a.case == "std1" and step == FAULT_STEP else 16  # (the healthy twin too)
        x = torch.randn(n, 12, 64, device=dev)
        if a.case == "cl":
            x = torch.randn(16, 3, 16, 16, device=dev).to(memory_format=torch.channels_last)
        masked = a.case in ("setmask", "fwdmask", "smooth")
        y = torch.randint(1 if masked else 0, 10, (n,), device=dev)
        if fault and step == FAULT_STEP and masked:
            y[0] = 0
        if fault and a.case == "rnn":
            x = x * 1e5
        if fault and a.case in ("lstm", "frozen", "cl"):
            x[0, 0, 0] = float("nan")
        if fault and step == FAULT_STEP and a.case == "mha":
            with torch.no_grad():
                model.attn.in_proj_weight.mul_(1e4)
        if fault and step == FAULT_STEP and a.case == "inplace":
            with torch.no_grad():  # h = a(m) + b(m) = 4e4 + 4e4 in fp16
                for lin in (model.a, model.b):
                    lin.weight.zero_()
                    lin.bias.fill_(4e4)
        if fault and step == FAULT_STEP and a.case in ("dict", "tmask", "prior"):
            with torch.no_grad():
                model.head.weight.mul_(1e6)
        if a.case == "innerloss":
            model.temp = 1e-3 if fault else 1.0
        if a.case == "router":
            model.top2, model.safe = step >= FAULT_STEP, a.healthy
        if a.case == "std1":
            model.safe = a.healthy
        if a.case == "acos":
            model.tie, model.eps = step >= FAULT_STEP, 1e-6 if a.healthy else 0.0
        if a.case == "norm0":
            model.eps = 1e-12 if a.healthy else 0.0
            if step >= FAULT_STEP:
                x[0] = 0.0  # a padding sample
        if a.case == "rmsnorm":
            model.gain = 1000.0 if step >= FAULT_STEP else 1.0  # (the healthy twin too)
            for m in model.modules():
                if isinstance(m, RMSNorm):
                    m.f32 = a.healthy
        extra = ()
        if a.case == "prior":
            extra = (torch.randint(0, 3, (16, 10), device=dev).float(),)
        if a.case == "tmask":
            extra = (nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=dev),)
        if a.case == "padrow":
            pad = torch.zeros(x.shape[:2], dtype=torch.bool, device=dev)
            pad[:, -4:] = True
            if fault and step == FAULT_STEP:
                pad[0] = True
            extra = (pad,)
        with torch.autocast("cuda", dtype=torch.bfloat16 if a.bf16 else torch.float16):
            out = model(x, y) if a.case == "innerloss" else model(x, *extra)
            if a.case == "innerloss":
                loss = out
            elif a.case in ("router", "norm0", "acos"):
                loss = F.cross_entropy(out[0], y) + 0.01 * out[1]
            elif isinstance(out, dict):
                loss = F.cross_entropy(out["logits"], y) + 0.1 * out["aux"].float().pow(2).mean()
            elif a.case == "zerograd":  # the fp16 logits' softmax, its log taken by hand
                opt.zero_grad(set_to_none=False)  # (after the forward: zeroes each .grad)
                temp = 1e-3 if fault and step == FAULT_STEP else 1.0  # (one broken step)
                p = F.softmax(F.dropout(out, 0.1) / temp, -1, dtype=torch.float16)
                loss = -p.gather(1, y[:, None]).log().mean()
            elif a.case == "hexp" and a.healthy:  # the log-sum-exp the report advises
                m = out.amax(-1, keepdim=True)
                lse = m + (out - m).exp().sum(-1, keepdim=True).log()
                loss = (lse - out.gather(1, y[:, None])).mean()
            elif a.case == "hexp":  # (under autocast: exp in fp32)
                e = (out / (1e-3 if fault else 1.0)).exp()
                loss = -(e / e.sum(-1, keepdim=True)).gather(1, y[:, None]).log().mean()
            elif a.case == "smooth":  # (no label on class 0)
                logits = out.float()
                if not a.healthy:
                    logits[:, 0] = float("-inf")
                loss = F.cross_entropy(logits, y, label_smoothing=0.1 if step >= FAULT_STEP
                                       else 0.0)
            elif a.case == "setmask":
                logits = out.float()
                logits[:, 0] = float("-inf")  # class 0 is never predicted
                loss = F.cross_entropy(logits, y)
            else:
                loss = F.cross_entropy(out, y)
            if a.case == "running":
                total += loss.detach()
                F.leaky_relu(decay, 0.5, inplace=True)  # (halved each step: a function told
                # inplace=True on a tensor from elsewhere, which a replay must not call again)
        opt.zero_grad(set_to_none=a.case != "zerograd")
        if opt2 is not None:
            opt2.zero_grad()
        if a.bf16 and not a.keep_scaler:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            if a.case == "rawstep" and not a.healthy:  # (the fault: no scaler.step, no update)
                opt.step()
                print("step %d loss %.6g" % (step, loss.item()), flush=True)
                continue
            scaler.step(opt)
            if opt2 is not None and a.healthy:
                scaler.step(opt2)
            elif opt2 is not None:
                opt2.step()  # (the fault: on gradients still multiplied by the scale)
            scaler.update()
        print("step %d loss %.6g scale %g total %.6g decay %.6g" % (
            step, loss.item(), scaler.get_scale(), total.item(), decay.item()), flush=True)


if __name__ == "__main__":
    main()
