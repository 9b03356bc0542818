#!/usr/bin/env bash
# Device call 1 (nvidia-h200, carry .deps and out/old = `git archive be3eda5`):
# the fused form's projections (q/k/v and gate/up as one GEMM each, the
# residual added in the o and down GEMMs' epilogue, weight gradients added by
# the GEMM into the flat gradient). GPU tests of the kernels and of training;
# the 1B plan before and after, alternating, step 8 of the last traced; the
# loss chunk at 4,096 and 16,384 tokens; then the one-GPU recorded runs again
# (accuracy.sh a01 a02 a03 a09 a12 a13) for tests/data/runs.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
top=$(pwd)
el() { echo "$(($(date +%s) - t0)) s"; }
plan=$top/docs/llama3.2-1b-untied-1xh200.plan.json
(LLMPLAN_JOBS=11 LLMPLAN_GPU_TARGETS="llmplan llmplan-executor executor_gpu_tests" tools/device/gpu_build.sh \
  -DLLMPLAN_BUILD_BENCHMARKS=OFF > $OUT/build_new.log 2>&1; echo "new build rc $? at $(el)" >> $OUT/build_new.log) &
(LLMPLAN_GPU_SOURCE_DIR=out/old LLMPLAN_JOBS=5 LLMPLAN_GPU_TARGETS="llmplan llmplan-executor" tools/device/gpu_build.sh \
  -DLLMPLAN_BUILD_TESTS=OFF -DLLMPLAN_BUILD_BENCHMARKS=OFF > $OUT/build_old.log 2>&1; echo "old build rc $? at $(el)" >> $OUT/build_old.log) &
wait
tail -1 $OUT/build_new.log; tail -1 $OUT/build_old.log
grep -m4 -A12 "error" $OUT/build_new.log | head -40
new=$top/build-gpu/tools/llmplan; old=$top/out/old/build-gpu/tools/llmplan
timeout 150 build-gpu/tests/executor/executor_gpu_tests \
  --gtest_filter='BlockOps*:GpuTest.*:ShardedGpuTest.*:KernelTrace*:ChunkedCross*:OutOfMemory*' > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $? at $(el)"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]|kept for backward" $OUT/gpu_tests.log | head -20
tokens=/tmp/tokens.bin
$new data prepare -o $tokens $(find planner executor simulator tools -name '*.cc' -o -name '*.h' | sort) > /dev/null 2>&1
w=/tmp/pp && mkdir -p $w
summary() {
  python3 -c "import json; s=json.load(open('$w/$1/summary.json')); print('$1', round(s['mean_tokens_per_s_per_gpu']), 'tok/s', round(s['final_loss'],4), round(s['peak_allocated_bytes']/2**30,2), 'GiB alloc', round(s['peak_reserved_bytes']/2**30,2), 'GiB resv')" | tee -a $w/table.txt
}
for run in old_1 new_1 old_2 new_2; do
  bin=$old; [ ${run%_*} = new ] && bin=$new
  extra=""; [ $run = new_2 ] && extra="--kernel-trace 8"
  timeout 90 $bin run --plan $plan --data $tokens --steps 13 --no-final-weights --out $w/$run $extra > $w/$run.log 2>&1
  summary $run
done
echo "a/b done at $(el)"
for chunk in 4096 16384; do
  python3 -c "import json; p=json.load(open('$plan')); p['loss_chunk_tokens']=$chunk; json.dump(p, open('$w/chunk$chunk.plan.json','w'), indent=1)"
  timeout 90 $new run --plan $w/chunk$chunk.plan.json --data $tokens --steps 13 --no-final-weights --out $w/chunk$chunk > $w/chunk$chunk.log 2>&1
  summary chunk$chunk
done
$new kernels $w/new_2/kernel_trace.json --top 15 > $w/new_kernels.txt 2>&1; head -14 $w/new_kernels.txt
$new compare --run $w/new_2 > $w/new_compare.txt 2>&1; head -30 $w/new_compare.txt
echo "runs done at $(el)"
(cd $w && gzip -f new_2/kernel_trace.json; tar czf $OUT/runs.tgz table.txt *.log new_kernels.txt new_compare.txt new_1 new_2 old_2 chunk4096 chunk16384)
left=$((t0 + 580 - $(date +%s))); [ $left -lt 10 ] && left=10
LLMPLAN_ACCURACY_DEADLINE=$((t0 + 510)) timeout $left tools/device/accuracy.sh a01 a02 a03 a09 a12 a13 > $OUT/accuracy.log 2>&1
tail -12 $OUT/accuracy.log
echo "all done at $(el)"
