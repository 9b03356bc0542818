// LlamaModel: exact parameter counts against the planner, Hugging Face names,
// causal attention, and unit-by-unit gradients equal to one monolithic
// autograd graph (tied embeddings and Qwen2 biases included).
#include <set>

#include <gtest/gtest.h>

#include "executor/model/chunked_cross_entropy.h"
#include "tests/executor/core_test_support.h"

namespace llmplan::executor {
namespace {

using testing::Rig;
using testing::TestPlan;

TEST(LlamaModelTest, ParameterCountEqualsPlannerForEveryPreset) {
  // The model allocates nothing, so even llama3.1-405b is counted from shapes.
  for (const std::string& name : PresetModelNames()) {
    ModelSpec spec = PresetModel(name);
    LlamaModel model(spec);
    EXPECT_EQ(model.TotalNumel(), spec.TotalParams()) << name;
    EXPECT_EQ(model.UnitNumel(model.embedding_unit()), spec.EmbeddingParams()) << name;
    EXPECT_EQ(model.UnitNumel(model.block_unit(0)), spec.ParamsPerBlock()) << name;
    EXPECT_EQ(model.UnitNumel(model.head_unit()), spec.HeadParams() + spec.FinalNormParams()) << name;
  }
  EXPECT_EQ(LlamaModel(PresetModel("llama3-8b")).TotalNumel(), 8030261248);
  EXPECT_EQ(LlamaModel(PresetModel("qwen2.5-7b")).TotalNumel(), 7615616512);
  EXPECT_EQ(LlamaModel(PresetModel("llama3.2-1b")).TotalNumel(), 1235814400);
}

TEST(LlamaModelTest, AllocatedFlatUnitsHoldExactlyThePlannersCount) {
  for (const char* name : {"tiny-llama", "tiny-qwen2", "small-llama"}) {
    ModelSpec spec = PresetModel(name);
    LlamaModel model(spec);
    auto units = MakeFlatUnits(model, at::Device(at::kCPU), at::kFloat, 1);
    int64_t allocated = 0;
    for (const auto& u : units)
      for (const auto& p : u.params()) allocated += p.numel();
    EXPECT_EQ(allocated, spec.TotalParams()) << name;
  }
}

TEST(LlamaModelTest, HuggingFaceNamesTiedAndBiased) {
  LlamaModel qwen(PresetModel("tiny-qwen2"));  // tied + q/k/v biases
  std::set<std::string> names;
  for (int u = 0; u < qwen.num_units(); ++u)
    for (const auto& p : qwen.unit_params(u)) EXPECT_TRUE(names.insert(p.name).second) << "duplicate " << p.name;
  for (const char* n : {"model.embed_tokens.weight", "model.norm.weight", "model.layers.0.input_layernorm.weight",
                        "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.q_proj.bias",
                        "model.layers.0.self_attn.k_proj.bias", "model.layers.0.self_attn.v_proj.bias",
                        "model.layers.2.self_attn.o_proj.weight", "model.layers.2.post_attention_layernorm.weight",
                        "model.layers.2.mlp.gate_proj.weight", "model.layers.2.mlp.up_proj.weight",
                        "model.layers.2.mlp.down_proj.weight"})
    EXPECT_TRUE(names.count(n)) << n;
  EXPECT_FALSE(names.count("lm_head.weight"));  // tied
  EXPECT_FALSE(names.count("model.layers.0.self_attn.o_proj.bias"));

  LlamaModel llama(PresetModel("tiny-llama"));
  const auto& head = llama.unit_params(llama.head_unit());
  ASSERT_EQ(head.size(), 2u);
  EXPECT_EQ(head[1].name, "lm_head.weight");
  EXPECT_EQ(head[1].shape, (std::vector<int64_t>{512, 64}));
  for (const auto& p : llama.unit_params(1)) EXPECT_EQ(p.name.find(".bias"), std::string::npos) << p.name;
  const auto& k = llama.unit_params(1)[2];
  EXPECT_EQ(k.name, "model.layers.0.self_attn.k_proj.weight");
  EXPECT_EQ(k.shape, (std::vector<int64_t>{2 * 16, 64}));  // kv_heads * head_dim x hidden
}

TEST(LlamaModelTest, BlockIsCausal) {
  LlamaModel model(PresetModel("tiny-llama"));
  auto units = MakeFlatUnits(model, at::Device(at::kCPU), at::kFloat, 3);
  RopeTable rope = model.MakeRopeTable(16, at::Device(at::kCPU), at::kFloat);
  at::NoGradGuard no_grad;
  at::Tensor x = at::randn({2, 16, 64});
  at::Tensor y = model.BlockForward(0, units[1].params(), x, rope);
  at::Tensor x2 = x.clone();
  x2.narrow(1, 10, 6).add_(1.0);  // change positions 10..15 only
  at::Tensor y2 = model.BlockForward(0, units[1].params(), x2, rope);
  EXPECT_TRUE(at::allclose(y.narrow(1, 0, 10), y2.narrow(1, 0, 10), 1e-6, 1e-6));
  EXPECT_FALSE(at::allclose(y.narrow(1, 10, 6), y2.narrow(1, 10, 6), 1e-3, 1e-3));
}

TEST(LlamaModelTest, RopeTableUsesRotateHalfLayoutAndTheta) {
  LlamaModel model(PresetModel("tiny-llama"));  // head_dim 16, theta 1e4
  RopeTable rope = model.MakeRopeTable(8, at::Device(at::kCPU), at::kFloat);
  ASSERT_EQ(rope.cos.sizes(), (std::vector<int64_t>{8, 16}));
  // Position 5, frequency j = 3: angle 5 * 10000^(-6/16), repeated in both halves.
  const double angle = 5.0 * std::pow(10000.0, -6.0 / 16.0);
  EXPECT_NEAR(rope.cos[5][3].item<double>(), std::cos(angle), 1e-6);
  EXPECT_NEAR(rope.cos[5][3 + 8].item<double>(), std::cos(angle), 1e-6);
  EXPECT_NEAR(rope.sin[5][3 + 8].item<double>(), std::sin(angle), 1e-6);
}

// The interpreter's unit-by-unit forward/backward must give the gradients of
// one ordinary autograd graph over the whole model with the plain loss.
void ExpectUnitGradientsEqualMonolithic(const std::string& preset) {
  Plan plan = TestPlan(preset, 2, 1, 24);
  plan.optimizer.grad_clip = 0;
  Rig rig(plan);
  // Reference leaves: copies of the initial fp32 parameters.
  std::vector<std::vector<at::Tensor>> ref;
  for (auto& u : rig.units) {
    std::vector<at::Tensor> leaves;
    for (auto& v : u.MasterViews()) leaves.push_back(v.clone().requires_grad_(true));
    ref.push_back(leaves);
  }
  at::Tensor tokens = testing::RandomTokens(2, 24, plan.model.vocab, 11);
  rig.step.Run({tokens});

  const LlamaModel& m = rig.model;
  RopeTable rope = m.MakeRopeTable(24, at::Device(at::kCPU), at::kFloat);
  at::Tensor x = m.EmbeddingForward(ref[0], tokens.narrow(1, 0, 24));
  for (int l = 0; l < plan.model.layers; ++l) x = m.BlockForward(l, ref[m.block_unit(l)], x, rope);
  at::Tensor normed = m.FinalNorm(ref[m.head_unit()], x);
  at::Tensor loss = PlainCrossEntropy(normed.reshape({-1, plan.model.hidden}), m.OutputWeight(ref.back(), ref[0]),
                                      tokens.narrow(1, 1, 24).reshape({-1}));
  loss.backward();
  for (size_t u = 0; u < ref.size(); ++u) {
    int64_t offset = 0;
    for (size_t i = 0; i < ref[u].size(); ++i) {
      at::Tensor got = rig.units[u].grad().narrow(0, offset, ref[u][i].numel()).view(ref[u][i].sizes());
      EXPECT_TRUE(at::allclose(got, ref[u][i].grad(), 1e-4, 1e-6))
          << preset << " " << m.unit_params(u)[i].name << " max diff "
          << (got - ref[u][i].grad()).abs().max().item<double>();
      offset += ref[u][i].numel();
    }
  }
}

TEST(LlamaModelTest, UnitByUnitGradientsEqualMonolithicUntied) { ExpectUnitGradientsEqualMonolithic("tiny-llama"); }
TEST(LlamaModelTest, UnitByUnitGradientsEqualMonolithicTiedWithBias) {
  ExpectUnitGradientsEqualMonolithic("tiny-qwen2");
}

}  // namespace
}  // namespace llmplan::executor
