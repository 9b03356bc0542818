// The HTML report of `llmplan compare --report` for a run that evaluated on
// held-out data (`llmplan run --eval-data FILE --eval-every N`): evaluation
// losses on the loss chart beside the training loss, and a section of their
// own; and for a run that did not, none of it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "feedback/comparison.h"
#include "feedback/comparison_format.h"
#include "feedback/measured_run.h"
#include "feedback/report_html.h"
#include "base/format.h"
#include "simulator/evaluate.h"
#include "tests/feedback/synthetic_run.h"
#include "tests/planner/test_support.h"

namespace llmplan {
namespace {

// Evaluations after steps 2, 4 and 6 of a 6-step run; the best is step 4's.
// The first takes 2 s (warm-up), the others 0.5 s: their mean is 0.5 s.
struct EvalPoint {
  int step;
  double loss, seconds;
};
const std::vector<EvalPoint> kEvals = {{2, 4.0, 2.0}, {4, 3.5, 0.5}, {6, 3.7, 0.5}};

enum class Evaluated { kNo, kYes, kNoSummary /* the run died before writing summary.json */ };

// A synthetic 6-step run (training loss 5.0 at every step) in `dir`, with
// kEvals in metrics.jsonl (and summary.json), compared with its prediction as
// `llmplan compare` does.
Comparison WriteAndCompare(const testing::ScratchDir& dir, Evaluated evaluated) {
  const Plan plan = testing::PresetPlan("tiny-llama", 1, ShardingStrategy::kNoShard, 2, 256, 1);
  const HardwareProfile profile = testing::Profile("h200-sxm");
  const Evaluation ev = EvaluatePlanInDetail(plan, profile, true);
  const std::string run = dir.path().string();
  testing::WriteSyntheticRun(run, plan, ev.program, testing::SimulatedTimes(ev.program, profile), {.steps = 6});
  if (evaluated != Evaluated::kNo) {
    // The evaluated steps' metrics lines get their columns (executor/run/metrics.cc).
    std::ifstream in(run + "/metrics.jsonl");
    std::string lines;
    for (std::string line; std::getline(in, line);) {
      nlohmann::json j = nlohmann::json::parse(line);
      for (const EvalPoint& e : kEvals) {
        if (j["step"] != e.step) continue;
        j["eval_loss"] = e.loss;
        j["eval_perplexity"] = std::exp(e.loss);
        j["eval_tokens"] = 4096;
        j["eval_s"] = e.seconds;
        j["eval_peak_allocated_bytes"] = 3 << 20;
        j["predicted_eval_s"] = 0.4;
        j["predicted_eval_peak_allocated_bytes"] = 2 << 20;
        j["eval_best"] = e.step <= 4;
      }
      lines += j.dump() + "\n";
    }
    in.close();
    std::ofstream(run + "/metrics.jsonl") << lines;
  }
  if (evaluated == Evaluated::kYes) {
    const nlohmann::json summary = {
        {"device", "cuda:0"},
        {"evaluation",
         {{"every", 2},
          {"micro_batches", 2},
          {"tokens", 4096},
          {"evaluations", 3},
          {"mean_s", 0.5},
          {"last", {{"step", 6}, {"loss", 3.7}, {"perplexity", std::exp(3.7)}}},
          {"best", {{"step", 4}, {"loss", 3.5}, {"perplexity", std::exp(3.5)}}},
          {"best_checkpoint", "ckpt/<step-4>&"},
          {"peak_allocated_bytes", 3 << 20},
          {"predicted_s", 0.4},
          {"predicted_peak_allocated_bytes", 2 << 20}}}};
    std::ofstream(run + "/summary.json") << summary.dump();
  }
  return Compare(LoadMeasuredRun(run), ev, profile);
}

// The report as `llmplan compare --report` writes it.
std::string Report(const testing::ScratchDir& dir, const Comparison& c) {
  const std::string path = dir.File("report.html");
  WriteComparisonReport(c, path);
  return testing::ReadFile(path);
}

// The loss chart's SVG.
std::string LossChart(const std::string& html) {
  const size_t from = html.find("<h2>Loss</h2>");
  EXPECT_NE(from, std::string::npos);
  return html.substr(from, html.find("</svg>", from) - from);
}

// The color of the legend's swatch before `name`.
std::string LegendColor(const std::string& svg, const std::string& name) {
  std::smatch m;
  const std::regex swatch("fill=\"([^\"]+)\"/>\\n<text[^>]*>" + name + "</text>");
  return std::regex_search(svg, m, swatch) ? m[1].str() : "";
}

struct Dot {
  double x, y;
};

// The dots of the series of `color`, left to right.
std::vector<Dot> Dots(const std::string& svg, const std::string& color) {
  std::vector<Dot> dots;
  const std::regex circle("<circle cx=\"([0-9.]+)\" cy=\"([0-9.]+)\" r=\"2.5\" fill=\"" + color + "\"/>");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), circle); it != std::sregex_iterator(); ++it)
    dots.push_back({std::stod((*it)[1]), std::stod((*it)[2])});
  return dots;
}

