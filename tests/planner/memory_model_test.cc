// Each memory term of the planner against values computed by hand, on several
// (model, strategy, GPUs, offload) configurations. Notation: N = parameters,
// G = shard group size, shard = padded / G, bf16 = 2 bytes, fp32 = 4 bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "base/user_error.h"
#include "planner/cost_model.h"
#include "planner/memory_timeline.h"
#include "planner/plan.h"
#include "planner/step_program.h"
#include "simulator/evaluate.h"
#include "tests/planner/test_support.h"

namespace llmplan {
namespace {

using testing::Profile;

Plan MakePlan(const std::string& model, int gpus, ShardingStrategy s, int group = 0, Offload o = Offload::kNone) {
  Plan p;
  p.model = PresetModel(model);
  p.profile = "h100-sxm-80g";
  p.gpus = gpus;
  p.gpus_per_node = 8;
  p.strategy = s;
  p.shard_group_size = group;
  p.offload = o;
  p.seq_len = std::min<int64_t>(8192, p.model.max_seq);
  p.micro_batch = 1;
  p.grad_accum = 2;
  NormaliseGrouping(p);
  p.Validate();
  return p;
}

// h100-sxm-80g.json: cuda_context 536,870,912; workspace 268,435,456; NCCL buffers 402,653,184 per communicator.
constexpr double kContext = 536'870'912, kWorkspace = 268'435'456, kNccl = 402'653'184;

TEST(MemoryModelTest, Llama3_8bFullShard8Gpus) {
  auto h100 = Profile("h100-sxm-80g");
  StepProgram prog = BuildStepProgram(MakePlan("llama3-8b", 8, ShardingStrategy::kFullShard), h100);
  // Every unit divides by 8 (embedding 525,336,576; block 218,112,000; head 525,340,672), so padded = N.
  const double shard = 8'030'261'248.0 / 8;  // 1,003,782,656
  EXPECT_DOUBLE_EQ(prog.persistent.param_shards, 4 * shard);     // 4,015,130,624
  EXPECT_DOUBLE_EQ(prog.persistent.param_shards, 4'015'130'624.0);
  EXPECT_DOUBLE_EQ(prog.persistent.grad_shards, 4 * shard);
  EXPECT_DOUBLE_EQ(prog.persistent.optimizer_state, 8 * shard);  // 8,030,261,248
  EXPECT_DOUBLE_EQ(prog.persistent.compute_params, 2 * shard);   // the bf16 shard the all-gathers send
  EXPECT_DOUBLE_EQ(prog.persistent.cuda_context, kContext);
  EXPECT_DOUBLE_EQ(prog.persistent.workspaces, kWorkspace);
  // The shard group's two communicators (gathers, reductions) and the world's.
  EXPECT_DOUBLE_EQ(prog.persistent.collective_buffers, 3 * kNccl);
  EXPECT_DOUBLE_EQ(prog.host.Total(), 0);
}

TEST(MemoryModelTest, ShardGradOpKeepsTheSameShards) {
  auto h100 = Profile("h100-sxm-80g");
  StepProgram prog = BuildStepProgram(MakePlan("llama3-8b", 8, ShardingStrategy::kShardGradOp), h100);
  const double shard = 8'030'261'248.0 / 8;
  EXPECT_DOUBLE_EQ(prog.persistent.param_shards, 4 * shard);
  EXPECT_DOUBLE_EQ(prog.persistent.grad_shards, 4 * shard);
  EXPECT_DOUBLE_EQ(prog.persistent.optimizer_state, 8 * shard);
  EXPECT_DOUBLE_EQ(prog.persistent.compute_params, 2 * shard);
}

TEST(MemoryModelTest, NoShard2GpusTiedModel) {
  auto h100 = Profile("h100-sxm-80g");
  StepProgram prog = BuildStepProgram(MakePlan("llama3.2-1b", 2, ShardingStrategy::kNoShard), h100);
  // G = 1: every GPU holds everything. N = 1,235,814,400.
  const double n = 1'235'814'400.0;
  EXPECT_DOUBLE_EQ(prog.persistent.param_shards, 4 * n);     // 4,943,257,600
  EXPECT_DOUBLE_EQ(prog.persistent.grad_shards, 4 * n);
  EXPECT_DOUBLE_EQ(prog.persistent.optimizer_state, 8 * n);  // 9,886,515,200
  EXPECT_DOUBLE_EQ(prog.persistent.compute_params, 2 * n);   // resident bf16 replica: 2,471,628,800
  EXPECT_DOUBLE_EQ(prog.persistent.collective_buffers, 2 * kNccl);  // replica group + world
}

TEST(MemoryModelTest, HybridShard16GpusGroup8) {
  auto h100 = Profile("h100-sxm-80g");
  Plan plan = MakePlan("llama3-8b", 16, ShardingStrategy::kHybridShard, 8);
  ASSERT_EQ(plan.ReplicaGroups(), 2);
  StepProgram prog = BuildStepProgram(plan, h100);
  const double shard = 8'030'261'248.0 / 8;  // sharded within the group of 8, replicated across 2 groups
  EXPECT_DOUBLE_EQ(prog.persistent.param_shards, 4 * shard);
  EXPECT_DOUBLE_EQ(prog.persistent.grad_shards, 4 * shard);
  EXPECT_DOUBLE_EQ(prog.persistent.optimizer_state, 8 * shard);
  // Shard group (gathers, reductions), replica group, world.
  EXPECT_DOUBLE_EQ(prog.persistent.collective_buffers, 4 * kNccl);
  // The cross-group all-reduce of a block moves its fp32 shard: 4 * 218,112,000 / 8.
  for (const auto& op : prog.ops)
    if (op.kind == OpKind::kAllReduce && op.unit == prog.BlockUnit(0)) {
      EXPECT_DOUBLE_EQ(op.work.collective_bytes, 4 * 218'112'000.0 / 8);
      EXPECT_EQ(op.work.group_size, 2);
    }
}

// planner/gradient_path.h: one GPU and one micro-batch, AdamW reads the bf16
// gradient. No fp32 gradient (4 N bytes less), each unit's bf16 gradient
// lives from its backward to its AdamW (freed there, not at its reduction),
// and the reduction only reads it (2 bytes a parameter, for the norm).
TEST(MemoryModelTest, CastAtGatherKeepsNoBf16ShardAndPricesEachCast) {
  // Plan::cast_at_gather: no persistent compute-dtype shard (2 bytes a
  // parameter of the shard); AdamW writes 2 bytes less; every gather reads
  // the fp32 shard and writes its bf16 cast (6 bytes a parameter of the
  // shard) on the gather stream, holding the cast until it is sent.
  auto h100 = Profile("h100-sxm-80g");
  const Plan kept = MakePlan("llama3-8b", 2, ShardingStrategy::kFullShard);
  Plan cast = kept;
  cast.cast_at_gather = true;
  cast.Validate();
  const StepProgram a = BuildStepProgram(kept, h100), b = BuildStepProgram(cast, h100);
  double shards = 0;
  for (const Unit& u : a.units) shards += static_cast<double>(u.padded_params) / u.group_size;
  EXPECT_DOUBLE_EQ(a.persistent.compute_params - b.persistent.compute_params, 2 * shards);
  EXPECT_DOUBLE_EQ(b.persistent.compute_params, 0);
  ASSERT_EQ(a.ops.size(), b.ops.size());
  int gathers = 0;
  for (size_t i = 0; i < b.ops.size(); ++i) {
    const StepOp& x = a.ops[i];
    const StepOp& y = b.ops[i];
    ASSERT_EQ(x.name, y.name);
    const double shard = static_cast<double>(b.units[y.unit < 0 ? 0 : y.unit].padded_params) / 2;
    if (y.kind == OpKind::kAllGather) {
      ++gathers;
      EXPECT_EQ(y.stream, StreamKind::kGather) << y.name;
      EXPECT_DOUBLE_EQ(y.work.elementwise_bytes, 6 * shard) << y.name;
      EXPECT_DOUBLE_EQ(x.work.elementwise_bytes, 0) << x.name;
      EXPECT_GT(CostModel(h100).Seconds(y), CostModel(h100).Seconds(x)) << y.name;
    }
    if (y.kind == OpKind::kOptimizerStep) EXPECT_DOUBLE_EQ(x.work.elementwise_bytes - y.work.elementwise_bytes, 2 * shard);
  }
  EXPECT_GT(gathers, 0);
  const Estimate ea = EvaluatePlan(kept, h100), eb = EvaluatePlan(cast, h100);
  // The peak drops by the kept shards, less at most the largest unit's cast in flight.
  EXPECT_LT(eb.memory.peak_allocated_bytes, ea.memory.peak_allocated_bytes - 2 * shards * 0.8);
  // The casts run beside the compute (on the gather stream) and AdamW
  // writes 2 bytes less: about the same step.
  EXPECT_NEAR(eb.tokens_per_second_per_gpu / ea.tokens_per_second_per_gpu, 1.0, 0.01);
  // Nothing to cast for: one GPU, no_shard, or an offloaded optimizer.
  for (Plan bad : {MakePlan("llama3-8b", 1, ShardingStrategy::kFullShard),
                   MakePlan("llama3-8b", 2, ShardingStrategy::kNoShard),
                   MakePlan("llama3-8b", 2, ShardingStrategy::kFullShard, 0, Offload::kOptimizer)}) {
    bad.cast_at_gather = true;
    EXPECT_THROW(bad.Validate(), UserError) << PlanSummary(bad);
  }
}

TEST(MemoryModelTest, OneGpuOneMicroBatchKeepsNoFp32Gradient) {
  auto h100 = Profile("h100-sxm-80g");
  const double n = 1'235'814'400.0;  // llama3.2-1b, tied
  for (ShardingStrategy s : {ShardingStrategy::kFullShard, ShardingStrategy::kNoShard}) {
    Plan one = MakePlan("llama3.2-1b", 1, s);
    one.grad_accum = 1;
    Plan two = one;
    two.grad_accum = 2;
    const StepProgram direct = BuildStepProgram(one, h100), widened = BuildStepProgram(two, h100);
    EXPECT_DOUBLE_EQ(direct.persistent.grad_shards, 0);
    EXPECT_DOUBLE_EQ(widened.persistent.grad_shards, 4 * n);
    EXPECT_DOUBLE_EQ(direct.persistent.param_shards, widened.persistent.param_shards);
    int reductions = 0, updates = 0;
    for (const StepOp& op : direct.ops) {
      if (op.kind == OpKind::kLocalReduce) {
        ++reductions;
        EXPECT_DOUBLE_EQ(op.work.elementwise_bytes, 2.0 * direct.units[op.unit].padded_params) << op.name;
        for (const MemoryDelta& d : op.alloc_at_start) EXPECT_GE(d.bytes, 0) << op.name << " frees nothing";
      }
      if (op.kind == OpKind::kOptimizerStep) {
        ++updates;
        const double bf16_grad = 2.0 * direct.units[op.unit].padded_params;
        // One GPU's full_shard keeps no bf16 copy for AdamW to write: its
        // "gathers" cast the master.
        const double written = s == ShardingStrategy::kNoShard ? 2 : 0;
        EXPECT_DOUBLE_EQ(op.work.elementwise_bytes,
                         (28 - 2 + written) * static_cast<double>(direct.units[op.unit].padded_params));
        ASSERT_EQ(op.alloc_at_start.size(), 1u) << op.name;
        EXPECT_EQ(op.alloc_at_start[0].category, MemoryCategory::kGradBuffers);
        EXPECT_DOUBLE_EQ(op.alloc_at_start[0].bytes, -bf16_grad) << op.name;
      }
    }
    EXPECT_EQ(reductions, static_cast<int>(direct.units.size()));
    EXPECT_EQ(updates, static_cast<int>(direct.units.size()));
    // Off a GPU, or with a second micro-batch to add, the fp32 gradient stays.
    Plan cpu = one;
    cpu.profile = "cpu";
    EXPECT_DOUBLE_EQ(BuildStepProgram(cpu, Profile("cpu")).persistent.grad_shards, 4 * n);
    Plan offloaded = one;
    offloaded.offload = Offload::kOptimizer;
    offloaded.Validate();
    EXPECT_DOUBLE_EQ(BuildStepProgram(offloaded, h100).persistent.grad_shards, 4 * n);
  }
}

TEST(MemoryModelTest, OffloadVariants) {
  auto h100 = Profile("h100-sxm-80g");
  const double shard = 8'030'261'248.0 / 8;
  {
    StepProgram p = BuildStepProgram(MakePlan("llama3-8b", 8, ShardingStrategy::kFullShard, 0, Offload::kOptimizer), h100);
    EXPECT_DOUBLE_EQ(p.persistent.param_shards, 0);
    EXPECT_DOUBLE_EQ(p.persistent.optimizer_state, 0);
    EXPECT_DOUBLE_EQ(p.persistent.grad_shards, 4 * shard);
    EXPECT_DOUBLE_EQ(p.persistent.compute_params, 2 * shard);  // bf16 shard for the gathers
    EXPECT_DOUBLE_EQ(p.host.master_params, 4 * shard);
    EXPECT_DOUBLE_EQ(p.host.optimizer_state, 8 * shard);
    // Two staging slots, each the largest unit's shard: the head's
    // (128,256 x 4,096 + 4,096 = 525,340,672 elements, / 8), fp32 down and
    // bf16 up.
    const double head_shard = 525'340'672.0 / 8;
    EXPECT_DOUBLE_EQ(p.host.grad_staging, 4 * 2 * head_shard);
    EXPECT_DOUBLE_EQ(p.host.param_staging, 2 * 2 * head_shard);
    EXPECT_DOUBLE_EQ(p.host.Total(), 12 * shard + 12 * head_shard);  // 12,833,402,880
    EXPECT_DOUBLE_EQ(p.host.Total(), 12'833'402'880.0);
    // Staged per unit: every unit's shard, fp32 down and bf16 up.
    Plan unit = MakePlan("llama3-8b", 8, ShardingStrategy::kFullShard, 0, Offload::kOptimizer);
    unit.offload_staging = OffloadStaging::kUnit;
    const StepProgram per_unit = BuildStepProgram(unit, h100);
    EXPECT_DOUBLE_EQ(per_unit.host.grad_staging, 4 * shard);
    EXPECT_DOUBLE_EQ(per_unit.host.param_staging, 2 * shard);
    EXPECT_DOUBLE_EQ(per_unit.host.Total(), 18 * shard);  // 18,068,087,808
    EXPECT_DOUBLE_EQ(per_unit.persistent.grad_shards, p.persistent.grad_shards);  // the device holds the same
    EXPECT_DOUBLE_EQ(per_unit.persistent.compute_params, p.persistent.compute_params);
  }
  {
    StepProgram p = BuildStepProgram(MakePlan("llama3-8b", 8, ShardingStrategy::kFullShard, 0, Offload::kParams), h100);
    EXPECT_DOUBLE_EQ(p.persistent.param_shards, 0);
    EXPECT_DOUBLE_EQ(p.persistent.optimizer_state, 8 * shard);
    EXPECT_DOUBLE_EQ(p.persistent.grad_shards, 4 * shard);
    EXPECT_DOUBLE_EQ(p.persistent.compute_params, 2 * shard);
    EXPECT_DOUBLE_EQ(p.host.Total(), 4 * shard);
  }
  {
    StepProgram p =
        BuildStepProgram(MakePlan("llama3-8b", 8, ShardingStrategy::kFullShard, 0, Offload::kOptimizerAndParams), h100);
    // Only the fp32 gradient shard stays on the GPU (the norm and clipping
    // read it there); the bf16 shard streams up before each gather.
    EXPECT_DOUBLE_EQ(p.persistent.param_shards + p.persistent.optimizer_state + p.persistent.compute_params, 0);
    EXPECT_DOUBLE_EQ(p.persistent.grad_shards, 4 * shard);
    int streamed = 0, copies_down = 0;
    for (const StepOp& op : p.ops) {
      streamed += op.kind == OpKind::kCopyParamsForGather;
      copies_down += op.kind == OpKind::kCopyGradsToHost;
    }
    EXPECT_GT(streamed, 0);
    EXPECT_EQ(copies_down, static_cast<int>(p.units.size()));  // each gradient shard once, at the next step's start
    EXPECT_DOUBLE_EQ(p.host.master_params, (4 + 2) * shard);
    EXPECT_DOUBLE_EQ(p.host.Total(), (6 + 8) * shard + 4 * 2 * (525'340'672.0 / 8));  // gradient slots only
    // Staged per unit: a gradient buffer per unit and no bf16 staging (the
    // update writes the host shard the gathers stream up).
    Plan unit = MakePlan("llama3-8b", 8, ShardingStrategy::kFullShard, 0, Offload::kOptimizerAndParams);
    unit.offload_staging = OffloadStaging::kUnit;
    const StepProgram per_unit = BuildStepProgram(unit, h100);
    EXPECT_DOUBLE_EQ(per_unit.host.param_staging, 0);
    EXPECT_DOUBLE_EQ(per_unit.host.Total(), (6 + 8 + 4) * shard);
  }
}

TEST(MemoryModelTest, PaddingRoundsUpToTheShardGroup) {
  // tiny-llama: h 64, i 176, 4 heads (hd 16), 2 kv heads, 4 layers, vocab 512, untied.
  //   embedding = 512*64 = 32,768; head = 32,768 + 64 = 32,832
  //   block = 64*64 + 2*64*32 + 64*64 + 3*64*176 + 2*64 = 46,208
  // With G = 7 none divides: 32,768 = 7*4,681 + 1 -> 32,774; 46,208 = 7*6,601 + 1 -> 46,214;
  // 32,832 = 7*4,690 + 2 -> 32,837. Padded total = 32,774 + 4*46,214 + 32,837 = 250,467 = 7*35,781.
  auto h100 = Profile("h100-sxm-80g");
  Plan plan = MakePlan("tiny-llama", 7, ShardingStrategy::kFullShard);
  plan.seq_len = 128;
  StepProgram prog = BuildStepProgram(plan, h100);
  ASSERT_EQ(prog.units.size(), 6u);
  EXPECT_EQ(prog.units[0].params, 32'768);
  EXPECT_EQ(prog.units[0].padded_params, 32'774);
  for (int l = 0; l < 4; ++l) {
    EXPECT_EQ(prog.units[prog.BlockUnit(l)].params, 46'208);
    EXPECT_EQ(prog.units[prog.BlockUnit(l)].padded_params, 46'214);
  }
  EXPECT_EQ(prog.units[5].params, 32'832);
  EXPECT_EQ(prog.units[5].padded_params, 32'837);
  const double shard = 250'467.0 / 7;  // 35,781
  EXPECT_DOUBLE_EQ(shard, 35'781.0);
  EXPECT_DOUBLE_EQ(prog.persistent.param_shards, 4 * 35'781.0);
  EXPECT_DOUBLE_EQ(prog.persistent.grad_shards, 4 * 35'781.0);
  EXPECT_DOUBLE_EQ(prog.persistent.optimizer_state, 8 * 35'781.0);
  // The all-gather moves the padded bf16 buffer: 2 * 46,214 for a block.
  for (const auto& op : prog.ops)
    if (op.kind == OpKind::kAllGather && op.unit == prog.BlockUnit(2)) { EXPECT_DOUBLE_EQ(op.work.collective_bytes, 2 * 46'214.0); }
}

// What a block keeps from forward to backward, as the executor's autograd
// graph holds it (planner/memory_model.h), in bf16 on a GPU, per token, with
// LibTorch's composite block ops:
//   two RMSNorms: fp32 input copy 4h, normalised 2h, output 2h (+ 4 B 1/rms) -> 16h + 8
//   rotated q and the attention output 2q + 2q; rotated k and v 2kv + 2kv;
//   the log-sum-exp 4 B per head; the MLP's up, gate, silu and product 4 x 2i;
//   and the block's output 2h.
// = 18h + 4q + 4kv + 8i + 4 heads + 8 — measured on H200 with the caching
// allocator after each op (Llama-3-8B: 209,032 B/token; Qwen2.5-7B: 232,568).
// With the fused kernels (executor/model/block_ops_cuda.cc) the norms keep
// their outputs 2 x 2h, 1/rms 2 x 4 B and the post-attention norm's input h
// (2h); SwiGLU keeps up and gate, the down projection the product: 3 x 2i.
// = 8h + 4q + 4kv + 6i + 4 heads + 8.
Plan ActivationPlan(const ModelSpec& m, int64_t micro_batch, int64_t seq, bool fused = false) {
  Plan p;
  p.model = m;
  p.gpus = 1;
  p.micro_batch = micro_batch;
  p.seq_len = seq;
  p.fused_kernels = fused;
  NormaliseGrouping(p);
  return p;
}

TEST(MemoryModelTest, BlockActivationsAsMeasured) {
  auto h100 = Profile("h100-sxm-80g");
  {
    // llama3-8b, mb 1, seq 8192: t = 8192; 18h = 73,728; 4q = 16,384; 4kv = 4,096; 8i = 114,688;
    // 4*32 = 128; 8 -> 209,032 bytes per token.
    auto a = BlockActivations(ActivationPlan(PresetModel("llama3-8b"), 1, 8192), h100);
    EXPECT_DOUBLE_EQ(a.full, 8192.0 * 209'032);
    EXPECT_DOUBLE_EQ(a.checkpointed, 8192.0 * 2 * 4096);  // the output only
    // Backward's highest temporaries: the MLP's two input gradients, 2 x 2i per token.
    EXPECT_DOUBLE_EQ(a.working, 8192.0 * 4 * 14336);
  }
  {
    // qwen2.5-7b, mb 2, seq 4096: t = 8192; h = q = 3584, kv = 512, i = 18944, 28 heads:
    // 64,512 + 14,336 + 2,048 + 151,552 + 112 + 8 = 232,568 bytes per token.
    auto a = BlockActivations(ActivationPlan(PresetModel("qwen2.5-7b"), 2, 4096), h100);
    EXPECT_DOUBLE_EQ(a.full, 8192.0 * 232'568);
    EXPECT_DOUBLE_EQ(a.checkpointed, 8192.0 * 2 * 3584);
  }
  {
    // Mistral-Nemo-like (q = 32*128 = 4096 != hidden 5120), mb 1, seq 1024:
    // 92,160 + 16,384 + 4,096 + 114,688 + 128 + 8 = 227,464.
    ModelSpec m = PresetModel("mistral-7b");
    m.hidden = 5120;
    m.head_dim = 128;
    auto a = BlockActivations(ActivationPlan(m, 1, 1024), h100);
    EXPECT_DOUBLE_EQ(a.full, 1024.0 * 227'464);
    EXPECT_DOUBLE_EQ(a.checkpointed, 1024.0 * 2 * 5120);
  }
}

TEST(MemoryModelTest, FusedBlockKernelsKeepLess) {
  auto h100 = Profile("h100-sxm-80g");
  {
    // llama3-8b: 8h = 32,768; 4q = 16,384; 4kv = 4,096; 6i = 86,016; 128; 8 -> 139,400 B/token.
    auto a = BlockActivations(ActivationPlan(PresetModel("llama3-8b"), 1, 8192, /*fused=*/true), h100);
    EXPECT_DOUBLE_EQ(a.full, 8192.0 * 139'400);
    EXPECT_DOUBLE_EQ(a.checkpointed, 8192.0 * 2 * 4096);
    // The MLP's backward still peaks at its two input gradients.
    EXPECT_DOUBLE_EQ(a.working, 8192.0 * 4 * 14336);
  }
  {
    // qwen2.5-7b: 28,672 + 14,336 + 2,048 + 113,664 + 112 + 8 = 158,840.
    auto a = BlockActivations(ActivationPlan(PresetModel("qwen2.5-7b"), 2, 4096, true), h100);
    EXPECT_DOUBLE_EQ(a.full, 8192.0 * 158'840);
  }
  {
    // A CPU runs the composite ops whatever the plan says.
    auto a = BlockActivations(ActivationPlan(PresetModel("llama3-8b"), 1, 512, true), Profile("cpu"));
    auto b = BlockActivations(ActivationPlan(PresetModel("llama3-8b"), 1, 512, false), Profile("cpu"));
    EXPECT_DOUBLE_EQ(a.full, b.full);
  }
  {
    // A head_dim RoPE's 16-byte vectors do not tile (72 = 2 x 36): composite.
    ModelSpec m = PresetModel("llama3-8b");
    m.head_dim = 72;
    auto a = BlockActivations(ActivationPlan(m, 1, 512, true), h100);
    auto b = BlockActivations(ActivationPlan(m, 1, 512, false), h100);
    EXPECT_DOUBLE_EQ(a.full, b.full);
  }
}

TEST(MemoryModelTest, ForwardOpsKeepFullOrCheckpointedActivations) {
  for (const bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused block kernels" : "composite block ops");
    auto h100 = Profile("h100-sxm-80g");
    Plan plan = MakePlan("llama3-8b", 8, ShardingStrategy::kFullShard);
    plan.checkpoint_layers = {0, 5, 31};
    plan.fused_kernels = fused;
    StepProgram prog = BuildStepProgram(plan, h100);
    const double t = static_cast<double>(plan.micro_batch * plan.seq_len);
    const double full = t * (fused ? 139'400 : 209'032), ckpt = t * 2 * 4096;
    int checked = 0;
    for (const auto& op : prog.ops) {
      if (op.kind != OpKind::kForward || prog.units[op.unit].kind != UnitKind::kBlock) continue;
      double kept = 0, highest = 0, now = 0;
      for (const auto& d : op.alloc_at_start) {
        kept += d.bytes;
        highest = std::max(highest, now += d.bytes);
      }
      const int layer = prog.units[op.unit].layer;
      const bool c = layer == 0 || layer == 5 || layer == 31;
      EXPECT_DOUBLE_EQ(kept, c ? ckpt : full) << op.name;
      // With the graph, the composite form peaks above what it keeps by the
      // MLP's output (2h per token) beside the final residual add, and by h
      // too (2h, as measured) where h is not kept. The fused form's o and
      // down GEMMs add the residual themselves and its packed q/k/v
      // projection dies before attention: it peaks at what it keeps.
      if (!c) { EXPECT_DOUBLE_EQ(highest - kept, fused ? 0.0 : t * 4 * 4096) << op.name; }
      ++checked;
    }
    EXPECT_EQ(checked, 32 * 2);  // 32 blocks x 2 micro-batches
  }
}

TEST(MemoryModelTest, BreakdownSumsToDevicePeakAndReservedIsTheAllocatorReplay) {
  auto h100 = Profile("h100-sxm-80g");
  const std::vector<Plan> plans = {
      MakePlan("llama3-8b", 8, ShardingStrategy::kFullShard),
      MakePlan("llama3.2-1b", 2, ShardingStrategy::kNoShard),
      MakePlan("llama3-8b", 16, ShardingStrategy::kHybridShard, 8),
      MakePlan("llama3-8b", 8, ShardingStrategy::kFullShard, 0, Offload::kOptimizer),
      MakePlan("llama3-8b", 8, ShardingStrategy::kShardGradOp),
  };
  for (const Plan& plan : plans) {
    SCOPED_TRACE(StrategyName(plan.strategy) + " " + OffloadName(plan.offload) + " " + plan.model.name);
    Evaluation ev = EvaluatePlanInDetail(plan, h100);
    const MemoryEstimate& m = ev.estimate.memory;
    const PersistentMemory& pm = ev.program.persistent;
    double sum = 0;
    for (const auto& [name, bytes] : m.breakdown) sum += bytes;
    EXPECT_NEAR(sum, m.device_peak_bytes, 1e-9 * m.device_peak_bytes);
    // allocated = the issue-order replay's peak: persistent terms + transients then.
    double transient = 0;
    for (double b : ev.memory.at_peak) transient += b;
    EXPECT_NEAR(m.peak_allocated_bytes, AllocatorPersistentBytes(pm) + transient, 1e-9 * m.peak_allocated_bytes);
    EXPECT_NEAR(m.peak_allocated_bytes, ev.memory.peak, 1e-9 * m.peak_allocated_bytes);
    // Reserved is the allocator replay's peak (at least allocated).
    EXPECT_DOUBLE_EQ(m.peak_reserved_bytes, std::max(ev.reserved.peak_reserved, m.peak_allocated_bytes));
    EXPECT_GE(m.peak_reserved_bytes, m.peak_allocated_bytes);
    EXPECT_DOUBLE_EQ(m.device_peak_bytes, m.peak_reserved_bytes + kContext + pm.collective_buffers);
    // capacity = 85,520,809,984 * 0.95
    EXPECT_DOUBLE_EQ(m.capacity_bytes, 85'520'809'984.0 * 0.95);
    EXPECT_DOUBLE_EQ(m.host_bytes, ev.program.host.Total());
    EXPECT_DOUBLE_EQ(m.host_capacity_bytes, 274'877'906'944.0);
    // The named persistent terms appear in the breakdown with their values.
    auto term = [&](const std::string& name) {
      for (const auto& [n, b] : m.breakdown)
        if (n == name) return b;
      ADD_FAILURE() << "no term " << name;
      return -1.0;
    };
    EXPECT_DOUBLE_EQ(term("param_shards"), pm.param_shards);
    EXPECT_DOUBLE_EQ(term("optimizer_state"), pm.optimizer_state);
    EXPECT_DOUBLE_EQ(term("allocator_cache"), m.peak_reserved_bytes - m.peak_allocated_bytes);
    EXPECT_DOUBLE_EQ(term("cuda_context"), kContext);
  }
}

TEST(MemoryModelTest, HostBytesForOffloadOptimizerEstimate) {
  auto h100 = Profile("h100-sxm-80g");
  Estimate e = EvaluatePlan(MakePlan("llama3-8b", 8, ShardingStrategy::kFullShard, 0, Offload::kOptimizer), h100);
  // master 4 + AdamW m,v 8 = 12 bytes per sharded parameter, and two staging
  // slots of the largest shard (the head's), fp32 down and bf16 up.
  EXPECT_DOUBLE_EQ(e.memory.host_bytes, 12 * 8'030'261'248.0 / 8 + 2 * (4 + 2) * 525'340'672.0 / 8);
}

}  // namespace
}  // namespace llmplan

namespace llmplan {
namespace {

TEST(MemoryModelTest, OffloadParamsStagesMastersOnlyAfterBackward) {
  // With params offloaded the GPU keeps the bf16 shard (2 bytes/param) but not
  // the fp32 master (4): persistent 2 + 8 + 4 = 14 bytes per sharded parameter
  // against 4 + 2 + 8 + 4 = 18 without offload. The fp32 masters are streamed
  // in for the optimizer step only, so the activation peak must not carry them
  // and the allocated peak is lower by exactly 4 * shard.
  auto h100 = testing::Profile("h100-sxm-80g");
  Plan none = MakePlan("llama3-8b", 8, ShardingStrategy::kFullShard);
  Plan params = MakePlan("llama3-8b", 8, ShardingStrategy::kFullShard, 0, Offload::kParams);
  Evaluation a = EvaluatePlanInDetail(none, h100), b = EvaluatePlanInDetail(params, h100);
  double last_backward_end = 0;
  for (const auto& op : b.program.ops)
    if (op.kind == OpKind::kBackward) last_backward_end = std::max(last_backward_end, b.simulation.ops[op.id].end);
  int copies = 0;
  for (const auto& op : b.program.ops)
    if (op.kind == OpKind::kCopyMasterToDevice) {
      EXPECT_GE(b.simulation.ops[op.id].start, last_backward_end) << op.name;
      ++copies;
    }
  EXPECT_EQ(copies, 34);  // embedding, 32 blocks, head
  EXPECT_EQ(b.simulation.at_peak[static_cast<int>(MemoryCategory::kOffloadStaging)], 0);
  const double shard = 8'030'261'248.0 / 8;
  EXPECT_NEAR(a.estimate.memory.peak_allocated_bytes - b.estimate.memory.peak_allocated_bytes, 4 * shard, 1.0);
}

}  // namespace
}  // namespace llmplan

namespace llmplan {
namespace {

TEST(MemoryModelTest, TiedEmbeddingGradientLivesFromTheLoss) {
  // llama3.2-1b ties lm_head to embed_tokens: the loss computes the gradient
  // of the shared 128,256 x 2,048 matrix into the embedding's flat bf16
  // gradient, which then waits for the embedding's own backward (the last) to
  // be cast for its reduce-scatter. Composite form: made at the head's
  // backward, which adds the loss's own buffer into it. Fused form: made at
  // the head's forward, where the loss adds into it directly
  // (chunked_cross_entropy.h). Full shard over 8 GPUs:
  //   embedding padded: 128,256 * 2,048 = 262,668,288 (a multiple of 8)
  //   head (final norm only) padded: 2,048
  auto h100 = testing::Profile("h100-sxm-80g");
  auto grad_allocs = [](const StepOp& op) {
    std::vector<double> b;
    for (const auto& d : op.alloc_at_start)
      if (d.category == MemoryCategory::kGradBuffers && d.bytes > 0) b.push_back(d.bytes);
    return b;
  };
  for (const bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused" : "composite");
    Plan plan = MakePlan("llama3.2-1b", 8, ShardingStrategy::kFullShard);
    plan.fused_kernels = fused;
    StepProgram prog = BuildStepProgram(plan, h100);
    int heads = 0, embeds = 0;
    for (const auto& op : prog.ops) {
      if (op.unit == prog.HeadUnit() && op.kind == OpKind::kForward) {
        // Fused: the embedding's bf16 gradient, before anything of the loss.
        if (fused) EXPECT_EQ(grad_allocs(op), (std::vector<double>{2.0 * 262'668'288}));
        else EXPECT_TRUE(grad_allocs(op).empty());
      }
      if (op.kind != OpKind::kBackward) continue;
      if (op.unit == prog.HeadUnit()) {
        // Its own bf16 gradient, the embedding's (composite), then its fp32 reduce-scatter input.
        if (fused) EXPECT_EQ(grad_allocs(op), (std::vector<double>{2.0 * 2'048, 4.0 * 2'048}));
        else EXPECT_EQ(grad_allocs(op), (std::vector<double>{2.0 * 2'048, 2.0 * 262'668'288, 4.0 * 2'048}));
        ++heads;
      }
      if (op.unit == 0) {
        // Only the fp32 reduce-scatter input: the bf16 gradient came with the head.
        EXPECT_EQ(grad_allocs(op), (std::vector<double>{4.0 * 262'668'288}));
        ++embeds;
      }
    }
    EXPECT_EQ(heads, 2);
    EXPECT_EQ(embeds, 2);
    // So the buffer is live through every block's backward: after block 0's
    // backward (the last block to run), grad buffers in use >= 2 x 262,668,288.
    std::array<double, kNumMemoryCategories> now{};
    for (const auto& op : prog.ops) {
      for (const auto& d : op.alloc_at_start) now[static_cast<int>(d.category)] += d.bytes;
      for (const auto& d : op.free_at_end) now[static_cast<int>(d.category)] += d.bytes;
      if (op.kind == OpKind::kBackward && op.unit == prog.BlockUnit(0))
        EXPECT_GE(now[static_cast<int>(MemoryCategory::kGradBuffers)], 2.0 * 262'668'288) << op.name;
    }
  }
}

}  // namespace
}  // namespace llmplan
