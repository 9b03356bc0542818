// Chunked cross-entropy: the language-model loss over a large vocabulary
// without materialising the [tokens, vocab] fp32 logits (for Llama-3's 128k
// vocabulary and 8k tokens that would be 4 GiB, plus as much again for their
// gradient).
//
// Tokens are processed `chunk_tokens` at a time: logits = h_c W^T (compute
// dtype GEMM), fp32 log-sum-exp and loss, then immediately the gradient of the
// mean loss w.r.t. the logits (softmax - one_hot) / N, from which dh_c = dL W
// and dW += dL^T h_c. So only one chunk's logits ever exist, and the head does
// three GEMMs (no recompute of logits in backward). Backward merely scales the
// stored dh and dW by the incoming gradient (1 / grad_accum in training), or,
// where the caller said what that gradient will be, does nothing at all.
//
// dW accumulates across chunks in the weight's dtype (bf16 on GPU), as the
// GEMM's beta=1 epilogue does (same choice as Liger's fused linear CE), in a
// buffer of its own or in one the caller gives (weight_grad_into below).
//
// The softmax between the GEMMs is either LibTorch's ops on an fp32 copy of
// the chunk's logits (composite) or one kernel that turns the logits into
// their gradient in place (fused: cross_entropy_kernel.h; CUDA only).
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace llmplan::executor {

// Mean cross-entropy of `targets` under logits hidden @ weight^T.
// hidden [N, H] and weight [V, H] in the same dtype; targets [N] int64 in [0, V).
// Differentiable w.r.t. hidden and weight (autograd function). `fused`: the
// softmax as the CUDA kernel, where it can run (a CUDA build, CUDA tensors in
// bf16 or fp32); the composite ops otherwise.
//
// `weight_grad_into`, when defined, is where the weight's gradient goes: the
// chunks' GEMMs add into it (so it must hold what the caller wants added to,
// zeros for a fresh gradient) and backward scales it in place by the incoming
// gradient, returning none for autograd to add. The executor passes the
// weight's slice of its unit's flat gradient buffer: no [V, H] buffer of the
// loss's own beside it at the head's backward (1 GiB for Llama-3-8B's 128k x
// 4096 bf16), and no pass adding one into the other (read 2 x 2, write 2
// bytes per weight: 0.4 ms of a Llama-3.2-1B step on an H200). The values
// are the same bit for bit: the returned gradient was built the same way
// from zeros, and adding it into zeros is exact.
// REQUIRES: chunk_tokens >= 1, N >= 1; weight_grad_into undefined, or
// contiguous [V, H] in weight's dtype and device, not aliasing hidden or
// weight, and weight.requires_grad().
//
// `denominator`: what the summed loss is divided by — 0 for N (the mean);
// a loss mask's trained tokens over the step (StepInterpreter: the hidden
// rows passed are the trained ones, the denominator every micro-batch's).
//
// `known_seed`: 0, or the gradient the caller will seed backward with (the
// StepInterpreter's 1 / micro-batches). Given, the forward builds the
// gradients for it (the softmax's scale times the seed, in fp32 before the
// rounding) and backward returns them as they are: no pass scaling dW (the
// whole [V, H] gradient) and dh through ATen's unvectorised kernel for a
// device scalar, 0.79 ms of the Llama-3.2-1B step on an H200.
// REQUIRES then: backward's incoming gradient is exactly known_seed (not
// checked: that would read the device mid-step).
at::Tensor ChunkedCrossEntropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                               int64_t chunk_tokens, bool fused = false, const at::Tensor& weight_grad_into = {},
                               double denominator = 0, double known_seed = 0);

// The plain reference: full logits, fp32 cross-entropy (for tests).
at::Tensor PlainCrossEntropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets);

}  // namespace llmplan::executor
