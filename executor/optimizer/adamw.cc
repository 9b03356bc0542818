#include "executor/optimizer/adamw.h"

#include <algorithm>
#include <cmath>

#include "executor/hardware/host_memory.h"
#include "executor/optimizer/adamw_math.h"
#include "executor/optimizer/cpu_adamw.h"
#include "executor/torch_compat.h"

#ifdef LLMPLAN_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#endif

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
             bool allow_fused, bool state_on_host, std::shared_ptr<NvmeOptimizerState> nvme)
    : config_(config), allow_fused_(allow_fused), state_on_host_(state_on_host) {
  auto fp32 = at::TensorOptions().dtype(at::kFloat).device(device);
  if (nvme) {
    TORCH_CHECK(state_on_host && nvme->units() == static_cast<int>(shard_numels.size()),
                "AdamW: NVMe state needs the offloaded optimizer and one file region per unit");
    for (size_t u = 0; u < shard_numels.size(); ++u)
      TORCH_CHECK(nvme->shard_numel(static_cast<int>(u)) == shard_numels[u], "AdamW: NVMe unit ", u, " has ",
                  nvme->shard_numel(static_cast<int>(u)), " elements, the shard ", shard_numels[u]);
    state_.nvme = std::move(nvme);
  }
  for (int64_t n : state_.nvme ? std::vector<int64_t>{} : shard_numels) {
    state_.exp_avg.push_back(state_on_host ? PinnedHostZeros(n, at::kFloat) : at::zeros({n}, fp32));
    state_.exp_avg_sq.push_back(state_on_host ? PinnedHostZeros(n, at::kFloat)
                                              : at::zeros({n}, fp32));
  }
  step_tensor_ = at::zeros({}, fp32);
}

at::Tensor AdamW::SumOfSquares(const std::vector<at::Tensor>& grads) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> squares;
  squares.reserve(grads.size());
  for (const auto& g : grads) squares.push_back(at::linalg_vector_norm(g, 2).pow(2));
  return at::stack(squares).sum();
}

double AdamW::ClipGradients(const std::vector<at::Tensor>& grads) {
  if (grads.empty()) return 0;
  // Per-buffer norms stay on the device; one .item() at the end is the only sync.
  const double norm = SumOfSquares(grads).sqrt().item<double>();
  const double scale = ClipScale(norm);
  if (scale != 1.0) {
    at::NoGradGuard no_grad;
    for (const auto& g : grads) g.mul_(scale);  // at::Tensor handles are shallow: writes the buffer
  }
  return norm;
}

AdamWScalars AdamW::NextScalars(double grad_scale) const {
  const double lr = CurrentLearningRate();
  const double b1 = config_.beta1, b2 = config_.beta2;
  const int64_t t = state_.step + 1;  // 1-based, as torch.optim
  AdamWScalars s;
  s.decay = static_cast<float>(1.0 - lr * config_.weight_decay);
  s.beta1 = static_cast<float>(b1);
  s.one_minus_beta1 = static_cast<float>(1.0 - b1);
  s.beta2 = static_cast<float>(b2);
  s.one_minus_beta2 = static_cast<float>(1.0 - b2);
  s.bias2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(b2, static_cast<double>(t))));
  s.eps = static_cast<float>(config_.eps);
  s.step_size = static_cast<float>(-lr / (1.0 - std::pow(b1, static_cast<double>(t))));
  // As the GPU's in-place clip multiplies: an fp32 tensor by a scalar in fp32.
  s.grad_scale = static_cast<float>(grad_scale);
  return s;
}

double AdamW::ClipScale(double norm) const {
  return config_.grad_clip > 0 && norm > config_.grad_clip ? config_.grad_clip / (norm + 1e-6) : 1.0;
}

void AdamW::CheckShapes(int unit, const at::Tensor& master, const at::Tensor& grad) const {
  const int64_t n = state_.nvme ? state_.nvme->shard_numel(unit) : state_.exp_avg.at(unit).numel();
  TORCH_CHECK(master.is_contiguous() && grad.is_contiguous() && master.numel() == n && grad.numel() == n &&
                  master.scalar_type() == at::kFloat &&
                  (grad.scalar_type() == at::kFloat || grad.scalar_type() == at::kBFloat16),
              "AdamW::Update: unit ", unit, " needs contiguous fp32 master and fp32 or bf16 grad of ", n, " elements");
}

