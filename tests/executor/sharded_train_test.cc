// Sharded multi-process training on the CPU: real ranks (processes) joined by
// real Gloo groups, each running the trainer on its own rows of every global
// micro-batch, must end with the same parameters as one process training on
// the whole batch — for full_shard, shard_grad_op and no_shard on 2 and 3
// ranks (3 ranks: shards padded, the embedding's 32768 values do not split
// evenly), hybrid_shard on 2 x 2 ranks, with the optimizer offloaded, and with
// every rank reading its rows of a token file through the batch loader.
// The comparison is on final.safetensors, which must hold every Hugging Face
// parameter name in its shape.
//
// Tolerance: fp32 compute throughout. Sharded runs sum gradients in another
// order (per rank, then across ranks), so values differ from the reference by
// float rounding that AdamW's normalised update (~lr * sign(m / sqrt(v)))
// does not amplify except where a gradient is within rounding of zero:
// parameters must agree to 2e-5 absolute (2% of lr = 1e-3 after 3 steps;
// typical differences are ~1e-7); losses and global gradient norms to 1e-5
// relative.
//
// A rank re-executes this binary (--gtest_filter=ShardedChild.Run) with the
// torchrun variables set, as comm_test.cc does: forking a process that already
// ran LibTorch's thread pools is not safe.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "executor/checkpoint/safetensors.h"
#include "executor/run/trainer.h"
#include "base/user_error.h"
#include "executor/launcher/launcher.h"
#include "tests/executor/core_test_support.h"
#include "tests/executor/rank_processes.h"
#include "tests/executor/gloo_skip.h"

namespace llmplan::executor {
namespace {

using executor_test::RankExit;
using executor_test::ReadText;
using executor_test::SpawnRankProcess;
using executor_test::WaitRankProcess;

namespace fs = std::filesystem;

constexpr int64_t kSeqLen = 16;
constexpr int64_t kSteps = 3;

// What one job trains: a plan for `world` ranks and its one-process twin.
struct Job {
  std::string preset = "tiny-qwen2";
  ShardingStrategy strategy = ShardingStrategy::kFullShard;
  int world = 2;
  int shard_group = 0;  // hybrid only
  Offload offload = Offload::kNone;
  OffloadStaging offload_staging = OffloadStaging::kSlots;
  double grad_clip = 1.0;
  int64_t micro_batch = 1;  // per rank
  int64_t grad_accum = 2;
  std::vector<int> checkpoint_layers;
  std::string tokens;  // a token file: ranks read it through the batch loader
  bool replicate_edges = false;
  bool cast_at_gather = false;

  std::string Encode() const {
    nlohmann::json j = {{"preset", preset},
                        {"strategy", StrategyName(strategy)},
                        {"world", world},
                        {"shard_group", shard_group},
                        {"offload", OffloadName(offload)},
                        {"offload_staging", OffloadStagingName(offload_staging)},
                        {"grad_clip", grad_clip},
                        {"micro_batch", micro_batch},
                        {"grad_accum", grad_accum},
                        {"checkpoint_layers", checkpoint_layers},
                        {"tokens", tokens},
                        {"replicate_edges", replicate_edges},
                        {"cast_at_gather", cast_at_gather}};
    return j.dump();
  }
  static Job Decode(const std::string& text) {
    auto j = nlohmann::json::parse(text);
    Job job;
    job.preset = j["preset"].get<std::string>();
    job.strategy = ParseStrategy(j["strategy"].get<std::string>());
    job.world = j["world"].get<int>();
    job.shard_group = j["shard_group"].get<int>();
    job.offload = ParseOffload(j["offload"].get<std::string>());
    job.offload_staging = ParseOffloadStaging(j["offload_staging"].get<std::string>());
    job.grad_clip = j["grad_clip"].get<double>();
    job.micro_batch = j["micro_batch"].get<int64_t>();
    job.grad_accum = j["grad_accum"].get<int64_t>();
    job.checkpoint_layers = j["checkpoint_layers"].get<std::vector<int>>();
    job.tokens = j["tokens"].get<std::string>();
    job.replicate_edges = j["replicate_edges"].get<bool>();
    job.cast_at_gather = j["cast_at_gather"].get<bool>();
    return job;
  }

