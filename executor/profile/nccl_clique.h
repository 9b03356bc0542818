// Clique and LaunchCollective: NCCL among the GPUs of this host from one
// process, as the profile's collective measurements drive it
// (nccl_collectives_cuda.cc: the curves; contention_cuda.cc: collectives
// beside compute). One communicator per GPU from ncclCommInitAll; one group
// call launches an op on every GPU, so one thread can drive them all without
// the launches of one GPU waiting for another's.
//
// Included only by *_cuda.cc files (it needs nccl.h and the CUDA runtime).
#pragma once

#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <nccl.h>

#include "executor/hardware/cuda_calls.h"
#include "planner/hardware_profile.h"  // CollectiveOp

namespace llmplan::executor {

// One communicator per GPU of the clique, destroyed together.
class Clique {
 public:
  // REQUIRES: devices distinct and visible. Throws std::runtime_error.
  explicit Clique(const std::vector<int>& devices) : comms_(devices.size(), nullptr) {
    cuda::Check(ncclCommInitAll(comms_.data(), static_cast<int>(devices.size()), devices.data()),
                "NCCL among " + std::to_string(devices.size()) + " GPUs", "ncclCommInitAll");
  }
  ~Clique() {
    for (ncclComm_t comm : comms_)
      if (comm != nullptr) ncclCommDestroy(comm);
  }
  Clique(const Clique&) = delete;
  Clique& operator=(const Clique&) = delete;
  ncclComm_t operator[](size_t i) const { return comms_[i]; }
  size_t size() const { return comms_.size(); }

 private:
  std::vector<ncclComm_t> comms_;
};

// One group call of `op` on every GPU i of `clique`, from send[i] into
// recv[i] on streams[i], over bf16 buffers: `share` elements per GPU
// (all-gather's input, reduce-scatter's output), share x size in the full
// buffer (all-gather's output, reduce-scatter's input, all-reduce's both).
// REQUIRES: send, recv and streams hold one entry per GPU of the clique, each
// buffer at least share x size x 2 bytes. Throws std::runtime_error naming `what`.
inline void LaunchCollective(const Clique& clique, CollectiveOp op, size_t share, const std::vector<void*>& send,
                             const std::vector<void*>& recv, const std::vector<cudaStream_t>& streams,
                             const std::string& what) {
  const size_t n = clique.size();
  cuda::Check(ncclGroupStart(), what, "ncclGroupStart");
  for (size_t i = 0; i < n; ++i) {
    switch (op) {
      case CollectiveOp::kAllGather:
        cuda::Check(ncclAllGather(send[i], recv[i], share, ncclBfloat16, clique[i], streams[i]), what, "ncclAllGather");
        break;
      case CollectiveOp::kReduceScatter:
        cuda::Check(ncclReduceScatter(send[i], recv[i], share, ncclBfloat16, ncclSum, clique[i], streams[i]), what,
                    "ncclReduceScatter");
        break;
      case CollectiveOp::kAllReduce:
        cuda::Check(ncclAllReduce(send[i], recv[i], share * n, ncclBfloat16, ncclSum, clique[i], streams[i]), what,
                    "ncclAllReduce");
        break;
    }
  }
  cuda::Check(ncclGroupEnd(), what, "ncclGroupEnd");
}

}  // namespace llmplan::executor
