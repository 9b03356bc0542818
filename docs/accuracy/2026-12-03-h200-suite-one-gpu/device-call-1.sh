#!/usr/bin/env bash
# Device call 1 (nvidia-h200, carry .deps): the accuracy suite's thirteen
# one-GPU rows (a01-a13) on today's executor and planner — the first full
# one-GPU pass since the fused kernels, the packed projections, AdamW on the
# bf16 gradient and AdamW priced by what it writes — then `llmplan profile`
# of this machine in the time left, for predictions on its own profile.
source tools/device/call_prelude.sh
LLMPLAN_JOBS=16 LLMPLAN_GPU_TARGETS="llmplan llmplan-executor" tools/device/gpu_build.sh -DLLMPLAN_BUILD_TESTS=OFF \
  -DLLMPLAN_BUILD_BENCHMARKS=OFF > $OUT/build.log 2>&1
echo "build rc $? at $(el)"
budget=${LLMPLAN_CALL_BUDGET_S:-585}
LLMPLAN_ACCURACY_DEADLINE=$((t0 + budget - 200)) timeout $((t0 + budget - 130 - $(date +%s))) \
  tools/device/accuracy.sh a01 a02 a03 a04 a05 a06 a07 a08 a09 a10 a11 a12 a13 > $OUT/accuracy.log 2>&1
echo "accuracy rc $? at $(el)"
tail -16 $OUT/accuracy.log
left=$((t0 + budget - $(date +%s)))
if [ $left -gt 60 ]; then
  timeout $((left - 5)) build-gpu/tools/llmplan profile -o $OUT/h200-sxm-1gpu.json --name h200-sxm-1gpu --base h200-sxm \
    > $OUT/profile.log 2>&1
  echo "profile rc $? at $(el)"
fi
