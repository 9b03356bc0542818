// Helpers for the executor-core suites: small plans, token batches from
// memory, and a training rig (model + flat units + AdamW + step interpreter)
// whose pieces a test can inspect.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "executor/run/batch_source.h"
#include "executor/sharding/flat_unit.h"
#include "executor/model/llama_model.h"
#include "executor/optimizer/adamw.h"
#include "executor/sharding/shard_model.h"
#include "executor/run/trainer.h"
#include "executor/step/step_interpreter.h"
#include "executor/torch_compat.h"
#include "base/user_error.h"
#include "planner/hardware_profile.h"
#include "planner/plan.h"
#include "planner/step_program.h"

namespace llmplan::executor::testing {

inline HardwareProfile CpuProfile() {
  return LoadHardwareProfile(std::string(LLMPLAN_SOURCE_DIR) + "/profiles/cpu.json");
}

// A TrainConfig for `plan` with what `llmplan run` hands Train beside it: the
// plan's profile (defaults when there is no such profile file) and the step
// program built from the two. Nothing is predicted.
inline TrainConfig ConfigFor(const Plan& plan) {
  TrainConfig config;
  config.plan = plan;
  try {
    config.profile = LoadHardwareProfile(plan.profile);
  } catch (const UserError&) {
    config.profile.name = plan.profile;
  }
  config.program = BuildStepProgram(plan, config.profile);
  return config;
}

// A one-device plan for `preset`. loss_chunk_tokens 48 does not divide the
// token counts used below, so the last loss chunk is a short one.
inline Plan TestPlan(const std::string& preset, int64_t micro_batch, int64_t grad_accum, int64_t seq_len,
                     DType dtype = DType::kFP32) {
  Plan p;
  p.model = PresetModel(preset);
  p.profile = "cpu";
  p.gpus = 1;
  p.gpus_per_node = 1;
  p.strategy = ShardingStrategy::kNoShard;
  NormaliseGrouping(p);
  p.seq_len = seq_len;
  p.micro_batch = micro_batch;
  p.grad_accum = grad_accum;
  p.param_dtype = dtype;
  p.loss_chunk_tokens = 48;
  p.optimizer.lr = 3e-3;
  p.optimizer.warmup_steps = 3;
  p.optimizer.decay_steps = 1000;
  p.seed = 7;
  p.Validate();
  return p;
}

// `rows` samples of seq_len + 1 tokens, uniformly random in [0, vocab).
inline at::Tensor RandomTokens(int64_t rows, int64_t seq_len, int64_t vocab, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return at::randint(vocab, {rows, seq_len + 1}, gen, at::TensorOptions().dtype(at::kLong));
}

// Samples cut from a fixed periodic "text" at pseudo-random offsets: a
// sequence a small model learns within tens of steps.
class PatternBatches : public BatchSource {
 public:
  PatternBatches(int64_t micro_batch, int64_t seq_len, int64_t alphabet, uint64_t seed)
      : micro_batch_(micro_batch), seq_len_(seq_len), gen_(at::detail::createCPUGenerator(seed)) {
    const int64_t period = 97;
    text_ = at::empty({period * 64}, at::TensorOptions().dtype(at::kLong));
    auto* t = text_.data_ptr<int64_t>();
    for (int64_t i = 0; i < text_.numel(); ++i) t[i] = ((i % period) * 31 + (i % period) / 7) % alphabet;
  }
  at::Tensor Next() override {
    at::Tensor rows = at::empty({micro_batch_, seq_len_ + 1}, at::TensorOptions().dtype(at::kLong));
    for (int64_t r = 0; r < micro_batch_; ++r) {
      const int64_t start =
          at::randint(text_.numel() - seq_len_ - 1, {1}, gen_, at::TensorOptions().dtype(at::kLong)).item<int64_t>();
      rows[r].copy_(text_.narrow(0, start, seq_len_ + 1));
    }
    ++position_;
    return rows;
  }
  int64_t position() const override { return position_ * micro_batch_; }
  // The generator is sequential: replay the draws up to the position.
  void Seek(int64_t next_sample) override {
    while (position() < next_sample) Next();
  }

 private:
  int64_t micro_batch_, seq_len_;
  at::Generator gen_;
  at::Tensor text_;
  int64_t position_ = 0;
};

// Everything one step needs, built the way the trainer builds it.
struct Rig {
  explicit Rig(const Plan& p, const at::Device& device = at::Device(at::kCPU))
      : counted((compat::InstallCpuTensorCounter(), true)),  // before any tensor, as the trainer does
        plan(p),
        model(p.model),
        units(MakeShardedUnits(model, p, device, /*shard_rank=*/0)),
        optimizer(p.optimizer, ShardNumels(units), device, /*allow_fused=*/true, OffloadsOptimizer(p.offload)),
        step(BuildStepProgram(plan, CpuProfile()), model, units, optimizer, device) {}
  Rig(const Rig&) = delete;
  Rig& operator=(const Rig&) = delete;

  // Concatenation of every unit's fp32 gradient / master buffer.
  at::Tensor AllGrads() {
    std::vector<at::Tensor> g;
    for (auto& u : units) g.push_back(u.grad());
    return at::cat(g);
  }
  // The masters after every step run so far (an offloaded optimizer's last
  // update applied first).
  at::Tensor AllMasters() {
    step.FinishUpdate();
    std::vector<at::Tensor> m;
    for (auto& u : units) m.push_back(u.master());
    return at::cat(m);
  }

  bool counted;
  Plan plan;
  LlamaModel model;
  std::vector<FlatUnit> units;
  AdamW optimizer;
  StepInterpreter step;
};

}  // namespace llmplan::executor::testing
