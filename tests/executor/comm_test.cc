// Communicator tests on the CPU: DistributedEnv parsing, the collective
// watchdog, and real multi-process Gloo groups. A multi-process test
// re-executes this binary once per rank (--gtest_filter=CommChild.Run with
// LLMPLAN_COMM_CHILD naming the scenario and RANK/WORLD_SIZE/MASTER_* set as
// torchrun would), so every rank is a fresh process: forking a process that
// already ran LibTorch's thread pools is not safe.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "executor/comm/collective_watchdog.h"
#include "executor/comm/distributed_env.h"
#include "executor/comm/gloo_communicator.h"
#include "executor/comm/process_groups.h"
#include "executor/launcher/launcher.h"
#include "base/user_error.h"
#include "tests/executor/rank_processes.h"
#include "tests/executor/gloo_skip.h"

namespace llmplan::executor {
namespace {

using executor_test::RankExit;
using executor_test::ReadText;
using executor_test::SpawnRankProcess;
using executor_test::WaitRankProcess;

using std::chrono::milliseconds;
using std::chrono::seconds;

// ---------------------------------------------------------------------------
// Harness: ranks as child processes


struct RankProcess {
  int rank = 0;
  pid_t pid = -1;
  std::string log_path;  // the child's stdout and stderr
};

struct RankOutcome {
  int exit_status = -1;  // exit code, or -signal
  bool timed_out = false;
  double seconds = 0;
  std::string log;
};


// Starts ranks `ranks` of a `world`-rank job running `scenario`.
std::vector<RankProcess> SpawnRanks(const std::string& scenario, int world, const std::vector<int>& ranks,
                                    const std::map<std::string, std::string>& extra_env = {}) {
  const int port = PickFreePort();
  char dir_template[] = "/tmp/llmplan_comm_test_XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  std::vector<RankProcess> processes;
  for (int rank : ranks) {
    RankProcess process;
    process.rank = rank;
    process.log_path = dir + "/rank" + std::to_string(rank) + ".log";
    std::map<std::string, std::string> env = extra_env;
    env["LLMPLAN_COMM_CHILD"] = scenario;
    const pid_t pid = SpawnRankProcess("CommChild.Run", rank, world, port, process.log_path, env);
    process.pid = pid;
    processes.push_back(process);
  }
  return processes;
}

RankOutcome WaitRank(const RankProcess& process, std::chrono::steady_clock::time_point start, milliseconds limit) {
  const RankExit exit = WaitRankProcess(process.pid, start, limit);
  RankOutcome outcome;
  outcome.exit_status = exit.exit_status;
  outcome.timed_out = exit.timed_out;
  outcome.seconds = exit.seconds;
  outcome.log = ReadText(process.log_path);
  return outcome;
}

// Runs a whole job and expects every rank to exit 0 within `limit`.
void RunJob(const std::string& scenario, int world, milliseconds limit = seconds(40),
            const std::map<std::string, std::string>& extra_env = {}) {
  std::vector<int> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(r);
  const auto start = std::chrono::steady_clock::now();
  auto processes = SpawnRanks(scenario, world, ranks, extra_env);
  for (const RankProcess& process : processes) {
    const RankOutcome outcome = WaitRank(process, start, limit);
    EXPECT_FALSE(outcome.timed_out) << scenario << " rank " << process.rank << " timed out:\n" << outcome.log;
    EXPECT_EQ(outcome.exit_status, 0) << scenario << " rank " << process.rank << " failed:\n" << outcome.log;
  }
}

// ---------------------------------------------------------------------------
// Child scenarios (run inside the re-executed binary)

constexpr milliseconds kChildTimeout = seconds(15);

void ExpectEqualTensors(const at::Tensor& got, const at::Tensor& expected, const std::string& what) {
  EXPECT_TRUE(at::equal(got.to(at::kFloat), expected.to(at::kFloat)))
      << what << "\n got " << got.to(at::kFloat) << "\n expected " << expected.to(at::kFloat);
}

// World group of all ranks, straight over a TCPStore (no ProcessGroups).
std::unique_ptr<Communicator> ConnectWorld(const DistributedEnv& env, milliseconds timeout,
                                           c10::intrusive_ptr<c10d::Store>* keep_store) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(env.master_port);
  options.isServer = env.rank == 0;
  options.numWorkers = env.world_size;
  options.timeout = kChildTimeout;
  *keep_store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("test/", *keep_store);
  return MakeGlooCommunicator(prefixed, env.rank, env.world_size, "world", timeout, /*loopback=*/true);
}

// All four collectives, fp32 and bf16, on a few sizes (1 element, odd, larger),
// values small integers so bf16 sums are exact.
void ChildCollectives(const DistributedEnv& env) {
  c10::intrusive_ptr<c10d::Store> store;
  auto comm = ConnectWorld(env, kChildTimeout, &store);
  const int size = comm->size();
  const int rank = comm->rank();
  ASSERT_EQ(size, env.world_size);
  ASSERT_EQ(rank, env.rank);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const auto options = at::TensorOptions().dtype(dtype);
    for (int64_t n : {1, 5, 13}) {
      const std::string tag = std::string(c10::toString(dtype)) + " n=" + std::to_string(n);
      // All-gather into a flat buffer.
      at::Tensor shard = at::arange(n, options) + 20 * rank;
      at::Tensor full = at::full({size * n}, -1, options);
      comm->AllGather(shard, full, "all-gather " + tag)->Wait();
      std::vector<at::Tensor> pieces;
      for (int r = 0; r < size; ++r) pieces.push_back(at::arange(n, options) + 20 * r);
      ExpectEqualTensors(full, at::cat(pieces), "all-gather " + tag);

      // Reduce-scatter (emulated): full[j] = (rank + 1) + j % 7 on each rank.
      at::Tensor grads = (at::arange(size * n, at::kLong) % 7 + (rank + 1)).to(dtype);
      at::Tensor grads_before = grads.clone();
      at::Tensor mine = at::zeros({n}, options);
      comm->ReduceScatter(grads, mine, "reduce-scatter " + tag)->Wait();
      at::Tensor all_sum = at::arange(size * n, at::kLong) % 7 * size + size * (size + 1) / 2;
      ExpectEqualTensors(mine, all_sum.narrow(0, rank * n, n), "reduce-scatter " + tag);
      ExpectEqualTensors(grads, grads_before, "reduce-scatter leaves its input alone " + tag);

      // All-reduce in place, a 2-D tensor.
      at::Tensor t = (at::arange(2 * n, at::kLong) % 5 * (rank + 1)).to(dtype).view({2, n});
      comm->AllReduce(t, "all-reduce " + tag)->Wait();
      ExpectEqualTensors(t, (at::arange(2 * n, at::kLong) % 5 * (size * (size + 1) / 2)).view({2, n}),
                         "all-reduce " + tag);

      // Broadcast from the last rank.
      const int root = size - 1;
      at::Tensor b = rank == root ? at::arange(n, options) + 42 : at::full({n}, -1, options);
      comm->Broadcast(b, root, "broadcast " + tag)->Wait();
      ExpectEqualTensors(b, at::arange(n, options) + 42, "broadcast " + tag);
    }
  }
  // Two collectives in flight at once, waited in issue order.
  at::Tensor a = at::ones({1000}) * (rank + 1);
  at::Tensor shard = at::full({3}, static_cast<float>(rank));
  at::Tensor full = at::empty({3 * size});
  auto first = comm->AllReduce(a, "in flight 1");
  auto second = comm->AllGather(shard, full, "in flight 2");
  first->Wait();
  second->Wait();
  EXPECT_TRUE(first->Done());
  EXPECT_EQ(a[999].item<float>(), size * (size + 1) / 2);
  EXPECT_EQ(full[3 * size - 1].item<float>(), size - 1);
}

