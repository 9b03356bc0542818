#!/usr/bin/env bash
# Run THERE on one GPU (carry .deps), one device call: issue #35's three
# races, each plan trained by llmplan and by PyTorch FSDP2 eager and compiled
# (tools/device/compare_fsdp2.sh), step 3 kernel-traced on both sides, and —
# first, with `profile` — this GPU's profile measured anew so every race is
# also held against it:
#
#   profile  `llmplan profile` (full) into NAME.json, NAME the shipped
#            measured profile of this GPU (h200-sxm-1gpu, h100-sxm-80g-1gpu)
#   1b       tools/device/plans/llama3.2-1b-untied-1xh200-planned.plan.json (target >= 1.20x compiled)
#   3b       tools/device/plans/llama3.2-3b-untied-1xh200-planned.plan.json (>= 1.20x; FSDP2 does not fit an H100)
#   135m     tools/device/plans/smollm2-135m-1xh200-graph.plan.json (>= 1.5x)
#
#   tools/device/race_one_gpu.sh [profile] [1b] [3b] [135m]   (default: all four, in this order)
#
# Each part is packed into its own tarball under $OUT (NAME.tgz; the device
# tool brings back at most 8 files of 16 MiB, so nothing else is left there),
# without the runs' weights and raw traces: compare_fsdp2.sh's files, the kernel census of
# both sides (`llmplan kernels --top 45`: kernels45.txt) and `llmplan compare`
# of the run against the shipped profile and, when measured, the new one
# (compare_shipped.txt, compare_new.txt). Each NAME/compare/fsdp2.results.jsonl
# is the line for docs/results/fsdp2.jsonl. LLMPLAN_CALL_BUDGET_S (default
# 585) is the call's time: a part that would start with less than its
# expected time left is skipped and says so (profile 70 s, 1b 110 s, 3b
# 140 s, 135m 80 s: what each took on one H200 in earlier calls — the full
# profile ~57 s, the traced and compiled races ~100, ~110 and ~55 s — with
# some to spare).
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
# NVLink multicast off, no calibration store (the shipped profiles'
# predictions), nvcc on the PATH, t0.
source "$root/tools/device/call_prelude.sh"
budget="${LLMPLAN_CALL_BUDGET_S:-585}"
out="${OUT:-$root/build-gpu/race_one_gpu_out}"
mkdir -p "$out"

parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(profile 1b 3b 135m)
plan_for() {
  case "$1" in
    1b) echo "$root/tools/device/plans/llama3.2-1b-untied-1xh200-planned.plan.json" ;;
    3b) echo "$root/tools/device/plans/llama3.2-3b-untied-1xh200-planned.plan.json" ;;
    135m) echo "$root/tools/device/plans/smollm2-135m-1xh200-graph.plan.json" ;;
    *) return 1 ;;
  esac
}
needs_s() { case "$1" in profile) echo 70 ;; 1b) echo 110 ;; 3b) echo 140 ;; 135m) echo 80 ;; esac; }
for name in "${parts[@]}"; do
  [ "$name" = profile ] || plan_for "$name" >/dev/null ||
    { echo "race_one_gpu: unknown part '$name' (profile, 1b, 3b or 135m)" >&2; exit 2; }
done
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
case "$gpu_name" in
  *H200*) shipped=h200-sxm-1gpu base=h200-sxm ;;
  *H100*) shipped=h100-sxm-80g-1gpu base=h100-sxm-80g ;;
  *) echo "race_one_gpu: no shipped one-GPU profile for '$gpu_name' (H200 or H100)" >&2; exit 2 ;;
esac

# FSDP2's 1B run is out of memory on an 80 GB H100 with fixed-size segments
# (7.8 GiB asked, 7.8 free, 8.5 reserved and unused): there both sides race
# with expandable segments, which the results lines' command names (the
# profile is measured without them).
alloc_conf="${PYTORCH_CUDA_ALLOC_CONF:-}"
case "$gpu_name" in *H100*) alloc_conf="${alloc_conf:-expandable_segments:True}" ;; esac
export LLMPLAN_GPU_TARGETS="${LLMPLAN_GPU_TARGETS:-llmplan llmplan-executor}"
work="$root/build-gpu/race_one_gpu"
rm -rf "$work" && mkdir -p "$work"
"$root/tools/device/gpu_build.sh" >"$work/build.log" 2>&1 ||
  { tail -n 30 "$work/build.log"; echo "race_one_gpu: build failed" >&2; exit 1; }
echo "built in $(($(date +%s) - t0)) s on $gpu_name"
llmplan="$root/build-gpu/tools/llmplan"

status=0
new_profile=""
for name in "${parts[@]}"; do
  left=$((t0 + budget - $(date +%s)))
  if [ "$left" -lt "$(needs_s "$name")" ]; then
    echo "$name: skipped: $left s left of the call, it needs about $(needs_s "$name")"
    continue
  fi
  dir="$work/$name"
  mkdir -p "$dir"
  if [ "$name" = profile ]; then
    echo "== profile: $shipped ($left s left)"
    timeout $((left - 15)) "$llmplan" profile -o "$dir/$shipped.json" --name "$shipped" --base "$base" >"$dir/profile.log" 2>&1 ||
      { status=1; echo "profile: llmplan profile failed"; }
    tail -n 4 "$dir/profile.log"
    # Kept outside the part's folder, which goes once packed.
    [ -f "$dir/$shipped.json" ] && cp "$dir/$shipped.json" "$work/new_profile.json" && new_profile="$work/new_profile.json"
  else
    plan=$(plan_for "$name")
    echo "== $name: $(basename "$plan") ($left s left)"
    OUT="$dir" LLMPLAN_COMPARE_KERNEL_TRACE=3 env ${alloc_conf:+PYTORCH_CUDA_ALLOC_CONF="$alloc_conf"} timeout $((left - 15)) "$root/tools/device/compare_fsdp2.sh" "$plan" 13 --compile \
      >"$dir/compare_fsdp2.log" 2>&1 || { status=1; echo "$name: compare_fsdp2.sh failed"; }
    tail -n 8 "$dir/compare_fsdp2.log"
    run="$dir/compare/llmplan_run"
    if [ -d "$run" ]; then
      "$llmplan" compare --run "$run" --gpu "$shipped" >"$dir/compare_shipped.txt" 2>&1
      [ -n "$new_profile" ] && "$llmplan" compare --run "$run" --gpu "$new_profile" >"$dir/compare_new.txt" 2>&1
      compiled_trace="$dir/compare/fsdp2_compiled_kernel_trace.json"
      [ -f "$run/kernel_trace.json" ] &&
        "$llmplan" kernels "$run/kernel_trace.json" $([ -f "$compiled_trace" ] && echo "$compiled_trace") --top 45 \
          >"$dir/kernels45.txt" 2>&1
    fi
  fi
  # Without the weights and the raw traces (the census above is read from
  # them here): a file over 16 MiB would not come back.
  tar czf "$out/$name.tgz" --exclude="*.safetensors" --exclude="checkpoints" --exclude="trace.json" \
    --exclude="*kernel_trace*.json" -C "$work" "$name" && rm -rf "$dir" &&
    echo "packed $out/$name.tgz at $(($(date +%s) - t0)) s"
done
echo "race_one_gpu: done in $(($(date +%s) - t0)) s"
exit $status
