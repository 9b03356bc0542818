// `llmplan run --kernel-trace` on a GPU (label gpu: the device machine only).
// A small Llama trains 3 steps on cuda:0 with step 2 traced: the trace must
// hold that step's kernels, timed by CUPTI, and its summary must find what a
// Llama step runs — GEMMs, attention, llmplan's fused block and loss kernels
// and its AdamW — with the device busy for most of the span.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "executor/checkpoint/remove_tree.h"
#include "executor/run/batch_source.h"
#include "executor/run/trainer.h"
#include "tests/executor/core_test_support.h"
#include "feedback/kernel_profile.h"

namespace llmplan::executor {
namespace {

class CountingBatches : public BatchSource {
 public:
  CountingBatches(int64_t micro_batch, int64_t seq_len, int64_t vocab)
      : micro_batch_(micro_batch), seq_len_(seq_len), vocab_(vocab) {}
  at::Tensor Next() override {
    at::Tensor t = at::arange(position_, position_ + micro_batch_ * (seq_len_ + 1), at::TensorOptions().dtype(at::kLong));
    position_ += micro_batch_;
    return t.remainder(vocab_).reshape({micro_batch_, seq_len_ + 1});
  }
  int64_t position() const override { return position_; }
  void Seek(int64_t next_sample) override { position_ = next_sample; }

 private:
  int64_t micro_batch_, seq_len_, vocab_, position_ = 0;
};

TEST(KernelTraceGpuTest, TracedStepHoldsTheStepsKernelsByClass) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("llmplan_kernel_trace_gpu_" + std::to_string(::getpid()));
  Plan plan;
  plan.model = PresetModel("llama3.2-1b");
  plan.model.layers = 2;  // two blocks: the same kernels, a small trace
  plan.profile = "h200-sxm";
  plan.gpus = 1;
  plan.strategy = ShardingStrategy::kNoShard;
  NormaliseGrouping(plan);
  plan.seq_len = 1024;
  plan.micro_batch = 2;
  plan.grad_accum = 1;
  plan.param_dtype = DType::kBF16;
  plan.Validate();
  TrainConfig config = testing::ConfigFor(plan);
  config.steps = 3;
  config.device = "cuda:0";
  config.run_dir = dir.string();
  config.final_weights = false;
  config.kernel_trace_step = 2;
  config.read_kernel_trace = WriteKernelProfile;  // as llmplan run sums it up
  CountingBatches data(plan.micro_batch, plan.seq_len, plan.model.vocab);
  Train(config, data);

  const KernelProfile p = SummarizeKernels(ReadDeviceEvents((dir / "kernel_trace.json").string()));
  std::ostringstream text;
  PrintKernelProfile(text, p, 20);
  std::printf("%s", text.str().c_str());
  EXPECT_GT(p.of(KernelClass::kGemm).count, 0) << text.str();
  EXPECT_GT(p.of(KernelClass::kAttention).count, 0) << text.str();
  EXPECT_GT(p.of(KernelClass::kBlockKernel).count, 0) << text.str();
  EXPECT_GT(p.of(KernelClass::kLossKernel).count, 0) << text.str();
  EXPECT_GT(p.of(KernelClass::kOptimizer).count, 0) << text.str();
  // GEMMs carry most of a Llama step's FLOPs.
  EXPECT_GT(p.of(KernelClass::kGemm).total_s, p.of(KernelClass::kOther).total_s) << text.str();
  EXPECT_GT(p.busy_s, 0.0);
  EXPECT_LE(p.busy_s, p.span_s + 1e-9);
  // One step: the span is that step's, not the run's (a second step would double it).
  std::ifstream metrics(dir / "metrics.jsonl");
  std::string line;
  double step2_s = 0;
  for (int i = 0; std::getline(metrics, line); ++i)
    if (i == 1) step2_s = nlohmann::json::parse(line)["step_s"].get<double>();
  EXPECT_LT(p.span_s, step2_s * 1.05) << "span " << p.span_s << " s, step 2 took " << step2_s << " s";
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(dir / "kernel_profile.json"));
  EXPECT_EQ(j["step"].get<int>(), 2);
  RemoveTree(dir.string());  // not std::filesystem::remove_all: see remove_tree.h
}

}  // namespace
}  // namespace llmplan::executor