// World 4, shard groups of 2: the hybrid layout.
void ChildGroups(const DistributedEnv& env) {
  ProcessGroups groups = ConnectProcessGroups(env, /*shard_group_size=*/2, /*use_nccl=*/false, at::kCPU, kChildTimeout);
  const int rank = env.rank;
  const int g = rank / 2;
  const int r = rank % 2;
  EXPECT_EQ(groups.world->size(), 4);
  EXPECT_EQ(groups.world->rank(), rank);
  EXPECT_EQ(groups.shard->size(), 2);
  EXPECT_EQ(groups.shard->rank(), r);
  EXPECT_EQ(groups.shard->name(), "shard group " + std::to_string(g) + " (gloo)");
  EXPECT_EQ(groups.replica->size(), 2);
  EXPECT_EQ(groups.replica->rank(), g);
  EXPECT_EQ(groups.replica->name(), "replica group " + std::to_string(r) + " (gloo)");
  EXPECT_EQ(groups.shard_group_index, g);
  EXPECT_EQ(groups.replica_group_index, r);
  HealthCheck(groups);

  // Membership through results: gather the global ranks of each group.
  at::Tensor me = at::full({1}, static_cast<float>(rank));
  at::Tensor shard_members = at::empty({2});
  groups.shard->AllGather(me, shard_members, "shard members")->Wait();
  ExpectEqualTensors(shard_members, at::tensor({2.0f * g, 2.0f * g + 1}), "shard group members");
  at::Tensor replica_members = at::empty({2});
  groups.replica->AllGather(me, replica_members, "replica members")->Wait();
  ExpectEqualTensors(replica_members, at::tensor({1.0f * r, r + 2.0f}), "replica group members");

  // HSDP gradient path: reduce-scatter in the shard group, then all-reduce the
  // shard across replicas = the world sum of this shard.
  at::Tensor grads = at::arange(4, at::kFloat) + 10 * rank;  // 4 elements, 2 per shard rank
  at::Tensor mine = at::empty({2});
  groups.shard->ReduceScatter(grads, mine, "hsdp reduce-scatter")->Wait();
  groups.replica->AllReduce(mine, "hsdp all-reduce")->Wait();
  at::Tensor world_sum = at::arange(4, at::kFloat) * 4 + 10 * (0 + 1 + 2 + 3);
  ExpectEqualTensors(mine, world_sum.narrow(0, 2 * r, 2), "hsdp gradient");

  at::Tensor total = at::full({1}, static_cast<float>(rank));
  groups.world->AllReduce(total, "world sum")->Wait();
  EXPECT_EQ(total.item<float>(), 6.0f);
}

