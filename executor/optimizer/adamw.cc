#include "executor/optimizer/adamw.h"

#include <algorithm>
#include <cmath>

#include "executor/torch_compat.h"

namespace llmplan::executor {

double LearningRateAt(const OptimizerConfig& c, int64_t step) {
  if (c.warmup_steps > 0 && step < c.warmup_steps)
    return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup_steps);
  const double min_lr = c.lr * c.min_lr_ratio;
  if (step >= c.decay_steps) return min_lr;
  const double span = static_cast<double>(std::max<int64_t>(1, c.decay_steps - c.warmup_steps));
  const double progress = std::clamp(static_cast<double>(step - c.warmup_steps) / span, 0.0, 1.0);
  return min_lr + 0.5 * (c.lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

AdamW::AdamW(const OptimizerConfig& config, const std::vector<int64_t>& shard_numels, const at::Device& device,
             bool allow_fused)
    : config_(config), allow_fused_(allow_fused) {
  auto fp32 = at::TensorOptions().dtype(at::kFloat).device(device);
  for (int64_t n : shard_numels) {
    state_.exp_avg.push_back(at::zeros({n}, fp32));
    state_.exp_avg_sq.push_back(at::zeros({n}, fp32));
  }
  step_tensor_ = at::zeros({}, fp32);
}

double AdamW::ClipGradients(const std::vector<at::Tensor>& grads) {
  at::NoGradGuard no_grad;
  if (grads.empty()) return 0;
  std::vector<at::Tensor> squares;
  squares.reserve(grads.size());
  // Per-buffer norms stay on the device; one .item() at the end is the only sync.
  for (const auto& g : grads) squares.push_back(at::linalg_vector_norm(g, 2).pow(2));
  const double norm = at::stack(squares).sum().sqrt().item<double>();
  if (config_.grad_clip > 0 && norm > config_.grad_clip) {
    const double scale = config_.grad_clip / (norm + 1e-6);
    for (const auto& g : grads) g.mul_(scale);  // at::Tensor handles are shallow: writes the buffer
  }
  return norm;
}

void AdamW::Update(int unit, at::Tensor& master, const at::Tensor& grad) {
  at::NoGradGuard no_grad;
  at::Tensor& m = state_.exp_avg.at(unit);
  at::Tensor& v = state_.exp_avg_sq.at(unit);
  const double lr = CurrentLearningRate();
  const double b1 = config_.beta1, b2 = config_.beta2;
  const int64_t t = state_.step + 1;  // 1-based, as torch.optim
  if (allow_fused_ && compat::HasFusedAdamW(master.device())) {
    step_tensor_.fill_(static_cast<double>(t));
    compat::FusedAdamW(master, grad, m, v, step_tensor_, lr, b1, b2, config_.weight_decay, config_.eps);
    return;
  }
  // torch.optim.AdamW, single-tensor form, on the whole flat buffer.
  master.mul_(1.0 - lr * config_.weight_decay);
  m.mul_(b1).add_(grad, 1.0 - b1);
  v.mul_(b2).addcmul_(grad, grad, 1.0 - b2);
  const double bias1 = 1.0 - std::pow(b1, static_cast<double>(t));
  const double bias2_sqrt = std::sqrt(1.0 - std::pow(b2, static_cast<double>(t)));
  at::Tensor denom = (v.sqrt() / bias2_sqrt).add_(config_.eps);
  master.addcdiv_(m, denom, -lr / bias1);
}

}  // namespace llmplan::executor
