#!/usr/bin/env bash
# The accuracy suite: predict, then measure, every configuration of
# tools/device/accuracy/suite.txt on the GPU machine.
#
#   tools/device/accuracy.sh [NAME...]           THERE (after gpu_build.sh; kind nvidia-h200-x2 for the 2-GPU rows)
#   tools/device/accuracy.sh --plans-only DIR     here: write the plans only (every row must be predicted to fit)
#
# For each row: `llmplan estimate` with every choice pinned writes the plan
# (and its prediction, estimate.json); `llmplan run --no-final-weights` trains
# it for LLMPLAN_ACCURACY_STEPS steps (default 6: the first two are warm-up) and
# keeps its run directory. Rows that use one GPU run on GPU 0. At the end the
# run directories are packed into $OUT/accuracy.tar.gz (the device tool
# returns at most 8 files) and a table of predicted vs measured step time and
# memory is printed, and the rows as lines of docs/results/accuracy.jsonl
# ($OUT/accuracy.results.jsonl). `llmplan compare` and `llmplan calibrate` read
# the run directories back on any machine. LLMPLAN_ACCURACY_DEADLINE (seconds since
# the epoch) skips the rows that would start after it, so a device call that
# has a time limit still packs what ran. One-GPU rows are planned on the
# h200-sxm-1gpu profile, the others on h200-sxm. LLMPLAN_ACCURACY_RUN_ARGS go to
# every `llmplan run` (e.g. "--kernel-trace 4": that step is traced, not timed).
#
# The calibration store (feedback/calibration_store.h), tested as a user meets
# it: with LLMPLAN_ACCURACY_STORE=DIR, the rows named in
# LLMPLAN_ACCURACY_STORE_ROWS record into DIR as they finish (every other row
# runs with the store off), and after the last row every suite row not
# recorded is estimated again with the store on: $OUT/calibrated.jsonl, one
# {"row", "step_s", "calibration"} line each, to hold against the measured runs.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
suite="$root/tools/device/accuracy/suite.txt"
build="${LLMPLAN_GPU_BUILD_DIR:-$root/build-gpu}"
steps="${LLMPLAN_ACCURACY_STEPS:-6}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Predictions here are the shipped profiles': no calibration store (feedback/calibration_store.h).
export LLMPLAN_CALIBRATION_DIR=off

plans_only=""
if [ "${1:-}" = "--plans-only" ]; then
  plans_only="${2:?--plans-only needs a directory}"
  build="${LLMPLAN_BUILD_DIR:-$root/build}"
  shift 2
fi
llmplan="$build/tools/llmplan"
[ -x "$llmplan" ] || { echo "accuracy: $llmplan is missing: build first" >&2; exit 2; }
# Run directories stay on the machine ($build/accuracy); only the packed
# archive goes to $OUT (the device tool returns a handful of files).
out="${plans_only:-$build/accuracy}"
runs="$out/runs"
mkdir -p "$runs" "${OUT:-$out}"

# Token content does not change step time: the repository's sources, byte-level.
tokens="$out/tokens.bin"
if [ -z "$plans_only" ] && [ ! -f "$tokens" ]; then
  "$llmplan" data prepare -o "$tokens" \
    $(find "$root/planner" "$root/executor" "$root/simulator" "$root/tools" -name '*.cc' -o -name '*.h') >/dev/null ||
    { echo "accuracy: cannot make the token file" >&2; exit 1; }
fi

# One row: plan it (every choice pinned), then train it on the GPUs given
# (empty: all). Prints one line; returns non-zero when either step failed.
# The row's plan, every choice pinned: estimate_row PLAN_JSON ROW... (the
# estimate's JSON on stdout).
estimate_row() {
  local plan_out="$1" name="$2" gpus="$3" model="$4" seq="$5" mb="$6" ga="$7" ckpt="$8" strategy="$9" offload="${10}"
  [ -d "$root/tools/device/accuracy/$model" ] && model="$root/tools/device/accuracy/$model/config.json"
  local profile=h200-sxm
  [ "$gpus" -eq 1 ] && profile=h200-sxm-1gpu
  "$llmplan" estimate --model "$model" --gpus "$gpus" --gpu "$profile" --seq "$seq" --micro-batch "$mb" \
    --grad-accum "$ga" --global-batch $((mb * ga * gpus)) --checkpoint-layers "$ckpt" --strategy "$strategy" \
    --offload "$offload" --loss-chunk 1024 --host-memory 240 --json -o "$plan_out"
}

