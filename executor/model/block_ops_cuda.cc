// Fused block ops (see block_ops_cuda.h): each op is a LibTorch autograd
// function whose forward and backward are one kernel of block_kernels.cu.
//
// What each saves for its backward is what the planner's memory model counts
// with ActivationShape::fused_kernels:
//   RMSNorm  its input x and one fp32 number per row (1/rms); the composite
//            form keeps an fp32 copy of x and the bf16 normalised tensor.
//   RoPE     nothing of the activations: the backward needs only cos and sin.
//   SwiGLU   gate and up (packed: the one gate/up tensor); the composite form
//            also keeps silu(gate).
//   QkvRope  nothing of the activations, like RoPE: the packed projection
//            dies in its statement, q, k and v live on as attention's inputs.
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

// RMSNorm; with `pass_input`, x itself as a second output (RmsNormOnResidual):
// autograd then brings the gradient of the residual stream that x continues
// as to this backward, which adds it in its kernel.
class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& weight_in, double eps,
                               bool pass_input) {
    const c10::cuda::CUDAGuard guard(x_in.device());
    const at::Tensor x = x_in.contiguous(), weight = weight_in.contiguous();
    const int64_t cols = x.size(-1), rows = x.numel() / cols;
    at::Tensor out = at::empty_like(x);
    at::Tensor inv_rms = at::empty({rows}, x.options().dtype(at::kFloat));
    LaunchRmsNormForward(DTypeOf(x), x.data_ptr(), weight.data_ptr(), out.data_ptr(), inv_rms.data_ptr<float>(),
                         rows, cols, static_cast<float>(eps), StreamOf(x));
    ctx->save_for_backward({x, weight, inv_rms});
    // An input returned as it is: autograd gives the caller a view of it
    // whose gradient comes back here (no copy).
    if (pass_input) return {out, x_in};
    return {out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &weight = saved[1], &inv_rms = saved[2];
    const c10::cuda::CUDAGuard guard(x.device());
    const at::Tensor grad_out = grads[0].defined() ? grads[0].contiguous() : at::zeros_like(x);
    at::Tensor residual;
    if (grads.size() > 1 && grads[1].defined()) {
      residual = grads[1].to(x.scalar_type()).contiguous();
      TORCH_CHECK(residual.sizes() == x.sizes(), "fused RmsNormOnResidual: the residual's gradient has shape ",
                  residual.sizes(), ", its input ", x.sizes());
    }
    const int64_t cols = x.size(-1), rows = x.numel() / cols;
    at::Tensor grad_x = at::empty_like(x);
    at::Tensor partials = at::empty({RmsNormBackwardPartials(rows), cols}, x.options().dtype(at::kFloat));
    LaunchRmsNormBackward(DTypeOf(x), grad_out.data_ptr(), x.data_ptr(), weight.data_ptr(),
                          inv_rms.data_ptr<float>(), residual.defined() ? residual.data_ptr() : nullptr,
                          grad_x.data_ptr(), partials.data_ptr<float>(), rows, cols, StreamOf(x));
    // A thousand fp32 rows at most, summed per column by one small kernel
    // straight into the weight's dtype (block_kernels.h: no staging buffer).
    at::Tensor grad_weight = at::empty({cols}, weight.options());
    LaunchSumPartialRows(DTypeOf(weight), partials.data_ptr<float>(), partials.size(0), cols, grad_weight.data_ptr(),
                         StreamOf(x));
    return {grad_x, grad_weight, at::Tensor(), at::Tensor()};
  }
};

class RopeFunction : public torch::autograd::Function<RopeFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& cos_in,
                            const at::Tensor& sin_in) {
    const c10::cuda::CUDAGuard guard(x_in.device());
    const at::Tensor x = x_in.contiguous(), cos = cos_in.contiguous(), sin = sin_in.contiguous();
    at::Tensor out = at::empty_like(x);
    const int64_t row = x.size(2) * x.size(3);
    LaunchRopeForward(DTypeOf(x), x.data_ptr(), cos.data_ptr(), sin.data_ptr(), out.data_ptr(),
                      x.size(0) * x.size(1), x.size(1), x.size(2), x.size(3), row, row, StreamOf(x));
    ctx->save_for_backward({cos, sin});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &cos = saved[0], &sin = saved[1];
    const at::Tensor grad_out = grads[0].contiguous();
    const c10::cuda::CUDAGuard guard(grad_out.device());
    at::Tensor grad_x = at::empty_like(grad_out);
    const int64_t row = grad_out.size(2) * grad_out.size(3);
    LaunchRopeBackward(DTypeOf(grad_out), grad_out.data_ptr(), cos.data_ptr(), sin.data_ptr(), grad_x.data_ptr(),
                       grad_out.size(0) * grad_out.size(1), grad_out.size(1), grad_out.size(2), grad_out.size(3), row,
                       row, StreamOf(grad_out));
    return {grad_x, at::Tensor(), at::Tensor()};
  }
};

