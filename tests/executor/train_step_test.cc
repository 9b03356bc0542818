// The step interpreter and the trainer on CPU: checkpointing does not change
// gradients, micro-batch 4 equals 2 x accumulation 2, a program with gathers
// (full_shard on one device) equals one without, bad batches are refused
// before any kernel, and the loss falls over a short run.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "executor/run/trainer.h"
#include "base/user_error.h"
#include "tests/executor/core_test_support.h"

namespace llmplan::executor {
namespace {

using testing::Rig;
using testing::TestPlan;

TEST(TrainStepTest, CheckpointingDoesNotChangeGradients) {
  Plan plain = TestPlan("tiny-llama", 2, 1, 32);
  plain.optimizer.grad_clip = 0;
  Plan checkpointed = plain;
  checkpointed.checkpoint_layers = {0, 1, 2, 3};
  Plan some = plain;
  some.checkpoint_layers = {1, 3};
  at::Tensor tokens = testing::RandomTokens(2, 32, plain.model.vocab, 5);

  Rig a(plain), b(checkpointed), c(some);
  int recomputes = 0;
  for (const auto& op : b.step.program().ops) recomputes += op.kind == OpKind::kRecompute;
  EXPECT_EQ(recomputes, 4);
  StepResult ra = a.step.Run({tokens}), rb = b.step.Run({tokens}), rc = c.step.Run({tokens});
  EXPECT_DOUBLE_EQ(ra.loss, rb.loss);
  EXPECT_GT(rb.recompute_s, 0);
  EXPECT_TRUE(at::allclose(a.AllGrads(), b.AllGrads(), 1e-6, 1e-9));
  EXPECT_TRUE(at::allclose(a.AllGrads(), c.AllGrads(), 1e-6, 1e-9));
  EXPECT_TRUE(at::allclose(a.AllMasters(), b.AllMasters(), 1e-6, 1e-9));
}

TEST(TrainStepTest, MicroBatch4EqualsMicroBatch2TimesAccumulation2) {
  Plan one = TestPlan("tiny-qwen2", 4, 1, 24);  // tied embeddings + biases: the trickiest gradients
  Plan accum = TestPlan("tiny-qwen2", 2, 2, 24);
  one.optimizer.lr = accum.optimizer.lr = 1e-3;
  at::Tensor tokens = testing::RandomTokens(4, 24, one.model.vocab, 9);

  Rig a(one), b(accum);
  StepResult ra = a.step.Run({tokens});
  StepResult rb = b.step.Run({tokens.narrow(0, 0, 2), tokens.narrow(0, 2, 2)});
  EXPECT_NEAR(ra.loss, rb.loss, 1e-5);
  EXPECT_NEAR(ra.grad_norm, rb.grad_norm, 1e-5 * ra.grad_norm);
  EXPECT_TRUE(at::allclose(a.AllGrads(), b.AllGrads(), 1e-4, 1e-8));
  // Parameters after the step. AdamW's first update is ~lr * sign(g), so only
  // a gradient within float noise of zero could flip; allow 1% of lr.
  EXPECT_TRUE(at::allclose(a.AllMasters(), b.AllMasters(), 0, 1e-5))
      << (a.AllMasters() - b.AllMasters()).abs().max().item<double>();
}

TEST(TrainStepTest, ProgramWithGathersEqualsResidentParameters) {
  Plan resident = TestPlan("tiny-llama", 2, 2, 16);
  Plan gathered = resident;
  gathered.strategy = ShardingStrategy::kFullShard;
  NormaliseGrouping(gathered);
  Rig a(resident), b(gathered);
  int gathers = 0;
  for (const auto& op : b.step.program().ops) gathers += op.kind == OpKind::kAllGather;
  EXPECT_GT(gathers, 0);
  for (int step = 0; step < 3; ++step) {
    at::Tensor t = testing::RandomTokens(4, 16, resident.model.vocab, 100 + step);
    std::vector<at::Tensor> mbs = {t.narrow(0, 0, 2), t.narrow(0, 2, 2)};
    StepResult ra = a.step.Run(mbs), rb = b.step.Run(mbs);
    EXPECT_DOUBLE_EQ(ra.loss, rb.loss) << "step " << step;
    EXPECT_EQ(ra.measurement.ops.size(), a.step.program().ops.size());
  }
  EXPECT_TRUE(at::allclose(a.AllMasters(), b.AllMasters(), 1e-6, 1e-9));
}

// The interpreter performs exactly the program: every op once, in list
// order, each measured; no op starts before the ops it depends on ended; ops
// of one stream do not overlap (on the CPU the host runs compute and copies
// itself, one after another).
void ExpectExecutionFollowsProgram(const StepProgram& program, const StepResult& r) {
  ASSERT_EQ(r.executed.size(), program.ops.size());
  for (size_t i = 0; i < r.executed.size(); ++i) ASSERT_EQ(r.executed[i], static_cast<int>(i));
  ASSERT_EQ(r.measurement.ops.size(), program.ops.size());
  constexpr double kSlack = 1e-6;  // host clock reads around the same instant
  std::map<StreamKind, double> stream_free;
  for (const StepOp& op : program.ops) {
    const OpMeasurement& m = r.measurement.ops[op.id];
    ASSERT_TRUE(m.measured) << op.name;
    EXPECT_LE(m.start_s, m.end_s + kSlack) << op.name;
    EXPECT_GE(m.start_s, -kSlack) << op.name;
    for (int d : op.deps) EXPECT_GE(m.start_s + kSlack, r.measurement.ops[d].end_s) << op.name << " <- " << program.ops[d].name;
    if (op.stream == StreamKind::kCompute || op.stream == StreamKind::kCpu) {
      EXPECT_GE(m.start_s + kSlack, stream_free[op.stream]) << op.name;
      stream_free[op.stream] = m.end_s;
    }
    EXPECT_GT(m.allocated, 0) << op.name;  // the allocator's state after it, read
  }
}

TEST(TrainStepTest, ExecutesExactlyTheProgramInItsOrder) {
  Plan plain = TestPlan("tiny-qwen2", 2, 2, 16);
  Plan checkpointed = plain;
  checkpointed.checkpoint_layers = {1};
  Plan sharded_on_one = plain;  // gathers are casts, reductions local
  sharded_on_one.strategy = ShardingStrategy::kFullShard;
  NormaliseGrouping(sharded_on_one);
  Plan offloaded = plain;
  offloaded.offload = Offload::kOptimizer;
  Plan params_offloaded = sharded_on_one;
  params_offloaded.offload = Offload::kParams;
  Plan all_offloaded = sharded_on_one;
  all_offloaded.offload = Offload::kOptimizerAndParams;
  Plan delayed = TestPlan("tiny-qwen2", 4, 1, 16);
  delayed.offload = Offload::kOptimizer;
  delayed.delayed_update = true;
  Plan staged_per_unit = offloaded;
  staged_per_unit.offload_staging = OffloadStaging::kUnit;
  Plan all_staged_per_unit = all_offloaded;
  all_staged_per_unit.offload_staging = OffloadStaging::kUnit;
  for (const Plan& plan : {plain, checkpointed, sharded_on_one, offloaded, params_offloaded, all_offloaded, delayed,
                           staged_per_unit, all_staged_per_unit}) {
    SCOPED_TRACE(StrategyName(plan.strategy) + " ckpt " + FormatLayerList(plan.checkpoint_layers) + " offload " +
                 OffloadName(plan.offload) + " staging " + OffloadStagingName(plan.offload_staging));
    Rig rig(plan);
    // Two steps: an offloaded optimizer's update runs in the second.
    for (int step = 0; step < 2; ++step) {
      at::Tensor t = testing::RandomTokens(4, 16, plan.model.vocab, 77 + step);
      std::vector<at::Tensor> mbs = {t};
      if (plan.grad_accum == 2) mbs = {t.narrow(0, 0, 2), t.narrow(0, 2, 2)};
      StepResult r = rig.step.Run(mbs);
      ExpectExecutionFollowsProgram(rig.step.program(), r);
    }
  }
}

TEST(TrainStepTest, RefusesOutOfVocabularyTokenBeforeAnyKernel) {
  Plan plan = TestPlan("tiny-llama", 2, 1, 16);
  Rig rig(plan);
  at::Tensor before = rig.AllMasters().clone();
  at::Tensor tokens = testing::RandomTokens(2, 16, plan.model.vocab, 1);
  tokens[1][7] = plan.model.vocab;  // one past the end
  try {
    rig.step.Run({tokens});
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("token id 512 is outside the model's vocabulary [0, 512)"),
              std::string::npos)
        << e.what();
  }
  tokens[1][7] = -3;
  EXPECT_THROW(rig.step.Run({tokens}), UserError);
  EXPECT_THROW(rig.step.Run({tokens.narrow(1, 0, 10)}), UserError);  // wrong shape
  EXPECT_THROW(rig.step.Run({}), UserError);                        // wrong count
  EXPECT_TRUE(at::equal(before, rig.AllMasters()));
}

TEST(TrainStepTest, RefusesMissingCommunicators) {
  Plan two = TestPlan("tiny-llama", 1, 1, 16);
  two.gpus = 2;
  two.strategy = ShardingStrategy::kFullShard;
  NormaliseGrouping(two);
  two.Validate();
  try {
    Rig rig(two);  // no communicators: one process cannot run a 2-GPU plan
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("start one process per GPU"), std::string::npos) << e.what();
  }
}

