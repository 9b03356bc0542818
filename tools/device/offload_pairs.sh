#!/usr/bin/env bash
# Run THERE (after gpu_build.sh, .deps carried): one plan in two forms,
# trained alternately in one device call, so that the host's drift from run
# to run shows beside the difference between the forms.
#
#   tools/device/offload_pairs.sh [--pairs N] [--steps S] [--flag FLAG] [--forms "A B"] [-- ESTIMATE_FLAGS...]
#
# Each form is FLAG's value in `llmplan estimate ESTIMATE_FLAGS FLAG FORM`
# (default: --offload-staging with the forms "slots unit"); runs are named
# FORM_a, FORM_b, ... in the order they ran (slots_a unit_a slots_b unit_b ...).
# Each trains S steps (default 5) with --no-final-weights and is compared with
# its prediction (`llmplan compare`, FORM_x.compare.txt). Without ESTIMATE_FLAGS
# the plan is Llama-3.2-3B with the optimizer offloaded: full_shard on one GPU,
# micro-batch 2 x 4, seq 4096, no checkpointing, profile h200-sxm-1gpu.
# LLMPLAN_CALL_BUDGET_S (default 480): no run starts later than that.
#
# Output under $OUT/offload_pairs/ (or build-gpu/offload_pairs): run
# directories without traces, logs, compare texts, and offload_pairs.results.jsonl
# (tools/device/results_lines.py): append it to docs/results/offload_pairs.jsonl.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${LLMPLAN_GPU_BUILD_DIR:-$root/build-gpu}"
llmplan="$build/tools/llmplan"
pairs=3 steps=5 flag=--offload-staging forms="slots unit"
while [ $# -gt 0 ]; do
  case "$1" in
    --pairs) pairs="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --flag) flag="$2"; shift 2 ;;
    --forms) forms="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "usage: $0 [--pairs N] [--steps S] [--flag FLAG] [--forms \"A B\"] [-- ESTIMATE_FLAGS...]" >&2; exit 2 ;;
  esac
done
pins=("$@")
[ ${#pins[@]} -gt 0 ] || pins=(--model llama3.2-3b --gpus 1 --gpu h200-sxm-1gpu --seq 4096 --global-batch 8
  --strategy full_shard --micro-batch 2 --grad-accum 4 --checkpoint-layers none --offload optimizer --loss-chunk 1024)
[ -x "$llmplan" ] || { echo "offload_pairs: $llmplan is missing: run tools/device/gpu_build.sh first" >&2; exit 2; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Predictions here are the shipped profiles': no calibration store (feedback/calibration_store.h).
export LLMPLAN_CALIBRATION_DIR=off
t0=$(date +%s)
budget="${LLMPLAN_CALL_BUDGET_S:-480}"
out="${OUT:+$OUT/offload_pairs}"
out="${out:-$build/offload_pairs}"
rm -rf "$out" && mkdir -p "$out"

# Token content does not change throughput: the repository's sources, byte-level.
tokens="$build/offload_pairs_tokens.bin"
[ -f "$tokens" ] || "$llmplan" data prepare -o "$tokens" $(find "$root/planner" "$root/executor" -name '*.cc' | sort) >/dev/null ||
  { echo "offload_pairs: cannot make the token file" >&2; exit 1; }

status=0
letters=abcdefghijklmnopqrstuvwxyz
for ((i = 0; i < pairs; i++)); do
  suffix=${letters:i:1}
  for form in $forms; do
    name="${form}_$suffix"
    if [ $(($(date +%s) - t0)) -gt "$budget" ]; then
      echo "$name: skipped (the call's budget of $budget s is spent)"
      continue
    fi
    if ! "$llmplan" estimate "${pins[@]}" "$flag" "$form" --json -o "$out/$name.plan.json" >"$out/$name.estimate.json" \
        2>"$out/$name.err"; then
      echo "$name: no plan: $(head -c 300 "$out/$name.err")"
      status=1
      continue
    fi
    timeout 300 "$llmplan" run --plan "$out/$name.plan.json" --data "$tokens" --steps "$steps" --no-final-weights \
      --out "$out/$name" >"$out/$name.log" 2>&1 || { echo "$name: run failed: $(tail -n 2 "$out/$name.log")"; status=1; }
    echo "$name at $(($(date +%s) - t0)) s: $(grep -E '^throughput' "$out/$name.log")"
    "$llmplan" compare --run "$out/$name" >"$out/$name.compare.txt" 2>&1
    rm -f "$out/$name/trace.json"
  done
done
python3 "$root/tools/device/results_lines.py" offload_pairs "$out" \
  --command "tools/device/offload_pairs.sh --pairs $pairs --steps $steps --flag $flag --forms \"$forms\" -- ${pins[*]}" \
  >"$out/offload_pairs.results.jsonl" && echo "results: $out/offload_pairs.results.jsonl"
exit $status
