#!/usr/bin/env bash
# device call 3 (one H200): the CLI only; the planner's choice for Llama-3-8B
# at global batch 16 (--offload params), now with each unit's master copied up
# while the previous one goes down, 5 steps.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=/usr/local/cuda/bin:$PATH
top=$(pwd)
t0=$(date +%s)
LLMPLAN_GPU_TARGETS="llmplan llmplan-executor" LLMPLAN_JOBS=16 tools/device/gpu_build.sh > $OUT/build.log 2>&1
echo "build rc $? $(( $(date +%s) - t0 )) s"
w=$top/build-gpu/dpu8b && rm -rf $w && mkdir -p $w
build-gpu/tools/llmplan data prepare -o $w/tokens.bin $(find planner executor -name '*.cc') > /dev/null
name=choice-pipelined
build-gpu/tools/llmplan estimate --model llama3-8b --gpus 1 --gpu h200-sxm-1gpu --seq 4096 --global-batch 16 \
  --json -o $w/8b16-$name.plan.json > $w/8b16-$name.estimate.json
timeout 130 build-gpu/tools/llmplan run --plan $w/8b16-$name.plan.json --data $w/tokens.bin --steps 5 --no-final-weights \
  --out $w/8b16-$name > $w/8b16-$name.log 2>&1; echo "8b16 $name rc $? at $(( $(date +%s) - t0 )) s"
tail -2 $w/8b16-$name.log; cp $w/8b16-$name.estimate.json $w/8b16-$name.log $w/8b16-$name/ 2>/dev/null
rm -f $w/8b16-$name/trace.json
build-gpu/tools/llmplan compare --run $w/8b16-$name 2>&1 | sed -n 1,40p
cd $w && tar czf $OUT/runs.tgz 8b16-$name
echo "total $(( $(date +%s) - t0 )) s"
