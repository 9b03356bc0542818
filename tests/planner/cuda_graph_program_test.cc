// The step's CUDA graph in the planner (Plan::cuda_graph): which ops the
// graph holds, what the plan file says and refuses, how the cost model and
// the allocator replay price it, and when the search keeps it.
#include <algorithm>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/user_error.h"
#include "planner/cost_model.h"
#include "planner/memory_timeline.h"
#include "planner/model_spec.h"
#include "planner/plan.h"
#include "planner/plan_search.h"
#include "planner/step_program.h"
#include "simulator/evaluate.h"
#include "simulator/reserved_memory.h"
#include "tests/planner/test_support.h"

namespace llmplan {
namespace {

// The SmolLM2-135M shape of the FSDP2 race (no preset: its plan file's model).
ModelSpec Small135m() { return LoadPlan(testing::SourceDir() + "/tools/device/plans/smollm2-135m-1xh100.plan.json").model; }

Plan OneGpu(const ModelSpec& model, int64_t seq_len, int64_t micro_batch, int64_t grad_accum, bool graph,
            ShardingStrategy strategy = ShardingStrategy::kNoShard) {
  Plan p;
  p.model = model;
  p.profile = "h200-sxm-1gpu";
  p.gpus = 1;
  p.gpus_per_node = 1;
  p.strategy = strategy;
  p.seq_len = seq_len;
  p.micro_batch = micro_batch;
  p.grad_accum = grad_accum;
  p.cuda_graph = graph;
  NormaliseGrouping(p);
  p.Validate();
  return p;
}

TEST(CudaGraphProgramTest, TheGraphHoldsTheForwardAndBackwardUpToTheClip) {
  const HardwareProfile gpu = testing::Profile("h200-sxm-1gpu");
  for (const int64_t accum : {1, 3}) {
    for (const ShardingStrategy s : {ShardingStrategy::kNoShard, ShardingStrategy::kFullShard}) {
      SCOPED_TRACE(std::to_string(accum) + " " + StrategyName(s));
      const StepProgram graphed = BuildStepProgram(OneGpu(PresetModel("small-llama"), 512, 4, accum, true, s), gpu);
      const StepProgram plain = BuildStepProgram(OneGpu(PresetModel("small-llama"), 512, 4, accum, false, s), gpu);
      ASSERT_TRUE(graphed.cuda_graph);
      EXPECT_FALSE(plain.cuda_graph);
      ASSERT_EQ(graphed.ops.size(), plain.ops.size());  // the same ops, some of them captured
      size_t captured = 0;
      while (captured < graphed.ops.size() && graphed.ops[captured].captured) ++captured;
      ASSERT_LT(captured, graphed.ops.size());
      // A prefix: nothing after the first op left out is captured, and that
      // op is the clip (the host reads the norm there).
      EXPECT_EQ(graphed.ops[captured].kind, OpKind::kClipGradients);
      for (size_t i = captured; i < graphed.ops.size(); ++i) EXPECT_FALSE(graphed.ops[i].captured) << graphed.ops[i].name;
      int forwards = 0, backwards = 0, norms = 0;
      for (size_t i = 0; i < captured; ++i) {
        forwards += graphed.ops[i].kind == OpKind::kForward;
        backwards += graphed.ops[i].kind == OpKind::kBackward;
        norms += graphed.ops[i].kind == OpKind::kGradNorm;
      }
      const int units = static_cast<int>(graphed.units.size());
      EXPECT_EQ(forwards, units * accum);
      EXPECT_EQ(backwards, units * accum);
      EXPECT_EQ(norms, 1);
      for (const StepOp& op : plain.ops) EXPECT_FALSE(op.captured);
    }
  }
}

TEST(CudaGraphProgramTest, ACpuRunsTheSameProgramWithoutAGraph) {
  const StepProgram p = BuildStepProgram(OneGpu(PresetModel("small-llama"), 512, 4, 1, true), testing::Profile("cpu"));
  EXPECT_FALSE(p.cuda_graph);
  for (const StepOp& op : p.ops) EXPECT_FALSE(op.captured) << op.name;
}

TEST(CudaGraphProgramTest, ThePlanFileKeepsItAndRefusesWhatAGraphCannotReplay) {
  const Plan p = OneGpu(PresetModel("small-llama"), 512, 4, 1, true);
  const nlohmann::json j = PlanToJson(p);
  EXPECT_EQ(j.at("cuda_graph"), true);
  EXPECT_TRUE(PlanFromJson(j, "test").cuda_graph);
  EXPECT_FALSE(PlanToJson(OneGpu(PresetModel("small-llama"), 512, 4, 1, false)).contains("cuda_graph"));
  EXPECT_NE(PlanSummary(p).find("CUDA graph"), std::string::npos);
  auto refused = [](Plan plan, const std::string& says) {
    plan.cuda_graph = true;
    try {
      plan.Validate();
      ADD_FAILURE() << "accepted: " << PlanSummary(plan);
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("drop cuda_graph"), std::string::npos) << e.what();
    }
  };
  Plan two = OneGpu(PresetModel("small-llama"), 512, 4, 1, false);
  two.gpus = 2;
  two.strategy = ShardingStrategy::kFullShard;
  NormaliseGrouping(two);
  refused(two, "2 GPUs");
  Plan offload = OneGpu(PresetModel("small-llama"), 512, 4, 1, false, ShardingStrategy::kFullShard);
  offload.offload = Offload::kOptimizer;
  refused(offload, "offloads");
  Plan documents = OneGpu(PresetModel("small-llama"), 512, 4, 1, false);
  documents.attention = AttentionSpan::kDocuments;
  refused(documents, "documents");
  Plan masked = OneGpu(PresetModel("small-llama"), 512, 4, 1, false);
  masked.trained_fraction = 0.5;
  refused(masked, "loss mask");
}

// The host launches the graph once instead of every kernel: the captured
// ops cost no issue time but the first, and no launch floor. The 135M
// shape's step, whose kernels are many and small, is predicted faster.
TEST(CudaGraphProgramTest, TheHostLaunchesOneGraphAndTheStepIsNoSlower) {
  const HardwareProfile gpu = testing::Profile("h200-sxm-1gpu");
  const Plan plain_plan = OneGpu(Small135m(), 2048, 16, 1, false), graph_plan = OneGpu(Small135m(), 2048, 16, 1, true);
  const StepProgram plain = BuildStepProgram(plain_plan, gpu), graphed = BuildStepProgram(graph_plan, gpu);
  const CostModel cost(gpu);
  double plain_issue = 0, graph_issue = 0;
  for (size_t i = 0; i < graphed.ops.size(); ++i) {
    if (!graphed.ops[i].captured) continue;
    plain_issue += cost.IssueSeconds(plain.ops[i]);
    graph_issue += cost.IssueSeconds(graphed.ops[i]);
    EXPECT_LE(cost.Seconds(graphed.ops[i]), cost.Seconds(plain.ops[i])) << graphed.ops[i].name;
  }
  EXPECT_DOUBLE_EQ(graph_issue, gpu.kernel_launch_s);
  EXPECT_GT(plain_issue, 100 * gpu.kernel_launch_s);
  const Estimate e_plain = EvaluateProgram(plain_plan, gpu, plain), e_graph = EvaluateProgram(graph_plan, gpu, graphed);
  EXPECT_LE(e_graph.time.step_seconds, e_plain.time.step_seconds);
}

// The graph's tensors live in a pool of their own, made after the first
// step's cache is emptied: the steady step holds that pool (every byte the
// captured ops held at once) beside what the rest of the step caches.
// Allocated bytes are the same program's, and the capture stream's
// workspaces. (Emptying the cache can leave
// less reserved than two plain steps, whose second may add a segment.)
TEST(CudaGraphProgramTest, TheAllocatorReplayHoldsTheGraphsPool) {
  const HardwareProfile gpu = testing::Profile("h200-sxm-1gpu");
  for (const int64_t accum : {1, 2}) {
    SCOPED_TRACE(accum);
    const Plan plain_plan = OneGpu(PresetModel("llama3.2-1b"), 4096, 4, accum, false, ShardingStrategy::kFullShard);
    const Plan graph_plan = OneGpu(PresetModel("llama3.2-1b"), 4096, 4, accum, true, ShardingStrategy::kFullShard);
    const StepProgram plain = BuildStepProgram(plain_plan, gpu), graphed = BuildStepProgram(graph_plan, gpu);
    const ReservedMemory rg = ReplayAllocator(graph_plan, graphed, 0);
    const MemoryTimeline allocated = ReplayMemory(graphed);
    // The same program's bytes, and the capture stream's cuBLAS workspaces.
    EXPECT_GT(graphed.persistent.graph_workspaces, 0);
    EXPECT_DOUBLE_EQ(allocated.peak, ReplayMemory(plain).peak + graphed.persistent.graph_workspaces);
    ASSERT_EQ(rg.reserved_after.size(), graphed.ops.size());
    // In the replayed step nothing the graph holds is given back: reserved
    // never drops below the program's peak, even after the update.
    for (const StepOp& op : graphed.ops) EXPECT_GE(rg.reserved_after[op.id], allocated.peak) << op.name;
    EXPECT_GE(rg.peak_reserved, rg.reserved_after.back());
    EXPECT_FALSE(rg.out_of_memory);
    EXPECT_EQ(rg.retries, 0);
  }
}

// The search tries the graph where the profile measured what it does to a
// kernel, keeps it where that is faster, and obeys a pin either way.
TEST(CudaGraphProgramTest, TheSearchKeepsTheGraphWhereTheProfileSaysItIsFaster) {
  HardwareProfile gpu = testing::Profile("h200-sxm-1gpu");
  SearchRequest req;
  req.model = Small135m();
  req.profile = "h200-sxm-1gpu";
  req.gpus = 1;
  req.seq_len = 2048;
  req.global_batch = 16;
  auto search = [&](const SearchRequest& r) {
    return SearchPlans(r, gpu, [&](const Plan& plan) { return EvaluatePlan(plan, gpu); });
  };
  // Not measured: not tried, but a pin is obeyed.
  gpu.graph_kernel_overhead_s = 0;
  EXPECT_FALSE(search(req).best.plan.cuda_graph);
  SearchRequest on = req;
  on.cuda_graph = true;
  EXPECT_TRUE(search(on).best.plan.cuda_graph);
  // Measured cheaper than a queued kernel: kept; dearer: not.
  for (const double ratio : {0.5, 2.0}) {
    SCOPED_TRACE(ratio);
    gpu.graph_kernel_overhead_s = ratio * gpu.kernel_overhead_s;
    const SearchResult free = search(req);
    ASSERT_TRUE(free.found);
    EXPECT_EQ(free.best.plan.cuda_graph, ratio < 1);
    SearchRequest off = req;
    off.cuda_graph = false;
    EXPECT_FALSE(search(off).best.plan.cuda_graph);
  }
  // Never on several GPUs.
  gpu.graph_kernel_overhead_s = 0.5 * gpu.kernel_overhead_s;
  SearchRequest two = req;
  two.gpus = 2;
  two.global_batch = 32;
  EXPECT_FALSE(search(two).best.plan.cuda_graph);
}

// A captured kernel's fixed cost is the graph's, as the profile measured it.
TEST(CudaGraphProgramTest, ACapturedKernelCostsTheGraphsOverhead) {
  HardwareProfile gpu = testing::Profile("h200-sxm-1gpu");
  const StepProgram graphed = BuildStepProgram(OneGpu(Small135m(), 2048, 16, 1, true), gpu);
  const StepOp& forward = *std::find_if(graphed.ops.begin(), graphed.ops.end(),
                                        [](const StepOp& op) { return op.kind == OpKind::kForward && op.unit == 1; });
  ASSERT_TRUE(forward.captured);
  gpu.graph_kernel_overhead_s = 0;
  const double as_queued = CostModel(gpu).Seconds(forward);
  gpu.graph_kernel_overhead_s = 0.25 * gpu.kernel_overhead_s;
  const double replayed = CostModel(gpu).Seconds(forward);
  EXPECT_NEAR(as_queued - replayed, forward.work.launches * 0.75 * gpu.kernel_overhead_s, 1e-12);
}

// estimate --cuda-graph: the plan it writes keeps the pin, the report says
// what the graph holds, and what cannot take a graph is one line of error.
TEST(CudaGraphProgramTest, EstimateTakesThePinAndRefusesWhatCannotReplay) {
  testing::ScratchDir dir;
  const std::string common = "estimate --model small-llama --gpu h200-sxm-1gpu --seq 512 --micro-batch 4 ";
  const testing::CliResult r =
      testing::RunCli(common + "--gpus 1 --global-batch 4 --cuda-graph yes -o '" + dir.File("p.json") + "'", dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("CUDA graph"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("graph_workspaces"), std::string::npos) << r.out;
  EXPECT_TRUE(LoadPlan(dir.File("p.json")).cuda_graph);
  const testing::CliResult off = testing::RunCli(common + "--gpus 1 --global-batch 4 --cuda-graph no", dir);
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_EQ(off.out.find("CUDA graph"), std::string::npos) << off.out;
  testing::ExpectBadInput(common + "--gpus 2 --global-batch 8 --cuda-graph yes", dir);
  testing::ExpectBadInput(common + "--gpus 1 --global-batch 4 --cuda-graph maybe", dir);
  testing::ExpectBadInput(common + "--gpus 1 --global-batch 4 --cuda-graph yes --offload optimizer", dir);
}

}  // namespace
}  // namespace llmplan
