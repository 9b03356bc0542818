// The work model against hand counts of what the executor's kernels do
// (executor/model/chunked_cross_entropy.cc for the head).
#include "planner/work_model.h"

#include <gtest/gtest.h>

#include "planner/model_spec.h"

namespace llmplan {
namespace {

// Llama-3.2-1B, 4 x 2048 tokens, bf16, chunks of 1024 tokens.
ActivationShape Llama1B() { return ShapeOf(PresetModel("llama3.2-1b"), 4, 2048, 2, 1024, false, true); }

TEST(WorkModelTest, HeadGemmsAreAsSmallAsOneLossChunk) {
  // The chunked loss multiplies one chunk of tokens at a time: logits
  // [chunk, hidden] x [hidden, vocab], d W += [vocab, chunk] x [chunk, hidden].
  // The chunk (1024) is the GEMMs' smallest side, not the 8192 tokens or the 2048 hidden.
  const ActivationShape a = Llama1B();
  const OpWork w = HeadForwardWork(a);
  EXPECT_EQ(w.gemm_min_dim, 1024);
  EXPECT_DOUBLE_EQ(w.gemm_flops, 3 * 2 * a.tokens * a.hidden * a.vocab);
  // A chunk longer than the micro-batch: the tokens are the smallest side.
  ActivationShape short_batch = ShapeOf(PresetModel("qwen2.5-7b"), 1, 512, 2, 1024, false, true);
  EXPECT_EQ(HeadForwardWork(short_batch).gemm_min_dim, 512);
}

TEST(WorkModelTest, FusedBlockKernelsReadAndWriteOnce) {
  // Per token, bf16, Llama-3.2-1B (h = q = 2048, kv = 512, i = 8192):
  // fused: two norms read x and write the output and 1/rms (2 x (4h + 4)),
  // RoPE on q and k reads and writes once (4q + 4kv), v copied out of the
  // packed projection (4kv), the residual read by the o and down GEMMs'
  // epilogue (2 x 2h), SwiGLU reads gate and up and writes the product (3 x 2i).
  const ActivationShape fused = Llama1B();
  ActivationShape composite = fused;
  composite.fused_kernels = false;
  const double h = 2048, q = 2048, kv = 512, i = 8192;
  EXPECT_DOUBLE_EQ(BlockForwardWork(fused).elementwise_bytes,
                   fused.tokens * (2 * (4 * h + 4) + 4 * q + 4 * kv + 4 * kv + 4 * h + 6 * i));
  // Composite: each norm 36h (casts 12h, fp32 passes 20h, 4h in bf16), RoPE
  // 10 passes, SwiGLU 5 x 2i: 2.8x the bytes, and more than twice the launches.
  EXPECT_DOUBLE_EQ(BlockForwardWork(composite).elementwise_bytes,
                   composite.tokens * (2 * 36 * h + 20 * q + 20 * kv + 12 * h + 10 * i));
  // Fused: 4 GEMMs (q/k/v and gate/up packed), 2 norms, RoPE on q and k,
  // v's copy, attention, SwiGLU.
  EXPECT_EQ(BlockForwardWork(fused).launches, 11);
  EXPECT_EQ(BlockForwardWork(composite).launches, 37);
  // The GEMMs and attention do not change.
  EXPECT_DOUBLE_EQ(BlockForwardWork(fused).gemm_flops, BlockForwardWork(composite).gemm_flops);
  EXPECT_LT(BlockBackwardWork(fused, 6e7).elementwise_bytes, BlockBackwardWork(composite, 6e7).elementwise_bytes);
  // No fused kernels on a CPU.
  EXPECT_FALSE(ShapeOf(PresetModel("llama3.2-1b"), 4, 2048, 2, 1024, /*cpu_device=*/true, true).fused_kernels);
}

TEST(WorkModelTest, HeadCountsEveryVocabularySizedPassOfTheLoss) {
  // Per token and vocabulary entry, bf16, composite: mm output 2, fp32 copy
  // 2+4, log-sum-exp (max 4, logits - max 8, exp_ 8, sum 4), softmax in place
  // (sub 8, exp 8), 1/N scale 8, cast back 4+2: 62 bytes. The final norm
  // and zeroing d W are the rest.
  ActivationShape a = Llama1B();
  a.fused_kernels = false;
  const double vocab_bytes = 62 * a.tokens * a.vocab;
  const double rest = HeadForwardWork(a).elementwise_bytes - vocab_bytes;
  EXPECT_GT(rest, 0);
  EXPECT_LT(rest, 0.05 * vocab_bytes);  // norm (~40 bytes x hidden per token) and d W (2 x vocab x hidden)
  // fp32: the two casts vanish (52 bytes).
  ActivationShape f = ShapeOf(PresetModel("llama3.2-1b"), 4, 2048, 4, 1024, false, true);
  f.fused_kernels = false;
  EXPECT_GT(HeadForwardWork(f).elementwise_bytes, 52 * f.tokens * f.vocab);
  EXPECT_LT(HeadForwardWork(f).elementwise_bytes, 1.05 * 52 * f.tokens * f.vocab);
  // The fused kernel: mm output 2, read twice 4, gradient written over it 2: 8 bytes.
  const ActivationShape fused = Llama1B();
  const double fused_vocab = 8 * fused.tokens * fused.vocab;
  EXPECT_GT(HeadForwardWork(fused).elementwise_bytes, fused_vocab);
  EXPECT_LT(HeadForwardWork(fused).elementwise_bytes - fused_vocab, 0.3 * fused_vocab);
}

}  // namespace
}  // namespace llmplan
