#!/usr/bin/env bash
# Device call 1 (nvidia-h200, carry .deps and out/old = `git archive 7f3782d`):
# the fused form's loss adds its weight gradient into the flat gradient
# (chunked_cross_entropy.h, weight_grad_into). Builds this tree (with the GPU
# tests) and the one before beside it; re-records the one-GPU recorded runs
# (accuracy.sh a01 a02 a03 a09 a12 a13: their head's memory events changed);
# the GPU tests; then the 1B planned plan before and after, alternating.
source tools/device/call_prelude.sh
budget=${LLMPLAN_CALL_BUDGET_S:-585}
(LLMPLAN_JOBS=11 LLMPLAN_GPU_TARGETS="llmplan llmplan-executor executor_gpu_tests" tools/device/gpu_build.sh \
  -DLLMPLAN_BUILD_BENCHMARKS=OFF > $OUT/build_new.log 2>&1; echo "new build rc $? at $(el)" >> $OUT/build_new.log) &
(LLMPLAN_GPU_SOURCE_DIR=out/old LLMPLAN_JOBS=5 LLMPLAN_GPU_TARGETS="llmplan llmplan-executor" tools/device/gpu_build.sh \
  -DLLMPLAN_BUILD_TESTS=OFF -DLLMPLAN_BUILD_BENCHMARKS=OFF > $OUT/build_old.log 2>&1; echo "old build rc $? at $(el)" >> $OUT/build_old.log) &
wait
tail -1 $OUT/build_new.log; tail -1 $OUT/build_old.log
grep -m4 -A12 " error" $OUT/build_new.log | head -40
LLMPLAN_ACCURACY_DEADLINE=$((t0 + budget - 200)) timeout 240 tools/device/accuracy.sh a01 a02 a03 a09 a12 a13 > $OUT/accuracy.log 2>&1
echo "accuracy rc $? at $(el)"; tail -9 $OUT/accuracy.log
timeout 150 build-gpu/tests/executor/executor_gpu_tests --gtest_filter='-*Nvme*' > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $? at $(el)"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $OUT/gpu_tests.log | head -20
new=$top/build-gpu/tools/llmplan; old=$top/out/old/build-gpu/tools/llmplan
plan=$top/docs/accuracy/2026-12-03-h200-one-gpu-no-shard/call-1/planned.plan.json
w=/tmp/ab && mkdir -p $w
$new data prepare -o $w/tokens.bin $(find planner executor simulator tools -name '*.cc' -o -name '*.h' | sort) > /dev/null 2>&1
for run in old_1 new_1 old_2 new_2; do
  left=$((t0 + budget - $(date +%s))); [ $left -lt 40 ] && { echo "$run skipped ($left s left)"; continue; }
  bin=$old; [ ${run%_*} = new ] && bin=$new
  timeout $((left - 10)) $bin run --plan $plan --data $w/tokens.bin --steps 30 --no-final-weights --out $w/$run > $w/$run.log 2>&1
  python3 -c "import json; s=json.load(open('$w/$run/summary.json')); print('$run', round(s['mean_tokens_per_s_per_gpu']), 'tok/s', round(s['final_loss'],4), round(s['peak_allocated_bytes']/2**30,2), 'GiB alloc', round(s['peak_reserved_bytes']/2**30,2), 'GiB resv')" | tee -a $OUT/ab.txt
done
$new compare --run $w/new_2 > $OUT/new_compare.txt 2>&1; head -16 $OUT/new_compare.txt
echo "all done at $(el)"