void AdamW::UpdateOnHost(int unit, at::Tensor& master, const at::Tensor& grad, const at::Tensor& compute_copy,
                         const AdamWScalars& s) {
  CheckShapes(unit, master, grad);
  TORCH_CHECK(state_on_host_, "AdamW::UpdateOnHost: the optimizer state is not on the host");
  TORCH_CHECK(grad.scalar_type() == at::kFloat, "AdamW::UpdateOnHost: the host update reads an fp32 gradient");
  // Offload: everything is in host memory by now (the interpreter copied
  // the gradient shard down); one threaded pass over the four arrays.
  TORCH_CHECK(master.device().is_cpu() && grad.device().is_cpu(), "AdamW::Update: offloaded state needs host tensors");
  const int64_t n = master.numel();
  const bool copy = compute_copy.defined();
  TORCH_CHECK(!copy || (compute_copy.device().is_cpu() && compute_copy.is_contiguous() && compute_copy.numel() == n &&
                        (compute_copy.scalar_type() == at::kBFloat16 || compute_copy.scalar_type() == at::kFloat)),
              "AdamW::Update: the offloaded compute copy must be a contiguous bf16/fp32 host tensor of ", n,
              " elements");
  if (state_.nvme) {
    // m and v stream from the SSD through the same loop, block by block.
    state_.nvme->Update(unit, master.data_ptr<float>(), grad.data_ptr<float>(),
                        copy ? compute_copy.data_ptr() : nullptr, copy && compute_copy.scalar_type() == at::kBFloat16, s,
                        cpu_threads_);
    return;
  }
  at::Tensor& m = state_.exp_avg.at(unit);
  at::Tensor& v = state_.exp_avg_sq.at(unit);
  // The compute copy is written in the same pass (one sweep of host memory, not two).
  CpuAdamW(master.data_ptr<float>(), grad.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), n, s,
           cpu_threads_, copy ? compute_copy.data_ptr() : nullptr, copy && compute_copy.scalar_type() == at::kBFloat16);
}

void AdamW::Update(int unit, at::Tensor& master, const at::Tensor& grad, const at::Tensor& compute_copy,
                   double grad_scale) {
  at::NoGradGuard no_grad;
  if (state_on_host_) {
    UpdateOnHost(unit, master, grad, compute_copy, NextScalars(grad_scale));
    return;
  }
  CheckShapes(unit, master, grad);
  const double lr = CurrentLearningRate();
  const double b1 = config_.beta1, b2 = config_.beta2;
  const int64_t t = state_.step + 1;  // 1-based, as torch.optim
  at::Tensor& m = state_.exp_avg.at(unit);
  at::Tensor& v = state_.exp_avg_sq.at(unit);
#ifdef LLMPLAN_WITH_CUDA
  if (allow_fused_ && master.device().is_cuda()) {
    // One launch reads p, g, m, v and writes p, m, v and the compute copy:
    // ~30 bytes of HBM traffic per element instead of ~6 passes of ATen ops.
    TORCH_CHECK(!compute_copy.defined() || (compute_copy.is_contiguous() && compute_copy.numel() == m.numel() &&
                                            (compute_copy.scalar_type() == at::kBFloat16 ||
                                             compute_copy.scalar_type() == at::kFloat)),
                "AdamW::Update: the compute copy must be a contiguous bf16/fp32 tensor of ", m.numel(), " elements");
    // On the master's GPU and its current stream, whatever device is current
    // on this thread (the default stream's handle is null: a launch on it goes
    // to the current device).
    const c10::cuda::CUDAGuard guard(master.device());
    const AdamWScalars s = NextScalars(grad_scale);
    LaunchFusedAdamW(master.data_ptr<float>(), grad.data_ptr(), grad.scalar_type() == at::kBFloat16,
                     m.data_ptr<float>(), v.data_ptr<float>(), compute_copy.defined() ? compute_copy.data_ptr() : nullptr,
                     compute_copy.defined() && compute_copy.scalar_type() == at::kBFloat16, master.numel(), s,
                     at::cuda::getCurrentCUDAStream(master.device().index()).stream());
    return;
  }
#endif
  // A bf16 gradient (gradient_path.h) is widened first (exact); an fp32 one
  // is scaled in place (at::Tensor handles are shallow: the caller's buffer).
  at::Tensor g = grad.scalar_type() == at::kFloat ? grad : grad.to(at::kFloat);
  if (grad_scale != 1.0) g.mul_(grad_scale);
  if (allow_fused_ && compat::HasFusedAdamW(master.device())) {
    step_tensor_.fill_(static_cast<double>(t));
    compat::FusedAdamW(master, g, m, v, step_tensor_, lr, b1, b2, config_.weight_decay, config_.eps);
    if (compute_copy.defined()) compute_copy.copy_(master);
    return;
  }
  // torch.optim.AdamW, single-tensor form, on the whole flat buffer.
  master.mul_(1.0 - lr * config_.weight_decay);
  m.mul_(b1).add_(g, 1.0 - b1);
  v.mul_(b2).addcmul_(g, g, 1.0 - b2);
  const double bias1 = 1.0 - std::pow(b1, static_cast<double>(t));
  const double bias2_sqrt = std::sqrt(1.0 - std::pow(b2, static_cast<double>(t)));
  at::Tensor denom = (v.sqrt() / bias2_sqrt).add_(config_.eps);
  master.addcdiv_(m, denom, -lr / bias1);
  if (compute_copy.defined()) compute_copy.copy_(master);
}

}  // namespace llmplan::executor
