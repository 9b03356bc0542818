#!/usr/bin/env bash
# device call 1: build new + old, re-record a12, offload table new vs old
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=/usr/local/cuda/bin:$PATH
top=$(pwd)
cp -r .deps out/snap/ && cp -r .deps out/old/
t0=$(date +%s)
(cd out/snap && LLMPLAN_JOBS=16 tools/device/gpu_build.sh > $OUT/build.log 2>&1; echo "new build rc $? $(( $(date +%s) - t0 )) s" >> $OUT/build.log) &
(cd out/old && torch_prefix="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')" &&
 nccl_root="$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])')" &&
 cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLMPLAN_DEPS_DIR=$(pwd)/.deps -DLLMPLAN_WITH_CUDA=ON \
   -DCMAKE_PREFIX_PATH="$torch_prefix" -DLLMPLAN_NCCL_ROOT="$nccl_root" > $OUT/old_build.log 2>&1 &&
 cmake --build build-gpu -j 16 --target llmplan llmplan-executor >> $OUT/old_build.log 2>&1; echo "old build rc $? $(( $(date +%s) - t0 )) s" >> $OUT/old_build.log) &
wait
tail -1 $OUT/build.log; tail -1 $OUT/old_build.log
cd $top/out/snap
timeout 100 tools/device/accuracy.sh a12 > $OUT/a12.txt 2>&1; echo "a12 rc $? at $(( $(date +%s) - t0 )) s"; tail -5 $OUT/a12.txt
p="--strategy full_shard --micro-batch 2 --grad-accum 4 --checkpoint-layers none --offload"
mkdir -p $OUT/new $OUT/old
LLMPLAN_CHOICE_STEPS=5 timeout 230 tools/device/plan_choice.sh $OUT/new llama3.2-3b 1 4096 8 h200-sxm-1gpu "$p optimizer" "$p optimizer+params" "$p none" > /dev/null 2>&1
echo "new at $(( $(date +%s) - t0 )) s"; cat $OUT/new/plan_choice.txt
LLMPLAN_GPU_BUILD_DIR=$top/out/old/build-gpu LLMPLAN_CHOICE_STEPS=5 timeout 120 tools/device/plan_choice.sh $OUT/old llama3.2-3b 1 4096 8 h200-sxm-1gpu "$p optimizer" > /dev/null 2>&1
echo "old at $(( $(date +%s) - t0 )) s"; cat $OUT/old/plan_choice.txt
