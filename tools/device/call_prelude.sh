# Sourced THERE at the top of a one-off device-call script (`source tools/device/call_prelude.sh`):
# what every call sets first. NVLink multicast stays off on those machines
# (README.md here); nvcc on the PATH for the build; t0 and el() time the call's
# parts ("build rc 0 at 140 s"); top is the repository root the call runs in.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Predictions here are the shipped profiles': no calibration store (feedback/calibration_store.h).
export LLMPLAN_CALIBRATION_DIR=off
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
top=$(pwd)
el() { echo "$(($(date +%s) - t0)) s"; }
