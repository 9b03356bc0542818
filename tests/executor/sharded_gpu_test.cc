// GPU checks of the sharded executor (label gpu; run on the device machine):
//   - the fused AdamW kernel (fused_adamw.cu) writes the bf16 copy the next
//     all-gather sends, equal to the cast of the updated master, and matches
//     the whole-buffer ATen form, on the float4 path and the scalar tail;
//   - a unit's fp32 gradient shard takes bf16 contributions (the widening
//     kernel, gradient_widen.cu) exactly as ATen's cast and add would;
//   - a unit whose AdamW reads the bf16 gradient itself (planner/
//     gradient_path.h) gets the same norm and the same update, bit for bit,
//     as one that widens it first, and keeps no fp32 gradient;
//   - releasing a unit's gathered copy really returns its bytes to the CUDA
//     caching allocator (FSDP's storage trick), and the parameters see the
//     bytes a later gather brings;
//   - optimizer offload pins exactly the host bytes the planner counts, and
//     gives them back when training ends;
//   - with 2 GPUs (skipped on one): full_shard over NCCL with fp32 compute,
//     2 ranks x 1 row, ends with the parameters of one GPU on 2 rows, and
//     offloading the optimizer does not change them.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/executor/gpu_test_support.h"

#include "executor/checkpoint/safetensors.h"
#include "executor/sharding/flat_unit.h"
#include "executor/hardware/host_memory.h"
#include "executor/optimizer/adamw.h"
#include "executor/torch_compat.h"
#include "executor/run/trainer.h"
#include "planner/step_program.h"
#include "tests/executor/core_test_support.h"

