#include "executor/flat_unit.h"

#include "executor/torch_compat.h"

namespace llmplan::executor {

namespace {

// A tensor of `shape` over `flat`'s storage at element `offset`: a new
// TensorImpl (own version counter, no autograd link to `flat`), so in-place
// writes to `flat` are invisible to autograd's saved-tensor checks.
at::Tensor AliasOf(const at::Tensor& flat, int64_t offset, const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * shape[i + 1];
  at::Tensor t = at::empty({0}, flat.options());
  t.set_(flat.storage(), flat.storage_offset() + offset, shape, strides);
  return t;
}

}  // namespace

FlatUnit::FlatUnit(std::vector<ParamShape> shapes, int64_t group_size, int64_t rank, const at::Device& device,
                   at::ScalarType compute_dtype)
    : shapes_(std::move(shapes)), group_size_(group_size), rank_(rank), compute_dtype_(compute_dtype) {
  TORCH_CHECK(group_size >= 1 && rank >= 0 && rank < group_size, "FlatUnit: bad rank ", rank, " of ", group_size);
  for (const auto& s : shapes_) numel_ += s.numel();
  padded_numel_ = (numel_ + group_size - 1) / group_size * group_size;
  auto fp32 = at::TensorOptions().dtype(at::kFloat).device(device);
  master_ = at::zeros({shard_numel()}, fp32);
  grad_ = at::zeros({shard_numel()}, fp32);
  compute_ = at::zeros({padded_numel_}, fp32.dtype(compute_dtype));
  compute_grad_ = at::zeros({padded_numel_}, fp32.dtype(compute_dtype));
  int64_t offset = 0;
  for (const auto& s : shapes_) {
    at::Tensor p = AliasOf(compute_, offset, s.shape);
    p.requires_grad_(true);
    // A defined .grad makes AccumulateGrad add in place (`grad += new`), so
    // every parameter's gradient lands in compute_grad_ with no copy.
    p.mutable_grad() = AliasOf(compute_grad_, offset, s.shape);
    params_.push_back(p);
    offset += s.numel();
  }
}

std::vector<at::Tensor> FlatUnit::MasterViews() {
  TORCH_CHECK(group_size_ == 1, "FlatUnit::MasterViews needs an unsharded unit");
  std::vector<at::Tensor> views;
  int64_t offset = 0;
  for (const auto& s : shapes_) {
    views.push_back(master_.narrow(0, offset, s.numel()).view(s.shape));
    offset += s.numel();
  }
  return views;
}

void FlatUnit::GatherLocal() {
  TORCH_CHECK(group_size_ == 1, "FlatUnit::GatherLocal needs an unsharded unit");
  at::NoGradGuard no_grad;
  compute_.copy_(master_);
}

void FlatUnit::ReduceGradientsLocal() {
  TORCH_CHECK(group_size_ == 1, "FlatUnit::ReduceGradientsLocal needs an unsharded unit");
  at::NoGradGuard no_grad;
  grad_.add_(compute_grad_);  // promotes bf16 to fp32 inside the kernel
  compute_grad_.zero_();
}

void FlatUnit::ZeroGradients() {
  at::NoGradGuard no_grad;
  grad_.zero_();
  compute_grad_.zero_();
}

}  // namespace llmplan::executor
