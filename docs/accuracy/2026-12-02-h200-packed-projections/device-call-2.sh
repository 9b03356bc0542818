#!/usr/bin/env bash
# Device call 2 (nvidia-h200, carry .deps): the merged tree (packed
# projections, per-unit offload staging, the search's loss chunk). The GPU
# tests; `llmplan profile` of this machine (now also the CPU AdamW beside
# pinned copies); Llama-3.2-3B optimizer offload staged per unit and through
# the slots, alternating; then llmplan against FSDP2 eager and compiled on
# the plan `llmplan estimate` writes for the 1B pins (4,096-token loss chunks).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
top=$(pwd)
el() { echo "$(($(date +%s) - t0)) s"; }
LLMPLAN_JOBS=16 tools/device/gpu_build.sh -DLLMPLAN_BUILD_BENCHMARKS=OFF > $OUT/build.log 2>&1
echo "build rc $? at $(el)"
(cd build-gpu && timeout 150 ctest -L gpu -E Nvme --output-on-failure > $OUT/gpu_tests.log 2>&1; echo "gpu tests rc $? at $(el)")
grep -E "tests passed|Failed|\(Failed\)" $OUT/gpu_tests.log | tail -6
llmplan=$top/build-gpu/tools/llmplan
timeout 120 $llmplan profile -o $OUT/h200-sxm-1gpu.json --name h200-sxm-1gpu --base h200-sxm > $OUT/profile.log 2>&1
echo "profile rc $? at $(el)"
python3 -c "import json; p=json.load(open('$OUT/h200-sxm-1gpu.json')); print('cpu_adam alone', p['host']['cpu_adam_alone_params_per_s'], 'slowdown beside copies', p['host'].get('cpu_adam_slowdown_during_copies'))"
w=/tmp/staging && mkdir -p $w
$llmplan data prepare -o $w/tokens.bin $(find planner executor -name '*.cc') > /dev/null
pins="--model llama3.2-3b --gpus 1 --gpu h200-sxm-1gpu --seq 4096 --global-batch 8 --strategy full_shard --micro-batch 2 --grad-accum 4 --checkpoint-layers none --offload optimizer --loss-chunk 1024"
for v in unit_1 slots_1 unit_2 slots_2; do
  [ $(($(date +%s) - t0)) -gt 330 ] && { echo "$v skipped (time)"; continue; }
  $llmplan estimate $pins --offload-staging ${v%_*} --json -o $w/$v.plan.json > $w/$v.estimate.json
  timeout 70 $llmplan run --plan $w/$v.plan.json --data $w/tokens.bin --steps 5 --no-final-weights --out $w/$v > $w/$v.log 2>&1
  echo "$v rc $? at $(el): $(grep -E '^throughput|^host' $w/$v.log | tr '\n' ' ')"
  cp $w/$v.estimate.json $w/$v/estimate.json 2>/dev/null; rm -f $w/$v/trace.json
done
(cd $w && tar czf $OUT/staging3b.tgz unit_* slots_* *.log)
timeout $((590 - ($(date +%s) - t0))) tools/device/compare_fsdp2.sh docs/llama3.2-1b-untied-1xh200-planned.plan.json 13 --compile > $OUT/compare.log 2>&1
echo "compare rc $? at $(el)"
tail -12 $OUT/compare.log
(cd $OUT && tar czf compare.tgz compare && rm -rf compare)
