// The kernel summary of a traced step (feedback/kernel_profile.h): kernel
// names as the H200's libraries and llmplan's kernels spell them, a trace
// file in Kineto's form whose busy and idle time is known by construction,
// and traces that are not traces.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "base/user_error.h"
#include "feedback/kernel_profile.h"

namespace llmplan {
namespace {

TEST(KernelProfileTest, ClassifiesKernelsByWhatTheyCompute) {
  // Names seen in Kineto traces of LibTorch 2.11 / CUDA 13 on an H200, and llmplan's own.
  EXPECT_EQ(ClassifyKernel("nvjet_sm90_tst_256x128_64x4_2x1_v_bz_coopB_TNN", "kernel"), KernelClass::kGemm);
  EXPECT_EQ(ClassifyKernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64", "kernel"), KernelClass::kGemm);
  EXPECT_EQ(ClassifyKernel("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_nn_align8>(...)",
                           "kernel"),
            KernelClass::kGemm);
  // Attention is built from CUTLASS and wgmma pieces: it must not read as a GEMM.
  EXPECT_EQ(ClassifyKernel("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<...>)",
                           "kernel"),
            KernelClass::kAttention);
  EXPECT_EQ(ClassifyKernel("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128", "kernel"),
            KernelClass::kAttention);
  EXPECT_EQ(ClassifyKernel("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<...>", "kernel"),
            KernelClass::kAttention);
  EXPECT_EQ(ClassifyKernel("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "kernel"),
            KernelClass::kCollective);
  EXPECT_EQ(ClassifyKernel("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy"), KernelClass::kCopy);
  EXPECT_EQ(ClassifyKernel("Memset (Device)", "Memset"), KernelClass::kCopy);
  EXPECT_EQ(ClassifyKernel("void llmplan::executor::(anonymous namespace)::RmsNormForwardKernel<c10::BFloat16>(...)",
                           "kernel"),
            KernelClass::kBlockKernel);
  EXPECT_EQ(ClassifyKernel("void llmplan::executor::(anonymous namespace)::RopeKernel<c10::BFloat16>(...)", "kernel"),
            KernelClass::kBlockKernel);
  EXPECT_EQ(ClassifyKernel("void llmplan::executor::(anonymous namespace)::SwiGluBackwardKernel<c10::BFloat16>(...)",
                           "kernel"),
            KernelClass::kBlockKernel);
  EXPECT_EQ(ClassifyKernel("void llmplan::executor::(anonymous namespace)::CrossEntropyRowKernel<c10::BFloat16>(...)",
                           "kernel"),
            KernelClass::kLossKernel);
  EXPECT_EQ(ClassifyKernel("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>(...)",
                           "kernel"),
            KernelClass::kLossKernel);
  EXPECT_EQ(ClassifyKernel("void llmplan::executor::(anonymous namespace)::FusedAdamWKernel(float*, ...)", "kernel"),
            KernelClass::kOptimizer);
  EXPECT_EQ(ClassifyKernel("void at::native::multi_tensor_apply_kernel<...FusedAdamMathFunctor<float, 4>...>", "kernel"),
            KernelClass::kOptimizer);
  EXPECT_EQ(ClassifyKernel("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>",
                           "kernel"),
            KernelClass::kOther);
  EXPECT_EQ(ClassifyKernel("triton_poi_fused__to_copy_add_mul_0", "kernel"), KernelClass::kOther);
}

TEST(KernelProfileTest, BusyIsTheUnionOfEveryStreamsIntervals) {
  // Compute stream: [0, 10) and [12, 20) ms; a collective on another stream
  // [5, 15) overlaps both: busy [0, 20) = 20 ms; then a gap to a copy [30, 32).
  std::vector<DeviceEvent> events = {
      {"nvjet_gemm_a", "kernel", 7, 0.000, 0.010},   {"nvjet_gemm_a", "kernel", 7, 0.012, 0.008},
      {"ncclDevKernel_AllGather", "kernel", 20, 0.005, 0.010}, {"Memcpy DtoH", "gpu_memcpy", 21, 0.030, 0.002},
  };
  const KernelProfile p = SummarizeKernels(events);
  EXPECT_EQ(p.events, 4);
  EXPECT_EQ(p.streams, 3);
  EXPECT_NEAR(p.span_s, 0.032, 1e-12);
  EXPECT_NEAR(p.busy_s, 0.022, 1e-12);
  EXPECT_NEAR(p.idle_s(), 0.010, 1e-12);
  EXPECT_EQ(p.of(KernelClass::kGemm).count, 2);
  EXPECT_NEAR(p.of(KernelClass::kGemm).total_s, 0.018, 1e-12);
  EXPECT_NEAR(p.of(KernelClass::kCollective).total_s, 0.010, 1e-12);
  EXPECT_NEAR(p.of(KernelClass::kCopy).total_s, 0.002, 1e-12);
  ASSERT_EQ(p.kernels.size(), 3u);
  EXPECT_EQ(p.kernels[0].name, "nvjet_gemm_a");  // most total time first
  EXPECT_EQ(p.kernels[0].count, 2);
  EXPECT_EQ(p.kernels[2].name, "Memcpy DtoH");
  // The one gap, 10 ms: a wait, after the GEMM that ends the busy run (the
  // collective ends first), before the copy.
  EXPECT_EQ(p.turnaround_gaps, 0);
  EXPECT_EQ(p.wait_gaps, 1);
  EXPECT_NEAR(p.wait_idle_s, 0.010, 1e-12);
  ASSERT_EQ(p.longest_gaps.size(), 1u);
  EXPECT_NEAR(p.longest_gaps[0].start_s - p.start_s, 0.020, 1e-12);
  EXPECT_EQ(p.longest_gaps[0].before, "nvjet_gemm_a");
  EXPECT_EQ(p.longest_gaps[0].after, "Memcpy DtoH");
}

TEST(KernelProfileTest, IdleSplitsIntoKernelTurnaroundAndWaits) {
  // 30 kernels back to back, 3 us apart, then a 500 us wait, then 12 more
  // kernels with 25 us gaps (just over the turnaround bound), on one stream.
  std::vector<DeviceEvent> events;
  double t = 0;
  for (int i = 0; i < 30; ++i, t += 100e-6 + 3e-6) events.push_back({"k" + std::to_string(i), "kernel", 7, t, 100e-6});
  t += 500e-6 - 3e-6;
  for (int i = 0; i < 12; ++i, t += 100e-6 + 25e-6) events.push_back({"late", "kernel", 7, t, 100e-6});
  std::reverse(events.begin(), events.end());  // any order
  const KernelProfile p = SummarizeKernels(events);
  EXPECT_EQ(p.turnaround_gaps, 29);
  EXPECT_NEAR(p.turnaround_idle_s, 29 * 3e-6, 1e-12);
  EXPECT_EQ(p.wait_gaps, 12);
  EXPECT_NEAR(p.wait_idle_s, 500e-6 + 11 * 25e-6, 1e-12);
  EXPECT_NEAR(p.idle_s(), p.turnaround_idle_s + p.wait_idle_s, 1e-12);
  ASSERT_EQ(p.longest_gaps.size(), static_cast<size_t>(kMaxGapsKept));
  EXPECT_NEAR(p.longest_gaps[0].duration_s, 500e-6, 1e-12);
  EXPECT_EQ(p.longest_gaps[0].before, "k29");
  EXPECT_EQ(p.longest_gaps[0].after, "late");
  EXPECT_NEAR(p.longest_gaps[1].duration_s, 25e-6, 1e-12);
  const nlohmann::json j = KernelProfileJson(p, 3);
  EXPECT_EQ(j["idle"]["wait_gaps"], 12);
  EXPECT_EQ(j["idle"]["longest"].size(), static_cast<size_t>(kMaxGapsKept));
  std::ostringstream text;
  PrintKernelProfile(text, p, 3);
  EXPECT_NE(text.str().find("in 29 gaps of <= 20 us"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("after k29, before late"), std::string::npos) << text.str();
}

class KernelTraceFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("llmplan_kernel_profile_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  std::filesystem::path dir_;
};

TEST_F(KernelTraceFileTest, ReadsKinetoTracesDeviceEventsOnly) {
  // Kineto's layout: host ops, runtime calls and flow arrows beside the
  // device's kernels and copies; timestamps in microseconds (one as a string).
  nlohmann::json trace = {{"schemaVersion", 1}, {"traceEvents", nlohmann::json::array()}};
  auto& ev = trace["traceEvents"];
  ev.push_back({{"ph", "X"}, {"cat", "cpu_op"}, {"name", "aten::mm"}, {"ts", 100.0}, {"dur", 50.0}, {"pid", 1}, {"tid", 1}});
  ev.push_back({{"ph", "X"}, {"cat", "cuda_runtime"}, {"name", "cudaLaunchKernel"}, {"ts", 101.0}, {"dur", 3.0}});
  ev.push_back({{"ph", "X"}, {"cat", "kernel"}, {"name", "nvjet_tst_gemm"}, {"ts", 1000.0}, {"dur", 250.0},
                {"pid", 0}, {"tid", 7}, {"args", {{"device", 0}, {"stream", 7}}}});
  ev.push_back({{"ph", "X"}, {"cat", "kernel"}, {"name", "cudnn_sdpa_flash_fprop"}, {"ts", "1300.5"}, {"dur", 100.0},
                {"pid", 0}, {"tid", 7}, {"args", {{"stream", 7}}}});
  ev.push_back({{"ph", "X"}, {"cat", "gpu_memcpy"}, {"name", "Memcpy HtoD (Pinned -> Device)"}, {"ts", 1100.0},
                {"dur", 400.0}, {"pid", 0}, {"tid", 13}});
  ev.push_back({{"ph", "s"}, {"cat", "ac2g"}, {"name", "flow"}, {"ts", 101.0}, {"id", 5}});
  const std::string path = Write("trace.json", trace.dump());

  const std::vector<DeviceEvent> events = ReadDeviceEvents(path);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].stream, 7);
  EXPECT_EQ(events[2].stream, 13);  // no args.stream: the track
  EXPECT_NEAR(events[1].start_s, 1300.5e-6, 1e-12);
  const KernelProfile p = SummarizeKernels(events);
  // [1000, 1250) + [1100, 1500) + [1300.5, 1400.5): busy [1000, 1500) = 500 us of a 500 us span.
  EXPECT_NEAR(p.span_s, 500e-6, 1e-12);
  EXPECT_NEAR(p.busy_s, 500e-6, 1e-12);
  EXPECT_NEAR(p.of(KernelClass::kAttention).total_s, 100e-6, 1e-12);

  std::ostringstream text;
  PrintKernelProfile(text, p, 5);
  EXPECT_NE(text.str().find("attention"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("idle 0.00 ms"), std::string::npos) << text.str();
  const nlohmann::json j = KernelProfileJson(p, 2);
  EXPECT_EQ(j["kernels"].size(), 2u);
  EXPECT_NEAR(j["classes"]["gemm"]["total_s"].get<double>(), 250e-6, 1e-12);
}

TEST_F(KernelTraceFileTest, WhatIsNotATraceIsAOneLineUserError) {
  EXPECT_THROW(ReadDeviceEvents(Write("plan.json", R"({"strategy": "full_shard"})")), UserError);
  EXPECT_THROW(ReadDeviceEvents(Write("broken.json", R"({"traceEvents": [)")), UserError);
  EXPECT_THROW(ReadDeviceEvents((dir_ / "missing.json").string()), UserError);
  EXPECT_THROW(ReadDeviceEvents(Write("nots.json", R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k"}]})")),
               UserError);
  EXPECT_THROW(ReadDeviceEvents(Write("negative.json",
                                      R"({"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1, "dur": -5}]})")),
               UserError);
  try {
    ReadDeviceEvents(Write("plan2.json", "[]"));  // an empty trace is a trace: no events
  } catch (const UserError& e) {
    FAIL() << e.what();
  }
}

}  // namespace
}  // namespace llmplan