TEST(TrainStepTest, OffloadedOptimizerEqualsDeviceOptimizer) {
  // Master and AdamW state on the host, gradients copied down, the threaded
  // CPU AdamW, the compute shard copied up: the same parameters as AdamW on
  // the device, up to fp32 rounding (the CPU loop may contract to FMA), which
  // later steps carry through the gradients: < 5e-6 with lr 3e-3.
  // The offloaded update of each step runs in the next step, beside its
  // first forward, clipping as it reads the gradients: equal losses at every
  // step say it was applied in full before the parameters were used, and
  // the low clip limit makes every step clip.
  for (ShardingStrategy strategy : {ShardingStrategy::kNoShard, ShardingStrategy::kFullShard}) {
    Plan plain = TestPlan("tiny-qwen2", 2, 2, 16);
    plain.strategy = strategy;
    plain.optimizer.grad_clip = 0.05;
    NormaliseGrouping(plain);
    Plan offloaded = plain;
    offloaded.offload = Offload::kOptimizer;
    Rig a(plain), b(offloaded);
    int cpu_steps = 0;
    for (const auto& op : b.step.program().ops) cpu_steps += op.kind == OpKind::kCpuOptimizerStep;
    EXPECT_EQ(cpu_steps, static_cast<int>(b.units.size()));
    EXPECT_TRUE(b.units[0].master_on_host());
    // no_shard keeps one bf16 model on the device: the update is copied
    // straight into the resident compute copy.
    EXPECT_EQ(b.units[1].compute_shard().is_same(b.units[1].compute()), strategy == ShardingStrategy::kNoShard);
    for (int step = 0; step < 3; ++step) {
      at::Tensor t = testing::RandomTokens(4, 16, plain.model.vocab, 300 + step);
      std::vector<at::Tensor> mbs = {t.narrow(0, 0, 2), t.narrow(0, 2, 2)};
      StepResult ra = a.step.Run(mbs), rb = b.step.Run(mbs);
      EXPECT_NEAR(ra.loss, rb.loss, 1e-6 * ra.loss) << "step " << step;
      EXPECT_GT(ra.grad_norm, plain.optimizer.grad_clip) << "step " << step << " did not clip";
      EXPECT_NEAR(ra.grad_norm, rb.grad_norm, 1e-5 * ra.grad_norm) << "step " << step;
    }
    const double diff = (a.AllMasters() - b.AllMasters()).abs().max().item<double>();
    EXPECT_LT(diff, 5e-6) << StrategyName(strategy);  // 0.2% of lr: rounding carried through 3 steps
  }
}

