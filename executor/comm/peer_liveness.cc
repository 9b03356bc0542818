#include "executor/comm/peer_liveness.h"

#include <mutex>
#include <vector>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "executor/comm/communicator.h"

namespace llmplan::executor {

namespace {

// One store connection, one thread at a time: the beat and Culprits share it.
std::mutex& StoreMutex() {
  static std::mutex mu;
  return mu;
}

}  // namespace

PeerLiveness::PeerLiveness(const DistributedEnv& env, std::chrono::milliseconds timeout) : env_(env) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(env.master_port);
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = timeout;
  try {
    store_ = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
    store_->add(Key(env.rank), 1);
  } catch (const std::exception& e) {
    throw CollectiveError("rank " + std::to_string(env.rank) + ": cannot reach the rendezvous store for heartbeats: " +
                          std::string(e.what()).substr(0, 200));
  }
  beat_ = std::thread([this] {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(stop_mu_);
        if (stop_cv_.wait_for(lock, kInterval, [this] { return stop_; })) return;
      }
      try {
        std::lock_guard<std::mutex> lock(StoreMutex());
        store_->add(Key(env_.rank), 1);
      } catch (const std::exception&) {
        return;  // rank 0's store is gone: the job is ending
      }
    }
  });
}

PeerLiveness::~PeerLiveness() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (beat_.joinable()) beat_.join();
}

std::string PeerLiveness::Culprits() {
  const int n = env_.world_size;
  auto counts = [&](std::vector<int64_t>& out) {
    std::lock_guard<std::mutex> lock(StoreMutex());
    out.assign(static_cast<size_t>(n), 0);
    for (int r = 0; r < n; ++r) out[static_cast<size_t>(r)] = store_->add(Key(r), 0);
  };
  const int per_node = std::max(1, env_.local_world_size);
  auto name = [&](int r) { return "rank " + std::to_string(r) + " (node " + std::to_string(r / per_node) + ")"; };
  std::vector<int64_t> before, after, witnesses(static_cast<size_t>(n), 0);
  try {
    {
      // This rank saw the failure: when it stops beating, it is not the cause.
      std::lock_guard<std::mutex> lock(StoreMutex());
      store_->add(WitnessKey(env_.rank), 1);
    }
    counts(before);
    std::this_thread::sleep_for(kGrace);
    counts(after);
    std::lock_guard<std::mutex> lock(StoreMutex());
    for (int r = 0; r < n; ++r) witnesses[static_cast<size_t>(r)] = store_->add(WitnessKey(r), 0);
  } catch (const std::exception&) {
    return env_.rank == 0 ? "" : name(0) + ", which serves the rendezvous, is gone";
  }
  // Rank 0 serves the store: it stays until the other ranks, which noticed
  // the failure at about the same time, have read their second counts.
  if (env_.rank == 0) std::this_thread::sleep_for(kGrace);
  std::string out;
  for (int r = 0; r < n; ++r) {
    const auto i = static_cast<size_t>(r);
    if (r == env_.rank || after[i] > before[i] || witnesses[i] > 0) continue;
    out += (out.empty() ? "" : "; ") + name(r) + " stopped: no heartbeat for " +
           std::to_string(kGrace.count() / 1000.0).substr(0, 3) + " s";
  }
  return out;
}

}  // namespace llmplan::executor
