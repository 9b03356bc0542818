// The cross-entropy's softmax as one CUDA kernel (cross_entropy_kernel.cu), for
// the chunked cross-entropy (chunked_cross_entropy.h) on a GPU.
//
// Why: per chunk the composite form casts the [tokens, vocab] logits to fp32
// and runs max, subtract, exp, sum, then subtract, exp, scatter, scale and a
// cast back: about 62 bytes per logit for Llama-3's 128k vocabulary, 130 GB
// per step of Llama-3.2-1B at 16k tokens (~35 ms on H200 at HBM speed). This
// kernel reads each row twice and writes it once in the compute dtype: 6 bytes
// per bf16 logit, and no fp32 copy of the chunk.
//
// Numerics as the composite form: logits as the GEMM rounded them, fp32 log-
// sum-exp (here an online max and sum, so its last bit may differ), gradient
// (exp(x - lse) - one_hot) * grad_scale in fp32 rounded once to the dtype.
//
// Free of LibTorch headers: included by host code and by nvcc.
#pragma once

#include <cstdint>

#include "executor/model/block_kernels.h"

namespace llmplan::executor {

// For each of `rows` rows of logits [rows, vocab] (contiguous): row_loss[r] =
// logsumexp(logits[r]) - logits[r, targets[r]] in fp32; then, when
// write_gradient, logits[r] is overwritten in place by
// (softmax(logits[r]) - one_hot(targets[r])) * grad_scale.
// Asynchronous on `stream`; throws std::runtime_error if the launch fails.
// REQUIRES: device pointers; targets[r] in [0, vocab) (the caller checks
// token ids: an id out of range reads no logit and the loss is wrong);
// vocab >= 1.
void LaunchCrossEntropyRows(KernelDType dtype, void* logits, const int64_t* targets, float* row_loss, int64_t rows,
                            int64_t vocab, bool write_gradient, float grad_scale, void* stream);

}  // namespace llmplan::executor