run_row() {
  local name="$1" gpus="$2" visible="${10}"
  local dir="$runs/$name"
  rm -rf "$dir"
  mkdir -p "$dir.plan"
  if ! estimate_row "$dir.plan/plan.json" "${@:1:9}" >"$dir.plan/estimate.json" 2>"$dir.plan/estimate.err"; then
    echo "$name: no plan: $(head -c 300 "$dir.plan/estimate.err")"
    return 1
  fi
  [ -n "$plans_only" ] && { echo "$name: plan written"; return 0; }
  if [ -n "${LLMPLAN_ACCURACY_DEADLINE:-}" ] && [ "$(date +%s)" -ge "$LLMPLAN_ACCURACY_DEADLINE" ]; then
    echo "$name: skipped (deadline)"
    rm -rf "$dir.plan"
    return 0
  fi
  local start rc
  start=$(date +%s)
  local store=off
  [ -n "${LLMPLAN_ACCURACY_STORE:-}" ] && [[ " ${LLMPLAN_ACCURACY_STORE_ROWS:-} " == *" $name "* ]] &&
    store="$LLMPLAN_ACCURACY_STORE"
  env ${visible:+CUDA_VISIBLE_DEVICES=$visible} LLMPLAN_CALIBRATION_DIR="$store" LLMPLAN_COLLECTIVE_TIMEOUT_S=120 timeout 300 "$llmplan" run \
    --plan "$dir.plan/plan.json" --data "$tokens" --steps "$steps" --no-final-weights --out "$dir" \
    ${LLMPLAN_ACCURACY_RUN_ARGS:-} >"$dir.log" 2>&1
  rc=$?
  cp "$dir.plan/estimate.json" "$dir/" 2>/dev/null
  mv "$dir.log" "$dir/run.log" 2>/dev/null
  rm -rf "$dir.plan"
  echo "$name: rc=$rc in $(( $(date +%s) - start )) s${visible:+ on GPU $visible}"
  [ $rc -eq 0 ] || { tail -3 "$dir/run.log"; return 1; }
}

wanted=" $* "
rows=()
while read -r name rest; do
  case "$name" in ''|'#'*) continue ;; esac
  [ "$#" -eq 0 ] || [[ "$wanted" == *" $name "* ]] || continue
  rows+=("$name $rest")
done < "$suite"

# With two GPUs, the 1-GPU rows without offload run two at a time, one per
# GPU (they share nothing but the host, and their host work is launching
# kernels). Offloading rows run alone: CPU AdamW uses every core.
gpu_count=$(nvidia-smi -L 2>/dev/null | wc -l)
failed=0
lane() {  # lane GPU ROW...
  local gpu="$1" row lane_failed=0
  shift
  for row in "$@"; do
    # shellcheck disable=SC2086
    set -- $row
    run_row "$@" "$gpu" || lane_failed=1
  done
  return $lane_failed
}
together=() alone=()
for row in "${rows[@]}"; do
  read -r _ gpus _ _ _ _ _ _ offload <<<"$row"
  if [ -z "$plans_only" ] && [ "$gpu_count" -ge 2 ] && [ "$gpus" -eq 1 ] && [ "$offload" = none ]; then
    together+=("$row")
  else
    alone+=("$row")
  fi
done
if [ "${#together[@]}" -gt 0 ]; then
  even=() odd=()
  for i in "${!together[@]}"; do
    if [ $((i % 2)) -eq 0 ]; then even+=("${together[$i]}"); else odd+=("${together[$i]}"); fi
  done
  lane 0 "${even[@]}" & lane0=$!
  lane 1 "${odd[@]}" & lane1=$!
  wait $lane0 || failed=1
  wait $lane1 || failed=1