class SwiGluFunction : public torch::autograd::Function<SwiGluFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_in, const at::Tensor& up_in) {
    const c10::cuda::CUDAGuard guard(gate_in.device());
    const at::Tensor gate = gate_in.contiguous(), up = up_in.contiguous();
    at::Tensor out = at::empty_like(gate);
    LaunchSwiGluForward(DTypeOf(gate), gate.data_ptr(), up.data_ptr(), out.data_ptr(), 1, gate.numel(), gate.numel(),
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
                         grad_up.data_ptr(), 1, gate.numel(), gate.numel(), StreamOf(gate));
    return {grad_gate, grad_up};
  }
};

// A packed q/k/v projection [B, T, (heads + 2 kv_heads) * D] -> q and k
// rotated ([B, T, heads, D], [B, T, kv_heads, D]) and v copied out
// ([B, T, kv_heads, D]). Two RoPE launches read their heads in place from
// the packed rows, so the packed tensor dies in its statement instead of
// living on as the base of three views autograd saves (+ Q + KV bytes per
// block). Backward writes the three gradients into one packed gradient, the
// input of the packed projection's backward GEMMs.
class QkvRopeFunction : public torch::autograd::Function<QkvRopeFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& qkv_in, const at::Tensor& cos_in,
                               const at::Tensor& sin_in, int64_t heads, int64_t kv_heads) {
    const c10::cuda::CUDAGuard guard(qkv_in.device());
    const at::Tensor qkv = qkv_in.contiguous(), cos = cos_in.contiguous(), sin = sin_in.contiguous();
    const int64_t batch = qkv.size(0), seq = qkv.size(1), d = cos.size(1), row = qkv.size(2);
    const int64_t tokens = batch * seq, q_dim = heads * d, kv_dim = kv_heads * d;
    const char* base = static_cast<const char*>(qkv.data_ptr());
    const int64_t bytes = qkv.element_size();
    at::Tensor q = at::empty({batch, seq, heads, d}, qkv.options());
    at::Tensor k = at::empty({batch, seq, kv_heads, d}, qkv.options());
    at::Tensor v = at::empty({batch, seq, kv_heads, d}, qkv.options());
    LaunchRopeForward(DTypeOf(qkv), base, cos.data_ptr(), sin.data_ptr(), q.data_ptr(), tokens, seq, heads, d, row,
                      q_dim, StreamOf(qkv));
    LaunchRopeForward(DTypeOf(qkv), base + q_dim * bytes, cos.data_ptr(), sin.data_ptr(), k.data_ptr(), tokens, seq,
                      kv_heads, d, row, kv_dim, StreamOf(qkv));
    LaunchCopyRows(base + (q_dim + kv_dim) * bytes, row * bytes, v.data_ptr(), kv_dim * bytes, tokens, kv_dim * bytes,
                   StreamOf(qkv));
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["kv_heads"] = kv_heads;
    return {q, k, v};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &cos = saved[0], &sin = saved[1];
    const int64_t heads = ctx->saved_data["heads"].toInt(), kv_heads = ctx->saved_data["kv_heads"].toInt();
    const at::Tensor dq = grads[0].contiguous(), dk = grads[1].contiguous(), dv = grads[2];
    const c10::cuda::CUDAGuard guard(dq.device());
    const int64_t batch = dq.size(0), seq = dq.size(1), d = cos.size(1);
    const int64_t tokens = batch * seq, q_dim = heads * d, kv_dim = kv_heads * d, row = q_dim + 2 * kv_dim;
    at::Tensor dqkv = at::empty({batch, seq, row}, dq.options());
    char* base = static_cast<char*>(dqkv.data_ptr());
    const int64_t bytes = dqkv.element_size();
    LaunchRopeBackward(DTypeOf(dq), dq.data_ptr(), cos.data_ptr(), sin.data_ptr(), base, tokens, seq, heads, d, q_dim,
                       row, StreamOf(dq));
    LaunchRopeBackward(DTypeOf(dq), dk.data_ptr(), cos.data_ptr(), sin.data_ptr(), base + q_dim * bytes, tokens, seq,
                       kv_heads, d, kv_dim, row, StreamOf(dq));
    const at::Tensor dv_rows = dv.reshape({tokens, kv_dim}).contiguous();
    LaunchCopyRows(dv_rows.data_ptr(), kv_dim * bytes, base + (q_dim + kv_dim) * bytes, row * bytes, tokens,
                   kv_dim * bytes, StreamOf(dq));
    return {dqkv, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// SwiGLU over a packed gate/up projection [..., 2 * inter] (gate the first
// half of each row, up the second): saves the packed tensor (the bytes gate
// and up would take apart) and writes its gradient packed, the input of the
// packed projection's backward GEMMs.
class SwiGluPackedFunction : public torch::autograd::Function<SwiGluPackedFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_up_in) {
    const c10::cuda::CUDAGuard guard(gate_up_in.device());
    const at::Tensor gate_up = gate_up_in.contiguous();
    const int64_t pair = gate_up.size(-1), cols = pair / 2, rows = gate_up.numel() / pair;
    std::vector<int64_t> sizes(gate_up.sizes().begin(), gate_up.sizes().end());
    sizes.back() = cols;
    at::Tensor out = at::empty(sizes, gate_up.options());
    const char* gate = static_cast<const char*>(gate_up.data_ptr());
    LaunchSwiGluForward(DTypeOf(gate_up), gate, gate + cols * gate_up.element_size(), out.data_ptr(), rows, cols,
                        pair, StreamOf(gate_up));
    ctx->save_for_backward({gate_up});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor gate_up = ctx->get_saved_variables()[0];
    const c10::cuda::CUDAGuard guard(gate_up.device());
    const at::Tensor grad_out = grads[0].contiguous();
    const int64_t pair = gate_up.size(-1), cols = pair / 2, rows = gate_up.numel() / pair;
    const int64_t bytes = gate_up.element_size();
    at::Tensor grad = at::empty_like(gate_up);
    const char* gate = static_cast<const char*>(gate_up.data_ptr());
    char* grad_gate = static_cast<char*>(grad.data_ptr());
    LaunchSwiGluBackward(DTypeOf(gate_up), grad_out.data_ptr(), gate, gate + cols * bytes, grad_gate,
                         grad_gate + cols * bytes, rows, cols, pair, StreamOf(gate_up));
    return {grad};
  }
};

}  // namespace

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TORCH_CHECK(x.scalar_type() == weight.scalar_type() && weight.dim() == 1 && weight.size(0) == x.size(-1),
              "fused RmsNorm: weight must be [", x.size(-1), "] in x's dtype");
  return RmsNormFunction::apply(x, weight, eps, /*pass_input=*/false)[0];
}

