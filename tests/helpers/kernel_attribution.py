#!/usr/bin/env python3
"""kernel_attribution.py DB — how many of a captured libampcore run's kernels are attributed to a
layer/op (run on the GPU machine after `ampprobe run -- samples/X --device cuda`).

A kernel is joined to its launch call (CUPTI_ACTIVITY_KIND_RUNTIME, by correlationId and
process), then to the innermost NVTX range of that thread around the call (libampcore's "ampcore"
domain: layer names in forward, "layer/op" around backward nodes, the optimizer and unscale_),
and to the AMP_OPS op whose host interval holds the call (forward ops). Prints the counts and the
most frequent unattributed kernels; exits 1 when a kernel is attributed by neither."""
import sqlite3
import sys

db = sqlite3.connect(sys.argv[1])
rows = db.execute("""
WITH launch AS (
  SELECT k.rowid AS kernel, k.shortName AS name,
         (SELECT r.rowid FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId = k.correlationId
            AND r.globalTid >> 24 = k.globalPid >> 24 ORDER BY r.eventClass LIMIT 1) AS api
  FROM CUPTI_ACTIVITY_KIND_KERNEL k)
SELECT l.kernel, (SELECT value FROM StringIds WHERE id = l.name),
  (SELECT n.text FROM CUPTI_ACTIVITY_KIND_RUNTIME r, NVTX_EVENTS n
     WHERE r.rowid = l.api AND n.globalTid = r.globalTid AND n.eventType IN (59, 60)
       AND n.start <= r.start AND n.end >= r.end ORDER BY n.start DESC LIMIT 1),
  (SELECT o.op FROM CUPTI_ACTIVITY_KIND_RUNTIME r, AMP_OPS o
     WHERE r.rowid = l.api AND o.start_ns <= r.start AND o.end_ns >= r.end LIMIT 1)
FROM launch l""").fetchall()
total = len(rows)
nvtx = sum(1 for r in rows if r[2])
ops = sum(1 for r in rows if r[3])
either = sum(1 for r in rows if r[2] or r[3])
print(f"kernels {total}, in an NVTX layer/op range {nvtx}, in an AMP_OPS op interval {ops}, "
      f"attributed {either} ({100.0 * either / max(total, 1):.1f}%)")
missing = {}
for r in rows:
    if not (r[2] or r[3]):
        missing[r[1]] = missing.get(r[1], 0) + 1
for name, n in sorted(missing.items(), key=lambda x: -x[1])[:8]:
    print(f"  unattributed: {n} x {name}")
sys.exit(0 if total > 0 and either == total else 1)
