#!/usr/bin/env bash
# device call 2 (one H200): build the working tree and HEAD before the staging
# slots (out/old) side by side; the gpu-labelled tests; Llama-3.2-3B optimizer
# offload (full_shard, mb 2 x 4, seq 4096), old then new then old, 5 steps each.
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
(cd build-gpu && LLMPLAN_NVME_DIR=/tmp/nvme-state timeout 300 ctest -L gpu --output-on-failure > $OUT/gpu_tests.log 2>&1; echo "gpu ctest rc $? at $(( $(date +%s) - t0 )) s")
grep -E "tests passed|Failed|\*\*\*|Not Run" $OUT/gpu_tests.log | head -20
w=$top/build-gpu/slots3b && rm -rf $w && mkdir -p $w
build-gpu/tools/llmplan data prepare -o $w/tokens.bin $(find planner executor -name '*.cc') > /dev/null
pins="--model llama3.2-3b --gpus 1 --gpu h200-sxm-1gpu --seq 4096 --global-batch 8 --strategy full_shard --micro-batch 2 --grad-accum 4 --checkpoint-layers none --offload optimizer"
for v in old new old2 new2; do
  b=$top/build-gpu; case $v in old*) b=$top/out/old/build-gpu;; esac
  $b/tools/llmplan estimate $pins --json -o $w/$v.plan.json > $w/$v.estimate.json
  timeout 80 $b/tools/llmplan run --plan $w/$v.plan.json --data $w/tokens.bin --steps 5 --no-final-weights --out $w/$v > $w/$v.log 2>&1
  echo "$v rc $? at $(( $(date +%s) - t0 )) s: $(grep -E '^throughput|^host' $w/$v.log | tr '\n' ' ')"
  cp $w/$v.estimate.json $w/$v/ 2>/dev/null; rm -f $w/$v/trace.json
done
cd $w && tar czf $OUT/slots3b.tgz old new old2 new2
echo "total $(( $(date +%s) - t0 )) s"