namespace llmplan::executor {
namespace {

namespace fs = std::filesystem;

const at::Device kCuda(at::kCUDA, 0);

class ShardedGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(ShardedGpuTest, FusedAdamWWritesTheBf16GatherCopy) {
  OptimizerConfig c;
  c.warmup_steps = 2;
  for (int64_t n : {int64_t{4096}, int64_t{4099}, int64_t{1} << 20}) {  // float4 only, float4 + tail, many blocks
    AdamW fused(c, {n}, kCuda, /*allow_fused=*/true), plain(c, {n}, kCuda, /*allow_fused=*/false);
    auto fp32 = at::TensorOptions().dtype(at::kFloat).device(kCuda);
    at::Tensor a = at::randn({n}, fp32), b = a.clone();
    at::Tensor copy = at::zeros({n}, fp32.dtype(at::kBFloat16));
    for (int step = 0; step < 4; ++step) {
      at::Tensor g = at::randn({n}, fp32);
      fused.Update(0, a, g, copy);
      fused.FinishStep();
      plain.Update(0, b, g);
      plain.FinishStep();
    }
    EXPECT_TRUE(at::allclose(a, b, 1e-5, 1e-6)) << n << ": " << (a - b).abs().max().item<double>();
    EXPECT_TRUE(at::equal(copy, a.to(at::kBFloat16))) << n;
  }
}

TEST_F(ShardedGpuTest, GradientShardTakesBf16ContributionsExactly) {
  // The step's first contribution writes the fp32 shard, later ones add
  // (gradient_widen.cu on CUDA): exactly what ATen's cast and fp32 add give,
  // on the 16-byte path, with a tail, and for a misaligned contribution
  // (which falls back to ATen). Poisoned first, so an element not written shows.
  for (int64_t n : {int64_t{4096}, int64_t{4101}, int64_t{3} << 20}) {
    std::vector<ParamShape> shapes = {{"w", {n}, ParamInit::kNormal}};
    FlatUnit unit(shapes, FlatUnitOptions{1, 0, at::kBFloat16, false}, kCuda);
    auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(kCuda);
    at::Tensor a = at::randn({n}, bf16), b = at::randn({n}, bf16);
    at::Tensor spare = at::randn({n + 1}, bf16);
    at::Tensor misaligned = spare.narrow(0, 1, n);  // 2 bytes past a 16-byte boundary
    unit.grad().fill_(std::nanf(""));
    unit.StartGradients();
    EXPECT_TRUE(unit.grad_stale());
    unit.AccumulateIntoGrad(a);
    EXPECT_FALSE(unit.grad_stale());
    EXPECT_TRUE(at::equal(unit.grad(), a.to(at::kFloat))) << n;
    unit.AccumulateIntoGrad(b);
    EXPECT_TRUE(at::equal(unit.grad(), a.to(at::kFloat) + b.to(at::kFloat))) << n;
    unit.AccumulateIntoGrad(misaligned);
    EXPECT_TRUE(at::equal(unit.grad(), a.to(at::kFloat) + b.to(at::kFloat) + misaligned.to(at::kFloat))) << n;
    unit.grad().fill_(std::nanf(""));
    unit.StartGradients();
    unit.AccumulateIntoGrad(misaligned);
    EXPECT_TRUE(at::equal(unit.grad(), misaligned.to(at::kFloat))) << n;
    // A scaled first contribution (a reduce-scatter's shard over 2 ranks).
    at::Tensor shard = at::randn({n}, bf16.dtype(at::kFloat));
    unit.StartGradients();
    unit.AccumulateIntoGrad(shard, 0.5);
    EXPECT_TRUE(at::equal(unit.grad(), shard * 0.5)) << n;
    // The last contribution's pass also sums the squares of the result (the
    // kernel), equal to a separate norm's up to the order of the additions;
    // a contribution ATen adds gives none (the caller takes the norm itself).
    at::Tensor square_sum;
    unit.StartGradients();
    unit.AccumulateIntoGrad(a);
    unit.AccumulateIntoGrad(b, 1.0, &square_sum);
    ASSERT_TRUE(square_sum.defined()) << n;
    const double want = unit.grad().to(at::kDouble).square().sum().item<double>();
    EXPECT_NEAR(square_sum.item<double>(), want, 1e-5 * want) << n;
    const double again = [&] {
      at::Tensor repeat;
      unit.StartGradients();
      unit.AccumulateIntoGrad(a);
      unit.AccumulateIntoGrad(b, 1.0, &repeat);
      return repeat.item<double>();
    }();
    EXPECT_EQ(again, square_sum.item<double>()) << n << ": the same bits on every run";
    unit.AccumulateIntoGrad(misaligned, 1.0, &square_sum);
    EXPECT_FALSE(square_sum.defined()) << n;
    // A sharded unit's reduce-scatter input: compute_grad widened to fp32
    // (the kernel), or kept bf16 (a copy), each equal to ATen's cast.
    unit.compute_grad().copy_(a);
    EXPECT_TRUE(at::equal(unit.ComputeGradIn(at::kFloat).narrow(0, 0, n), a.to(at::kFloat))) << n;
    EXPECT_TRUE(at::equal(unit.ComputeGradIn(at::kBFloat16), unit.compute_grad())) << n;
  }
}

// One GPU, one micro-batch: AdamW reads the bf16 gradient autograd wrote
// instead of an fp32 copy of it. Widening is exact and the norm's pass sums
// the same values in the same blocks, so two steps of each path end with the
// same master, m, v and compute copy bits; on the float4 path, with a tail,
// and with a clip scale, on both AdamW forms.
TEST_F(ShardedGpuTest, AdamWReadingTheBf16GradientUpdatesAsTheWidenedOne) {
  OptimizerConfig c;
  c.warmup_steps = 2;
  for (bool fused : {true, false}) {
    for (int64_t n : {int64_t{4096}, int64_t{4101}, int64_t{3} << 20}) {
      std::vector<ParamShape> shapes = {{"w", {n}, ParamInit::kNormal}};
      FlatUnitOptions widened{1, 0, at::kBFloat16, false}, direct = widened;
      widened.compute_resident = direct.compute_resident = true;  // AdamW writes the compute copy too
      direct.optimizer_reads_compute_grad = true;
      FlatUnit a(shapes, widened, kCuda), b(shapes, direct, kCuda);
      EXPECT_TRUE(a.grad().scalar_type() == at::kFloat && b.grad().scalar_type() == at::kBFloat16);
      const at::Tensor init = at::randn({n}, at::TensorOptions().dtype(at::kFloat));
      a.SetMasterFromFull(init);
      b.SetMasterFromFull(init);
      AdamW adam_a(c, {n}, kCuda, fused), adam_b(c, {n}, kCuda, fused);
      for (int step = 0; step < 2; ++step) {
        const at::Tensor g = at::randn({n}, at::TensorOptions().dtype(at::kBFloat16).device(kCuda));
        at::Tensor square_a, square_b;
        for (FlatUnit* u : {&a, &b}) {
          u->StartGradients();
          u->MaterializeComputeGrad();
          u->compute_grad().copy_(g);  // what autograd accumulated (const accessor: the storage is shared)
        }
        a.ReduceGradientsLocal(/*release=*/true, &square_a);
        b.ReduceGradientsLocal(/*release=*/true, &square_b);
        EXPECT_FALSE(a.compute_grad_materialized()) << "widened: released at its reduction";
        ASSERT_TRUE(b.compute_grad_materialized()) << "read by AdamW: kept until the update";
        ASSERT_TRUE(square_a.defined() && square_b.defined()) << n;
        EXPECT_EQ(square_a.item<double>(), square_b.item<double>()) << n << ": the same norm";
        const double clip = step == 0 ? 1.0 : 0.25;
        adam_a.Update(0, a.master(), a.grad(), a.compute_shard(), clip);
        adam_b.Update(0, b.master(), b.grad(), b.compute_shard(), clip);
        adam_a.FinishStep();
        adam_b.FinishStep();
        b.ReleaseComputeGrad();
      }
      EXPECT_TRUE(at::equal(a.master(), b.master())) << n << (fused ? " fused" : " ATen");
      EXPECT_TRUE(at::equal(adam_a.state().exp_avg[0], adam_b.state().exp_avg[0])) << n;
      EXPECT_TRUE(at::equal(adam_a.state().exp_avg_sq[0], adam_b.state().exp_avg_sq[0])) << n;
      EXPECT_TRUE(at::equal(a.compute(), b.compute())) << n;
    }
  }
}

#ifdef LLMPLAN_WITH_CUDA
int64_t AllocatedBytes() {
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
  return stats.allocated_bytes[0].current;
}

TEST_F(ShardedGpuTest, ReleasedComputeBufferReturnsItsBytes) {
  const int64_t n = 16 << 20;  // 32 MiB in bf16
  std::vector<ParamShape> shapes = {{"w", {n}, ParamInit::kNormal}};
  FlatUnit unit(shapes, FlatUnitOptions{1, 0, at::kBFloat16, false}, kCuda);
  unit.master().normal_();
  torch::cuda::synchronize();
  const int64_t before = AllocatedBytes();
  unit.ReleaseCompute();
  unit.ReleaseComputeGrad();
  torch::cuda::synchronize();
  EXPECT_EQ(before - AllocatedBytes(), 2 * 2 * n) << "compute and compute_grad (bf16) must go back";
  unit.GatherLocal();  // materialises compute again and fills it
  EXPECT_EQ(AllocatedBytes() - (before - 2 * 2 * n), 2 * n);
  EXPECT_TRUE(at::equal(unit.params()[0], unit.master().to(at::kBFloat16)));
}
#endif

// --- 2 GPUs: ranks as processes, as sharded_train_test.cc does on the CPU ---

Plan TwoGpuPlan(Offload offload) {
  Plan p = testing::TestPlan("tiny-qwen2", 1, 2, 64);  // fp32 compute: tight comparison
  p.gpus = 2;
  p.gpus_per_node = 2;
  p.strategy = ShardingStrategy::kFullShard;
  NormaliseGrouping(p);
  p.offload = offload;
  p.optimizer.lr = 1e-3;
  p.Validate();
  return p;
}

class RankRows : public BatchSource {
 public:
  RankRows(int64_t vocab, int64_t rows, int world, int rank) : vocab_(vocab), rows_(rows), world_(world), rank_(rank) {}
  at::Tensor Next() override {
    at::Tensor global = testing::RandomTokens(rows_ * world_, 64, vocab_, 2000 + calls_++);
    return global.narrow(0, rank_ * rows_, rows_).clone();
  }
  int64_t position() const override { return calls_ * rows_ * world_; }
  void Seek(int64_t next_sample) override { calls_ = next_sample / (rows_ * world_); }

