#!/usr/bin/env bash
# Run THERE (the GPU machine, .deps carried): trains one plan with PyTorch FSDP2
# (tools/device/fsdp2_reference.py, eager) and with llmplan from the SAME
# initial weights on the SAME tokens, and prints both loss curves side by side
# with their difference per step.
#
#   tools/device/loss_agreement.sh PLAN.json [STEPS] [TOKENS]
#
# FSDP2 draws the initial weights and writes them as a Hugging Face directory
# (--init-out), then trains on llmplan's own sample stream of TOKENS (--data:
# the same windows, shuffle and per-rank rows as executor/data/batch_loader.h);
# `llmplan run --init-from` starts from those weights on the same file. TOKENS
# defaults to this repository's sources as byte-level tokens (real code and
# prose). Both run bf16 compute with fp32 masters and the plan's AdamW, clip
# and schedule; what differs is each stack's kernels (llmplan's fused RMSNorm,
# RoPE, SwiGLU and chunked cross-entropy against F.rms_norm and a full fp32
# cross-entropy), so the curves agree to bf16 rounding, not bit for bit.
# Output in $OUT/agreement/ (or build-gpu/agreement/): fsdp2.json,
# llmplan_run/, agreement.json, agreement.txt.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
plan="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
steps="${2:-20}"
build="${LLMPLAN_GPU_BUILD_DIR:-$root/build-gpu}"
out="${OUT:+$OUT/agreement}"
out="${out:-$build/agreement}"
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Predictions here are the shipped profiles': no calibration store (feedback/calibration_store.h).
export LLMPLAN_CALIBRATION_DIR=off
llmplan="$build/tools/llmplan"
[ -x "$llmplan" ] || { echo "loss_agreement: $llmplan is missing: run tools/device/gpu_build.sh first" >&2; exit 2; }
tokens="${3:-$build/agreement_tokens.bin}"
[ -f "$tokens" ] || "$llmplan" data prepare -o "$tokens" \
  $(find "$root/planner" "$root/executor" "$root/simulator" "$root/docs" -name '*.cc' -o -name '*.h' -o -name '*.md' | sort)
gpus="$(python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); print(p.get("plan", p)["gpus"])' "$plan")"

echo "== PyTorch FSDP2 (eager), initial weights written to $out/init"
rm -rf "$out/init" "$out/llmplan_run"
if [ "$gpus" -gt 1 ]; then
  python3 -m torch.distributed.run --standalone --nproc-per-node "$gpus" "$root/tools/device/fsdp2_reference.py" \
    --plan "$plan" --steps "$steps" --warmup 1 --data "$tokens" --init-out "$out/init" --out "$out/fsdp2.json"
else
  python3 "$root/tools/device/fsdp2_reference.py" --plan "$plan" --steps "$steps" --warmup 1 --data "$tokens" \
    --init-out "$out/init" --out "$out/fsdp2.json"
fi
echo "== llmplan run --init-from $out/init"
"$llmplan" run --plan "$plan" --data "$tokens" --steps "$steps" --init-from "$out/init" --no-final-weights \
  --out "$out/llmplan_run" 2>&1 | tail -n 3

python3 - "$out" <<'PY' | tee "$out/agreement.txt"
import json, os, sys
out = sys.argv[1]
fsdp2 = json.load(open(os.path.join(out, "fsdp2.json")))["losses"]
ours = [json.loads(l)["loss"] for l in open(os.path.join(out, "llmplan_run", "metrics.jsonl")) if l.strip()]
n = min(len(fsdp2), len(ours))
rel = [abs(ours[i] - fsdp2[i]) / abs(fsdp2[i]) for i in range(n)]
print(f"{'step':>4} {'llmplan':>10} {'fsdp2':>10} {'|diff|/fsdp2':>13}")
for i in range(n):
    print(f"{i + 1:>4} {ours[i]:>10.4f} {fsdp2[i]:>10.4f} {100 * rel[i]:>12.3f}%")
summary = {"steps": n, "llmplan_losses": ours[:n], "fsdp2_losses": fsdp2[:n],
           "max_relative_difference": max(rel), "mean_relative_difference": sum(rel) / n,
           "first_step_relative_difference": rel[0]}
print(f"max |diff|/fsdp2 {100 * max(rel):.3f}%, mean {100 * sum(rel) / n:.3f}%, step 1 {100 * rel[0]:.4f}%; "
      f"loss {ours[0]:.4f} -> {ours[n - 1]:.4f} (llmplan), {fsdp2[0]:.4f} -> {fsdp2[n - 1]:.4f} (fsdp2)")
json.dump(summary, open(os.path.join(out, "agreement.json"), "w"), indent=1)
PY
