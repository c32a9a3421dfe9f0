"""torch_cases.py — the runner of the CPU torch scripts (cpu_judge.py, cpu_devstats.py): each
case a (name, passed, what was found) triple; a line per case, a summary line, exit 1 on a
failure."""
import sys

import torch


def run(script, cases):
    failed = 0
    for name, ok, got in cases:
        print("%s %s: %s" % ("PASS" if ok else "FAIL", name, got))
        failed += not ok
    print("%s: %s (torch %s)" % (script, "all passed" if not failed else "%d failed" % failed,
                                torch.__version__))
    sys.exit(1 if failed else 0)
