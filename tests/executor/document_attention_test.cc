// Attention kept inside documents (executor/model/attention_layout.h): a
// packed window of documents computes exactly what the documents compute as
// sequences of their own — the loss and every parameter's gradient, in fp64
// on the CPU — positions restarting at each document; the step interpreter
// trains such windows (recompute and evaluation included) and allocates for
// their layouts exactly what the planner's program says.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "executor/data/micro_batch.h"
#include "executor/model/attention_layout.h"
#include "executor/model/llama_model.h"
#include "planner/memory_timeline.h"
#include "tests/executor/core_test_support.h"

namespace llmplan::executor {
namespace {

using testing::Rig;
using testing::TestPlan;

// fp64 parameters of every unit, initialised as a run would, requiring grad.
std::vector<std::vector<at::Tensor>> DoubleParams(const LlamaModel& model) {
  std::vector<std::vector<at::Tensor>> units;
  for (int u = 0; u < model.num_units(); ++u) {
    std::vector<at::Tensor> params;
    for (const ParamShape& shape : model.unit_params(u))
      params.push_back(at::empty(shape.shape, at::TensorOptions().dtype(at::kDouble)));
    model.InitUnit(u, params, 11);
    for (at::Tensor& p : params) p.requires_grad_(true);
    units.push_back(std::move(params));
  }
  return units;
}

struct LossAndGrads {
  double loss = 0;
  at::Tensor grads;  // every parameter's gradient, concatenated
};

// The summed cross-entropy of `inputs` [B, T] against `targets` [B, T] and
// its gradients, attending as `layout` says.
LossAndGrads LossOf(const LlamaModel& model, std::vector<std::vector<at::Tensor>>& units, const at::Tensor& inputs,
                 const at::Tensor& targets, const AttentionLayout& layout) {
  for (auto& params : units)
    for (at::Tensor& p : params)
      if (p.grad().defined()) p.mutable_grad().zero_();
  at::Tensor x = model.EmbeddingForward(units.front(), inputs);
  for (int layer = 0; layer < model.spec().layers; ++layer)
    x = model.BlockForward(layer, units.at(model.block_unit(layer)), x, layout);
  const at::Tensor normed = model.FinalNorm(units.back(), x);
  const at::Tensor logits = normed.reshape({-1, normed.size(-1)}).matmul(model.OutputWeight(units.back(), units.front()).t());
  const at::Tensor loss = at::nll_loss(at::log_softmax(logits, -1), targets.reshape({-1}), {}, at::Reduction::Sum);
  loss.backward();
  LossAndGrads out;
  out.loss = loss.item<double>();
  std::vector<at::Tensor> grads;
  for (auto& params : units)
    for (at::Tensor& p : params) grads.push_back(p.grad().defined() ? p.grad().reshape({-1}).clone() : at::zeros_like(p).reshape({-1}));
  out.grads = at::cat(grads);
  return out;
}

TEST(DocumentSpansTest, PositionsPiecesAndLongestFollowTheStarts) {
  // Row 0: documents of 3 and 5 tokens; row 1: a document cut by the window's
  // start (2 tokens), then 1, then 5.
  at::Tensor starts = at::zeros({2, 8}, at::TensorOptions().dtype(at::kBool));
  starts[0][3] = true;
  starts[1][2] = true;
  starts[1][3] = true;
  const DocumentSpans spans = FindDocumentSpans(starts, /*pin=*/false);
  EXPECT_EQ(spans.pieces, 5);
  EXPECT_EQ(spans.longest_piece, 5);
  const int32_t* b = spans.host_buffer.data_ptr<int32_t>();
  const std::vector<int32_t> positions(b, b + 16), firsts(b + 16, b + 32), cu(b + 32, b + 38);
  EXPECT_EQ(positions, (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 3, 4, 0, 1, 0, 0, 1, 2, 3, 4}));
  EXPECT_EQ(firsts, (std::vector<int32_t>{0, 0, 0, 3, 3, 3, 3, 3, 0, 0, 2, 3, 3, 3, 3, 3}));
  EXPECT_EQ(cu, (std::vector<int32_t>{0, 3, 8, 10, 11, 16}));

