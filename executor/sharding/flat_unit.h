// FlatUnit: the parameters of one model unit (embedding, a block, the head)
// held as flat buffers, the form sharding and collectives want:
//
//   master   fp32, this rank's contiguous slice of the padded flat vector
//            (the optimizer updates it; AdamW state has the same shape). On
//            the device, or in pinned host memory when the optimizer is
//            offloaded.
//   grad     fp32 on the device, same slice; gradients accumulate here across
//            micro-batches. Not kept when the optimizer reads compute_grad
//            itself (planner/gradient_path.h): grad() is compute_grad then
//   compute  the whole unit in the compute dtype (bf16 on GPU); the model's
//            parameter tensors are aliases of its storage, so "gather" fills
//            one buffer and every parameter sees it
//   compute_grad  the whole unit in the compute dtype; the parameters' .grad
//            alias its storage, so autograd accumulates straight into one flat
//            buffer that a single reduce-scatter (or a cast-add) consumes
//   compute_shard  (sharded, offloaded or resident units) this rank's slice
//            of the master in the compute dtype: what an all-gather sends
//            (unless each gather casts its own: FlatUnitOptions), or
//            the resident compute copy itself. The optimizer step refreshes
//            it (the fused kernel writes it in the same pass; with offload it
//            is copied in from the host). On the device — except with
//            parameters streamed from the host (offload optimizer+params),
//            where it lives in pinned host memory, the CPU optimizer writes it
//            there, and a copy brings it up just before each gather.
//
// The flat length is padded to a multiple of `group_size` so a shard is a
// plain contiguous slice of equal length on every rank (padding elements stay
// zero in every buffer). With group_size 1 the shard is the whole unit and a
// gather is a local cast master -> compute.
//
// Releasing memory (FSDP's "resize the storage to 0" trick): compute and
// compute_grad can drop their bytes (ReleaseCompute / ReleaseComputeGrad) and
// get fresh ones later (MaterializeCompute / MaterializeComputeGrad). The
// parameter tensors keep pointing at the same storage object, so they see the
// new bytes without being rebuilt; touching a released buffer is a bug.
//
// Parameter tensors are leaves created over the compute buffer's storage (not
// autograd views of it), so rewriting the compute buffer in place (a gather
// before backward) does not trip autograd's version checks on tensors saved
// for backward.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "executor/model/llama_model.h"

namespace llmplan::executor {

struct FlatUnitOptions {
  int64_t group_size = 1;  // ranks sharing the unit (the shard group)
  int64_t rank = 0;        // this rank within the shard group
  at::ScalarType compute_dtype = at::kBFloat16;
  // Master weights (and the optimizer state kept beside them) in host memory,
  // pinned when CUDA is available so copies are asynchronous DMA.
  bool master_on_host = false;
  // compute_shard in (pinned) host memory too: the parameters stream to the
  // device before each use. REQUIRES master_on_host, not compute_resident.
  bool compute_shard_on_host = false;
  // The compute copy stays gathered for the whole run (no_shard: no release
  // ops). An unsharded unit's compute_shard is then compute itself, so an
  // offloaded step copies the update straight into it instead of keeping a
  // second bf16 model on the GPU.
  bool compute_resident = false;
  // No fp32 grad: the step's final gradient is compute_grad, which AdamW
  // reads (planner/gradient_path.h: one GPU, one micro-batch). REQUIRES
  // group_size 1 and the master on the device.
  bool optimizer_reads_compute_grad = false;
  // No compute_shard: each all-gather sends a cast of the master made just
  // before it (CastShardForGather; Plan::cast_at_gather), FSDP2's way, so
  // the device holds 2 bytes a parameter of the shard less. REQUIRES
  // group_size > 1 and the master on the device.
  bool cast_at_gather = false;
};

class FlatUnit {
 public:
  // Allocates the buffers for `shapes`: master and grad hold elements
  // [rank * shard_numel, (rank + 1) * shard_numel) of the padded flat vector.
  // compute and compute_grad start materialised (zeros).
  // REQUIRES: group_size >= 1, 0 <= rank < group_size.
  FlatUnit(std::vector<ParamShape> shapes, const FlatUnitOptions& options, const at::Device& device);
  // The unsharded form (one process), kept for callers that predate sharding.
  FlatUnit(std::vector<ParamShape> shapes, int64_t group_size, int64_t rank, const at::Device& device,
           at::ScalarType compute_dtype);
  FlatUnit(const FlatUnit&) = delete;
  FlatUnit& operator=(const FlatUnit&) = delete;
  FlatUnit(FlatUnit&&) = default;
  FlatUnit& operator=(FlatUnit&&) = default;

