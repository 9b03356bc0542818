#!/usr/bin/env bash
# Run THERE on nvidia-h200-x2 (carry .deps), one device call: the two
# comparisons issue #13 states, each plan trained by llmplan and by PyTorch
# FSDP2 eager and compiled in the same call (tools/device/compare_fsdp2.sh):
#
#   1b  Llama-3.2-1B untied, seq 4096, mb 4: the plan `llmplan estimate`
#       writes for it on 2 x H200 (tools/device/plans/llama3.2-1b-untied-2xh200-planned.plan.json;
#       target >= 1.20 x FSDP2 compiled, peak allocated <= FSDP2's)
#   8b  Llama-3-8B, seq 4096, mb 2, every block checkpointed, each gather
#       casting the fp32 shard (tools/device/plans/llama3-8b-2xh200-cast.plan.json; target
#       >= 1.10 x FSDP2 compiled, peak allocated <= FSDP2's)
#
#   tools/device/race_two_gpus.sh [1b] [8b]      (default: both, 1b first)
#
# Each comparison's files (compare_fsdp2.sh's: compare.json, llmplan.log,
# fsdp2_*.json, the run directory) are packed into $OUT/race.tgz as NAME/
# (the device tool brings back only a handful of files); each one's summary
# is printed as it ends; each NAME/compare/fsdp2.results.jsonl is the line for
# docs/results/fsdp2.jsonl. LLMPLAN_CALL_BUDGET_S (default 585) is the
# call's time: a comparison that would start with less than its expected
# time left (1b 150 s, 8b 330 s with compilation, as measured) is
# skipped and says so, so what ran still comes back.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
t0=$(date +%s)
budget="${LLMPLAN_CALL_BUDGET_S:-585}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Predictions here are the shipped profiles': no calibration store (feedback/calibration_store.h).
export LLMPLAN_CALIBRATION_DIR=off
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$gpus" -ge 2 ] || { echo "race_two_gpus: needs 2 GPUs, this machine has $gpus (device kind nvidia-h200-x2)" >&2; exit 2; }

names=("$@")
[ ${#names[@]} -gt 0 ] || names=(1b 8b)
plan_for() {
  case "$1" in
    1b) echo "$root/tools/device/plans/llama3.2-1b-untied-2xh200-planned.plan.json" ;;
    8b) echo "$root/tools/device/plans/llama3-8b-2xh200-cast.plan.json" ;;
    *) return 1 ;;
  esac
}
needs_s() { case "$1" in 1b) echo 150 ;; 8b) echo 330 ;; esac; }

# One build of the CLI for both (compare_fsdp2.sh's own build is then a no-op).
export LLMPLAN_GPU_TARGETS="${LLMPLAN_GPU_TARGETS:-llmplan llmplan-executor}"
work="$root/build-gpu/race"
rm -rf "$work" && mkdir -p "$work"
"$root/tools/device/gpu_build.sh" >"$work/build.log" 2>&1 ||
  { tail -n 30 "$work/build.log"; echo "race_two_gpus: build failed" >&2; exit 1; }
echo "built in $(($(date +%s) - t0)) s"

status=0
for name in "${names[@]}"; do
  plan=$(plan_for "$name") || { echo "race_two_gpus: unknown comparison '$name' (1b or 8b)" >&2; exit 2; }
  left=$((t0 + budget - $(date +%s)))
  if [ "$left" -lt "$(needs_s "$name")" ]; then
    echo "$name: skipped: $left s left of the call, it needs about $(needs_s "$name")"
    continue
  fi
  dir="$work/$name"
  mkdir -p "$dir"
  echo "== $name: $(basename "$plan") ($left s left)"
  # compare_fsdp2.sh writes its files to $OUT/compare: here, $dir/compare.
  OUT="$dir" timeout $((left - 15)) "$root/tools/device/compare_fsdp2.sh" "$plan" 13 --compile >"$dir/compare_fsdp2.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || { status=1; echo "$name: compare_fsdp2.sh exited $rc"; }
  tail -n 8 "$dir/compare_fsdp2.log"
done
rm -f "$work"/*/compare/*/trace.json  # Perfetto traces: large, and compare needs only the op times
# Without the final weights the runs save (16 GB for the 8B model).
[ -n "${OUT:-}" ] && tar czf "$OUT/race.tgz" --exclude="*.safetensors" --exclude="*.bin" -C "$work" . && echo "packed $OUT/race.tgz"
echo "race_two_gpus: done in $(($(date +%s) - t0)) s"
exit $status
