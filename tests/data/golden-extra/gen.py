# Generates tests/data/golden-extra with real PyTorch on the GPU machine: python3 gen.py OUTDIR
import os, struct, sys, math, random
import torch, torch.nn as nn, torch.nn.functional as F
out = sys.argv[1]; os.makedirs(out, exist_ok=True)
dev = "cuda"
print(torch.__version__, torch.cuda.get_device_name())

def bits32(x): return struct.unpack('<I', struct.pack('<f', x))[0]

# ---------------- scaler updates
lines = ["# case init_scale growth_factor backoff_factor growth_interval | then per update: found_inf scale scale_bits_hex growth_tracker"]
rng = random.Random(5)
def scaler_case(name, init, gf, bf, interval, fis):
    s = torch.full((), init, dtype=torch.float32, device=dev)
    t = torch.zeros((), dtype=torch.int32, device=dev)
    lines.append(f"case {name} {init!r} {gf!r} {bf!r} {interval}")
    for fi in fis:
        f = torch.full((), fi, dtype=torch.float32, device=dev)
        torch._amp_update_scale_(s, t, f, gf, bf, interval)
        v = s.item()
        lines.append(f"{fi!r} {v!r} {bits32(v):08x} {t.item()}")
    lines.append("end")
scaler_case("R_random", 1000.0, 1.5, 0.7, 3, [float(rng.random() < 0.3) for _ in range(300)])
scaler_case("R_cap", 3e38, 2.0, 0.5, 1, [0.0] * 4)
scaler_case("R_subnormal", 1e-40, 10.0, 0.1, 2, [0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0])
scaler_case("R_neg_interval", 512.0, 2.0, 0.5, -1, [0.0, 0.0, 1.0, 0.0])
scaler_case("R_three_devices", 65536.0, 2.0, 0.5, 2, [3.0, 0.0, 0.0, 0.0])
open(f"{out}/scaler_updates_extra.txt", "w").write("\n".join(lines) + "\n")

# ---------------- unscale
ul = ["# case dtype scale | inv_scale inv_bits found_inf | in_bits... | out_bits..."]
g = torch.Generator().manual_seed(7)
def unscale_case(name, dtype, scale, vals):
    t = vals.to(dtype).to(dev)
    inp = t.clone()
    found = torch.zeros((), dtype=torch.float32, device=dev)
    inv = torch.full((), scale, dtype=torch.float32, device=dev).double().reciprocal().float()
    torch._amp_foreach_non_finite_check_and_unscale_([t], found, inv)
    w = 8 if dtype == torch.float32 else 4
    iv = torch.int32 if dtype == torch.float32 else torch.int16
    mask = 0xffffffff if w == 8 else 0xffff
    hexs = lambda x: " ".join(f"{(int(v) & mask):0{w}x}" for v in x.cpu().view(iv).tolist())
    ul.append(f"case {name} {'f32' if w == 8 else 'f16'} {scale!r}")
    ul.append(f"{inv.item()!r} {bits32(inv.item()):08x} {found.item()!r}")
    ul.append(hexs(inp)); ul.append(hexs(t)); ul.append("end")
r = torch.randn(64, generator=g)
unscale_case("R1_f32", torch.float32, 65536.0, r * 1e5)
r2 = torch.randn(16, generator=g); r2[5] = float('nan')
unscale_case("R2_nan", torch.float32, 3.0, r2)
unscale_case("R3_f16_pow2", torch.float16, 1024.0, torch.randn(48, generator=g) * 100)
unscale_case("R4_f16_third", torch.float16, 3.0, torch.cat([torch.randn(40, generator=g) * 1000, torch.tensor([6e-8, -6e-8, 65504., 1e-5])]))
unscale_case("R5_tiny_scale", torch.float32, 2.0**-127, torch.tensor([0.0, 1e-3, -2.0, 1e-38]))
unscale_case("R6_huge_inv", torch.float32, 1e-30, torch.tensor([1e-10, 1e10, 0.0, -3.0]))
unscale_case("R7_f16_inf", torch.float16, 8.0, torch.tensor([1.0, float('-inf'), 2.0]))
open(f"{out}/unscale_extra.txt", "w").write("\n".join(ul) + "\n")

