#!/bin/sh
# capture_parts.sh — what each part of the CUDA capture costs the bench workloads' step time, on
# the GPU machine, from the repository root:  probe/bench/capture_parts.sh BUILD [ROUNDS]
# Runs probe/bench/torch_baseline.py (fp16, gpt and simplecnn) plainly and under `ampprobe run
# --trace cuda` with parts of CUPTI's tracing left out (AMPPROBE_CUPTI_SKIP, probe/inject/
# inject.c), alternating over ROUNDS rounds (default 2), and prints each run's median step time
# and CUPTI's own overhead from META.
set -u
B=$1
ROUNDS=${2:-2}
T=$(mktemp -d)
for round in $(seq "$ROUNDS"); do
  python3 probe/bench/torch_baseline.py --mode fp16 --workload gpt --workload simplecnn | grep '^{' | sed "s/^/plain /"
  for skip in "" flush "api,sync,memcpy,memset,overhead,flush"; do
    AMPPROBE_CUPTI_SKIP=$skip "$B/ampprobe" run --trace cuda -f -o "$T/c.sqlite" -- \
      python3 probe/bench/torch_baseline.py --mode fp16 --workload gpt --workload simplecnn 2>/dev/null \
      | grep '^{' | sed "s/^/skip=${skip:-none} /"
    python3 -c "
import sqlite3
db = sqlite3.connect('$T/c.sqlite')
m = dict(db.execute(\"SELECT key, value FROM META WHERE key LIKE 'cupti_%'\").fetchall())
k = db.execute('SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()[0]
print('  skip=${skip:-none}: kernels', k, 'cupti_overhead_ns', m.get('cupti_overhead_ns'), 'api', m.get('cupti_api_calls'), 'dropped', m.get('cupti_dropped'))
"
  done
done
rm -rf "$T"