TEST(TrainStepTest, OffloadStagingPerUnitEqualsSlotsBitForBit) {
  // The same CPU AdamW on the same gradients, whether each gradient came
  // down in its step's backward into the unit's own host buffer or at the
  // next step's start through a slot: the same parameters to the bit, at
  // every step (equal losses), with every step clipping (the factor travels
  // with the pending update), with one and two micro-batches per step, and
  // with an update the gate refuses (its gradient came down, per unit, and
  // must not be applied).
  for (ShardingStrategy strategy : {ShardingStrategy::kNoShard, ShardingStrategy::kFullShard}) {
    for (Offload offload : {Offload::kOptimizer, Offload::kOptimizerAndParams}) {
      if (offload == Offload::kOptimizerAndParams && strategy == ShardingStrategy::kNoShard) continue;
      for (int64_t grad_accum : {1, 2}) {
        SCOPED_TRACE(StrategyName(strategy) + " " + OffloadName(offload) + " grad_accum " + std::to_string(grad_accum));
        Plan slots = TestPlan("tiny-qwen2", 4 / grad_accum, grad_accum, 16);
        slots.strategy = strategy;
        slots.offload = offload;
        slots.optimizer.grad_clip = 0.05;
        NormaliseGrouping(slots);
        Plan unit = slots;
        unit.offload_staging = OffloadStaging::kUnit;
        unit.Validate();
        Rig a(slots), b(unit);
        auto refuse_step_2 = [](int* calls) { return [calls](double) { return ++*calls != 2; }; };
        int calls_a = 0, calls_b = 0;
        a.step.SetUpdateGate(refuse_step_2(&calls_a));
        b.step.SetUpdateGate(refuse_step_2(&calls_b));
        for (int step = 0; step < 4; ++step) {
          at::Tensor t = testing::RandomTokens(4, 16, slots.model.vocab, 700 + step);
          std::vector<at::Tensor> mbs = {t};
          if (grad_accum == 2) mbs = {t.narrow(0, 0, 2), t.narrow(0, 2, 2)};
          StepResult ra = a.step.Run(mbs), rb = b.step.Run(mbs);
          EXPECT_EQ(ra.loss, rb.loss) << "step " << step;
          EXPECT_EQ(ra.grad_norm, rb.grad_norm) << "step " << step;
          EXPECT_EQ(ra.update_skipped, step == 1) << "step " << step;
          EXPECT_EQ(rb.update_skipped, step == 1) << "step " << step;
          EXPECT_GT(ra.grad_norm, slots.optimizer.grad_clip) << "step " << step << " did not clip";
        }
        EXPECT_TRUE(at::equal(a.AllMasters(), b.AllMasters()));
        for (size_t u = 0; u < a.units.size(); ++u) {
          EXPECT_TRUE(at::equal(a.optimizer.state().exp_avg[u], b.optimizer.state().exp_avg[u])) << "unit " << u;
          EXPECT_TRUE(at::equal(a.optimizer.state().exp_avg_sq[u], b.optimizer.state().exp_avg_sq[u])) << "unit " << u;
          EXPECT_TRUE(at::equal(a.units[u].compute_shard(), b.units[u].compute_shard())) << "unit " << u;
        }
      }
    }
  }
}

