#!/usr/bin/env bash
# Device call 1 (nvidia-h200, .deps carried): build; llmplan and PyTorch FSDP2
# (eager, compiled) side by side on the 1B plan with step 8 of 13 traced by
# each stack's profiler; then both stacks from the same initial weights on the
# same tokens, 20 steps. Everything is packed into $OUT/call1.tgz,
# the traces into call1-traces.tar.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
plan=docs/llama3.2-1b-untied-1xh200.plan.json
LLMPLAN_JOBS=16 tools/device/gpu_build.sh > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
echo "build done at $(( $(date +%s) - t0 )) s"
LLMPLAN_COMPARE_KERNEL_TRACE=8 timeout 300 tools/device/compare_fsdp2.sh $plan 13 --compile > $OUT/compare.log 2>&1
echo "compare rc $? at $(( $(date +%s) - t0 )) s"
tail -8 $OUT/compare.log
timeout 170 tools/device/loss_agreement.sh $plan 20 > $OUT/agreement.log 2>&1
echo "agreement rc $? at $(( $(date +%s) - t0 )) s"
tail -4 $OUT/agreement.log
cd $OUT
for t in compare/*kernel_trace.json compare/llmplan_run/kernel_trace.json; do [ -f "$t" ] && gzip -f "$t"; done
ls -la compare compare/llmplan_run > listing.txt 2>&1
tar czf call1.tgz --exclude='*.safetensors' --exclude='*kernel_trace.json.gz' compare agreement listing.txt compare.log agreement.log 2>/dev/null
tar cf call1-traces.tar $(find compare -name '*kernel_trace.json.gz') 2>/dev/null
rm -rf compare agreement
ls -la $OUT
