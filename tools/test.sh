#!/usr/bin/env bash
# Installs what is missing, builds everything (planner, executor, tests,
# benchmarks), and runs every CPU test (GoogleTest via CTest; tests labelled
# "gpu" run only on the GPU machine: tools/device/gpu_test.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/tools/install_deps.sh" all
# Explicit options: a build directory tools/setup.sh configured for the
# planner alone is switched to the full build.
"$root/tools/build.sh" -DLLMPLAN_WITH_TORCH=ON -DLLMPLAN_BUILD_TESTS=ON -DLLMPLAN_BUILD_BENCHMARKS=ON
cd "${LLMPLAN_BUILD_DIR:-$root/build}"
ctest --output-on-failure --label-exclude gpu --timeout 900 -j "${LLMPLAN_TEST_JOBS:-2}"
