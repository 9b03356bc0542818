// Plan files: JSON round trip, layer lists, and validation of what a plan
// file may say.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "planner/plan.h"
#include "base/user_error.h"
#include "tests/planner/test_support.h"

namespace llmplan {
namespace {

Plan Example() {
  Plan p;
  p.model = PresetModel("qwen2.5-7b");
  p.profile = "h200-sxm";
  p.gpus = 16;
  p.strategy = ShardingStrategy::kHybridShard;
  p.shard_group_size = 8;
  p.seq_len = 4096;
  p.micro_batch = 2;
  p.grad_accum = 4;
  p.offload = Offload::kOptimizer;
  p.checkpoint_layers = {0, 3, 4, 5, 27};
  p.prefetch_depth = 2;
  p.host_memory_per_node_bytes = 2e12;
  p.optimizer.lr = 1e-4;
  p.seed = 7;
  p.Validate();
  return p;
}

TEST(PlanTest, JsonRoundTrip) {
  Plan a = Example();
  a.replicate_edges = true;
  testing::ScratchDir dir;
  SavePlan(a, dir.File("p.json"));
  Plan b = LoadPlan(dir.File("p.json"));
  EXPECT_EQ(PlanToJson(a), PlanToJson(b));
  EXPECT_TRUE(b.replicate_edges);
  EXPECT_EQ(b.UnitShardGroup(0), 1);
  EXPECT_EQ(b.UnitShardGroup(1), b.shard_group_size);
  EXPECT_EQ(b.UnitShardGroup(b.model.layers + 1), 1);
  EXPECT_EQ(b.UnitReplicas(0), b.gpus);
  EXPECT_EQ(b.model.TotalParams(), 7'615'616'512);
  EXPECT_EQ(b.checkpoint_layers, (std::vector<int>{0, 3, 4, 5, 27}));
  EXPECT_EQ(b.GlobalBatch(), 2 * 4 * 16);
  EXPECT_EQ(b.TokensPerStep(), 2 * 4 * 16 * 4096);
  EXPECT_EQ(b.ReplicaGroups(), 2);
  EXPECT_EQ(b.host_memory_per_node_bytes, 2e12);
  EXPECT_EQ(b.GpusOnNode(), 8);
  // The estimate --json shape (plan under "plan") is accepted too.
  nlohmann::json wrapped = {{"plan", PlanToJson(a)}, {"fits", true}};
  EXPECT_EQ(PlanToJson(PlanFromJson(wrapped, "wrapped")), PlanToJson(a));
}

TEST(PlanTest, FusedKernelsByDefaultAndCompositeOnRequest) {
  Plan a = Example();
  EXPECT_TRUE(a.fused_kernels);
  nlohmann::json j = PlanToJson(a);
  EXPECT_EQ(j["fused_kernels"], true);
  j["fused_kernels"] = false;  // what runs recorded before the kernels say
  EXPECT_FALSE(PlanFromJson(j, "composite").fused_kernels);
  j.erase("fused_kernels");  // a plan written before the field: today's executor runs the kernels
  EXPECT_TRUE(PlanFromJson(j, "old").fused_kernels);
  j["fused_kernels"] = "yes";
  EXPECT_THROW(PlanFromJson(j, "typed"), UserError);
  a.fused_kernels = false;
  EXPECT_NE(PlanSummary(a).find("composite kernels"), std::string::npos) << PlanSummary(a);
}

TEST(PlanTest, OffloadStagingIsSlotsUnlessTheFileSaysUnit) {
  Plan a = Example();  // offloads the optimizer
  EXPECT_EQ(a.offload_staging, OffloadStaging::kSlots);
  nlohmann::json j = PlanToJson(a);
  EXPECT_EQ(j["offload_staging"], "slots");
  j["offload_staging"] = "unit";
  const Plan unit = PlanFromJson(j, "unit");
  EXPECT_EQ(unit.offload_staging, OffloadStaging::kUnit);
  EXPECT_TRUE(unit.StagesEveryUnit());
  EXPECT_EQ(PlanToJson(unit), j);
  EXPECT_NE(PlanSummary(unit).find("staged per unit"), std::string::npos) << PlanSummary(unit);
  EXPECT_EQ(PlanSummary(a).find("staged"), std::string::npos) << PlanSummary(a);
  // A plan written before the field (the recorded runs a12, a13): what the
  // executor did then, the slots.
  j.erase("offload_staging");
  EXPECT_EQ(PlanFromJson(j, "old").offload_staging, OffloadStaging::kSlots);
  j["offload_staging"] = "ring";
  try {
    PlanFromJson(j, "typed");
    FAIL() << "offload_staging ring was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("use unit or slots"), std::string::npos) << e.what();
  }
  // Without an offloaded optimizer it means nothing: not written, not refused.
  Plan none = unit;
  none.offload = Offload::kNone;
  EXPECT_NO_THROW(none.Validate());
  EXPECT_FALSE(none.StagesEveryUnit());
  EXPECT_FALSE(PlanToJson(none).contains("offload_staging"));
  EXPECT_EQ(PlanSummary(none).find("staged"), std::string::npos) << PlanSummary(none);
}

TEST(PlanTest, CastAtGatherIsWrittenOnlyWhenOnAndRefusedWithoutGathers) {
  Plan a = Example();
  a.offload = Offload::kNone;
  a.Validate();
  ASSERT_GT(a.shard_group_size, 1);
  nlohmann::json j = PlanToJson(a);
  EXPECT_FALSE(j.contains("cast_at_gather"));  // plan files before it read the same
  EXPECT_FALSE(PlanFromJson(j, "old").cast_at_gather);
  a.cast_at_gather = true;
  a.Validate();
  j = PlanToJson(a);
  EXPECT_EQ(j["cast_at_gather"], true);
  EXPECT_TRUE(PlanFromJson(j, "cast").cast_at_gather);
  EXPECT_NE(PlanSummary(a).find("cast at gather"), std::string::npos) << PlanSummary(a);
  a.offload = Offload::kOptimizer;
  try {
    a.Validate();
    FAIL() << "cast_at_gather with an offloaded optimizer was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("drop cast_at_gather"), std::string::npos) << e.what();
  }
}

TEST(PlanTest, OffloadStagingPerUnitDoesNotGoWithTheDelayedUpdate) {
  Plan p = Example();
  p.grad_accum = 1;
  p.delayed_update = true;
  EXPECT_NO_THROW(p.Validate());  // through the slots
  p.offload_staging = OffloadStaging::kUnit;
  try {
    p.Validate();
    FAIL() << "offload_staging unit with delayed_update was accepted";
  } catch (const UserError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("offload_staging unit does not go with delayed_update"), std::string::npos) << what;
    EXPECT_NE(what.find("use offload_staging slots, or drop delayed_update"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(PlanTest, LayerLists) {
  EXPECT_EQ(ParseLayerList("none", 8), std::vector<int>{});
  EXPECT_EQ(ParseLayerList("all", 4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(ParseLayerList("5,0,3-4,4", 8), (std::vector<int>{0, 3, 4, 5}));
  EXPECT_EQ(FormatLayerList({0, 3, 4, 5, 7}), "0,3-5,7");
  EXPECT_EQ(FormatLayerList({}), "none");
  for (const char* bad : {"5-2", "8", "x", "-1", "1,,2", "1-", "99999999999"})
    EXPECT_THROW(ParseLayerList(bad, 8), UserError) << bad;
}

TEST(PlanTest, ValidateRejectsInconsistentPlans) {
  auto broken = [](auto f) {
    Plan p = Example();
    f(p);
    return p;
  };
  EXPECT_THROW(broken([](Plan& p) { p.shard_group_size = 3; }).Validate(), UserError);   // 16 % 3
  EXPECT_THROW(broken([](Plan& p) { p.shard_group_size = 16; }).Validate(), UserError);  // hybrid of one group
  EXPECT_THROW(broken([](Plan& p) { p.checkpoint_layers = {28}; }).Validate(), UserError);
  EXPECT_THROW(broken([](Plan& p) { p.checkpoint_layers = {3, 1}; }).Validate(), UserError);
  EXPECT_THROW(broken([](Plan& p) { p.micro_batch = 0; }).Validate(), UserError);
  EXPECT_THROW(broken([](Plan& p) { p.seq_len = 0; }).Validate(), UserError);
  EXPECT_THROW(broken([](Plan& p) { p.optimizer.beta2 = 1.0; }).Validate(), UserError);
  EXPECT_THROW(broken([](Plan& p) { p.host_memory_per_node_bytes = -1; }).Validate(), UserError);
  // Every factor in range, but 2^20 GPUs x 2^16 x 2^16 x 2^22 tokens = 2^74 overflows int64.
  EXPECT_THROW(broken([](Plan& p) {
                 p.strategy = ShardingStrategy::kFullShard;
                 p.gpus = p.shard_group_size = 1 << 20;
                 p.micro_batch = p.grad_accum = 65536;
                 p.seq_len = 1 << 22;
               }).Validate(),
               UserError);
}

TEST(PlanTest, NormaliseGrouping) {
  Plan p = Example();
  p.strategy = ShardingStrategy::kFullShard;
  NormaliseGrouping(p);
  EXPECT_EQ(p.shard_group_size, 16);
  p.strategy = ShardingStrategy::kNoShard;
  NormaliseGrouping(p);
  EXPECT_EQ(p.shard_group_size, 1);
  p.strategy = ShardingStrategy::kHybridShard;
  p.shard_group_size = 0;
  NormaliseGrouping(p);
  EXPECT_EQ(p.shard_group_size, 8);  // min(gpus, gpus_per_node)
}

}  // namespace
}  // namespace llmplan
