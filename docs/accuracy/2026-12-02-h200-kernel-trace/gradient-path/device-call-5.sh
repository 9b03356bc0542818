#!/usr/bin/env bash
# Device call 5 (nvidia-h200, carry .deps and out/old = git archive of 26f0b91):
# the widening kernel for the gradient shard (gradient_widen.cu) on top of call
# 4's change, against the build before both, alternating on the 1B plan; the
# GPU tests of the gradient path and kernel trace.
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
grep -m3 -B2 -A8 "error" $OUT/build_new.log | head -30
new=$top/build-gpu/tools/llmplan; old=$top/out/old/build-gpu/tools/llmplan
timeout 60 build-gpu/tests/executor/executor_gpu_tests --gtest_filter='ShardedGpuTest.*:KernelTraceGpu*:GpuTest.Bf16*:GpuTest.FusedAdamW*:GpuTest.Offloaded*' > $OUT/gpu_tests_widen.log 2>&1
echo "gpu tests rc $?"; grep -E "^\[  (PASSED|FAILED) |OK \]|FAILED \]" $OUT/gpu_tests_widen.log | tail -12
tokens=$top/build-gpu/compare_tokens.bin
$new data prepare -o $tokens $(find planner executor simulator tools -name '*.cc' -o -name '*.h' | sort) > /dev/null 2>&1
mkdir -p $OUT/runs
for run in old_1 new_1 old_2 new_2; do
  bin=$old; [ ${run%_*} = new ] && bin=$new
  extra=""; [ $run = new_2 ] && extra="--kernel-trace 8"
  timeout 80 $bin run --plan $plan --data $tokens --steps 13 --no-final-weights --out /tmp/run_$run $extra > $OUT/runs/$run.log 2>&1
  python3 -c "import json; s=json.load(open('/tmp/run_$run/summary.json')); print('$run', round(s['mean_tokens_per_s_per_gpu']), 'tok/s', round(s['final_loss'],4), round(s['peak_allocated_bytes']/2**30,2), 'GiB')" | tee -a $OUT/runs/table.txt
done
cp /tmp/run_new_2/kernel_profile.json $OUT/runs/new_kernel_profile.json
cp /tmp/run_new_2/summary.json $OUT/runs/new_summary.json
$new kernels /tmp/run_new_2/kernel_trace.json --top 12 > $OUT/runs/new_kernels.txt 2>&1; head -12 $OUT/runs/new_kernels.txt
gzip -c /tmp/run_new_2/kernel_trace.json > $OUT/runs/new_kernel_trace.json.gz
echo "all done at $(( $(date +%s) - t0 )) s"
cd $OUT && tar czf call5.tgz runs build_new.log build_old.log gpu_tests_widen.log && rm -rf runs
