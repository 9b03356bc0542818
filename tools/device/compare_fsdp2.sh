#!/usr/bin/env bash
# Run THERE (the GPU machine, .deps carried): trains one plan with llmplan's
# executor and with PyTorch FSDP2 (tools/device/fsdp2_reference.py), one after
# the other on the same GPUs, and prints both results side by side.
#
#   tools/device/compare_fsdp2.sh PLAN.json [STEPS] [--compile]
#
# STEPS (default 13) includes 3 untimed warm-up steps on the FSDP2 side, as the
# figures in docs/results/fsdp2.jsonl were measured. --compile adds a torch.compile-per-block FSDP2
# run. Results go to $OUT/compare/ when $OUT is set (they come back with the
# device call): llmplan_run/ (metrics.jsonl, summary.json), llmplan.log,
# fsdp2_eager.json [, fsdp2_compiled.json], compare.json, and
# fsdp2.results.jsonl (the line for docs/results/fsdp2.jsonl). With
# LLMPLAN_COMPARE_COMPOSITE=1 the plan also runs with LibTorch's composite block
# ops (fused_kernels false; llmplan_composite_run/). The last column is
# llmplan's tokens/s over each row's.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
plan="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
steps="${2:-13}"
compile="${3:-}"
build="${LLMPLAN_GPU_BUILD_DIR:-$root/build-gpu}"
out="${OUT:+$OUT/compare}"
out="${out:-$build/compare}"
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Predictions here are the shipped profiles': no calibration store (feedback/calibration_store.h).
export LLMPLAN_CALIBRATION_DIR=off

gpus="$(python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); print(p.get("plan", p)["gpus"])' "$plan")"
if ! "$root/tools/device/gpu_build.sh" >"$out/build.log" 2>&1; then
  tail -n 40 "$out/build.log"
  echo "compare_fsdp2: build failed (log: $out/build.log)" >&2
  exit 1
fi
llmplan="$build/tools/llmplan"

# Token content does not change throughput: the repository's own sources, byte-level.
tokens="$build/compare_tokens.bin"
[ -f "$tokens" ] || "$llmplan" data prepare -o "$tokens" \
  $(find "$root/planner" "$root/executor" "$root/simulator" "$root/tools" -name '*.cc' -o -name '*.h' -o -name '*.md')

echo "== llmplan run ($gpus GPU(s))"
rm -rf "$out/llmplan_run"
trace_step="${LLMPLAN_COMPARE_KERNEL_TRACE:-0}"
trace_flag=()
[ "$trace_step" -gt 0 ] && trace_flag=(--kernel-trace "$trace_step")
"$llmplan" run --plan "$plan" --data "$tokens" --steps "$steps" --out "$out/llmplan_run" "${trace_flag[@]}" 2>&1 |
  tee "$out/llmplan.log"
if [ "${LLMPLAN_COMPARE_COMPOSITE:-0}" = 1 ]; then
  # The same plan with LibTorch's composite RMSNorm/RoPE/SwiGLU instead of
  # the fused kernels: what the kernels are worth, side by side.
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); p=j.get("plan", j); p["fused_kernels"]=False; json.dump(j, open(sys.argv[2], "w"), indent=1)' \
    "$plan" "$out/plan_composite.json"
  echo "== llmplan run, composite block ops ($gpus GPU(s))"
  rm -rf "$out/llmplan_composite_run"
  "$llmplan" run --plan "$out/plan_composite.json" --data "$tokens" --steps "$steps" --out "$out/llmplan_composite_run" \
    2>&1 | tee "$out/llmplan_composite.log"
fi

fsdp2() {  # $1: result file, then extra flags
  local result="$1"
  shift
  [ "$trace_step" -gt 0 ] && set -- "$@" --kernel-trace "$trace_step" --kernel-trace-out "${result%.json}_kernel_trace.json"
  if [ "$gpus" -gt 1 ]; then
    python3 -m torch.distributed.run --standalone --nproc-per-node "$gpus" "$root/tools/device/fsdp2_reference.py" \
      --plan "$plan" --steps "$steps" --warmup 3 --out "$result" "$@"
  else
    python3 "$root/tools/device/fsdp2_reference.py" --plan "$plan" --steps "$steps" --warmup 3 --out "$result" "$@"
  fi
}
echo "== PyTorch FSDP2, eager"
fsdp2 "$out/fsdp2_eager.json"
if [ "$compile" = "--compile" ]; then
  echo "== PyTorch FSDP2, torch.compile per block"
  fsdp2 "$out/fsdp2_compiled.json" --compile
fi

if [ "$trace_step" -gt 0 ]; then
  traces=("$out/llmplan_run/kernel_trace.json" "$out/fsdp2_eager_kernel_trace.json")
  [ -f "$out/fsdp2_compiled_kernel_trace.json" ] && traces+=("$out/fsdp2_compiled_kernel_trace.json")
  "$llmplan" kernels "${traces[@]}" --top 12 > "$out/kernels.txt" || true
  head -n 20 "$out/kernels.txt"
fi

python3 - "$out" <<'EOF'
import json, os, sys
out = sys.argv[1]
rows = []
s = json.load(open(os.path.join(out, "llmplan_run", "summary.json")))
rows.append(("llmplan", s["mean_tokens_per_s_per_gpu"], s["mean_mfu"], s["peak_allocated_bytes"], s["peak_reserved_bytes"]))
composite = os.path.join(out, "llmplan_composite_run", "summary.json")
if os.path.exists(composite):
    c = json.load(open(composite))
    rows.append(("llmplan composite", c["mean_tokens_per_s_per_gpu"], c["mean_mfu"], c["peak_allocated_bytes"],
                 c["peak_reserved_bytes"]))
for mode in ("eager", "compiled"):
    path = os.path.join(out, f"fsdp2_{mode}.json")
    if os.path.exists(path):
        r = json.load(open(path))
        rows.append((f"fsdp2 {mode}", r["tokens_per_s_per_gpu"], r["mfu"], r["peak_allocated_bytes"],
                     r["peak_reserved_bytes"]))
print(f"{'run':<18} {'tokens/s':>12} {'MFU':>7} {'peak alloc GiB':>15} {'reserved GiB':>13} {'x llmplan':>10}")
for name, tps, mfu, alloc, res in rows:
    print(f"{name:<18} {tps:>12,.0f} {100 * mfu:>6.1f}% {alloc / 2**30:>15.2f} {res / 2**30:>13.2f} "
          f"{rows[0][1] / tps:>9.3f}x")
json.dump([dict(zip(("run", "tokens_per_s", "mfu", "peak_allocated_bytes", "peak_reserved_bytes"), r))
           for r in rows], open(os.path.join(out, "compare.json"), "w"), indent=1)
EOF
# One line of docs/results/fsdp2.jsonl: append it there, then tools/results_index.py.
# The command names the variables that changed the runs (the allocator's
# segments on both sides, the traced step).
env_prefix="${PYTORCH_CUDA_ALLOC_CONF:+PYTORCH_CUDA_ALLOC_CONF=$PYTORCH_CUDA_ALLOC_CONF }"
if [ "$trace_step" != 0 ]; then env_prefix="${env_prefix}LLMPLAN_COMPARE_KERNEL_TRACE=$trace_step "; fi
python3 "$root/tools/device/results_lines.py" fsdp2 "$out" --plan "$plan" \
  --command "${env_prefix}tools/device/compare_fsdp2.sh ${plan#"$root"/} $steps${compile:+ $compile}" >"$out/fsdp2.results.jsonl" &&
  echo "results line: $out/fsdp2.results.jsonl"