# ---------------- autocast tables
def dt_name(d): return {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.int64: "i64"}[d]
def T(shape, d): return torch.randn(*shape, device=dev).to(d)
def f32(*s): return torch.randn(*s, device=dev)
def h16(*s): return torch.randn(*s, device=dev).half()
idx = lambda n, hi: torch.randint(0, hi, (n,), device=dev)
ops_std = {
 "mm": lambda d: torch.mm(T((4, 4), d), f32(4, 4)),
 "linear": lambda d: F.linear(T((2, 4), d), f32(3, 4), f32(3)),
 "conv2d": lambda d: F.conv2d(T((1, 2, 5, 5), d), f32(3, 2, 3, 3), f32(3)),
 "softmax": lambda d: torch.softmax(T((4,), d), -1),
 "layer_norm": lambda d: F.layer_norm(T((2, 4), d), (4,), f32(4), f32(4)),
 "batch_norm": lambda d: F.batch_norm(T((4, 3), d), None, None, training=True),
 "cross_entropy": lambda d: F.cross_entropy(T((4, 5), d), idx(4, 5)),
 "addcdiv": lambda d: torch.addcdiv(f32(4), T((4,), d), T((4,), d).abs() + 1),
 "cat": lambda d: torch.cat([T((4,), d), h16(4)]),
 "add": lambda d: T((4,), d) + h16(4),
 "embedding": lambda d: F.embedding(idx(3, 5), T((5, 4), d)),
 "masked_fill": lambda d: T((4,), d).masked_fill(torch.tensor([True, False, True, False], device=dev), 0.0),
 "bce": lambda d: F.binary_cross_entropy(torch.sigmoid(T((4,), d)), torch.rand(4, device=dev)),
 "sdpa": lambda d: F.scaled_dot_product_attention(T((1, 2, 4, 8), d), f32(1, 2, 4, 8), f32(1, 2, 4, 8)),
}
ops_extra = {
 "conv1d": lambda d: F.conv1d(T((1, 2, 8), d), f32(3, 2, 3), f32(3)),
 "prelu": lambda d: F.prelu(T((2, 3), d), f32(1)),
 "addmv": lambda d: torch.addmv(T((3,), d), f32(3, 4), f32(4)),
 "mv": lambda d: torch.mv(T((3, 4), d), f32(4)),
 "einsum": lambda d: torch.einsum("ij,jk->ik", T((2, 3), d), f32(3, 2)),
 "softplus": lambda d: F.softplus(T((4,), d)),
 "tan": lambda d: torch.tan(T((4,), d)),
 "cosh": lambda d: torch.cosh(T((4,), d)),
 "expm1": lambda d: torch.expm1(T((4,), d)),
 "log1p": lambda d: torch.log1p(T((4,), d).abs()),
 "reciprocal": lambda d: torch.reciprocal(T((4,), d)),
 "cumprod": lambda d: torch.cumprod(T((4,), d), 0),
 "linalg_vector_norm": lambda d: torch.linalg.vector_norm(T((4,), d)),
 "cosine_similarity": lambda d: F.cosine_similarity(T((2, 4), d), f32(2, 4)),
 "l1_loss": lambda d: F.l1_loss(T((4,), d), f32(4)),
 "smooth_l1_loss": lambda d: F.smooth_l1_loss(T((4,), d), f32(4)),
 "kl_div": lambda d: F.kl_div(T((4,), d), f32(4)),
 "atan2": lambda d: torch.atan2(T((4,), d), f32(4)),
 "dot": lambda d: torch.dot(T((4,), d), f32(4)),
 "hardtanh": lambda d: F.hardtanh(T((4,), d)),
 "leaky_relu": lambda d: F.leaky_relu(T((4,), d)),
 "abs": lambda d: torch.abs(T((4,), d)),
}
def table(path, ops, cols):
    hdr = "# op  " + "  ".join(f"in={dt_name(i)}/ac={dt_name(a)}" for i, a in cols)
    L = [f"# torch {torch.__version__}; generated for conform robustness", hdr]
    for name, fn in ops.items():
        res = []
        for i, a in cols:
            try:
                with torch.autocast("cuda", dtype=a):
                    res.append(dt_name(fn(i).dtype))
            except Exception as e:
                res.append("error")
        L.append(name + " " + " ".join(res))
    open(path, "w").write("\n".join(L) + "\n")
