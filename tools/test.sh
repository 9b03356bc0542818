#!/usr/bin/env bash
# Installs what is missing, builds, and runs every CPU test (GoogleTest via
# CTest; tests labelled "gpu" run only on the GPU machine: tools/device/gpu_test.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/tools/install_deps.sh"
"$root/tools/build.sh"
cd "${LLMPLAN_BUILD_DIR:-$root/build}"
ctest --output-on-failure --label-exclude gpu --timeout 900 -j "${LLMPLAN_TEST_JOBS:-2}"
