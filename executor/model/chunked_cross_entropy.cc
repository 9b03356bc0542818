#include "executor/model/chunked_cross_entropy.h"

#include "executor/torch_compat.h"

#ifdef LLMPLAN_WITH_CUDA
#include "executor/model/cross_entropy_kernel.h"
#endif

namespace llmplan::executor {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class ChunkedCrossEntropyFunction : public torch::autograd::Function<ChunkedCrossEntropyFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& targets, int64_t chunk_tokens, bool fused,
                            const at::Tensor* weight_grad_into, double denominator, double known_seed) {
#ifndef LLMPLAN_WITH_CUDA
    (void)fused;  // the kernel exists only in CUDA builds
#endif
    const int64_t n = hidden.size(0);
    const double inv_n = 1.0 / (denominator > 0 ? denominator : static_cast<double>(n));
    // The gradient is built for the seed backward will bring, when the
    // caller knows it (chunked_cross_entropy.h); backward then scales nothing.
    const double grad_scale = inv_n * (known_seed > 0 ? known_seed : 1.0);
    const bool need_grad_hidden = hidden.requires_grad(), need_grad_weight = weight.requires_grad();
    at::Tensor grad_hidden = need_grad_hidden ? at::empty_like(hidden) : at::Tensor();
    // The caller's buffer (its flat gradient), or one of our own.
    const bool into_callers = need_grad_weight && weight_grad_into != nullptr;
    at::Tensor grad_weight = into_callers ? *weight_grad_into : need_grad_weight ? at::zeros_like(weight) : at::Tensor();
    at::Tensor loss_sum = at::zeros({}, hidden.options().dtype(at::kFloat));
    for (int64_t start = 0; start < n; start += chunk_tokens) {
      const int64_t len = std::min(chunk_tokens, n - start);
      at::Tensor h = hidden.narrow(0, start, len);
#ifdef LLMPLAN_WITH_CUDA
      if (fused) {
        // [len, V] in the compute dtype: the chunk's only big buffer, turned
        // into d(mean loss)/d logits in place by one kernel.
        at::Tensor logits = at::mm(h, weight.t());
        at::Tensor row_loss = at::empty({len}, hidden.options().dtype(at::kFloat));
        const at::Tensor t = targets.narrow(0, start, len).contiguous();
        const bool gradient = need_grad_hidden || need_grad_weight;
        LaunchCrossEntropyRows(
            logits.scalar_type() == at::kBFloat16 ? KernelDType::kBF16 : KernelDType::kFP32, logits.data_ptr(),
            t.data_ptr<int64_t>(), row_loss.data_ptr<float>(), len, logits.size(1), gradient,
            static_cast<float>(grad_scale), at::cuda::getCurrentCUDAStream(logits.device().index()).stream());
        loss_sum += row_loss.sum();
        if (need_grad_hidden) {
          at::Tensor dst = grad_hidden.narrow(0, start, len);
          at::mm_out(dst, logits, weight);
        }
        if (need_grad_weight) grad_weight.addmm_(logits.t(), h);
        continue;
      }
#endif
      at::Tensor t = targets.narrow(0, start, len).unsqueeze(1);
      at::Tensor logits = at::mm(h, weight.t()).to(at::kFloat);  // [len, V] fp32: the only big buffer
      at::Tensor lse = at::logsumexp(logits, 1, /*keepdim=*/true);
      loss_sum += (lse - logits.gather(1, t)).sum();
      if (!need_grad_hidden && !need_grad_weight) continue;
      // d(mean loss)/d logits = (softmax - one_hot) / N, built in place in the
      // logits buffer so no second [len, V] fp32 tensor is allocated.
      logits.sub_(lse).exp_();
      logits.scatter_add_(1, t, at::full({len, 1}, -1.0, logits.options()));
      logits.mul_(grad_scale);
      at::Tensor dlogits = logits.to(hidden.scalar_type());
      if (need_grad_hidden) {
        at::Tensor dst = grad_hidden.narrow(0, start, len);
        at::mm_out(dst, dlogits, weight);
      }
      if (need_grad_weight) grad_weight.addmm_(dlogits.t(), h);
    }
    ctx->saved_data["grad_hidden"] = grad_hidden;
    ctx->saved_data["grad_weight"] = grad_weight;
    ctx->saved_data["into_callers"] = into_callers;
    ctx->saved_data["prescaled"] = known_seed > 0;
    return (loss_sum * inv_n).to(hidden.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    at::Tensor g = grad_outputs[0];
    at::Tensor grad_hidden = ctx->saved_data["grad_hidden"].toTensor();
    at::Tensor grad_weight = ctx->saved_data["grad_weight"].toTensor();
    const bool into_callers = ctx->saved_data["into_callers"].toBool();
    const bool prescaled = ctx->saved_data["prescaled"].toBool();
    ctx->saved_data.clear();  // drop our references as soon as autograd has the results
    // Scale in place (these buffers are ours, or the caller's to be scaled) by
    // a device scalar: no host sync to test whether g is 1. Not when the
    // forward built them for the seed: g is that seed (the caller's promise).
    if (!prescaled) {
      if (grad_hidden.defined()) grad_hidden.mul_(g.to(grad_hidden.scalar_type()));
      if (grad_weight.defined()) grad_weight.mul_(g.to(grad_weight.scalar_type()));
    }
    // In the caller's buffer the weight's gradient is in place already.
    return {grad_hidden, into_callers ? at::Tensor() : grad_weight, at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor ChunkedCrossEntropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                               int64_t chunk_tokens, bool fused, const at::Tensor& weight_grad_into,
                               double denominator, double known_seed) {
  TORCH_CHECK(chunk_tokens >= 1, "ChunkedCrossEntropy: chunk_tokens must be positive");
  TORCH_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
              "ChunkedCrossEntropy: hidden [N, H] and weight [V, H] expected");
  TORCH_CHECK(!weight_grad_into.defined() ||
                  (weight_grad_into.sizes() == weight.sizes() && weight_grad_into.scalar_type() == weight.scalar_type() &&
                   weight_grad_into.device() == weight.device() && weight_grad_into.is_contiguous()),
              "ChunkedCrossEntropy: weight_grad_into must be a contiguous tensor of the weight's shape, dtype and device");
  TORCH_CHECK(targets.dim() == 1 && targets.size(0) == hidden.size(0), "ChunkedCrossEntropy: targets [N] expected");
  const bool kernel = fused && hidden.is_cuda() &&
                      (hidden.scalar_type() == at::kBFloat16 || hidden.scalar_type() == at::kFloat) &&
                      weight.scalar_type() == hidden.scalar_type() && targets.scalar_type() == at::kLong;
  // A pointer, not a tensor argument: autograd would take a tensor for an
  // input of the function (and LibTorch 1.13 cannot take an undefined one).
  TORCH_CHECK(denominator >= 0, "ChunkedCrossEntropy: the denominator must not be negative");
  TORCH_CHECK(known_seed >= 0, "ChunkedCrossEntropy: the known seed must not be negative");
  return ChunkedCrossEntropyFunction::apply(hidden, weight, targets, chunk_tokens, kernel,
                                            weight_grad_into.defined() ? &weight_grad_into : nullptr, denominator,
                                            known_seed);
}

at::Tensor PlainCrossEntropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets) {
  at::Tensor logits = at::mm(hidden, weight.t()).to(at::kFloat);
  return at::cross_entropy_loss(logits, targets);
}

}  // namespace llmplan::executor
