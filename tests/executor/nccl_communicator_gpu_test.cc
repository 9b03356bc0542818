// NCCL communicator tests on GPUs (label gpu; built only with CUDA).
// One GPU: a size-1 communicator and ProcessGroups of one rank. Two or more
// GPUs: this binary re-executes itself once per rank (one GPU each,
// --gtest_filter=NcclChild.Run) and checks all-gather, reduce-scatter,
// all-reduce and broadcast in fp32 and bf16, that Wait() does not block the
// host, and that the watchdog aborts a collective whose peer never joins.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

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
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAGuard.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "executor/comm/collective_watchdog.h"
#include "executor/comm/distributed_env.h"
#include "executor/comm/nccl_communicator.h"
#include "executor/comm/process_groups.h"

namespace llmplan::executor {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct RankResult {
  int exit_status = -1;
  bool timed_out = false;
  std::string log;
};

// Runs `scenario` as `world` processes; rank 0 is waited for first, then the
// others (those still running after `limit` are killed by pid; with
// `end_others_after_rank0`, as soon as rank 0 has exited).
std::vector<RankResult> RunRanks(const std::string& scenario, int world, milliseconds limit,
                                 bool end_others_after_rank0 = false,
                                 const std::map<std::string, std::string>& extra_env = {}) {
  const int port = FreePort();
  char dir_template[] = "/tmp/llmplan_nccl_test_XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    const std::string log_path = dir + "/rank" + std::to_string(rank) + ".log";
    const pid_t pid = fork();
    if (pid == 0) {
      const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(log, STDOUT_FILENO);
      dup2(log, STDERR_FILENO);
      setenv("LLMPLAN_NCCL_CHILD", scenario.c_str(), 1);
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      for (const auto& [name, value] : extra_env) setenv(name.c_str(), value.c_str(), 1);
      execl("/proc/self/exe", "/proc/self/exe", "--gtest_filter=NcclChild.Run", static_cast<char*>(nullptr));
      _exit(127);
    }
    pids.push_back(pid);
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<RankResult> results(world);
  for (int rank = 0; rank < world; ++rank) {
    int status = 0;
    if (rank > 0 && end_others_after_rank0) kill(pids[rank], SIGKILL);
    while (waitpid(pids[rank], &status, WNOHANG) != pids[rank]) {
      if (std::chrono::steady_clock::now() - start > limit) {
        kill(pids[rank], SIGKILL);
        waitpid(pids[rank], &status, 0);
        results[rank].timed_out = true;
        break;
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
    results[rank].exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    results[rank].log = ReadFile(dir + "/rank" + std::to_string(rank) + ".log");
  }
  return results;
}

std::unique_ptr<Communicator> ConnectNccl(const DistributedEnv& env, at::Device device,
                                          c10::intrusive_ptr<c10d::Store>* keep_store) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(env.master_port);
  options.isServer = env.rank == 0;
  options.numWorkers = env.world_size;
  options.timeout = seconds(60);
  *keep_store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("test/", *keep_store);
  return MakeNcclCommunicator(prefixed, env.rank, env.world_size, device, "world", seconds(60));
}

void ExpectEqualTensors(const at::Tensor& got, const at::Tensor& expected, const std::string& what) {
  const at::Tensor g = got.to(at::kCPU, at::kFloat);
  const at::Tensor e = expected.to(at::kCPU, at::kFloat);
  EXPECT_TRUE(at::equal(g, e)) << what << ": max |diff| " << (g - e).abs().max().item<float>();
}

// Every collective in fp32 and bf16; values small integers so bf16 sums are
// exact whatever order NCCL adds them in.
void CheckCollectives(Communicator& comm, at::Device device) {
  const int size = comm.size();
  const int rank = comm.rank();
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const auto options = at::TensorOptions().dtype(dtype).device(device);
    for (int64_t n : {1, 1000003}) {
      const std::string tag = std::string(c10::toString(dtype)) + " n=" + std::to_string(n);
      at::Tensor shard = (at::arange(n, options.dtype(at::kLong)) % 50 + 60 * rank).to(dtype);
      at::Tensor full = at::full({size * n}, -1, options);
      comm.AllGather(shard, full, "all-gather " + tag)->Wait();
      std::vector<at::Tensor> pieces;
      for (int r = 0; r < size; ++r) pieces.push_back((at::arange(n, options.dtype(at::kLong)) % 50 + 60 * r).to(dtype));
      ExpectEqualTensors(full, at::cat(pieces), "all-gather " + tag);

      at::Tensor grads = (at::arange(size * n, options.dtype(at::kLong)) % 7 + (rank + 1)).to(dtype);
      at::Tensor mine = at::zeros({n}, options);
      comm.ReduceScatter(grads, mine, "reduce-scatter " + tag)->Wait();
      at::Tensor all_sum = at::arange(size * n, options.dtype(at::kLong)) % 7 * size + size * (size + 1) / 2;
      ExpectEqualTensors(mine, all_sum.narrow(0, rank * n, n), "reduce-scatter " + tag);

      at::Tensor t = (at::arange(n, options.dtype(at::kLong)) % 5 * (rank + 1)).to(dtype);
      comm.AllReduce(t, "all-reduce " + tag)->Wait();
      ExpectEqualTensors(t, at::arange(n, options.dtype(at::kLong)) % 5 * (size * (size + 1) / 2),
                         "all-reduce " + tag);

      const int root = size - 1;
      at::Tensor b = rank == root ? (at::arange(n, options.dtype(at::kLong)) % 100).to(dtype) : at::full({n}, -1, options);
      comm.Broadcast(b, root, "broadcast " + tag)->Wait();
      ExpectEqualTensors(b, at::arange(n, options.dtype(at::kLong)) % 100, "broadcast " + tag);
    }
  }
}

// Wait() must only make the current stream wait: with a ~1 s sleep kernel
// queued before the collective, issue + Wait return at once and the work is
// not yet done; the result is right once the stream has drained.
void CheckWaitDoesNotBlockHost(Communicator& comm, at::Device device) {
  at::Tensor t = at::ones({1 << 20}, at::TensorOptions().device(device));
  torch::cuda::synchronize(device.index());
  const auto start = std::chrono::steady_clock::now();
  at::cuda::sleep(2'000'000'000LL);  // ~1 s of GPU clock cycles on the current stream
  auto work = comm.AllReduce(t, "all-reduce behind a sleep");
  work->Wait();
  const auto host_time = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(work->Done()) << "the collective finished before the sleep kernel: Wait() or issue blocked";
  EXPECT_LT(host_time, milliseconds(200)) << "issue + Wait() blocked the host";
  torch::cuda::synchronize(device.index());
  EXPECT_TRUE(work->Done());
  EXPECT_EQ(t[0].item<float>(), static_cast<float>(comm.size()));
}

void ChildCollectives(const DistributedEnv& env) {
  const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
  c10::cuda::CUDAGuard guard(device);
  c10::intrusive_ptr<c10d::Store> store;
  auto comm = ConnectNccl(env, device, &store);
  EXPECT_EQ(comm->size(), env.world_size);
  EXPECT_EQ(comm->name(), "world (nccl)");
  CheckCollectives(*comm, device);
  CheckWaitDoesNotBlockHost(*comm, device);
  torch::cuda::synchronize(device.index());
}

void ChildGroups(const DistributedEnv& env) {
  const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
  c10::cuda::CUDAGuard guard(device);
  // Shard groups of 1 across 2 GPUs: the replica group spans both.
  ProcessGroups groups = ConnectProcessGroups(env, /*shard_group_size=*/1, /*use_nccl=*/true, device, seconds(60));
  HealthCheck(groups);
  EXPECT_EQ(groups.replica->size(), env.world_size);
  EXPECT_EQ(groups.shard->size(), 1);
  torch::cuda::synchronize(device.index());
}

// Rank 1 joins but never calls the collective; rank 0 blocks in a device
// synchronize. The watchdog must print the line, abort NCCL and exit.
void ChildWatchdog(const DistributedEnv& env) {
  const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
  c10::cuda::CUDAGuard guard(device);
  c10::intrusive_ptr<c10d::Store> store;
  auto comm = ConnectNccl(env, device, &store);
  // Warm-up with the same shape: NCCL (>= 2.22) connects peers lazily at the
  // first collective, and that host-side setup would wait for rank 1 inside
  // the issue call, before the watchdog is told about the work.
  at::Tensor t = at::ones({1024}, at::TensorOptions().device(device));
  comm->AllReduce(t, "warm-up")->Wait();
  torch::cuda::synchronize(device.index());
  if (env.rank != 0) {
    std::this_thread::sleep_for(seconds(60));
    return;
  }
  CollectiveWatchdog watchdog(env.rank, seconds(3), {comm.get()});
  std::shared_ptr<CollectiveWork> work = comm->AllReduce(t, "all-gather block 7 mb 1");
  watchdog.Watch(work, "all-gather block 7 mb 1", comm->name());
  work->Wait();
  torch::cuda::synchronize(device.index());  // hangs: the NCCL kernel waits for rank 1
  // ncclCommAbort may let the synchronize return just before the watchdog's
  // _Exit: give it time, so only a watchdog that never exits fails here.
  std::this_thread::sleep_for(seconds(10));
  ADD_FAILURE() << "the collective finished although rank 1 never joined it";
}

TEST(NcclChild, Run) {
  const char* scenario = std::getenv("LLMPLAN_NCCL_CHILD");
  if (scenario == nullptr) GTEST_SKIP() << "runs only as a rank of a multi-process test";
  const DistributedEnv env = ReadDistributedEnv();
  const std::string name = scenario;
  if (name == "collectives") {
    ChildCollectives(env);
  } else if (name == "groups") {
    ChildGroups(env);
  } else if (name == "watchdog") {
    ChildWatchdog(env);
  } else {
    FAIL() << "unknown scenario " << name;
  }
}

TEST(NcclCommunicator, SizeOneOnOneGpu) {
  if (torch::cuda::device_count() < 1) GTEST_SKIP() << "no GPU";
  const at::Device device(at::kCUDA, 0);
  DistributedEnv env;
  env.master_port = FreePort();
  c10::intrusive_ptr<c10d::Store> store;
  auto comm = ConnectNccl(env, device, &store);
  EXPECT_EQ(comm->size(), 1);
  CheckCollectives(*comm, device);
  CheckWaitDoesNotBlockHost(*comm, device);
  // NVLink multicast stays off unless the user set it.
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  ASSERT_NE(nvls, nullptr);

  DistributedEnv env1;
  env1.master_port = FreePort();
  ProcessGroups groups = ConnectProcessGroups(env1, 1, /*use_nccl=*/true, device, seconds(60));
  HealthCheck(groups);
  torch::cuda::synchronize(0);
}

TEST(NcclCommunicator, CollectivesOnTwoGpus) {
  if (torch::cuda::device_count() < 2) GTEST_SKIP() << "needs 2 GPUs";
  const auto results = RunRanks("collectives", 2, seconds(120));
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_FALSE(results[r].timed_out) << "rank " << r << ":\n" << results[r].log;
    EXPECT_EQ(results[r].exit_status, 0) << "rank " << r << ":\n" << results[r].log;
  }
}

TEST(NcclCommunicator, HealthCheckOnTwoGpus) {
  if (torch::cuda::device_count() < 2) GTEST_SKIP() << "needs 2 GPUs";
  const auto results = RunRanks("groups", 2, seconds(120));
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_FALSE(results[r].timed_out) << "rank " << r << ":\n" << results[r].log;
    EXPECT_EQ(results[r].exit_status, 0) << "rank " << r << ":\n" << results[r].log;
  }
}

TEST(NcclCommunicator, WatchdogAbortsAHungCollective) {
  if (torch::cuda::device_count() < 2) GTEST_SKIP() << "needs 2 GPUs";
  // Rank 1 idles; it is ended once rank 0 has exited.
  const auto results = RunRanks("watchdog", 2, seconds(60), /*end_others_after_rank0=*/true);
  EXPECT_FALSE(results[0].timed_out) << results[0].log;
  EXPECT_EQ(results[0].exit_status, kCollectiveTimeoutExitStatus) << results[0].log;
  EXPECT_NE(results[0].log.find("llmplan: rank 0: collective \"all-gather block 7 mb 1\" in world (nccl) did not "
                                "finish within 3 s; aborting"),
            std::string::npos)
      << results[0].log;
}

}  // namespace
}  // namespace llmplan::executor
