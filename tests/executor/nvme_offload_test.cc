// NVMe offload in the executor: the streamed AdamW (NvmeOptimizerState)
// equals the in-memory CPU AdamW bit for bit — units of one element, of a
// few pages, of several blocks with a short last one, through O_DIRECT, on
// tmpfs and buffered — and training with the state on
// NVMe equals training with it in host memory, bit for bit, in one process
// (offload optimizer and optimizer+params, with gradient accumulation, the
// host run's gradients through the staging slots, the NVMe run's per unit) and
// through `llmplan run` on 2 Gloo ranks, where a run stopped at step 3 and
// resumed from its checkpoint ends equal to an uninterrupted one. Bad input
// (no --nvme-dir, a missing directory, --nvme-dir for a plan without NVMe)
// is one line.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "base/user_error.h"
#include "executor/checkpoint/safetensors.h"
#include "executor/optimizer/cpu_adamw.h"
#include "executor/optimizer/nvme_optimizer_state.h"
#include "executor/run/preflight.h"
#include "executor/run/trainer.h"
#include "planner/nvme_offload.h"
#include "tests/cli_runner.h"
#include "tests/executor/core_test_support.h"
#include "tests/executor/run_test_support.h"
#include "tests/executor/gloo_skip.h"

namespace llmplan::executor {
namespace {

namespace fs = std::filesystem;
using executor_test::CommandResult;
using executor_test::LlmplanErrorLines;
using executor_test::RunLlmplan;

class NvmeOffload : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("llmplan_nvme_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "nvme");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

AdamWScalars Scalars(int step) {
  AdamWScalars s;
  s.decay = 1 - 1e-3f * 0.1f;
  s.bias2_sqrt = std::sqrt(1 - std::pow(0.95f, static_cast<float>(step)));
  s.step_size = -1e-3f / (1 - std::pow(0.9f, static_cast<float>(step)));
  return s;
}

// Three steps of units of `sizes` elements through a state file in `dir`
// and through host arrays: parameters, bf16 copies, m and v all identical.
// Returns whether the file took O_DIRECT.
bool ExpectStreamedEqualsInMemory(const std::string& dir, const std::vector<int64_t>& sizes, bool try_direct = true) {
  NvmeOptimizerState nvme(NvmeStatePath(dir, 0), sizes, try_direct);
  EXPECT_FALSE(fs::exists(nvme.path())) << "the scratch file is unlinked once reserved";
  EXPECT_EQ(nvme.file_bytes(), NvmeFileBytes(sizes));
  std::mt19937 gen(11);
  std::normal_distribution<float> normal;
  for (int u = 0; u < static_cast<int>(sizes.size()); ++u) {
    const int64_t n = sizes[u];
    std::vector<float> p(n), p_ref, m(n, 0), v(n, 0), m_got(n), v_got(n);
    for (float& x : p) x = normal(gen);
    p_ref = p;
    std::vector<uint16_t> out(n), out_ref(n);
    for (int step = 1; step <= 3; ++step) {
      std::vector<float> g(n);
      for (float& x : g) x = normal(gen) * 1e-2f;
      nvme.Update(u, p.data(), g.data(), out.data(), /*compute_is_bf16=*/true, Scalars(step), /*threads=*/2);
      CpuAdamW(p_ref.data(), g.data(), m.data(), v.data(), n, Scalars(step), 2, out_ref.data(), true);
    }
    nvme.Read(u, n, m_got.data(), v_got.data());
    EXPECT_EQ(std::memcmp(p.data(), p_ref.data(), n * 4), 0) << "unit of " << n;
    EXPECT_EQ(std::memcmp(out.data(), out_ref.data(), n * 2), 0) << "unit of " << n;
    EXPECT_EQ(std::memcmp(m_got.data(), m.data(), n * 4), 0) << "unit of " << n;
    EXPECT_EQ(std::memcmp(v_got.data(), v.data(), n * 4), 0) << "unit of " << n;
  }
  return nvme.direct();
}

TEST_F(NvmeOffload, StreamedUpdateEqualsInMemoryAtEveryShapeOfUnit) {
  // One element; a page and a bit; two blocks and a short third; nothing.
  const bool direct = ExpectStreamedEqualsInMemory(
      Path("nvme"), {1, kNvmeAlignment / 4 + 3, 2 * kNvmeBlockElements + 12345, 0});
  std::printf("state file in %s: %s\n", Path("nvme").c_str(), direct ? "O_DIRECT" : "buffered");
}

// Where O_DIRECT is refused the file is buffered: the same bytes, through
// the page cache (forced here: tmpfs takes O_DIRECT since Linux 6.6).
TEST_F(NvmeOffload, BufferedStateEqualsInMemoryToo) {
  EXPECT_FALSE(ExpectStreamedEqualsInMemory(Path("nvme"), {kNvmeBlockElements + 5, 77}, /*try_direct=*/false));
}

// tmpfs (/dev/shm): no O_DIRECT before Linux 6.6, so the open falls back.
TEST_F(NvmeOffload, TmpfsWorksWhicheverWayItOpens) {
  if (!fs::is_directory("/dev/shm")) GTEST_SKIP() << "no tmpfs at /dev/shm";
  const fs::path shm = fs::path("/dev/shm") / ("llmplan_nvme_" + std::to_string(::getpid()));
  fs::create_directories(shm);
  const bool direct = ExpectStreamedEqualsInMemory(shm.string(), {kNvmeBlockElements + 5, 77});
  fs::remove_all(shm);
  std::printf("tmpfs state file: %s\n", direct ? "O_DIRECT" : "buffered");
}

TEST_F(NvmeOffload, WriteKeepsPaddingZeroAndReadReturnsIt) {
  const int64_t n = kNvmeBlockElements + 100;
  NvmeOptimizerState nvme(NvmeStatePath(Path("nvme"), 3), {n});
  std::vector<float> m(n - 7, 0.5f), v(n - 7, 0.25f), m_got(n, -1), v_got(n, -1);
  nvme.Write(0, n - 7, m.data(), v.data());
  nvme.Read(0, n, m_got.data(), v_got.data());
  EXPECT_EQ(m_got[0], 0.5f);
  EXPECT_EQ(v_got[n - 8], 0.25f);
  for (int64_t i = n - 7; i < n; ++i) EXPECT_EQ(m_got[i] + v_got[i], 0) << i;
}

TEST_F(NvmeOffload, MissingDirectoryIsOneLineError) {
  try {
    NvmeOptimizerState nvme(NvmeStatePath(Path("no-such-dir"), 0), {1000});
    FAIL() << "a state file in a missing directory";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
  }
  Plan plan = testing::TestPlan("tiny-llama", 2, 1, 32);
  plan.offload = Offload::kOptimizer;
  plan.offload_to = OffloadTier::kNvme;
  EXPECT_THROW(CheckNvmeDirectory(BuildStepProgram(plan, testing::CpuProfile()), "", 1), UserError);
  EXPECT_THROW(CheckNvmeDirectory(BuildStepProgram(plan, testing::CpuProfile()), Path("no-such-dir"), 1), UserError);
  EXPECT_NO_THROW(CheckNvmeDirectory(BuildStepProgram(plan, testing::CpuProfile()), Path("nvme"), 1));
}

// ---------------------------------------------------------------------------
// Training, one process

TrainConfig Config(const Plan& plan, const std::string& run_dir, const std::string& nvme_dir) {
  TrainConfig config = testing::ConfigFor(plan);
  config.steps = 3;
  config.run_dir = run_dir;
  config.device = "cpu";
  config.progress = false;
  config.nvme_dir = nvme_dir;
  return config;
}

std::vector<double> Losses(const std::string& run_dir) {
  std::vector<double> losses;
  std::ifstream in(run_dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) losses.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  return losses;
}

void ExpectSameWeights(const std::string& a, const std::string& b) {
  const auto x = checkpoint::ReadSafetensors(a).tensors, y = checkpoint::ReadSafetensors(b).tensors;
  ASSERT_EQ(x.size(), y.size());
  ASSERT_FALSE(x.empty());
  for (const auto& [name, t] : x) {
    ASSERT_TRUE(y.count(name)) << name;
    EXPECT_TRUE(torch::equal(t, y.at(name))) << name << " differs";
  }
}

TEST_F(NvmeOffload, TrainingEqualsHostOffloadBitForBit) {
  for (Offload offload : {Offload::kOptimizer, Offload::kOptimizerAndParams}) {
    Plan plan = testing::TestPlan("tiny-llama", 2, /*grad_accum=*/3, 32, DType::kBF16);
    plan.offload = offload;
    if (offload == Offload::kOptimizerAndParams) {  // streamed parameters need gathers: full_shard, on one rank
      plan.strategy = ShardingStrategy::kFullShard;
      NormaliseGrouping(plan);
    }
    const std::string name = OffloadName(offload) == "optimizer" ? "optimizer" : "both";
    testing::PatternBatches host_data(plan.micro_batch, plan.seq_len, 200, 5), nvme_data(plan.micro_batch, plan.seq_len, 200, 5);
    Train(Config(plan, Path(name + "-host"), ""), host_data);  // through the staging slots
    plan.offload_to = OffloadTier::kNvme;
    plan.offload_staging = OffloadStaging::kUnit;  // and each form gives the same values
    Train(Config(plan, Path(name + "-nvme"), Path("nvme")), nvme_data);
    const std::vector<double> host = Losses(Path(name + "-host")), nvme = Losses(Path(name + "-nvme"));
    EXPECT_EQ(host.size(), 3u);
    EXPECT_EQ(nvme, host) << name;
    EXPECT_NE(host.front(), host.back()) << "the model must learn, or equal runs prove little";
    ExpectSameWeights(Path(name + "-nvme/final.safetensors"), Path(name + "-host/final.safetensors"));
    EXPECT_TRUE(fs::is_empty(Path("nvme"))) << "state files are scratch: gone after the run";
  }
}

// ---------------------------------------------------------------------------
// `llmplan run` on 2 Gloo ranks: planned with a profile that has disk rates,
// equal to host offload, resumed exactly.

class NvmeRun : public NvmeOffload {
 protected:
  void SetUp() override {
    NvmeOffload::SetUp();
    executor_test::WriteStructuredTokens(Path("tokens.bin"), 60000);
    // The CPU profile with a measured disk (as llmplan profile --nvme-dir writes it).
    nlohmann::json profile = nlohmann::json::parse(executor_test::ReadAll(std::string(LLMPLAN_SOURCE_DIR) + "/profiles/cpu.json"));
    profile["host"]["nvme_read_bytes_per_s"] = 2e9;
    profile["host"]["nvme_write_bytes_per_s"] = 1e9;
    std::ofstream(Path("cpu-nvme.json")) << profile.dump(2);
  }
  std::string MakePlan(const std::string& offload_to) {
    const std::string path = Path("plan-" + offload_to + ".json");
    CommandResult r = RunLlmplan("estimate --model tiny-llama --gpus 2 --gpu " + Path("cpu-nvme.json") +
                                 " --seq 64 --global-batch 8 --micro-batch 2 --strategy full_shard --offload optimizer"
                                 " --offload-to " + offload_to + " --lr 3e-3 --warmup-steps 2 -o " + path);
    EXPECT_EQ(r.status, 0) << r.output;
    return path;
  }
  CommandResult Run(const std::string& plan, int steps, const std::string& out, const std::string& extra = "") {
    return RunLlmplan("run --cpu --plan " + plan + " --data " + Path("tokens.bin") + " --steps " +
                      std::to_string(steps) + " --out " + Path(out) + " " + extra);
  }
};

TEST_F(NvmeRun, EqualsHostOffloadAndResumesExactly) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  const std::string nvme = MakePlan("nvme"), host = MakePlan("host");
  EXPECT_EQ(nlohmann::json::parse(executor_test::ReadAll(nvme))["offload_to"], "nvme");
  CommandResult on_host = Run(host, 5, "host");
  ASSERT_EQ(on_host.status, 0) << on_host.output;
  CommandResult straight = Run(nvme, 5, "straight", "--nvme-dir " + Path("nvme"));
  ASSERT_EQ(straight.status, 0) << straight.output;
  ExpectSameWeights(Path("straight/final.safetensors"), Path("host/final.safetensors"));
  EXPECT_EQ(Losses(Path("straight")), Losses(Path("host")));

  // Stopped after step 3 (its checkpoint holds m and v read from the files),
  // resumed to 5 (written back into fresh files).
  CommandResult first = Run(nvme, 3, "resumed", "--nvme-dir " + Path("nvme") + " --ckpt-dir " + Path("ckpt"));
  ASSERT_EQ(first.status, 0) << first.output;
  CommandResult second = Run(nvme, 5, "resumed", "--nvme-dir " + Path("nvme") + " --ckpt-dir " + Path("ckpt") + " --resume");
  ASSERT_EQ(second.status, 0) << second.output;
  ExpectSameWeights(Path("resumed/final.safetensors"), Path("straight/final.safetensors"));
  EXPECT_EQ(Losses(Path("resumed")), Losses(Path("straight")));
  // The checkpoint's AdamW state equals the host-offloaded run's at the same
  // step: resumed by a host-offload plan, it also ends equal.
  CommandResult as_host = Run(host, 5, "as-host", "--resume-from " + Path("ckpt/step-00000003"));
  ASSERT_EQ(as_host.status, 0) << as_host.output;
  ExpectSameWeights(Path("as-host/final.safetensors"), Path("host/final.safetensors"));
}

TEST_F(NvmeRun, BadInputIsOneLine) {
  const std::string nvme = MakePlan("nvme"), host = MakePlan("host");
  const std::pair<CommandResult, std::string> cases[] = {
      {Run(nvme, 1, "a"), "--nvme-dir DIR"},
      {Run(nvme, 1, "b", "--nvme-dir " + Path("missing")), "is not a directory"},
      {Run(host, 1, "c", "--nvme-dir " + Path("nvme")), "keeps it in host memory"},
      {RunLlmplan("estimate --model tiny-llama --gpus 1 --gpu cpu --offload optimizer --offload-to nvme"),
       "no NVMe read/write rates"},
      {RunLlmplan("estimate --model tiny-llama --gpus 1 --gpu " + Path("cpu-nvme.json") +
                  " --offload params --offload-to nvme"),
       "--offload optimizer or optimizer+params"},
  };
  for (const auto& [result, expected] : cases) {
    EXPECT_NE(result.status, 0) << result.output;
    const auto lines = LlmplanErrorLines(result.output);
    ASSERT_EQ(lines.size(), 1u) << result.output;
    EXPECT_NE(lines[0].find(expected), std::string::npos) << lines[0];
  }
}

}  // namespace
}  // namespace llmplan::executor
