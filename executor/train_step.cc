#include "executor/train_step.h"

#include "executor/loss/chunked_cross_entropy.h"
#include "executor/torch_compat.h"
#include "planner/user_error.h"

namespace llmplan::executor {

at::ScalarType ComputeDtype(const Plan& plan) {
  return plan.param_dtype == DType::kBF16 ? at::kBFloat16 : at::kFloat;
}

std::vector<FlatUnit> MakeFlatUnits(const LlamaModel& model, const at::Device& device, at::ScalarType compute_dtype,
                                    uint64_t seed) {
  std::vector<FlatUnit> units;
  units.reserve(model.num_units());
  for (int u = 0; u < model.num_units(); ++u) {
    units.emplace_back(model.unit_params(u), /*group_size=*/1, /*rank=*/0, device, compute_dtype);
    model.InitUnit(u, units.back().MasterViews(), seed);
    units.back().GatherLocal();
  }
  return units;
}

std::vector<int64_t> ShardNumels(const std::vector<FlatUnit>& units) {
  std::vector<int64_t> n;
  for (const auto& u : units) n.push_back(u.shard_numel());
  return n;
}

StepInterpreter::StepInterpreter(const Plan& plan, const LlamaModel& model, std::vector<FlatUnit>& units,
                                 AdamW& optimizer, StepProgram program, const at::Device& device)
    : plan_(plan),
      model_(model),
      units_(units),
      optimizer_(optimizer),
      program_(std::move(program)),
      device_(device),
      timer_(std::make_unique<compat::OpTimer>(device)) {
  if (plan.gpus != 1)
    throw UserError("plan for " + std::to_string(plan.gpus) +
                    " GPUs: this executor runs one process on one device so far; make the plan with llmplan estimate --gpus 1");
  if (plan.offload != Offload::kNone)
    throw UserError("plan offloads '" + OffloadName(plan.offload) +
                    "': offload is not implemented in the executor yet; make the plan with llmplan estimate --offload none");
  if (static_cast<int>(units.size()) != model.num_units() ||
      static_cast<int>(program_.units.size()) != model.num_units())
    throw UserError("step program has " + std::to_string(program_.units.size()) + " units, the model " +
                    std::to_string(model.num_units()));
  for (const auto& op : program_.ops) {
    switch (op.kind) {
      case OpKind::kCopyToDevice:
      case OpKind::kCopyToHost:
      case OpKind::kCpuOptimizerStep:
        throw UserError("step program op '" + op.name + "' (offload) is not supported by the executor yet");
      case OpKind::kAllGather: program_gathers_ = true; break;
      default: break;
    }
  }
  rope_ = model.MakeRopeTable(plan.seq_len, device, ComputeDtype(plan));
}

StepInterpreter::~StepInterpreter() = default;

StepResult StepInterpreter::Run(const std::vector<at::Tensor>& micro_batches) {
  if (static_cast<int64_t>(micro_batches.size()) != plan_.grad_accum)
    throw UserError("step needs " + std::to_string(plan_.grad_accum) + " micro-batches, got " +
                    std::to_string(micro_batches.size()));
  const int64_t vocab = model_.spec().vocab;
  inputs_.clear();
  targets_.clear();
  for (const auto& tokens : micro_batches) {
    if (tokens.dim() != 2 || tokens.size(0) != plan_.micro_batch || tokens.size(1) != plan_.seq_len + 1 ||
        tokens.scalar_type() != at::kLong)
      throw UserError("micro-batch must be int64 [" + std::to_string(plan_.micro_batch) + ", " +
                      std::to_string(plan_.seq_len + 1) + "], got " + tokens.toString() + " " +
                      c10::str(tokens.sizes()));
    if (tokens.device().is_cpu()) {
      // A few thousand ints: negligible next to the step. On the GPU an
      // out-of-range embedding index is a device assert that kills the run.
      const int64_t lo = tokens.min().item<int64_t>(), hi = tokens.max().item<int64_t>();
      if (lo < 0 || hi >= vocab)
        throw UserError("token id " + std::to_string(lo < 0 ? lo : hi) + " is outside the model's vocabulary [0, " +
                        std::to_string(vocab) + ")");
    }
    at::Tensor on_device = tokens.to(device_, /*non_blocking=*/true);
    inputs_.push_back(on_device.narrow(1, 0, plan_.seq_len));
    targets_.push_back(on_device.narrow(1, 1, plan_.seq_len).reshape({-1}));
  }
  for (auto& u : units_) u.ZeroGradients();
  activations_.clear();
  grad_flowing_.clear();
  loss_sum_ = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device_));
  clipped_ = false;
  grad_norm_ = 0;

  StepResult result;
  result.lr = optimizer_.CurrentLearningRate();
  for (const StepOp& op : program_.ops) {
    timer_->Start(op.id);
    switch (op.kind) {
      case OpKind::kAllGather: units_.at(op.unit).GatherLocal(); break;
      case OpKind::kForward: Forward(op.unit, op.micro_batch); break;
      case OpKind::kRecompute: Recompute(op.unit, op.micro_batch); break;
      case OpKind::kBackward: Backward(op.unit, op.micro_batch); break;
      case OpKind::kRelease: break;  // one process keeps the compute copy resident
      case OpKind::kReduceScatter: break;  // gradients were reduced locally after the backward
      case OpKind::kAllReduce:
        if (op.unit < 0) ClipOnce();  // the grad-norm all-reduce
        break;
      case OpKind::kOptimizerStep: {
        ClipOnce();  // no-op when the program's norm op ran
        FlatUnit& unit = units_.at(op.unit);
        optimizer_.Update(op.unit, unit.master(), unit.grad());
        // Without gathers in the program (no_shard) the compute copy is
        // resident and the optimizer step refreshes it.
        if (!program_gathers_) unit.GatherLocal();
        break;
      }
      case OpKind::kCopyToDevice:
      case OpKind::kCopyToHost:
      case OpKind::kCpuOptimizerStep: TORCH_CHECK(false, "offload op reached the interpreter"); break;
    }
    timer_->Stop(op.id);
  }
  optimizer_.FinishStep();
  result.op_seconds = timer_->Collect();  // waits for the device
  result.loss = loss_sum_.item<double>() / static_cast<double>(plan_.grad_accum);
  result.grad_norm = grad_norm_;
  for (const StepOp& op : program_.ops) {
    const double s = op.id < static_cast<int>(result.op_seconds.size()) ? result.op_seconds[op.id] : 0.0;
    switch (op.kind) {
      case OpKind::kForward: result.forward_s += s; break;
      case OpKind::kRecompute: result.recompute_s += s; break;
      case OpKind::kBackward: result.backward_s += s; break;
      case OpKind::kOptimizerStep:
      case OpKind::kCpuOptimizerStep: result.optimizer_s += s; break;
      case OpKind::kAllReduce: (op.unit < 0 ? result.optimizer_s : result.comm_s) += s; break;
      default: result.comm_s += s; break;
    }
  }
  activations_.clear();
  inputs_.clear();
  targets_.clear();
  return result;
}