// AdamW as torch.optim writes it, on whole tensors, for the delayed-update
// reference below: an independent implementation of what CpuAdamW computes.
struct ReferenceAdamW {
  at::Tensor p, m, v;
  int64_t t = 0;
  void Step(const at::Tensor& grad, double grad_scale, double lr, const OptimizerConfig& c) {
    ++t;
    const at::Tensor g = grad * grad_scale;
    p.mul_(1 - lr * c.weight_decay);
    m.mul_(c.beta1).add_(g, 1 - c.beta1);
    v.mul_(c.beta2).addcmul_(g, g, 1 - c.beta2);
    const double bias1 = 1 - std::pow(c.beta1, static_cast<double>(t));
    const double bias2_sqrt = std::sqrt(1 - std::pow(c.beta2, static_cast<double>(t)));
    p.add_(m / (v.sqrt() / bias2_sqrt + c.eps), -lr / bias1);
  }
};

TEST(TrainStepTest, DelayedUpdateAppliesEachGradientOneStepLate) {
  // Delayed parameter update: step k computes at the parameters of step
  // k - 2's update while the host applies step k - 1's gradient. Held
  // against (1) fresh rigs computing the same gradients at those parameters
  // and (2) a whole-tensor AdamW applying them one step late, with every
  // step clipping (the factor travels with the pending update).
  for (ShardingStrategy strategy : {ShardingStrategy::kNoShard, ShardingStrategy::kFullShard}) {
    SCOPED_TRACE(StrategyName(strategy));
    Plan plain = TestPlan("tiny-qwen2", 4, 1, 16);
    plain.strategy = strategy;
    plain.optimizer.grad_clip = 0.05;
    NormaliseGrouping(plain);
    Plan delayed = plain;
    delayed.offload = Offload::kOptimizer;
    delayed.delayed_update = true;
    delayed.Validate();
    Rig d(delayed);
    ReferenceAdamW ref;
    ref.p = d.AllMasters().clone();
    ref.m = at::zeros_like(ref.p);
    ref.v = at::zeros_like(ref.p);
    std::vector<at::Tensor> batches;
    for (int k = 0; k < 4; ++k) batches.push_back(testing::RandomTokens(4, 16, plain.model.vocab, 900 + k));
    // Step 0 and step 1 both compute at p0 (nothing applied before step 1's
    // backward): the same losses and gradients as a fresh rig's first step.
    for (int k = 0; k < 2; ++k) {
      Rig fresh(plain);
      StepResult expected = fresh.step.Run({batches[k]});
      StepResult got = d.step.Run({batches[k]});
      EXPECT_NEAR(got.loss, expected.loss, 1e-6 * expected.loss) << "step " << k;
      EXPECT_NEAR(got.grad_norm, expected.grad_norm, 1e-5 * expected.grad_norm) << "step " << k;
      EXPECT_GT(got.grad_norm, plain.optimizer.grad_clip) << "step " << k << " did not clip";
      // The plain rig's gradients are clipped in place, the offloaded ones not.
      const double scale = plain.optimizer.grad_clip / (expected.grad_norm + 1e-6);
      EXPECT_TRUE(at::allclose(d.AllGrads() * scale, fresh.AllGrads(), 1e-4, 1e-7)) << "step " << k;
      ref.Step(d.AllGrads(), scale, got.lr, plain.optimizer);
    }
    // Steps 2 and 3 compute at the reference after 1 and 2 updates; the
    // update applied during step 3 is step 2's gradient.
    // Step 2 computes at p1 = step 0's update alone: as an undelayed run
    // does its step after step 0.
    Plan undelayed = delayed;
    undelayed.delayed_update = false;
    Rig e(undelayed);
    e.step.Run({batches[0]});
    const StepResult at_p1 = e.step.Run({batches[2]});
    for (int k = 2; k < 4; ++k) {
      StepResult got = d.step.Run({batches[k]});
      if (k == 2) EXPECT_NEAR(got.loss, at_p1.loss, 1e-6 * at_p1.loss);
      EXPECT_GT(got.grad_norm, plain.optimizer.grad_clip) << "step " << k << " did not clip";
      ref.Step(d.AllGrads(), plain.optimizer.grad_clip / (got.grad_norm + 1e-6), got.lr, plain.optimizer);
    }
    // After the pending update: four updates, each gradient taken one update late.
    const double diff = (d.AllMasters() - ref.p).abs().max().item<double>();
    EXPECT_LT(diff, 5e-6) << "max |delayed - reference| " << diff;
    // And not the undelayed trajectory: the same batches without the delay end elsewhere.
    Rig u(undelayed);
    for (const auto& b : batches) u.step.Run({b});
    EXPECT_GT((u.AllMasters() - ref.p).abs().max().item<double>(), 100 * diff + 1e-6);
  }
}

