#include "executor/model/llama_model.h"

#include <ATen/CPUGeneratorImpl.h>

#include <tuple>

#include "executor/model/block_ops.h"
#include "executor/model/projections.h"
#include "executor/torch_compat.h"

namespace llmplan::executor {

int64_t ParamShape::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

LlamaModel::LlamaModel(ModelSpec spec, bool fused_kernels)
    : spec_(std::move(spec)), fused_kernels_(fused_kernels) {
  const int64_t h = spec_.hidden, q = spec_.q_dim(), kv = spec_.kv_dim(), i = spec_.intermediate;
  units_.push_back({{"model.embed_tokens.weight", {spec_.vocab, h}, ParamInit::kNormal}});
  for (int64_t layer = 0; layer < spec_.layers; ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    std::vector<ParamShape> u;
    auto add = [&](const std::string& name, std::vector<int64_t> shape, ParamInit init) {
      u.push_back({p + name, std::move(shape), init});
      return static_cast<int>(u.size()) - 1;
    };
    BlockLayout b;
    b.input_norm = add("input_layernorm.weight", {h}, ParamInit::kOnes);
    b.q = add("self_attn.q_proj.weight", {q, h}, ParamInit::kNormal);
    if (spec_.qkv_bias) b.q_bias = add("self_attn.q_proj.bias", {q}, ParamInit::kZeros);
    b.k = add("self_attn.k_proj.weight", {kv, h}, ParamInit::kNormal);
    if (spec_.qkv_bias) b.k_bias = add("self_attn.k_proj.bias", {kv}, ParamInit::kZeros);
    b.v = add("self_attn.v_proj.weight", {kv, h}, ParamInit::kNormal);
    if (spec_.qkv_bias) b.v_bias = add("self_attn.v_proj.bias", {kv}, ParamInit::kZeros);
    b.o = add("self_attn.o_proj.weight", {h, q}, ParamInit::kNormal);
    b.post_norm = add("post_attention_layernorm.weight", {h}, ParamInit::kOnes);
    b.gate = add("mlp.gate_proj.weight", {i, h}, ParamInit::kNormal);
    b.up = add("mlp.up_proj.weight", {i, h}, ParamInit::kNormal);
    b.down = add("mlp.down_proj.weight", {h, i}, ParamInit::kNormal);
    block_ = b;  // the same for every layer
    units_.push_back(std::move(u));
  }
  std::vector<ParamShape> head = {{"model.norm.weight", {h}, ParamInit::kOnes}};
  if (!spec_.tied_embeddings) head.push_back({"lm_head.weight", {spec_.vocab, h}, ParamInit::kNormal});
  units_.push_back(std::move(head));
}

UnitKind LlamaModel::unit_kind(int unit) const {
  if (unit == embedding_unit()) return UnitKind::kEmbedding;
  if (unit == head_unit()) return UnitKind::kHead;
  return UnitKind::kBlock;
}

int64_t LlamaModel::UnitNumel(int unit) const {
  int64_t n = 0;
  for (const auto& p : units_.at(unit)) n += p.numel();
  return n;
}

int64_t LlamaModel::TotalNumel() const {
  int64_t n = 0;
  for (int u = 0; u < num_units(); ++u) n += UnitNumel(u);
  return n;
}

void LlamaModel::InitUnit(int unit, const std::vector<at::Tensor>& params, uint64_t seed) const {
  const auto& shapes = units_.at(unit);
  TORCH_CHECK(params.size() == shapes.size(), "InitUnit: unit ", unit, " has ", shapes.size(), " parameters, got ",
              params.size());
  // A per-unit stream: splitmix-style mixing so nearby seeds/units differ.
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(unit) * 0xBF58476D1CE4E5B9ull + 1;
  at::Generator gen = at::detail::createCPUGenerator(s);
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < shapes.size(); ++i) {
    TORCH_CHECK(params[i].sizes() == at::IntArrayRef(shapes[i].shape), "InitUnit: ", shapes[i].name,
                " has the wrong shape");
    switch (shapes[i].init) {
      case ParamInit::kOnes: params[i].fill_(1.0); break;
      case ParamInit::kZeros: params[i].zero_(); break;
      case ParamInit::kNormal: {
        // Drawn on the CPU in fp32 so the values are the same whatever the
        // target device or dtype.
        at::Tensor cpu = at::empty(shapes[i].shape, at::TensorOptions().dtype(at::kFloat));
        cpu.normal_(0.0, 0.02, gen);
        params[i].copy_(cpu);
        break;
      }
    }
  }
}

RopeTable LlamaModel::MakeRopeTable(int64_t seq_len, const at::Device& device, at::ScalarType dtype) const {
  // HF: inv_freq[j] = theta^(-2j/d), j < d/2; emb = cat(freqs, freqs) so the
  // two halves of a head rotate together (rotate_half layout). Computed in
  // fp64 on the host then cast: the table is tiny and the angles at large
  // positions need the precision.
  const int64_t d = spec_.head_dim;
  auto f64 = at::TensorOptions().dtype(at::kDouble);
  at::Tensor inv_freq = at::pow(spec_.rope_theta, -at::arange(0, d, 2, f64) / static_cast<double>(d));
  at::Tensor pos = at::arange(seq_len, f64);
  at::Tensor freqs = at::outer(pos, inv_freq);
  at::Tensor emb = at::cat({freqs, freqs}, -1);
  RopeTable t;
  // HF computes cos/sin in fp32 then casts to the activation dtype.
  t.cos = emb.cos().to(at::kFloat).to(dtype).to(device);
  t.sin = emb.sin().to(at::kFloat).to(dtype).to(device);
  return t;
}