std_cols = [(torch.float32, torch.float16), (torch.float16, torch.float16), (torch.float32, torch.bfloat16), (torch.bfloat16, torch.bfloat16)]
table(f"{out}/autocast_dtypes_std.txt", ops_std, std_cols)
table(f"{out}/autocast_dtypes_extra.txt", ops_extra, std_cols)
table(f"{out}/autocast_dtypes_mixed.txt", ops_std, [(torch.float16, torch.bfloat16), (torch.bfloat16, torch.float16)])

# ---------------- conversions
cg = torch.Generator().manual_seed(11)
bits = torch.randint(-2**31, 2**31 - 1, (40000,), generator=cg, dtype=torch.int64).to(torch.int32)
edges = torch.tensor([65519.99, 65520., 2.0**-25, 2.0**-24, 1 + 2.0**-11, 3.3961775292304854e38, 1e-45, -0.0, 0.1, float('inf'), float('nan')], dtype=torch.float32)
base = torch.cat([bits.view(torch.float32), edges, (torch.rand(10000, generator=cg) * 70000).float(), (torch.rand(5000, generator=cg) * 2**-20).float()])
open(f"{out}/conv_edge_in_f32.bin", "wb").write(base.numpy().tobytes())
for tag, d in [("cuda", "cuda"), ("cpu", "cpu")]:
    open(f"{out}/conv_edge_f16_{tag}.bin", "wb").write(base.to(d).half().cpu().view(torch.int16).numpy().tobytes())
    open(f"{out}/conv_edge_bf16_{tag}.bin", "wb").write(base.to(d).bfloat16().cpu().view(torch.int16).numpy().tobytes())

# ---------------- e2e
def e2e(fname, keys, in_, hidden, outn, act, batch, steps, optimizer, opt_kw, precision, scaler_kw, use_scaler,
        trace=True, finals=True, seed=0, xscale=1.0):
    torch.manual_seed(seed)
    l1 = nn.Linear(in_, hidden).to(dev); l2 = nn.Linear(hidden, outn).to(dev)
    pre = f"{out}/{fname}"
    for n, t in [("W1", l1.weight), ("b1", l1.bias), ("W2", l2.weight), ("b2", l2.bias)]:
        open(f"{pre}_{n}.f32", "wb").write(t.detach().cpu().numpy().tobytes())
    X = (torch.randn(steps, batch, in_) * xscale).float(); Y = torch.randint(0, outn, (steps, batch), dtype=torch.int32)
    open(f"{pre}_X.f32", "wb").write(X.numpy().tobytes()); open(f"{pre}_Y.i32", "wb").write(Y.numpy().tobytes())
    X = X.to(dev); Y = Y.to(dev)
    params = list(l1.parameters()) + list(l2.parameters())
    opt = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[optimizer](params, **opt_kw)
    sc = torch.amp.GradScaler("cuda", enabled=use_scaler, **scaler_kw)
    dt = torch.float16 if precision == "fp16" else torch.bfloat16
    actf = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}[act]
    tl = ["# step loss scale_before found_inf scale_after"]
    for s in range(steps):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dt):
            logits = l2(actf(l1(X[s])))
        loss = F.cross_entropy(logits.float(), Y[s].long())
        sb = sc.get_scale()
        sc.scale(loss).backward()
        sc.unscale_(opt)
        fi = sum(v.item() for v in sc._per_optimizer_states[id(opt)]["found_inf_per_device"].values()) if use_scaler else 0.0
        sc.step(opt); sc.update()
        tl.append(f"{s} {loss.item()!r} {sb!r} {int(fi)} {sc.get_scale()!r}")
    if trace: open(f"{pre}_trace.txt", "w").write("\n".join(tl) + "\n")
    if finals:
        for n, t in [("W1", l1.weight), ("b1", l1.bias), ("W2", l2.weight), ("b2", l2.bias)]:
            open(f"{pre}_final_{n}.f32", "wb").write(t.detach().cpu().numpy().tobytes())
    m = ["# generated for conform robustness"] + [f"{k}={v}" for k, v in keys.items()]
    open(f"{pre}.manifest", "w").write("\n".join(m) + "\n")
    print(fname, "found_inf steps:", sum(1 for l in tl[1:] if l.split()[3] != "0"))

