#!/usr/bin/env bash
# Run THERE (the GPU machine): builds with gpu_build.sh, then runs the GPU
# tests (CTest label "gpu") and the CPU tests. When $OUT is set (the device
# tool's folder that comes back), the build log, the CTest logs and the JUnit
# reports are written under $OUT/gpu_test/. Exit status: non-zero if the build
# or any test failed.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${LLMPLAN_GPU_BUILD_DIR:-$root/build-gpu}"
export LLMPLAN_GPU_BUILD_DIR="$build"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
logs="${OUT:+$OUT/gpu_test}"
logs="${logs:-$build/gpu_test_logs}"
mkdir -p "$logs"

nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv >"$logs/nvidia-smi.csv" 2>&1 || true
if ! "$root/tools/device/gpu_build.sh" "$@" >"$logs/build.log" 2>&1; then
  tail -n 60 "$logs/build.log"
  echo "gpu_test: build failed (full log: $logs/build.log)" >&2
  exit 1
fi
cd "$build"
status=0
ctest -L gpu --output-on-failure --timeout 900 --output-junit "$logs/gpu.xml" 2>&1 | tee "$logs/ctest_gpu.log" || status=1
ctest -LE gpu --output-on-failure --timeout 900 -j "${LLMPLAN_TEST_JOBS:-4}" --output-junit "$logs/cpu.xml" \
  2>&1 | tee "$logs/ctest_cpu.log" || status=1
echo "gpu_test: $([ $status -eq 0 ] && echo passed || echo FAILED) (logs: $logs)"
exit $status
