// The plan search's answers, frozen: for a spread of requests (models from
// the presets and a config.json, 1 to 64 GPUs, sequence lengths 256 to 16384,
// free and pinned offload, --gpus auto, a request nothing fits) the chosen
// plan, its alternatives, every figure printed for them and every plan the
// search evaluated must equal tests/data/search/golden.json, which the search
// wrote before its speed-ups (main e64adba). Speed-ups of the
// search, the simulator or the allocator replay must not change an answer.
//
// Rewrite the fixture only for a change that is meant to move numbers:
//   LLMPLAN_WRITE_GOLDEN=1 build/tests/planner_tests --gtest_filter='SearchGolden*'
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/plan_search.h"
#include "simulator/evaluate.h"
#include "tests/planner/test_support.h"

namespace llmplan {
namespace {

struct Case {
  std::string name;
  std::string model;  // preset or a config.json under the source tree
  std::string profile;
  int gpus;
  int64_t seq;
  int64_t global_batch;
  std::optional<Offload> offload = std::nullopt;
  bool ckpt_async = false;
  double target_days = 0;
  int max_gpus = 16384;
};

std::vector<Case> Cases() {
  return {
      {"llama3_70b_64xh100_readme", "llama3-70b", "h100-sxm-80g", 64, 8192, 512},
      {"llama3_8b_8xh100_setup", "llama3-8b", "h100-sxm-80g", 8, 8192, 256},
      {"llama3_2_1b_2xh200cal", "llama3.2-1b", "h200-sxm-calibrated", 2, 4096, 32},
      {"llama3_2_1b_1xh200cal_free_batch", "llama3.2-1b", "h200-sxm-calibrated", 1, 2048, 0},
      {"llama3_8b_16xa100_offload_optimizer", "llama3-8b", "a100-sxm-80g", 16, 4096, 128, Offload::kOptimizer},
      {"llama3_8b_4xl40s_seq2048", "llama3-8b", "l40s-pcie", 4, 2048, 64},
      {"qwen2_5_7b_8xh200_offload_params", "qwen2.5-7b", "h200-sxm", 8, 4096, 64, Offload::kParams},
      {"mistral_7b_32xh100", "mistral-7b", "h100-sxm-80g", 32, 4096, 256},
      {"llama3_8b_8xh100_seq1024", "llama3-8b", "h100-sxm-80g", 8, 1024, 512},
      {"llama3_8b_8xh200_seq16384", "llama3.1-8b", "h200-sxm", 8, 16384, 16},
      {"llama2_13b_16xh100_ckpt_async", "llama2-13b", "h100-sxm-80g", 16, 4096, 128, std::nullopt, true},
      {"qwen2_5_14b_8xh100_seq8192", "qwen2.5-14b", "h100-sxm-80g", 8, 8192, 64},
      {"llama3_70b_8xh100_seq8192", "llama3-70b", "h100-sxm-80g", 8, 8192, 64},
      {"llama3_70b_2xl40s_nothing_fits", "llama3-70b", "l40s-pcie", 2, 4096, 16},
      {"llama3_2_3b_auto_gpus_target", "llama3.2-3b", "a100-sxm-80g", 0, 4096, 256, std::nullopt, false, 30, 64},
      {"qwen2_5_0_5b_config_2xh200cal", "tools/device/accuracy/qwen2.5-0.5b/config.json", "h200-sxm-calibrated", 2,
       2048, 16},
      {"tiny_llama_cpu", "tiny-llama", "cpu", 1, 256, 8},
      {"llama3_2_1b_64xh100_offload_opt_params", "llama3.2-1b", "h100-sxm-80g", 64, 8192, 128,
       Offload::kOptimizerAndParams},
  };
}

// One evaluated plan in a line: its choices (the rest is the request's) and
// the figures the search ranks and prints.
nlohmann::json EvaluatedJson(const Plan& p, const Estimate& e) {
  std::string ckpt;
  for (size_t i = 0; i < p.checkpoint_layers.size(); ++i) {
    const int first = p.checkpoint_layers[i];
    while (i + 1 < p.checkpoint_layers.size() && p.checkpoint_layers[i + 1] == p.checkpoint_layers[i] + 1) ++i;
    ckpt += (ckpt.empty() ? "" : ",") + std::to_string(first);
    if (p.checkpoint_layers[i] != first) ckpt += "-" + std::to_string(p.checkpoint_layers[i]);
  }
  const std::string choice = StrategyName(p.strategy) + "/" + std::to_string(p.shard_group_size) + " gpus " +
                             std::to_string(p.gpus) + " mb " + std::to_string(p.micro_batch) + " ga " +
                             std::to_string(p.grad_accum) + " " + OffloadName(p.offload) +
                             (p.OptimizerStateOnNvme() ? " nvme" : "") + " ckpt " + ckpt +
                             (p.replicate_edges ? " edges" : "");
  return {choice, e.time.step_seconds, e.memory.peak_allocated_bytes, e.memory.peak_reserved_bytes,
          e.memory.host_bytes, e.fits, e.why_not};
}

nlohmann::json EstimateJson(const Estimate& e, const HardwareProfile& profile) {
  nlohmann::json j = EstimateToJson(e, profile);
  j["memory"]["margin_fraction"] = e.memory.margin_fraction;
  return j;
}

// Everything the search answers, and every plan it asked the evaluator about
// (in order, with the figures the search compares).
nlohmann::json RunCase(const Case& c) {
  const HardwareProfile profile = testing::Profile(c.profile);
  SearchRequest req;
  const bool path = c.model.find('/') != std::string::npos;
  req.model = LoadModelSpec(path ? testing::SourceDir() + "/" + c.model : c.model);
  req.profile = c.profile;
  req.gpus = c.gpus;
  req.max_gpus = c.max_gpus;
  req.seq_len = c.seq;
  req.global_batch = c.global_batch;
  req.offload = c.offload;
  req.target_days = c.target_days;
  EvaluateOptions options;
  options.ckpt_async = c.ckpt_async;
  nlohmann::json evaluated = nlohmann::json::array();
  const SearchResult r = SearchPlans(req, profile, [&](const Plan& p) {
    Estimate e = EvaluatePlan(p, profile, options);
    evaluated.push_back(EvaluatedJson(p, e));
    return e;
  });
  nlohmann::json alternatives = nlohmann::json::array();
  for (const RankedAlternative& a : r.alternatives)
    alternatives.push_back({{"estimate", EstimateJson(a.estimate, profile)}, {"reason", a.reason}});
  nlohmann::json answer = {{"found", r.found},
                            {"best", EstimateJson(r.best, profile)},
                            {"alternatives", alternatives},
                            {"why_none", r.why_none},
                            {"train_tokens", r.train_tokens},
                            {"train_seconds", r.train_seconds},
                            {"train_cost", r.train_cost},
                            {"evaluated_count", r.evaluated}};
  return {{"answer", answer}, {"evaluated", evaluated}};
}

std::string GoldenPath() { return testing::SourceDir() + "/tests/data/search/golden.json"; }

TEST(SearchGoldenTest, EveryAnswerIsUnchanged) {
  nlohmann::json now = nlohmann::json::object();
  for (const Case& c : Cases()) now[c.name] = RunCase(c);
  if (std::getenv("LLMPLAN_WRITE_GOLDEN") != nullptr) {
    // One line per evaluated plan: a diff of the fixture reads plan by plan.
    std::ofstream out(GoldenPath());
    out << "{\n";
    for (auto it = now.begin(); it != now.end(); ++it) {
      const nlohmann::json& evaluated = it.value()["evaluated"];
      out << " " << nlohmann::json(it.key()).dump() << ": {\"answer\": " << it.value()["answer"].dump()
          << ",\n  \"evaluated\": [\n";
      for (size_t i = 0; i < evaluated.size(); ++i)
        out << "   " << evaluated[i].dump() << (i + 1 < evaluated.size() ? ",\n" : "\n");
      out << "  ]}" << (std::next(it) != now.end() ? ",\n" : "\n");
    }
    out << "}\n";
    GTEST_SKIP() << "wrote " << GoldenPath();
  }
  std::ifstream in(GoldenPath());
  ASSERT_TRUE(in.good()) << GoldenPath();
  const nlohmann::json golden = nlohmann::json::parse(in);
  ASSERT_EQ(golden.size(), Cases().size());
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    ASSERT_TRUE(golden.contains(c.name));
    const nlohmann::json& want = golden[c.name]["answer"];
    const nlohmann::json& got = now[c.name]["answer"];
    // Answers first (a readable diff of what a user sees), then the evaluations.
    for (const char* key : {"found", "why_none", "train_tokens", "train_seconds", "train_cost"})
      EXPECT_EQ(got[key], want[key]) << key;
    EXPECT_EQ(got["best"], want["best"]) << nlohmann::json::diff(want["best"], got["best"]).dump(1);
    EXPECT_EQ(got["alternatives"], want["alternatives"])
        << nlohmann::json::diff(want["alternatives"], got["alternatives"]).dump(1);
    // The search may stop evaluating a plan twice in a row (e64adba did when
    // its first guess of checkpointed blocks was all of them); every other
    // evaluation stays, in order, with the same figures.
    nlohmann::json want_evaluated = nlohmann::json::array();
    for (const nlohmann::json& e : golden[c.name]["evaluated"])
      if (want_evaluated.empty() || want_evaluated.back() != e) want_evaluated.push_back(e);
    const nlohmann::json& got_evaluated = now[c.name]["evaluated"];
    EXPECT_EQ(got["evaluated_count"], want_evaluated.size());
    EXPECT_EQ(got_evaluated, want_evaluated)
        << nlohmann::json::diff(want_evaluated, got_evaluated).dump(1).substr(0, 4000);
  }
}

}  // namespace
}  // namespace llmplan