std::pair<at::Tensor, at::Tensor> RmsNormOnResidual(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TORCH_CHECK(x.scalar_type() == weight.scalar_type() && weight.dim() == 1 && weight.size(0) == x.size(-1),
              "fused RmsNormOnResidual: weight must be [", x.size(-1), "] in x's dtype");
  const variable_list out = RmsNormFunction::apply(x, weight, eps, /*pass_input=*/true);
  return {out[0], out[1]};
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

std::tuple<at::Tensor, at::Tensor, at::Tensor> QkvRope(const at::Tensor& qkv, const at::Tensor& cos,
                                                       const at::Tensor& sin, int64_t heads, int64_t kv_heads) {
  TORCH_CHECK(qkv.dim() == 3 && cos.dim() == 2 && cos.size(0) == qkv.size(1) && sin.sizes() == cos.sizes() &&
                  qkv.size(2) == (heads + 2 * kv_heads) * cos.size(1) && cos.scalar_type() == qkv.scalar_type() &&
                  sin.scalar_type() == qkv.scalar_type(),
              "fused QkvRope: qkv must be [B, T, (heads + 2 kv_heads) * D] and cos, sin [T, D] in its dtype");
  const variable_list out = QkvRopeFunction::apply(qkv, cos, sin, heads, kv_heads);
  return {out[0], out[1], out[2]};
}

at::Tensor SwiGluPacked(const at::Tensor& gate_up) {
  TORCH_CHECK(gate_up.dim() >= 1 && gate_up.size(-1) % 2 == 0, "fused SwiGluPacked: the last dim must be 2 x inter");
  return SwiGluPackedFunction::apply(gate_up);
}

}  // namespace llmplan::executor::fused