  const std::vector<ParamShape>& shapes() const { return shapes_; }
  int64_t numel() const { return numel_; }                // real parameters
  int64_t padded_numel() const { return padded_numel_; }  // multiple of group_size
  int64_t shard_numel() const { return padded_numel_ / group_size_; }
  int64_t shard_offset() const { return rank_ * shard_numel(); }
  int64_t group_size() const { return group_size_; }
  int64_t rank() const { return rank_; }
  at::ScalarType compute_dtype() const { return compute_dtype_; }
  const at::Device& device() const { return device_; }
  bool master_on_host() const { return master_on_host_; }
  bool compute_shard_on_host() const { return compute_shard_on_host_; }

  at::Tensor& master() { return master_; }  // fp32 [shard_numel]
  // fp32 [shard_numel] on the device; compute_grad when
  // optimizer_reads_compute_grad() (then only after ReduceGradientsLocal).
  at::Tensor& grad() { return optimizer_reads_compute_grad_ ? compute_grad_ : grad_; }
  bool optimizer_reads_compute_grad() const { return optimizer_reads_compute_grad_; }
  const at::Tensor& compute() const { return compute_; }            // [padded_numel]
  const at::Tensor& compute_grad() const { return compute_grad_; }  // [padded_numel]
  // Undefined unless group_size > 1 (without cast_at_gather), master_on_host
  // or compute_resident;
  // compute itself when unsharded and compute_resident.
  const at::Tensor& compute_shard() const { return compute_shard_; }  // [shard_numel]

  // The model's parameters for this unit (aliases of compute(), requires_grad,
  // .grad aliases of compute_grad()), in shapes() order.
  const std::vector<at::Tensor>& params() const { return params_; }

  // fp32 views of the master buffer, one per parameter, for initialisation
  // and checkpoints.
  // REQUIRES: group_size() == 1 (a shard does not hold whole parameters).
  std::vector<at::Tensor> MasterViews();

  // The real elements of this rank's slice: [owned_begin(), owned_begin() +
  // owned_numel()) of the unit's unpadded flat vector (the rest is padding).
  int64_t owned_begin() const;
  int64_t owned_numel() const;

  // Sets this rank's master slice from the whole unit's fp32 values (any
  // device) and refreshes compute_shard.
  // REQUIRES: full has numel() elements.
  void SetMasterFromFull(const at::Tensor& full);
  // The same from just this rank's real elements (a checkpoint's range).
  // REQUIRES: owned has owned_numel() elements.
  void SetMasterOwned(const at::Tensor& owned);

