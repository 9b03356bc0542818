// GPU islands in the plan (HardwareProfile::islands): a node of two 4-GPU
// NVLink islands joined by a 25 GB/s PCIe link, as a profile would record
// it. A collective whose group crosses islands is priced at that link's
// pace, one inside an island by the NVLink curve; the program marks which
// groups cross; and the search keeps shard groups inside an island, where
// on the same node without islands it shards over all eight.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/user_error.h"
#include "planner/plan_search.h"
#include "planner/program_builder.h"
#include "simulator/evaluate.h"
#include "tests/planner/test_support.h"

namespace llmplan {
namespace {

constexpr double kCrossIsland = 25e9;

HardwareProfile TwoIslands() {
  HardwareProfile p = testing::Profile("h200-sxm");
  p.islands = {{0, 1, 2, 3}, {4, 5, 6, 7}};
  p.cross_island_bytes_per_s = kCrossIsland;
  return p;
}

TEST(GpuIslandsTest, ACollectiveAcrossIslandsTakesTheSlowLinksTime) {
  const HardwareProfile p = TwoIslands();
  const double bytes = 1e9;
  const double nvlink = p.CollectiveSeconds(CollectiveOp::kAllGather, bytes, 8, false);
  const double across = p.CollectiveSeconds(CollectiveOp::kAllGather, bytes, 8, false, true);
  EXPECT_DOUBLE_EQ(across, std::max(nvlink, bytes * 7.0 / 8.0 / kCrossIsland));
  EXPECT_GT(across, 5 * nvlink);  // 25 GB/s against NVLink's hundreds
  // An all-reduce moves twice a gather's traffic through the link.
  EXPECT_DOUBLE_EQ(p.CollectiveSeconds(CollectiveOp::kAllReduce, bytes, 8, false, true), 2 * bytes * 7.0 / 8.0 / kCrossIsland);
  // Across nodes the inter-node curve prices it, islands or not.
  EXPECT_DOUBLE_EQ(p.CollectiveSeconds(CollectiveOp::kAllGather, bytes, 16, true, true),
                   p.CollectiveSeconds(CollectiveOp::kAllGather, bytes, 16, true));
  EXPECT_TRUE(p.SpansIslands({0, 4}));
  EXPECT_TRUE(p.SpansIslands({0, 1, 2, 3, 4}));
  EXPECT_FALSE(p.SpansIslands({4, 5, 6, 7}));
  EXPECT_FALSE(testing::Profile("h200-sxm").SpansIslands({0, 7}));  // no islands: one per node
}

TEST(GpuIslandsTest, IslandsAreWrittenReadAndChecked) {
  nlohmann::json j = HardwareProfileToJson(TwoIslands());
  const HardwareProfile back = HardwareProfileFromJson(j, "test");
  EXPECT_EQ(back.islands, TwoIslands().islands);
  EXPECT_DOUBLE_EQ(back.cross_island_bytes_per_s, kCrossIsland);
  // Without them (every shipped profile): one island per node.
  EXPECT_FALSE(HardwareProfileToJson(testing::Profile("h200-sxm"))["topology"].contains("islands"));
  for (const nlohmann::json& bad : {nlohmann::json{{0, 1, 2, 3}, {3, 4, 5, 6, 7}}, nlohmann::json{{0, 1, 2}, {4, 5, 6, 7}},
                                    nlohmann::json{{0, 1, 2, 3}, {4, 5, 6, 8}}, nlohmann::json{{0, 1}, "x"}}) {
    nlohmann::json k = j;
    k["topology"]["islands"] = bad;
    EXPECT_THROW(HardwareProfileFromJson(k, "test"), UserError) << bad.dump();
  }
  j["topology"]["cross_island_bytes_per_s"] = 0;
  EXPECT_THROW(HardwareProfileFromJson(j, "test"), UserError);
}

Plan EightGpuPlan(ShardingStrategy strategy, int group) {
  Plan plan;
  plan.model = PresetModel("llama3-8b");
  plan.profile = "h200-sxm";
  plan.gpus = 8;
  plan.gpus_per_node = 8;
  plan.strategy = strategy;
  plan.shard_group_size = group;
  plan.seq_len = 4096;
  plan.micro_batch = 1;
  plan.grad_accum = 2;
  NormaliseGrouping(plan);
  return plan;
}

TEST(GpuIslandsTest, TheProgramMarksTheGroupsThatCrossAnIsland) {
  const HardwareProfile p = TwoIslands();
  auto crossing = [&](const Plan& plan, OpKind kind) {
    int yes = 0, no = 0;
    for (const StepOp& op : BuildStepProgram(plan, p).ops)
      if (op.kind == kind) (op.work.spans_islands ? yes : no)++;
    return std::make_pair(yes, no);
  };
  // full_shard over 8: every gather and reduce-scatter crosses.
  EXPECT_EQ(crossing(EightGpuPlan(ShardingStrategy::kFullShard, 8), OpKind::kAllGather).second, 0);
  EXPECT_GT(crossing(EightGpuPlan(ShardingStrategy::kFullShard, 8), OpKind::kAllGather).first, 0);
  // hybrid with groups of 4: the shard groups stay inside an island, the
  // replicas' all-reduce (ranks 0 and 4) crosses.
  const Plan hybrid = EightGpuPlan(ShardingStrategy::kHybridShard, 4);
  EXPECT_EQ(crossing(hybrid, OpKind::kReduceScatter).first, 0);
  EXPECT_GT(crossing(hybrid, OpKind::kAllReduce).first, 0);
  // The same plan on a node without islands: nothing crosses.
  for (const StepOp& op : BuildStepProgram(hybrid, testing::Profile("h200-sxm")).ops) EXPECT_FALSE(op.work.spans_islands);
}

TEST(GpuIslandsTest, TheSearchKeepsShardGroupsInsideAnIsland) {
  SearchRequest req;
  req.model = PresetModel("llama3-8b");
  req.profile = "h200-sxm";
  req.gpus = 8;
  req.seq_len = 4096;
  req.global_batch = 64;
  auto best = [&](const HardwareProfile& profile) {
    const SearchResult r = SearchPlans(req, profile, [&](const Plan& p) { return EvaluatePlan(p, profile); });
    EXPECT_TRUE(r.found) << r.why_none;
    return r.best;
  };
  const HardwareProfile islands = TwoIslands();
  const Estimate one_island = best(testing::Profile("h200-sxm"));
  const Estimate two = best(islands);
  EXPECT_GT(one_island.plan.shard_group_size, 4) << "the baseline shards over the node";
  EXPECT_LE(two.plan.shard_group_size, 4) << StrategyName(two.plan.strategy) << " " << two.plan.shard_group_size;
  // And it is the better choice there: the node-wide sharding, priced on the islands, is slower.
  const Estimate node_wide = EvaluatePlan(one_island.plan, islands);
  EXPECT_LT(two.time.step_seconds, node_wide.time.step_seconds);
  EXPECT_LT(one_island.time.step_seconds, node_wide.time.step_seconds);
}

}  // namespace
}  // namespace llmplan