void StepInterpreter::Forward(int unit, int mb) {
  TORCH_CHECK(mb >= 0 && mb < static_cast<int>(inputs_.size()), "forward of micro-batch ", mb, " out of range");
  const auto& params = units_.at(unit).params();
  Activation a;
  switch (model_.unit_kind(unit)) {
    case UnitKind::kEmbedding: a.output = model_.EmbeddingForward(params, inputs_[mb]); break;
    case UnitKind::kBlock: {
      // A fresh leaf: this unit's graph stops here, and its .grad after
      // backward is exactly the gradient to hand to the unit below.
      a.input = activations_.at({unit - 1, mb}).output.detach().requires_grad_(true);
      const int layer = unit - 1;
      if (plan_.IsCheckpointed(layer)) {
        at::NoGradGuard no_grad;  // keep only the input; activations die here
        a.output = model_.BlockForward(layer, params, a.input, rope_);
      } else {
        a.output = model_.BlockForward(layer, params, a.input, rope_);
      }
      break;
    }
    case UnitKind::kHead: {
      a.input = activations_.at({unit - 1, mb}).output.detach().requires_grad_(true);
      at::Tensor normed = model_.FinalNorm(params, a.input);
      at::Tensor weight = model_.OutputWeight(params, units_.at(model_.embedding_unit()).params());
      a.output = ChunkedCrossEntropy(normed.reshape({-1, normed.size(-1)}), weight, targets_[mb],
                                     plan_.loss_chunk_tokens);
      loss_sum_ += a.output.detach();
      break;
    }
  }
  activations_[{unit, mb}] = std::move(a);
}

void StepInterpreter::Recompute(int unit, int mb) {
  Activation& a = activations_.at({unit, mb});
  a.output = model_.BlockForward(unit - 1, units_.at(unit).params(), a.input, rope_);
}

void StepInterpreter::Backward(int unit, int mb) {
  Activation& a = activations_.at({unit, mb});
  const UnitKind kind = model_.unit_kind(unit);
  if (kind == UnitKind::kHead) {
    at::Tensor seed = at::full({}, 1.0 / static_cast<double>(plan_.grad_accum), a.output.options());
    torch::autograd::backward({a.output}, {seed});
  } else {
    // A checkpointed block whose program had no recompute op still needs its graph.
    if (kind == UnitKind::kBlock && !a.output.requires_grad()) Recompute(unit, mb);
    at::Tensor grad = grad_flowing_.at(mb);
    torch::autograd::backward({a.output}, {grad});
  }
  if (a.input.defined()) grad_flowing_[mb] = a.input.grad();
  else grad_flowing_.erase(mb);
  activations_.erase({unit, mb});  // frees this unit's graph and saved tensors
  // One process: "reduce" = accumulate this micro-batch's gradient in fp32.
  // (A tied embedding's compute_grad also holds the head's contribution by
  // now; it is reduced with the embedding, whose backward comes last.)
  units_.at(unit).ReduceGradientsLocal();
}

void StepInterpreter::ClipOnce() {
  if (clipped_) return;
  std::vector<at::Tensor> grads;
  for (auto& u : units_) grads.push_back(u.grad());
  grad_norm_ = optimizer_.ClipGradients(grads);
  clipped_ = true;
}

}  // namespace llmplan::executor