  Plan ShardedPlan() const {
    Plan p = testing::TestPlan(preset, micro_batch, grad_accum, kSeqLen);
    p.gpus = world;
    p.gpus_per_node = world;
    p.strategy = strategy;
    NormaliseGrouping(p);
    if (strategy == ShardingStrategy::kHybridShard) p.shard_group_size = shard_group;
    p.offload = offload;
    p.offload_staging = offload_staging;
    p.checkpoint_layers = checkpoint_layers;
    p.replicate_edges = replicate_edges;
    p.cast_at_gather = cast_at_gather;
    p.optimizer.lr = 1e-3;
    p.optimizer.grad_clip = grad_clip;
    p.Validate();
    return p;
  }
  // One process on the concatenated batch: micro_batch x world rows.
  Plan ReferencePlan() const {
    Plan p = testing::TestPlan(preset, micro_batch * world, grad_accum, kSeqLen);
    p.optimizer.lr = 1e-3;
    p.optimizer.grad_clip = grad_clip;
    p.Validate();
    return p;
  }
};

// Rank `rank`'s rows of each global micro-batch of `world * micro_batch`
// random samples — the batch loader's layout (rank r reads rows
// r*micro_batch ..).
class RankRows : public BatchSource {
 public:
  RankRows(int64_t vocab, int64_t micro_batch, int world, int rank)
      : vocab_(vocab), micro_batch_(micro_batch), world_(world), rank_(rank) {}
  at::Tensor Next() override {
    at::Tensor global = testing::RandomTokens(micro_batch_ * world_, kSeqLen, vocab_, 1000 + calls_++);
    return global.narrow(0, rank_ * micro_batch_, micro_batch_).clone();
  }
  int64_t position() const override { return calls_ * micro_batch_ * world_; }
  void Seek(int64_t next_sample) override { calls_ = next_sample / (micro_batch_ * world_); }

