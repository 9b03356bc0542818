// ProcessGroups: rendezvous, communicators, start-up health check
// (see process_groups.h).
#include "executor/comm/process_groups.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "executor/comm/gloo_communicator.h"
#include "executor/comm/nccl_communicator.h"
#include "base/user_error.h"

namespace llmplan::executor {
namespace {

std::string FirstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

std::string Seconds(std::chrono::milliseconds t) {
  const double s = static_cast<double>(t.count()) / 1000.0;
  char text[32];
  std::snprintf(text, sizeof(text), t.count() % 1000 == 0 ? "%.0f" : "%.1f", s);
  return text;
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

c10::intrusive_ptr<c10d::Store> Rendezvous(const DistributedEnv& env, std::chrono::milliseconds timeout) {
  // One process needs no network: an in-memory store, so single-process runs
  // (and tests run in parallel) never compete for MASTER_PORT.
  if (env.world_size == 1) return c10::make_intrusive<c10d::HashStore>();
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(env.master_port);
  options.isServer = env.rank == 0;
  options.numWorkers = static_cast<std::size_t>(env.world_size);
  options.waitWorkers = true;  // rank 0 returns only once every rank has connected
  options.timeout = timeout;
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  c10::intrusive_ptr<c10d::Store> store;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
  } catch (const std::exception& e) {
    const std::string role =
        env.rank == 0 ? "serving the rendezvous at " + where + ", not all " + std::to_string(env.world_size) +
                            " ranks arrived within " + Seconds(timeout) + " s"
                      : "could not reach rank 0's rendezvous at " + where + " within " + Seconds(timeout) + " s";
    throw CollectiveError("rank " + std::to_string(env.rank) + ": " + role +
                          " (are all ranks started, with the same MASTER_ADDR and MASTER_PORT?): " +
                          FirstLine(e.what()));
  }
  // Count arrivals ourselves: some TCPStore versions let the server go on
  // after its wait for workers times out, and the failure would surface later
  // as an anonymous store timeout inside group creation.
  const std::string arrived_key = "llmplan/ranks_arrived";
  int64_t arrived = store->add(arrived_key, 1);
  while (arrived < env.world_size) {
    if (std::chrono::steady_clock::now() >= deadline) {
      throw CollectiveError("rank " + std::to_string(env.rank) + ": only " + std::to_string(arrived) + " of " +
                            std::to_string(env.world_size) + " ranks reached the rendezvous at " + where + " within " +
                            Seconds(timeout) + " s (are all ranks started, with the same MASTER_ADDR and MASTER_PORT?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    arrived = store->add(arrived_key, 0);
  }
  return store;
}

std::unique_ptr<Communicator> Connect(const c10::intrusive_ptr<c10d::Store>& store, const std::string& key,
                                      const std::string& name, int rank, int size, bool use_nccl, at::Device device,
                                      std::chrono::milliseconds timeout, bool loopback) {
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(key, store);
  if (use_nccl) {
#ifdef LLMPLAN_WITH_CUDA
    return MakeNcclCommunicator(prefixed, rank, size, device, name, timeout);
#else
    (void)device;
    throw UserError("NCCL communicators need a CUDA build (configure with -DLLMPLAN_WITH_CUDA=ON)");
#endif
  }
  // Gloo's own timeout is the watchdog's backstop, a little longer: a peer
  // that stops is then reported by the watchdog (exit status 3, naming the
  // operation, the group and the rank) and not by a Gloo exception first.
  const auto backstop = std::max<std::chrono::milliseconds>(std::chrono::seconds(5), timeout / 4);
  return MakeGlooCommunicator(prefixed, rank, size, name, timeout + backstop, loopback);
}

// Waits for `work` on the host, at most until `deadline`: Wait() orders the
// result on the current stream (GPU) or blocks (CPU); Done() polls the
// completion without blocking, so a hung GPU collective cannot hang this.
bool WaitUntil(CollectiveWork& work, std::chrono::steady_clock::time_point deadline) {
  work.Wait();
  while (!work.Done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// A health-check verdict (already complete, communicators already aborted).
class HealthCheckFailure : public CollectiveError {
 public:
  using CollectiveError::CollectiveError;
};

[[noreturn]] void FailHealthCheck(ProcessGroups& groups, const std::string& message) {
  for (Communicator* communicator : groups.All()) communicator->Abort();
  throw HealthCheckFailure(message);
}

void CheckGroup(ProcessGroups& groups, Communicator& group, at::Device device) {
  const int n = group.size();
  const int r = group.rank();
  const std::string who = "rank " + std::to_string(groups.env.rank) + ": health check of " + group.name();
  const auto deadline = std::chrono::steady_clock::now() + groups.timeout;
  const auto options = at::TensorOptions().dtype(at::kFloat).device(device);
  try {
    // All-reduce: rank i contributes i + 1 (and 1, counting the ranks).
    at::Tensor sum = at::tensor({static_cast<float>(r + 1), 1.0f}).to(options.device());
    auto work = group.AllReduce(sum, "health check all-reduce");
    if (!WaitUntil(*work, deadline)) {
      FailHealthCheck(groups, who + ": all-reduce did not finish within " + Seconds(groups.timeout) +
                                  " s (a peer rank may be missing or hung)");
    }
    at::Tensor got = sum.cpu();
    const float expected = static_cast<float>(n) * static_cast<float>(n + 1) / 2.0f;
    if (got[0].item<float>() != expected || got[1].item<float>() != static_cast<float>(n)) {
      FailHealthCheck(groups, who + ": all-reduce gave (" + std::to_string(got[0].item<float>()) + ", " +
                                  std::to_string(got[1].item<float>()) + "), expected (" + std::to_string(expected) +
                                  ", " + std::to_string(n) + ") — the ranks disagree on the group's membership");
    }
    // Broadcast from the last rank: every rank must see its value.
    const int root = n - 1;
    at::Tensor value = at::full({3}, static_cast<float>(r == root ? 1000 + root : -1), options);
    work = group.Broadcast(value, root, "health check broadcast");
    if (!WaitUntil(*work, deadline)) {
      FailHealthCheck(groups, who + ": broadcast did not finish within " + Seconds(groups.timeout) +
                                  " s (a peer rank may be missing or hung)");
    }
    if (!at::equal(value.cpu(), at::full({3}, static_cast<float>(1000 + root)))) {
      FailHealthCheck(groups, who + ": broadcast from group rank " + std::to_string(root) + " gave wrong values");
    }
  } catch (const HealthCheckFailure&) {
    throw;
  } catch (const CollectiveError& e) {  // the collective itself failed (Gloo timeout, NCCL error)
    FailHealthCheck(groups, who + " failed: " + e.what());
  }
}

}  // namespace

ProcessGroups ConnectProcessGroups(const DistributedEnv& env, int shard_group_size, bool use_nccl, at::Device device,
                                   std::chrono::milliseconds timeout) {
  if (shard_group_size < 1 || env.world_size % shard_group_size != 0) {
    throw UserError("shard group size " + std::to_string(shard_group_size) + " must divide the world size " +
                    std::to_string(env.world_size));
  }
  ProcessGroups groups;
  groups.env = env;
  groups.shard_group_size = shard_group_size;
  groups.shard_group_index = env.rank / shard_group_size;
  groups.replica_group_index = env.rank % shard_group_size;
  groups.timeout = timeout;
  groups.device = use_nccl ? device : at::Device(at::kCPU);
  groups.store = Rendezvous(env, timeout);

  const bool loopback = IsLoopback(env.master_addr);
  const int g = groups.shard_group_index;
  const int r = groups.replica_group_index;
  // Every rank creates its groups in the same order (world, shard, shard
  // reductions, replica): group creation is collective among the group's members.
  groups.world = Connect(groups.store, "world/", "world", env.rank, env.world_size, use_nccl, device, timeout, loopback);
  groups.shard = Connect(groups.store, "shard" + std::to_string(g) + "/", "shard group " + std::to_string(g), r,
                         shard_group_size, use_nccl, device, timeout, loopback);
  groups.shard_reduce = Connect(groups.store, "shard_reduce" + std::to_string(g) + "/",
                                "shard group " + std::to_string(g) + " reductions", r, shard_group_size, use_nccl,
                                device, timeout, loopback);
  groups.replica = Connect(groups.store, "replica" + std::to_string(r) + "/", "replica group " + std::to_string(r), g,
                           env.world_size / shard_group_size, use_nccl, device, timeout, loopback);
  return groups;
}

void HealthCheck(ProcessGroups& groups) {
  for (Communicator* group : groups.All()) CheckGroup(groups, *group, groups.device);
}

}  // namespace llmplan::executor
