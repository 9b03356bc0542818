// The shapes `llmplan profile` measures: the GEMMs and attention calls the
// executor's model makes for the models people train, so the profile's
// numbers are rates of the kernels a run really launches.
//
// On CUDA (bf16): the q, k/v, o, gate/up and down projections and the LM head
// of Llama-3.2-1B, Llama-3.2-3B, Llama-3-8B and Qwen2.5-7B at 1024, 4096 and
// 16384 tokens per micro-batch (and, for the table only, SmolLM2-135M's at
// 32768), and Llama-3-8B's attention (32 heads, 8 KV
// heads, head_dim 128) at sequence lengths 1024..8192 with 16384 tokens each.
// On the CPU (in bf16, plans' default compute dtype, also on the CPU): the CPU
// test models' projections (tiny-llama, small-llama) and square GEMMs up to
// 1024, whose sides CPU plans reach; small-llama's attention at 128..512; and
// a few fp32 squares for the table (plans with --dtype fp32).
// --quick keeps enough of each for a fit in seconds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace llmplan::executor {

// at::linear(x[tokens, in], W[out, in]): 2 * tokens * in * out FLOPs.
struct GemmShape {
  std::string what;  // "llama3-8b q" or "square 8192"
  int64_t tokens = 0, in = 0, out = 0;
  bool in_fit = true;  // false: a reference point (the square GEMMs on CUDA), kept in the table only

  double Flops() const { return 2.0 * static_cast<double>(tokens) * static_cast<double>(in) * static_cast<double>(out); }
  double MinDim() const;
};

// q: [batch, heads, seq, head_dim]; k, v: [batch, kv_heads, seq, head_dim].
struct AttentionShape {
  int64_t batch = 0, heads = 0, kv_heads = 0, seq = 0, head_dim = 0;

  // Forward FLOPs as the work model counts them (planner/work_model.cc):
  // QK^T and PV, 2 * 2 * b * s^2 * h * d, halved by the causal mask.
  double ForwardFlops() const;
  // Backward does 2.5x the forward's FLOPs (five matmuls to two).
  double BackwardFlops() const { return 2.5 * ForwardFlops(); }
};

// The model projections (in_fit) and, on CUDA, the square references
// 4096^3 and 8192^3 (not in the fit; 8192^3 is what datasheets quote) unless a
// projection already has that shape, and (full profile only) SmolLM2-135M's
// fused-block GEMMs at 32,768 tokens, a thin model's rates for the table.
std::vector<GemmShape> ProfileGemmShapes(bool cuda, bool quick);

// The few GEMMs measured in fp32 on the CPU beside the bf16 fit, for the
// table: a CPU plan computes in fp32 only with --dtype fp32, and LibTorch's
// fp32 GEMM can be far slower than its bf16 one (oneDNN) on CPUs with bf16 units.
std::vector<GemmShape> CpuFp32GemmShapes(bool quick);

std::vector<AttentionShape> ProfileAttentionShapes(bool cuda, bool quick);

// The compute the contention measurement (contention.h) runs beside NCCL:
// every forward GEMM of one Llama-3-8B block at micro-batch 2 x seq 4096
// (8192 tokens), in the model's call order — q, k, v, o, gate, up, down —
// the kernels a prefetched all-gather or a reduce-scatter overlaps in training.
std::vector<GemmShape> ContentionBlockGemms();

}  // namespace llmplan::executor