  // compute <- master (or compute_shard when the master is on the host), cast
  // to the compute dtype. Materialises compute first if it was released.
  // REQUIRES: group_size() == 1 (sharded units gather through a communicator).
  void GatherLocal();
  // A new tensor: the master cast to the compute dtype, on the current
  // stream — what an all-gather sends when the unit keeps no compute_shard
  // (FlatUnitOptions::cast_at_gather). The same values as the compute_shard
  // an update writes (both round to nearest even).
  // REQUIRES: master on the device.
  at::Tensor CastShardForGather() const;
  // compute_shard <- master cast to the compute dtype (after an optimizer
  // step that did not write it itself). No-op when compute_shard is undefined.
  // REQUIRES: master on the device.
  void RefreshComputeShard();
  // grad += compute_grad (in fp32; AccumulateIntoGrad); then compute_grad = 0,
  // ready for the next micro-batch's backward — or, with `release`,
  // compute_grad's bytes go back to the allocator (MaterializeComputeGrad
  // before the next backward), so an unsharded model holds compute-dtype
  // gradients only for the units in backward, not for the whole model
  // (15 GiB of bf16 for an 8B model).
  // With square_sum, as AccumulateIntoGrad's.
  // When optimizer_reads_compute_grad(), compute_grad is the final gradient
  // already: nothing is added or released, and square_sum (when asked) is
  // the sum of its squares, by the same kernel and block order as a widening
  // pass (so the same norm), or by ATen off CUDA.
  // REQUIRES: group_size() == 1; compute_grad materialised.
  void ReduceGradientsLocal(bool release = false, at::Tensor* square_sum = nullptr);
  // grad += scale * contribution, or — the step's first contribution after
  // StartGradients — grad = scale * contribution: one pass that writes the
  // fp32 shard instead of a zeroing pass plus an add that reads it back. On
  // CUDA a bf16 contribution goes through gradient_widen.h's kernel at HBM
  // speed (ATen's mixed-dtype add and copy run unvectorised on an H200: 335
  // and 268 us for a Llama-3.2-1B block). The same values bit for bit:
  // widening is exact and 0 + x rounds to x. With square_sum, when that
  // kernel ran, *square_sum becomes a 0-dim fp32 device tensor: the sum of
  // the squares of grad after this contribution, from the same pass (the
  // step's last contribution gives the gradient norm without reading grad
  // again: 1.5 ms of a Llama-3.2-1B step on an H200); otherwise it is left
  // undefined and the caller computes the norm itself.
  // REQUIRES: contribution has shard_numel() elements on grad's device; not
  // optimizer_reads_compute_grad().
  void AccumulateIntoGrad(const at::Tensor& contribution, double scale = 1.0, at::Tensor* square_sum = nullptr);
  // A new tensor holding compute_grad in `dtype`: a sharded unit's
  // reduce-scatter input. bf16 -> fp32 on CUDA goes through gradient_widen.h's
  // kernel (ATen's cast copy ran at 1.4 TB/s: 268 us per Llama-3.2-1B block,
  // every micro-batch); the values are ATen's, widening being exact.
  // REQUIRES: compute_grad materialised.
  at::Tensor ComputeGradIn(at::ScalarType dtype) const;
  // Starts an optimizer step's gradients: compute_grad zeroed when
  // materialised; grad left as it is, stale until the step's first
  // AccumulateIntoGrad overwrites it.
  void StartGradients();
  // Whether grad holds nothing of this step yet (StartGradients, then no
  // AccumulateIntoGrad): reading it then is a bug.
  bool grad_stale() const { return grad_stale_; }
  // Zeroes grad and, when materialised, compute_grad (grad is then current).
  void ZeroGradients();

  // Memory of the gathered copy and of the unsharded gradient (see above).
  bool compute_materialized() const;
  bool compute_grad_materialized() const;
  // Returns compute's bytes to the allocator.
  // REQUIRES: not compute_resident.
  void ReleaseCompute();
  // Gives compute bytes again (contents undefined until a gather fills them).
  void MaterializeCompute();
  void ReleaseComputeGrad();
  // Gives compute_grad zeroed bytes again (no-op when materialised).
  void MaterializeComputeGrad();

 private:
  // The sum of compute_grad's squares, a 0-dim fp32 tensor on its device.
  at::Tensor SumOfSquaresOfComputeGrad() const;

  std::vector<ParamShape> shapes_;
  int64_t numel_ = 0, padded_numel_ = 0, group_size_ = 1, rank_ = 0;
  at::ScalarType compute_dtype_;
  at::Device device_;
  bool master_on_host_ = false;
  bool compute_shard_on_host_ = false;
  bool compute_resident_ = false;
  bool optimizer_reads_compute_grad_ = false;
  bool grad_stale_ = false;
  at::Tensor master_, grad_, compute_, compute_grad_, compute_shard_;
  std::vector<at::Tensor> params_;
};

}  // namespace llmplan::executor
