#!/usr/bin/env python3
"""fused_stats_e2e.py BUILD OUT — on the GPU machine (not CI, which has no GPU): each sample run
with --device cuda under `ampprobe run` twice, once with the statistics added by the kernels that
write or read the tensors (the default) and once with every tensor read again by the statistics
kernel (AMPPROBE_STATS_FUSED=0); the two databases must hold the same AMP_TENSOR_STATS rows of the
first step (later steps train on weights that atomically summed gradients made differ in their
last bits from run to run; for the same reason min, max and amax may differ by 1e-5 relative: the
embedding's gradient is such a sum), the same events, the same gradient norm of the first step
(to 1e-5 relative: sums of squares added in another order) and the same first finding of the
report among those the numbers make (the performance rules read kernel timings, which differ
from run to run: the step of gpu-idle's largest gap). Prints one line per run and PASS/FAILED;
exits 1 on a difference."""
import json, os, sqlite3, subprocess, sys

build, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
RUNS = [  # sample, flags
    ("tiny_gpt", "--precision fp16 --fault attn-overflow --steps 8"),
    ("tiny_gpt", "--precision fp16 --steps 6 --layers 2 --d-model 64 --seq 64"),
    ("tiny_gpt", "--precision bf16 --fault nan-input --steps 6"),
    ("mlp", "--precision fp16 --fault grad-underflow --steps 6"),
    ("mlp", "--precision fp16 --fault log-zero --steps 6"),
    ("simple_cnn", "--precision fp16 --fault scale-thrash --steps 6"),
]
STATS = ("SELECT step, layer_id, op, kind, dtype, target_dtype, numel, min, max, amax, n_nan, n_posinf, "
         "n_neginf, n_overflow, n_underflow, n_zero FROM AMP_TENSOR_STATS WHERE step = 0")
NORM = "SELECT grad_norm FROM AMP_STEPS WHERE step = 0"  # the gradients' sums of squares
TIMING_RULES = {"gpu-idle", "roofline", "amp-payoff", "h2d-copies", "host-sync", "precision-placement"}
EVENTS = "SELECT step, layer_id, op, phase, kind, severity, count, value, detail, occurrences FROM AMP_EVENTS"


def rows(db, sql):
    con = sqlite3.connect(db)
    got = sorted(con.execute(sql).fetchall(), key=repr)
    con.close()
    return got


def record(sample, flags, fused, path):
    env = dict(os.environ, AMPPROBE_STATS_FUSED="1" if fused else "0")
    cmd = [f"{build}/ampprobe", "run", "-f", "-o", path, "--", f"{build}/samples/{sample}", "--device", "cuda",
           "--quiet"] + flags.split()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300)
    rep = subprocess.run([f"{build}/ampprobe", "report", "--format", "json", path], capture_output=True, text=True)
    findings = [f for f in (json.loads(rep.stdout).get("findings", []) if rep.stdout else [])
                if f.get("rule") not in TIMING_RULES]
    top = findings[0] if findings else {}
    return (top.get("rule"), top.get("layer"), top.get("op"), (top.get("steps") or {}).get("first"))


def same(ra, rb):
    if len(ra) != len(rb): return False
    for a, b in zip(ra, rb):
        if a[:7] != b[:7] or a[10:] != b[10:]: return False
        for x, y in zip(a[7:10], b[7:10]):
            if not (x == y or (x is not None and y is not None and abs(x - y) <= 1e-5 * max(abs(x), abs(y)))):
                return False
    return True


fail = False
for k, (sample, flags) in enumerate(RUNS):
    a, b = f"{out}/fused{k}.sqlite", f"{out}/separate{k}.sqlite"
    ta, tb = record(sample, flags, True, a), record(sample, flags, False, b)
    sa, sb = rows(a, STATS), rows(b, STATS)
    ea, eb = rows(a, EVENTS), rows(b, EVENTS)
    na, nb = rows(a, NORM), rows(b, NORM)
    norms = len(na) == len(nb) == 1 and (na[0][0] == nb[0][0] or (
        na[0][0] is not None and nb[0][0] is not None and abs(na[0][0] - nb[0][0]) <= 1e-5 * abs(nb[0][0])))
    diff = [r for r in set(sa) ^ set(sb)][:3]
    ok = len(sa) > 0 and same(sa, sb) and ea == eb and ta == tb and norms
    fail |= not ok
    print(f"{sample} {flags}: {len(sa)} statistics rows of step 0, {len(ea)} events, top finding {ta}"
          + ("" if ok else f" | separate: {len(sb)} rows, {len(eb)} events, top {tb}; "
                           f"first differing rows {diff}; events equal {ea == eb}; grad norms {na} {nb}")
          + (" PASS" if ok else " FAILED"), flush=True)
print("FAILED" if fail else "PASS: fused and separate statistics agree")
sys.exit(1 if fail else 0)
