#!/usr/bin/env bash
# Run HERE (the Debian dev machine), before a build on the GPU machine.
# The GPU machine has LibTorch, CUDA, NCCL, CMake and Ninja but no package
# registry, so the header-only libraries and the GoogleTest sources travel with
# the call: this copies Debian's copies into the ignored folder .deps/ (about
# 15 MB). Name .deps in the device call's `carry`; tools/device/gpu_build.sh
# points CMake at it with -DLLMPLAN_DEPS_DIR.
#   .deps/eigen3/      from /usr/include/eigen3     (libeigen3-dev)
#   .deps/nlohmann/    from /usr/include/nlohmann   (nlohmann-json3-dev)
#   .deps/CLI/         from /usr/include/CLI        (libcli11-dev)
#   .deps/googletest/  from /usr/src/googletest     (googletest)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
deps="$root/.deps"
sources=(/usr/include/eigen3 /usr/include/nlohmann /usr/include/CLI /usr/src/googletest)
for src in "${sources[@]}"; do
  if [ ! -d "$src" ]; then
    echo "gather_deps: $src is missing: run tools/install_deps.sh first" >&2
    exit 2
  fi
done
# Rebuild from scratch so a removed upstream file does not linger.
rm -rf "$deps.tmp"
mkdir -p "$deps.tmp"
for src in "${sources[@]}"; do
  cp -rL "$src" "$deps.tmp/$(basename "$src")"  # -L: no links that point outside the folder
done
rm -rf "$deps"
mv "$deps.tmp" "$deps"
echo "gather_deps: $(du -sh "$deps" | cut -f1) in $deps (carry: .deps)"