// Rank 1 joins the group but never calls the collective: rank 0's watchdog
// must end rank 0 with the one-line message. Rank 1 waits to be killed.
void ChildWatchdog(const DistributedEnv& env) {
  c10::intrusive_ptr<c10d::Store> store;
  auto comm = ConnectWorld(env, /*Gloo's own timeout, longer than the watchdog's=*/seconds(60), &store);
  if (env.rank != 0) {
    std::this_thread::sleep_for(seconds(60));
    return;
  }
  CollectiveWatchdog watchdog(env.rank, CollectiveTimeoutFromEnv(seconds(30)), {comm.get()});
  at::Tensor grads = at::ones({64});
  std::shared_ptr<CollectiveWork> work = comm->AllReduce(grads, "reduce-scatter block 3 mb 0");
  watchdog.Watch(work, "reduce-scatter block 3 mb 0", comm->name());
  work->Wait();  // blocks; the watchdog ends the process
  ADD_FAILURE() << "the collective finished although rank 1 never joined it";
}

// Gloo's own timeout: Wait() throws a CollectiveError naming op, group, rank.
void ChildGlooTimeout(const DistributedEnv& env) {
  c10::intrusive_ptr<c10d::Store> store;
  auto comm = ConnectWorld(env, seconds(1), &store);
  if (env.rank != 0) {
    std::this_thread::sleep_for(seconds(60));  // never joins; the parent ends it
    return;
  }
  at::Tensor t = at::ones({16});
  const auto start = std::chrono::steady_clock::now();
  try {
    comm->AllReduce(t, "stuck gradient sum")->Wait();
    ADD_FAILURE() << "the all-reduce finished without rank 1";
  } catch (const CollectiveError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("rank 0"), std::string::npos) << message;
    EXPECT_NE(message.find("all-reduce \"stuck gradient sum\""), std::string::npos) << message;
    EXPECT_NE(message.find("world (gloo)"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(10));  // 1 s, not forever
}

TEST(CommChild, Run) {
  const char* scenario = std::getenv("LLMPLAN_COMM_CHILD");
  if (scenario == nullptr) GTEST_SKIP() << "runs only as a rank of a multi-process test";
  const DistributedEnv env = ReadDistributedEnv();
  const std::string name = scenario;
  if (name == "collectives") {
    ChildCollectives(env);
  } else if (name == "groups") {
    ChildGroups(env);
  } else if (name == "watchdog") {
    ChildWatchdog(env);
  } else if (name == "gloo_timeout") {
    ChildGlooTimeout(env);
  } else {
    FAIL() << "unknown scenario " << name;
  }
}

// ---------------------------------------------------------------------------
// Multi-process tests

TEST(GlooCommunicator, CollectivesOnTwoRanks) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  RunJob("collectives", 2);
}

