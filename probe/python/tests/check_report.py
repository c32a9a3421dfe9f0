#!/usr/bin/env python3
"""check_report.py — checks `ampprobe report --format json` of a gpu_faults.py run (run_gpu.sh).

  check_report.py REPORT.json CASE [--healthy]

A faulty run's first finding must name the cause, layer and step the case planted (gpu_faults.py);
a healthy twin must have no error and no warning. Prints one PASS/FAIL line with the first
finding; exits 1 on FAIL.
"""
import json
import sys

FAULT_STEP = 3


def expect(case, f):
    """None when finding f is what case should lead with, else what is wrong."""
    layer, op, first = f.get("layer") or "", f.get("op") or "", (f.get("steps") or {}).get("first")
    checks = {
        "attn": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
                and layer == "blocks.1.attn" and op == "mul" and first == FAULT_STEP
                and "fp16 overflow" in f["title"],
        "residual": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
                    and layer.startswith("blocks.") and first == FAULT_STEP,
        "nan": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error"
               and f["title"].startswith("NaN/inf in the input data") and layer == "layers.0"
               and first == FAULT_STEP,
        "log0": f["rule"] == "nonfinite-root-cause" and f["severity"] == "error" and op == "log"
                and layer in ("", "the top level") and first == FAULT_STEP,
        "underflow": f["severity"] == "warning" and (
            f["rule"] == "grad-underflow" or
            (f["rule"] == "loss-scale" and "stuck low" in f["title"])),
        "sawtooth": f["rule"] == "loss-scale" and f["severity"] == "warning"
                    and "sawtooth" in f["title"],
    }
    return None if checks[case] else "unexpected first finding"


def main():
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
        why = expect(case, top) if top else "no findings"
        ok = why is None
    print("%s %s%s: %s%s" % ("PASS" if ok else "FAIL", case, " (healthy)" if healthy else "",
                             desc, "" if ok else "  <- " + why), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
