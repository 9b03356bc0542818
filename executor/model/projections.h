// Projections: a Llama block's linear layers as the fused form runs them
// (LlamaModel::BlockForward on a GPU; the composite form keeps HF's
// at::linear calls and adds).
//
//   PackedLinear   several projections of one input as one GEMM — q, k and
//                  v, or gate and up — their weights used as the rows of one
//                  matrix.
//   AddProjection  residual + x W^T as one GEMM adding the residual in its
//                  epilogue (D = A B^T + C, rounded once; on a GPU in bf16
//                  through cuBLASLt, which reads C and writes D apart:
//                  residual_gemm_cuda.h).
//
// Why, in bytes and launches: the separate form runs a GEMM per projection
// forward and two backward, sums the projections' input gradients with an
// add pass each ([tokens, hidden] read twice, written once), and adds the
// residual in a pass of its own. One GEMM with N = the projections' outputs
// together keeps the tensor cores busier than three (k and v are narrow: 512
// columns of a Llama-3.2-1B) and gives the input gradient in one product with
// nothing to sum.
//
// Weight gradients: where a weight already has a .grad buffer (a unit's flat
// compute-dtype gradient, executor/sharding/flat_unit.h), the backward GEMM
// adds into it (beta = 1) instead of writing a temporary that autograd's
// AccumulateGrad then adds: the gradient is written once instead of written,
// read, read back and written again, and no [out, in] temporary is
// allocated. Into a zeroed buffer (a micro-batch's backward) the values equal
// AccumulateGrad's bit for bit: round(A B + 0) = round(A B). Without a .grad
// buffer the gradient goes back to autograd as usual.
//
// Packed weights are used in place when they lie back to back in memory, as
// a unit's flat buffer lays out q, k, v and gate, up; otherwise (Qwen2's
// biases sit between them, or separate tensors) they are concatenated for
// the product, a copy of the weights only. Likewise their .grad buffers.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

namespace llmplan::executor {

// y [..., sum of rows] = x [..., in] W^T + b, W the weights' rows one after
// the other ([rows_i, in] each, one dtype and device), b their biases
// likewise (`biases` empty, or one defined tensor per weight).
// Differentiable in x, the weights and the biases.
// REQUIRES: weights non-empty, each 2-D with in columns; x's last dim is in.
at::Tensor PackedLinear(const at::Tensor& x, at::TensorList weights, at::TensorList biases);

// residual + x W^T: residual [..., out], x [..., in], weight [out, in], one
// dtype. Differentiable in all three.
at::Tensor AddProjection(const at::Tensor& residual, const at::Tensor& x, const at::Tensor& weight);

}  // namespace llmplan::executor
