// Fused block ops (see block_ops_cuda.h): each op is a LibTorch autograd
// function whose forward and backward are one kernel of block_kernels.cu.
//
// What each saves for its backward is what the planner's memory model counts
// with ActivationShape::fused_kernels:
//   RMSNorm  its input x and one fp32 number per row (1/rms); the composite
//            form keeps an fp32 copy of x and the bf16 normalised tensor.
//   RoPE     nothing of the activations: the backward needs only cos and sin.
//   SwiGLU   gate and up; the composite form also keeps silu(gate).
#include "executor/model/block_ops_cuda.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/autograd.h>

#include "executor/model/block_kernels.h"

namespace llmplan::executor::fused {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

KernelDType DTypeOf(const at::Tensor& t) {
  TORCH_CHECK(t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kFloat,
              "fused block ops take bf16 or fp32 tensors, got ", t.scalar_type());
  return t.scalar_type() == at::kBFloat16 ? KernelDType::kBF16 : KernelDType::kFP32;
}

void* StreamOf(const at::Tensor& t) { return at::cuda::getCurrentCUDAStream(t.device().index()).stream(); }

class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& weight_in, double eps) {
    const c10::cuda::CUDAGuard guard(x_in.device());
    const at::Tensor x = x_in.contiguous(), weight = weight_in.contiguous();
    const int64_t cols = x.size(-1), rows = x.numel() / cols;
    at::Tensor out = at::empty_like(x);
    at::Tensor inv_rms = at::empty({rows}, x.options().dtype(at::kFloat));
    LaunchRmsNormForward(DTypeOf(x), x.data_ptr(), weight.data_ptr(), out.data_ptr(), inv_rms.data_ptr<float>(),
                         rows, cols, static_cast<float>(eps), StreamOf(x));
    ctx->save_for_backward({x, weight, inv_rms});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &weight = saved[1], &inv_rms = saved[2];
    const c10::cuda::CUDAGuard guard(x.device());
    const at::Tensor grad_out = grads[0].contiguous();
    const int64_t cols = x.size(-1), rows = x.numel() / cols;
    at::Tensor grad_x = at::empty_like(x);
    at::Tensor partials = at::empty({RmsNormBackwardPartials(rows), cols}, x.options().dtype(at::kFloat));
    LaunchRmsNormBackward(DTypeOf(x), grad_out.data_ptr(), x.data_ptr(), weight.data_ptr(),
                          inv_rms.data_ptr<float>(), grad_x.data_ptr(), partials.data_ptr<float>(), rows, cols,
                          StreamOf(x));
    // A few hundred fp32 rows: one small reduction, then the weight's dtype.
    at::Tensor grad_weight = partials.sum(0).to(weight.scalar_type());
    return {grad_x, grad_weight, at::Tensor()};
  }
};

class RopeFunction : public torch::autograd::Function<RopeFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& cos_in,
                            const at::Tensor& sin_in) {
    const c10::cuda::CUDAGuard guard(x_in.device());
    const at::Tensor x = x_in.contiguous(), cos = cos_in.contiguous(), sin = sin_in.contiguous();
    at::Tensor out = at::empty_like(x);
    LaunchRopeForward(DTypeOf(x), x.data_ptr(), cos.data_ptr(), sin.data_ptr(), out.data_ptr(),
                      x.size(0) * x.size(1), x.size(1), x.size(2), x.size(3), StreamOf(x));
    ctx->save_for_backward({cos, sin});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &cos = saved[0], &sin = saved[1];
    const at::Tensor grad_out = grads[0].contiguous();
    const c10::cuda::CUDAGuard guard(grad_out.device());
    at::Tensor grad_x = at::empty_like(grad_out);
    LaunchRopeBackward(DTypeOf(grad_out), grad_out.data_ptr(), cos.data_ptr(), sin.data_ptr(), grad_x.data_ptr(),
                       grad_out.size(0) * grad_out.size(1), grad_out.size(1), grad_out.size(2), grad_out.size(3),
                       StreamOf(grad_out));
    return {grad_x, at::Tensor(), at::Tensor()};
  }
};

class SwiGluFunction : public torch::autograd::Function<SwiGluFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_in, const at::Tensor& up_in) {
    const c10::cuda::CUDAGuard guard(gate_in.device());
    const at::Tensor gate = gate_in.contiguous(), up = up_in.contiguous();
    at::Tensor out = at::empty_like(gate);
    LaunchSwiGluForward(DTypeOf(gate), gate.data_ptr(), up.data_ptr(), out.data_ptr(), gate.numel(),
                        StreamOf(gate));
    ctx->save_for_backward({gate, up});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &gate = saved[0], &up = saved[1];
    const c10::cuda::CUDAGuard guard(gate.device());
    const at::Tensor grad_out = grads[0].contiguous();
    at::Tensor grad_gate = at::empty_like(gate), grad_up = at::empty_like(up);
    LaunchSwiGluBackward(DTypeOf(gate), grad_out.data_ptr(), gate.data_ptr(), up.data_ptr(), grad_gate.data_ptr(),
                         grad_up.data_ptr(), gate.numel(), StreamOf(gate));
    return {grad_gate, grad_up};
  }
};

}  // namespace

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TORCH_CHECK(x.scalar_type() == weight.scalar_type() && weight.dim() == 1 && weight.size(0) == x.size(-1),
              "fused RmsNorm: weight must be [", x.size(-1), "] in x's dtype");
  return RmsNormFunction::apply(x, weight, eps);
}

at::Tensor ApplyRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  TORCH_CHECK(x.dim() == 4 && cos.dim() == 2 && cos.size(0) == x.size(1) && cos.size(1) == x.size(3) &&
                  sin.sizes() == cos.sizes() && cos.scalar_type() == x.scalar_type() &&
                  sin.scalar_type() == x.scalar_type(),
              "fused ApplyRope: x must be [B, T, H, D] and cos, sin [T, D] in x's dtype");
  return RopeFunction::apply(x, cos, sin);
}

at::Tensor SwiGlu(const at::Tensor& gate, const at::Tensor& up) {
  TORCH_CHECK(gate.sizes() == up.sizes() && gate.scalar_type() == up.scalar_type(),
              "fused SwiGlu: gate and up must have one shape and dtype");
  return SwiGluFunction::apply(gate, up);
}

}  // namespace llmplan::executor::fused
