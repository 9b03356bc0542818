// Structure of the step program per strategy: which collectives run, how many
// times, on which micro-batch; recompute only for checkpointed layers; deps
// point backwards; every allocation is freed by the end of the step.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "base/user_error.h"
#include "planner/cost_model.h"
#include "planner/plan.h"
#include "planner/step_program.h"
#include "simulator/simulator.h"
#include "tests/planner/test_support.h"

namespace llmplan {
namespace {

using testing::Profile;

// tiny-llama has 4 blocks: units are embed(0), blocks 1..4, head(5).
constexpr int kL = 4;
constexpr int kUnits = kL + 2;
constexpr int kAccum = 3;

Plan TinyPlan(int gpus, ShardingStrategy s, int group = 0, Offload o = Offload::kNone) {
  Plan p;
  p.model = PresetModel("tiny-llama");
  p.profile = "h100-sxm-80g";
  p.gpus = gpus;
  p.gpus_per_node = 8;
  p.strategy = s;
  p.shard_group_size = group;
  p.offload = o;
  p.seq_len = 64;
  p.micro_batch = 2;
  p.grad_accum = kAccum;
  NormaliseGrouping(p);
  p.Validate();
  return p;
}

StepProgram Build(const Plan& p) { return BuildStepProgram(p, Profile("h100-sxm-80g")); }

// Whether op `op` waits for op `target`, directly or through other ops
// (deps point backwards, so only ids above the target need walking).
bool WaitsFor(const StepProgram& p, int op, int target) {
  std::vector<int> stack = {op};
  std::set<int> seen;
  while (!stack.empty()) {
    const int d = stack.back();
    stack.pop_back();
    if (d == target) return true;
    if (d < target || !seen.insert(d).second) continue;
    stack.insert(stack.end(), p.ops[d].deps.begin(), p.ops[d].deps.end());
  }
  return false;
}

int Count(const StepProgram& prog, OpKind kind, int unit = -2, int mb = -2) {
  int n = 0;
  for (const auto& op : prog.ops)
    if (op.kind == kind && (unit == -2 || op.unit == unit) && (mb == -2 || op.micro_batch == mb)) ++n;
  return n;
}

TEST(StepProgramTest, FullShardGathersBlocksTwicePerMicroBatch) {
  StepProgram p = Build(TinyPlan(4, ShardingStrategy::kFullShard));
  for (int mb = 0; mb < kAccum; ++mb) {
    EXPECT_EQ(Count(p, OpKind::kAllGather, 0, mb), 1) << "embedding: forward only";
    for (int l = 0; l < kL; ++l) EXPECT_EQ(Count(p, OpKind::kAllGather, p.BlockUnit(l), mb), 2) << "block " << l;
    EXPECT_EQ(Count(p, OpKind::kAllGather, p.HeadUnit(), mb), 1) << "head: kept from forward to backward";
    // One reduce-scatter per unit per micro-batch.
    for (int u = 0; u < kUnits; ++u) EXPECT_EQ(Count(p, OpKind::kReduceScatter, u, mb), 1);
    EXPECT_EQ(Count(p, OpKind::kForward, -2, mb), kUnits);
    EXPECT_EQ(Count(p, OpKind::kBackward, -2, mb), kUnits);
  }
  // Total gathers: (1 + 2*4 + 1) * 3 = 30; releases match gathers.
  EXPECT_EQ(Count(p, OpKind::kAllGather), (1 + 2 * kL + 1) * kAccum);
  EXPECT_EQ(Count(p, OpKind::kRelease), Count(p, OpKind::kAllGather));
  // One replica group: no gradient all-reduce; the norm's scalar over the
  // shard group, the loss over the world.
  EXPECT_EQ(Count(p, OpKind::kAllReduce), 0);
  EXPECT_EQ(Count(p, OpKind::kAllReduceGradNorm), 1);
  EXPECT_EQ(Count(p, OpKind::kAllReduceLoss), 1);
  // Every reduce-scatter's shard is accumulated once.
  EXPECT_EQ(Count(p, OpKind::kAccumulateShard), Count(p, OpKind::kReduceScatter));
  EXPECT_EQ(Count(p, OpKind::kOptimizerStep), kUnits);
  EXPECT_EQ(Count(p, OpKind::kRecompute), 0);
  for (const auto& op : p.ops)
    if (op.kind == OpKind::kAllGather || op.kind == OpKind::kReduceScatter) { EXPECT_EQ(op.work.group_size, 4); }
}

TEST(StepProgramTest, ShardGradOpGathersOncePerMicroBatch) {
  StepProgram p = Build(TinyPlan(4, ShardingStrategy::kShardGradOp));
  for (int mb = 0; mb < kAccum; ++mb)
    for (int u = 0; u < kUnits; ++u) {
      EXPECT_EQ(Count(p, OpKind::kAllGather, u, mb), 1) << "unit " << u;
      EXPECT_EQ(Count(p, OpKind::kReduceScatter, u, mb), 1) << "unit " << u;
    }
  EXPECT_EQ(Count(p, OpKind::kAllGather), kUnits * kAccum);
}

TEST(StepProgramTest, NoShardAllReducesEachUnitOnceOnTheLastMicroBatch) {
  StepProgram p = Build(TinyPlan(4, ShardingStrategy::kNoShard));
  EXPECT_EQ(Count(p, OpKind::kAllGather), 0);
  EXPECT_EQ(Count(p, OpKind::kReduceScatter), 0);
  EXPECT_EQ(Count(p, OpKind::kRelease), 0);
  for (int u = 0; u < kUnits; ++u) {
    EXPECT_EQ(Count(p, OpKind::kAllReduce, u), 1) << "unit " << u;
    EXPECT_EQ(Count(p, OpKind::kAllReduce, u, kAccum - 1), 1) << "unit " << u << " on the last micro-batch";
  }
  // Shards of one GPU: no norm all-reduce; each backward's gradient is
  // reduced locally, the last micro-batch's pre-scaled by 1/4 for the mean.
  EXPECT_EQ(Count(p, OpKind::kAllReduce), kUnits);
  EXPECT_EQ(Count(p, OpKind::kAllReduceGradNorm), 0);
  EXPECT_EQ(Count(p, OpKind::kLocalReduce), kUnits * kAccum);
  for (const auto& op : p.ops)
    if (op.kind == OpKind::kLocalReduce) {
      EXPECT_DOUBLE_EQ(op.gradient_scale, op.micro_batch == kAccum - 1 ? 0.25 : 1.0) << op.name;
    }
  for (const auto& op : p.ops)
    if (op.kind == OpKind::kAllReduce && op.unit >= 0) {
      EXPECT_EQ(op.work.group_size, 4);
      EXPECT_DOUBLE_EQ(op.work.collective_bytes, 4.0 * static_cast<double>(p.units[op.unit].padded_params));
    }
}

TEST(StepProgramTest, HybridReduceScattersEveryMicroBatchAndAllReducesOnTheLast) {
  StepProgram p = Build(TinyPlan(8, ShardingStrategy::kHybridShard, 4));
  for (int u = 0; u < kUnits; ++u) {
    for (int mb = 0; mb < kAccum; ++mb) EXPECT_EQ(Count(p, OpKind::kReduceScatter, u, mb), 1);
    EXPECT_EQ(Count(p, OpKind::kAllReduce, u), 1);
    EXPECT_EQ(Count(p, OpKind::kAllReduce, u, kAccum - 1), 1);
  }
  EXPECT_EQ(Count(p, OpKind::kAllReduce), kUnits);
  for (const auto& op : p.ops) {
    if (op.kind == OpKind::kReduceScatter || op.kind == OpKind::kAllGather) {
      EXPECT_EQ(op.work.group_size, 4);
      EXPECT_EQ(op.group, CommGroup::kShard);
    }
    if (op.kind == OpKind::kAllReduce) {
      EXPECT_EQ(op.work.group_size, 2);  // 8 / 4 groups
      EXPECT_EQ(op.group, CommGroup::kReplica);
    }
    if (op.kind == OpKind::kAllReduceGradNorm) {
      EXPECT_EQ(op.work.group_size, 4);  // each shard once: the shard group, not the world
      EXPECT_EQ(op.group, CommGroup::kShard);
    }
    if (op.kind == OpKind::kAllReduceLoss) {
      EXPECT_EQ(op.work.group_size, 8);
      EXPECT_EQ(op.group, CommGroup::kWorld);
    }
  }
  // Each cross-group all-reduce follows the accumulation of its unit's last
  // reduce-scatter, which was pre-scaled by 1/2 (two replica groups).
  std::map<int, int> last_accumulate;
  for (const auto& op : p.ops)
    if (op.kind == OpKind::kAccumulateShard) last_accumulate[op.unit] = op.id;
  for (const auto& op : p.ops)
    if (op.kind == OpKind::kAllReduce) {
      const int acc = last_accumulate.at(op.unit);
      EXPECT_NE(std::find(op.deps.begin(), op.deps.end(), acc), op.deps.end()) << op.name;
      EXPECT_DOUBLE_EQ(p.ops[acc].gradient_scale, 0.5);
    }
}

// Per-unit strategy: with replicate_edges the embedding and head are whole
// on every GPU — no gathers or reduce-scatters for them; their gradients are
// reduced locally every micro-batch (the last one pre-scaled by 1/world) and
// all-reduced over the whole job once — while the blocks keep their sharding.
TEST(StepProgramTest, ReplicatedEdgesAreWholeOnEveryGpuAndAllReducedOverTheJob) {
  for (int group : {8, 4}) {  // full_shard over 8, hybrid 4 x 2
    Plan plan = TinyPlan(8, group == 8 ? ShardingStrategy::kFullShard : ShardingStrategy::kHybridShard, group);
    plan.replicate_edges = true;
    plan.Validate();
    const StepProgram p = Build(plan);
    const Plan plain = TinyPlan(8, plan.strategy, group);
    const StepProgram q = Build(plain);
    for (int u : {0, p.HeadUnit()}) {
      EXPECT_EQ(p.units[u].group_size, 1);
      EXPECT_TRUE(p.units[u].resident);
      EXPECT_EQ(p.units[u].padded_params, p.units[u].params);
      EXPECT_EQ(Count(p, OpKind::kAllGather, u), 0);
      EXPECT_EQ(Count(p, OpKind::kRelease, u), 0);
      EXPECT_EQ(Count(p, OpKind::kReduceScatter, u), 0);
      EXPECT_EQ(Count(p, OpKind::kLocalReduce, u), kAccum);
      EXPECT_EQ(Count(p, OpKind::kAllReduce, u), 1);
      for (const auto& op : p.ops) {
        if (op.unit != u) continue;
        if (op.kind == OpKind::kAllReduce) {
          EXPECT_EQ(op.group, CommGroup::kWorld);
          EXPECT_EQ(op.work.group_size, 8);
          EXPECT_EQ(op.micro_batch, kAccum - 1);
          EXPECT_DOUBLE_EQ(op.work.collective_bytes, 4.0 * static_cast<double>(p.units[u].params));
        }
        if (op.kind == OpKind::kLocalReduce)
          EXPECT_DOUBLE_EQ(op.gradient_scale, op.micro_batch == kAccum - 1 ? 1.0 / 8 : 1.0) << op.name;
      }
    }
    // The blocks are untouched: the same collectives, groups and counts.
    for (int l = 0; l < kL; ++l) {
      const int u = p.BlockUnit(l);
      EXPECT_EQ(p.units[u].group_size, group);
      EXPECT_FALSE(p.units[u].resident);
      for (OpKind k : {OpKind::kAllGather, OpKind::kReduceScatter, OpKind::kAllReduce, OpKind::kAccumulateShard})
        EXPECT_EQ(Count(p, k, u), Count(q, k, u)) << OpKindName(k) << " block " << l;
    }
    // The norm is still summed over the shard group (the executor counts a
    // whole unit on the group's first rank only).
    EXPECT_EQ(Count(p, OpKind::kAllReduceGradNorm), 1);
    // Memory: each edge's whole fp32 master, gradient and AdamW state (16
    // bytes per parameter) and its bf16 compute copy instead of 1/group of it.
    double edges = 0;
    for (int u : {0, p.HeadUnit()}) edges += static_cast<double>(p.units[u].params);
    const double edge_shards = static_cast<double>(q.units[0].padded_params + q.units[q.HeadUnit()].padded_params) / group;
    const auto& a = p.persistent;
    const auto& b = q.persistent;
    EXPECT_NEAR(a.param_shards + a.grad_shards + a.optimizer_state - (b.param_shards + b.grad_shards + b.optimizer_state),
                16 * (edges - edge_shards), 1.0);
    EXPECT_NEAR(a.compute_params - b.compute_params, 2 * (edges - edge_shards), 1.0);
  }
}

TEST(StepProgramTest, ReplicatedEdgesNeedShardedBlocksAndNoStreamedParameters) {
  Plan p = TinyPlan(4, ShardingStrategy::kNoShard);
  p.replicate_edges = true;
  EXPECT_THROW(p.Validate(), UserError);
  p = TinyPlan(1, ShardingStrategy::kFullShard);
  p.replicate_edges = true;
  EXPECT_THROW(p.Validate(), UserError);
  p = TinyPlan(4, ShardingStrategy::kFullShard, 0, Offload::kOptimizerAndParams);
  p.replicate_edges = true;
  EXPECT_THROW(p.Validate(), UserError);
  for (Offload o : {Offload::kOptimizer, Offload::kParams}) {
    p = TinyPlan(4, ShardingStrategy::kShardGradOp, 0, o);
    p.replicate_edges = true;
    EXPECT_NO_THROW(p.Validate()) << OffloadName(o);
    const StepProgram program = Build(p);
    EXPECT_EQ(Count(program, OpKind::kAllGather, 0), 0) << OffloadName(o);
  }
}

TEST(StepProgramTest, OffloadOptimizerCopiesDownStepsOnCpuAndCopiesUp) {
  for (ShardingStrategy strategy : {ShardingStrategy::kFullShard, ShardingStrategy::kNoShard}) {
    SCOPED_TRACE(StrategyName(strategy));
    StepProgram p = Build(TinyPlan(4, strategy, 0, Offload::kOptimizer));
    EXPECT_EQ(Count(p, OpKind::kOptimizerStep), 0);
    for (int u = 0; u < kUnits; ++u) {
      EXPECT_EQ(Count(p, OpKind::kCopyGradsToHost, u), 1) << "d2h grads, unit " << u;
      EXPECT_EQ(Count(p, OpKind::kCpuOptimizerStep, u), 1);
      EXPECT_EQ(Count(p, OpKind::kCopyParamsToDevice, u), 1) << "h2d params, unit " << u;
    }
    int clip = -1;
    std::map<int, int> cpu, h2d, first_forward, d2h;
    for (const auto& op : p.ops) {
      if (op.kind == OpKind::kClipGradients) clip = op.id;
      if (op.kind == OpKind::kForward && op.micro_batch == 0) first_forward[op.unit] = op.id;
      if (op.kind == OpKind::kCopyGradsToHost) {
        // The previous step's fp32 gradient shard, unclipped (clipping only
        // reads the norm: no device bytes to scale), into staging slot
        // u % kOffloadStagingSlots once the update before it has read it.
        EXPECT_EQ(op.stream, StreamKind::kDeviceToHost);
        d2h[op.unit] = op.id;
        EXPECT_EQ(clip, -1) << op.name << " waits for the clipping";
        EXPECT_EQ(first_forward.count(op.unit), 0u) << op.name << " after the unit's forward";
        EXPECT_DOUBLE_EQ(op.work.copy_bytes,
                         4.0 * static_cast<double>(p.units[op.unit].padded_params) / p.units[op.unit].group_size);
        const int reuses = op.unit - kOffloadStagingSlots;
        if (reuses >= 0)
          EXPECT_NE(std::find(op.deps.begin(), op.deps.end(), cpu.at(reuses)), op.deps.end()) << op.name;
      }
      if (op.kind == OpKind::kCpuOptimizerStep) {
        // The previous step's gradients: nothing computed in this step
        // before it, only its own copy down and (slot reuse) the copy up of
        // the unit that last used its compute-dtype slot.
        EXPECT_EQ(op.stream, StreamKind::kCpu);
        std::vector<int> expected = {d2h.at(op.unit)};
        if (op.unit >= kOffloadStagingSlots) expected.push_back(h2d.at(op.unit - kOffloadStagingSlots));
        std::sort(expected.begin(), expected.end());
        EXPECT_EQ(op.deps, expected) << op.name;
        cpu[op.unit] = op.id;
      }
      if (op.kind == OpKind::kCopyParamsToDevice) {
        EXPECT_EQ(op.stream, StreamKind::kHostToDevice);
        EXPECT_NE(std::find(op.deps.begin(), op.deps.end(), cpu.at(op.unit)), op.deps.end());
        EXPECT_DOUBLE_EQ(op.work.copy_bytes,
                         2.0 * static_cast<double>(p.units[op.unit].padded_params) / p.units[op.unit].group_size);
        h2d[op.unit] = op.id;
      }
      if (op.kind == OpKind::kClipGradients) EXPECT_EQ(op.work.elementwise_bytes, 0.0);
    }
    ASSERT_GE(clip, 0);
    // Host updates run beside the first forward, one unit ahead of it: unit
    // u + 1's before unit u's forward, after unit u - 1's; the unit's first
    // use of its parameters waits for its copy up.
    for (int u = 0; u < kUnits; ++u) {
      if (u + 1 < kUnits) EXPECT_LT(cpu.at(u + 1), first_forward.at(u)) << "unit " << u;
      if (u >= 2) EXPECT_GT(cpu.at(u), first_forward.at(u - 2)) << "unit " << u;
      EXPECT_TRUE(WaitsFor(p, first_forward.at(u), h2d.at(u)))
          << "forward of unit " << u << " does not wait for its h2d params";
      EXPECT_LT(d2h.at(u), clip);
    }
  }
}

// Staged per unit (offload_staging unit): each unit's gradient goes down in
// its step's backward, right after its last reduction, into its own host
// buffer; the next step's host update reads only host memory, so it waits
// for nothing of its step, and its parameters go up as with the slots.
TEST(StepProgramTest, OffloadOptimizerStagedPerUnitCopiesDownInTheBackward) {
  for (ShardingStrategy strategy : {ShardingStrategy::kFullShard, ShardingStrategy::kNoShard}) {
    for (Offload offload : {Offload::kOptimizer, Offload::kOptimizerAndParams}) {
      if (offload == Offload::kOptimizerAndParams && strategy == ShardingStrategy::kNoShard) continue;
      SCOPED_TRACE(StrategyName(strategy) + " " + OffloadName(offload));
      Plan plan = TinyPlan(4, strategy, 0, offload);
      plan.offload_staging = OffloadStaging::kUnit;
      plan.Validate();
      StepProgram p = Build(plan);
      int clip = -1;
      std::map<int, int> cpu, h2d, first_forward, d2h, last_backward, last_reduction;
      for (const auto& op : p.ops) {
        switch (op.kind) {
          case OpKind::kClipGradients: clip = op.id; break;
          case OpKind::kForward:
            if (op.micro_batch == 0) first_forward[op.unit] = op.id;
            break;
          case OpKind::kBackward:
            if (op.micro_batch == kAccum - 1) last_backward[op.unit] = op.id;
            break;
          case OpKind::kLocalReduce:
          case OpKind::kAccumulateShard:
          case OpKind::kAllReduce:
            if (op.micro_batch == kAccum - 1) last_reduction[op.unit] = op.id;  // the last in program order
            break;
          case OpKind::kCopyGradsToHost:
            EXPECT_EQ(op.stream, StreamKind::kDeviceToHost);
            EXPECT_EQ(d2h.count(op.unit), 0u) << op.name << " twice";
            d2h[op.unit] = op.id;
            // Right after the unit's last reduction (the backward still
            // running), before the clipping: unclipped.
            EXPECT_NE(std::find(op.deps.begin(), op.deps.end(), last_reduction.at(op.unit)), op.deps.end()) << op.name;
            EXPECT_GT(op.id, last_backward.at(op.unit)) << op.name;
            EXPECT_EQ(clip, -1) << op.name << " waits for the clipping";
            EXPECT_DOUBLE_EQ(op.work.copy_bytes,
                             4.0 * static_cast<double>(p.units[op.unit].padded_params) / p.units[op.unit].group_size);
            break;
          case OpKind::kCpuOptimizerStep:
            EXPECT_EQ(op.stream, StreamKind::kCpu);
            EXPECT_TRUE(op.deps.empty()) << op.name << ": the previous step's gradient is on the host already";
            cpu[op.unit] = op.id;
            break;
          case OpKind::kCopyParamsToDevice:
            EXPECT_NE(std::find(op.deps.begin(), op.deps.end(), cpu.at(op.unit)), op.deps.end()) << op.name;
            h2d[op.unit] = op.id;
            break;
          default: break;
        }
      }
      ASSERT_GE(clip, 0);
      ASSERT_EQ(d2h.size(), static_cast<size_t>(kUnits));
      ASSERT_EQ(cpu.size(), static_cast<size_t>(kUnits));
      // optimizer+params: the update writes the host shard the gathers bring up.
      EXPECT_EQ(h2d.size(), offload == Offload::kOptimizer ? static_cast<size_t>(kUnits) : 0u);
      for (int u = 0; u < kUnits; ++u) {
        if (u + 1 < kUnits) EXPECT_LT(cpu.at(u + 1), first_forward.at(u)) << "unit " << u;
        if (u >= 2) EXPECT_GT(cpu.at(u), first_forward.at(u - 2)) << "unit " << u;
        EXPECT_TRUE(WaitsFor(p, first_forward.at(u), offload == Offload::kOptimizer ? h2d.at(u) : cpu.at(u)))
            << "forward of unit " << u << " does not wait for its update";
        EXPECT_LT(d2h.at(u), clip);
        // The update has read the buffer before this step's gradient
        // overwrites it: it holds the host (rule 4), which issues the copy
        // later in the program.
        EXPECT_LT(cpu.at(u), d2h.at(u)) << "unit " << u;
      }
      EXPECT_DOUBLE_EQ(p.host.grad_staging, 4 * [&] {
        double shard = 0;
        for (const Unit& unit : p.units) shard += static_cast<double>(unit.padded_params) / unit.group_size;
        return shard;
      }());
    }
  }
}

// Delayed update: nothing of this step waits for the host update; the
// previous step's updates run in backward order right after each unit's
// backward (the host works while the GPU runs the units below), each unit's
// previous gradient goes down before this step's first reduction overwrites
// it, and its new parameters go up only after this step's backward of it.
TEST(StepProgramTest, DelayedUpdateRunsBesideTheBackwardAndWaitsForNothingBeforeIt) {
  for (ShardingStrategy strategy : {ShardingStrategy::kFullShard, ShardingStrategy::kNoShard}) {
    SCOPED_TRACE(StrategyName(strategy));
    Plan plan = TinyPlan(4, strategy, 0, Offload::kOptimizer);
    plan.grad_accum = 1;
    plan.delayed_update = true;
    plan.Validate();
    StepProgram p = Build(plan);
    std::map<int, int> cpu, h2d, d2h, backward, first_reduction, forward;
    std::vector<int> cpu_order;
    for (const auto& op : p.ops) {
      switch (op.kind) {
        case OpKind::kCpuOptimizerStep: cpu[op.unit] = op.id; cpu_order.push_back(op.unit); break;
        case OpKind::kCopyParamsToDevice: h2d[op.unit] = op.id; break;
        case OpKind::kCopyGradsToHost: d2h[op.unit] = op.id; break;
        case OpKind::kBackward: backward[op.unit] = op.id; break;
        case OpKind::kForward: forward[op.unit] = op.id; break;
        case OpKind::kLocalReduce:
        case OpKind::kAccumulateShard: first_reduction.emplace(op.unit, op.id); break;
        default: break;
      }
    }
    ASSERT_EQ(cpu.size(), static_cast<size_t>(kUnits));
    ASSERT_EQ(h2d.size(), static_cast<size_t>(kUnits));
    ASSERT_EQ(d2h.size(), static_cast<size_t>(kUnits));
    // Backward order: head first, embedding last.
    for (int k = 0; k < kUnits; ++k) EXPECT_EQ(cpu_order[k], kUnits - 1 - k);
    auto waits_for = [&](int op, int target) { return WaitsFor(p, op, target); };
    for (int u = 0; u < kUnits; ++u) {
      SCOPED_TRACE("unit " + std::to_string(u));
      // The forward and backward compute on the parameters the step found.
      for (const auto& [v, update] : cpu) {
        EXPECT_FALSE(waits_for(forward.at(u), update)) << "forward waits for the update of unit " << v;
        EXPECT_FALSE(waits_for(backward.at(u), update)) << "backward waits for the update of unit " << v;
      }
      EXPECT_GT(cpu.at(u), backward.at(u)) << "issued after the unit's backward";
      EXPECT_TRUE(waits_for(h2d.at(u), backward.at(u))) << "new parameters up before the old ones were used";
      EXPECT_TRUE(waits_for(h2d.at(u), cpu.at(u)));
      EXPECT_TRUE(waits_for(first_reduction.at(u), d2h.at(u))) << "gradient overwritten before it came down";
      EXPECT_TRUE(waits_for(cpu.at(u), d2h.at(u)));
      // Slot reuse, two units apart in backward order.
      if (u + kOffloadStagingSlots < kUnits) {
        EXPECT_TRUE(waits_for(cpu.at(u), h2d.at(u + kOffloadStagingSlots)));
        EXPECT_TRUE(waits_for(d2h.at(u), cpu.at(u + kOffloadStagingSlots)));
      }
    }
  }
}

TEST(StepProgramTest, DelayedUpdateNeedsTheHostOptimizerOffloadAndOneMicroBatch) {
  Plan plan = TinyPlan(1, ShardingStrategy::kFullShard, 0, Offload::kOptimizer);
  plan.delayed_update = true;  // TinyPlan accumulates 3
  auto message = [](const Plan& p) {
    try {
      p.Validate();
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message(plan).find("needs one micro-batch per step (grad_accum 3 here)"), std::string::npos) << message(plan);
  plan.grad_accum = 1;
  EXPECT_EQ(message(plan), "");
  plan.offload = Offload::kParams;
  EXPECT_NE(message(plan).find("use offload optimizer, or drop delayed_update"), std::string::npos) << message(plan);
  plan.offload = Offload::kOptimizerAndParams;
  EXPECT_NE(message(plan).find("streams parameters from the host shard"), std::string::npos) << message(plan);
  plan.offload = Offload::kOptimizer;
  plan.offload_to = OffloadTier::kNvme;
  EXPECT_NE(message(plan).find("not supported with offload_to nvme"), std::string::npos) << message(plan);
  plan.offload_to = OffloadTier::kHost;
  plan.offload_staging = OffloadStaging::kUnit;
  EXPECT_NE(message(plan).find("use offload_staging slots, or drop delayed_update"), std::string::npos)
      << message(plan);
}

TEST(StepProgramTest, RecomputeOnlyForCheckpointedLayers) {
  Plan plan = TinyPlan(4, ShardingStrategy::kFullShard);
  plan.checkpoint_layers = {1, 3};
  StepProgram p = Build(plan);
  EXPECT_EQ(Count(p, OpKind::kRecompute), 2 * kAccum);
  for (int mb = 0; mb < kAccum; ++mb) {
    EXPECT_EQ(Count(p, OpKind::kRecompute, p.BlockUnit(1), mb), 1);
    EXPECT_EQ(Count(p, OpKind::kRecompute, p.BlockUnit(3), mb), 1);
    EXPECT_EQ(Count(p, OpKind::kRecompute, p.BlockUnit(0), mb), 0);
    EXPECT_EQ(Count(p, OpKind::kRecompute, p.BlockUnit(2), mb), 0);
  }
  // A recompute runs just before its block's backward (only the shard
  // accumulations that backward waits for may come between), after the re-gather.
  for (const auto& op : p.ops) {
    if (op.kind != OpKind::kRecompute) continue;
    size_t next = op.id + 1;
    while (p.ops[next].kind == OpKind::kAccumulateShard || p.ops[next].kind == OpKind::kAllGather ||
           p.ops[next].kind == OpKind::kRelease)
      ++next;
    EXPECT_EQ(p.ops[next].kind, OpKind::kBackward);
    EXPECT_EQ(p.ops[next].unit, op.unit);
    EXPECT_NE(std::find(p.ops[next].deps.begin(), p.ops[next].deps.end(), op.id), p.ops[next].deps.end());
  }
  Plan none = TinyPlan(4, ShardingStrategy::kFullShard);
  EXPECT_EQ(Count(Build(none), OpKind::kRecompute), 0);
}

// Every configuration the builder knows, for the invariants below.
std::vector<Plan> AllConfigurations() {
  std::vector<Plan> plans;
  for (Offload o : {Offload::kNone, Offload::kOptimizer, Offload::kParams, Offload::kOptimizerAndParams}) {
    plans.push_back(TinyPlan(4, ShardingStrategy::kFullShard, 0, o));
    plans.push_back(TinyPlan(4, ShardingStrategy::kShardGradOp, 0, o));
    // Streamed parameters need gathers (Plan::Validate refuses no_shard).
    if (o != Offload::kOptimizerAndParams) plans.push_back(TinyPlan(4, ShardingStrategy::kNoShard, 0, o));
    plans.push_back(TinyPlan(8, ShardingStrategy::kHybridShard, 4, o));
    plans.push_back(TinyPlan(1, ShardingStrategy::kFullShard, 0, o));
    Plan ck = TinyPlan(4, ShardingStrategy::kFullShard, 0, o);
    ck.checkpoint_layers = {0, 2, 3};
    plans.push_back(ck);
    Plan tied = TinyPlan(4, ShardingStrategy::kFullShard, 0, o);
    tied.model = PresetModel("tiny-qwen2");  // tied embedding, 3 blocks
    plans.push_back(tied);
    for (int depth : {0, 2}) {
      Plan pf = TinyPlan(4, ShardingStrategy::kFullShard, 0, o);
      pf.prefetch_depth = depth;
      plans.push_back(pf);
    }
    if (OffloadsOptimizer(o)) {
      for (ShardingStrategy s : {ShardingStrategy::kFullShard, ShardingStrategy::kNoShard}) {
        if (o == Offload::kOptimizerAndParams && s == ShardingStrategy::kNoShard) continue;
        Plan unit = TinyPlan(4, s, 0, o);
        unit.offload_staging = OffloadStaging::kUnit;
        plans.push_back(unit);
      }
    }
  }
  return plans;
}

TEST(StepProgramTest, DepsPointBackwardsAndIdsAreIndices) {
  for (const Plan& plan : AllConfigurations()) {
    StepProgram p = Build(plan);
    for (size_t i = 0; i < p.ops.size(); ++i) {
      ASSERT_EQ(p.ops[i].id, static_cast<int>(i));
      for (int d : p.ops[i].deps) {
        EXPECT_GE(d, 0) << p.ops[i].name;
        EXPECT_LT(d, static_cast<int>(i)) << p.ops[i].name << " (" << StrategyName(plan.strategy) << ", "
                                          << OffloadName(plan.offload) << ")";
      }
    }
  }
}

TEST(StepProgramTest, EveryAllocationIsFreedByTheEnd) {
  // Every tensor the program allocates is freed once, by a later event
  // that names it, in the category it was allocated in; nothing is left at
  // the end of the step.
  for (const Plan& plan : AllConfigurations()) {
    SCOPED_TRACE(StrategyName(plan.strategy) + " / " + OffloadName(plan.offload) + " / " + plan.model.name +
                 " / gpus " + std::to_string(plan.gpus));
    StepProgram p = Build(plan);
    double per_category[kNumMemoryCategories] = {};
    std::map<int, MemoryDelta> live;
    double allocated = 0;
    auto apply = [&](const StepOp& op, const MemoryDelta& d) {
      per_category[static_cast<int>(d.category)] += d.bytes;
      ASSERT_NE(d.bytes, 0) << op.name;
      if (d.bytes > 0) allocated += d.bytes;
      if (d.tensor < 0) return;  // parameter offload's staging (not executable) is counted by bytes only
      if (d.bytes > 0) {
        EXPECT_TRUE(live.emplace(d.tensor, d).second) << op.name << ": tensor " << d.tensor << " allocated twice";
      } else {
        auto it = live.find(d.tensor);
        ASSERT_NE(it, live.end()) << op.name << ": frees tensor " << d.tensor << " that is not live";
        EXPECT_EQ(it->second.bytes, -d.bytes) << op.name;
        EXPECT_EQ(it->second.category, d.category) << op.name;
        live.erase(it);
      }
    };
    for (const auto& op : p.ops) {
      for (const auto& d : op.alloc_at_start) apply(op, d);
      for (const auto& d : op.free_at_end) apply(op, d);
    }
    ASSERT_GT(allocated, 0);
    EXPECT_TRUE(live.empty()) << live.size() << " tensors never freed";
    for (int c = 0; c < kNumMemoryCategories; ++c)
      EXPECT_NEAR(per_category[c], 0, 1e-9 * allocated) << MemoryCategoryName(static_cast<MemoryCategory>(c));
  }
}

TEST(StepProgramTest, OpNamesAreUnique) {
  for (const Plan& plan : AllConfigurations()) {
    StepProgram p = Build(plan);
    std::map<std::string, int> seen;
    for (const auto& op : p.ops) EXPECT_EQ(seen[op.name]++, 0) << "duplicate op name " << op.name;
  }
}

}  // namespace
}  // namespace llmplan

namespace llmplan {
namespace {

TEST(StepProgramTest, BackwardWaitsForTheReduceScatterTwoBefore) {
  StepProgram p = Build(TinyPlan(4, ShardingStrategy::kFullShard));
  std::vector<int> rs;  // reduce-scatters issued so far
  int checked = 0;
  for (const auto& op : p.ops) {
    if (op.kind == OpKind::kReduceScatter) rs.push_back(op.id);
    if (op.kind != OpKind::kBackward) continue;
    if (rs.size() >= 2) {
      EXPECT_NE(std::find(op.deps.begin(), op.deps.end(), rs[rs.size() - 2]), op.deps.end()) << op.name;
      ++checked;
    }
  }
  EXPECT_EQ(checked, kUnits * kAccum - 2);  // all but the first two backwards of the step
}

TEST(StepProgramTest, SlowReduceScattersDoNotPileUpGradients) {
  // Llama-3-70B, full_shard over 64 H100 (8 nodes), seq 1024, micro-batch 1:
  // a block's backward (~6 ms) is far shorter than its inter-node fp32
  // reduce-scatter (~70 ms). Unsharded gradients in flight are bounded by the
  // reduce-scatter two back: at most three units' buffers, each
  // (2 + 4) bytes x padded params; the head is the largest unit:
  // 128,256 x 8,192 + 8,192 = 1,050,689,536 params (a multiple of 64).
  // Without the bound they reached ~40 blocks (206 GiB) and nothing fit.
  HardwareProfile h100 = Profile("h100-sxm-80g");
  Plan plan;
  plan.model = PresetModel("llama3-70b");
  plan.gpus = 64;
  plan.seq_len = 1024;
  plan.micro_batch = 1;
  plan.grad_accum = 1;
  NormaliseGrouping(plan);
  StepProgram prog = BuildStepProgram(plan, h100);
  CostModel cost(h100);
  SimulationResult sim = Simulate(prog, cost);
  const double head_grads = 6.0 * 1'050'689'536;
  EXPECT_LE(sim.at_peak[static_cast<int>(MemoryCategory::kGradBuffers)], 3 * head_grads);
  // Every reduction still runs in full on the reduce stream (busy = sum of
  // their durations): the bound delays compute, it drops no work.
  double rs_total = 0;
  for (const auto& op : prog.ops)
    if (op.stream == StreamKind::kReduce) rs_total += cost.Seconds(op);
  EXPECT_NEAR(sim.busy_seconds[static_cast<int>(StreamKind::kReduce)], rs_total, 1e-9 * rs_total);
}

}  // namespace
}  // namespace llmplan

namespace llmplan {
namespace {

TEST(StepProgramTest, GathersAreIssuedAheadOfTheComputeTheyOverlap) {
  // Prefetch depth 1: the gather of block l + 1 is issued before the forward
  // of block l (so it can run while that forward does), and waits only for
  // the release two gathers back and the compute issued before it.
  StepProgram p = Build(TinyPlan(4, ShardingStrategy::kFullShard));
  std::map<std::string, int> at;
  for (const auto& op : p.ops) at[op.name] = op.id;
  for (int l = 0; l + 1 < kL; ++l) {
    const std::string next = "all-gather block " + std::to_string(l + 1) + " mb 0";
    EXPECT_LT(at.at(next), at.at("forward block " + std::to_string(l) + " mb 0")) << next;
  }
  // Rule 5: every collective and copy depends on the last compute op issued
  // before it (its stream waits for the compute queued so far).
  int last_compute = -1;
  for (const auto& op : p.ops) {
    if (op.stream == StreamKind::kCompute) {
      last_compute = op.id;
      continue;
    }
    if (op.stream == StreamKind::kCpu || last_compute < 0) continue;
    EXPECT_NE(std::find(op.deps.begin(), op.deps.end(), last_compute), op.deps.end()) << op.name;
  }
}

TEST(StepProgramTest, IssueOrderKeepsEachStreamsLogicalOrder) {
  // Hoisting moves gathers relative to other streams only: on the gather
  // stream they keep the order the builder made them in (forward by unit,
  // then backward), and a gather never waits on an op issued after it.
  for (const Plan& plan : AllConfigurations()) {
    StepProgram p = Build(plan);
    std::vector<std::string> gathers;
    for (const auto& op : p.ops)
      if (op.kind == OpKind::kAllGather && op.micro_batch == 0) gathers.push_back(op.name);
    const int n = static_cast<int>(plan.model.layers) + 2;
    if (plan.strategy == ShardingStrategy::kFullShard && plan.gpus > 1 && !gathers.empty()) {
      ASSERT_GE(gathers.size(), static_cast<size_t>(n));
      EXPECT_EQ(gathers.front(), "all-gather embed mb 0");
      EXPECT_EQ(gathers[n - 1], "all-gather head mb 0");
      EXPECT_EQ(gathers[n], "all-gather block " + std::to_string(plan.model.layers - 1) + " bwd mb 0");
    }
  }
}

TEST(StepProgramTest, EveryRecomputedBlockAndNoOtherHasARecomputeOp) {
  // The executor keeps only a block's input in forward exactly when the
  // program recomputes it: the recompute ops are the contract.
  Plan plan = TinyPlan(2, ShardingStrategy::kShardGradOp);
  plan.checkpoint_layers = {0, 3};
  StepProgram p = Build(plan);
  std::set<std::pair<int, int>> recomputed;
  for (const auto& op : p.ops)
    if (op.kind == OpKind::kRecompute) recomputed.insert({op.unit, op.micro_batch});
  for (int mb = 0; mb < kAccum; ++mb)
    for (int l = 0; l < kL; ++l)
      EXPECT_EQ(recomputed.count({p.BlockUnit(l), mb}), plan.IsCheckpointed(l) ? 1u : 0u) << l << " " << mb;
}

}  // namespace
}  // namespace llmplan
