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
out="${1:?usage: $0 OUT_DIR [MODEL] [GPUS]}" model="${2:-llama3.2-1b}" gpus="${3:-2}"
steps=20 every=10  # saves after steps 10 and 20 (the end)
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
base = None
print(f'{"mode":6} {"mean step":>10} {"slowest":>9} {"wall":>8} {"per save":>9}  checkpoint')
for mode in ["none", "sync", "async"]:
    m = os.path.join(work, mode, "metrics.jsonl")
    if not os.path.exists(m):
        print(f"{mode:6} failed"); continue
    t = [json.loads(l)["step_s"] for l in open(m)][1:]
    wall = float(open(os.path.join(work, mode + ".wall")).read().split()[-1])
    base = wall if mode == "none" else base
    size = ""
    ck = os.path.join(work, "ckpt-" + mode)
    if os.path.isdir(ck):
        b = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(ck) for f in fs)
        size = f"{b / 1e9:.1f} GB, {saves} saves"
    per = f"{(wall - base) / saves:8.2f}s" if mode != "none" and base else ""
    print(f"{mode:6} {sum(t) / len(t):9.3f}s {max(t):8.3f}s {wall:7.1f}s {per:>9}  {size}")
PY
tar -C "$work" -czf "$out/checkpoint_cost.tar.gz" --exclude='tokens.bin' --exclude='ckpt-*' --exclude='op_times.jsonl' .
