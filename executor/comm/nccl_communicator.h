// NcclCommunicator: the Communicator of one process group on GPUs, through
// NCCL's C API (stable across NCCL and LibTorch versions, unlike
// ProcessGroupNCCL's C++ API).
//
// One dedicated high-priority CUDA stream per communicator: a collective's
// kernels then never queue behind compute kernels, and overlap with them
// (all-gather of unit i+1 while unit i computes). Ordering uses events only,
// so the host never blocks on the hot path:
//   issue:  record an event on the caller's current stream; the NCCL stream
//           waits on it (the input is ready); launch the collective; record
//           the "done" event on the NCCL stream. No recordStream: the caller
//           keeps the tensors alive until its stream has waited (below), so
//           their blocks are reused in that stream's order.
//   Wait(): the caller's current stream waits on "done" (no host sync).
//   Done(): cudaEventQuery("done") (never blocks; the watchdog polls it).
//
// The communicator is created non-blocking (ncclConfig_t blocking = 0), so
// Abort() (ncclCommAbort) can interrupt it at any point, init included.
// NVLink multicast (NVLS) is switched off (NCCL_NVLS_ENABLE=0) unless the
// environment already sets it: the lent machines require it off, and NVLS
// buffers cost GPU memory.
//
// This header needs neither CUDA nor NCCL; the definitions exist only in CUDA
// builds (nccl_communicator_cuda.cc, LLMPLAN_WITH_CUDA).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "executor/comm/communicator.h"

namespace llmplan::executor {

#ifdef LLMPLAN_WITH_CUDA
// Connects the `size` processes calling this with the same `store` (a
// PrefixStore per group): rank 0 creates the NCCL unique id and sets it in the
// store; the others get it (waiting up to the store's timeout). Initialisation
// that does not finish within `timeout` is aborted.
// REQUIRES: device is a CUDA device; 0 <= rank < size; every member calls
// collectives in the same order. Throws CollectiveError on failure.
std::unique_ptr<Communicator> MakeNcclCommunicator(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                   at::Device device, const std::string& name,
                                                   std::chrono::milliseconds timeout);
#endif

}  // namespace llmplan::executor
