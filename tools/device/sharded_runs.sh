#!/usr/bin/env bash
# Run THERE (the 2-GPU machine, .deps carried, after gpu_build.sh): the sharded
# executor's acceptance runs, each printing one summary line.
#   tools/device/sharded_runs.sh equivalence   tiny-llama, fp32: 1 GPU vs 2 GPUs (NCCL), final weights compared
#   tools/device/sharded_runs.sh llama8b       Llama-3-8B seq 4096 full_shard on 2 GPUs, then PyTorch FSDP2 on the same plan
#   tools/device/sharded_runs.sh offload8b [llmplan|fsdp2]
#                                              Llama-3-8B seq 4096 on ONE GPU with the optimizer on the CPU
#                                              (the plan of `llmplan estimate --model llama3-8b --gpus 1 --gpu h200-sxm
#                                              --seq 4096 --global-batch 4 --host-memory 240`), then FSDP2 with
#                                              CPUOffloadPolicy on the same plan; needs the 2-GPU machine's 256 GiB host
# Results under $OUT/sharded/ when $OUT is set.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${LLMPLAN_GPU_BUILD_DIR:-$root/build-gpu}"
llmplan="$build/tools/llmplan"
out="${OUT:+$OUT/sharded}"
out="${out:-$build/sharded}"
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Predictions here are the shipped profiles': no calibration store (feedback/calibration_store.h).
export LLMPLAN_CALIBRATION_DIR=off
tokens="$root/.deps/data/fortunes.bin"
[ -f "$tokens" ] || { echo "sharded_runs: $tokens missing (copy build/demo/tokens.bin there before the call)" >&2; exit 2; }

summary() {  # $1: run dir, $2: label
  python3 - "$1" "$2" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
print(f"{sys.argv[2]}: {s['mean_tokens_per_s_per_gpu']:,.0f} tokens/s/GPU, MFU {100*s['mean_mfu']:.1f}%, "
      f"peak {s['peak_allocated_bytes']/2**30:.2f} / {s['peak_reserved_bytes']/2**30:.2f} GiB, "
      f"loss {s['first_loss']:.3f} -> {s['final_loss']:.3f}")
PY
}

case "${1:-}" in
  equivalence)
    for g in 1 2; do
      "$llmplan" estimate --model tiny-llama --gpus $g --gpu h200-sxm --seq 256 --global-batch 8 --strategy full_shard \
        --micro-batch $((8 / g / 2)) --grad-accum 2 --checkpoint-layers none --offload none -o "$out/tiny_$g.json" >/dev/null
      "$llmplan" run --plan "$out/tiny_$g.json" --data "$tokens" --steps 5 --dtype fp32 --out "$out/tiny_$g" \
        >"$out/tiny_$g.log" 2>&1 || { tail -5 "$out/tiny_$g.log"; exit 1; }
    done
    python3 - "$out" <<'PY'
import sys
from safetensors.torch import load_file
a = load_file(sys.argv[1] + "/tiny_1/final.safetensors"); b = load_file(sys.argv[1] + "/tiny_2/final.safetensors")
assert a.keys() == b.keys(), "different tensor names"
worst = max(((a[k] - b[k]).abs().max() / a[k].abs().max().clamp(min=1e-12)).item() for k in a)
print(f"equivalence: 1 GPU vs 2 GPUs (NCCL), tiny-llama fp32, 5 steps: {len(a)} tensors, max relative difference {worst:.2e}")
sys.exit(0 if worst < 1e-4 else 1)
PY
    ;;
  llama8b)
    plan="$root/tools/device/plans/llama3-8b-2xh200.plan.json"
    timeout 300 "$llmplan" run --plan "$plan" --data "$tokens" --steps 12 --out "$out/llama8b" >"$out/llama8b.log" 2>&1
    echo "llmplan rc=$?"; tail -3 "$out/llama8b.log"; summary "$out/llama8b" "llmplan llama3-8b 2 GPUs"
    timeout 200 python3 -m torch.distributed.run --standalone --nproc-per-node 2 "$root/tools/device/fsdp2_reference.py" \
      --plan "$plan" --steps 13 --warmup 3 --out "$out/fsdp2_llama8b.json" >"$out/fsdp2_llama8b.log" 2>&1
    echo "fsdp2 rc=$?"; tail -c 400 "$out/fsdp2_llama8b.json"
    ;;
  offload8b)
    plan="$root/tools/device/plans/llama3-8b-1xh200-offload.plan.json"
    if [ "${2:-llmplan}" = llmplan ]; then
      CUDA_VISIBLE_DEVICES=0 timeout 420 "$llmplan" run --plan "$plan" --data "$tokens" --steps 6 --no-final-weights \
        --out "$out/offload8b" >"$out/offload8b.log" 2>&1
      echo "llmplan rc=$?"; tail -4 "$out/offload8b.log"; summary "$out/offload8b" "llmplan llama3-8b 1 GPU, optimizer offloaded"
    fi
    if [ "${2:-fsdp2}" = fsdp2 ]; then
      # One process, a world of one; the plan's offload becomes CPUOffloadPolicy.
      CUDA_VISIBLE_DEVICES=0 timeout 480 python3 "$root/tools/device/fsdp2_reference.py" --plan "$plan" --steps 5 \
        --warmup 2 --out "$out/fsdp2_offload8b.json" >"$out/fsdp2_offload8b.log" 2>&1
      echo "fsdp2 rc=$?"; tail -c 1500 "$out/fsdp2_offload8b.log"
    fi
    free -g | head -2
    ;;
  *) echo "usage: sharded_runs.sh equivalence|llama8b|offload8b [llmplan|fsdp2]" >&2; exit 2 ;;
esac
