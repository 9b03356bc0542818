#!/usr/bin/env bash
# device call 1 (one H200): build the working tree and the commit before it
# (out/old, per-unit staging) side by side; re-record the 1-GPU offload rows
# a12 and a13 of the accuracy suite; Llama-3.2-3B optimizer offload, old and
# new, one after the other; Llama-3-8B at global batch 16, the planner's
# choice and its optimizer-offload plan, which the 128 GiB host could not
# hold before.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=/usr/local/cuda/bin:$PATH
top=$(pwd)
cp -r .deps out/old/
t0=$(date +%s)
(LLMPLAN_JOBS=16 tools/device/gpu_build.sh > $OUT/build.log 2>&1; echo "new build rc $? $(( $(date +%s) - t0 )) s" >> $OUT/build.log) &
(cd out/old && torch_prefix="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')" &&
 nccl_root="$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])')" &&
 cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLMPLAN_DEPS_DIR=$(pwd)/.deps -DLLMPLAN_WITH_CUDA=ON \
   -DCMAKE_PREFIX_PATH="$torch_prefix" -DLLMPLAN_NCCL_ROOT="$nccl_root" > $OUT/old_build.log 2>&1 &&
 cmake --build build-gpu -j 16 --target llmplan llmplan-executor >> $OUT/old_build.log 2>&1; echo "old build rc $? $(( $(date +%s) - t0 )) s" >> $OUT/old_build.log) &
wait
tail -1 $OUT/build.log; tail -1 $OUT/old_build.log
timeout 150 tools/device/accuracy.sh a12 a13 > $OUT/a12-a13.txt 2>&1; echo "a12 a13 rc $? at $(( $(date +%s) - t0 )) s"; tail -6 $OUT/a12-a13.txt
p="--strategy full_shard --micro-batch 2 --grad-accum 4 --checkpoint-layers none --offload"
mkdir -p $OUT/new3b $OUT/old3b
LLMPLAN_CHOICE_STEPS=5 timeout 100 tools/device/plan_choice.sh $OUT/new3b llama3.2-3b 1 4096 8 h200-sxm-1gpu "$p optimizer" > /dev/null 2>&1
echo "new 3b at $(( $(date +%s) - t0 )) s"; cat $OUT/new3b/plan_choice.txt
LLMPLAN_GPU_BUILD_DIR=$top/out/old/build-gpu LLMPLAN_CHOICE_STEPS=5 timeout 100 tools/device/plan_choice.sh $OUT/old3b llama3.2-3b 1 4096 8 h200-sxm-1gpu "$p optimizer" > /dev/null 2>&1
echo "old 3b at $(( $(date +%s) - t0 )) s"; cat $OUT/old3b/plan_choice.txt
# Llama-3-8B, global batch 16: the planner's choice (offload params) and its
# best optimizer-offload plan, 5 steps each.
w=$top/build-gpu/offload8b && rm -rf $w && mkdir -p $w
build-gpu/tools/llmplan data prepare -o $w/tokens.bin $(find planner executor -name '*.cc') > /dev/null
for name in choice optimizer; do
  pin=""; [ $name = optimizer ] && pin="--offload optimizer"
  build-gpu/tools/llmplan estimate --model llama3-8b --gpus 1 --gpu h200-sxm-1gpu --seq 4096 --global-batch 16 $pin \
    --json -o $w/8b16-$name.plan.json > $w/8b16-$name.estimate.json
  timeout 150 build-gpu/tools/llmplan run --plan $w/8b16-$name.plan.json --data $w/tokens.bin --steps 5 --no-final-weights \
    --out $w/8b16-$name > $w/8b16-$name.log 2>&1; echo "8b16 $name rc $? at $(( $(date +%s) - t0 )) s"
  tail -4 $w/8b16-$name.log; cp $w/8b16-$name.estimate.json $w/8b16-$name/ 2>/dev/null
done
free -g | head -2
cd $OUT && cp -r $w/8b16-choice $w/8b16-optimizer . && tar czf runs.tgz new3b old3b 8b16-choice 8b16-optimizer && rm -rf new3b old3b 8b16-*
cp $top/build-gpu/accuracy/accuracy.tar.gz $OUT/ 2>/dev/null
echo "total $(( $(date +%s) - t0 )) s"
