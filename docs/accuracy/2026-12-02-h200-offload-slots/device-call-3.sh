#!/usr/bin/env bash
# device call 3 (one H200): the CLI only, of the working tree and of the
# commit before the staging slots (out/old), built side by side; then
# Llama-3.2-3B optimizer offload (full_shard, mb 2 x 4, seq 4096) old then
# new, 5 steps each, in one call. out/old: `git archive bef5c56 | tar x -C
# out/old` on the dev machine, carried with .deps. (As run on 2026-12-02 it
# configured both trees inline; it builds through gpu_build.sh now.)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=/usr/local/cuda/bin:$PATH
top=$(pwd)
t0=$(date +%s)
export LLMPLAN_GPU_TARGETS="llmplan llmplan-executor" LLMPLAN_JOBS=8
(tools/device/gpu_build.sh > $OUT/build.log 2>&1; echo "new build rc $? $(( $(date +%s) - t0 )) s" >> $OUT/build.log) &
(LLMPLAN_GPU_SOURCE_DIR=out/old tools/device/gpu_build.sh > $OUT/old_build.log 2>&1
 echo "old build rc $? $(( $(date +%s) - t0 )) s" >> $OUT/old_build.log) &
wait
tail -n 1 $OUT/build.log; tail -n 1 $OUT/old_build.log
w=$top/build-gpu/slots3b && rm -rf $w && mkdir -p $w
build-gpu/tools/llmplan data prepare -o $w/tokens.bin $(find planner executor -name '*.cc') > /dev/null
pins="--model llama3.2-3b --gpus 1 --gpu h200-sxm-1gpu --seq 4096 --global-batch 8 --strategy full_shard --micro-batch 2 --grad-accum 4 --checkpoint-layers none --offload optimizer"
for v in old new; do
  b=$top/build-gpu; [ $v = old ] && b=$top/out/old/build-gpu
  $b/tools/llmplan estimate $pins --json -o $w/$v.plan.json > $w/$v.estimate.json
  timeout 60 $b/tools/llmplan run --plan $w/$v.plan.json --data $w/tokens.bin --steps 5 --no-final-weights --out $w/$v > $w/$v.log 2>&1
  echo "$v rc $? at $(( $(date +%s) - t0 )) s: $(grep -E '^throughput|^host' $w/$v.log | tr '\n' ' ')"
  cp $w/$v.estimate.json $w/$v/estimate.json 2>/dev/null; rm -f $w/$v/trace.json
done
cd $w && tar czf $OUT/slots3b.tgz old new
