// The checkpoint's building blocks, without training: the CRC-32C that
// guards every file, the manifest's validating parser, the store's atomic
// commit and pruning, the damage checks a resume runs before loading, and
// the sharded writer's cleanup after a failed save.
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <ATen/ATen.h>

#include "executor/checkpoint/checkpoint_store.h"
#include "executor/checkpoint/crc32c.h"
#include "executor/checkpoint/manifest.h"
#include "executor/checkpoint/sharded_checkpoint.h"
#include "executor/model/llama_model.h"
#include "executor/optimizer/adamw.h"
#include "executor/sharding/flat_unit.h"
#include "base/user_error.h"
#include "planner/model_spec.h"
#include "planner/plan.h"

namespace llmplan::checkpoint {
namespace {

namespace fs = std::filesystem;

TEST(Crc32c, MatchesTheStandardCheckValues) {
  // RFC 3720 (iSCSI) B.4 and the common "123456789" check value.
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
  std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(Crc32cText(0xE3069283u), "crc32c:e3069283");
}

TEST(Crc32c, ExtendingEqualsOnePass) {
  std::string text;
  for (int i = 0; i < 1000; ++i) text += static_cast<char>(i * 7 + 3);
  const uint32_t whole = Crc32c(text.data(), text.size());
  for (size_t cut : {0, 1, 7, 8, 9, 500, 999, 1000}) {
    EXPECT_EQ(Crc32cExtend(Crc32c(text.data(), cut), text.data() + cut, text.size() - cut), whole) << cut;
  }
}

CheckpointManifest SmallManifest() {
  CheckpointManifest m;
  m.step = 7;
  m.data_position = 56;
  m.tokens_seen = 7 * 512;
  m.seed = 1234;
  m.model_name = "tiny";
  m.saved_gpus = 2;
  m.saved_strategy = "full_shard";
  m.saved_shard_group_size = 2;
  m.created_utc = "2026-11-30T00:00:00Z";
  CheckpointUnit u;
  u.name = "embed";
  u.numel = 10;
  u.params = {{"model.embed_tokens.weight", {5, 2}}};
  u.pieces = {{"shard-00000-of-00002.safetensors", 0, 5}, {"shard-00001-of-00002.safetensors", 5, 5}};
  m.units = {u};
  m.files = {{"shard-00000-of-00002.safetensors", 100, 0xdeadbeef}, {"shard-00001-of-00002.safetensors", 100, 1}};
  return m;
}

TEST(Manifest, RoundTrips) {
  const CheckpointManifest m = SmallManifest();
  const CheckpointManifest back = ParseManifest(ManifestToJson(m).dump(), "m");
  EXPECT_EQ(back.step, 7);
  EXPECT_EQ(back.data_position, 56);
  EXPECT_EQ(back.seed, 1234u);
  ASSERT_EQ(back.units.size(), 1u);
  EXPECT_EQ(back.units[0].params[0].shape, (std::vector<int64_t>{5, 2}));
  ASSERT_EQ(back.units[0].pieces.size(), 2u);
  EXPECT_EQ(back.units[0].pieces[1].begin, 5);
  EXPECT_EQ(back.files[0].crc32c, 0xdeadbeefu);
}

// Each mutation must be refused with a one-line message naming the problem.
TEST(Manifest, RefusesWhatWouldLoadWrongValues) {
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> mutate;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"gap", [](nlohmann::json& j) { j["units"][0]["pieces"][1]["begin"] = 6; }, "starts at 6, expected 5"},
      {"short", [](nlohmann::json& j) { j["units"][0]["pieces"][1]["count"] = 4; }, "cover 9 of 10"},
      {"numel", [](nlohmann::json& j) { j["units"][0]["numel"] = 11; }, "params hold 10"},
      {"unknown file", [](nlohmann::json& j) { j["units"][0]["pieces"][0]["file"] = "other"; }, "not in files"},
      {"path", [](nlohmann::json& j) { j["files"][0]["name"] = "../../etc/passwd"; }, "not a plain file name"},
      {"version", [](nlohmann::json& j) { j["version"] = 99; }, "version 99"},
      {"format", [](nlohmann::json& j) { j["format"] = "torch"; }, "format"},
      {"negative", [](nlohmann::json& j) { j["step"] = -1; }, "out of range"},
      {"checksum", [](nlohmann::json& j) { j["files"][0]["checksum"] = "md5:00"; }, "crc32c:<8 hex digits>"},
      {"duplicate", [](nlohmann::json& j) { j["files"][1]["name"] = j["files"][0]["name"]; }, "listed twice"},
      {"huge", [](nlohmann::json& j) { j["units"][0]["params"][0]["shape"] = {1LL << 40, 1LL << 40}; }, "too large"},
      // Well formed, other values: the manifest's own checksum.
      {"step", [](nlohmann::json& j) { j["step"] = j["step"].get<int64_t>() + 1; }, "does not match its contents"},
      {"data position", [](nlohmann::json& j) { j["data_position"] = 7; }, "does not match its contents"},
      {"no checksum", [](nlohmann::json& j) { j.erase("manifest_checksum"); }, "no \"manifest_checksum\""},
  };
  for (const Case& c : cases) {
    nlohmann::json j = ManifestToJson(SmallManifest());
    c.mutate(j);
    try {
      ParseManifest(j.dump(), "ckpt/manifest.json");
      ADD_FAILURE() << c.what << ": accepted";
    } catch (const UserError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(c.message), std::string::npos) << c.what << ": " << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
      EXPECT_EQ(message.rfind("ckpt/manifest.json: invalid checkpoint manifest", 0), 0u) << message;
    }
  }
  EXPECT_THROW(ParseManifest("{not json", "m"), UserError);
  EXPECT_THROW(ParseManifest("[]", "m"), UserError);
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("llmplan_ckpt_store_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A checkpoint of one file holding `text`, committed at `step`.
  std::string Save(const CheckpointStore& store, int64_t step, const std::string& text) {
    const std::string partial = store.Begin(step);
    std::ofstream(partial + "/data.bin", std::ios::binary) << text;
    CheckpointManifest m = SmallManifest();
    m.step = step;
    m.files = {{"data.bin", text.size(), Crc32c(text.data(), text.size())}};
    m.units[0].pieces = {{"data.bin", 0, 10}};
    return store.Commit(step, m);
  }
  fs::path dir_;
};

