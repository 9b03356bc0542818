// HealthAllReduce: one all-reduce with a known answer on every local GPU, the
// way training runs them (NCCL, one communicator per GPU from
// ncclCommInitAll, one group call), checked element by element and timed: a
// broken link, a wrong NCCL transport or a misconfigured environment shows
// as a wrong sum or a bus bandwidth far below what the link carries.
//
// This header needs no CUDA; RunHealthAllReduce exists only in CUDA builds
// (health_all_reduce_cuda.cc).
#pragma once

#include <string>
#include <vector>

namespace llmplan::executor {

struct HealthAllReduce {
  int gpus = 0;
  double bytes = 0;           // fp32 buffer per GPU
  bool sums_correct = false;  // every element of every GPU's result equals 1 + 2 + ... + gpus
  std::string mismatch;       // the first wrong element, when not
  double seconds = 0;         // per all-reduce, mean of the timed ones
  double bus_bytes_per_s = 0;  // NCCL's bus bandwidth: bytes * 2(n-1)/n / seconds; 0 for one GPU
  std::string error;          // a failed CUDA or NCCL call (nothing else is then valid)
};

#ifdef LLMPLAN_WITH_CUDA
// GPU i contributes i + 1 in every element of a `bytes` fp32 buffer; one
// checked all-reduce, then `iterations` timed. Sets NCCL_NVLS_ENABLE=0 first
// unless the environment sets it. Never throws: a failure is `error`.
// REQUIRES: devices distinct and visible, non-empty; bytes >= 4; iterations >= 1.
HealthAllReduce RunHealthAllReduce(const std::vector<int>& devices, double bytes, int iterations);
#endif

}  // namespace llmplan::executor
