#!/usr/bin/env bash
# The README's first command: installs what the build needs, builds, records an fp16 training run
# of samples/tiny_gpt whose attention overflows — on the GPU when there is one and the CUDA
# toolkit, else on the CPU — and ends with ampprobe's report on it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/setup.sh
device=cpu cuda=OFF
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 &&
   { command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; }; then
  device=cuda cuda=ON
  command -v nvcc >/dev/null 2>&1 || export CUDACXX=/usr/local/cuda/bin/nvcc
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAMP_WITH_CUDA=$cuda >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
echo "== recording: tiny_gpt on $device, fp16 autocast + GradScaler, --fault attn-overflow"
./build/ampprobe run --force -o build/demo.sqlite -- \
    ./build/samples/tiny_gpt --device $device --precision fp16 --fault attn-overflow --steps 20
echo "== report"
./build/ampprobe report build/demo.sqlite
