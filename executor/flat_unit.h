// FlatUnit: the parameters of one model unit (embedding, a block, the head)
// held as flat buffers, the form sharding and collectives want:
//
//   master   fp32, this rank's contiguous slice of the padded flat vector
//            (the optimizer updates it; AdamW state has the same shape)
//   grad     fp32, same slice; gradients accumulate here across micro-batches
//   compute  the whole unit in the compute dtype (bf16 on GPU); the model's
//            parameter tensors are views of it, so "gather" fills one buffer
//            and every parameter sees it
//   compute_grad  the whole unit in the compute dtype; the parameters' .grad
//            are views of it, so autograd accumulates straight into one flat
//            buffer that a single reduce-scatter (or a cast-add here) consumes
//
// The flat length is padded to a multiple of `group_size` so a shard is a
// plain contiguous slice of equal length on every rank. With group_size 1 (one
// process) the shard is the whole unit, Gather is a cast master -> compute and
// ReduceGradients is a cast-add compute_grad -> grad.
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

class FlatUnit {
 public:
  // Allocates the buffers for `shapes` on `device`. master and grad hold
  // elements [rank * shard_numel, (rank + 1) * shard_numel) of the padded flat
  // vector.
  // REQUIRES: group_size >= 1, 0 <= rank < group_size.
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
  at::ScalarType compute_dtype() const { return compute_dtype_; }

  at::Tensor& master() { return master_; }  // fp32 [shard_numel]
  at::Tensor& grad() { return grad_; }      // fp32 [shard_numel]
  const at::Tensor& compute() const { return compute_; }            // [padded_numel]
  const at::Tensor& compute_grad() const { return compute_grad_; }  // [padded_numel]

  // The model's parameters for this unit (views of compute(), requires_grad,
  // .grad set to views of compute_grad()), in shapes() order.
  const std::vector<at::Tensor>& params() const { return params_; }

  // fp32 views of the master buffer, one per parameter, for initialisation
  // and checkpoints.
  // REQUIRES: group_size() == 1 (a shard does not hold whole parameters).
  std::vector<at::Tensor> MasterViews();

  // compute <- master, cast to the compute dtype.
  // REQUIRES: group_size() == 1 (sharded units gather through a communicator).
  void GatherLocal();
  // grad += compute_grad (in fp32); then compute_grad = 0, ready for the next
  // micro-batch's backward.
  // REQUIRES: group_size() == 1.
  void ReduceGradientsLocal();
  // Zeroes grad and compute_grad (start of an optimizer step).
  void ZeroGradients();

 private:
  std::vector<ParamShape> shapes_;
  int64_t numel_ = 0, padded_numel_ = 0, group_size_ = 1, rank_ = 0;
  at::ScalarType compute_dtype_;
  at::Tensor master_, grad_, compute_, compute_grad_;
  std::vector<at::Tensor> params_;
};

}  // namespace llmplan::executor