TEST(TrainStepTest, OffloadedParametersEqualDeviceParameters) {
  // offload params: the fp32 master lives on the host and comes up around the
  // GPU AdamW (h2d master, adamw, d2h master) — the same arithmetic on the
  // same values, so the same parameters to the bit.
  // offload optimizer+params: the compute-dtype shard lives on the host too,
  // written by the CPU AdamW and copied up before every gather — the same as
  // offloading the optimizer alone (bitwise), and as the device optimizer up
  // to the CPU loop's fp32 rounding.
  for (ShardingStrategy strategy : {ShardingStrategy::kNoShard, ShardingStrategy::kFullShard}) {
    Plan plain = TestPlan("tiny-qwen2", 2, 2, 16);
    plain.strategy = strategy;
    NormaliseGrouping(plain);
    Plan params = plain, optimizer = plain, both = plain;
    params.offload = Offload::kParams;
    optimizer.offload = Offload::kOptimizer;
    both.offload = Offload::kOptimizerAndParams;
    const bool streams = strategy != ShardingStrategy::kNoShard;  // optimizer+params needs gathers
    Rig a(plain), b(params), c(optimizer);
    std::unique_ptr<Rig> d = streams ? std::make_unique<Rig>(both) : nullptr;
    EXPECT_TRUE(b.units[1].master_on_host());
    EXPECT_FALSE(b.units[1].compute_shard_on_host());
    int h2d_master = 0, h2d_params = 0;
    for (const auto& op : b.step.program().ops) h2d_master += op.kind == OpKind::kCopyMasterToDevice;
    EXPECT_EQ(h2d_master, static_cast<int>(b.units.size()));
    if (d) {
      EXPECT_TRUE(d->units[1].compute_shard_on_host());
      for (const auto& op : d->step.program().ops) h2d_params += op.kind == OpKind::kCopyParamsForGather;
      EXPECT_GT(h2d_params, 0);
    }
    for (int step = 0; step < 3; ++step) {
      at::Tensor t = testing::RandomTokens(4, 16, plain.model.vocab, 500 + step);
      std::vector<at::Tensor> mbs = {t.narrow(0, 0, 2), t.narrow(0, 2, 2)};
      StepResult ra = a.step.Run(mbs), rb = b.step.Run(mbs), rc = c.step.Run(mbs);
      EXPECT_EQ(ra.loss, rb.loss) << "step " << step;
      if (d) {
        StepResult rd = d->step.Run(mbs);
        EXPECT_EQ(rc.loss, rd.loss) << "step " << step;
      }
    }
    EXPECT_TRUE(at::equal(a.AllMasters(), b.AllMasters())) << StrategyName(strategy);
    if (d) {
      EXPECT_TRUE(at::equal(c.AllMasters(), d->AllMasters())) << StrategyName(strategy);
      EXPECT_LT((a.AllMasters() - d->AllMasters()).abs().max().item<double>(), 5e-6);
    }
  }
}

