#!/usr/bin/env bash
# Device call 1 (nvidia-h200, carry .deps): on 2026-12-03 the search's plan
# for the untied Llama-3.2-1B on one H200 (seq 4096, 4 sequences a step)
# became no_shard — a resident bf16 copy that AdamW writes, no per-step
# gather casts — where it had been full_shard (predicted 65,761 against
# 64,983 tokens/s, 1.012x). LLMPLAN_PAIRS (default 3) pairs of 30 steps
# alternating the two plans, the last pair kernel-traced at step 20,
# `llmplan compare` on both;
# then the new plan against FSDP2 eager and compiled in the time left.
source tools/device/call_prelude.sh
LLMPLAN_JOBS=16 LLMPLAN_GPU_TARGETS="llmplan llmplan-executor" tools/device/gpu_build.sh -DLLMPLAN_BUILD_TESTS=OFF \
  -DLLMPLAN_BUILD_BENCHMARKS=OFF > $OUT/build.log 2>&1
echo "build rc $? at $(el)"
llmplan=$top/build-gpu/tools/llmplan
w=/tmp/ns && mkdir -p $w
full=$top/docs/llama3.2-1b-untied-1xh200-planned.plan.json
python3 -c "import json; j=json.load(open('$full')); json.dump(j.get('plan', j)['model'], open('$w/model.json', 'w'))"
$llmplan estimate --model $w/model.json --gpus 1 --gpu h200-sxm --seq 4096 --global-batch 4 -o $w/planned.plan.json \
  > $OUT/estimate.txt 2>&1
grep -E "strategy|tokens/s/GPU" $OUT/estimate.txt
tokens=/tmp/tokens.bin
$llmplan data prepare -o $tokens $(find planner executor simulator tools -name '*.cc' -o -name '*.h' | sort) > /dev/null 2>&1
summary() {
  python3 -c "import json; s=json.load(open('$w/$1/summary.json')); print('$1', round(s['mean_tokens_per_s_per_gpu']), 'tok/s', round(s['final_loss'],4), round(s['peak_allocated_bytes']/2**30,2), 'GiB alloc', round(s['peak_reserved_bytes']/2**30,2), 'GiB resv')" | tee -a $w/table.txt
}
pairs=${LLMPLAN_PAIRS:-3}
runs=""; for i in $(seq 1 $pairs); do runs="$runs full_$i none_$i"; done
for run in $runs; do
  plan=$full; [ ${run%_*} = none ] && plan=$w/planned.plan.json
  extra=""; [ ${run#*_} = $pairs ] && extra="--kernel-trace 20"
  timeout 90 $llmplan run --plan $plan --data $tokens --steps 30 --no-final-weights --out $w/$run $extra > $w/$run.log 2>&1
  summary $run
done
echo "a/b done at $(el)"
for v in full_$pairs none_$pairs; do
  $llmplan kernels $w/$v/kernel_trace.json --top 12 > $w/${v}_kernels.txt 2>&1
  $llmplan compare --run $w/$v > $w/${v}_compare.txt 2>&1
done
head -32 $w/none_${pairs}_compare.txt
(cd $w && gzip -f full_$pairs/kernel_trace.json none_$pairs/kernel_trace.json; rm -f */trace.json; tar czf $OUT/runs.tgz table.txt *.log *.txt planned.plan.json $runs)
left=$((t0 + ${LLMPLAN_CALL_BUDGET_S:-590} - $(date +%s)))
echo "runs done at $(el), $left s left"
if [ $left -gt 200 ]; then
  LLMPLAN_GPU_TARGETS="llmplan llmplan-executor" timeout $((left - 10)) tools/device/compare_fsdp2.sh $w/planned.plan.json 13 --compile > $OUT/compare_fsdp2.log 2>&1
  echo "compare rc $? at $(el)"; tail -6 $OUT/compare_fsdp2.log
fi