 private:
  int64_t vocab_, rows_;
  int world_, rank_;
  int64_t calls_ = 0;
};

TrainConfig GpuConfig(const Plan& plan, const std::string& run_dir) {
  TrainConfig config = testing::ConfigFor(plan);
  config.steps = 3;
  config.run_dir = run_dir;
  config.device = "cuda";
  config.progress = false;
  return config;
}

TEST(ShardedGpuChild, Run) {
  const char* run_dir = std::getenv("LLMPLAN_SHARD_GPU_CHILD");
  if (run_dir == nullptr) GTEST_SKIP() << "runs only as a rank of a multi-GPU test";
  const Plan plan = TwoGpuPlan(std::getenv("LLMPLAN_SHARD_GPU_OFFLOAD") ? Offload::kOptimizer : Offload::kNone);
  RankRows data(plan.model.vocab, plan.micro_batch, 2, std::atoi(std::getenv("RANK")));
  Train(GpuConfig(plan, run_dir), data);
}

void RunTwoRanks(const fs::path& run_dir, bool offload) {
  const int port = 29000 + static_cast<int>(getpid() % 1000);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("LLMPLAN_SHARD_GPU_CHILD", run_dir.c_str(), 1);
      if (offload) setenv("LLMPLAN_SHARD_GPU_OFFLOAD", "1", 1);
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", "2", 1);
      setenv("LOCAL_WORLD_SIZE", "2", 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port + (offload ? 1 : 0)).c_str(), 1);
      setenv("NCCL_NVLS_ENABLE", "0", 1);
      execl("/proc/self/exe", "/proc/self/exe", "--gtest_filter=ShardedGpuChild.Run", static_cast<char*>(nullptr));
      _exit(127);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a rank failed";
  }
}

