#!/usr/bin/env bash
# NVMe offload against host offload, measured on the GPU machine in one call:
# the disk measured (llmplan profile --quick --nvme-dir), the same model and
# batch planned with AdamW's state in host memory and on NVMe, both trained,
# tokens/s side by side with the planner's prediction for each.
#
#   tools/device/nvme_offload.sh OUT_DIR NVME_DIR [MODEL] [GLOBAL_BATCH] [STEPS]
#       (default llama3.2-1b, 256 sequences of 4096 tokens, 3 steps, one GPU)
#
# The batch is large on purpose: the planner refuses an NVMe plan whose disk
# time is over half the step (planner/nvme_offload.h), and a step streams the
# whole state (8 bytes per parameter) in and out once.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${LLMPLAN_GPU_BUILD_DIR:-$root/build-gpu}"
llmplan="$build/tools/llmplan"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Predictions here are the shipped profiles': no calibration store (feedback/calibration_store.h).
export LLMPLAN_CALIBRATION_DIR=off
out="${1:?usage: $0 OUT_DIR NVME_DIR [MODEL] [GLOBAL_BATCH] [STEPS]}" nvme="${2:?NVME_DIR}"
model="${3:-llama3.2-1b}" batch="${4:-256}" steps="${5:-3}"
work="$build/nvme_offload"
rm -rf "$work" && mkdir -p "$work" "$out" "$nvme"
"$llmplan" data prepare -o "$work/tokens.bin" $(find "$root/planner" "$root/executor" -name '*.cc') >/dev/null || exit 1
"$llmplan" profile --quick --gpus 1 --nvme-dir "$nvme" -o "$work/h200-nvme.json" 2>&1 | grep -E "NVMe|wrote" | tee "$out/disk.txt"
for where in host nvme; do
  "$llmplan" estimate --model "$model" --gpus 1 --gpu "$work/h200-nvme.json" --seq 4096 --global-batch "$batch" \
    --offload optimizer --offload-to "$where" -o "$work/$where.json" >"$out/estimate-$where.txt" 2>&1 ||
    { echo "$where: not planned: $(tail -n 1 "$out/estimate-$where.txt")"; continue; }
  flags=()
  [ "$where" = nvme ] && flags=(--nvme-dir "$nvme")
  "$llmplan" run --plan "$work/$where.json" --data "$work/tokens.bin" --steps "$steps" --no-final-weights \
    --out "$work/run-$where" "${flags[@]}" >"$out/run-$where.log" 2>&1 ||
    echo "$where: run failed: $(tail -n 3 "$out/run-$where.log")"
done
python3 - "$work" <<'PY' | tee "$out/nvme_offload.txt"
import json, os, sys
work = sys.argv[1]
for where in ["host", "nvme"]:
    m = os.path.join(work, "run-" + where, "metrics.jsonl")
    if not os.path.exists(m):
        continue
    rows = [json.loads(l) for l in open(m)]
    timed = rows[1:] or rows
    s = json.load(open(os.path.join(work, "run-" + where, "summary.json")))
    tok = sum(r["tokens_per_s_per_gpu"] for r in timed) / len(timed)
    print(f"{where}: {tok:,.0f} tok/s (mean of steps 2..{len(rows)}), step {sum(r['step_s'] for r in timed) / len(timed):.1f} s, "
          f"predicted {s.get('predicted_tokens_per_s_per_gpu', 0):,.0f} tok/s, "
          f"pinned {s['peak_pinned_host_bytes'] / 2**30:.1f} GiB, resident {s['peak_host_rss_bytes'] / 2**30:.1f} GiB")
PY
