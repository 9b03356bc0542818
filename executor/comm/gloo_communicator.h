// GlooCommunicator: the Communicator of one process group on the CPU, over
// LibTorch's c10d::ProcessGroupGloo (TCP between processes). It serves the
// CPU tests and CPU runs; GPU runs use NcclCommunicator.
//
// Gloo in LibTorch 1.13 has all-reduce, list-form all-gather and broadcast,
// but neither reduce-scatter nor a flat-buffer all-gather, so:
//   - ReduceScatter is an all-reduce of a copy of `full`, then this rank's
//     slice is copied out: it moves 2x the bytes of a real reduce-scatter
//     (every rank receives the whole sum, not 1/size of it) and holds one
//     extra copy of `full`. Fine on the CPU; never used on GPUs.
//   - AllGather passes size() views of `full` as the list outputs, so the
//     result lands in the caller's flat buffer.
// bf16 sums accumulate in fp32 (1.13's Gloo cannot sum bf16).
//
// Each collective runs on Gloo's worker threads; Wait() blocks until it has
// finished and makes the result visible (for ReduceScatter and bf16 sums it
// copies the result into the caller's tensor then). A collective that does
// not finish within the timeout fails in Wait() with a CollectiveError naming
// the operation, the group and the rank.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "executor/comm/communicator.h"

namespace llmplan::executor {

// True when this LibTorch build has Gloo process groups (see torch_compat.h).
bool GlooCommunicatorsAvailable();

// Connects the `size` processes that call this with the same `store` (each
// group needs its own key space: a c10d::PrefixStore) and distinct `rank`s.
// Blocks until all have arrived (the store's timeout bounds the wait).
// `name` names the group in errors, e.g. "shard group 0". Each later
// collective fails after `timeout`. The transport binds to 127.0.0.1 when
// `loopback` (all ranks on this host), else to the interface named by
// GLOO_SOCKET_IFNAME or the address this host's name resolves to.
// REQUIRES: 0 <= rank < size; every member calls collectives in the same order.
// Throws CollectiveError when the group cannot be formed.
std::unique_ptr<Communicator> MakeGlooCommunicator(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                   const std::string& name, std::chrono::milliseconds timeout,
                                                   bool loopback);

}  // namespace llmplan::executor