TEST(GlooCommunicator, CollectivesOnThreeRanks) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  RunJob("collectives", 3);
}

TEST(ProcessGroups, HybridWorldOfFourWithShardGroupsOfTwo) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  RunJob("groups", 4);
}

// Runs a 2-rank job where rank 1 joins the group and then idles: waits for
// rank 0, then ends rank 1 (we started it, we end it, by pid).
RankOutcome RunWithIdlePeer(const std::string& scenario, const std::map<std::string, std::string>& extra_env = {}) {
  const auto start = std::chrono::steady_clock::now();
  auto processes = SpawnRanks(scenario, 2, {0, 1}, extra_env);
  const RankOutcome rank0 = WaitRank(processes[0], start, seconds(30));
  kill(processes[1].pid, SIGKILL);
  waitpid(processes[1].pid, nullptr, 0);
  return rank0;
}

TEST(GlooCommunicator, TimeoutThrowsCollectiveErrorNamingOpGroupAndRank) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  const RankOutcome rank0 = RunWithIdlePeer("gloo_timeout");
  EXPECT_FALSE(rank0.timed_out) << rank0.log;
  EXPECT_EQ(rank0.exit_status, 0) << rank0.log;
}

TEST(CollectiveWatchdog, MissingPeerEndsTheProcessWithOneLine) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  const RankOutcome rank0 = RunWithIdlePeer("watchdog", {{"LLMPLAN_COLLECTIVE_TIMEOUT_S", "2"}});
  EXPECT_FALSE(rank0.timed_out) << rank0.log;
  EXPECT_EQ(rank0.exit_status, kCollectiveTimeoutExitStatus) << rank0.log;
  const std::string line =
      "llmplan: rank 0: collective \"reduce-scatter block 3 mb 0\" in world (gloo) did not finish within 2 s; "
      "aborting (a peer rank may have died or hung; set LLMPLAN_COLLECTIVE_TIMEOUT_S to wait longer)\n";
  EXPECT_NE(rank0.log.find(line), std::string::npos) << rank0.log;
  // Start-up (loading LibTorch) plus the 2 s timeout, not Gloo's 60 s.
  EXPECT_LT(rank0.seconds, 25.0);
}

// ---------------------------------------------------------------------------
// In-process tests

TEST(ProcessGroups, WorldOfOneHasRealSizeOneGroups) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  DistributedEnv env;
  env.master_port = PickFreePort();
  ProcessGroups groups = ConnectProcessGroups(env, 1, /*use_nccl=*/false, at::kCPU, seconds(10));
  for (Communicator* c : groups.All()) {
    EXPECT_EQ(c->size(), 1);
    EXPECT_EQ(c->rank(), 0);
  }
  HealthCheck(groups);
  at::Tensor shard = at::arange(5, at::kFloat);
  at::Tensor full = at::empty({5});
  groups.shard->AllGather(shard, full, "gather")->Wait();
  EXPECT_TRUE(at::equal(full, shard));
  at::Tensor mine = at::empty({5});
  groups.shard->ReduceScatter(full.to(at::kBFloat16).to(at::kFloat), mine, "scatter")->Wait();
  EXPECT_TRUE(at::equal(mine, shard));
}

TEST(ProcessGroups, ShardGroupSizeMustDivideWorld) {
  DistributedEnv env;
  env.world_size = 4;
  EXPECT_THROW(ConnectProcessGroups(env, 3, false, at::kCPU, seconds(1)), UserError);
  EXPECT_THROW(ConnectProcessGroups(env, 0, false, at::kCPU, seconds(1)), UserError);
}

