#!/usr/bin/env bash
# Installs what is missing, builds everything (planner, executor, tests,
# benchmarks), and runs every CPU test (GoogleTest via CTest; tests labelled
# "gpu" run only on the GPU machine: tools/device/gpu_test.sh); then builds
# the libFuzzer targets with Clang (ASan + UBSan) and runs each for
# LLMPLAN_FUZZ_SECONDS (default 20) after replaying its regression inputs.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/tools/install_deps.sh" all
# Explicit options: a build directory tools/setup.sh configured for the
# planner alone is switched to the full build.
"$root/tools/build.sh" -DLLMPLAN_WITH_TORCH=ON -DLLMPLAN_BUILD_TESTS=ON -DLLMPLAN_BUILD_BENCHMARKS=ON
cd "${LLMPLAN_BUILD_DIR:-$root/build}"
ctest --output-on-failure --label-exclude gpu --timeout 900 -j "${LLMPLAN_TEST_JOBS:-2}"

fuzz_build="${LLMPLAN_BUILD_DIR:-$root/build}-fuzz"
CC=clang CXX=clang++ cmake -S "$root" -B "$fuzz_build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DLLMPLAN_WITH_TORCH=OFF -DLLMPLAN_BUILD_TESTS=OFF -DLLMPLAN_BUILD_BENCHMARKS=OFF -DLLMPLAN_BUILD_FUZZERS=ON \
  -DLLMPLAN_FUZZ_SECONDS="${LLMPLAN_FUZZ_SECONDS:-20}" >/dev/null
ninja -C "$fuzz_build" tests/fuzz/all
cd "$fuzz_build"
ctest --output-on-failure -L fuzz -j "${LLMPLAN_TEST_JOBS:-2}"
