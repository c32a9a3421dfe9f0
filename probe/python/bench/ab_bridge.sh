#!/usr/bin/env bash
# ab_bridge.sh — two versions of the bridge's package compared on what they add to a step's host
# time, in alternating processes (A, B, A, B, ...), each one `hook_floor.py --interleave` run
# (the watched model and its plain twin side by side, so that each process measures its own
# difference), under `ampprobe run --trace amp`:
#
#   probe/python/bench/ab_bridge.sh DIST NAME=FOLDER NAME=FOLDER [ROUNDS] [-- HOOK_FLOOR_ARGS]
#
# DIST holds ampprobe and its libraries (build/dist); each NAME=FOLDER names a version and the
# folder that holds its ampprobe package (old=build/dist/python-old), and its statistics module
# when the folder has its own libampstats_cuda.so (else DIST's). ROUNDS (default 3) pairs of
# processes run; HOOK_FLOOR_ARGS go to hook_floor.py (default --workload gpt --mode fp16; its
# --rounds 1 unless given). Prints every run's lines, then per version, workload and mode the
# median over the runs of the watched step's host ms over plain, in all and in the optimizer and
# scaler calls.
set -eu
usage="ab_bridge.sh DIST NAME=FOLDER NAME=FOLDER [ROUNDS] [-- HOOK_FLOOR_ARGS]"
DIST=$(cd "${1:?usage: $usage}" && pwd)
A=${2:?usage: $usage}
B=${3:?usage: $usage}
shift 3
ROUNDS=3
if [ $# -gt 0 ] && [ "$1" != -- ]; then ROUNDS=$1; shift; fi
[ $# -gt 0 ] && [ "$1" = -- ] && shift
[ $# -gt 0 ] || set -- --workload gpt --mode fp16
case $ROUNDS in
    ''|*[!0-9]*) echo "ab_bridge.sh: ROUNDS must be a number, not '$ROUNDS'" >&2; exit 2;;
esac
for v in "$A" "$B"; do
    if [ ! -f "${v#*=}/ampprobe/torch.py" ]; then
        echo "ab_bridge.sh: no ampprobe/torch.py under '${v#*=}' ($v)" >&2
        exit 2
    fi
done
HERE=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq "$ROUNDS"); do
    for v in "$A" "$B"; do
        module="${v#*=}/libampstats_cuda.so"
        [ -f "$module" ] || module="$DIST/libampstats_cuda.so"
        AMPPROBE_STATS_MODULE="$module" PYTHONPATH="${v#*=}" \
            "$DIST/ampprobe" run --trace amp -f -o "$tmp/run.sqlite" -- \
            python3 "$HERE/hook_floor.py" --interleave --variant full --rounds 1 "$@" \
            >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
        sed "s/^/${v%%=*} round $r  /" "$tmp/out" | grep -v '^[^ ]* round [0-9]*  #'
    done
done | tee "$tmp/all"
echo "# median over $ROUNDS runs of the watched step's host ms over plain (all / optimizer):"
python3 - "$tmp/all" <<'EOF'
import re, statistics, sys
got = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) > 5 and f[5] == "full":
        d = re.findall(r"\(\s*([-+0-9.]+)\)", line)
        got.setdefault((f[0], f[3], f[4]), []).append((float(d[0]), float(d[3])))
for (v, wl, mode), ds in sorted(got.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])):
    print("%-10s %-5s %-4s host %+.3f ms  optimizer %+.3f ms  (runs: %s)" % (
        wl, mode, v, statistics.median(a for a, _ in ds), statistics.median(o for _, o in ds),
        " ".join("%+.3f" % a for a, _ in ds)))
EOF
