#!/usr/bin/env bash
# Configures and builds llmplan into ./build (Release). Extra arguments go to CMake.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${LLMPLAN_BUILD_DIR:-$root/build}"
jobs="${LLMPLAN_JOBS:-$(nproc)}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j "$jobs"
