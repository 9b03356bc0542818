#!/usr/bin/env bash
# device call 3: build the working tree, run the gpu-labelled tests and the kernel tests
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
t0=$(date +%s)
LLMPLAN_JOBS=16 tools/device/gpu_build.sh > $OUT/build.log 2>&1; echo "build rc $? in $(( $(date +%s) - t0 )) s"
(cd build-gpu && LLMPLAN_NVME_DIR=/tmp/nvme-state timeout 330 ctest -L gpu --output-on-failure > $OUT/gpu_tests.log 2>&1; echo "gpu ctest rc $? at $(( $(date +%s) - t0 )) s")
grep -E "tests passed|Failed|\*\*\*|Not Run|Skipped" $OUT/gpu_tests.log | head -20
grep -E "offload on CUDA" $OUT/gpu_tests.log
timeout 90 build-gpu/tests/executor/executor_gpu_tests --gtest_filter='BlockOps*:ChunkedCrossEntropyGpu*' > $OUT/kernels.log 2>&1; echo "kernels rc $? at $(( $(date +%s) - t0 )) s"; tail -3 $OUT/kernels.log
