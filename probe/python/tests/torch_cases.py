"""torch_cases.py — the runner of the CPU torch scripts (cpu_judge.py, cpu_devstats.py,
cpu_trace.py, cpu_diagnose.py, cpu_models.py, cpu_settings.py): each case a (name, passed, what
was found) triple; a line per case, a summary line, exit 1 on a failure. Events stands in for the
watcher the judge, the tracers and the diagnoser report to."""
import sys

import torch


class Events:
    """What the bridge's judge and tracers emit (Watcher.rec.event's arguments that matter
    here): each event's (op, kind), its layer and its detail."""

    def __init__(self):
        self.rec, self.events, self.layers, self.details = self, [], [], []

    def event(self, step, layer, op, phase, kind, severity, count=-1, value=None, detail=None):
        self.events.append((op, kind))
        self.layers.append(layer)
        self.details.append(detail)

    def layer_name(self, layer):
        return "layer%d" % layer


def run(script, cases):
    failed = 0
    for name, ok, got in cases:
        print("%s %s: %s" % ("PASS" if ok else "FAIL", name, got))
        failed += not ok
    print("%s: %s (torch %s)" % (script, "all passed" if not failed else "%d failed" % failed,
                                torch.__version__))
    sys.exit(1 if failed else 0)