TEST(TrainStepTest, StreamedParametersNeedGathers) {
  Plan plan = TestPlan("tiny-llama", 1, 1, 16);
  plan.offload = Offload::kOptimizerAndParams;  // TestPlan is no_shard
  try {
    plan.Validate();
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("use full_shard (on one GPU too)"), std::string::npos) << e.what();
  }
}

TEST(TrainStepTest, ReleasedBuffersHoldNoBytesAndComeBack) {
  // FSDP's storage trick on a sharded program run on one device: after a step
  // the gathered copies of released units hold no bytes, the parameters
  // (aliases of the same storage) see the bytes the next gather brings.
  Plan plan = TestPlan("tiny-llama", 2, 1, 16);
  plan.strategy = ShardingStrategy::kFullShard;
  NormaliseGrouping(plan);
  Rig rig(plan);
  rig.step.Run({testing::RandomTokens(2, 16, plan.model.vocab, 3)});
  FlatUnit& block = rig.units[1];
  EXPECT_FALSE(block.compute_materialized());
  EXPECT_EQ(block.params()[0].storage().nbytes(), 0u);
  block.GatherLocal();
  EXPECT_TRUE(block.compute_materialized());
  EXPECT_TRUE(at::equal(block.params()[0].reshape({-1}),
                        block.master().narrow(0, 0, block.params()[0].numel()).to(block.compute_dtype())));
}

