#!/usr/bin/env bash
# Device call 4 (nvidia-h200, carry .deps and out/old = git archive of 26f0b91):
# the gradient path change (first reduction writes the fp32 shard, no zeroing
# pass; the clip factor applied inside AdamW) against the build before it, side
# by side on the 1B plan, alternating old/new twice; FSDP2 compiled once for the
# ratio; step 8 of the last new run traced; then the GPU tests of the new build.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
top=$(pwd)
plan=$top/docs/llama3.2-1b-untied-1xh200.plan.json
cp -r .deps out/old/
(LLMPLAN_JOBS=10 tools/device/gpu_build.sh > $OUT/build_new.log 2>&1; echo "new build rc $? at $(( $(date +%s) - t0 )) s" >> $OUT/build_new.log) &
(cd out/old && torch_prefix="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')" &&
 nccl_root="$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])')" &&
 cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLMPLAN_DEPS_DIR=$(pwd)/.deps -DLLMPLAN_WITH_CUDA=ON \
   -DLLMPLAN_BUILD_TESTS=OFF -DLLMPLAN_BUILD_BENCHMARKS=OFF \
   -DCMAKE_PREFIX_PATH="$torch_prefix" -DLLMPLAN_NCCL_ROOT="$nccl_root" > $OUT/build_old.log 2>&1 &&
 cmake --build build-gpu -j 6 --target llmplan llmplan-executor >> $OUT/build_old.log 2>&1; echo "old build rc $? at $(( $(date +%s) - t0 )) s" >> $OUT/build_old.log) &
wait
tail -1 $OUT/build_new.log; tail -1 $OUT/build_old.log
new=$top/build-gpu/tools/llmplan; old=$top/out/old/build-gpu/tools/llmplan
tokens=$top/build-gpu/compare_tokens.bin
$new data prepare -o $tokens $(find planner executor simulator tools -name '*.cc' -o -name '*.h' | sort) > /dev/null 2>&1
mkdir -p $OUT/runs
for i in 1 2; do
  for side in old new; do
    bin=$old; [ $side = new ] && bin=$new
    extra=""; [ $side = new ] && [ $i = 2 ] && extra="--kernel-trace 8"
    timeout 90 $bin run --plan $plan --data $tokens --steps 13 --no-final-weights --out /tmp/run_${side}_$i $extra > $OUT/runs/${side}_$i.log 2>&1
    python3 -c "import json,sys; s=json.load(open('/tmp/run_${side}_$i/summary.json')); print('$side $i', round(s['mean_tokens_per_s_per_gpu']), 'tok/s', round(s['final_loss'],4), round(s['peak_allocated_bytes']/2**30,2), 'GiB')" | tee -a $OUT/runs/table.txt
  done
done
cp /tmp/run_new_2/kernel_profile.json $OUT/runs/new_kernel_profile.json 2>/dev/null
$new kernels /tmp/run_new_2/kernel_trace.json --top 12 > $OUT/runs/new_kernels.txt 2>&1; head -14 $OUT/runs/new_kernels.txt
cp /tmp/run_new_2/summary.json $OUT/runs/new_summary.json; cp /tmp/run_old_2/summary.json $OUT/runs/old_summary.json
echo "runs done at $(( $(date +%s) - t0 )) s"
timeout 120 python3 tools/device/fsdp2_reference.py --plan $plan --steps 13 --warmup 3 --compile --out $OUT/runs/fsdp2_compiled.json > $OUT/runs/fsdp2_compiled.log 2>&1
python3 -c "import json; r=json.load(open('$OUT/runs/fsdp2_compiled.json')); print('fsdp2 compiled', round(r['tokens_per_s_per_gpu']), 'tok/s')" | tee -a $OUT/runs/table.txt
echo "fsdp2 done at $(( $(date +%s) - t0 )) s"
(cd build-gpu && timeout 150 ctest -L gpu -E Nvme --output-on-failure > $OUT/gpu_tests_gradient_path.log 2>&1; echo "ctest rc $?")
grep -E "tests passed|Failed|SEGFAULT" $OUT/gpu_tests_gradient_path.log | tail -4
echo "all done at $(( $(date +%s) - t0 )) s"
cd $OUT && tar czf call4.tgz runs build_new.log build_old.log gpu_tests_gradient_path.log && rm -rf runs
