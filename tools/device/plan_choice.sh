#!/usr/bin/env bash
# Is the planner's choice the fastest plan? Runs the plan `llmplan estimate`
# chooses and its alternatives on the GPU machine, and prints predicted and
# measured tokens/s/GPU side by side (issue #10: the choice within 5% of the
# fastest measured alternative).
#
#   tools/device/plan_choice.sh OUT_DIR MODEL GPUS SEQ GLOBAL_BATCH PROFILE [PINS...]
#
# Each PINS argument is one alternative, as estimate flags in one string
# ("--strategy shard_grad_op --micro-batch 1 --grad-accum 8 --checkpoint-layers none");
# without any, the estimate's first three alternatives that fit are run.
# Every plan trains LLMPLAN_CHOICE_STEPS steps (default 6; the first is
# warm-up and left out of the mean) with --no-final-weights. Run directories
# are packed into OUT_DIR/plan_choice.tar.gz for llmplan compare; the lines for
# docs/results/plan_choice.jsonl are OUT_DIR/plan_choice.results.jsonl.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${LLMPLAN_GPU_BUILD_DIR:-$root/build-gpu}"
llmplan="$build/tools/llmplan"
steps="${LLMPLAN_CHOICE_STEPS:-6}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Predictions here are the shipped profiles': no calibration store (feedback/calibration_store.h).
export LLMPLAN_CALIBRATION_DIR=off
[ $# -ge 6 ] || { echo "usage: $0 OUT_DIR MODEL GPUS SEQ GLOBAL_BATCH PROFILE [PINS...]" >&2; exit 2; }
out="$1" model="$2" gpus="$3" seq="$4" batch="$5" profile="$6"
shift 6
[ -x "$llmplan" ] || { echo "plan_choice: $llmplan is missing: build first" >&2; exit 2; }
work="$build/plan_choice"
rm -rf "$work" && mkdir -p "$work" "$out"
base=(--model "$model" --gpus "$gpus" --seq "$seq" --global-batch "$batch" --gpu "$profile")

tokens="$work/tokens.bin"
"$llmplan" data prepare -o "$tokens" $(find "$root/planner" "$root/executor" -name '*.cc') >/dev/null ||
  { echo "plan_choice: cannot make the token file" >&2; exit 1; }

"$llmplan" estimate "${base[@]}" --json -o "$work/choice.plan.json" >"$work/choice.estimate.json" ||
  { echo "plan_choice: the estimate failed" >&2; exit 1; }
alternatives=("$@")
if [ ${#alternatives[@]} -eq 0 ]; then
  mapfile -t alternatives < <(python3 - "$work/choice.estimate.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
n = 0
for a in j["alternatives"]:
    if not a["fits"] or n == 3:
        continue
    p = a["plan"]
    ckpt = ",".join(str(l) for l in p["checkpoint_layers"]) or "none"
    print(f'--strategy {p["strategy"]} --micro-batch {p["micro_batch"]} --grad-accum {p["grad_accum"]} '
          f'--checkpoint-layers {ckpt} --offload {p["offload"]}')
    n += 1
PY
)
fi

run_plan() {  # name; the plan is $work/$name.plan.json
  local name="$1"
  timeout 900 "$llmplan" run --plan "$work/$name.plan.json" --data "$tokens" --steps "$steps" --no-final-weights \
    --out "$work/$name" >"$work/$name.log" 2>&1 || echo "$name: run failed: $(tail -n 2 "$work/$name.log")"
}
run_plan choice
i=0
for pins in "${alternatives[@]}"; do
  i=$((i + 1))
  # shellcheck disable=SC2086  # PINS is a list of flags
  "$llmplan" estimate "${base[@]}" $pins --json -o "$work/alt$i.plan.json" >"$work/alt$i.estimate.json" 2>"$work/alt$i.err" ||
    { echo "alt$i ($pins): no plan: $(head -c 300 "$work/alt$i.err")"; continue; }
  echo "$pins" >"$work/alt$i.pins"
  run_plan "alt$i"
done

python3 - "$work" "$i" <<'PY' | tee "$out/plan_choice.txt"
import json, os, sys
work, n = sys.argv[1], int(sys.argv[2])
rows = []
for name in ["choice"] + [f"alt{k}" for k in range(1, n + 1)]:
    est = os.path.join(work, name + ".estimate.json")
    if not os.path.exists(est):
        continue
    p = json.load(open(est))
    plan = p["plan"]
    ckpt = len(plan["checkpoint_layers"])
    desc = (f'{plan["strategy"]} mb {plan["micro_batch"]} x ga {plan["grad_accum"]}, '
            f'ckpt {ckpt}/{plan["model"]["num_hidden_layers"]}, offload {plan["offload"]}')
    measured = None
    s = os.path.join(work, name, "summary.json")
    if os.path.exists(s):
        measured = json.load(open(s))["mean_tokens_per_s_per_gpu"]
    rows.append((name, desc, p["throughput"]["tokens_per_s_per_gpu"], measured))
fastest = max((r[3] for r in rows if r[3]), default=None)
print(f'{"plan":8} {"configuration":48} {"predicted":>10} {"measured":>10} {"error":>7} {"vs fastest":>10}')
for name, desc, pred, meas in rows:
    if meas:
        print(f'{name:8} {desc:48} {pred:10,.0f} {meas:10,.0f} {100 * (pred - meas) / meas:+6.1f}% {100 * (meas - fastest) / fastest:+9.1f}%')
    else:
        print(f'{name:8} {desc:48} {pred:10,.0f} {"failed":>10}')
choice = rows[0][3] if rows and rows[0][0] == "choice" else None
if choice and fastest:
    print(f'the chosen plan is {100 * (fastest - choice) / fastest:.1f}% below the fastest measured plan (target <= 5%)')
PY
# The lines of docs/results/plan_choice.jsonl: append them there, then tools/results_index.py.
python3 "$root/tools/device/results_lines.py" plan_choice "$work" --command "tools/device/plan_choice.sh OUT $model $gpus $seq $batch $profile${*:+ ...}" \
  >"$out/plan_choice.results.jsonl"
tar -C "$work" -czf "$out/plan_choice.tar.gz" --exclude='tokens.bin' . 2>/dev/null
