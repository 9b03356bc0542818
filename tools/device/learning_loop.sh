#!/usr/bin/env bash
# Run THERE (the GPU machine, .deps carried): the measurements issue #34 asks
# of one GPU, in two device calls of under 600 s each.
#
#   tools/device/learning_loop.sh profile-and-rows   build; llmplan profile into profiles/h200-sxm-1gpu.json
#                                                    (copied to $OUT); rows a01-a13, three of them recorded
#                                                    into a calibration store; every other one-GPU row of the
#                                                    suite estimated on that store ($OUT/calibrated.jsonl)
#   tools/device/learning_loop.sh new-rows           build; doctor --tune on a 2-GPU plan (issue #37);
#                                                    rows a14-a17 (host-bound and offload rows)
#
# The rows are measured the same whatever the profile (their plans pin every
# choice): back here, ship the profile from the first call, then
# `tools/device/results_lines.py accuracy RUNS --profile h200-sxm-1gpu` re-predicts
# every row on it (uncalibrated), and calibrated.jsonl holds the store's
# estimates of the rows it was not fed, to set against their measured steps.
# LLMPLAN_LOOP_STORE_ROWS (default "a01 a06 a09": a Llama and a Qwen shape,
# 128- and 64-wide heads, none and every block checkpointed) picks the rows
# the store learns from.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
t0=$(date +%s)
el() { echo "$(($(date +%s) - t0)) s"; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out="${OUT:-$root/build-gpu/learning_loop}"
mkdir -p "$out"

if ! bash tools/device/gpu_build.sh >"$out/build.log" 2>&1; then
  tail -n 30 "$out/build.log"
  echo "learning_loop: build failed" >&2
  exit 1
fi
echo "learning_loop: built at $(el)"
llmplan="${LLMPLAN_GPU_BUILD_DIR:-$root/build-gpu}/tools/llmplan"

case "${1:-}" in
  profile-and-rows)
    if ! "$llmplan" profile -o profiles/h200-sxm-1gpu.json --base h200-sxm >"$out/profile.log" 2>&1; then
      tail -n 20 "$out/profile.log"
      echo "learning_loop: profile failed" >&2
      exit 1
    fi
    cp profiles/h200-sxm-1gpu.json "$out/"
    echo "learning_loop: profiled at $(el): $(grep -o '"source": "[^"]*' profiles/h200-sxm-1gpu.json | cut -c12- | head -c 600)"
    store="${LLMPLAN_GPU_BUILD_DIR:-$root/build-gpu}/learning_loop_store"
    rm -rf "$store"
    LLMPLAN_ACCURACY_DEADLINE=$((t0 + 540)) LLMPLAN_ACCURACY_STORE="$store" \
      LLMPLAN_ACCURACY_STORE_ROWS="${LLMPLAN_LOOP_STORE_ROWS:-a01 a06 a09}" LLMPLAN_RESULTS_PROFILE=h200-sxm-1gpu \
      bash tools/device/accuracy.sh a01 a02 a03 a04 a05 a06 a07 a08 a09 a10 a11 a12 a13
    ;;
  new-rows)
    # issue #37: doctor --tune on the GPUs lent (one: it says there is nothing to tune).
    "$llmplan" doctor --tune --plan tools/device/plans/llama3-8b-2xh200.plan.json 2>&1 | tail -n 12
    LLMPLAN_ACCURACY_DEADLINE=$((t0 + 500)) LLMPLAN_RESULTS_PROFILE=h200-sxm-1gpu \
      bash tools/device/accuracy.sh a14 a15 a16 a17
    ;;
  *)
    echo "learning_loop: give profile-and-rows or new-rows" >&2
    exit 2
    ;;
esac
status=$?
echo "learning_loop: done at $(el)"
exit $status
