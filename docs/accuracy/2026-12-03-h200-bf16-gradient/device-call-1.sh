#!/usr/bin/env bash
# Device call 1 (nvidia-h200, carry .deps and out/old = `git archive a87c453`,
# the commit before the change, without docs and test data): AdamW reading the
# bf16 gradient on one GPU with one micro-batch (planner/gradient_path.h):
# no fp32 gradient, no widening pass. GPU tests; the planned 1B plan before
# and after, three pairs of 30 steps alternating, the last pair kernel-traced
# at step 20; the recorded runs a01 and a03 (one GPU, one micro-batch: their
# memory changes) recorded again; then llmplan against FSDP2 eager and
# compiled in the time left.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
top=$(pwd)
el() { echo "$(($(date +%s) - t0)) s"; }
plan=$top/docs/llama3.2-1b-untied-1xh200-planned.plan.json
(LLMPLAN_JOBS=11 LLMPLAN_GPU_TARGETS="llmplan llmplan-executor executor_gpu_tests" tools/device/gpu_build.sh \
  -DLLMPLAN_BUILD_BENCHMARKS=OFF > $OUT/build_new.log 2>&1; echo "new build rc $? at $(el)" >> $OUT/build_new.log) &
(LLMPLAN_GPU_SOURCE_DIR=out/old LLMPLAN_JOBS=5 LLMPLAN_GPU_TARGETS="llmplan llmplan-executor" tools/device/gpu_build.sh \
  -DLLMPLAN_BUILD_TESTS=OFF -DLLMPLAN_BUILD_BENCHMARKS=OFF > $OUT/build_old.log 2>&1; echo "old build rc $? at $(el)" >> $OUT/build_old.log) &
wait
tail -1 $OUT/build_new.log; tail -1 $OUT/build_old.log
grep -m4 -A12 "error" $OUT/build_new.log | head -40
new=$top/build-gpu/tools/llmplan; old=$top/out/old/build-gpu/tools/llmplan
timeout 180 build-gpu/tests/executor/executor_gpu_tests --gtest_filter='-*Nvme*' > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $? at $(el)"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $OUT/gpu_tests.log | head -20
tokens=/tmp/tokens.bin
$new data prepare -o $tokens $(find planner executor simulator tools -name '*.cc' -o -name '*.h' | sort) > /dev/null 2>&1
w=/tmp/bg && mkdir -p $w
summary() {
  python3 -c "import json; s=json.load(open('$w/$1/summary.json')); print('$1', round(s['mean_tokens_per_s_per_gpu']), 'tok/s', round(s['final_loss'],4), round(s['peak_allocated_bytes']/2**30,2), 'GiB alloc', round(s['peak_reserved_bytes']/2**30,2), 'GiB resv')" | tee -a $w/table.txt
}
for run in old_1 new_1 old_2 new_2 old_3 new_3; do
  bin=$old; [ ${run%_*} = new ] && bin=$new
  extra=""; [ ${run#*_} = 3 ] && extra="--kernel-trace 20"
  timeout 90 $bin run --plan $plan --data $tokens --steps 30 --no-final-weights --out $w/$run $extra > $w/$run.log 2>&1
  summary $run
done
echo "a/b done at $(el)"
for v in new_3 old_3; do
  $new kernels $w/$v/kernel_trace.json --top 12 > $w/${v}_kernels.txt 2>&1; head -14 $w/${v}_kernels.txt
done
$new compare --run $w/new_3 > $w/new_compare.txt 2>&1; head -30 $w/new_compare.txt
$new compare --run $w/old_3 > $w/old_compare.txt 2>&1
(cd $w && gzip -f new_3/kernel_trace.json old_3/kernel_trace.json; tar czf $OUT/runs.tgz table.txt *.log *.txt new_1 new_2 new_3 old_3)
echo "runs done at $(el)"
LLMPLAN_ACCURACY_STEPS=6 timeout 120 tools/device/accuracy.sh a01 a03 > $OUT/accuracy.log 2>&1
echo "accuracy rc $? at $(el)"; tail -4 $OUT/accuracy.log
left=$((t0 + 585 - $(date +%s)))
if [ $left -gt 150 ]; then
  LLMPLAN_GPU_TARGETS="llmplan llmplan-executor" timeout $left tools/device/compare_fsdp2.sh $plan 13 --compile > $OUT/compare.log 2>&1
  echo "compare rc $? at $(el)"; tail -5 $OUT/compare.log
else
  echo "compare skipped: $left s left"
fi
echo "all done at $(el)"