TEST_F(StoreTest, OnlyCommittedCheckpointsAreListedAndOldOnesPruned) {
  CheckpointStore store(dir_.string());
  EXPECT_FALSE(store.Newest().has_value());
  Save(store, 2, "two");
  Save(store, 4, "four");
  store.Begin(6);  // a save that crashed before its commit
  EXPECT_EQ(store.CompleteSteps(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(*store.Newest(), (dir_ / "step-00000004").string());
  Save(store, 8, "eight");
  store.Prune(2);
  EXPECT_EQ(store.CompleteSteps(), (std::vector<int64_t>{4, 8}));
  EXPECT_FALSE(fs::exists(dir_ / "step-00000006.partial"));
  // The same step again (a resumed run reaching it) replaces it whole.
  Save(store, 8, "EIGHT!");
  const CheckpointManifest m = ReadManifest(store.PathOf(8));
  EXPECT_EQ(m.files[0].bytes, 6u);
  VerifyCheckpointFiles(store.PathOf(8), m);
}

TEST_F(StoreTest, DamagedFilesAreDetectedBeforeLoading) {
  CheckpointStore store(dir_.string());
  const std::string path = Save(store, 3, "0123456789abcdef");
  const CheckpointManifest m = ReadManifest(path);
  VerifyCheckpointFiles(path, m);
  {  // one flipped bit
    std::fstream f(path + "/data.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(5);
    f.put('4');
  }
  try {
    VerifyCheckpointFiles(path, m);
    ADD_FAILURE() << "a damaged file passed";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("has checksum"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("was not loaded"), std::string::npos) << e.what();
  }
  fs::resize_file(path + "/data.bin", 4);  // truncated
  EXPECT_THROW(VerifyCheckpointFiles(path, m), UserError);
  fs::remove(path + "/data.bin");
  EXPECT_THROW(VerifyCheckpointFiles(path, m), UserError);
  // A directory without a manifest is not a checkpoint.
  EXPECT_THROW(ReadManifest(dir_.string()), UserError);
}

TEST_F(StoreTest, AFailedCommitLeavesTheEarlierCheckpoints) {
  CheckpointStore store(dir_.string());
  Save(store, 1, "one");
  const std::string partial = store.Begin(2);
  CheckpointManifest m = SmallManifest();
  m.step = 2;
  m.files = {{"missing.bin", 3, 0}};
  m.units[0].pieces = {{"missing.bin", 0, 10}};
  EXPECT_THROW(store.Commit(2, m), UserError);  // its file cannot be fsynced: not published
  EXPECT_EQ(store.CompleteSteps(), (std::vector<int64_t>{1}));
  EXPECT_FALSE(fs::exists(partial));
}

// A save that fails on rank 0 while rank 1 is still writing: rank 0 waits
// for rank 1's digest before it removes the partial directory, so rank 1's
// late shard cannot leave a stray step-N.partial behind (the hostile test
// found one after a failed run).
TEST_F(StoreTest, ASaveThatFailsOnOneRankLeavesNoPartialDirectory) {
  Plan plan;
  plan.model = PresetModel("tiny-llama");
  plan.profile = "cpu";
  plan.gpus = 2;
  plan.strategy = ShardingStrategy::kFullShard;
  NormaliseGrouping(plan);
  plan.seq_len = 64;
  plan.micro_batch = 2;
  plan.Validate();
  const executor::LlamaModel model(plan.model);
  executor::CheckpointOptions options;
  options.dir = dir_.string();
  options.wait_for_ranks = std::chrono::seconds(60);
  struct Rank {
    std::vector<executor::FlatUnit> units;
    executor::AdamWState state;
  };
  std::vector<Rank> ranks(2);
  for (int r = 0; r < 2; ++r)
    for (int u = 0; u < model.num_units(); ++u) {
      executor::FlatUnitOptions unit_options;
      unit_options.group_size = plan.UnitShardGroup(u);
      unit_options.rank = unit_options.group_size == 1 ? 0 : r;
      ranks[r].units.emplace_back(model.unit_params(u), unit_options, at::Device(at::kCPU));
      const int64_t n = ranks[r].units.back().master().numel();
      ranks[r].state.exp_avg.push_back(at::zeros({n}, at::kFloat));
      ranks[r].state.exp_avg_sq.push_back(at::zeros({n}, at::kFloat));
    }
  // Rank 0's shard cannot be written: a directory holds its file's name.
  const fs::path partial = dir_ / "step-00000002.partial";
  fs::create_directories(partial / "shard-00000-of-00002.safetensors");
  executor::CheckpointWriter rank0(plan, model, 0, options), rank1(plan, model, 1, options);
  const executor::TrainingProgress progress{2, 8, 512};
  std::string error0, error1;
  std::thread first([&] { error0 = rank0.Save(ranks[0].units, ranks[0].state, progress); });
  // Rank 1 comes late: rank 0 has long failed by then.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  error1 = rank1.Save(ranks[1].units, ranks[1].state, progress);
  first.join();
  EXPECT_NE(error0.find("checkpoint at step 2 not saved"), std::string::npos) << error0;
  EXPECT_EQ(error1, "");  // rank 1's own shard was fine
  EXPECT_FALSE(fs::exists(partial)) << "a stray partial directory is left";
  EXPECT_TRUE(CheckpointStore(dir_.string()).CompleteSteps().empty());
}

// --keep-best: a save that makes its checkpoint the best names it in
// best.json after the commit and before pruning, so the best it displaces
// goes (unless among the newest kept) — synchronously and in the background.
// (The hostile run found the displaced best left behind: best.json was
// written after the save had pruned.)
TEST_F(StoreTest, ANewBestLetsTheBestItDisplacesGo) {
  Plan plan;
  plan.model = PresetModel("tiny-llama");
  plan.profile = "cpu";
  plan.seq_len = 64;
  plan.micro_batch = 2;
  plan.Validate();
  const executor::LlamaModel model(plan.model);
  std::vector<executor::FlatUnit> units;
  executor::AdamWState state;
  for (int u = 0; u < model.num_units(); ++u) {
    units.emplace_back(model.unit_params(u), executor::FlatUnitOptions{}, at::Device(at::kCPU));
    const int64_t n = units.back().master().numel();
    state.exp_avg.push_back(at::zeros({n}, at::kFloat));
    state.exp_avg_sq.push_back(at::zeros({n}, at::kFloat));
  }
  for (const bool async : {false, true}) {
    SCOPED_TRACE(async ? "async" : "sync");
    const fs::path dir = dir_ / (async ? "async" : "sync");
    executor::CheckpointOptions options;
    options.dir = dir.string();
    options.keep = 1;
    options.async = async;
    executor::CheckpointWriter writer(plan, model, 0, options);
    const CheckpointStore store(dir.string());
    auto save = [&](int64_t step, std::optional<BestCheckpoint> best) {
      executor::TrainingProgress progress{step, step * 2, step * 128};
      progress.best = best;
      ASSERT_EQ(writer.Save(units, state, progress), "");
      ASSERT_EQ(writer.Wait(), "");
    };
    save(1, BestCheckpoint{1, 3.0});
    save(2, std::nullopt);  // the newest kept, and the best
    EXPECT_EQ(store.CompleteSteps(), (std::vector<int64_t>{1, 2}));
    save(3, BestCheckpoint{3, 2.5});  // displaces 1; 2 is no longer the newest
    EXPECT_EQ(store.CompleteSteps(), (std::vector<int64_t>{3}));
    ASSERT_TRUE(store.Best().has_value());
    EXPECT_EQ(store.Best()->step, 3);
    EXPECT_DOUBLE_EQ(store.Best()->eval_loss, 2.5);
    save(4, std::nullopt);
    EXPECT_EQ(store.CompleteSteps(), (std::vector<int64_t>{3, 4}));
  }
}

}  // namespace
}  // namespace llmplan::checkpoint