TEST(ProcessGroups, MissingPeersFailRendezvousNamingTheAddress) {
  DistributedEnv env;
  env.world_size = 2;
  env.master_port = PickFreePort();
  const std::string where = "127.0.0.1:" + std::to_string(env.master_port);
  // Rank 0 alone: serves the store, rank 1 never comes.
  try {
    ConnectProcessGroups(env, 2, false, at::kCPU, milliseconds(1500));
    ADD_FAILURE() << "rendezvous succeeded without rank 1";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find(where), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
  }
  // Rank 1 alone: nobody serves the store.
  env.rank = 1;
  env.master_port = PickFreePort();
  const std::string where1 = "127.0.0.1:" + std::to_string(env.master_port);
  try {
    ConnectProcessGroups(env, 2, false, at::kCPU, milliseconds(1500));
    ADD_FAILURE() << "rendezvous succeeded without rank 0";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find(where1), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
}

// A work item whose completion the test controls.
class FakeWork : public CollectiveWork {
 public:
  void Wait() override {}
  bool Done() override { return done; }
  CollectiveSpan Span(const StepClock&) override { return {}; }
  std::atomic<bool> done{false};
};

class FakeCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "fake"; }
  std::unique_ptr<CollectiveWork> AllGather(const at::Tensor&, const at::Tensor&, const std::string&) override {
    return nullptr;
  }
  std::unique_ptr<CollectiveWork> ReduceScatter(const at::Tensor&, const at::Tensor&, const std::string&) override {
    return nullptr;
  }
  std::unique_ptr<CollectiveWork> AllReduce(const at::Tensor&, const std::string&) override { return nullptr; }
  std::unique_ptr<CollectiveWork> Broadcast(const at::Tensor&, int, const std::string&) override { return nullptr; }
  void Abort() override { aborted = true; }
  std::atomic<bool> aborted{false};
};

// Claims 2 ranks but sums nothing: the health check must notice.
class LonelyCommunicator : public FakeCommunicator {
 public:
  explicit LonelyCommunicator(std::string name) : name_(std::move(name)) {}
  int size() const override { return 2; }
  std::string name() const override { return name_; }
  std::unique_ptr<CollectiveWork> AllReduce(const at::Tensor&, const std::string&) override {
    auto work = std::make_unique<FakeWork>();
    work->done = true;
    return work;
  }
  std::unique_ptr<CollectiveWork> Broadcast(const at::Tensor& t, int, const std::string& w) override {
    return AllReduce(t, w);
  }

 private:
  std::string name_;
};

TEST(ProcessGroups, HealthCheckNamesRankAndGroupOfAWrongAnswerAndAborts) {
  ProcessGroups groups;
  groups.env.rank = 5;
  groups.timeout = seconds(1);
  groups.world = std::make_unique<LonelyCommunicator>("world (fake)");
  groups.shard = std::make_unique<LonelyCommunicator>("shard group 2 (fake)");
  groups.shard_reduce = std::make_unique<LonelyCommunicator>("shard group 2 reductions (fake)");
  groups.replica = std::make_unique<LonelyCommunicator>("replica group 1 (fake)");
  try {
    HealthCheck(groups);
    ADD_FAILURE() << "a group whose all-reduce sums nothing passed the health check";
  } catch (const CollectiveError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("rank 5: health check of world (fake): all-reduce gave"), std::string::npos) << message;
  }
  for (Communicator* c : groups.All()) EXPECT_TRUE(static_cast<FakeCommunicator*>(c)->aborted);
}