 private:
  int64_t vocab_, micro_batch_;
  int world_, rank_;
  int64_t calls_ = 0;
};

TrainConfig Config(const Plan& plan, const std::string& run_dir) {
  TrainConfig config = testing::ConfigFor(plan);
  config.steps = kSteps;
  config.run_dir = run_dir;
  config.device = "cpu";
  config.progress = false;
  return config;
}

// ---------------------------------------------------------------------------
// Ranks as child processes



// Runs `job` on job.world ranks writing to `run_dir`; every rank must exit 0.
void RunRanks(const Job& job, const fs::path& run_dir) {
  const int port = PickFreePort();
  auto log_path = [&](int rank) { return (run_dir.parent_path() / ("rank" + std::to_string(rank) + ".log")).string(); };
  const std::map<std::string, std::string> env = {{"LLMPLAN_SHARD_CHILD", job.Encode()},
                                                  {"LLMPLAN_SHARD_RUN_DIR", run_dir.string()},
                                                  {"OMP_NUM_THREADS", "1"}};  // ranks share two cores
  std::vector<pid_t> pids;
  for (int rank = 0; rank < job.world; ++rank)
    pids.push_back(SpawnRankProcess("ShardedChild.Run", rank, job.world, port, log_path(rank), env));
  const auto start = std::chrono::steady_clock::now();
  for (int rank = 0; rank < job.world; ++rank) {
    const RankExit exit = WaitRankProcess(pids[rank], start, std::chrono::seconds(60));
    const std::string log = ReadText(log_path(rank));
    EXPECT_FALSE(exit.timed_out) << "rank " << rank << " timed out:\n" << log;
    EXPECT_EQ(exit.exit_status, 0) << "rank " << rank << " failed:\n" << log;
  }
}

TEST(ShardedChild, Run) {
  const char* encoded = std::getenv("LLMPLAN_SHARD_CHILD");
  if (encoded == nullptr) GTEST_SKIP() << "runs only as a rank of a multi-process test";
  at::set_num_threads(1);
  const Job job = Job::Decode(encoded);
  const Plan plan = job.ShardedPlan();
  const TrainConfig config = Config(plan, std::getenv("LLMPLAN_SHARD_RUN_DIR"));
  if (!job.tokens.empty()) {
    TrainOnTokenFile(config, job.tokens);  // the loader picks this rank's rows from RANK / WORLD_SIZE
    return;
  }
  const int rank = std::atoi(std::getenv("RANK"));
  RankRows data(plan.model.vocab, plan.micro_batch, job.world, rank);
  Train(config, data);
}

// ---------------------------------------------------------------------------
// Checks

// One metric per step from metrics.jsonl.
std::vector<double> Logged(const fs::path& run_dir, const std::string& key) {
  std::ifstream in(run_dir / "metrics.jsonl");
  std::vector<double> values;
  std::string line;
  while (std::getline(in, line)) values.push_back(nlohmann::json::parse(line)[key].get<double>());
  return values;
}

// Every parameter of `expected` is in `got` with its shape; returns the
// largest absolute difference.
double MaxDifference(const fs::path& got_path, const fs::path& expected_path) {
  auto got = checkpoint::ReadSafetensors(got_path.string());
  auto expected = checkpoint::ReadSafetensors(expected_path.string());
  EXPECT_EQ(got.tensors.size(), expected.tensors.size());
  double worst = 0;
  for (const auto& [name, want] : expected.tensors) {
    auto it = got.tensors.find(name);
    if (it == got.tensors.end()) {
      ADD_FAILURE() << name << " missing from " << got_path;
      continue;
    }
    EXPECT_EQ(it->second.sizes(), want.sizes()) << name;
    EXPECT_EQ(it->second.scalar_type(), at::kFloat) << name;
    if (it->second.sizes() != want.sizes()) continue;
    worst = std::max(worst, (it->second - want).abs().max().item<double>());
  }
  return worst;
}

class ShardedTraining : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("llmplan_sharded_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // Trains the one-process reference for `job` (once per model and batch
  // in a test) and returns its run directory.
  fs::path Reference(const Job& job) {
    const fs::path run = dir_ / ("reference-" + job.preset + "-" + std::to_string(job.micro_batch * job.world) + "x" +
                                 std::to_string(job.grad_accum) + "-clip" + std::to_string(job.grad_clip));
    if (fs::exists(run / "final.safetensors")) return run;
    const Plan plan = job.ReferencePlan();
    if (!job.tokens.empty()) {
      TrainOnTokenFile(Config(plan, run.string()), job.tokens);
      return run;
    }
    RankRows data(plan.model.vocab, plan.micro_batch, 1, 0);
    Train(Config(plan, run.string()), data);
    return run;
  }

  // Runs `job` on its ranks and checks it against the reference.
  fs::path Check(const Job& job, const std::string& name) {
    const fs::path run = dir_ / name / "run";
    fs::create_directories(run.parent_path());
    RunRanks(job, run);
    const fs::path ref = Reference(job);
    EXPECT_TRUE(fs::exists(run / "final.safetensors")) << name;
    if (!fs::exists(run / "final.safetensors")) return run;
    const double diff = MaxDifference(run / "final.safetensors", ref / "final.safetensors");
    EXPECT_LT(diff, 2e-5) << name << ": parameters differ from one process on the whole batch";
    // AdamW's update barely depends on the gradient's scale, so parameters
    // alone would not catch a wrong averaging factor: the global gradient
    // norm (before clipping) does.
    for (const char* key : {"loss", "grad_norm"}) {
      const auto got = Logged(run, key), want = Logged(ref, key);
      EXPECT_EQ(got.size(), static_cast<size_t>(kSteps)) << name;
      for (size_t s = 0; s < std::min(got.size(), want.size()); ++s)
        EXPECT_NEAR(got[s], want[s], 1e-5 * want[s]) << name << " " << key << " step " << s;
    }
    std::printf("%s: max |param - reference| = %.3g\n", name.c_str(), diff);
    return run;
  }

  fs::path dir_;
};

TEST_F(ShardedTraining, TwoRanksEveryStrategyEqualsOneProcess) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  Job job;  // tiny-qwen2: tied embeddings and q/k/v biases
  job.strategy = ShardingStrategy::kFullShard;
  job.checkpoint_layers = {1};  // a recompute after a re-gather
  Check(job, "full_shard");
  job.checkpoint_layers = {};
  job.strategy = ShardingStrategy::kShardGradOp;
  Check(job, "shard_grad_op");
  job.strategy = ShardingStrategy::kNoShard;
  Check(job, "no_shard");
}

TEST_F(ShardedTraining, ThreeRanksUnevenShardsEqualOneProcess) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  Job job;
  job.preset = "tiny-llama";  // untied: an lm_head unit of its own
  job.world = 3;
  job.grad_accum = 1;
  {
    // The padding path is really taken: some unit does not split in 3.
    const Plan plan = job.ShardedPlan();
    LlamaModel model(plan.model);
    bool uneven = false;
    for (int u = 0; u < model.num_units(); ++u) uneven |= model.UnitNumel(u) % 3 != 0;
    ASSERT_TRUE(uneven);
  }
  for (ShardingStrategy s : {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp, ShardingStrategy::kNoShard}) {
    job.strategy = s;
    Check(job, StrategyName(s));
  }
}

