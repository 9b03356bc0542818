// PeerLiveness: which ranks of a job are still alive, told by heartbeats in
// the rendezvous store. When a collective fails because a peer's connection
// closed (its process killed on another node), a rank sees only an address,
// and under torchrun or srun no launcher of llmplan's names the process that
// died. So every rank counts its own key up in the store twice a second, from
// a thread of its own through a store connection of its own; after a failure,
// Culprits() reads every rank's count twice, kGrace apart, and names the
// ranks whose count did not move, except those that saw the failure too
// (each rank that calls Culprits says so first: its own exit is not a cause).
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "executor/comm/distributed_env.h"

namespace llmplan::executor {

class PeerLiveness {
 public:
  static constexpr std::chrono::milliseconds kInterval{500};
  static constexpr std::chrono::milliseconds kGrace{2500};

  // Connects to rank 0's store (env.master_addr:master_port) and starts
  // beating. REQUIRES: env.world_size > 1 and the store is up (after
  // ConnectProcessGroups). Throws CollectiveError when it cannot connect.
  PeerLiveness(const DistributedEnv& env, std::chrono::milliseconds timeout);
  ~PeerLiveness();  // stops the thread
  PeerLiveness(const PeerLiveness&) = delete;
  PeerLiveness& operator=(const PeerLiveness&) = delete;

  // After a collective failed: "rank 3 (node 1, pid of its own) stopped: no
  // heartbeat for 2.5 s" for each rank that stopped, "rank 0 (node 0), which
  // serves the rendezvous, is gone" when the store cannot be read, or "" when
  // every rank is alive. Blocks about kGrace (rank 0, which serves the store,
  // twice that: the others read it at about the same time).
  std::string Culprits();

 private:
  std::string Key(int rank) const { return "llmplan/alive/" + std::to_string(rank); }
  std::string WitnessKey(int rank) const { return "llmplan/saw_failure/" + std::to_string(rank); }

  DistributedEnv env_;
  c10::intrusive_ptr<c10d::Store> store_;  // this object's own connection
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;  // wakes the beat at once when the run ends
  bool stop_ = false;
  std::thread beat_;
};

}  // namespace llmplan::executor
