#!/usr/bin/env bash
# device call 1 (one H200): build the working tree; the delayed-update GPU
# tests; Llama-3-8B at global batch 16 with its optimizer-offload plan
# (no_shard, micro-batch 16 x 1, blocks 0-24 checkpointed) without and with
# --delayed-update, one after the other, 5 steps each.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=/usr/local/cuda/bin:$PATH
top=$(pwd)
t0=$(date +%s)
LLMPLAN_JOBS=16 tools/device/gpu_build.sh > $OUT/build.log 2>&1; echo "build rc $? $(( $(date +%s) - t0 )) s"
build-gpu/tests/executor/executor_gpu_tests --gtest_filter='GpuTest.DelayedUpdate*:GpuTest.Offloaded*' \
  > $OUT/gpu_tests.log 2>&1; echo "gpu tests rc $? at $(( $(date +%s) - t0 )) s"; grep -E "delayed|offload on|PASSED|FAILED" $OUT/gpu_tests.log
w=$top/build-gpu/dpu8b && rm -rf $w && mkdir -p $w
build-gpu/tools/llmplan data prepare -o $w/tokens.bin $(find planner executor -name '*.cc') > /dev/null
pins="--strategy no_shard --micro-batch 16 --grad-accum 1 --checkpoint-layers 0-24 --offload optimizer"
for name in undelayed delayed; do
  flag=""; [ $name = delayed ] && flag="--delayed-update"
  build-gpu/tools/llmplan estimate --model llama3-8b --gpus 1 --gpu h200-sxm-1gpu --seq 4096 --global-batch 16 $pins $flag \
    --json -o $w/8b16-$name.plan.json > $w/8b16-$name.estimate.json
  timeout 170 build-gpu/tools/llmplan run --plan $w/8b16-$name.plan.json --data $w/tokens.bin --steps 5 --no-final-weights \
    --out $w/8b16-$name > $w/8b16-$name.log 2>&1; echo "8b16 $name rc $? at $(( $(date +%s) - t0 )) s"
  tail -3 $w/8b16-$name.log; cp $w/8b16-$name.estimate.json $w/8b16-$name.log $w/8b16-$name/ 2>/dev/null
  build-gpu/tools/llmplan compare --run $w/8b16-$name 2>&1 | head -30
done
cd $w && tar czf $OUT/runs.tgz 8b16-undelayed 8b16-delayed
echo "total $(( $(date +%s) - t0 )) s"
