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
# The two halves run side by side: the GPU tests hold the GPU and half the
# cores (the host AdamW of the offloaded runs is their long pole), the CPU
# tests (one or more CPU ranks each) the other half, one OpenMP thread each.
# Left unset, every test process and every rank starts one thread per core:
# a dozen tests at once put ~200 spinning threads on 16 cores and the CPU
# half ran 20-80x slower. On one H200 (16 cores): build ~190 s, CPU half
# ~45 s, GPU half ~275 s with four threads.
cores=$(nproc)
cpu_jobs="${LLMPLAN_TEST_JOBS:-$(( cores > 8 ? cores / 2 : 2 ))}"
OMP_NUM_THREADS=$(( cores > 8 ? cores / 2 : 1 )) ctest -L gpu --output-on-failure --timeout 600 \
  --output-junit "$logs/gpu.xml" >"$logs/ctest_gpu.log" 2>&1 &
gpu_pid=$!
OMP_NUM_THREADS=1 ctest -LE gpu --output-on-failure --timeout 600 -j "$cpu_jobs" --output-junit "$logs/cpu.xml" \
  >"$logs/ctest_cpu.log" 2>&1 &
cpu_pid=$!
status=0
wait $gpu_pid || status=1
wait $cpu_pid || status=1
for half in gpu cpu; do
  echo "== $half tests: $(grep -E 'tests passed|tests failed' "$logs/ctest_$half.log" | tail -n 1)"
  sed -n '/The following tests/,$p' "$logs/ctest_$half.log"
  grep -E '\*\*\*Skipped|Not Run' "$logs/ctest_$half.log" | sed 's/^/  skipped: /' | head -n 40
done
echo "gpu_test: $([ $status -eq 0 ] && echo passed || echo FAILED) (logs: $logs)"
exit $status
