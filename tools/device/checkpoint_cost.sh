#!/usr/bin/env bash
# What a checkpoint costs a run, measured on the GPU machine: the same plan
# trained with no checkpoints, with synchronous ones and with asynchronous
# ones (--ckpt-async) every K steps, side by side in one call.
#
#   tools/device/checkpoint_cost.sh OUT_DIR [MODEL] [GPUS]    (default llama3.2-1b on 2 GPUs)
#
# Prints, per mode, the mean step time over the steps after the first, the
# slowest step, the whole run's wall time and the checkpoint's size; the
# cost of one save is (wall with saves - wall without) / saves.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${LLMPLAN_GPU_BUILD_DIR:-$root/build-gpu}"
llmplan="$build/tools/llmplan"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Predictions here are the shipped profiles': no calibration store (feedback/calibration_store.h).
export LLMPLAN_CALIBRATION_DIR=off
out="${1:?usage: $0 OUT_DIR [MODEL] [GPUS]}" model="${2:-llama3.2-1b}" gpus="${3:-2}"
steps=80 every=40  # saves after step 40 (in the background when async) and 80 (the end: waited for)
work="$build/checkpoint_cost"
rm -rf "$work" && mkdir -p "$work" "$out"
"$llmplan" data prepare -o "$work/tokens.bin" $(find "$root/planner" "$root/executor" -name '*.cc') >/dev/null || exit 1
"$llmplan" estimate --model "$model" --gpus "$gpus" --gpu h200-sxm --seq 4096 --micro-batch 4 --grad-accum 1 \
  --global-batch $((4 * gpus)) --strategy full_shard --checkpoint-layers none -o "$work/plan.json" >/dev/null || exit 1
for mode in none sync async; do
  flags=()
  [ "$mode" != none ] && flags=(--ckpt-dir "$work/ckpt-$mode" --ckpt-every "$every" --ckpt-keep 1)
  [ "$mode" = async ] && flags+=(--ckpt-async)
  /usr/bin/time -f "%e" -o "$work/$mode.wall" "$llmplan" run --plan "$work/plan.json" --data "$work/tokens.bin" \
    --steps "$steps" --no-final-weights --out "$work/$mode" "${flags[@]}" >"$work/$mode.log" 2>&1 ||
    echo "$mode: failed: $(tail -n 3 "$work/$mode.log")"
done
python3 - "$work" "$steps" "$every" <<'PY' | tee "$out/checkpoint_cost.txt"
import json, os, sys
work, steps, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
saves = steps // every + (steps % every != 0)
wall, rows = {}, {}
for mode in ["none", "sync", "async"]:
    m = os.path.join(work, mode, "metrics.jsonl")
    if not os.path.exists(m):
        continue
    rows[mode] = [json.loads(l)["step_s"] for l in open(m)][1:]
    wall[mode] = float(open(os.path.join(work, mode + ".wall")).read().split()[-1])
size = 0
ck = os.path.join(work, "ckpt-sync")
if os.path.isdir(ck):
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(ck) for f in fs) / 1e9
print(f"{steps} steps, a checkpoint of {size:.1f} GB every {every} steps ({saves} saves, the last at the end)")
print(f'{"mode":6} {"mean step":>10} {"slowest":>9} {"wall":>8}  cost')
for mode, t in rows.items():
    cost = ""
    if mode == "sync" and "none" in wall:
        cost = f"{(wall['sync'] - wall['none']) / saves:.2f} s per save (training waits for the write)"
    if mode == "async" and "none" in wall and "sync" in wall and saves > 1:
        per_sync = (wall["sync"] - wall["none"]) / saves
        hidden = (wall["async"] - wall["none"] - per_sync) / (saves - 1)  # the last save is waited for
        cost = f"{hidden:.2f} s per save written in the background (the end's save waited for as sync)"
    print(f"{mode:6} {sum(t) / len(t):9.3f}s {max(t):8.3f}s {wall[mode]:7.1f}s  {cost}")
PY
tar -C "$work" -czf "$out/checkpoint_cost.tar.gz" --exclude='tokens.bin' --exclude='ckpt-*' --exclude='op_times.jsonl' .
