#!/usr/bin/env bash
# The README's first command: installs what the build needs, builds, records an fp16 training run
# of samples/tiny_gpt whose attention overflows (on the CPU: the CUDA backend is not built yet) and
# ends with ampprobe's report on it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
echo "== recording: tiny_gpt, fp16 autocast + GradScaler, --fault attn-overflow"
./build/ampprobe run --force -o build/demo.sqlite -- \
    ./build/samples/tiny_gpt --device cpu --precision fp16 --fault attn-overflow --steps 20
echo "== report"
./build/ampprobe report build/demo.sqlite
