// The pure parts of `llmplan profile`: the GEMM fit recovers known
// efficiencies, a profile assembled from measurements loads and holds the
// measured numbers (and says what came from the base), the shapes are the
// models', the progress lines say what runs and how long is left.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "executor/profile/cpu_adamw_rate.h"
#include "executor/profile/gemm_fit.h"
#include "executor/profile/profile_assembly.h"
#include "executor/profile/profile_shapes.h"
#include "executor/profile/progress.h"
#include "planner/hardware_profile.h"
#include "base/user_error.h"

namespace llmplan::executor {
namespace {

HardwareProfile Builtin(const std::string& name) {
  return LoadHardwareProfile(std::string(LLMPLAN_SOURCE_DIR) + "/profiles/" + name + ".json");
}

// Rates exactly on the cost model's curve: the fit must give back its parameters.
TEST(GemmFitTest, RecoversEfficiencyAndHalfDimensionFromTheCostModelsCurve) {
  HardwareProfile p = Builtin("h200-sxm");
  p.gemm_max_efficiency = 0.71;
  p.gemm_half_efficiency_dim = 417;
  std::vector<GemmSample> samples;
  for (double d : {64.0, 256.0, 512.0, 1024.0, 4096.0, 14336.0}) samples.push_back({d, p.GemmFlopsPerSecond(d, 2 * d, 3 * d)});
  const GemmEfficiencyFit fit = FitGemmEfficiency(samples, p.bf16_peak_flops);
  EXPECT_NEAR(fit.max_efficiency, 0.71, 1e-9);
  EXPECT_NEAR(fit.half_efficiency_dim, 417, 1e-6);
  EXPECT_LT(fit.rms_relative_error, 1e-9);
}

TEST(GemmFitTest, LeastSquaresThroughNoisyPointsFromKnownLine) {
  // 1/rate = a + b/d with a, b known, each time measured 2% long and 2% short
  // at every d: the fit stays within a fraction of the noise of the line.
  const double peak = 1e15, a = 1 / (peak * 0.8), b = 300 * a;
  std::vector<GemmSample> samples;
  for (double d : {128.0, 512.0, 2048.0, 8192.0}) {
    for (double noise : {1.02, 0.98}) samples.push_back({d, 1 / ((a + b / d) * noise)});
  }
  const GemmEfficiencyFit fit = FitGemmEfficiency(samples, peak);
  EXPECT_NEAR(fit.max_efficiency, 0.8, 0.8 * 1e-3);
  EXPECT_NEAR(fit.half_efficiency_dim, 300, 300 * 2e-3);
  EXPECT_NEAR(fit.rms_relative_error, 0.02, 0.001);
}

TEST(GemmFitTest, RatesThatDoNotFallWithSizeGiveAFlatRate) {
  // Thin GEMMs measured faster than thick ones: no dimension term to fit.
  const std::vector<GemmSample> samples = {{128, 2e14}, {4096, 1e14}};
  const GemmEfficiencyFit fit = FitGemmEfficiency(samples, 1e15);
  EXPECT_EQ(fit.half_efficiency_dim, 0);
  // The weighted mean of 1/rate, weights rate^2: (4 / 2e14 + 1 / 1e14) / 5.
  EXPECT_NEAR(fit.max_efficiency, 1 / (1e15 * (4 / 2e14 + 1 / 1e14) / 5), 1e-12);
  EXPECT_THROW(FitGemmEfficiency({}, 1e15), std::invalid_argument);
  EXPECT_THROW(FitGemmEfficiency({{0, 1e12}}, 1e15), std::invalid_argument);
}

// Two H200s' worth of measurements, made up but shaped like real ones.
ProfileMeasurements TwoGpuMeasurements() {
  ProfileMeasurements m;
  m.machine = {"cuda", "NVIDIA H200", 2, "580.65.06", "13.0", "2.28.9", "2.11.0", "llmplan 0.1.0 (git abc)",
               "gpuhost", 32, 256.0 * (1 << 30), 0, "", "2026-12-01T10:00:00Z"};
  HardwareProfile truth = Builtin("h200-sxm");
  truth.gemm_max_efficiency = 0.8;
  truth.gemm_half_efficiency_dim = 250;
  for (const GemmShape& s : ProfileGemmShapes(/*cuda=*/true, /*quick=*/true)) {
    GemmMeasurement g{s, "bf16", 0};
    g.seconds = s.Flops() / truth.GemmFlopsPerSecond(s.tokens, s.in, s.out);
    if (!s.in_fit) g.seconds *= 10;  // reference rows must not move the fit
    g.sustained_seconds = 1.25 * g.seconds;  // back to back at the power limit: the fit must not read it
    m.gemms.push_back(g);
  }
  for (const AttentionShape& s : ProfileAttentionShapes(true, true)) {
    // forward 500 TFLOP/s, backward 250 TFLOP/s
    m.attention.push_back({s, "bf16", "cudnn", s.ForwardFlops() / 500e12,
                           s.ForwardFlops() / 500e12 + s.BackwardFlops() / 250e12});
  }
  m.copy = {"copy_ of 1024 MiB", 2.0 * (1 << 30), 2.0 * (1 << 30) / 4e12};
  m.add = {"add of 3 x 64 MiB", 3.0 * (64 << 20), 3.0 * (64 << 20) / 3e12};
  m.launch = {2000, 5e-6, 2e-6};
  m.host_copies = HostCopyMeasurement{1 << 30, (1 << 30) / 50e9, (1 << 30) / 40e9, (1 << 30) / 48e9, (1 << 30) / 39e9};
  CollectiveMeasurement c;
  c.group_size = 2;
  for (double bytes : {1 << 20, 16 << 20, 256 << 20}) {
    c.all_gather.emplace_back(bytes, 20e-6 + bytes / 250e9);
    c.reduce_scatter.emplace_back(bytes, 21e-6 + bytes / 240e9);
    c.all_reduce.emplace_back(bytes, 25e-6 + bytes / 160e9);
  }
  c.communicator_bytes = 300 << 20;
  m.collectives.push_back(c);
  m.cpu_adamw = {64 << 20, 32, (64 << 20) / 3e9, 2, 32 << 20, (32 << 20) / 1.6e9};
  m.fixed_memory = FixedMemoryMeasurement{150e9, 0.6e9, 12e9, 11e9, 64 << 20};
  // Collectives beside the block's GEMMs 1.2x-1.9x their time alone (median
  // of the six: 1.45); the GEMMs beside all-gathers 1.25x theirs.
  ContentionMeasurement contention;
  contention.group_size = 2;
  contention.block_gemms = ContentionBlockGemms();
  contention.gemm_loop_alone_s = 5e-3;
  contention.gemm_loop_beside_gathers_s = 6.25e-3;
  contention.gather_bytes = 256 << 20;
  const std::vector<std::pair<std::string, double>> ratios = {{"all_gather", 1.3}, {"all_gather", 1.5},
                                                              {"reduce_scatter", 1.6}, {"reduce_scatter", 1.9},
                                                              {"all_reduce", 1.2}, {"all_reduce", 1.4}};
  for (size_t i = 0; i < ratios.size(); ++i) {
    const double bytes = i % 2 ? 1 << 30 : 64 << 20, alone = bytes / 200e9;
    contention.collectives.push_back({ratios[i].first, bytes, alone, alone * ratios[i].second});
  }
  m.contention = contention;
  // The CPU AdamW 1.19x slower beside pinned copies both ways.
  m.cpu_adamw_beside_copies = CpuAdamWCopiesMeasurement{64 << 20, 32, 256 << 20, 0.03, 0.03 * 1.19};
  return m;
}

TEST(AssembleProfileTest, MeasuredNumbersLandInTheProfileAndItLoads) {
  const HardwareProfile base = Builtin("h200-sxm");
  const AssembledProfile a = AssembleProfile(TwoGpuMeasurements(), base, "h200-measured");
  const HardwareProfile& p = a.profile;
  EXPECT_EQ(p.name, "h200-measured");
  EXPECT_EQ(p.device_kind, "cuda");
  EXPECT_EQ(p.bf16_peak_flops, base.bf16_peak_flops);  // the datasheet's, kept
  EXPECT_NEAR(p.gemm_max_efficiency, 0.8, 1e-6);
  EXPECT_NEAR(p.gemm_half_efficiency_dim, 250, 1e-3);
  EXPECT_NEAR(p.attention_forward_flops_per_s, 500e12, 1e6);
  EXPECT_NEAR(p.attention_backward_flops_per_s, 250e12, 1e6);
  EXPECT_NEAR(p.memory_bandwidth_bytes_per_s, 4e12, 1);
  EXPECT_NEAR(p.elementwise_efficiency, 0.75, 1e-9);
  EXPECT_EQ(p.kernel_launch_s, 5e-6);
  EXPECT_EQ(p.kernel_overhead_s, 2e-6);
  EXPECT_NEAR(p.host_to_device_bytes_per_s, 50e9, 1);
  EXPECT_NEAR(p.device_to_host_bytes_per_s, 40e9, 1);
  EXPECT_FALSE(p.copies_share_link);  // 48 + 39 GB/s together: full duplex
  EXPECT_EQ(p.intra_node.all_reduce.measured_group_size, 2);
  EXPECT_EQ(p.intra_node.all_reduce.points.size(), 3u);
  EXPECT_DOUBLE_EQ(p.intra_node.all_gather.points.back().second, 20e-6 + (256 << 20) / 250e9);
  EXPECT_EQ(p.inter_node.all_reduce.points, base.inter_node.all_reduce.points);
  EXPECT_NEAR(p.cpu_adam_params_per_s, 2 * 1.6e9, 2);  // the host: both GPUs offloading at once, summed
  EXPECT_NEAR(p.cpu_adam_alone_params_per_s, 3e9, 1);   // one process with the host to itself
  EXPECT_NEAR(p.collective_slowdown_during_compute, 0.45, 1e-12);
  EXPECT_NEAR(p.compute_slowdown_during_collectives, 0.25, 1e-12);
  EXPECT_EQ(p.memory_bytes, 150e9);
  EXPECT_EQ(p.cuda_context_bytes, 1e9);  // used 12 GB - reserved 11 GB
  EXPECT_EQ(p.workspace_bytes, 64 << 20);
  EXPECT_EQ(p.collective_buffer_bytes, 300 << 20);
  EXPECT_EQ(p.host_memory_bytes, 128.0 * (1 << 30));  // per GPU
  EXPECT_EQ(p.price_per_gpu_hour, base.price_per_gpu_hour);

  for (const char* field : {"compute.bf16_peak_flops", "collectives.inter_node", "price_per_gpu_hour", "compute.launch_queue_depth"})
    EXPECT_NE(std::find(a.from_base.begin(), a.from_base.end(), field), a.from_base.end()) << field;
  for (const char* said : {"2 x NVIDIA H200", "2026-12-01T10:00:00Z", "driver 580.65.06", "NCCL 2.28.9", "LibTorch 2.11.0",
                           "Kept from base profile h200-sxm", "collectives.inter_node",
                           "in bursts of ~10 ms after 20 ms idle", "took 25.0% longer in all"})
    EXPECT_NE(p.source.find(said), std::string::npos) << said << " missing from: " << p.source;

  // The file: the loader accepts it (ignoring "measurements") and reads the same numbers.
  const nlohmann::json file = ProfileFileJson(a);
  ASSERT_TRUE(file.contains("measurements"));
  EXPECT_EQ(file["measurements"]["gemm"]["table"].size(), TwoGpuMeasurements().gemms.size());
  const nlohmann::json& row = file["measurements"]["gemm"]["table"][0];
  EXPECT_DOUBLE_EQ(row["sustained_seconds"].get<double>(), 1.25 * row["seconds"].get<double>());
  EXPECT_EQ(file["measurements"]["collectives"][0]["group_size"], 2);
  const HardwareProfile loaded = HardwareProfileFromJson(file, "test");
  EXPECT_EQ(loaded.gemm_max_efficiency, p.gemm_max_efficiency);
  EXPECT_EQ(loaded.intra_node.all_gather.points, p.intra_node.all_gather.points);
  EXPECT_EQ(loaded.collective_slowdown_during_compute, p.collective_slowdown_during_compute);
  EXPECT_EQ(loaded.compute_slowdown_during_collectives, p.compute_slowdown_during_collectives);
  EXPECT_EQ(loaded.cpu_adam_alone_params_per_s, p.cpu_adam_alone_params_per_s);
}

TEST(AssembleProfileTest, ContentionGivesBothSlowdownsAndItsRawTable) {
  const AssembledProfile a = AssembleProfile(TwoGpuMeasurements(), Builtin("h200-sxm"), "h200-measured");
  for (const char* field : {"collectives.slowdown_during_compute", "compute.slowdown_during_collectives"})
    EXPECT_EQ(std::find(a.from_base.begin(), a.from_base.end(), field), a.from_base.end()) << field << " was measured";
  const nlohmann::json& c = a.measurements["contention"];
  ASSERT_EQ(c["collectives"]["table"].size(), 6u);
  EXPECT_EQ(c["collectives"]["table"][3]["op"], "reduce_scatter");
  EXPECT_NEAR(c["collectives"]["table"][3]["beside_over_alone"].get<double>(), 1.9, 1e-12);
  EXPECT_NEAR(c["collectives"]["median_beside_over_alone"].get<double>(), 1.45, 1e-12);
  EXPECT_NEAR(c["compute"]["beside_over_alone"].get<double>(), 1.25, 1e-12);
  EXPECT_EQ(c["gemm_pass"]["shapes"].size(), 7u);
  EXPECT_NEAR(c["compute"]["alone_flops_per_s"].get<double>(), c["gemm_pass"]["flops"].get<double>() / 5e-3, 1);
  for (const char* said : {"took x1.45 their time alone", "median of 6, x1.20 to x1.90", "256.0 MiB all-gathers x1.25"})
    EXPECT_NE(a.profile.source.find(said), std::string::npos) << said << " missing from: " << a.profile.source;

  // Collectives beside compute faster than alone (noise on an idle link):
  // no slowdown, never a negative one.
  ProfileMeasurements faster = TwoGpuMeasurements();
  for (ContentionPoint& point : faster.contention->collectives) point.beside_compute_s = 0.98 * point.alone_s;
  faster.contention->gemm_loop_beside_gathers_s = 0.99 * faster.contention->gemm_loop_alone_s;
  const AssembledProfile f = AssembleProfile(faster, Builtin("h200-sxm"), "faster");
  EXPECT_EQ(f.profile.collective_slowdown_during_compute, 0);
  EXPECT_EQ(f.profile.compute_slowdown_during_collectives, 0);
}

TEST(AssembleProfileTest, CpuAdamWBesideCopiesGivesItsSlowdownAndTable) {
  const AssembledProfile a = AssembleProfile(TwoGpuMeasurements(), Builtin("h200-sxm"), "h200-measured");
  EXPECT_NEAR(a.profile.cpu_adam_slowdown_during_copies, 0.19, 1e-12);
  EXPECT_EQ(std::find(a.from_base.begin(), a.from_base.end(), "host.cpu_adam_slowdown_during_copies"),
            a.from_base.end());
  const nlohmann::json& b = a.measurements["cpu_adamw"]["beside_copies"];
  EXPECT_EQ(b["copy_bytes"], 256 << 20);
  EXPECT_NEAR(b["beside_over_alone"].get<double>(), 1.19, 1e-12);
  EXPECT_TRUE(b.contains("how"));
  EXPECT_NE(a.profile.source.find("beside pinned copies of 256.0 MiB both ways x1.19 its time alone"),
            std::string::npos)
      << a.profile.source;
  EXPECT_EQ(HardwareProfileFromJson(ProfileFileJson(a), "test").cpu_adam_slowdown_during_copies,
            a.profile.cpu_adam_slowdown_during_copies);

  // Faster beside the copies (noise): no slowdown, never a negative one.
  ProfileMeasurements faster = TwoGpuMeasurements();
  faster.cpu_adamw_beside_copies->beside_copies_s = 0.97 * faster.cpu_adamw_beside_copies->alone_s;
  EXPECT_EQ(AssembleProfile(faster, Builtin("h200-sxm"), "faster").profile.cpu_adam_slowdown_during_copies, 0);

  // Not measured (no GPU, or it failed): the base's, and said so.
  ProfileMeasurements none = TwoGpuMeasurements();
  none.cpu_adamw_beside_copies.reset();
  HardwareProfile base = Builtin("h200-sxm");
  base.cpu_adam_slowdown_during_copies = 0.1;
  const AssembledProfile kept = AssembleProfile(none, base, "kept");
  EXPECT_EQ(kept.profile.cpu_adam_slowdown_during_copies, 0.1);
  EXPECT_NE(std::find(kept.from_base.begin(), kept.from_base.end(), "host.cpu_adam_slowdown_during_copies"),
            kept.from_base.end());
  EXPECT_FALSE(kept.measurements["cpu_adamw"].contains("beside_copies"));
}

// The timing of MeasureCpuAdamWBeside against work that ends too early the
// first time: that update is not counted, and the work is started for twice
// as long; then every update counts.
TEST(CpuAdamWBesideTest, AnUpdateCountsOnlyWhenTheWorkOutlastedIt) {
  std::vector<double> started;
  int asked = 0, finished = 0;
  WorkBesideUpdate work;
  work.start = [&](double seconds) { started.push_back(seconds); };
  work.still_running = [&] { return ++asked > 1; };
  work.finish = [&] { ++finished; };
  const UpdateBesideSeconds t = MeasureCpuAdamWBeside(1 << 16, 1, 3, work);
  EXPECT_GT(t.alone, 0);
  EXPECT_GT(t.beside, 0);
  ASSERT_EQ(started.size(), 4u);  // one not counted, three counted
  EXPECT_NEAR(started[0], 3 * t.alone, 1e-12);
  EXPECT_DOUBLE_EQ(started[1], 2 * started[0]);
  EXPECT_DOUBLE_EQ(started[3], started[1]);
  EXPECT_EQ(finished, 4);

  // Work that never outlasts an update: an error, not a number.
  work.still_running = [] { return false; };
  EXPECT_THROW(MeasureCpuAdamWBeside(1 << 16, 1, 1, work), std::runtime_error);
}

TEST(AssembleProfileTest, WithoutContentionBothSlowdownsComeFromTheBase) {
  ProfileMeasurements m = TwoGpuMeasurements();
  m.contention.reset();
  HardwareProfile base = Builtin("h200-sxm");
  base.collective_slowdown_during_compute = 0.3;  // a base that measured it
  const AssembledProfile a = AssembleProfile(m, base, "no-contention");
  EXPECT_EQ(a.profile.collective_slowdown_during_compute, 0.3);
  EXPECT_EQ(a.profile.compute_slowdown_during_collectives, base.compute_slowdown_during_collectives);
  for (const char* field : {"collectives.slowdown_during_compute", "compute.slowdown_during_collectives"})
    EXPECT_NE(std::find(a.from_base.begin(), a.from_base.end(), field), a.from_base.end()) << field;
  EXPECT_FALSE(a.measurements.contains("contention"));
  EXPECT_EQ(a.profile.source.find("Contention"), std::string::npos);
}

TEST(AssembleProfileTest, OneSharedLinkAndNoCollectivesKeepTheBasesCurves) {
  ProfileMeasurements m = TwoGpuMeasurements();
  m.machine.gpus = 1;
  m.collectives.clear();
  m.host_copies->both_host_to_device_s = 2 * m.host_copies->host_to_device_s;  // each halves: one link
  m.host_copies->both_device_to_host_s = 2 * m.host_copies->device_to_host_s;
  const HardwareProfile base = Builtin("h200-sxm");
  const AssembledProfile a = AssembleProfile(m, base, "one");
  EXPECT_TRUE(a.profile.copies_share_link);
  EXPECT_EQ(a.profile.intra_node.all_reduce.points, base.intra_node.all_reduce.points);
  EXPECT_EQ(a.profile.collective_buffer_bytes, base.collective_buffer_bytes);
  for (const char* field : {"collectives.intra_node", "memory.collective_buffer_bytes"})
    EXPECT_NE(std::find(a.from_base.begin(), a.from_base.end(), field), a.from_base.end()) << field;
}

TEST(AssembleProfileTest, CpuProfileUsesHostMemoryAndTheEstimatedPeak) {
  ProfileMeasurements m = TwoGpuMeasurements();
  m.machine.device_kind = "cpu";
  m.machine.device_name = "AMD EPYC";
  m.machine.gpus = 0;
  m.machine.cpu_peak_flops = 100e9;
  m.machine.cpu_peak_how = "estimated: 2 threads x ...";
  m.gemms.clear();
  for (double d : {64.0, 256.0, 1024.0}) m.gemms.push_back({{"square", int64_t(d), int64_t(d), int64_t(d), true}, "fp32",
                                                            2 * d * d * d / (60e9 * d / (d + 40))});
  m.host_copies.reset();
  m.collectives.clear();
  m.contention.reset();
  m.fixed_memory.reset();
  m.cpu_adamw.workers = 1;
  const HardwareProfile base = Builtin("cpu");
  const AssembledProfile a = AssembleProfile(m, base, "mycpu");
  EXPECT_EQ(a.profile.device_kind, "cpu");
  EXPECT_EQ(a.profile.bf16_peak_flops, 100e9);
  EXPECT_NEAR(a.profile.gemm_max_efficiency, 0.6, 1e-9);
  EXPECT_NEAR(a.profile.gemm_half_efficiency_dim, 40, 1e-6);
  EXPECT_EQ(a.profile.memory_bytes, m.machine.host_memory_bytes);
  EXPECT_EQ(a.profile.cuda_context_bytes, 0);
  EXPECT_EQ(a.profile.collective_buffer_bytes, 0);
  EXPECT_NEAR(a.profile.cpu_adam_params_per_s, 3e9, 1);  // alone: one rank per CPU machine
  EXPECT_NEAR(a.profile.cpu_adam_alone_params_per_s, 3e9, 1);
  EXPECT_EQ(a.profile.host_to_device_bytes_per_s, base.host_to_device_bytes_per_s);

  // A peak estimated below the rates' asymptote (60 GFLOP/s) becomes the
  // asymptote: the fitted curve, and so every predicted rate, is unchanged.
  m.machine.cpu_peak_flops = 50e9;
  const AssembledProfile raised = AssembleProfile(m, base, "mycpu");
  EXPECT_NEAR(raised.profile.gemm_max_efficiency, 1.0, 1e-9);
  EXPECT_NEAR(raised.profile.bf16_peak_flops, 60e9, 1);
  EXPECT_NEAR(raised.profile.GemmFlopsPerSecond(256, 256, 256), a.profile.GemmFlopsPerSecond(256, 256, 256), 1);
  EXPECT_NE(raised.profile.source.find("so the peak is the asymptote"), std::string::npos);
}

TEST(AssembleProfileTest, AnAbsurdMeasurementIsRefusedNamingTheField) {
  ProfileMeasurements m = TwoGpuMeasurements();
  m.copy.seconds = 1e-30;  // 2e39 B/s
  try {
    AssembleProfile(m, Builtin("h200-sxm"), "bad");
    FAIL() << "an absurd bandwidth was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("memory_bandwidth_bytes_per_s"), std::string::npos) << e.what();
  }
}

TEST(DefaultBaseProfileTest, NamedLikeTheGpu) {
  const std::vector<std::string> names = BuiltinProfileNames();
  EXPECT_EQ(DefaultBaseProfile("cuda", "NVIDIA H200", names), "h200-sxm");
  EXPECT_EQ(DefaultBaseProfile("cuda", "NVIDIA H100 80GB HBM3", names), "h100-sxm-80g");
  EXPECT_EQ(DefaultBaseProfile("cuda", "NVIDIA A100-SXM4-80GB", names), "a100-sxm-80g");
  EXPECT_EQ(DefaultBaseProfile("cuda", "NVIDIA L40S", names), "l40s-pcie");
  EXPECT_EQ(DefaultBaseProfile("cuda", "Tesla V100-SXM2-32GB", names), "h200-sxm");
  EXPECT_EQ(DefaultBaseProfile("cpu", "AMD EPYC", names), "cpu");
}

TEST(ProfileShapesTest, TheModelsProjectionsAndReferenceSquares) {
  const std::vector<GemmShape> cuda = ProfileGemmShapes(true, false);
  bool has_8b_down = false, has_square = false, has_thin_reference = false;
  for (const GemmShape& s : cuda) {
    if (s.what == "llama3-8b down" && s.tokens == 16384) has_8b_down = s.in == 14336 && s.out == 4096;
    if (s.what == "square 8192") has_square = !s.in_fit;
    // A 576-wide model's rows are in the table but do not move the fit.
    if (s.what.rfind("smollm2-135m", 0) == 0) {
      EXPECT_FALSE(s.in_fit) << s.what;
      has_thin_reference = has_thin_reference || (s.what == "smollm2-135m qkv" && s.in == 576 && s.out == 960);
    }
    for (const GemmShape& t : cuda)
      if (&s != &t) EXPECT_FALSE(s.tokens == t.tokens && s.in == t.in && s.out == t.out) << s.what << " twice";
  }
  EXPECT_TRUE(has_8b_down);
  EXPECT_TRUE(has_square);
  EXPECT_TRUE(has_thin_reference);
  EXPECT_LT(ProfileGemmShapes(true, true).size(), cuda.size());
  // Attention FLOPs as planner/work_model.cc counts them: 2 b s^2 (heads x head_dim).
  const AttentionShape a{2, 32, 8, 4096, 128};
  EXPECT_DOUBLE_EQ(a.ForwardFlops(), 2.0 * 2 * 4096.0 * 4096 * 32 * 128);
  EXPECT_DOUBLE_EQ(a.BackwardFlops(), 2.5 * a.ForwardFlops());
  for (const AttentionShape& s : ProfileAttentionShapes(true, false)) EXPECT_EQ(s.batch * s.seq, 16384);
}

TEST(ProfileShapesTest, ContentionRunsOneLlama3_8bBlockForwardAtMicroBatch2Seq4096) {
  const std::vector<GemmShape> block = ContentionBlockGemms();
  ASSERT_EQ(block.size(), 7u);
  EXPECT_EQ(block[0].what, "llama3-8b q");
  EXPECT_EQ(block[4].what, "llama3-8b gate");
  EXPECT_EQ(block[6].what, "llama3-8b down");
  EXPECT_EQ(block[6].in, 14336);
  EXPECT_EQ(block[6].out, 4096);
  double flops = 0;
  for (const GemmShape& g : block) {
    EXPECT_EQ(g.tokens, 8192) << g.what;
    flops += g.Flops();
  }
  // 2 x tokens x the block's projection parameters (q, k, v, o, gate, up, down).
  const double params = 4096.0 * 4096 * 2 + 4096.0 * 1024 * 2 + 4096.0 * 14336 * 3;
  EXPECT_DOUBLE_EQ(flops, 2 * 8192 * params);
}

TEST(ProfileProgressTest, OneLinePerStageWithTimeLeftAndABarOnlyOnATerminal) {
  std::ostringstream plain;
  {
    ProfileProgress p(plain, /*terminal=*/false, {{"GEMMs", 10}, {"attention", 5}});
    p.Begin(0);
    p.Items(1, 2);
    p.End("fast");
    p.Begin(1);
    p.End();
  }
  const std::string text = plain.str();
  EXPECT_NE(text.find("[1/2] GEMMs  (about 15 s left)"), std::string::npos) << text;
  EXPECT_NE(text.find("[2/2] attention"), std::string::npos) << text;
  EXPECT_NE(text.find(": fast"), std::string::npos) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos) << text;

  std::ostringstream terminal;
  ProfileProgress p(terminal, /*terminal=*/true, {{"GEMMs", 10}});
  p.Begin(0);
  p.Items(1, 4);
  EXPECT_NE(terminal.str().find("\r  [#######"), std::string::npos) << terminal.str();
  EXPECT_EQ(ProfileProgress::Duration(125), "2 min 05 s");
}

}  // namespace
}  // namespace llmplan::executor