at::Tensor LlamaModel::EmbeddingForward(const std::vector<at::Tensor>& params, const at::Tensor& tokens) const {
  return at::embedding(params.at(0), tokens);
}

at::Tensor LlamaModel::BlockForward(int layer, const std::vector<at::Tensor>& p, const at::Tensor& x,
                                    const AttentionLayout& layout) const {
  (void)layer;  // every block has the same layout
  const BlockLayout& b = block_;
  const int64_t batch = x.size(0), t = x.size(1);
  const int64_t nh = spec_.heads, nkv = spec_.kv_heads, hd = spec_.head_dim;
  auto bias = [&](int i) { return i >= 0 ? p[i] : at::Tensor(); };

  const BlockOpsForm form = BlockOpsFormFor(fused_kernels_, x, spec_.hidden, hd);
  const bool fused = form == BlockOpsForm::kFused;

  // Attention. RoPE runs on the projections viewed [B, T, H, D] (their
  // memory order); the transpose to [B, H, T, D] for attention is a view.
  // The norms' second outputs are x and h themselves, used for the residual
  // adds, so each norm's backward also adds the residual stream's gradient.
  // With documents the table holds a row per token (its position in its
  // document): the rotations see the [B, T] tokens as one row of B T, a
  // view, so the same kernels serve both layouts.
  const auto [hn, x_residual] = RmsNormOnResidual(form, x, p[b.input_norm], spec_.rms_norm_eps);
  const bool documents = layout.documents;
  const at::Tensor cos = documents ? layout.rope.cos : layout.rope.cos.narrow(0, 0, t);
  const at::Tensor sin = documents ? layout.rope.sin : layout.rope.sin.narrow(0, 0, t);
  const int64_t rows = documents ? 1 : batch, per_row = documents ? batch * t : t;
  at::Tensor q, k, v;
  if (fused) {
    // One GEMM for q, k and v (adjacent in the unit's flat buffer), one pass
    // rotating q and k out of its rows and copying v (projections.h).
    std::vector<at::Tensor> biases;
    if (spec_.qkv_bias) biases = {p[b.q_bias], p[b.k_bias], p[b.v_bias]};
    at::Tensor packed = PackedLinear(hn, {p[b.q], p[b.k], p[b.v]}, biases);
    std::tie(q, k, v) = QkvRope(packed.view({rows, per_row, packed.size(-1)}), cos, sin, nh, nkv);
    q = q.view({batch, t, nh, hd});
    k = k.view({batch, t, nkv, hd});
    v = v.view({batch, t, nkv, hd});
  } else {
    q = at::linear(hn, p[b.q], bias(b.q_bias)).view({rows, per_row, nh, hd});
    k = at::linear(hn, p[b.k], bias(b.k_bias)).view({rows, per_row, nkv, hd});
    v = at::linear(hn, p[b.v], bias(b.v_bias)).view({batch, t, nkv, hd});
    q = ApplyRope(form, q, cos, sin).view({batch, t, nh, hd});
    k = ApplyRope(form, k, cos, sin).view({batch, t, nkv, hd});
  }
  at::Tensor attn;
  if (documents) {
    attn = compat::DocumentAttention(q, k, v, layout.cu_seqlens, layout.longest_piece, layout.hidden);
  } else {
    attn = compat::CausalAttention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2);
  }
  attn = attn.reshape({batch, t, nh * hd});
  at::Tensor h = fused ? AddProjection(x_residual, attn, p[b.o]) : x_residual + at::linear(attn, p[b.o]);

  // SwiGLU MLP.
  const auto [mn, h_residual] = RmsNormOnResidual(form, h, p[b.post_norm], spec_.rms_norm_eps);
  if (!fused) {
    // HF's statements: the MLP's intermediates die before the residual add.
    at::Tensor mlp = at::linear(SwiGlu(form, at::linear(mn, p[b.gate]), at::linear(mn, p[b.up])), p[b.down]);
    return h_residual + mlp;
  }
  // Gate and up as one GEMM; the down projection's GEMM adds the residual.
  return AddProjection(h_residual, SwiGluPacked(PackedLinear(mn, {p[b.gate], p[b.up]}, {})), p[b.down]);
}

bool LlamaModel::RunsFusedKernels(const at::Tensor& x) const {
  return BlockOpsFormFor(fused_kernels_, x, spec_.hidden, spec_.head_dim) == BlockOpsForm::kFused;
}

at::Tensor LlamaModel::FinalNorm(const std::vector<at::Tensor>& head_params, const at::Tensor& x) const {
  return RmsNorm(BlockOpsFormFor(fused_kernels_, x, spec_.hidden, spec_.head_dim), x, head_params.at(0), spec_.rms_norm_eps);
}

at::Tensor LlamaModel::OutputWeight(const std::vector<at::Tensor>& head_params,
                                    const std::vector<at::Tensor>& embedding_params) const {
  return spec_.tied_embeddings ? embedding_params.at(0) : head_params.at(1);
}

}  // namespace llmplan::executor