TEST(ReportEvaluationTest, EvaluationLossesShareTheLossChart) {
  testing::ScratchDir dir;
  const std::string svg = LossChart(Report(dir, WriteAndCompare(dir, Evaluated::kYes)));
  // A legend naming both series, in two colors.
  const std::string training = LegendColor(svg, "training loss"), eval = LegendColor(svg, "evaluation loss");
  ASSERT_FALSE(training.empty()) << svg;
  ASSERT_FALSE(eval.empty()) << svg;
  EXPECT_NE(training, eval);
  // A dot per evaluation, joined by a line, at the x of its step's training dot.
  const std::vector<Dot> steps = Dots(svg, training), evals = Dots(svg, eval);
  ASSERT_EQ(steps.size(), 6u);
  ASSERT_EQ(evals.size(), kEvals.size());
  for (size_t i = 0; i < kEvals.size(); ++i) {
    EXPECT_EQ(evals[i].x, steps[kEvals[i].step - 1].x) << "evaluation after step " << kEvals[i].step;
    EXPECT_GT(evals[i].y, steps[0].y);  // lower loss than training's 5.0: further down
  }
  EXPECT_GT(evals[0].y, 0);
  EXPECT_LT(evals[0].y, evals[1].y);  // 4.0 above 3.5
  EXPECT_NE(svg.find("<polyline fill=\"none\" stroke=\"" + eval + "\""), std::string::npos);
  // The best (step 4) ringed and named.
  char ring[128];
  std::snprintf(ring, sizeof ring,
                "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"none\" stroke-width=\"2\" stroke=\"%s\"/>", evals[1].x,
                evals[1].y, eval.c_str());
  EXPECT_NE(svg.find(ring), std::string::npos) << svg;
  EXPECT_NE(svg.find("best evaluation loss 3.5000 at step 4"), std::string::npos);
}

TEST(ReportEvaluationTest, SectionHasLastBestAndMeasuredBesidePredicted) {
  testing::ScratchDir dir;
  const std::string html = Report(dir, WriteAndCompare(dir, Evaluated::kYes));
  const size_t at = html.find("<h2>Evaluation on held-out data</h2>");
  ASSERT_NE(at, std::string::npos);
  EXPECT_GT(at, html.find("<h2>Loss</h2>"));
  const std::string section = html.substr(at);
  for (const std::string& row : std::vector<std::string>{
           "<tr><td>last</td><td>6</td><td>3.7000</td><td>40.45</td></tr>",
           "<tr><td>best</td><td>4</td><td>3.5000</td><td>33.12</td></tr>",
           // Predicted 0.4 s against 0.5 s, 2 MiB against 3 MiB.
           "<tr><td>time per evaluation</td><td>" + FormatSeconds(0.4) + "</td><td>" + FormatSeconds(0.5) +
               "</td><td class=\"bad\">" + FormatError(-0.2) + "</td></tr>",
           "<tr><td>peak allocated</td><td>" + FormatBytes(2 << 20) + "</td><td>" + FormatBytes(3 << 20) +
               "</td><td class=\"bad\">" + FormatError(-1.0 / 3) + "</td></tr>",
       })
    EXPECT_NE(section.find(row), std::string::npos) << row << "\n" << section;
  EXPECT_NE(section.find("3 evaluations, one every 2 steps, of 4096 tokens each"), std::string::npos) << section;
  EXPECT_NE(section.find("<code>ckpt/&lt;step-4&gt;&amp;</code>"), std::string::npos) << section;
}

// A run killed before its end has no summary.json "evaluation": the section
// comes from the metrics lines (the mean time leaves the first evaluation out).
TEST(ReportEvaluationTest, RunWithoutSummaryTakesTheMetricsLines) {
  testing::ScratchDir dir;
  const std::string html = Report(dir, WriteAndCompare(dir, Evaluated::kNoSummary));
  const size_t at = html.find("<h2>Evaluation on held-out data</h2>");
  ASSERT_NE(at, std::string::npos);
  const std::string section = html.substr(at);
  EXPECT_NE(section.find("<tr><td>last</td><td>6</td><td>3.7000</td>"), std::string::npos) << section;
  EXPECT_NE(section.find("<tr><td>best</td><td>4</td><td>3.5000</td>"), std::string::npos) << section;
  EXPECT_NE(section.find("<tr><td>time per evaluation</td><td>" + FormatSeconds(0.4) + "</td><td>" +
                         FormatSeconds(0.5) + "</td>"),
            std::string::npos)
      << section;
  EXPECT_NE(section.find("none kept"), std::string::npos);
  EXPECT_EQ(Dots(LossChart(html), LegendColor(html, "evaluation loss")).size(), kEvals.size());
}

// No evaluation: the report as it was before evaluations were drawn (byte for
// byte, when they came in): one loss series, no mark, no section.
TEST(ReportEvaluationTest, RunWithoutEvaluationHasNoneOfIt) {
  testing::ScratchDir dir;
  const Comparison c = WriteAndCompare(dir, Evaluated::kNo);
  const std::string html = Report(dir, c);
  EXPECT_EQ(html, ComparisonReportHtml(c));
  const std::string svg = LossChart(html);
  EXPECT_FALSE(LegendColor(svg, "loss \\(measured\\)").empty()) << svg;
  EXPECT_EQ(Dots(svg, LegendColor(svg, "loss \\(measured\\)")).size(), 6u);
  EXPECT_EQ(svg.find("r=\"5\""), std::string::npos);  // no ring
  EXPECT_EQ(svg.find("<polyline"), svg.rfind("<polyline"));  // one line
  // The run directory's name (this test's) says "Evaluation" too.
  std::string text = html;
  for (size_t at; (at = text.find(c.run_dir)) != std::string::npos;) text.erase(at, c.run_dir.size());
  for (const char* absent : {"evaluation", "Evaluation", "held-out", "training loss"})
    EXPECT_EQ(text.find(absent), std::string::npos) << absent;
}

}  // namespace
}  // namespace llmplan
