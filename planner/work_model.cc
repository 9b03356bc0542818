// WorkModel (see work_model.h): bytes per kernel as read + written.
#include "planner/work_model.h"

#include <algorithm>
#include <cmath>

namespace llmplan {

namespace {

// Per-token tensor sizes in bytes.
struct PerToken {
  explicit PerToken(const ActivationShape& a)
      : c(a.compute_bytes),
        H(c * a.hidden),
        F(4 * a.hidden),
        Q(c * a.q),
        KV(c * a.kv),
        I(c * a.inter),
        fused(a.fused_kernels) {}
  double c, H, F, Q, KV, I;
  bool fused;  // the fused block kernels (executor/model/block_kernels.h)
};

// RMSNorm forward. Composite: x.to(f32) (H+F), pow (2F), mean (F), xf*inv
// (2F), .to(dtype) (F+H), weight*normed (2H); the casts vanish in fp32. Fused:
// read x, write the output and 1/rms.
double RmsNormBytes(const PerToken& z) {
  if (z.fused) return 2 * z.H + 4;
  const double casts = z.c == 4 ? 0 : 2 * (z.H + z.F);
  return casts + 5 * z.F + 2 * z.H;
}
int RmsNormLaunches(const PerToken& z) { return z.fused ? 1 : 7; }
// RMSNorm backward. Fused: read the gradient, x and 1/rms, write x's
// gradient; then the weight gradient's partial sums are summed and cast (2
// small launches). Composite: about twice its forward.
double RmsNormBackwardBytes(const PerToken& z) { return z.fused ? 3 * z.H + 4 : 2 * RmsNormBytes(z); }
int RmsNormBackwardLaunches(const PerToken& z) { return z.fused ? 3 : 2 * RmsNormLaunches(z); }

// RoPE of a tensor of `x` bytes per token. Composite: x*cos, neg, cat, *sin,
// + -> 10x. Fused: read and write once (forward and backward alike).
double RopeBytes(const PerToken& z, double x) { return z.fused ? 2 * x : 10 * x; }
int RopeLaunches(const PerToken& z) { return z.fused ? 1 : 5; }

// SwiGLU forward. Composite: silu (2I), product (3I). Fused: read gate and
// up, write the product. Its fused backward reads the gradient, gate and up
// and writes two gradients.
double SwiGluBytes(const PerToken& z) { return z.fused ? 3 * z.I : 5 * z.I; }
int SwiGluLaunches(const PerToken& z) { return z.fused ? 1 : 2; }

}  // namespace

OpWork EmbeddingForwardWork(const ActivationShape& a) {
  const PerToken z(a);
  OpWork w;
  w.elementwise_bytes = a.tokens * (2 * z.H + 8);  // gather rows, read the indices
  w.launches = 1;
  if (a.documents) {
    // The attention layout: cos and sin gathered per token (read and write
    // each), its buffer's copy, and the mask's three passes under one.
    const double head_dim = a.heads > 0 ? a.q / a.heads : 0;
    w.elementwise_bytes += 4 * a.tokens * head_dim * z.c + 12 * a.tokens;
    w.launches += 3;
    if (a.document_mask) {
      w.elementwise_bytes += 3 * a.batch * a.seq * a.seq;
      w.launches += 3;
    }
  }
  return w;
}

OpWork EmbeddingBackwardWork(const ActivationShape& a, double table_params) {
  const PerToken z(a);
  OpWork w;
  // A dense zeroed [vocab, hidden] gradient; sort the indices; fp32 partial
  // sums over the tokens' rows; add the dense gradient into the flat one
  // (read both, write one).
  w.elementwise_bytes = table_params * z.c + a.tokens * (z.H + 2 * 1.1 * z.F + 32) + 3 * table_params * z.c;
  w.launches = 10;
  return w;
}

OpWork BlockForwardWork(const ActivationShape& a) {
  const PerToken z(a);
  const double t = a.tokens, h = a.hidden, q = a.q, kv = a.kv, i = a.inter;
  OpWork w;
  w.gemm_flops = 2 * t * (h * q + 2 * h * kv + q * h + 3 * h * i);
  // Most FLOPs sit in the q/o and MLP GEMMs, whose smallest side is h or t.
  w.gemm_min_dim = std::min(t, h);
  // QK^T and PV, causal half; inside documents, the share of the window's
  // causal tiles that lie inside them (Plan::document_attention_work).
  w.attention_flops = 2 * a.batch * a.seq * a.seq * q * a.attention_work;
  w.attention_head_dim = a.heads > 0 ? static_cast<int>(std::lround(q / a.heads)) : 0;
  // The rate grows with the length each causal loop spans: the window, or
  // inside documents the length whose causal triangles hold that share of the
  // window's (n documents of seq/n tokens hold 1/n of it).
  w.attention_seq = a.seq * a.attention_work;
  // Two RMSNorms, RoPE on q and k, two residual adds, SwiGLU. Composite:
  // each add reads two and writes one (3H). Fused: the o and down GEMMs add
  // the residual in their epilogue (read it: H), and v is copied out of the
  // packed q/k/v projection (read and write).
  const double residual_adds = z.fused ? 2 * z.H : 6 * z.H;
  const double v_copy = z.fused ? 2 * z.KV : 0;
  w.elementwise_bytes =
      t * (2 * RmsNormBytes(z) + RopeBytes(z, z.Q) + RopeBytes(z, z.KV) + v_copy + residual_adds + SwiGluBytes(z));
  // Composite: 7 GEMMs, the norms, RoPE on q and k, attention, 2 adds,
  // SwiGLU, and 1 more small kernel. Fused: 4 GEMMs (q/k/v and gate/up
  // packed, the adds in o's and down's), the norms, RoPE on q and k, v's copy,
  // attention, SwiGLU.
  w.launches = z.fused ? 4 + 2 * RmsNormLaunches(z) + 2 * RopeLaunches(z) + 1 + 1 + SwiGluLaunches(z)
                       : 7 + 2 * RmsNormLaunches(z) + 2 * RopeLaunches(z) + 1 + 2 + SwiGluLaunches(z) + 1;
  return w;
}

OpWork BlockBackwardWork(const ActivationShape& a, double block_params) {
  const PerToken z(a);
  OpWork w = BlockForwardWork(a);
  w.gemm_flops *= 2;              // dX and dW
  w.attention_flops *= 2.5;       // flash backward: five matmuls to forward's two
  w.attention_backward = true;
  // The gradients of tensors used twice are summed (composite: hn by q/k/v,
  // mn by gate/up, the residual stream twice, ~4 x 3H; fused: the packed
  // projections give hn's and mn's gradient in one GEMM each, and each norm's
  // backward kernel adds the residual stream's gradient as it writes its
  // input's (RmsNormOnResidual: one more read of H), so no sum is a pass of
  // its own), and every weight gradient is added into the flat gradient (read
  // both, write one).
  const double sums = a.tokens * (z.fused ? 2 : 12) * z.H + 3 * z.c * block_params;
  if (z.fused) {
    // Each fused kernel's backward, as block_kernels.h states: the norms,
    // RoPE into the packed gradient (read and write) and v's gradient copied
    // beside it, SwiGLU (read 3, write 2).
    w.elementwise_bytes = a.tokens * (2 * RmsNormBackwardBytes(z) + 2 * (z.Q + 2 * z.KV) + 5 * z.I) + sums;
    // 8 GEMMs, the norms, RoPE, v's copy, SwiGLU, attention and 9 weight
    // gradients added.
    w.launches = 8 + 2 * RmsNormBackwardLaunches(z) + 2 + 1 + 1 + 1 + 9;
    return w;
  }
  // Each composite kernel's backward reads its output gradient and saved
  // inputs and writes the input gradients: about twice its forward.
  w.elementwise_bytes = 2 * w.elementwise_bytes + sums;
  w.launches = 2 * w.launches + 9;
  return w;
}

OpWork HeadForwardWork(const ActivationShape& a) {
  const PerToken z(a);
  const double t = a.tokens, h = a.hidden, v = a.vocab;
  // Under a loss mask the loss runs on the trained targets' rows only
  // (selected after the final norm, which runs on every token).
  const double n = t * a.trained_fraction;
  OpWork w;
  // The chunked cross-entropy computes the logits and both gradients here:
  // logits = h W^T, d hidden = dlogits W, d W += dlogits^T h, one chunk of
  // at most loss_chunk tokens at a time: the chunk's tokens are a GEMM side
  // (the K of d W), so a long micro-batch does not make these GEMMs larger.
  w.gemm_flops = 3 * 2 * n * h * v;
  w.gemm_min_dim = std::min({n, h, std::max(1.0, a.loss_chunk)});
  // Per token of every chunk, in fp32 unless said: the matmul's output (cV),
  // its fp32 copy (cV + 4V); the log-sum-exp as LibTorch runs it: max (4V),
  // (logits - max) into a temporary (8V), exp_ in place (8V), sum (4V);
  // softmax in place (sub 8V, exp 8V), the -1 at the target, the 1/N scale
  // (8V), the gradient's cast (4V + cV). In fp32 the two casts vanish. Plus
  // the final norm and zeroing d W.
  // Fused (cross_entropy_kernel.h): the matmul's output, then the kernel
  // reads it twice and writes the gradient over it in the compute dtype; d W
  // is the holder's flat gradient, whose zeroing the program prices where it
  // makes it (ProgramBuilder::MakeComputeGrad).
  const double per_vocab = z.fused ? 4 * z.c : z.c == 4 ? 52 : 3 * z.c + 56;
  w.elementwise_bytes = t * RmsNormBytes(z) + n * per_vocab * v + (z.fused ? 0 : z.c * v * h);
  const double chunks = std::ceil(n / std::max(1.0, a.loss_chunk));
  // Per chunk: 3 GEMMs and the loss's sum and add, and the softmax (1 kernel
  // fused, 7 composite).
  w.launches = RmsNormLaunches(z) + 3 + static_cast<int>((z.fused ? 6 : 12) * chunks);
  return w;
}

OpWork HeadEvaluationWork(const ActivationShape& a) {
  const PerToken z(a);
  const double t = a.tokens, h = a.hidden, v = a.vocab;
  const double n = t * a.trained_fraction;  // the rows the loss runs on, as in training
  OpWork w;
  // One GEMM per chunk (the logits); no gradient GEMMs.
  w.gemm_flops = 2 * n * h * v;
  w.gemm_min_dim = std::min({n, h, std::max(1.0, a.loss_chunk)});
  // Per token of every chunk: the matmul's output (cV); fused, the kernel
  // reads it once for the row's max and sum and once more for the target
  // (2cV); composite, its fp32 copy (cV + 4V) and the log-sum-exp as LibTorch
  // runs it (max 4V, (logits - max) into a temporary 8V, exp_ in place 8V,
  // sum 4V). Plus the final norm.
  const double per_vocab = z.fused ? 3 * z.c : z.c == 4 ? 28 : 2 * z.c + 28;
  w.elementwise_bytes = t * RmsNormBytes(z) + n * per_vocab * v;
  const double chunks = std::ceil(n / std::max(1.0, a.loss_chunk));
  // Per chunk: the GEMM, the loss's sum and add, and the softmax's sums (1
  // kernel fused, 6 composite).
  w.launches = RmsNormLaunches(z) + static_cast<int>((z.fused ? 4 : 9) * chunks);
  return w;
}

OpWork HeadBackwardWork(const ActivationShape& a, double matrix_params) {
  const PerToken z(a);
  OpWork w;
  // The forward built both gradients for the seed backward brings (the
  // executor's ChunkedCrossEntropy known_seed), so nothing is scaled here:
  // add d W into the flat gradient (the composite form: the fused form's loss
  // wrote it there), and the final norm's backward.
  const double add = z.fused ? 0 : 3 * z.c * matrix_params;
  w.elementwise_bytes = a.tokens * RmsNormBackwardBytes(z) + add;
  w.launches = RmsNormBackwardLaunches(z) + (z.fused ? 1 : 2);
  return w;
}

}  // namespace llmplan