TEST(CollectiveWatchdog, FinishedWorkIsForgottenAndLateWorkReportedOnce) {
  std::atomic<int> fired{0};
  CollectiveWatchdog::Expiry seen;
  std::mutex seen_mutex;
  FakeCommunicator communicator;
  CollectiveWatchdog watchdog(1, milliseconds(300), {&communicator}, [&](const CollectiveWatchdog::Expiry& e) {
    std::lock_guard<std::mutex> lock(seen_mutex);
    seen = e;
    ++fired;
  });
  auto quick = std::make_shared<FakeWork>();
  auto slow = std::make_shared<FakeWork>();
  watchdog.Watch(quick, "all-gather block 0 mb 0", "shard group 0 (fake)");
  watchdog.Watch(slow, "reduce-scatter block 3 mb 0", "shard group 0 (fake)");
  quick->done = true;
  std::this_thread::sleep_for(milliseconds(150));
  EXPECT_EQ(watchdog.Outstanding(), 1u);
  EXPECT_EQ(fired.load(), 0);
  std::this_thread::sleep_for(milliseconds(400));
  EXPECT_EQ(fired.load(), 1);
  std::lock_guard<std::mutex> lock(seen_mutex);
  EXPECT_EQ(seen.rank, 1);
  EXPECT_EQ(seen.what, "reduce-scatter block 3 mb 0");
  EXPECT_EQ(seen.message,
            "llmplan: rank 1: collective \"reduce-scatter block 3 mb 0\" in shard group 0 (fake) did not finish "
            "within 0.3 s; aborting (a peer rank may have died or hung; set LLMPLAN_COLLECTIVE_TIMEOUT_S to wait "
            "longer)");
  EXPECT_FALSE(communicator.aborted);  // a custom handler decides what to abort
}

TEST(CollectiveWatchdog, TimeoutFromEnvironment) {
  unsetenv("LLMPLAN_COLLECTIVE_TIMEOUT_S");
  EXPECT_EQ(CollectiveTimeoutFromEnv(seconds(30)), seconds(30));
  setenv("LLMPLAN_COLLECTIVE_TIMEOUT_S", "2.5", 1);
  EXPECT_EQ(CollectiveTimeoutFromEnv(seconds(30)), milliseconds(2500));
  setenv("LLMPLAN_COLLECTIVE_TIMEOUT_S", "soon", 1);
  EXPECT_THROW(CollectiveTimeoutFromEnv(seconds(30)), UserError);
  setenv("LLMPLAN_COLLECTIVE_TIMEOUT_S", "0", 1);
  EXPECT_THROW(CollectiveTimeoutFromEnv(seconds(30)), UserError);
  unsetenv("LLMPLAN_COLLECTIVE_TIMEOUT_S");
  EXPECT_EQ(CollectiveTimeoutMessage(0, "x", "world (nccl)", seconds(30)).find("within 30 s;") != std::string::npos,
            true);
}

// ---------------------------------------------------------------------------
// DistributedEnv

TEST(DistributedEnv, NoVariablesIsOneProcess) {
  const DistributedEnv env = DistributedEnvFromVariables({});
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.local_rank, 0);
  EXPECT_EQ(env.local_world_size, 1);
  EXPECT_EQ(env.node_rank, 0);
  EXPECT_EQ(env.master_addr, "127.0.0.1");
  EXPECT_EQ(env.master_port, 29500);
}

TEST(DistributedEnv, Torchrun) {
  const DistributedEnv env = DistributedEnvFromVariables({{"RANK", "13"},
                                                          {"LOCAL_RANK", "5"},
                                                          {"WORLD_SIZE", "16"},
                                                          {"LOCAL_WORLD_SIZE", "8"},
                                                          {"GROUP_RANK", "1"},
                                                          {"MASTER_ADDR", "10.0.0.7"},
                                                          {"MASTER_PORT", "29600"},
                                                          {"SLURM_PROCID", "3"}});  // torchrun wins
  EXPECT_EQ(env.source, "torchrun");
  EXPECT_EQ(env.rank, 13);
  EXPECT_EQ(env.local_rank, 5);
  EXPECT_EQ(env.world_size, 16);
  EXPECT_EQ(env.local_world_size, 8);
  EXPECT_EQ(env.node_rank, 1);
  EXPECT_EQ(env.master_addr, "10.0.0.7");
  EXPECT_EQ(env.master_port, 29600);
  // GROUP_RANK absent: derived from rank / local world size.
  EXPECT_EQ(DistributedEnvFromVariables({{"RANK", "13"}, {"WORLD_SIZE", "16"}, {"LOCAL_WORLD_SIZE", "8"},
                                         {"LOCAL_RANK", "5"}})
                .node_rank,
            1);
}

