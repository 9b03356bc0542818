#!/usr/bin/env bash
# Calibrate on half of the accuracy suite's runs and report on the other half.
#
#   tools/calibrate_suite.sh RUNS_DIR OUT.json [--profile P] [--json] [--one-gpu]
#
# RUNS_DIR holds the run directories tools/device/accuracy.sh kept (a01 ...
# b14; tests/data/runs has a recorded subset, git history a full set under
# docs/accuracy/). Rows with an odd number are fitted, rows with an even
# number held out, so each half has every strategy,
# checkpointing none/some/all, accumulation and offload. --one-gpu fits the
# 1-GPU rows (a..) and holds out the 2-GPU rows (b..): calibrated on one GPU,
# judged on two. Runs whose recorded program is not the one this llmplan
# builds for their plan are left out and named. Runs on any machine (no GPU
# needed).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
llmplan="${LLMPLAN_BUILD_DIR:-$root/build}/tools/llmplan"
[ $# -ge 2 ] || { echo "usage: $0 RUNS_DIR OUT.json [--profile P] [--json] [--one-gpu]" >&2; exit 2; }
runs_dir="$1" out="$(realpath -m "$2")"
shift 2
[ -d "$runs_dir" ] || { echo "calibrate_suite: $runs_dir is not a directory" >&2; exit 2; }
[ -x "$llmplan" ] || { echo "calibrate_suite: $llmplan is missing: run tools/build.sh first" >&2; exit 2; }
split=halves extra=()
for a in "$@"; do
  if [ "$a" = --one-gpu ]; then split=one-gpu; else extra+=("$a"); fi
done
fit=() hold=() stale=()
cd "$runs_dir"
for d in [ab][0-9][0-9]; do
  [ -f "$d/plan.json" ] || continue
  # A run whose recorded operations are not today's step program for its plan
  # (an older llmplan scheduled it otherwise) cannot be held against a
  # prediction: left out, and named.
  if ! "$llmplan" compare --run "$d" --json >/dev/null 2>&1; then
    stale+=("$d")
    continue
  fi
  if [ "$split" = one-gpu ]; then
    if [[ "$d" == a* ]]; then fit+=("$d"); else hold+=("$d"); fi
  elif (( 10#${d:1} % 2 == 1 )); then
    fit+=("$d")
  else
    hold+=("$d")
  fi
done
[ ${#stale[@]} -eq 0 ] ||
  echo "calibrate_suite: left out ${stale[*]}: recorded with a step program this llmplan no longer builds (llmplan compare --run says why)" >&2
[ ${#fit[@]} -gt 0 ] || { echo "calibrate_suite: no run directories (a01, b02, ...) in $runs_dir" >&2; exit 2; }
exec "$llmplan" calibrate --runs "${fit[@]}" ${hold[@]:+--holdout "${hold[@]}"} -o "$out" "${extra[@]}"
