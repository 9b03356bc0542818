#!/usr/bin/env bash
# Device call 2 (nvidia-h200, carry .deps): call 1's recorded runs showed,
# at the head's backward, 8-26 MiB the memory model does not hold: ATen's
# `partials.sum(0)` (the fused RMSNorm's weight gradient) takes a global
# staging buffer about twice the partials (measured alone in call 1b:
# +18.0 MiB for [1056, 2048] fp32). Now one small kernel sums them
# (LaunchSumPartialRows). Build with the GPU tests; the one-GPU recorded runs
# again (accuracy.sh a01 a02 a03 a09 a12 a13); then the GPU tests.
source tools/device/call_prelude.sh
budget=${LLMPLAN_CALL_BUDGET_S:-585}
LLMPLAN_JOBS=16 LLMPLAN_GPU_TARGETS="llmplan llmplan-executor executor_gpu_tests" tools/device/gpu_build.sh \
  -DLLMPLAN_BUILD_BENCHMARKS=OFF > $OUT/build.log 2>&1
echo "build rc $? at $(el)"
grep -m4 -A12 " error" $OUT/build.log | head -40
LLMPLAN_ACCURACY_DEADLINE=$((t0 + budget - 120)) timeout $((t0 + budget - 40 - $(date +%s))) \
  tools/device/accuracy.sh a01 a02 a03 a09 a12 a13 > $OUT/accuracy.log 2>&1
echo "accuracy rc $? at $(el)"; tail -9 $OUT/accuracy.log
left=$((t0 + budget - $(date +%s)))
timeout $((left > 10 ? left - 5 : 5)) build-gpu/tests/executor/executor_gpu_tests --gtest_filter='-*Nvme*' > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $? at $(el)"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]|gradient [01]: fused" $OUT/gpu_tests.log | tail -24
