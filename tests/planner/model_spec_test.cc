// Exact parameter counts (presets and Hugging Face config.json files) and the
// PaLM model-FLOPs convention. Every expected value is written out as the
// per-layer arithmetic of Hugging Face's Llama/Mistral/Qwen2 modules:
//   layer = h*(nh*hd) + 2*h*(kv*hd) + (nh*hd)*h + 3*h*i + 2*h  (+ nh*hd + 2*kv*hd for Qwen2)
//   total = L*layer + V*h*(tied ? 1 : 2) + h
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "planner/model_spec.h"
#include "base/user_error.h"
#include "tests/planner/test_support.h"

namespace llmplan {
namespace {

using testing::ScratchDir;

struct Shape {
  int64_t h, i, nh, kv, hd, L, V;
  bool tied, qwen_bias;
};

// The formula, written independently of ModelSpec.
int64_t HandCount(const Shape& s) {
  int64_t layer = s.h * (s.nh * s.hd) + 2 * s.h * (s.kv * s.hd) + (s.nh * s.hd) * s.h + 3 * s.h * s.i + 2 * s.h;
  if (s.qwen_bias) layer += s.nh * s.hd + 2 * s.kv * s.hd;
  return s.L * layer + s.V * s.h * (s.tied ? 1 : 2) + s.h;
}

TEST(ModelSpecTest, PresetParameterCountsAreExact) {
  struct Case {
    const char* preset;
    Shape shape;
    int64_t published;
  };
  const Case cases[] = {
      {"llama3-8b", {4096, 14336, 32, 8, 128, 32, 128256, false, false}, 8'030'261'248},
      {"llama3-70b", {8192, 28672, 64, 8, 128, 80, 128256, false, false}, 70'553'706'496},
      {"llama3.2-1b", {2048, 8192, 32, 8, 64, 16, 128256, true, false}, 1'235'814'400},
      {"llama2-13b", {5120, 13824, 40, 40, 128, 40, 32000, false, false}, 13'015'864'320},
      {"mistral-7b", {4096, 14336, 32, 8, 128, 32, 32000, false, false}, 7'241'732'096},
      {"qwen2.5-7b", {3584, 18944, 28, 4, 128, 28, 152064, false, true}, 7'615'616'512},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.preset);
    // The hand formula reproduces the published figure...
    ASSERT_EQ(HandCount(c.shape), c.published);
    // ...and so does the preset.
    ModelSpec m = PresetModel(c.preset);
    EXPECT_EQ(m.TotalParams(), c.published);
    EXPECT_EQ(m.head_dim, c.shape.hd);
    EXPECT_EQ(m.tied_embeddings, c.shape.tied);
    EXPECT_EQ(m.qkv_bias, c.shape.qwen_bias);
  }
}

TEST(ModelSpecTest, Llama3_8bLayerArithmetic) {
  // One block: q 4096*4096 + k,v 2*4096*1024 + o 4096*4096 + MLP 3*4096*14336 + norms 2*4096.
  const int64_t block = 16'777'216 + 8'388'608 + 16'777'216 + 176'160'768 + 8'192;
  EXPECT_EQ(block, 218'112'000);
  ModelSpec m = PresetModel("llama3-8b");
  EXPECT_EQ(m.ParamsPerBlock(), block);
  EXPECT_EQ(m.EmbeddingParams(), 128256LL * 4096);  // 525,336,576
  EXPECT_EQ(m.HeadParams(), 128256LL * 4096);
  EXPECT_EQ(m.FinalNormParams(), 4096);
  EXPECT_EQ(32 * block + 2 * 525'336'576LL + 4096, 8'030'261'248LL);
}

std::string Config(const nlohmann::json& j) { return j.dump(2); }

TEST(ModelSpecTest, HfConfigLlama3_8b) {
  ScratchDir dir;
  nlohmann::json c = {{"architectures", {"LlamaForCausalLM"}},
                      {"hidden_size", 4096},
                      {"intermediate_size", 14336},
                      {"num_attention_heads", 32},
                      {"num_key_value_heads", 8},
                      {"num_hidden_layers", 32},
                      {"vocab_size", 128256},
                      {"tie_word_embeddings", false},
                      {"max_position_embeddings", 8192},
                      {"rope_theta", 500000.0},
                      {"rms_norm_eps", 1e-5},
                      {"torch_dtype", "bfloat16"}};
  ModelSpec m = LoadModelSpec(dir.Write("config.json", Config(c)));
  EXPECT_EQ(m.TotalParams(), 8'030'261'248);
  EXPECT_EQ(m.head_dim, 4096 / 32);
  EXPECT_EQ(m.max_seq, 8192);
  EXPECT_DOUBLE_EQ(m.rope_theta, 500000.0);
  // A directory holding config.json works too.
  EXPECT_EQ(LoadModelSpec(dir.path().string()).TotalParams(), 8'030'261'248);
}

TEST(ModelSpecTest, HfConfigOtherPresetsMatch) {
  ScratchDir dir;
  struct Case {
    const char* arch;
    Shape s;
    int64_t published;
  };
  const Case cases[] = {
      {"LlamaForCausalLM", {8192, 28672, 64, 8, 128, 80, 128256, false, false}, 70'553'706'496},
      {"LlamaForCausalLM", {2048, 8192, 32, 8, 64, 16, 128256, true, false}, 1'235'814'400},
      {"MistralForCausalLM", {4096, 14336, 32, 8, 128, 32, 32000, false, false}, 7'241'732'096},
  };
  int k = 0;
  for (const auto& c : cases) {
    nlohmann::json j = {{"architectures", {c.arch}},         {"hidden_size", c.s.h},
                        {"intermediate_size", c.s.i},        {"num_attention_heads", c.s.nh},
                        {"num_key_value_heads", c.s.kv},     {"num_hidden_layers", c.s.L},
                        {"vocab_size", c.s.V},               {"tie_word_embeddings", c.s.tied}};
    std::string file = std::to_string(k++);
    file += ".json";
    ModelSpec m = LoadModelSpec(dir.Write(file, Config(j)));
    EXPECT_EQ(m.TotalParams(), c.published) << c.arch;
  }
}

TEST(ModelSpecTest, HfConfigMistralNemoHeadDimWins) {
  // Mistral-Nemo: hidden 5120 but 32 heads x head_dim 128 = 4096.
  ScratchDir dir;
  nlohmann::json c = {{"architectures", {"MistralForCausalLM"}},
                      {"hidden_size", 5120},
                      {"intermediate_size", 14336},
                      {"num_attention_heads", 32},
                      {"num_key_value_heads", 8},
                      {"head_dim", 128},
                      {"num_hidden_layers", 40},
                      {"vocab_size", 131072},
                      {"tie_word_embeddings", false},
                      {"rope_theta", 1000000.0}};
  ModelSpec m = LoadModelSpec(dir.Write("config.json", Config(c)));
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.q_dim(), 4096);
  EXPECT_EQ(m.kv_dim(), 1024);
  // layer = 5120*4096 + 2*5120*1024 + 4096*5120 + 3*5120*14336 + 2*5120
  //       = 20,971,520 + 10,485,760 + 20,971,520 + 220,200,960 + 10,240 = 272,640,000
  const int64_t layer = 20'971'520 + 10'485'760 + 20'971'520 + 220'200'960 + 10'240;
  ASSERT_EQ(layer, 272'640'000);
  EXPECT_EQ(m.ParamsPerBlock(), layer);
  // total = 40*272,640,000 + 2*131072*5120 + 5120 = 12,247,782,400 (Mistral-Nemo-12B)
  EXPECT_EQ(m.TotalParams(), 40 * layer + 2 * 131072LL * 5120 + 5120);
  EXPECT_EQ(m.TotalParams(), 12'247'782'400);
  // If head_dim were ignored (5120/32 = 160) the count would differ.
  EXPECT_NE(m.TotalParams(), HandCount({5120, 14336, 32, 8, 160, 40, 131072, false, false}));
}

TEST(ModelSpecTest, HfConfigWithoutKvHeadsMeansMultiHead) {
  // Llama-2-13B's config has no num_key_value_heads: kv heads = heads = 40.
  ScratchDir dir;
  nlohmann::json c = {{"architectures", {"LlamaForCausalLM"}},
                      {"hidden_size", 5120},
                      {"intermediate_size", 13824},
                      {"num_attention_heads", 40},
                      {"num_hidden_layers", 40},
                      {"vocab_size", 32000},
                      {"max_position_embeddings", 4096}};
  ModelSpec m = LoadModelSpec(dir.Write("config.json", Config(c)));
  EXPECT_EQ(m.kv_heads, 40);
  // layer = 4*5120*5120 + 3*5120*13824 + 2*5120 = 104,857,600 + 212,336,640 + 10,240 = 317,204,480
  EXPECT_EQ(m.ParamsPerBlock(), 4 * 5120LL * 5120 + 3 * 5120LL * 13824 + 2 * 5120);
  EXPECT_EQ(m.TotalParams(), 40 * 317'204'480LL + 2 * 32000LL * 5120 + 5120);
  EXPECT_EQ(m.TotalParams(), 13'015'864'320);
}

TEST(ModelSpecTest, HfConfigQwen2HasQkvBiases) {
  ScratchDir dir;
  nlohmann::json c = {{"architectures", {"Qwen2ForCausalLM"}},
                      {"hidden_size", 3584},
                      {"intermediate_size", 18944},
                      {"num_attention_heads", 28},
                      {"num_key_value_heads", 4},
                      {"num_hidden_layers", 28},
                      {"vocab_size", 152064},
                      {"tie_word_embeddings", false},
                      {"rope_theta", 1000000.0},
                      {"rms_norm_eps", 1e-6},
                      {"use_sliding_window", false}};
  ModelSpec m = LoadModelSpec(dir.Write("config.json", Config(c)));
  EXPECT_TRUE(m.qkv_bias);
  // Biases: q 28*128 = 3584, k and v 2*4*128 = 1024 -> 4608 per layer.
  const int64_t no_bias = 3584LL * 3584 + 2 * 3584LL * 512 + 3584LL * 3584 + 3 * 3584LL * 18944 + 2 * 3584;
  EXPECT_EQ(m.ParamsPerBlock(), no_bias + 3584 + 1024);
  EXPECT_EQ(m.TotalParams(), 28 * (no_bias + 4608) + 2 * 152064LL * 3584 + 3584);
  EXPECT_EQ(m.TotalParams(), 7'615'616'512);
}

TEST(ModelSpecTest, ConfigRoundTripsThroughModelSpecToJson) {
  for (const std::string name : {"llama3.2-1b", "qwen2.5-7b", "mistral-7b"}) {
    ModelSpec a = PresetModel(name);
    ModelSpec b = ModelSpecFromHfConfig(ModelSpecToJson(a), name);
    EXPECT_EQ(a.TotalParams(), b.TotalParams()) << name;
    EXPECT_EQ(a.head_dim, b.head_dim) << name;
    EXPECT_EQ(a.tied_embeddings, b.tied_embeddings) << name;
    EXPECT_EQ(a.qkv_bias, b.qkv_bias) << name;
  }
}

TEST(ModelSpecTest, ModelFlopsPerTokenPaLM) {
  // llama3-8b, T = 8192: N excludes the (untied) input embedding.
  ModelSpec m = PresetModel("llama3-8b");
  const int64_t n = 8'030'261'248LL - 128256LL * 4096;  // 7,504,924,672
  EXPECT_EQ(m.NonEmbeddingParams(), n);
  // 6N = 45,029,548,032; 12*L*H*Q*T = 12*32*32*128*8192 = 12,884,901,888
  const double expected = 6.0 * 7'504'924'672.0 + 12.0 * 32 * 32 * 128 * 8192;
  EXPECT_DOUBLE_EQ(expected, 57'914'449'920.0);
  EXPECT_DOUBLE_EQ(m.ModelFlopsPerToken(8192), expected);

  // Tied (llama3.2-1b): the shared matrix counts, so N = all parameters.
  ModelSpec t = PresetModel("llama3.2-1b");
  EXPECT_EQ(t.NonEmbeddingParams(), 1'235'814'400);
  // 6*1,235,814,400 + 12*16*32*64*4096 = 7,414,886,400 + 1,610,612,736
  EXPECT_DOUBLE_EQ(t.ModelFlopsPerToken(4096), 7'414'886'400.0 + 1'610'612'736.0);

  // Mistral-Nemo-like: Q is head_dim (128), not hidden/heads (160).
  ModelSpec nemo = PresetModel("mistral-7b");
  nemo.hidden = 5120;
  nemo.head_dim = 128;
  nemo.layers = 40;
  nemo.vocab = 131072;
  EXPECT_DOUBLE_EQ(nemo.ModelFlopsPerToken(1024),
                   6.0 * static_cast<double>(nemo.TotalParams() - 131072LL * 5120) + 12.0 * 40 * 32 * 128 * 1024);
}

TEST(ModelSpecTest, BadConfigsThrowUserError) {
  auto parse = [](nlohmann::json j) { return ModelSpecFromHfConfig(j, "bad"); };
  nlohmann::json good = {{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 64},  {"intermediate_size", 128},
                         {"num_attention_heads", 4},              {"num_hidden_layers", 2}, {"vocab_size", 100}};
  EXPECT_NO_THROW(parse(good));
  auto with = [&](const char* key, nlohmann::json v) {
    nlohmann::json j = good;
    j[key] = v;
    return j;
  };
  EXPECT_THROW(parse(with("architectures", {"GPT2LMHeadModel"})), UserError);
  EXPECT_THROW(parse(with("hidden_size", -64)), UserError);
  EXPECT_THROW(parse(with("hidden_size", 1e308)), UserError);
  EXPECT_THROW(parse(with("hidden_size", "64")), UserError);
  EXPECT_THROW(parse(with("hidden_size", 64.5)), UserError);
  EXPECT_THROW(parse(with("num_key_value_heads", 3)), UserError);  // 4 % 3 != 0
  EXPECT_THROW(parse(with("tie_word_embeddings", "yes")), UserError);
  nlohmann::json missing = good;
  missing.erase("vocab_size");
  EXPECT_THROW(parse(missing), UserError);
  EXPECT_THROW(parse(nlohmann::json::array()), UserError);
  EXPECT_THROW(LoadModelSpec("no-such-model"), UserError);
}


TEST(ModelSpecTest, DimensionProductsCannotOverflow) {
  // Every field below 2^24 is not enough: hidden 2^24 x (heads 2^24 x head_dim 2^24) = 2^72.
  ModelSpec m = PresetModel("llama3-8b");
  m.hidden = m.intermediate = m.heads = m.kv_heads = m.head_dim = m.vocab = int64_t{1} << 24;
  m.layers = 4096;
  EXPECT_THROW(m.Validate(), UserError);
  // The largest shape still accepted has an exact, positive count:
  // h = i = V = q = 2^24 (1 head of 2^24), kv = 1, L = 4096:
  // layer = 2^48 (q) + 2*2^48 (k, v) + 2^48 (o) + 3*2^48 (MLP) + 2*2^24 = 7*2^48 + 2^25
  // total = 4096*layer + 2*2^48 + 2^24 = 7*2^60 + 2^37 + 2^49 + 2^24  (< 2^63)
  m.heads = m.kv_heads = 1;
  EXPECT_NO_THROW(m.Validate());
  const int64_t p48 = int64_t{1} << 48;
  EXPECT_EQ(m.ParamsPerBlock(), 7 * p48 + (int64_t{1} << 25));
  EXPECT_EQ(m.TotalParams(), 7 * (int64_t{1} << 60) + (int64_t{1} << 37) + (int64_t{1} << 49) + (int64_t{1} << 24));
  EXPECT_GT(m.TotalParams(), 0);
}

}  // namespace
}  // namespace llmplan
