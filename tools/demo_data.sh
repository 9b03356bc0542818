#!/usr/bin/env bash
# Makes a small real-English token file for demos and smoke runs:
# build/demo/tokens.bin from the fortune cookies of Debian's `fortunes`
# package (about 2.5 MB of text in /usr/share/games/fortunes; installed by
# tools/install_deps.sh). Byte-level tokens (vocab 257: bytes + end of text),
# one document per fortune, llm.c's headered uint16 format:
#   tools/demo_data.sh [OUT]       then  llmplan run --data build/demo/tokens.bin ...
# Needs a built llmplan (tools/build.sh); LLMPLAN_BUILD_DIR picks the build.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${LLMPLAN_BUILD_DIR:-$root/build}"
out="${1:-$root/build/demo/tokens.bin}"
llmplan="$build/tools/llmplan"
fortunes=/usr/share/games/fortunes

if [ ! -d "$fortunes" ]; then
  "$root/tools/install_deps.sh"
fi
if [ ! -x "$llmplan" ]; then
  echo "demo_data: $llmplan is missing: build first (tools/build.sh)" >&2
  exit 2
fi
# The text files: not the .dat indexes (binary) nor the .u8 links to the same text.
mapfile -t inputs < <(find "$fortunes" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | LC_ALL=C sort)
if ((${#inputs[@]} == 0)); then
  echo "demo_data: no fortune files in $fortunes (is the fortunes package installed?)" >&2
  exit 2
fi
mkdir -p "$(dirname "$out")"
# Fortune files separate entries with a line holding only '%'.
"$llmplan" data prepare --split-on-line % --out "$out" "${inputs[@]}"
