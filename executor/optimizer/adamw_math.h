// AdamWScalars: the per-step numbers one AdamW update of a flat fp32 buffer
// needs, computed once on the host so the CPU loop and the CUDA kernel apply
// exactly the same arithmetic as the whole-buffer ATen form in adamw.cc:
//
//   g  = g * grad_scale                                 (clipping, folded in)
//   p  = p * (1 - lr * wd)
//   m  = m * b1 + g * (1 - b1)
//   v  = v * b2 + g * g * (1 - b2)
//   p += step_size * m / (sqrt(v) / bias2_sqrt + eps)     step_size = -lr / bias1
//
// Free of LibTorch and CUDA headers: included by host code and by nvcc.
#pragma once

#include <cstdint>

namespace llmplan::executor {

struct AdamWScalars {
  float decay = 1;       // 1 - lr * weight_decay
  float beta1 = 0.9f, one_minus_beta1 = 0.1f;
  float beta2 = 0.95f, one_minus_beta2 = 0.05f;
  float bias2_sqrt = 1;  // sqrt(1 - beta2^t)
  float eps = 1e-8f;
  float step_size = 0;   // -lr / (1 - beta1^t)
  // The gradient's clipping factor, applied as the update reads it. 1 where
  // the gradients were clipped in place before (the GPU optimizer); the
  // offloaded optimizer copies its gradients down while the backward still
  // runs, before the global norm is known, and clips here instead.
  float grad_scale = 1;
};

// One fused AdamW pass over n elements on the GPU (fused_adamw.cu): reads
// param, grad (fp32, or bf16 when grad_is_bf16: widened exactly, the same
// update), m, v once, writes param, m, v and, when compute_out is not null,
// the updated param in bf16 (compute_is_bf16) or fp32 — the copy the next
// all-gather sends. One launch; asynchronous on `stream` (a cudaStream_t).
// REQUIRES: device pointers of one device; n >= 0.
void LaunchFusedAdamW(float* param, const void* grad, bool grad_is_bf16, float* exp_avg, float* exp_avg_sq,
                      void* compute_out, bool compute_is_bf16, int64_t n, const AdamWScalars& s, void* stream);

}  // namespace llmplan::executor