  // The mask hides exactly the keys outside a query's document or after it.
  const RopeTable rope = LlamaModel(PresetModel("tiny-llama")).MakeRopeTable(8, at::kCPU, at::kFloat);
  const AttentionLayout layout = DocumentLayout(spans, rope, at::kCPU, /*masked=*/true);
  ASSERT_TRUE(layout.hidden.defined());
  EXPECT_EQ(layout.hidden.sizes(), (std::vector<int64_t>{2, 1, 8, 8}));
  for (int64_t row = 0; row < 2; ++row)
    for (int64_t i = 0; i < 8; ++i)
      for (int64_t j = 0; j < 8; ++j) {
        const bool visible = j <= i && j >= firsts[static_cast<size_t>(row * 8 + i)];
        EXPECT_EQ(layout.hidden[row][0][i][j].item<bool>(), !visible) << row << " " << i << " " << j;
      }
  // Each token's cos row is its position's.
  EXPECT_TRUE(at::equal(layout.rope.cos[12], rope.cos[1]));
  EXPECT_TRUE(at::equal(layout.rope.sin[15], rope.sin[4]));
}

// Two packed windows, rows of 5 + 7 and 3 + 4 + 5 tokens, against the five
// documents run on their own: the same summed loss and the same gradients.
TEST(DocumentAttentionTest, PackedDocumentsEqualDocumentsRunSeparatelyInFp64) {
  for (const char* preset : {"tiny-llama", "tiny-qwen2"}) {  // grouped-query heads; q/k/v biases and tied embeddings
    SCOPED_TRACE(preset);
    const LlamaModel model(PresetModel(preset), /*fused_kernels=*/false);
    auto units = DoubleParams(model);
    const int64_t t = 12, vocab = model.spec().vocab;
    const std::vector<std::vector<int64_t>> rows = {{5, 7}, {3, 4, 5}};
    at::Generator gen = at::detail::createCPUGenerator(3);
    const auto ids = at::TensorOptions().dtype(at::kLong);
    const at::Tensor inputs = at::randint(vocab, {2, t}, gen, ids);
    const at::Tensor targets = at::randint(vocab, {2, t}, gen, ids);
    at::Tensor starts = at::zeros({2, t}, at::TensorOptions().dtype(at::kBool));
    for (size_t r = 0; r < rows.size(); ++r) {
      int64_t at_token = 0;
      for (int64_t length : rows[r]) {
        starts[static_cast<int64_t>(r)][at_token] = true;
        at_token += length;
      }
    }
    const RopeTable rope = model.MakeRopeTable(t, at::kCPU, at::kDouble);
    const AttentionLayout packed_layout = DocumentLayout(FindDocumentSpans(starts, false), rope, at::kCPU, true);
    const LossAndGrads packed = LossOf(model, units, inputs, targets, packed_layout);

    double separate_loss = 0;
    at::Tensor separate_grads = at::zeros_like(packed.grads);
    for (size_t r = 0; r < rows.size(); ++r) {
      int64_t begin = 0;
      for (int64_t length : rows[r]) {
        const auto row = static_cast<int64_t>(r);
        const LossAndGrads one = LossOf(model, units, inputs[row].narrow(0, begin, length).unsqueeze(0),
                                     targets[row].narrow(0, begin, length).unsqueeze(0), WindowLayout(rope));
        separate_loss += one.loss;
        separate_grads += one.grads;
        begin += length;
      }
    }
    EXPECT_NEAR(packed.loss, separate_loss, 1e-10 * std::abs(separate_loss));
    const double scale = separate_grads.abs().max().item<double>();
    EXPECT_LT((packed.grads - separate_grads).abs().max().item<double>(), 1e-10 * scale);

    // And the test can fail: the same windows attending across documents.
    const LossAndGrads whole = LossOf(model, units, inputs, targets, WindowLayout(rope));
    EXPECT_GT(std::abs(whole.loss - separate_loss), 1e-3);
  }
}

// Sets `bit` on the tokens of `tokens` [B, T + 1] at `at`.
at::Tensor WithBits(at::Tensor tokens, const std::vector<std::pair<int64_t, int64_t>>& at, int64_t bit) {
  tokens = tokens.clone();
  for (const auto& [row, column] : at) tokens[row][column] = tokens[row][column].item<int64_t>() | bit;
  return tokens;
}

// Marks documents starting at `starts`.
at::Tensor WithStarts(const at::Tensor& tokens, const std::vector<std::pair<int64_t, int64_t>>& starts) {
  return WithBits(tokens, starts, kDocumentStart);
}

Plan DocumentPlan(Plan plan) {
  plan.attention = AttentionSpan::kDocuments;
  plan.Validate();
  return plan;
}

TEST(DocumentAttentionTest, OneDocumentPerRowTrainsAsTheWindow) {
  const Plan window = TestPlan("tiny-llama", 2, 1, 32);
  const at::Tensor tokens = testing::RandomTokens(2, 32, window.model.vocab, 5);
  Rig a(window), b(DocumentPlan(window));
  const StepResult ra = a.step.Run({tokens});
  const StepResult rb = b.step.Run({WithStarts(tokens, {{0, 0}, {1, 0}})});
  EXPECT_NEAR(ra.loss, rb.loss, 1e-6);
  EXPECT_TRUE(at::allclose(a.AllGrads(), b.AllGrads(), 1e-5, 1e-8));
}

// Predicting a document's first token from the document before it is no
// part of either: its loss counts for nothing, exactly as a masked target.
TEST(DocumentAttentionTest, ADocumentsFirstTokenIsNoTarget) {
  const Plan plan = DocumentPlan(TestPlan("tiny-llama", 2, 1, 32));
  const at::Tensor tokens = testing::RandomTokens(2, 32, plan.model.vocab, 12);
  Rig a(plan), b(plan);
  const StepResult ra = a.step.Run({WithStarts(tokens, {{0, 10}, {1, 21}})});
  const StepResult rb = b.step.Run({WithBits(WithStarts(tokens, {{0, 10}, {1, 21}}), {{0, 10}, {1, 21}}, kUntrainedTarget)});
  EXPECT_EQ(ra.loss, rb.loss);
  EXPECT_TRUE(at::equal(a.AllGrads(), b.AllGrads()));
}

TEST(DocumentAttentionTest, RecomputedBlocksAttendInsideDocumentsToo) {
  const Plan plain = DocumentPlan(TestPlan("tiny-llama", 2, 2, 32));
  Plan checkpointed = plain;
  checkpointed.checkpoint_layers = {0, 1, 2, 3};
  const at::Tensor tokens = WithStarts(testing::RandomTokens(2, 32, plain.model.vocab, 6), {{0, 9}, {0, 20}, {1, 3}});
  const at::Tensor more = WithStarts(testing::RandomTokens(2, 32, plain.model.vocab, 7), {{1, 30}});
  Rig a(plain), b(checkpointed);
  const StepResult ra = a.step.Run({tokens, more});
  const StepResult rb = b.step.Run({tokens, more});
  EXPECT_DOUBLE_EQ(ra.loss, rb.loss);
  EXPECT_TRUE(at::allclose(a.AllGrads(), b.AllGrads(), 1e-6, 1e-9));
  // The documents change what is computed.
  Rig c(TestPlan("tiny-llama", 2, 2, 32));
  EXPECT_GT(std::abs(c.step.Run({tokens.bitwise_and(kTokenIdMask), more.bitwise_and(kTokenIdMask)}).loss - ra.loss),
            1e-4);
}

TEST(DocumentAttentionTest, EvaluationAttendsInsideDocuments) {
  const Plan plan = DocumentPlan(TestPlan("tiny-llama", 2, 1, 32));
  const at::Tensor tokens = WithStarts(testing::RandomTokens(2, 32, plan.model.vocab, 8), {{0, 11}, {1, 5}});
  Rig a(plan), b(plan);
  const StepProgram evaluation = BuildEvaluationProgram(plan, testing::CpuProfile(), 1);
  const EvaluationResult evaluated = a.step.Evaluate(evaluation, {tokens});
  // The training step's loss on the same tokens, before its update.
  const StepResult trained = b.step.Run({tokens});
  EXPECT_NEAR(evaluated.loss, trained.loss, 1e-6);
}

// Every op's allocated bytes, documents minus window, against the programs'
// replayed memory, documents minus window: the layouts (buffer, per-token
// cos and sin, the mask) are allocated and freed where the planner says.
// LibTorch 1.13's CPU tensors are counted byte for byte (torch_compat.h).
TEST(DocumentAttentionTest, LayoutsAllocateWhatTheProgramPredicts) {
  const Plan window = TestPlan("tiny-llama", 2, 2, 32);
  const Plan documents = DocumentPlan(window);
  Rig a(window), b(documents);
  if (a.step.Run({testing::RandomTokens(2, 32, 512, 1), testing::RandomTokens(2, 32, 512, 2)})
          .measurement.memory_source != "cpu_tensor_bytes")
    GTEST_SKIP() << "this LibTorch counts no CPU tensor bytes";
  // The window run's targets at the document starts untrained too, so both
  // heads select the same rows (a document's first token is no target).
  at::Tensor t1 = testing::RandomTokens(2, 32, window.model.vocab, 3);
  at::Tensor t2 = testing::RandomTokens(2, 32, window.model.vocab, 4);
  const StepResult ra = a.step.Run({WithBits(t1, {{0, 7}}, kUntrainedTarget), WithBits(t2, {{1, 17}}, kUntrainedTarget)});
  b.step.Run({WithStarts(t1, {{0, 7}}), WithStarts(t2, {{1, 17}})});
  const StepResult rb = b.step.Run({WithStarts(t1, {{0, 7}}), WithStarts(t2, {{1, 17}})});
  const MemoryTimeline pa = ReplayMemory(a.step.program()), pb = ReplayMemory(b.step.program());
  ASSERT_EQ(pa.after_op.size(), pb.after_op.size());
  // The documents run holds a few host-side bytes all step long (the spans,
  // the ids without their bits): a constant, taken at the first op.
  const auto& ma = ra.measurement.ops;
  const auto& mb = rb.measurement.ops;
  const double offset = static_cast<double>(mb[0].allocated - ma[0].allocated) - (pb.after_op[0] - pa.after_op[0]);
  double worst = 0, largest = 0;
  for (size_t op = 0; op < ma.size(); ++op) {
    const double measured = static_cast<double>(mb[op].allocated - ma[op].allocated);
    const double predicted = pb.after_op[op] - pa.after_op[op];
    worst = std::max(worst, std::abs(measured - offset - predicted));
    largest = std::max(largest, std::abs(predicted));
  }
  EXPECT_GT(largest, 8192);  // the layouts are there to be counted
  EXPECT_LE(worst, 64) << "offset " << offset;
}

}  // namespace
}  // namespace llmplan::executor
