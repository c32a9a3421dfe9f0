#!/usr/bin/env bash
# gpu_dist.sh — gathers a CUDA build's programs, libraries and Python package into one folder small
# enough to carry to the GPU machine (debug information stripped):
#   tests/helpers/gpu_dist.sh [BUILD] [DIST]     (default build/cuda and build/dist)
# The test runner and the samples look for their helpers at the path they were built in (BUILD):
# on the GPU machine, link BUILD there to DIST (`ln -sfn "$PWD/build/dist" build/cuda`).
set -euo pipefail
build=${1:-build/cuda}
dist=${2:-build/dist}
if [ ! -f "$build/CMakeCache.txt" ]; then
    echo "gpu_dist.sh: $build is not configured:" \
        "cmake -S . -B $build -DAMP_WITH_CUDA=ON -DAMP_STATIC_CHECK=ON" >&2
    exit 1
fi
cmake --build "$build" -j"$(nproc)" >/dev/null  # (up to date: the Python package copied again too)
rm -rf "$dist" && mkdir -p "$dist"
for f in ampprobe ampprobe-calibrate ampprobe_tests "$build"/*.so; do
    f=$(basename "$f")
    [ -e "$build/$f" ] && cp "$build/$f" "$dist/"
done
for d in python samples tests bench; do
    [ -d "$build/$d" ] && cp -r "$build/$d" "$dist/"
done
find "$dist" -type f \( -name '*.so' -o -perm -u+x \) ! -name '*.py' ! -name '*.sh' \
    -exec strip --strip-debug {} + 2>/dev/null || true
find "$dist" -name CMakeFiles -prune -exec rm -rf {} +
echo "$dist: $(du -sh "$dist" | cut -f1)"
