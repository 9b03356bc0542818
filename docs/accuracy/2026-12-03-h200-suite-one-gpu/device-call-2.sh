#!/usr/bin/env bash
# Device call 2 (nvidia-h200, carry .deps): the kernels behind the suite's
# systematic misses (README.md here): a01 (Llama-3.2-1B) and a09
# (Qwen2.5-0.5B) trained again from the plans call 1 ran, step 4 kernel-traced,
# `llmplan kernels` on each: the loss's three GEMMs, AdamW, the blocks'
# backward GEMMs of the narrow model.
source tools/device/call_prelude.sh
LLMPLAN_JOBS=16 LLMPLAN_GPU_TARGETS="llmplan llmplan-executor" tools/device/gpu_build.sh -DLLMPLAN_BUILD_TESTS=OFF \
  -DLLMPLAN_BUILD_BENCHMARKS=OFF > $OUT/build.log 2>&1
echo "build rc $? at $(el)"
llmplan=$top/build-gpu/tools/llmplan
w=/tmp/k && mkdir -p $w
$llmplan data prepare -o $w/tokens.bin $(find planner executor simulator tools -name '*.cc' -o -name '*.h' | sort) > /dev/null 2>&1
for row in a01 a09; do
  timeout 120 $llmplan run --plan docs/accuracy/2026-12-03-h200-suite-one-gpu/call-1/runs/$row/plan.json --data $w/tokens.bin \
    --steps 5 --no-final-weights --kernel-trace 4 --out $w/$row > $w/$row.log 2>&1
  echo "$row rc $? at $(el)"
  $llmplan kernels $w/$row/kernel_trace.json --top 40 > $OUT/${row}_kernels.txt 2>&1
  head -24 $OUT/${row}_kernels.txt
done
python3 tools/device/kernel_callers.py $w/a01/kernel_trace.json nvjet cutlass gemm Fill --top 30 > $OUT/a01_callers.txt 2>&1 || true
python3 tools/device/kernel_callers.py $w/a09/kernel_trace.json nvjet cutlass gemm --top 30 > $OUT/a09_callers.txt 2>&1 || true