TEST(TrainerTest, LossFallsAndMetricsAreWritten) {
  Plan plan = TestPlan("tiny-llama", 4, 2, 64, DType::kBF16);  // bf16 compute, as on the GPU
  plan.checkpoint_layers = {1, 2};
  plan.optimizer.lr = 1e-2;
  plan.optimizer.warmup_steps = 5;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("llmplan_trainer_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  TrainConfig config = testing::ConfigFor(plan);
  config.steps = 40;
  config.run_dir = dir.string();
  config.device = "cpu";
  config.progress = false;
  testing::PatternBatches data(plan.micro_batch, plan.seq_len, 64, 21);
  RunSummary s = Train(config, data);
  ASSERT_EQ(s.losses.size(), 40u);
  EXPECT_NEAR(s.first_loss, std::log(512.0), 0.3);  // uniform at initialisation
  EXPECT_LT(s.final_loss, 0.5 * s.first_loss) << "loss did not fall: " << s.first_loss << " -> " << s.final_loss;
  EXPECT_EQ(data.position(), 40 * 2 * 4);
  EXPECT_GT(s.mean_tokens_per_s, 0);
  EXPECT_GT(s.mean_mfu, 0);  // the cpu profile has a peak
  EXPECT_GT(s.mean_hfu, s.mean_mfu);  // two checkpointed blocks recomputed

  std::ifstream metrics(dir / "metrics.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(metrics, line)) {
    auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["step"].get<int64_t>(), lines + 1);  // steps count from 1, as on the console
    for (const char* key : {"loss", "lr", "grad_norm", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "hfu",
                            "peak_allocated_bytes",
                            "peak_reserved_bytes", "forward_s", "backward_s", "optimizer_s", "data_s", "step_s"})
      EXPECT_TRUE(j.contains(key)) << key;
    // LibTorch 1.13's CPU tensors are counted; 2.x reports the process's RSS.
    EXPECT_TRUE(j["memory_source"] == "cpu_tensor_bytes" || j["memory_source"] == "process_peak_rss") << j;
    ++lines;
  }
  EXPECT_EQ(lines, 40);
  auto summary = nlohmann::json::parse(std::ifstream(dir / "summary.json"));
  EXPECT_EQ(summary["steps"], 40);
  auto program = nlohmann::json::parse(std::ifstream(dir / "program.json"));
  std::ifstream op_times(dir / "op_times.jsonl");
  std::getline(op_times, line);
  auto times = nlohmann::json::parse(line);
  for (const char* key : {"start_s", "end_s", "issued_s", "allocated", "reserved", "peak_allocated", "peak_reserved"})
    EXPECT_EQ(times[key].size(), program["ops"].size()) << key;
  auto plan_back = LoadPlan((dir / "plan.json").string());
  EXPECT_EQ(plan_back.checkpoint_layers, plan.checkpoint_layers);
  EXPECT_TRUE(std::filesystem::exists(dir / "trace.json"));
  std::filesystem::remove_all(dir);
}

TEST(TrainerTest, NoCudaIsAClearError) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is present";
  TrainConfig config = testing::ConfigFor(TestPlan("tiny-llama", 1, 1, 16));
  config.steps = 1;
  config.device = "cuda:0";
  config.progress = false;
  testing::PatternBatches data(1, 16, 64, 1);
  try {
    Train(config, data);
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--cpu"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace llmplan::executor
