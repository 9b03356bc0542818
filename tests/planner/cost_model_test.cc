// Hardware profile curves and the cost model, against hand arithmetic.
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "planner/cost_model.h"
#include "planner/hardware_profile.h"
#include "planner/memory_model.h"
#include "planner/model_spec.h"
#include "planner/work_model.h"
#include "base/user_error.h"
#include "tests/planner/test_support.h"

namespace llmplan {
namespace {

HardwareProfile TwoPointProfile() {
  HardwareProfile p = testing::Profile("h200-sxm");
  // all-gather / reduce-scatter / all-reduce measured on 2 GPUs at 1e6 B (100 us) and 1e8 B (1 ms).
  for (CollectiveCurve* c : {&p.intra_node.all_gather, &p.intra_node.reduce_scatter, &p.intra_node.all_reduce}) {
    c->measured_group_size = 2;
    c->points = {{1e6, 1e-4}, {1e8, 1e-3}};
    c->hop_latency_s = 5e-6;
  }
  return p;
}

TEST(CostModelTest, CollectiveRingModel) {
  HardwareProfile p = TwoPointProfile();
  // Bus bandwidth at 2 GPUs (ring factor (n-1)/n = 1/2): 1e6*0.5/1e-4 = 5e9 and 1e8*0.5/1e-3 = 5e10 B/s.
  // 1e7 B is halfway in log(bytes): 5e9*0.5 + 5e10*0.5 = 2.75e10 B/s.
  // All-gather of 1e7 B among 8: 1e7 * 7/8 / 2.75e10 s; latency floor 1e-4 + 6 extra hops * 5e-6 = 1.3e-4.
  EXPECT_NEAR(p.CollectiveSeconds(CollectiveOp::kAllGather, 1e7, 8, false), 1e7 * 0.875 / 2.75e10, 1e-15);
  // At the measured size and group the curve is reproduced: 1e8 B on 2 GPUs takes 1 ms.
  EXPECT_NEAR(p.CollectiveSeconds(CollectiveOp::kReduceScatter, 1e8, 2, false), 1e-3, 1e-15);
  // Above the last point bandwidth is held: 1e9 B on 2 GPUs = 10 ms.
  EXPECT_NEAR(p.CollectiveSeconds(CollectiveOp::kAllGather, 1e9, 2, false), 1e-2, 1e-14);
  // Tiny messages hit the latency floor: 1e3 B among 8 -> 1.3e-4 s.
  EXPECT_NEAR(p.CollectiveSeconds(CollectiveOp::kAllGather, 1e3, 8, false), 1e-4 + 6 * 5e-6, 1e-15);
  // All-reduce moves 2(n-1)/n: bus bandwidth at 2 GPUs is 1e6*1/1e-4 = 1e10 and 1e8/1e-3 = 1e11 B/s;
  // 1e8 B among 4: 1e8 * 1.5 / 1e11 = 1.5 ms. Its floor adds the hops twice: 1e-4 + 2*2*5e-6.
  EXPECT_NEAR(p.CollectiveSeconds(CollectiveOp::kAllReduce, 1e8, 4, false), 1.5e-3, 1e-15);
  EXPECT_NEAR(p.CollectiveSeconds(CollectiveOp::kAllReduce, 4, 4, false), 1e-4 + 2 * 2 * 5e-6, 1e-15);
  // One rank, or nothing to move: free.
  EXPECT_EQ(p.CollectiveSeconds(CollectiveOp::kAllReduce, 1e9, 1, false), 0);
  EXPECT_EQ(p.CollectiveSeconds(CollectiveOp::kAllGather, 0, 8, false), 0);
  // spans_nodes picks the inter-node curve (h200-sxm.json: all-gather 1 GiB on 2 GPUs in 11.094503 ms).
  EXPECT_NEAR(p.CollectiveSeconds(CollectiveOp::kAllGather, 1073741824, 2, true), 0.011094503, 1e-12);
}

// The formulas, on the shipped H200 profile's own numbers (which
// `llmplan profile` rewrites when it re-measures the machine).
TEST(CostModelTest, GemmEfficiencyCurve) {
  HardwareProfile p = testing::Profile("h200-sxm");
  const double peak = p.bf16_peak_flops, e = p.gemm_max_efficiency, half = p.gemm_half_efficiency_dim;
  ASSERT_GT(half, 1);
  // peak * max_efficiency * d / (d + half), d = min(m, n, k).
  EXPECT_DOUBLE_EQ(p.GemmFlopsPerSecond(8192, 4096, 16384), peak * e * 4096 / (4096 + half));
  EXPECT_DOUBLE_EQ(p.GemmFlopsPerSecond(half, 1e5, 1e5), peak * e / 2);
  // Capacity the allocator may use: what the device reports x usable_fraction - the CUDA context.
  EXPECT_DOUBLE_EQ(p.AllocatorCapacityBytes(), p.memory_bytes * p.usable_fraction - p.cuda_context_bytes);
}

TEST(CostModelTest, ComputeSecondsAddsTermsWithALaunchFloor) {
  HardwareProfile p = testing::Profile("h200-sxm");
  CostModel cost(p);
  OpWork w;
  w.gemm_flops = 2e12;
  w.gemm_min_dim = 4096;
  w.attention_flops = p.attention_forward_flops_per_s * 1e-3;  // 1 ms of forward attention
  w.elementwise_bytes = p.memory_bandwidth_bytes_per_s * p.elementwise_efficiency * 1e-3;  // 1 ms
  w.launches = 10;
  const double gemm = 2e12 / p.GemmFlopsPerSecond(4096, 4096, 4096);
  EXPECT_NEAR(cost.ComputeSeconds(w), gemm + 1e-3 + 1e-3 + 10 * p.kernel_overhead_s, 1e-15);
  // The same seconds, term by term (what llmplan compare shows as the predicted split).
  const ComputeTerms terms = cost.ComputeTermSeconds(w);
  EXPECT_NEAR(terms.gemm, gemm, 1e-15);
  EXPECT_NEAR(terms.attention, 1e-3, 1e-15);
  EXPECT_NEAR(terms.memory_bound, 1e-3, 1e-15);
  EXPECT_DOUBLE_EQ(terms.kernel_overhead, 10 * p.kernel_overhead_s);
  EXPECT_DOUBLE_EQ(terms.launch_floor, 10 * p.kernel_launch_s);
  EXPECT_EQ(terms.Seconds(), cost.ComputeSeconds(w));
  // Backward attention at its own rate.
  w.attention_backward = true;
  EXPECT_NEAR(cost.ComputeSeconds(w),
              gemm + w.attention_flops / p.attention_backward_flops_per_s + 1e-3 + 10 * p.kernel_overhead_s, 1e-15);
  // Tiny work: 24 launches of host time dominate.
  OpWork tiny;
  tiny.elementwise_bytes = 1;
  tiny.launches = 24;
  EXPECT_DOUBLE_EQ(cost.ComputeSeconds(tiny), 24 * p.kernel_launch_s);
  EXPECT_LT(cost.ComputeTermSeconds(tiny).DeviceSeconds(), cost.ComputeTermSeconds(tiny).launch_floor);
  // Copies and the CPU optimizer: bytes or parameters over the profile's rates.
  StepOp up;
  up.kind = OpKind::kCopyParamsToDevice;
  up.work.copy_bytes = p.host_to_device_bytes_per_s;
  EXPECT_DOUBLE_EQ(cost.Seconds(up), 1.0);
  StepOp down;
  down.kind = OpKind::kCopyGradsToHost;
  down.work.copy_bytes = p.device_to_host_bytes_per_s;
  EXPECT_DOUBLE_EQ(cost.Seconds(down), 1.0);
  // CPU AdamW: one process alone at its own rate; two sharing the host
  // split the host's summed rate.
  StepOp adam;
  adam.kind = OpKind::kCpuOptimizerStep;
  adam.work.cpu_adam_params = 2 * p.cpu_adam_alone_params_per_s;
  EXPECT_DOUBLE_EQ(cost.Seconds(adam), 2.0);
  adam.work.cpu_adam_params = 2 * p.cpu_adam_params_per_s;
  adam.work.host_sharers = 2;
  EXPECT_DOUBLE_EQ(cost.Seconds(adam), 4.0);
  // Kernels are priced as compute; a one-rank all-gather is a local cast, so it is too.
  StepOp gather;
  gather.kind = OpKind::kAllGather;
  gather.work.group_size = 1;
  EXPECT_TRUE(CostModel::PricedAsCompute(gather));
  gather.work.group_size = 2;
  EXPECT_FALSE(CostModel::PricedAsCompute(gather));
  EXPECT_FALSE(CostModel::PricedAsCompute(up));
  EXPECT_FALSE(CostModel::PricedAsCompute(adam));
  StepOp rel;
  rel.kind = OpKind::kRelease;
  rel.work.launches = 100;
  EXPECT_EQ(cost.Seconds(rel), 0);
}

TEST(CostModelTest, ProfilesLoadAndRoundTrip) {
  for (const auto& name : BuiltinProfileNames()) {
    SCOPED_TRACE(name);
    HardwareProfile p = LoadHardwareProfile(name);
    EXPECT_FALSE(p.source.empty());
    HardwareProfile q = HardwareProfileFromJson(HardwareProfileToJson(p), name);
    EXPECT_EQ(HardwareProfileToJson(p), HardwareProfileToJson(q));
    EXPECT_GT(p.AllocatorCapacityBytes(), 0);
  }
  EXPECT_GE(BuiltinProfileNames().size(), 5u);
}

TEST(CostModelTest, CollectiveSlowdownDuringComputeIsReadWrittenAndBounded) {
  nlohmann::json j = HardwareProfileToJson(LoadHardwareProfile("h200-sxm"));
  j["collectives"]["slowdown_during_compute"] = 0.45;
  EXPECT_DOUBLE_EQ(HardwareProfileFromJson(j, "test").collective_slowdown_during_compute, 0.45);
  EXPECT_DOUBLE_EQ(HardwareProfileToJson(HardwareProfileFromJson(j, "test"))["collectives"]["slowdown_during_compute"]
                       .get<double>(),
                   0.45);
  // A profile written before the field was measured: collectives are not slowed.
  j["collectives"].erase("slowdown_during_compute");
  EXPECT_EQ(HardwareProfileFromJson(j, "test").collective_slowdown_during_compute, 0);
  for (double bad : {-0.1, 11.0}) {
    j["collectives"]["slowdown_during_compute"] = bad;
    EXPECT_THROW(HardwareProfileFromJson(j, "test"), UserError) << bad;
  }
}

TEST(CostModelTest, AttentionAtAnotherHeadWidthRunsAtItsMeasuredFraction) {
  HardwareProfile p = testing::Profile("h200-sxm");
  p.attention_reference_head_dim = 128;
  p.attention_widths = {{64, 0.8, 0.5}};
  CostModel cost(p);
  OpWork w;
  w.attention_flops = p.attention_forward_flops_per_s * 1e-3;  // 1 ms at the reference width
  w.attention_head_dim = 128;
  EXPECT_NEAR(cost.ComputeTermSeconds(w).attention, 1e-3, 1e-15);
  w.attention_head_dim = 64;
  EXPECT_NEAR(cost.ComputeTermSeconds(w).attention, 1e-3 / 0.8, 1e-15);
  w.attention_backward = true;
  w.attention_flops = p.attention_backward_flops_per_s * 1e-3;
  EXPECT_NEAR(cost.ComputeTermSeconds(w).attention, 1e-3 / 0.5, 1e-15);
  // A width the profile did not measure runs at the reference rates.
  w.attention_head_dim = 96;
  EXPECT_NEAR(cost.ComputeTermSeconds(w).attention, 1e-3, 1e-15);
  // Written and read back; an older profile without the list has none.
  nlohmann::json j = HardwareProfileToJson(p);
  const HardwareProfile q = HardwareProfileFromJson(j, "test");
  ASSERT_EQ(q.attention_widths.size(), 1u);
  EXPECT_EQ(q.attention_reference_head_dim, 128);
  EXPECT_EQ(q.attention_widths[0].head_dim, 64);
  EXPECT_DOUBLE_EQ(q.attention_widths[0].backward_fraction, 0.5);
  j["compute"]["attention"].erase("by_head_dim");
  EXPECT_TRUE(HardwareProfileFromJson(j, "test").attention_widths.empty());
  j["compute"]["attention"]["by_head_dim"] = {{{"head_dim", 64}, {"forward_fraction", 0}, {"backward_fraction", 1}}};
  EXPECT_THROW(HardwareProfileFromJson(j, "test"), UserError);
  // The planner gives every attention op its heads' width.
  EXPECT_EQ(BlockForwardWork(ShapeOf(PresetModel("llama3-8b"), 1, 1024, 2, 1024, false, true)).attention_head_dim, 128);
  ModelSpec narrow = PresetModel("llama3-8b");
  narrow.heads = 64;  // 4096 / 64: 64-wide heads
  narrow.head_dim = 64;
  EXPECT_EQ(BlockForwardWork(ShapeOf(narrow, 1, 1024, 2, 1024, false, true)).attention_head_dim, 64);
}

TEST(CostModelTest, CopySlowdownDuringCpuAdamIsReadWrittenAndBounded) {
  nlohmann::json j = HardwareProfileToJson(LoadHardwareProfile("h200-sxm"));
  EXPECT_EQ(HardwareProfileFromJson(j, "test").copy_slowdown_during_cpu_adam, 0);  // not measured there
  j["host"]["copy_slowdown_during_cpu_adam"] = 0.25;
  EXPECT_DOUBLE_EQ(HardwareProfileFromJson(j, "test").copy_slowdown_during_cpu_adam, 0.25);
  EXPECT_DOUBLE_EQ(
      HardwareProfileToJson(HardwareProfileFromJson(j, "test"))["host"]["copy_slowdown_during_cpu_adam"].get<double>(),
      0.25);
  j["host"]["copy_slowdown_during_cpu_adam"] = -0.5;
  EXPECT_THROW(HardwareProfileFromJson(j, "test"), UserError);
}

TEST(CostModelTest, CpuAdamSlowdownDuringCopiesIsReadWrittenAndBounded) {
  // Measured on the one-H200 machine (llmplan profile: its CPU AdamW took
  // 1.64x as long beside pinned copies) and the one-H100 machine (1.47x on
  // 2026-12-07);
  // 0 in profiles derived from datasheets or measured without that stage.
  for (const std::string& name : BuiltinProfileNames()) {
    const double s = LoadHardwareProfile(name).cpu_adam_slowdown_during_copies;
    if (name == "h200-sxm-1gpu") {
      EXPECT_NEAR(s, 0.64, 0.01);
    } else if (name == "h100-sxm-80g-1gpu") {
      EXPECT_NEAR(s, 0.47, 0.01);
    } else {
      EXPECT_EQ(s, 0) << name;
    }
  }
  nlohmann::json j = HardwareProfileToJson(LoadHardwareProfile("h200-sxm"));
  j["host"]["cpu_adam_slowdown_during_copies"] = 0.19;
  EXPECT_DOUBLE_EQ(HardwareProfileFromJson(j, "test").cpu_adam_slowdown_during_copies, 0.19);
  EXPECT_DOUBLE_EQ(
      HardwareProfileToJson(HardwareProfileFromJson(j, "test"))["host"]["cpu_adam_slowdown_during_copies"].get<double>(),
      0.19);
  j["host"].erase("cpu_adam_slowdown_during_copies");
  EXPECT_EQ(HardwareProfileFromJson(j, "test").cpu_adam_slowdown_during_copies, 0);
  for (double bad : {-0.1, 11.0}) {
    j["host"]["cpu_adam_slowdown_during_copies"] = bad;
    try {
      HardwareProfileFromJson(j, "test");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("cpu_adam_slowdown_during_copies"), std::string::npos) << e.what();
    }
  }
  HardwareProfile p = LoadHardwareProfile("h200-sxm");
  p.cpu_adam_slowdown_during_copies = -1;
  EXPECT_THROW(p.Validate(), UserError);
}

}  // namespace
}  // namespace llmplan
