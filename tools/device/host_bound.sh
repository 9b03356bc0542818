#!/usr/bin/env bash
# Run THERE (the GPU machine, .deps carried, after gpu_build.sh): how much of
# a step the GPU sits idle waiting for the host to issue kernels — what CUDA
# graphs (issue #35) could gain — for a small model and the 1B plan.
#
#   tools/device/host_bound.sh PROFILE [STEPS]
#
# Each row: estimate with every choice pinned on PROFILE, train STEPS steps
# (default 8) tracing the one before last with LibTorch's profiler, then
# compare (predicted against measured) and `llmplan kernels` (device time by
# class, kernels per step, and the device's idle time: the short gaps between
# back-to-back kernels — the host issuing no faster than the GPU runs, what
# replaying a graph removes — and the longer waits). The traced step is
# slower than the others (the profiler's cost per launch): both are printed.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
profile="${1:?give a profile (name or path)}"
steps="${2:-8}"
llmplan="${LLMPLAN_GPU_BUILD_DIR:-$root/build-gpu}/tools/llmplan"
work="${LLMPLAN_HOST_BOUND_DIR:-/tmp/llmplan_host_bound}"
rm -rf "$work"
mkdir -p "$work"
"$llmplan" data prepare -o "$work/tokens.bin" $(find "$root/planner" "$root/executor" -name '*.cc') >/dev/null ||
  { echo "host_bound: cannot make the token file" >&2; exit 1; }

status=0
# name model seq micro-batch
for row in "smollm2-135m smollm2-135m 2048 16" "llama3.2-1b llama3.2-1b 4096 4"; do
  set -- $row
  name="$1" model="$2" seq="$3" mb="$4"
  [ -d "$root/tools/device/accuracy/$model" ] && model="$root/tools/device/accuracy/$model/config.json"
  "$llmplan" estimate --model "$model" --gpus 1 --gpu "$profile" --seq "$seq" --micro-batch "$mb" --grad-accum 1 \
    --global-batch "$mb" --checkpoint-layers none --strategy no_shard --offload none -o "$work/$name.plan.json" \
    >/dev/null || { status=1; continue; }
  run="$work/$name"
  "$llmplan" run --no-learn --plan "$work/$name.plan.json" --data "$work/tokens.bin" --steps "$steps" \
    --kernel-trace $((steps - 1)) --no-final-weights --out "$run" >"$work/$name.run.txt" 2>&1 ||
    { tail -n 5 "$work/$name.run.txt"; status=1; continue; }
  echo "== $name, seq $seq, micro-batch $mb"
  python3 - "$run/metrics.jsonl" "$((steps - 1))" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
traced = int(sys.argv[2])
plain = [r["step_s"] for r in rows if r["step"] > 2 and r["step"] != traced]
t = [r["step_s"] for r in rows if r["step"] == traced]
print(f"step time: {1000 * sum(plain) / len(plain):.1f} ms untraced (steps 3+), {1000 * t[0]:.1f} ms traced (step {traced})")
PY
  "$llmplan" compare --run "$run" | sed -n '4,8p;/Device time by class/,/compute_idle/p'
  "$llmplan" kernels "$run/kernel_trace.json" --top 8
done
exit $status