e2e("e2e_adam_gelu", dict(name="adam_gelu", **{"in": 32}, hidden=64, out=8, act="gelu", batch=16, steps=40, optimizer="adam", lr=0.002,
    beta1=0.9, beta2=0.999, eps=1e-8, precision="fp16", init_scale=16777216, growth_interval=5),
    32, 64, 8, "gelu", 16, 40, "adam", dict(lr=0.002), "fp16", dict(init_scale=16777216.0, growth_interval=5), True, seed=1)
e2e("e2e_adamw_bf16", dict(name="adamw_bf16", **{"in": 24}, hidden=48, out=6, act="gelu_tanh", batch=8, steps=30, optimizer="adamw",
    lr=0.001, weight_decay=0.05, beta2=0.99, eps=1e-6, precision="bf16"),
    24, 48, 6, "gelu_tanh", 8, 30, "adamw", dict(lr=0.001, weight_decay=0.05, betas=(0.9, 0.99), eps=1e-6), "bf16", {}, False, seed=2)
e2e("e2e_sgdm_bf16_scaled", dict(name="sgdm_bf16_scaled", **{"in": 16}, hidden=32, out=5, act="relu", batch=8, steps=30, optimizer="sgd",
    lr=0.02, momentum=0.9, weight_decay=1e-4, precision="bf16", init_scale=256, growth_factor=4, backoff_factor=0.25, growth_interval=3),
    16, 32, 5, "relu", 8, 30, "sgd", dict(lr=0.02, momentum=0.9, weight_decay=1e-4), "bf16",
    dict(init_scale=256.0, growth_factor=4.0, backoff_factor=0.25, growth_interval=3), True, seed=3)
e2e("e2e_defaults", {"in": 20, "hidden": 40, "out": 7, "act": "relu", "batch": 12, "steps": 25, "optimizer": "sgd"},
    20, 40, 7, "relu", 12, 25, "sgd", {}, "fp16", {}, True, seed=4, xscale=3.0)
e2e("e2e_trace_only", dict(name="trace_only", **{"in": 16}, hidden=16, out=4, act="gelu", batch=8, steps=20, optimizer="adam", lr=0.01,
    precision="fp16", init_scale=1e9), 16, 16, 4, "gelu", 8, 20, "adam", dict(lr=0.01), "fp16", dict(init_scale=1e9), True, finals=False, seed=5)
e2e("e2e_finals_only", dict(name="finals_only", **{"in": 16}, hidden=16, out=4, act="gelu_tanh", batch=8, steps=20, optimizer="adamw", lr=0.01,
    growth_interval=4), 16, 16, 4, "gelu_tanh", 8, 20, "adamw", dict(lr=0.01), "fp16", dict(growth_interval=4), True, trace=False, seed=6)
print("done")