fi
for row in "${alone[@]}"; do
  read -r _ gpus _ <<<"$row"
  # shellcheck disable=SC2086
  run_row $row "$([ "$gpus" -eq 1 ] && [ -z "$plans_only" ] && echo 0)" || failed=1
done
[ -n "$plans_only" ] && exit $failed

if [ -n "${LLMPLAN_ACCURACY_STORE:-}" ]; then
  calibrated="${OUT:-$out}/calibrated.jsonl"
  : >"$calibrated"
  while read -r name rest; do
    case "$name" in ''|'#'*) continue ;; esac
    [[ " ${LLMPLAN_ACCURACY_STORE_ROWS:-} " == *" $name "* ]] && continue
    [ "${rest%% *}" -eq "$gpu_count" ] || continue  # the machine's own GPU count: the store is this machine's
    # shellcheck disable=SC2086
    LLMPLAN_CALIBRATION_DIR="$LLMPLAN_ACCURACY_STORE" estimate_row "$out/calibrated.plan.json" "$name" $rest \
      >"$out/calibrated.estimate.json" 2>/dev/null &&
      python3 -c 'import json, sys; e = json.load(open(sys.argv[2])); print(json.dumps({"row": sys.argv[1], "step_s": e["time"]["step_s"], "calibration": e.get("calibration")}))' \
        "$name" "$out/calibrated.estimate.json" >>"$calibrated"
  done < "$suite"
  echo "accuracy: $(wc -l <"$calibrated") estimates calibrated on the store in $calibrated"
fi

python3 - "$runs" <<'EOF'
import json, os, sys
runs = sys.argv[1]
print(f"{'run':<5} {'step pred':>9} {'meas':>8} {'err':>7}  {'alloc GiB pred':>14} {'meas':>7} {'err':>7}  {'resv pred':>9} {'meas':>7} {'err':>7}")
for name in sorted(os.listdir(runs)):
    d = os.path.join(runs, name)
    try:
        est = json.load(open(os.path.join(d, "estimate.json")))
        steps = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
        steps = steps[2:] if len(steps) >= 4 else steps[1:]  # warm-up, as MeasuredRun::TimedSteps
    except Exception as e:
        print(f"{name:<5} (no result: {e})"); continue
    if not steps: print(f"{name:<5} (no timed step)"); continue
    step = sum(s["step_s"] for s in steps) / len(steps)
    alloc = max(s["peak_allocated_bytes"] for s in steps) / 2**30
    resv = max(s["peak_reserved_bytes"] for s in steps) / 2**30
    ps, pa, pr = est["time"]["step_s"], est["memory"]["peak_allocated_bytes"] / 2**30, est["memory"]["peak_reserved_bytes"] / 2**30
    e = lambda p, m: f"{100 * (p - m) / m:+6.1f}%"
    print(f"{name:<5} {ps:9.3f} {step:8.3f} {e(ps, step)}  {pa:14.2f} {alloc:7.2f} {e(pa, alloc)}  {pr:9.2f} {resv:7.2f} {e(pr, resv)}")
EOF
# The results lines: `llmplan compare --json` of every row, with the profile
# LLMPLAN_RESULTS_PROFILE (default: the one each plan names), as set
# LLMPLAN_RESULTS_SET. Back here: append to docs/results/accuracy.jsonl, then
# tools/results_index.py.
python3 "$root/tools/device/results_lines.py" accuracy "$runs" --llmplan "$llmplan" \
  ${LLMPLAN_RESULTS_PROFILE:+--profile "$LLMPLAN_RESULTS_PROFILE"} ${LLMPLAN_RESULTS_SET:+--set "$LLMPLAN_RESULTS_SET"} \
  --command "tools/device/accuracy.sh $*" >"${OUT:-$out}/accuracy.results.jsonl" &&
  echo "accuracy: results lines in ${OUT:-$out}/accuracy.results.jsonl"
archive="${OUT:-$out}/accuracy.tar.gz"
tar czf "$archive" -C "$out" runs 2>/dev/null && echo "accuracy: run directories packed in $archive"
exit $failed
