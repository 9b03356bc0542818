// CUDA out of memory (label gpu: runs on the device machine only). A plan that
// cannot fit one GPU — Llama-3.2-1B, seq 8192, micro-batch 32, nothing
// checkpointed: about 200 GiB of activations against an H200's 139 GiB — is
// trained anyway: the caching allocator's failure must come out of Train as
// one UserError line naming the op, the memory measured when it failed, the
// plan's predicted peak and an `llmplan estimate` that would fit, not as
// LibTorch's backtrace.
#include <cstdio>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "executor/run/trainer.h"
#include "tests/executor/core_test_support.h"
#include "base/user_error.h"
#include "executor/run/batch_source.h"
#include "executor/torch_compat.h"

namespace llmplan::executor {
namespace {

// Rows of token 1: what the model reads does not matter, only the shapes.
class OnesBatches : public BatchSource {
 public:
  OnesBatches(int64_t micro_batch, int64_t seq_len) : micro_batch_(micro_batch), seq_len_(seq_len) {}
  at::Tensor Next() override {
    position_ += micro_batch_;
    return at::ones({micro_batch_, seq_len_ + 1}, at::TensorOptions().dtype(at::kLong));
  }
  int64_t position() const override { return position_; }
  void Seek(int64_t next_sample) { position_ = next_sample; }  // (override where BatchSource has it)

 private:
  int64_t micro_batch_, seq_len_, position_ = 0;
};

TEST(OutOfMemoryGpuTest, PlanThatCannotFitFailsInOneLineNamingTheOpAndAPlanThatFits) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Plan plan;
  plan.model = PresetModel("llama3.2-1b");
  plan.profile = "h200-sxm";
  plan.gpus = 1;
  plan.strategy = ShardingStrategy::kNoShard;
  NormaliseGrouping(plan);
  plan.seq_len = 8192;
  plan.micro_batch = 32;
  plan.grad_accum = 1;
  plan.param_dtype = DType::kBF16;
  plan.Validate();
  TrainConfig config = testing::ConfigFor(plan);
  config.steps = 1;
  config.device = "cuda:0";
  config.progress = false;
  OnesBatches data(plan.micro_batch, plan.seq_len);
  try {
    Train(config, data);
    FAIL() << "expected the plan not to fit";
  } catch (const UserError& e) {
    const std::string m = e.what();
    std::printf("%s\n", m.c_str());
    EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: " << m;
    EXPECT_EQ(m.rfind("rank 0: out of memory on cuda:0 in op ", 0), 0u) << m;
    EXPECT_NE(m.find("forward"), std::string::npos) << "activations overflow in a forward: " << m;
    EXPECT_NE(m.find(" GiB allocated, "), std::string::npos) << m;
    EXPECT_NE(m.find(" GiB reserved when it failed; the plan predicts a peak of "), std::string::npos) << m;
    EXPECT_NE(m.find("plan again with the same pins and a smaller micro-batch: llmplan estimate --model llama3.2-1b "
                     "--gpus 1 --gpu h200-sxm --seq 8192 --global-batch 32 --strategy no_shard --micro-batch 16"),
              std::string::npos)
        << m;
    EXPECT_EQ(m.find("frame #"), std::string::npos) << m;
  }
  // The failed step's blocks are free but still cached by this process: give
  // them back, or the next test's `llmplan profile` child cannot even create
  // its CUDA context (cudaSetDevice out of memory).
  compat::ReleaseCachedMemory(at::Device("cuda:0"));
}

}  // namespace
}  // namespace llmplan::executor
