// ProcessGroups: the communicators one rank trains with, created at start-up.
//
// Ranks are laid out as world_size / S shard groups of S consecutive ranks
// (g*S .. (g+1)*S - 1: consecutive so a shard group stays inside a node's
// NVLink domain when S <= GPUs per node). Each rank belongs to
//   - the world group (all ranks),
//   - its shard group g = rank / S: all-gathers parameters and
//     reduce-scatters gradients of the shard it holds (FSDP / ZeRO-3) —
//     through two communicators over the same ranks, one for gathers and one
//     for reductions, so each has its own stream and a gather prefetched for
//     backward is not queued behind a reduce-scatter (the step program's
//     all-gather and reduce streams),
//   - its replica group r = rank % S: the ranks holding the same shard in
//     other shard groups, which all-reduce that shard's gradients (HSDP).
// S = world_size is plain fully-sharded training (replica groups of 1);
// S = 1 is plain data parallelism (shard groups of 1).
//
// Rendezvous is a c10d::TCPStore served by rank 0 at master_addr:master_port
// (an in-memory store when world_size is 1: no port needed); each group keys
// its own exchange under a c10d::PrefixStore.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "executor/comm/communicator.h"
#include "executor/comm/distributed_env.h"

namespace llmplan::executor {

struct ProcessGroups {
  DistributedEnv env;
  int shard_group_size = 1;     // S
  int shard_group_index = 0;    // rank / S
  int replica_group_index = 0;  // rank % S
  std::chrono::milliseconds timeout{0};
  at::Device device{at::kCPU};  // where the communicators' tensors live
  c10::intrusive_ptr<c10d::Store> store;  // kept alive: rank 0 serves it
  std::unique_ptr<Communicator> world;
  std::unique_ptr<Communicator> shard;         // size S, rank within it = rank % S: gathers
  std::unique_ptr<Communicator> shard_reduce;  // the same ranks: reduce-scatters, the norm's all-reduce
  std::unique_ptr<Communicator> replica;       // size world_size / S, rank within it = rank / S

  // world, shard, shard_reduce, replica (for the watchdog and for Abort).
  std::vector<Communicator*> All() const { return {world.get(), shard.get(), shard_reduce.get(), replica.get()}; }
};

// Connects this rank to all others and creates its four communicators:
// NCCL on `device` when use_nccl (needs a CUDA build), else Gloo on the CPU.
// Every rank must call it with the same shard_group_size and use_nccl.
// `timeout` bounds the rendezvous (the store's timeout) and, for Gloo, every
// later collective.
// REQUIRES: shard_group_size >= 1 and divides env.world_size (else UserError).
// Throws CollectiveError when peers do not arrive within `timeout` (naming
// master_addr:master_port) or a group cannot be formed.
ProcessGroups ConnectProcessGroups(const DistributedEnv& env, int shard_group_size, bool use_nccl, at::Device device,
                                   std::chrono::milliseconds timeout);

// A start-up check that every group really works, before any training: on
// each group an all-reduce where rank i contributes i + 1 (expect
// n(n+1)/2) and a broadcast from the last rank. A wrong answer or no answer
// within groups.timeout aborts all communicators and throws CollectiveError
// naming the rank and the group.
void HealthCheck(ProcessGroups& groups);

}  // namespace llmplan::executor
