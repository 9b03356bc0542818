// The shapes `llmplan profile` measures (see profile_shapes.h), taken from the
// model presets so they stay the executor's shapes.
#include "executor/profile/profile_shapes.h"

#include <algorithm>

#include "planner/model_spec.h"

namespace llmplan::executor {

namespace {

// The distinct projections of one block, as llama_model.cc calls at::linear,
// and the LM head (chunked_cross_entropy.cc: at::mm(h, W^T), the same GEMM).
void AddModel(const std::string& preset, int64_t tokens, bool head, std::vector<GemmShape>& shapes) {
  const ModelSpec m = PresetModel(preset);
  auto add = [&](const std::string& what, int64_t in, int64_t out) {
    for (const GemmShape& s : shapes)
      if (s.tokens == tokens && s.in == in && s.out == out) return;  // same GEMM under another name
    shapes.push_back({preset + " " + what, tokens, in, out, true});
  };
  add("q", m.hidden, m.q_dim());
  add("k/v", m.hidden, m.kv_dim());
  add("o", m.q_dim(), m.hidden);
  add("gate/up", m.hidden, m.intermediate);
  add("down", m.intermediate, m.hidden);
  if (head) add("lm_head", m.hidden, m.vocab);
}

// SmolLM2-135M's GEMMs as the fused block runs them (q, k and v packed into
// one GEMM of 960 columns, gate and up into one of 3,072: projections.h) at
// its planned micro-batch, 16 x 2048 tokens: reference rows, not in the fit.
// Every fitted shape is at least 512 wide; these are 576 wide (its k/v
// output alone would be 192), so the table shows what the fit, read off wider
// GEMMs, makes of a thin model's step.
void AddThinModelReference(std::vector<GemmShape>& shapes) {
  constexpr int64_t kTokens = 16 * 2048, kHidden = 576, kKv = 192, kFfn = 1536, kVocab = 49152;
  const std::string model = "smollm2-135m ";
  shapes.insert(shapes.end(), {{model + "qkv", kTokens, kHidden, kHidden + 2 * kKv, false},
                               {model + "o", kTokens, kHidden, kHidden, false},
                               {model + "gate/up", kTokens, kHidden, 2 * kFfn, false},
                               {model + "down", kTokens, kFfn, kHidden, false},
                               {model + "lm_head", kTokens, kHidden, kVocab, false}});
}

void AddSquare(int64_t n, bool in_fit, std::vector<GemmShape>& shapes) {
  for (const GemmShape& s : shapes)
    if (s.tokens == n && s.in == n && s.out == n) return;  // a model's projection measures it already
  shapes.push_back({"square " + std::to_string(n), n, n, n, in_fit});
}

}  // namespace

double GemmShape::MinDim() const { return static_cast<double>(std::min({tokens, in, out})); }

double AttentionShape::ForwardFlops() const {
  const double b = static_cast<double>(batch), s = static_cast<double>(seq);
  return 2.0 * b * s * s * static_cast<double>(heads * head_dim);
}

std::vector<GemmShape> ProfileGemmShapes(bool cuda, bool quick) {
  std::vector<GemmShape> shapes;
  if (cuda) {
    const std::vector<int64_t> tokens = quick ? std::vector<int64_t>{1024, 4096} : std::vector<int64_t>{1024, 4096, 16384};
    const std::vector<std::string> models =
        quick ? std::vector<std::string>{"llama3.2-1b", "llama3-8b"}
              : std::vector<std::string>{"llama3.2-1b", "llama3.2-3b", "llama3-8b", "qwen2.5-7b"};
    for (int64_t t : tokens)
      for (const std::string& model : models) AddModel(model, t, /*head=*/!quick, shapes);
    AddSquare(4096, /*in_fit=*/false, shapes);
    AddSquare(8192, /*in_fit=*/false, shapes);
    if (!quick) AddThinModelReference(shapes);
    return shapes;
  }
  const std::vector<int64_t> tokens = quick ? std::vector<int64_t>{256} : std::vector<int64_t>{256, 1024};
  for (int64_t t : tokens) {
    AddModel("tiny-llama", t, /*head=*/false, shapes);
    AddModel("small-llama", t, /*head=*/!quick, shapes);
  }
  // CPU plans of larger models reach these sides; the fit needs them to see
  // where the rate levels off.
  for (int64_t n : quick ? std::vector<int64_t>{512} : std::vector<int64_t>{512, 1024}) AddSquare(n, true, shapes);
  return shapes;
}

std::vector<GemmShape> CpuFp32GemmShapes(bool quick) {
  std::vector<GemmShape> shapes;
  for (int64_t n : quick ? std::vector<int64_t>{256} : std::vector<int64_t>{128, 256, 512}) AddSquare(n, false, shapes);
  return shapes;
}

std::vector<AttentionShape> ProfileAttentionShapes(bool cuda, bool quick) {
  std::vector<AttentionShape> shapes;
  if (cuda) {
    // The reference width first (Llama-3-8B's 32 heads of 128, 8 KV), then
    // 64-wide heads (Qwen2.5-0.5B's 14, 2 KV; SmolLM2's are 64 wide too) at
    // the same lengths: the profile keeps the second as a fraction of the first.
    const ModelSpec m = PresetModel("llama3-8b");
    const int64_t tokens = quick ? 8192 : 16384;
    const std::vector<int64_t> seqs = quick ? std::vector<int64_t>{2048, 4096} : std::vector<int64_t>{1024, 2048, 4096, 8192};
    for (int64_t seq : seqs) shapes.push_back({tokens / seq, m.heads, m.kv_heads, seq, m.head_dim});
    for (int64_t seq : seqs) shapes.push_back({tokens / seq, 14, 2, seq, 64});
    return shapes;
  }
  const ModelSpec m = PresetModel("small-llama");
  for (int64_t seq : quick ? std::vector<int64_t>{128, 256} : std::vector<int64_t>{128, 256, 512})
    shapes.push_back({1024 / seq, m.heads, m.kv_heads, seq, m.head_dim});
  return shapes;
}

std::vector<GemmShape> ContentionBlockGemms() {
  const ModelSpec m = PresetModel("llama3-8b");
  constexpr int64_t kTokens = 2 * 4096;
  const std::string model = "llama3-8b ";
  return {{model + "q", kTokens, m.hidden, m.q_dim(), false},
          {model + "k", kTokens, m.hidden, m.kv_dim(), false},
          {model + "v", kTokens, m.hidden, m.kv_dim(), false},
          {model + "o", kTokens, m.q_dim(), m.hidden, false},
          {model + "gate", kTokens, m.hidden, m.intermediate, false},
          {model + "up", kTokens, m.hidden, m.intermediate, false},
          {model + "down", kTokens, m.intermediate, m.hidden, false}};
}

}  // namespace llmplan::executor