TEST(DistributedEnv, Slurm) {
  DistributedEnv env = DistributedEnvFromVariables({{"SLURM_PROCID", "6"},
                                                    {"SLURM_LOCALID", "2"},
                                                    {"SLURM_NTASKS", "8"},
                                                    {"SLURM_NODEID", "1"},
                                                    {"SLURM_NTASKS_PER_NODE", "4"},
                                                    {"SLURM_JOB_NODELIST", "gpu-node[07-08]"}});
  EXPECT_EQ(env.source, "slurm");
  EXPECT_EQ(env.rank, 6);
  EXPECT_EQ(env.local_rank, 2);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_world_size, 4);
  EXPECT_EQ(env.node_rank, 1);
  EXPECT_EQ(env.master_addr, "gpu-node07");
  // SLURM_TASKS_PER_NODE's compressed form, and MASTER_ADDR/PORT overriding.
  env = DistributedEnvFromVariables({{"SLURM_PROCID", "8"},
                                     {"SLURM_LOCALID", "0"},
                                     {"SLURM_NTASKS", "9"},
                                     {"SLURM_NODEID", "2"},
                                     {"SLURM_TASKS_PER_NODE", "4(x2),1"},
                                     {"SLURM_JOB_NODELIST", "a[1-3]"},
                                     {"MASTER_ADDR", "head"},
                                     {"MASTER_PORT", "1234"}});
  EXPECT_EQ(env.local_world_size, 1);
  EXPECT_EQ(env.master_addr, "head");
  EXPECT_EQ(env.master_port, 1234);
}

TEST(DistributedEnv, SlurmNodelistForms) {
  EXPECT_EQ(FirstHostOfSlurmNodelist("node01"), "node01");
  EXPECT_EQ(FirstHostOfSlurmNodelist("node[01-04,07]"), "node01");
  EXPECT_EQ(FirstHostOfSlurmNodelist("node[3,5-7],gpu[1-2]"), "node3");
  EXPECT_EQ(FirstHostOfSlurmNodelist("a1,b2"), "a1");
  EXPECT_EQ(FirstHostOfSlurmNodelist("rack1-n[001-004]"), "rack1-n001");
  EXPECT_EQ(FirstHostOfSlurmNodelist("n[3-4]-ib,x"), "n3-ib");
  EXPECT_EQ(FirstHostOfSlurmNodelist("r[1-2]n[5-6]"), "r1n5");
  EXPECT_THROW(FirstHostOfSlurmNodelist(""), UserError);
  EXPECT_THROW(FirstHostOfSlurmNodelist("node[01-04"), UserError);
  EXPECT_THROW(FirstHostOfSlurmNodelist("node]"), UserError);
  EXPECT_EQ(TasksOnSlurmNode("8", 0), 8);
  EXPECT_EQ(TasksOnSlurmNode("4(x2),3", 1), 4);
  EXPECT_EQ(TasksOnSlurmNode("4(x2),3", 2), 3);
  EXPECT_THROW(TasksOnSlurmNode("4(x2),3", 3), UserError);
  EXPECT_THROW(TasksOnSlurmNode("4(x2", 0), UserError);
}

TEST(DistributedEnv, BadValuesAreOneLineUserErrors) {
  auto message_of = [](const std::map<std::string, std::string>& vars) -> std::string {
    try {
      DistributedEnvFromVariables(vars);
    } catch (const UserError& e) {
      return e.what();
    }
    return "(no error)";
  };
  const std::string rank_too_big = message_of({{"RANK", "4"}, {"WORLD_SIZE", "4"}});
  EXPECT_NE(rank_too_big.find("rank 4 is outside 0..3"), std::string::npos) << rank_too_big;
  const std::string not_a_number = message_of({{"RANK", "one"}, {"WORLD_SIZE", "4"}});
  EXPECT_NE(not_a_number.find("RANK=\"one\""), std::string::npos) << not_a_number;
  EXPECT_NE(message_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}}).find("world size 0"), std::string::npos);
  EXPECT_NE(message_of({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}})
                .find("local rank 2"),
            std::string::npos);
  EXPECT_NE(message_of({{"MASTER_PORT", "70000"}}).find("MASTER_PORT"), std::string::npos);
  EXPECT_NE(message_of({{"SLURM_PROCID", "x"}}).find("SLURM_PROCID=\"x\""), std::string::npos);
  EXPECT_NE(message_of({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "2"}}).find("rank 5"), std::string::npos);
  for (const std::string& m : {rank_too_big, not_a_number}) EXPECT_EQ(m.find('\n'), std::string::npos);
}

}  // namespace
}  // namespace llmplan::executor
