#!/usr/bin/env bash
# The test command of the README: builds (build/) and runs every Check suite through ctest, then
# `ampprobe conform` on the PyTorch reference data. Pass --asan for an AddressSanitizer + UBSan
# build in build/asan/ (every build lives under build/).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
if [ "${1:-}" = "--asan" ]; then dir=build/asan; flags=(-DCMAKE_BUILD_TYPE=Debug -DAMP_SANITIZE=ON); fi
cmake -S . -B "$dir" "${flags[@]}" >/dev/null
cmake --build "$dir" -j"$(nproc)"
ctest --test-dir "$dir" --output-on-failure -j"$(nproc)"
"$dir"/ampprobe conform tests/data/golden
"$dir"/ampprobe conform tests/data/golden-extra
