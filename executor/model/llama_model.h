// LlamaModel: a plain Llama-family decoder (Llama, Mistral, Qwen2) built from a
// ModelSpec, exposed as units the step program schedules one at a time:
// unit 0 = embedding, units 1..L = transformer blocks 0..L-1, unit L+1 = head
// (final RMSNorm + lm_head; with tied embeddings the head uses unit 0's matrix).
//
// The model owns no tensors. It describes each unit's parameters (Hugging Face
// names and shapes, in the order they are laid out in a flat buffer) and
// computes a unit's forward from parameter tensors it is handed. That keeps it
// ignorant of where parameters live (flat buffers, shards, offload): sharding
// is applied around it, as torchtitan applies parallelism to a plain model.
//
// Numerics follow Hugging Face's LlamaForCausalLM: RMSNorm in fp32 then cast,
// RoPE in the rotate_half layout (first half / second half of each head),
// SwiGLU MLP, grouped-query attention, q/k/v biases for Qwen2. The norms, RoPE
// and SwiGLU are block_ops.h's: fused CUDA kernels on a GPU, LibTorch's
// composite ops elsewhere. The fused form also packs the q/k/v and the
// gate/up projections into one GEMM each and adds the residual in the o and
// down projections' GEMM epilogue (projections.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "executor/model/attention_layout.h"
#include "planner/model_spec.h"
#include "planner/step_program.h"

namespace llmplan::executor {

enum class ParamInit { kNormal, kOnes, kZeros };

struct ParamShape {
  std::string name;  // Hugging Face tensor name, e.g. "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;
  ParamInit init = ParamInit::kNormal;
  int64_t numel() const;
};

class LlamaModel {
 public:
  // fused_kernels: run the block ops fused where they can run
  // (block_ops.h; Plan::fused_kernels).
  // REQUIRES: spec.Validate() passes.
  explicit LlamaModel(ModelSpec spec, bool fused_kernels = true);

  const ModelSpec& spec() const { return spec_; }
  int num_units() const { return static_cast<int>(units_.size()); }
  int embedding_unit() const { return 0; }
  int block_unit(int layer) const { return layer + 1; }
  int head_unit() const { return num_units() - 1; }
  UnitKind unit_kind(int unit) const;
  // Parameters of `unit`, in flat-buffer order. The head of a tied model owns
  // only model.norm.weight.
  const std::vector<ParamShape>& unit_params(int unit) const { return units_.at(unit); }
  int64_t UnitNumel(int unit) const;
  // Sum over units; equals spec().TotalParams().
  int64_t TotalNumel() const;

  // Writes initial values into `params` (any dtype/device, unit_params order):
  // normal(0, 0.02) for matrices (HF initializer_range), ones for norms, zeros
  // for biases. Each unit draws from its own CPU generator seeded from
  // (seed, unit), so values do not depend on which units a rank holds or on
  // the device.
  // REQUIRES: params[i] has unit_params(unit)[i].shape.
  void InitUnit(int unit, const std::vector<at::Tensor>& params, uint64_t seed) const;

  // The table of positions 0..seq_len-1. REQUIRES: seq_len >= 1.
  RopeTable MakeRopeTable(int64_t seq_len, const at::Device& device, at::ScalarType dtype) const;

  // tokens [B, T] int64 -> hidden [B, T, hidden] in the embedding's dtype.
  // REQUIRES: params are unit 0's; every token in [0, vocab) (checked by the
  // caller: an out-of-range id is undefined behaviour in the CUDA kernel).
  at::Tensor EmbeddingForward(const std::vector<at::Tensor>& params, const at::Tensor& tokens) const;
  // x [B, T, hidden] -> [B, T, hidden], attending as `layout` says (the
  // whole window, or each document on its own: attention_layout.h).
  // REQUIRES: params are block `layer`'s; a window layout's table holds at
  // least T positions, a documents layout is this micro-batch's.
  at::Tensor BlockForward(int layer, const std::vector<at::Tensor>& params, const at::Tensor& x,
                          const AttentionLayout& layout) const;
  // The same over the whole window, positions 0..T-1 of `rope`.
  at::Tensor BlockForward(int layer, const std::vector<at::Tensor>& params, const at::Tensor& x,
                          const RopeTable& rope) const {
    return BlockForward(layer, params, x, WindowLayout(rope));
  }
  // The head's final RMSNorm: x [B, T, hidden] -> normalised [B, T, hidden].
  at::Tensor FinalNorm(const std::vector<at::Tensor>& head_params, const at::Tensor& x) const;
  // Whether this model's ops on `x` run as the fused CUDA kernels (block_ops.h:
  // asked for, a CUDA tensor, shapes that fit). The head's cross-entropy
  // follows the same answer, so the planner has one rule for all of them.
  bool RunsFusedKernels(const at::Tensor& x) const;
  // The output projection's weight [vocab, hidden]: lm_head, or the embedding
  // matrix when tied.
  at::Tensor OutputWeight(const std::vector<at::Tensor>& head_params,
                          const std::vector<at::Tensor>& embedding_params) const;

 private:
  // Positions of a block's tensors in its parameter list (-1: absent).
  struct BlockLayout {
    int input_norm = -1, q = -1, q_bias = -1, k = -1, k_bias = -1, v = -1, v_bias = -1, o = -1;
    int post_norm = -1, gate = -1, up = -1, down = -1;
  };
  ModelSpec spec_;
  bool fused_kernels_;
  std::vector<std::vector<ParamShape>> units_;
  BlockLayout block_;
};

}  // namespace llmplan::executor
