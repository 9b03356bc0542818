// Projections (see projections.h): two autograd functions, one GEMM forward
// and two backward each, however many projections they pack.
#include "executor/model/projections.h"

#include <vector>

#include <torch/autograd.h>

#ifdef LLMPLAN_WITH_CUDA
#include "executor/model/residual_gemm_cuda.h"
#endif

namespace llmplan::executor {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The tensors as one [sum of rows, cols] matrix: a view when they lie back
// to back in one storage (a unit's flat buffer), else a concatenated copy.
// `copies` says which; REQUIRES: 2-D tensors of one dtype and column count.
at::Tensor Stacked(at::TensorList parts, bool* copies = nullptr) {
  const at::Tensor& first = parts[0];
  int64_t rows = 0;
  bool adjacent = true;
  const char* next = static_cast<const char*>(first.data_ptr());
  for (const at::Tensor& t : parts) {
    adjacent = adjacent && t.is_contiguous() && t.storage().data() == first.storage().data() &&
               static_cast<const char*>(t.data_ptr()) == next;
    next = static_cast<const char*>(t.data_ptr()) + t.numel() * t.element_size();
    rows += t.size(0);
  }
  if (copies != nullptr) *copies = !adjacent && parts.size() > 1;
  if (parts.size() == 1) return first;
  if (!adjacent) return at::cat(parts, 0);
  const int64_t cols = first.size(1);
  return at::empty({0}, first.options()).set_(first.storage(), first.storage_offset(), {rows, cols}, {cols, 1});
}

// The weight gradient g^T x of weights whose rows are `weights`' (g [tokens,
// sum of rows], x [tokens, in]): added by the GEMM into the weights' .grad
// buffers where every weight has one (undefined results: nothing left for
// autograd to accumulate), else one product handed back as a view of its
// rows per weight.
std::vector<at::Tensor> WeightGradients(const at::Tensor& g, const at::Tensor& x, at::TensorList weights) {
  std::vector<at::Tensor> grads;
  bool every_grad = true;
  for (const at::Tensor& w : weights) {
    const at::Tensor& gw = w.grad();
    every_grad = every_grad && gw.defined() && gw.sizes() == w.sizes() && gw.scalar_type() == g.scalar_type() &&
                 gw.is_contiguous();
    grads.push_back(gw);
  }
  std::vector<at::Tensor> result(weights.size());
  if (every_grad) {
    bool copies = false;
    at::Tensor stacked = Stacked(grads, &copies);
    if (!copies) {
      stacked.addmm_(g.t(), x);  // one GEMM into the flat gradient
      return result;
    }
    int64_t row = 0;
    for (at::Tensor& gw : grads) {
      gw.addmm_(g.narrow(1, row, gw.size(0)).t(), x);
      row += gw.size(0);
    }
    return result;
  }
  const at::Tensor dw = g.t().mm(x);
  int64_t row = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    result[i] = dw.narrow(0, row, weights[i].size(0));
    row += weights[i].size(0);
  }
  return result;
}

class PackedLinearFunction : public torch::autograd::Function<PackedLinearFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList weights, at::TensorList biases) {
    const at::Tensor w = Stacked(weights);
    const at::Tensor x2d = x.reshape({-1, w.size(1)});
    const at::Tensor y = biases.empty() ? x2d.mm(w.t()) : at::addmm(at::cat(biases, 0), x2d, w.t());
    std::vector<at::Tensor> saved = {x};
    saved.insert(saved.end(), weights.begin(), weights.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["biases"] = !biases.empty();
    std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
    sizes.back() = w.size(0);
    return y.view(sizes);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::TensorList weights(saved.data() + 1, saved.size() - 1);
    const bool with_biases = ctx->saved_data["biases"].toBool();
    const at::Tensor w = Stacked(weights);
    const at::Tensor g = grads[0].reshape({-1, w.size(0)});
    variable_list result;
    // The input's gradient: one product over all the projections, nothing to sum.
    result.push_back(ctx->needs_input_grad(0) ? g.mm(w).view(x.sizes()) : at::Tensor());
    for (at::Tensor& dw : WeightGradients(g, x.reshape({-1, w.size(1)}), weights)) result.push_back(dw);
    if (with_biases) {
      const at::Tensor db = g.sum(0);
      int64_t row = 0;
      for (const at::Tensor& weight : weights) {
        result.push_back(db.narrow(0, row, weight.size(0)));
        row += weight.size(0);
      }
    }
    return result;
  }
};

class AddProjectionFunction : public torch::autograd::Function<AddProjectionFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& residual, const at::Tensor& x,
                            const at::Tensor& weight) {
    ctx->save_for_backward({x, weight});
    const at::Tensor r2d = residual.reshape({-1, weight.size(0)}), x2d = x.reshape({-1, weight.size(1)});
#ifdef LLMPLAN_WITH_CUDA
    // cuBLASLt reads the residual and writes the sum elsewhere; at::addmm
    // would copy the residual into the output first (residual_gemm_cuda.h).
    const at::ScalarType dtype = x2d.scalar_type();
    if (x2d.is_cuda() && (dtype == at::kBFloat16 || dtype == at::kHalf) && r2d.scalar_type() == dtype &&
        weight.scalar_type() == dtype && r2d.is_contiguous() && x2d.is_contiguous() && weight.is_contiguous()) {
      const at::Tensor y = fused::ResidualGemm(r2d, x2d, weight);
      if (y.defined()) return y.view(residual.sizes());
    }
#endif
    const at::Tensor y = at::addmm(r2d, x2d, weight.t());
    return y.view(residual.sizes());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &weight = saved[1];
    const at::Tensor& grad = grads[0];
    const at::Tensor g = grad.reshape({-1, weight.size(0)});
    const at::Tensor dx = ctx->needs_input_grad(1) ? g.mm(weight).view(x.sizes()) : at::Tensor();
    const at::Tensor dw = WeightGradients(g, x.reshape({-1, weight.size(1)}), {weight})[0];
    return {grad, dx, dw};  // the residual's gradient is the output's
  }
};

}  // namespace

at::Tensor PackedLinear(const at::Tensor& x, at::TensorList weights, at::TensorList biases) {
  TORCH_CHECK(!weights.empty(), "PackedLinear: no weights");
  TORCH_CHECK(biases.empty() || biases.size() == weights.size(), "PackedLinear: ", biases.size(), " biases for ",
              weights.size(), " weights");
  for (const at::Tensor& w : weights)
    TORCH_CHECK(w.dim() == 2 && w.size(1) == x.size(-1) && w.scalar_type() == weights[0].scalar_type(),
                "PackedLinear: each weight must be [rows, ", x.size(-1), "] in one dtype");
  for (const at::Tensor& b : biases) TORCH_CHECK(b.defined() && b.dim() == 1, "PackedLinear: biases must be 1-D");
  return PackedLinearFunction::apply(x, weights, biases);
}

at::Tensor AddProjection(const at::Tensor& residual, const at::Tensor& x, const at::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2 && x.size(-1) == weight.size(1) && residual.size(-1) == weight.size(0) &&
                  residual.numel() / residual.size(-1) == x.numel() / x.size(-1),
              "AddProjection: residual [..., out], x [..., in] and weight [out, in] do not fit");
  return AddProjectionFunction::apply(residual, x, weight);
}

}  // namespace llmplan::executor
