#!/usr/bin/env bash
# Installs the Debian packages llmplan builds against, when any is missing.
#
#   tools/install_deps.sh [planner|all]      (default: all)
#
# planner: what the planner binary needs (estimate, simulate, compare,
# calibrate): a compiler, CMake, Ninja and three header-only libraries.
# all: also LibTorch and Gloo (the executor: run, profile, doctor),
# GoogleTest and Google Benchmark, `fortunes` (demo text), and Clang with its
# libFuzzer/sanitizer runtimes (tests/fuzz). Debian's
# libtorch-dev is most of the download. Used by tools/setup.sh (planner) and
# tools/test.sh (all); safe to run repeatedly; works as root or through sudo.
set -euo pipefail
mode="${1:-all}"
planner=(cmake ninja-build g++ nlohmann-json3-dev libcli11-dev libeigen3-dev)
executor=(libgtest-dev googletest libbenchmark-dev libtorch-dev libgloo-dev python3 fortunes clang libclang-rt-14-dev)
case "$mode" in
  planner) packages=("${planner[@]}") ;;
  all) packages=("${planner[@]}" "${executor[@]}") ;;
  *) echo "install_deps: unknown mode '$mode': use planner or all" >&2; exit 2 ;;
esac
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
((${#missing[@]})) || exit 0
sudo_cmd=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install_deps: not root and no sudo: install ${missing[*]} as root" >&2; exit 2; }
  sudo_cmd="sudo"
fi
echo "llmplan: installing ${missing[*]} with apt-get (recommends left out)" >&2
$sudo_cmd apt-get update -q
# apt prints one line per package it fetches, unpacks and sets up: progress
# a person can follow (libtorch-dev pulls in ~170 packages; minutes).
DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}" |
  grep --line-buffered -E '^(Get:|Unpacking|Setting up)' | sed -u 's/^/  apt: /' >&2 || true
for p in "${missing[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    { echo "install_deps: $p did not install (see apt-get's messages above)" >&2; exit 1; }
done