double MaxDifference(const fs::path& a, const fs::path& b) {
  auto x = checkpoint::ReadSafetensors(a.string()), y = checkpoint::ReadSafetensors(b.string());
  EXPECT_EQ(x.tensors.size(), y.tensors.size());
  double worst = 0;
  for (const auto& [name, t] : y.tensors) {
    if (!x.tensors.count(name)) {
      ADD_FAILURE() << name << " missing";
      continue;
    }
    worst = std::max(worst, (x.tensors[name] - t).abs().max().item<double>());
  }
  return worst;
}

TEST_F(ShardedGpuTest, OffloadPinsWhatThePlannerCounts) {
  // bf16 compute, so the staging copy is 2 bytes a parameter as in real runs.
  // Both staging forms: master 4 + AdamW 8 bytes a parameter, and gradient
  // staging 4 + bf16 staging 2 bytes per element of every unit's shard, or
  // of kOffloadStagingSlots slots the size of the largest.
  // The summary's peak is the process's (PeakPinnedHostBytes): slots, which
  // pin less, run first, so each run's peak is its own.
  double pinned_before = 0;
  for (OffloadStaging staging : {OffloadStaging::kSlots, OffloadStaging::kUnit}) {
    SCOPED_TRACE("offload_staging " + OffloadStagingName(staging));
    Plan plan = testing::TestPlan("tiny-llama", 2, 2, 64, DType::kBF16);
    plan.strategy = ShardingStrategy::kNoShard;
    NormaliseGrouping(plan);
    plan.offload = Offload::kOptimizer;
    plan.offload_staging = staging;
    plan.Validate();
    const HostMemory predicted = BuildStepProgram(plan, testing::CpuProfile()).host;
    ASSERT_GT(predicted.Total(), pinned_before);
    pinned_before = predicted.Total();
    ASSERT_EQ(PinnedHostBytes(), 0);
    RankRows data(plan.model.vocab, 2, 1, 0);
    TrainConfig config = GpuConfig(plan, "");
    config.device = "cuda:0";
    const RunSummary summary = Train(config, data);
    EXPECT_EQ(static_cast<double>(summary.peak_pinned_host_bytes), predicted.Total())
        << "master " << predicted.master_params << " + AdamW " << predicted.optimizer_state << " + gradient staging "
        << predicted.grad_staging << " + bf16 staging " << predicted.param_staging;
    EXPECT_GE(summary.peak_host_rss_bytes, summary.peak_pinned_host_bytes);
    EXPECT_EQ(PinnedHostBytes(), 0) << "pinned buffers outlived the run";
  }
}

TEST_F(ShardedGpuTest, TwoGpuFullShardEqualsOneGpu) {
  if (torch::cuda::device_count() < 2) GTEST_SKIP() << "needs 2 GPUs";
  const fs::path dir = fs::temp_directory_path() / ("llmplan_sharded_gpu_" + std::to_string(getpid()));
  llmplan::gpu_test::RemoveTree(dir);
  // One GPU on both rows of every micro-batch.
  Plan one = testing::TestPlan("tiny-qwen2", 2, 2, 64);
  one.optimizer.lr = 1e-3;
  RankRows all(one.model.vocab, 2, 1, 0);
  TrainConfig config = GpuConfig(one, (dir / "one").string());
  config.device = "cuda:0";
  Train(config, all);
  RunTwoRanks(dir / "two", false);
  RunTwoRanks(dir / "two_offload", true);
  const double sharded = MaxDifference(dir / "two" / "final.safetensors", dir / "one" / "final.safetensors");
  const double offloaded = MaxDifference(dir / "two_offload" / "final.safetensors", dir / "two" / "final.safetensors");
  std::printf("2-GPU full_shard vs 1 GPU: %.3g; offloaded vs not: %.3g\n", sharded, offloaded);
  EXPECT_LT(sharded, 2e-5);
  EXPECT_LT(offloaded, 5e-6);
  llmplan::gpu_test::RemoveTree(dir);
}

}  // namespace
}  // namespace llmplan::executor
