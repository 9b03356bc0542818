#!/usr/bin/env bash
# Run THERE (the GPU machine, in the repository root copied by the device
# tool, with .deps carried: see tools/device/gather_deps.sh). Configures and
# builds llmplan with CUDA and NCCL into build-gpu/ with Ninja, against the
# LibTorch and NCCL of the machine's python torch wheel. Extra arguments go to
# CMake (e.g. -DCMAKE_BUILD_TYPE=RelWithDebInfo).
#   LLMPLAN_GPU_SOURCE_DIR  another source tree to build (an older commit for a
#                           side-by-side run, e.g. `git archive` into out/old);
#                           it uses this tree's .deps
#   LLMPLAN_GPU_BUILD_DIR   where (default: build-gpu/ in the source tree)
#   LLMPLAN_GPU_TARGETS     only these targets (e.g. "llmplan llmplan-executor")
#   LLMPLAN_JOBS            parallel jobs (default: every core)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
source_dir="$(cd "${LLMPLAN_GPU_SOURCE_DIR:-$root}" && pwd)"
build="${LLMPLAN_GPU_BUILD_DIR:-$source_dir/build-gpu}"
# NVLink multicast stays off on the lent GPU machines (a program that uses it
# can take the host's shared GPUs out of service): keep these set, also for
# every process the tests start.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# CMake's CUDA language support needs nvcc on PATH (or CUDACXX).
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

if [ ! -d "$root/.deps/googletest" ]; then
  echo "gpu_build: $root/.deps is missing: run tools/device/gather_deps.sh on the dev machine and carry .deps" >&2
  exit 2
fi
torch_prefix="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')"
nccl_root="$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])')"
# executor/CMakeLists.txt links $nccl_root/lib/libnccl.so.2 by full path
# (the wheel has no unversioned libnccl.so).
# cuBLASLt likewise: the copy libtorch_cuda.so itself loads (ResidualGemm
# calls it; a second build of it in the process would not match the wheel's cuBLAS).
torch_lib="$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')"
cublaslt="$(ldd "$torch_lib/libtorch_cuda.so" | awk '/libcublasLt/ && $3 ~ /^\// {print $3; exit}')"

cmake -S "$source_dir" -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release \
  -DLLMPLAN_DEPS_DIR="$root/.deps" \
  -DLLMPLAN_WITH_CUDA=ON \
  -DCMAKE_PREFIX_PATH="$torch_prefix" \
  -DLLMPLAN_NCCL_ROOT="$nccl_root" \
  ${cublaslt:+-DLLMPLAN_CUBLASLT_LIBRARY="$cublaslt"} \
  "$@"
# shellcheck disable=SC2086  # a list of target names
cmake --build "$build" -j "${LLMPLAN_JOBS:-$(nproc)}" ${LLMPLAN_GPU_TARGETS:+--target $LLMPLAN_GPU_TARGETS}
