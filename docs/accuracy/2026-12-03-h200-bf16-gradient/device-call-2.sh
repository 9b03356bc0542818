#!/usr/bin/env bash
# Device call 2 (nvidia-h200, carry .deps): call 1's new GPU test found the
# fused AdamW's bf16-gradient and fp32-gradient instantiations 1 ulp apart
# (nvcc contracted a * b + c * d differently in each); the kernel now spells
# out every rounding. The GPU tests again, then the planned 1B plan for 30
# steps (its throughput with the pinned arithmetic).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
top=$(pwd)
el() { echo "$(($(date +%s) - t0)) s"; }
LLMPLAN_JOBS=16 LLMPLAN_GPU_TARGETS="llmplan llmplan-executor executor_gpu_tests" tools/device/gpu_build.sh \
  -DLLMPLAN_BUILD_BENCHMARKS=OFF > $OUT/build.log 2>&1
echo "build rc $? at $(el)"; grep -m4 -A12 "error" $OUT/build.log | head -40
timeout 180 build-gpu/tests/executor/executor_gpu_tests --gtest_filter='-*Nvme*' > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $? at $(el)"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $OUT/gpu_tests.log | head -20
new=$top/build-gpu/tools/llmplan
$new data prepare -o /tmp/tokens.bin $(find planner executor simulator tools -name '*.cc' -o -name '*.h' | sort) > /dev/null 2>&1
for i in 1 2; do
  timeout 90 $new run --plan docs/llama3.2-1b-untied-1xh200-planned.plan.json --data /tmp/tokens.bin --steps 30 \
    --no-final-weights --out /tmp/run_$i > /tmp/run_$i.log 2>&1
  python3 -c "import json; s=json.load(open('/tmp/run_$i/summary.json')); print('run $i', round(s['mean_tokens_per_s_per_gpu']), 'tok/s', round(s['final_loss'],4), round(s['peak_allocated_bytes']/2**30,2), 'GiB alloc')"
done
echo "all done at $(el)"
