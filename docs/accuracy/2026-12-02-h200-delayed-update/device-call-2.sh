#!/usr/bin/env bash
# device call 2 (one H200): build; Llama-3-8B at global batch 16, the
# planner's choice (--offload params) and the delayed-update plan, one after
# the other, 5 steps each; then every GPU test (ctest -L gpu).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=/usr/local/cuda/bin:$PATH
top=$(pwd)
t0=$(date +%s)
LLMPLAN_JOBS=16 tools/device/gpu_build.sh > $OUT/build.log 2>&1; echo "build rc $? $(( $(date +%s) - t0 )) s"
w=$top/build-gpu/dpu8b && rm -rf $w && mkdir -p $w
build-gpu/tools/llmplan data prepare -o $w/tokens.bin $(find planner executor -name '*.cc') > /dev/null
for name in choice delayed; do
  flag=""; [ $name = delayed ] && flag="--strategy no_shard --micro-batch 16 --grad-accum 1 --checkpoint-layers 0-24 --offload optimizer --delayed-update"
  build-gpu/tools/llmplan estimate --model llama3-8b --gpus 1 --gpu h200-sxm-1gpu --seq 4096 --global-batch 16 $flag \
    --json -o $w/8b16-$name.plan.json > $w/8b16-$name.estimate.json
  timeout 150 build-gpu/tools/llmplan run --plan $w/8b16-$name.plan.json --data $w/tokens.bin --steps 5 --no-final-weights \
    --out $w/8b16-$name > $w/8b16-$name.log 2>&1; echo "8b16 $name rc $? at $(( $(date +%s) - t0 )) s"
  tail -2 $w/8b16-$name.log; cp $w/8b16-$name.estimate.json $w/8b16-$name.log $w/8b16-$name/ 2>/dev/null
  build-gpu/tools/llmplan compare --run $w/8b16-$name 2>&1 | sed -n 1,12p
done
cd $w && tar czf $OUT/runs.tgz 8b16-choice 8b16-delayed && cd $top
(cd build-gpu && timeout 280 ctest -L gpu --output-on-failure > $OUT/gpu_tests.log 2>&1; echo "ctest rc $?")
tail -15 $OUT/gpu_tests.log
echo "total $(( $(date +%s) - t0 )) s"
