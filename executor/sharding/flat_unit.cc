#include "executor/sharding/flat_unit.h"

#include <algorithm>

#include "executor/hardware/host_memory.h"
#include "executor/sharding/gradient_widen.h"
#include "executor/torch_compat.h"

#ifdef LLMPLAN_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#endif

namespace llmplan::executor {

namespace {

// A tensor of `shape` over `flat`'s storage at element `offset`: a new
// TensorImpl (own version counter, no autograd link to `flat`), so in-place
// writes to `flat` are invisible to autograd's saved-tensor checks. It shares
// the storage object itself, so releasing and re-materialising the storage's
// bytes is seen by every alias.
at::Tensor AliasOf(const at::Tensor& flat, int64_t offset, const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * shape[i + 1];
  at::Tensor t = at::empty({0}, flat.options());
  t.set_(flat.storage(), flat.storage_offset() + offset, shape, strides);
  return t;
}

size_t Bytes(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

#ifdef LLMPLAN_WITH_CUDA
// One pass of gradient_widen.h's kernel over the contiguous bf16 CUDA tensor
// `in` on its device's current stream: into `out` (null: read only), and,
// with square_sum, the sum of the squares as a 0-dim fp32 tensor. False
// (nothing launched) when a pointer is not 16-byte aligned.
bool WidenPass(const at::Tensor& in, float* out, bool accumulate, at::Tensor* square_sum) {
  const c10::cuda::CUDAGuard guard(in.device());
  at::Tensor partials;
  if (square_sum != nullptr) partials = at::empty({WidenBf16Partials(in.numel())}, in.options().dtype(at::kFloat));
  if (!LaunchWidenBf16(in.data_ptr(), out, in.numel(), accumulate,
                       partials.defined() ? partials.data_ptr<float>() : nullptr,
                       at::cuda::getCurrentCUDAStream(in.device().index()).stream()))
    return false;
  if (square_sum != nullptr) *square_sum = partials.sum();
  return true;
}
#endif

}  // namespace

FlatUnit::FlatUnit(std::vector<ParamShape> shapes, const FlatUnitOptions& options, const at::Device& device)
    : shapes_(std::move(shapes)),
      group_size_(options.group_size),
      rank_(options.rank),
      compute_dtype_(options.compute_dtype),
      device_(device),
      master_on_host_(options.master_on_host),
      compute_shard_on_host_(options.compute_shard_on_host),
      compute_resident_(options.compute_resident),
      optimizer_reads_compute_grad_(options.optimizer_reads_compute_grad) {
  TORCH_CHECK(!compute_shard_on_host_ || (master_on_host_ && !compute_resident_),
              "FlatUnit: a host compute shard needs the master on the host and a released compute copy");
  TORCH_CHECK(group_size_ >= 1 && rank_ >= 0 && rank_ < group_size_, "FlatUnit: bad rank ", rank_, " of ",
              group_size_);
  TORCH_CHECK(!optimizer_reads_compute_grad_ || (group_size_ == 1 && !master_on_host_),
              "FlatUnit: the optimizer reads the compute gradient only of a whole unit whose master is on the device");
  TORCH_CHECK(!options.cast_at_gather || (group_size_ > 1 && !master_on_host_),
              "FlatUnit: only a sharded unit whose master is on the device casts it for each gather");
  for (const auto& s : shapes_) numel_ += s.numel();
  padded_numel_ = (numel_ + group_size_ - 1) / group_size_ * group_size_;
  auto fp32 = at::TensorOptions().dtype(at::kFloat).device(device);
  master_ = master_on_host_ ? PinnedHostZeros(shard_numel(), at::kFloat)
                            : at::zeros({shard_numel()}, fp32);
  if (!optimizer_reads_compute_grad_) grad_ = at::zeros({shard_numel()}, fp32);
  compute_ = at::zeros({padded_numel_}, fp32.dtype(compute_dtype_));
  compute_grad_ = at::zeros({padded_numel_}, fp32.dtype(compute_dtype_));
  if (group_size_ == 1 && compute_resident_) {
    // The shard is the whole, resident unit: the optimizer's update (or the
    // copy up from the host) writes the compute copy directly, no second pass.
    compute_shard_ = compute_;
  } else if (compute_shard_on_host_) {
    compute_shard_ = PinnedHostZeros(shard_numel(), compute_dtype_);
  } else if ((group_size_ > 1 && !options.cast_at_gather) || master_on_host_) {
    compute_shard_ = at::zeros({shard_numel()}, fp32.dtype(compute_dtype_));
  }
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

FlatUnit::FlatUnit(std::vector<ParamShape> shapes, int64_t group_size, int64_t rank, const at::Device& device,
                   at::ScalarType compute_dtype)
    : FlatUnit(std::move(shapes), FlatUnitOptions{group_size, rank, compute_dtype, false}, device) {}

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

int64_t FlatUnit::owned_begin() const { return std::min(shard_offset(), numel_); }

int64_t FlatUnit::owned_numel() const { return std::min(shard_offset() + shard_numel(), numel_) - owned_begin(); }

void FlatUnit::SetMasterFromFull(const at::Tensor& full) {
  TORCH_CHECK(full.numel() == numel_, "FlatUnit::SetMasterFromFull: ", full.numel(), " values for ", numel_);
  SetMasterOwned(full.reshape({-1}).narrow(0, owned_begin(), owned_numel()));
}

void FlatUnit::SetMasterOwned(const at::Tensor& owned) {
  TORCH_CHECK(owned.numel() == owned_numel(), "FlatUnit::SetMasterOwned: ", owned.numel(), " values for ", owned_numel());
  at::NoGradGuard no_grad;
  // The real values, then zeros for the padding past numel.
  master_.zero_();
  if (owned.numel() > 0) master_.narrow(0, 0, owned.numel()).copy_(owned.reshape({-1}));
  if (compute_shard_.defined()) compute_shard_.copy_(master_);
}

void FlatUnit::GatherLocal() {
  TORCH_CHECK(group_size_ == 1, "FlatUnit::GatherLocal needs an unsharded unit");
  at::NoGradGuard no_grad;
  MaterializeCompute();
  // With the master on the host the device copy of the shard is the source:
  // no host->device traffic on the hot path (nothing at all when it is compute).
  if (master_on_host_ && compute_shard_.is_same(compute_)) return;
  compute_.copy_(master_on_host_ ? compute_shard_ : master_);
}

at::Tensor FlatUnit::CastShardForGather() const {
  TORCH_CHECK(!master_on_host_, "FlatUnit::CastShardForGather: the master is on the host");
  at::NoGradGuard no_grad;
  return master_.to(compute_dtype_);
}

void FlatUnit::RefreshComputeShard() {
  if (!compute_shard_.defined()) return;
  TORCH_CHECK(!master_on_host_, "FlatUnit::RefreshComputeShard: the master is on the host");
  at::NoGradGuard no_grad;
  compute_shard_.copy_(master_);
}

void FlatUnit::ReduceGradientsLocal(bool release, at::Tensor* square_sum) {
  TORCH_CHECK(group_size_ == 1, "FlatUnit::ReduceGradientsLocal needs an unsharded unit");
  TORCH_CHECK(compute_grad_materialized(), "FlatUnit::ReduceGradientsLocal: compute_grad was released");
  if (optimizer_reads_compute_grad_) {
    grad_stale_ = false;
    if (square_sum != nullptr) *square_sum = SumOfSquaresOfComputeGrad();
    return;
  }
  AccumulateIntoGrad(compute_grad_, 1.0, square_sum);
  if (release) {
    ReleaseComputeGrad();  // the caching allocator reuses the block once the add above has run
  } else {
    compute_grad_.zero_();
  }
}

at::Tensor FlatUnit::SumOfSquaresOfComputeGrad() const {
  at::NoGradGuard no_grad;
#ifdef LLMPLAN_WITH_CUDA
  at::Tensor square_sum;
  if (compute_grad_.is_cuda() && compute_grad_.scalar_type() == at::kBFloat16 &&
      WidenPass(compute_grad_, /*out=*/nullptr, /*accumulate=*/false, &square_sum))
    return square_sum;
#endif
  const at::Tensor g = compute_grad_.to(at::kFloat);
  return (g * g).sum();
}

void FlatUnit::AccumulateIntoGrad(const at::Tensor& contribution, double scale, at::Tensor* square_sum) {
  TORCH_CHECK(!optimizer_reads_compute_grad_, "FlatUnit::AccumulateIntoGrad: this unit keeps no fp32 gradient");
  TORCH_CHECK(contribution.numel() == grad_.numel(), "FlatUnit::AccumulateIntoGrad: ", contribution.numel(),
              " values for a gradient shard of ", grad_.numel());
  at::NoGradGuard no_grad;
  if (square_sum != nullptr) *square_sum = at::Tensor();
#ifdef LLMPLAN_WITH_CUDA
  if (scale == 1.0 && grad_.is_cuda() && contribution.device() == grad_.device() &&
      contribution.scalar_type() == at::kBFloat16 && contribution.is_contiguous() &&
      WidenPass(contribution, grad_.data_ptr<float>(), /*accumulate=*/!grad_stale_, square_sum)) {
    grad_stale_ = false;
    return;
  }
#endif
  if (!grad_stale_) {
    grad_.add_(contribution, scale);  // promotes a bf16 contribution to fp32 inside the kernel
    return;
  }
  if (scale == 1.0) {
    grad_.copy_(contribution);  // the cast, if any, inside the copy kernel
  } else {
    // A 0-dim CPU tensor is a scalar operand on any device, in fp32 as add_'s alpha is.
    at::mul_out(grad_, contribution, at::scalar_tensor(scale, at::TensorOptions().dtype(at::kFloat)));
  }
  grad_stale_ = false;
}

at::Tensor FlatUnit::ComputeGradIn(at::ScalarType dtype) const {
  TORCH_CHECK(compute_grad_materialized(), "FlatUnit::ComputeGradIn: compute_grad was released");
  at::NoGradGuard no_grad;
#ifdef LLMPLAN_WITH_CUDA
  if (dtype == at::kFloat && compute_grad_.is_cuda() && compute_grad_.scalar_type() == at::kBFloat16) {
    at::Tensor out = at::empty({compute_grad_.numel()}, compute_grad_.options().dtype(at::kFloat));
    if (WidenPass(compute_grad_, out.data_ptr<float>(), /*accumulate=*/false, /*square_sum=*/nullptr)) return out;
  }
#endif
  return compute_grad_.to(dtype, /*non_blocking=*/false, /*copy=*/true);
}

void FlatUnit::StartGradients() {
  at::NoGradGuard no_grad;
  if (compute_grad_materialized()) compute_grad_.zero_();
  grad_stale_ = true;
}

void FlatUnit::ZeroGradients() {
  at::NoGradGuard no_grad;
  if (grad_.defined()) grad_.zero_();
  grad_stale_ = false;
  if (compute_grad_materialized()) compute_grad_.zero_();
}

bool FlatUnit::compute_materialized() const { return compat::StorageMaterialized(compute_); }
bool FlatUnit::compute_grad_materialized() const { return compat::StorageMaterialized(compute_grad_); }

void FlatUnit::ReleaseCompute() {
  TORCH_CHECK(!compute_resident_, "FlatUnit::ReleaseCompute: the unit's compute copy is resident");
  compat::ReleaseStorage(compute_);
}

void FlatUnit::MaterializeCompute() {
  if (compute_materialized()) return;
  compat::MaterializeStorage(compute_, Bytes(compute_));
  // Padding past numel must read as zero in what a gather leaves behind; the
  // gather writes every element, so nothing to clear here.
}

void FlatUnit::ReleaseComputeGrad() { compat::ReleaseStorage(compute_grad_); }

void FlatUnit::MaterializeComputeGrad() {
  if (compute_grad_materialized()) return;
  compat::MaterializeStorage(compute_grad_, Bytes(compute_grad_));
  at::NoGradGuard no_grad;
  compute_grad_.zero_();  // autograd accumulates into it
}

}  // namespace llmplan::executor