TEST_F(ShardedTraining, HybridTwoByTwoEqualsOneProcess) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  Job job;
  job.strategy = ShardingStrategy::kHybridShard;
  job.world = 4;
  job.shard_group = 2;
  job.grad_accum = 2;
  Check(job, "hybrid_shard");
}

TEST_F(ShardedTraining, OffloadedOptimizerEqualsDeviceOptimizer) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  Job job;
  job.offload = Offload::kOptimizer;
  const fs::path offloaded = Check(job, "full_shard_offload");
  job.offload = Offload::kNone;
  const fs::path resident = Check(job, "full_shard");
  // Same reductions in the same order; only the AdamW arithmetic's path differs.
  EXPECT_LT(MaxDifference(offloaded / "final.safetensors", resident / "final.safetensors"), 1e-6);
}

TEST_F(ShardedTraining, OffloadedParametersEqualDeviceParameters) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  // Two Gloo ranks: the fp32 master on the host around the device AdamW
  // (params) equals the resident run to the bit; streaming the compute shard
  // up before every gather (optimizer+params) equals offloading the optimizer
  // alone to the bit.
  Job job;
  job.offload = Offload::kParams;
  const fs::path params = Check(job, "full_shard_offload_params");
  job.offload = Offload::kNone;
  const fs::path resident = Check(job, "full_shard_resident");
  EXPECT_EQ(MaxDifference(params / "final.safetensors", resident / "final.safetensors"), 0);
  job.offload = Offload::kOptimizerAndParams;
  const fs::path both = Check(job, "full_shard_offload_both");
  job.offload = Offload::kOptimizer;
  const fs::path optimizer = Check(job, "full_shard_offload_optimizer");
  EXPECT_EQ(MaxDifference(both / "final.safetensors", optimizer / "final.safetensors"), 0);
}

TEST_F(ShardedTraining, OffloadStagingPerUnitEqualsSlotsBitForBit) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  // Two Gloo ranks, every step clipping (0.05): the gradients staged per
  // unit in the backward (after the reduce-scatter, or no_shard's
  // all-reduce) give the same parameters as the slots, to the bit.
  Job job;
  job.grad_clip = 0.05;
  job.offload = Offload::kOptimizer;
  for (ShardingStrategy s : {ShardingStrategy::kFullShard, ShardingStrategy::kNoShard}) {
    job.strategy = s;
    job.offload_staging = OffloadStaging::kUnit;
    const fs::path unit = Check(job, StrategyName(s) + "_unit");
    job.offload_staging = OffloadStaging::kSlots;
    const fs::path slots = Check(job, StrategyName(s) + "_slots");
    EXPECT_EQ(MaxDifference(unit / "final.safetensors", slots / "final.safetensors"), 0) << StrategyName(s);
    EXPECT_EQ(Logged(unit, "loss"), Logged(slots, "loss")) << StrategyName(s);
  }
  // Streamed parameters (optimizer+params) staged per unit: the same as the
  // optimizer alone through the slots.
  job.strategy = ShardingStrategy::kFullShard;
  job.offload = Offload::kOptimizerAndParams;
  job.offload_staging = OffloadStaging::kUnit;
  const fs::path both = Check(job, "full_shard_both_unit");
  EXPECT_EQ(MaxDifference(both / "final.safetensors", dir_ / "full_shard_slots" / "run" / "final.safetensors"), 0);
}

TEST_F(ShardedTraining, ReplicatedEdgesEqualOneProcess) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  // Per-unit strategy: the embedding and head whole on every rank (all-
  // reduced over the job once per step, counted once in the gradient norm)
  // while the blocks are sharded. Tied embeddings (tiny-qwen2: the head's
  // backward writes the embedding's gradient) and untied (tiny-llama).
  Job job;
  job.replicate_edges = true;
  job.checkpoint_layers = {1};
  Check(job, "full_shard_edges_tied");
  job.checkpoint_layers = {};
  job.strategy = ShardingStrategy::kShardGradOp;
  job.offload = Offload::kOptimizer;  // the CPU AdamW writes the edges' resident compute copy
  Check(job, "shard_grad_op_edges_offload");
  job.offload = Offload::kParams;
  Check(job, "shard_grad_op_edges_offload_params");
  job.offload = Offload::kNone;
  job.preset = "tiny-llama";
  job.strategy = ShardingStrategy::kHybridShard;
  job.world = 4;
  job.shard_group = 2;
  Check(job, "hybrid_edges_untied");
}

