// RePlanAdvice: what a run that ran out of memory tells the user to plan
// next — one change that lowers memory, the cheapest in time first, with the
// plan's other pins kept.
#include <string>

#include <gtest/gtest.h>

#include "planner/replan_advice.h"
#include "planner/model_spec.h"
#include "planner/plan.h"

namespace llmplan {
namespace {

Plan Sharded(int64_t micro_batch) {
  Plan p;
  p.model = PresetModel("llama3-8b");
  p.profile = "h200-sxm";
  p.gpus = 2;
  p.strategy = ShardingStrategy::kFullShard;
  NormaliseGrouping(p);
  p.micro_batch = micro_batch;
  p.grad_accum = 4;
  p.Validate();
  return p;
}

TEST(RePlanAdviceTest, AShardedGpuPlanCastsAtGatherBeforeItShrinksTheMicroBatch) {
  Plan plan = Sharded(2);
  const std::string first = RePlanAdvice(plan, true);
  EXPECT_NE(first.find("casting each gather's shard"), std::string::npos) << first;
  EXPECT_NE(first.find("--strategy full_shard --micro-batch 2 --cast-at-gather yes --offload none"), std::string::npos)
      << first;
  // Short of host memory (a CPU run's, whose cast would run in line): the
  // micro-batch, as before.
  EXPECT_NE(RePlanAdvice(plan, false).find("a smaller micro-batch"), std::string::npos) << RePlanAdvice(plan, false);
  // Already casting: the next step down keeps the cast pinned.
  plan.cast_at_gather = true;
  const std::string next = RePlanAdvice(plan, true);
  EXPECT_NE(next.find("a smaller micro-batch"), std::string::npos) << next;
  EXPECT_NE(next.find("--cast-at-gather yes --micro-batch 1 --offload none"), std::string::npos) << next;
  // No gathers to cast for (one GPU): straight to the micro-batch.
  Plan one = Sharded(2);
  one.gpus = 1;
  NormaliseGrouping(one);
  one.Validate();
  EXPECT_NE(RePlanAdvice(one, true).find("a smaller micro-batch"), std::string::npos) << RePlanAdvice(one, true);
  // An offloaded optimizer's update comes back as the bf16 shard: no cast.
  Plan offloaded = Sharded(2);
  offloaded.offload = Offload::kOptimizer;
  offloaded.Validate();
  EXPECT_EQ(RePlanAdvice(offloaded, true).find("--cast-at-gather"), std::string::npos) << RePlanAdvice(offloaded, true);
}

}  // namespace
}  // namespace llmplan
