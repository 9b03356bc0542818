#!/usr/bin/env bash
# Device call 1 (nvidia-h200, carry .deps): the GPU tests at the commit that
# added Plan::cast_at_gather (its gathers need two GPUs: on one, this checks
# that nothing else moved), then the three pairs that
# 2026-12-02-h200-packed-projections/device-call-3.sh scripted and no call
# ran: Llama-3.2-3B optimizer offload (full_shard, micro-batch 2 x 4, seq
# 4096) staged through the slots and per unit, alternating, as many pairs as
# the call's time allows. LLMPLAN_CALL_BUDGET_S (default 480): no run starts later.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
top=$(pwd)
el() { echo "$(($(date +%s) - t0)) s"; }
LLMPLAN_JOBS=16 LLMPLAN_GPU_TARGETS="llmplan llmplan-executor executor_gpu_tests" tools/device/gpu_build.sh \
  -DLLMPLAN_BUILD_BENCHMARKS=OFF > $OUT/build.log 2>&1
echo "build rc $? at $(el)"
grep -m4 -A12 "error" $OUT/build.log | head -40
timeout 200 build-gpu/tests/executor/executor_gpu_tests --gtest_filter='-*Nvme*' > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $? at $(el)"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $OUT/gpu_tests.log | head -20
llmplan=$top/build-gpu/tools/llmplan
w=/tmp/staging && mkdir -p $w
$llmplan data prepare -o $w/tokens.bin $(find planner executor -name '*.cc' | sort) > /dev/null
pins="--model llama3.2-3b --gpus 1 --gpu h200-sxm-1gpu --seq 4096 --global-batch 8 --strategy full_shard --micro-batch 2 --grad-accum 4 --checkpoint-layers none --offload optimizer --loss-chunk 1024"
for v in slots_a unit_a slots_b unit_b slots_c unit_c; do
  [ $(($(date +%s) - t0)) -gt ${LLMPLAN_CALL_BUDGET_S:-480} ] && { echo "$v skipped (time)"; continue; }
  $llmplan estimate $pins --offload-staging ${v%_*} --json -o $w/$v.plan.json > $w/$v.estimate.json
  timeout 70 $llmplan run --plan $w/$v.plan.json --data $w/tokens.bin --steps 5 --no-final-weights --out $w/$v > $w/$v.log 2>&1
  echo "$v rc $? at $(el): $(grep -E '^throughput' $w/$v.log)"
  $llmplan compare --run $w/$v > $w/$v.compare.txt 2>&1
  rm -f $w/$v/trace.json
done
(cd $w && tar czf $OUT/staging3b.tgz slots_* unit_* *.log)
echo "done at $(el)"
