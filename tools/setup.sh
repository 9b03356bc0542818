#!/usr/bin/env bash
# One command for a fresh machine: install what the planner needs, build the
# planner binary, and run the main job — a plan for Llama-3-8B on 8 x H100
# (built-in preset and profile). The executor (llmplan run, profile, doctor)
# and the tests are built by tools/test.sh, which installs LibTorch.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
echo "llmplan setup: [1/3] Debian packages for the planner" >&2
"$root/tools/install_deps.sh" planner
echo "llmplan setup: [2/3] building build/tools/llmplan" >&2
build="${LLMPLAN_BUILD_DIR:-$root/build}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLMPLAN_WITH_TORCH=OFF \
  -DLLMPLAN_BUILD_TESTS=OFF -DLLMPLAN_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build "$build" --target llmplan -j "${LLMPLAN_JOBS:-$(nproc)}"
echo "llmplan setup: [3/3] llmplan estimate --model llama3-8b --gpus 8 --gpu h100-sxm-80g --seq 8192 --global-batch 256" >&2
"$build/tools/llmplan" estimate --model llama3-8b --gpus 8 --gpu h100-sxm-80g --seq 8192 --global-batch 256