TEST_F(ShardedTraining, CastAtGatherEqualsTheKeptShardBitForBit) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  // Each all-gather sends a cast of the fp32 master made just before it
  // (Plan::cast_at_gather) instead of the compute-dtype shard AdamW wrote:
  // the same values, so the same run to the bit — with a recompute after a
  // re-gather, gathers kept through the backward (shard_grad_op), replicas
  // (hybrid) and edges kept whole beside cast blocks.
  struct Case {
    std::string name;
    ShardingStrategy strategy;
    int world, shard_group;
    bool edges;
    std::vector<int> checkpoint_layers;
  };
  for (const Case& c : {Case{"full_shard", ShardingStrategy::kFullShard, 2, 0, false, {1}},
                        Case{"shard_grad_op", ShardingStrategy::kShardGradOp, 2, 0, false, {}},
                        Case{"hybrid_edges", ShardingStrategy::kHybridShard, 4, 2, true, {}}}) {
    Job job;
    job.strategy = c.strategy;
    job.world = c.world;
    job.shard_group = c.shard_group;
    job.replicate_edges = c.edges;
    job.checkpoint_layers = c.checkpoint_layers;
    const fs::path kept = Check(job, c.name + "_kept");
    job.cast_at_gather = true;
    const fs::path cast = Check(job, c.name + "_cast");
    std::ifstream written(cast / "plan.json");
    EXPECT_TRUE(PlanFromJson(nlohmann::json::parse(written), "the run's plan").cast_at_gather) << c.name;
    EXPECT_EQ(MaxDifference(cast / "final.safetensors", kept / "final.safetensors"), 0) << c.name;
    EXPECT_EQ(Logged(cast, "loss"), Logged(kept, "loss")) << c.name;
  }
}

TEST_F(ShardedTraining, RanksReadingATokenFileEqualOneProcessOnTheWholeBatch) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  // The batch loader gives rank r rows r*micro_batch.. of every global
  // micro-batch (shuffled windows, same seed): together the ranks see exactly
  // the samples one process with micro_batch x world sees.
  const fs::path tokens = dir_ / "tokens.u16";
  {
    at::Tensor ids = testing::RandomTokens(1, 4000, 512, 77).to(at::kShort);  // uint16 values < 512
    std::ofstream out(tokens, std::ios::binary);
    out.write(static_cast<const char*>(ids.data_ptr()), static_cast<std::streamsize>(ids.numel() * 2));
  }
  Job job;
  job.tokens = tokens.string();
  Check(job, "full_shard_token_file");
}

TEST_F(ShardedTraining, FinalWeightsHoldEveryHuggingFaceParameter) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  // One process: final.safetensors has every HF name of the model, in shape.
  const Plan plan = testing::TestPlan("tiny-llama", 2, 1, kSeqLen);
  RankRows data(plan.model.vocab, plan.micro_batch, 1, 0);
  const fs::path run = dir_ / "one";
  TrainConfig config = Config(plan, run.string());
  config.steps = 1;
  Train(config, data);
  auto weights = checkpoint::ReadSafetensors((run / "final.safetensors").string());
  LlamaModel model(plan.model);
  size_t count = 0;
  for (int u = 0; u < model.num_units(); ++u) {
    for (const ParamShape& p : model.unit_params(u)) {
      ++count;
      ASSERT_TRUE(weights.tensors.count(p.name)) << p.name;
      EXPECT_EQ(weights.tensors[p.name].sizes(), at::IntArrayRef(p.shape)) << p.name;
    }
  }
  EXPECT_EQ(weights.tensors.size(), count);
  EXPECT_TRUE(weights.tensors.count("lm_head.weight"));
  EXPECT_TRUE(weights.tensors.count("model.embed_tokens.weight"));
  EXPECT_TRUE(weights.tensors.count("model.layers.3.mlp.down_proj.weight"));
}

TEST_F(ShardedTraining, WorldSizeOtherThanThePlanIsRefused) {
  Plan plan = Job{}.ShardedPlan();  // 2 GPUs; this process is one
  RankRows data(plan.model.vocab, plan.micro_batch, 1, 0);
  try {
    Train(Config(plan, ""), data);
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("the plan is for 2 GPU(s) but 1 process(es) were started"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace llmplan::executor
