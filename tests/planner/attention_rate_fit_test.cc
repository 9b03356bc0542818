// The attention rate over sequence lengths: FitAttentionRates on timed rows,
// the profile's rate at any length (HardwareProfile::AttentionFlopsPerSecond),
// the shipped profiles' fields against their own measurement tables, and the
// length the planner gives each attention op.
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/user_error.h"
#include "planner/attention_rate_fit.h"
#include "planner/cost_model.h"
#include "planner/memory_model.h"
#include "planner/model_spec.h"
#include "planner/work_model.h"
#include "tests/planner/test_support.h"

namespace llmplan {
namespace {

// A row timed on the curve rate = r_inf * seq / (seq + half).
AttentionRateRow OnCurve(int head_dim, double seq, double forward_inf, double forward_half, double backward_inf,
                         double backward_half) {
  const double flops = 2 * 4 * seq * seq * 32 * head_dim;
  AttentionRateRow r;
  r.head_dim = head_dim;
  r.seq = seq;
  r.forward_flops = flops;
  r.forward_s = flops / (forward_inf * seq / (seq + forward_half));
  r.backward_flops = 2.5 * flops;
  r.backward_s = 2.5 * flops / (backward_inf * seq / (seq + backward_half));
  return r;
}

TEST(AttentionRateFitTest, RecoversTheCurveOfEachDirectionAndTheWidthsFractions) {
  std::vector<AttentionRateRow> rows;
  for (double seq : {1024.0, 2048.0, 4096.0, 8192.0}) rows.push_back(OnCurve(128, seq, 600e12, 400, 550e12, 1100));
  for (double seq : {1024.0, 2048.0, 4096.0, 8192.0}) rows.push_back(OnCurve(64, seq, 450e12, 400, 420e12, 1100));
  HardwareProfile p;
  FitAttentionRates(rows, p);
  EXPECT_EQ(p.attention_reference_head_dim, 128);
  EXPECT_EQ(p.attention_reference_seq, 8192);
  EXPECT_NEAR(p.attention_forward_half_rate_seq, 400, 1e-6);
  EXPECT_NEAR(p.attention_backward_half_rate_seq, 1100, 1e-6);
  EXPECT_NEAR(p.attention_forward_flops_per_s / (600e12 * 8192 / (8192 + 400)), 1, 1e-12);
  EXPECT_NEAR(p.attention_backward_flops_per_s / (550e12 * 8192 / (8192 + 1100)), 1, 1e-12);
  ASSERT_EQ(p.attention_widths.size(), 1u);
  EXPECT_NEAR(p.attention_widths[0].forward_fraction, 0.75, 1e-12);
  EXPECT_NEAR(p.attention_widths[0].backward_fraction, 420.0 / 550, 1e-12);
  // Any length, either width, read off the curve.
  for (double seq : {512.0, 2048.0, 3000.0, 16384.0}) {
    EXPECT_NEAR(p.AttentionFlopsPerSecond(false, 128, seq) / (600e12 * seq / (seq + 400)), 1, 1e-12) << seq;
    EXPECT_NEAR(p.AttentionFlopsPerSecond(true, 64, seq) / (420e12 * seq / (seq + 1100)), 1, 1e-12) << seq;
  }
  // No length: the reference sequence's rate.
  EXPECT_DOUBLE_EQ(p.AttentionFlopsPerSecond(true, 128), p.attention_backward_flops_per_s);
}

TEST(AttentionRateFitTest, OneLengthPerWidthGivesTotalFlopsOverTotalSeconds) {
  std::vector<AttentionRateRow> rows = {OnCurve(128, 4096, 600e12, 400, 550e12, 1100)};
  rows.push_back(rows.front());
  rows.back().forward_s *= 3;  // the same shape timed slower once: the rate is the totals'
  HardwareProfile p;
  FitAttentionRates(rows, p);
  EXPECT_EQ(p.attention_reference_seq, 0);
  EXPECT_EQ(p.attention_backward_half_rate_seq, 0);
  EXPECT_EQ(p.attention_reference_head_dim, 0);
  EXPECT_NEAR(p.attention_forward_flops_per_s, 2 * rows[0].forward_flops / (4 * rows[0].forward_s), 1);
  EXPECT_DOUBLE_EQ(p.AttentionFlopsPerSecond(false, 128, 1024), p.attention_forward_flops_per_s);
}

TEST(AttentionRateFitTest, TheCurveIsReadWrittenAndNeedsItsReferenceLength) {
  nlohmann::json j = HardwareProfileToJson(testing::Profile("h100-sxm-80g-1gpu"));
  const HardwareProfile p = HardwareProfileFromJson(j, "test");
  EXPECT_GT(p.attention_reference_seq, 0);
  EXPECT_GT(p.attention_backward_half_rate_seq, 0);
  EXPECT_EQ(HardwareProfileToJson(p), j);
  j["compute"]["attention"].erase("reference_seq");
  EXPECT_THROW(HardwareProfileFromJson(j, "test"), UserError);
  j["compute"]["attention"].erase("forward_half_rate_seq");
  j["compute"]["attention"].erase("backward_half_rate_seq");
  const HardwareProfile flat = HardwareProfileFromJson(j, "test");  // an older profile: one rate for every length
  EXPECT_DOUBLE_EQ(flat.AttentionFlopsPerSecond(true, 128, 1024), flat.attention_backward_flops_per_s);
  j["compute"]["attention"]["backward_half_rate_seq"] = -1;
  EXPECT_THROW(HardwareProfileFromJson(j, "test"), UserError);
}

// A shipped measured profile's attention fields are what the fit makes of
// its own table: nothing was tuned by hand.
TEST(AttentionRateFitTest, ShippedProfilesHoldTheFitOfTheirOwnTables) {
  int checked = 0;
  for (const std::string& name : BuiltinProfileNames()) {
    std::ifstream in(testing::ProfilePath(name));
    const nlohmann::json j = nlohmann::json::parse(in);
    if (!j.contains("measurements") || !j["measurements"].contains("attention")) continue;
    SCOPED_TRACE(name);
    std::vector<AttentionRateRow> rows;
    for (const nlohmann::json& r : j["measurements"]["attention"]["table"]) {
      const double flops = 2.0 * r["batch"].get<double>() * r["seq"].get<double>() * r["seq"].get<double>() *
                           r["heads"].get<double>() * r["head_dim"].get<double>();
      rows.push_back({r["head_dim"].get<int>(), r["seq"].get<double>(), flops,
                      flops / r["forward_flops_per_s"].get<double>(), 2.5 * flops,
                      2.5 * flops / r["backward_flops_per_s"].get<double>()});
    }
    HardwareProfile fitted;
    FitAttentionRates(rows, fitted);
    const HardwareProfile shipped = testing::Profile(name);
    EXPECT_NEAR(shipped.attention_forward_flops_per_s / fitted.attention_forward_flops_per_s, 1, 1e-9);
    EXPECT_NEAR(shipped.attention_backward_flops_per_s / fitted.attention_backward_flops_per_s, 1, 1e-9);
    EXPECT_EQ(shipped.attention_reference_seq, fitted.attention_reference_seq);
    EXPECT_NEAR(shipped.attention_forward_half_rate_seq, fitted.attention_forward_half_rate_seq, 1e-6);
    EXPECT_NEAR(shipped.attention_backward_half_rate_seq, fitted.attention_backward_half_rate_seq, 1e-6);
    ASSERT_EQ(shipped.attention_widths.size(), fitted.attention_widths.size());
    for (size_t i = 0; i < fitted.attention_widths.size(); ++i) {
      EXPECT_EQ(shipped.attention_widths[i].head_dim, fitted.attention_widths[i].head_dim);
      EXPECT_NEAR(shipped.attention_widths[i].backward_fraction, fitted.attention_widths[i].backward_fraction, 1e-9);
    }
    ++checked;
  }
  EXPECT_GE(checked, 3);  // h100-sxm-80g-1gpu, h200-sxm, h200-sxm-1gpu
}

TEST(AttentionRateFitTest, ThePlannerPricesEachAttentionAtItsLength) {
  const ModelSpec m = PresetModel("llama3.2-1b");
  ActivationShape window = ShapeOf(m, 4, 4096, 1, 4096, false, true);
  EXPECT_EQ(BlockForwardWork(window).attention_seq, 4096);
  // Inside documents of a quarter of the window each causal loop spans a quarter.
  ActivationShape documents = window;
  documents.attention_work = 0.25;
  EXPECT_EQ(BlockBackwardWork(documents, 1e6).attention_seq, 1024);
  // Shorter sequences run slower per FLOP on a measured curve.
  const CostModel cost(testing::Profile("h100-sxm-80g-1gpu"));
  OpWork w = BlockBackwardWork(window, 1e6);
  const double at_4096 = cost.ComputeTermSeconds(w).attention / w.attention_flops;
  w.attention_seq = 1024;
  EXPECT_GT(cost.ComputeTermSeconds(w).attention / w.attention_flops, 1.5 * at_4096);
}

}  // namespace
}  // namespace llmplan
