#include "feedback/report_html.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>
#include <utility>

#include "feedback/comparison_format.h"
#include "feedback/svg_chart.h"
#include "base/atomic_file.h"
#include "base/format.h"
#include "base/json_read.h"
#include "simulator/xml_escape.h"

namespace llmplan {

namespace {

constexpr const char* kPredictedColor = "#4e79a7";
constexpr const char* kMeasuredColor = "#f28e2b";
constexpr const char* kEvaluationColor = "#59a14f";  // neither predicted nor the training loss
constexpr double kGiB = 1024.0 * 1024 * 1024;

constexpr const char* kStyle = R"(
body { font-family: sans-serif; margin: 24px auto; max-width: 960px; color: #222; }
h1 { font-size: 22px; margin-bottom: 4px; }
h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #ddd; padding-bottom: 3px; }
p.what { color: #555; margin-top: 0; }
p.note { color: #555; font-size: 13px; }
table { border-collapse: collapse; font-size: 14px; }
th, td { padding: 3px 10px; border-bottom: 1px solid #eee; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f6f6f6; }
td.ok { color: #2e7d32; } td.warn { color: #b26a00; } td.bad { color: #c62828; font-weight: bold; }
svg { display: block; margin: 8px 0; max-width: 100%; height: auto; }
)";

std::string Cell(const std::string& text, const std::string& tag = "td") {
  return "<" + tag + ">" + XmlEscape(text) + "</" + tag + ">";
}

// Errors within 3% are good, within 10% fair, beyond that bad.
std::string ErrorCell(double error) {
  const char* grade = !std::isfinite(error)      ? ""
                      : std::fabs(error) <= 0.03 ? "ok"
                      : std::fabs(error) <= 0.10 ? "warn"
                                                 : "bad";
  return std::string("<td class=\"") + grade + "\">" + XmlEscape(FormatError(error)) + "</td>";
}

std::string SummaryTable(const Comparison& c) {
  std::ostringstream h;
  h << "<table>\n<tr>" << Cell("", "th") << Cell("predicted", "th") << Cell("measured", "th") << Cell("error", "th")
    << "</tr>\n";
  for (const auto& rows : {StepRows(c), MemoryRows(c)})
    for (const SummaryRow& r : rows)
      h << "<tr>" << Cell(r.label) << Cell(r.predicted) << Cell(r.measured) << ErrorCell(r.error) << "</tr>\n";
  h << "<tr>" << Cell("peak reached during") << Cell(c.predicted_peak.name) << Cell(c.measured_peak.name)
    << Cell(c.predicted_peak.op == c.measured_peak.op ? "same op" : "other op") << "</tr>\n</table>\n";
  return h.str();
}

std::string ClassTable(const Comparison& c) {
  std::ostringstream h;
  h << "<table>\n<tr>";
  for (const char* head :
       {"class", "ops", "predicted", "measured", "error", "predicted GEMM", "attention", "memory-bound", "overhead"})
    h << Cell(head, "th");
  h << "</tr>\n";
  for (const OpClassComparison& k : c.classes) {
    h << "<tr>" << Cell(k.name) << Cell(k.ops > 0 ? std::to_string(k.ops) : "")
      << Cell(FormatSeconds(k.seconds.predicted)) << Cell(FormatSeconds(k.seconds.measured))
      << ErrorCell(k.seconds.error());
    if (k.has_split) {
      const PredictedSplit& s = k.split;
      h << Cell(FormatSeconds(s.gemm_s)) << Cell(FormatSeconds(s.attention_s)) << Cell(FormatSeconds(s.memory_bound_s))
        << Cell(FormatSeconds(s.kernel_overhead_s + s.launch_wait_s + s.contention_s));
    } else {
      h << "<td></td><td></td><td></td><td></td>";
    }
    h << "</tr>\n";
  }
  h << "</table>\n";
  return h.str();
}

std::string TimeChart(const Comparison& c) {
  BarChart chart;
  chart.series = {"predicted", "measured"};
  chart.colors = {kPredictedColor, kMeasuredColor};
  for (const OpClassComparison& k : c.classes)
    chart.groups.push_back({k.name, {k.seconds.predicted, k.seconds.measured}, FormatError(k.seconds.error())});
  chart.value_text = [](double s) { return FormatSeconds(s); };
  return HorizontalBarsSvg(chart);
}

// The largest binary unit the memory stays above, so small runs do not draw
// curves at 0.002 GiB.
std::pair<double, std::string> MemoryUnit(const Comparison& c) {
  double most = std::max(c.predicted_peak.bytes, c.measured_peak.bytes);
  for (const auto* series : {&c.predicted_allocated, &c.measured_allocated})
    for (double b : *series) most = std::max(most, b);
  if (most >= kGiB) return {kGiB, "GiB"};
  if (most >= 1024.0 * 1024) return {1024.0 * 1024, "MiB"};
  return {1024.0, "KiB"};
}

std::string MemoryChart(const Comparison& c) {
  const auto [unit, unit_name] = MemoryUnit(c);
  LineChart chart;
  chart.x_label = "op (issue order)";
  chart.y_label = "allocated " + unit_name;
  LineSeries predicted{"predicted", kPredictedColor, {}, false};
  LineSeries measured{"measured (step " + std::to_string(c.representative_step) + ")", kMeasuredColor, {}, false};
  for (size_t i = 0; i < c.predicted_allocated.size(); ++i)
    predicted.points.emplace_back(static_cast<double>(i), c.predicted_allocated[i] / unit);
  for (size_t i = 0; i < c.measured_allocated.size(); ++i)
    measured.points.emplace_back(static_cast<double>(i), c.measured_allocated[i] / unit);
  chart.series = {predicted, measured};
  for (const auto& [peak, who, color] : {std::tuple{&c.predicted_peak, "predicted", kPredictedColor},
                                         std::tuple{&c.measured_peak, "measured", kMeasuredColor}}) {
    if (peak->op < 0) continue;
    chart.marks.push_back({static_cast<double>(peak->op), peak->bytes / unit,
                           std::string(who) + " peak " + FormatBytes(peak->bytes) + " during op " +
                               std::to_string(peak->op) + " \"" + peak->name + "\"",
                           color});
  }
  return LineChartSvg(chart);
}

// One evaluation on held-out data (`llmplan run --eval-data`).
struct EvaluationPoint {
  int64_t step = 0;
  double loss = 0, perplexity = 0;
};

// What a run's evaluations left in its directory: every evaluation from
// metrics.jsonl and the totals of summary.json's "evaluation", which a run
// that died before its end has not written — then they are worked out from
// the metrics lines as the executor's RunReport::RecordEvaluation does.
struct RunEvaluation {
  std::vector<EvaluationPoint> points;  // by step
  EvaluationPoint last, best;
  std::string best_checkpoint;  // "" when none was kept (no --keep-best)
  int64_t evaluations = 0, every = 0, tokens = 0;
  double mean_s = 0, peak_allocated_bytes = 0;
  double predicted_s = 0, predicted_peak_allocated_bytes = 0;  // 0: not predicted
};

EvaluationPoint ReadEvaluationPoint(const JsonObject& o) {
  return {o.Integer("step", 0, int64_t{1} << 40), o.Number("loss", NAN), o.Number("perplexity", 0)};
}

// Nothing when the run did not evaluate, or its directory cannot be read here
// (a Comparison made without one): the report is then the one it always was.
std::optional<RunEvaluation> LoadRunEvaluation(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string metrics_path = (fs::path(dir) / "metrics.jsonl").string();
  if (dir.empty() || !fs::is_regular_file(metrics_path, ec)) return std::nullopt;
  // A resumed run appends to metrics.jsonl: the last line of a step wins.
  std::map<int64_t, nlohmann::json> evaluated;
  std::istringstream lines(ReadInputFile(metrics_path, "run record", int64_t{1} << 30));
  for (std::string line; std::getline(lines, line);) {
    // LoadMeasuredRun has checked the file; a torn last line is skipped.
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("eval_loss") || !j.contains("step") || !j["step"].is_number_integer()) continue;
    // Read before the move: C++17 builds operator='s argument first.
    const int64_t step = j["step"].get<int64_t>();
    evaluated[step] = std::move(j);
  }
  if (evaluated.empty()) return std::nullopt;

  RunEvaluation e;
  e.best.loss = NAN;
  std::vector<double> seconds;
  for (const auto& [step, j] : evaluated) {
    const JsonObject o(j, metrics_path + ": step " + std::to_string(step));
    // A loss that diverged is written as null: NaN, which the chart skips.
    const EvaluationPoint p{step, o.Number("eval_loss", NAN), o.Number("eval_perplexity", 0)};
    if (std::isfinite(p.loss) && (std::isnan(e.best.loss) || p.loss < e.best.loss)) e.best = p;
    e.points.push_back(p);
    seconds.push_back(o.Number("eval_s", 0));
    e.tokens = o.Integer("eval_tokens", 0, int64_t{1} << 50, 0);
    e.peak_allocated_bytes = std::max(e.peak_allocated_bytes, o.Number("eval_peak_allocated_bytes", 0));
    e.predicted_s = o.Number("predicted_eval_s", 0);
    e.predicted_peak_allocated_bytes = o.Number("predicted_eval_peak_allocated_bytes", 0);
  }
  e.last = e.points.back();
  e.evaluations = static_cast<int64_t>(e.points.size());
  // The first evaluation pays for the allocator's warm-up and kernel
  // selection: out of the mean whenever there is another.
  const size_t skip = seconds.size() > 1 ? 1 : 0;
  for (size_t k = skip; k < seconds.size(); ++k) e.mean_s += seconds[k] / static_cast<double>(seconds.size() - skip);

  const std::string summary_path = (fs::path(dir) / "summary.json").string();
  if (!fs::is_regular_file(summary_path, ec)) return e;
  const nlohmann::json summary = ReadJsonFile(summary_path, "run summary");
  if (!summary.is_object() || !summary.contains("evaluation") || !summary["evaluation"].is_object()) return e;
  const JsonObject s(summary["evaluation"], summary_path + ": evaluation");
  e.evaluations = s.Integer("evaluations", 0, int64_t{1} << 40, e.evaluations);
  e.every = s.Integer("every", 0, int64_t{1} << 40, 0);
  e.tokens = s.Integer("tokens", 0, int64_t{1} << 50, e.tokens);
  e.mean_s = s.Number("mean_s", e.mean_s);
  // A resumed run's best may be from before it (CKPT_DIR/best.json).
  if (s.Has("last") && s.Raw("last").is_object()) e.last = ReadEvaluationPoint(s.Object("last"));
  if (s.Has("best") && s.Raw("best").is_object()) e.best = ReadEvaluationPoint(s.Object("best"));
  e.best_checkpoint = s.String("best_checkpoint", "");
  e.peak_allocated_bytes = s.Number("peak_allocated_bytes", e.peak_allocated_bytes);
  e.predicted_s = s.Number("predicted_s", e.predicted_s);
  e.predicted_peak_allocated_bytes = s.Number("predicted_peak_allocated_bytes", e.predicted_peak_allocated_bytes);
  return e;
}

std::string Fixed(double v, int decimals) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string LossChart(const Comparison& c, const std::optional<RunEvaluation>& eval) {
  LineChart chart;
  chart.x_label = "step";
  chart.y_label = "loss";
  chart.y_from_zero = false;
  LineSeries loss{eval ? "training loss" : "loss (measured)", kMeasuredColor, {}, true};
  for (const auto& [step, value] : c.losses) loss.points.emplace_back(static_cast<double>(step), value);
  chart.series = {loss};
  if (eval) {
    LineSeries held_out{"evaluation loss", kEvaluationColor, {}, true};
    for (const EvaluationPoint& p : eval->points) held_out.points.emplace_back(static_cast<double>(p.step), p.loss);
    chart.series.push_back(held_out);
    if (std::isfinite(eval->best.loss))
      chart.marks.push_back({static_cast<double>(eval->best.step), eval->best.loss,
                             "best evaluation loss " + Fixed(eval->best.loss, 4) + " at step " +
                                 std::to_string(eval->best.step),
                             kEvaluationColor});
  }
  return LineChartSvg(chart);
}

// Predicted beside measured, as the summary table has them; a figure the run
// did not predict (an older profile) leaves its cells empty.
std::string PredictedRow(const std::string& label, double predicted, double measured,
                         const std::function<std::string(double)>& text) {
  if (predicted <= 0) return "<tr>" + Cell(label) + Cell("") + Cell(text(measured)) + Cell("") + "</tr>\n";
  return "<tr>" + Cell(label) + Cell(text(predicted)) + Cell(text(measured)) +
         ErrorCell(RelativeError(predicted, measured)) + "</tr>\n";
}

std::string EvaluationSection(const RunEvaluation& e) {
  std::ostringstream h;
  h << "<h2>Evaluation on held-out data</h2>\n<table>\n<tr>" << Cell("", "th") << Cell("step", "th")
    << Cell("loss", "th") << Cell("perplexity", "th") << "</tr>\n";
  for (const auto& [label, p] : {std::pair{"last", &e.last}, std::pair{"best", &e.best}})
    h << "<tr>" << Cell(label) << Cell(std::to_string(p->step)) << Cell(Fixed(p->loss, 4))
      << Cell(p->perplexity > 0 ? Fixed(p->perplexity, 2) : "") << "</tr>\n";
  h << "</table>\n<table style=\"margin-top: 10px\">\n<tr>" << Cell("", "th") << Cell("predicted", "th")
    << Cell("measured", "th") << Cell("error", "th") << "</tr>\n";
  h << PredictedRow("time per evaluation", e.predicted_s, e.mean_s, [](double s) { return FormatSeconds(s); });
  h << PredictedRow("peak allocated", e.predicted_peak_allocated_bytes, e.peak_allocated_bytes,
                    [](double b) { return FormatBytes(b); });
  h << "</table>\n<p class=\"note\">" << e.evaluations << (e.evaluations == 1 ? " evaluation" : " evaluations");
  if (e.every > 0) h << ", one every " << e.every << " steps";
  if (e.tokens > 0) h << ", of " << e.tokens << " tokens each";
  h << ". The time is their mean, the first left out when there are others (it pays for the allocator's warm-up "
       "and kernel selection); the memory is the highest while evaluating. The best evaluation's checkpoint: ";
  if (e.best_checkpoint.empty())
    h << "none kept (<code>--keep-best</code> keeps it).</p>\n";
  else
    h << "<code>" << XmlEscape(e.best_checkpoint) << "</code>.</p>\n";
  return h.str();
}

}  // namespace

std::string ComparisonReportHtml(const Comparison& c) {
  const std::string title =
      "llmplan compare: " + c.plan.model.name + " on " + std::to_string(c.plan.gpus) + " x " + c.profile;
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" << XmlEscape(title)
    << "</title>\n<style>" << kStyle << "</style>\n</head>\n<body>\n";
  h << "<h1>" << XmlEscape(title) << "</h1>\n";
  h << "<p class=\"what\">" << XmlEscape(DescribePlan(c)) << "</p>\n";
  h << "<p>Run <code>" << XmlEscape(c.run_dir) << "</code> on " << XmlEscape(c.device.empty() ? "?" : c.device) << ": "
    << c.steps << " steps, " << c.timed_steps
    << " timed (warm-up steps, which pay for allocator growth, and a kernel-traced step left out). Predicted on the profile <code>"
    << XmlEscape(c.profile) << "</code>. Error = (predicted &minus; measured) / measured.</p>\n";

  h << "<h2>Summary</h2>\n" << SummaryTable(c);
  h << "<p class=\"note\">Measured times are means over the timed steps; the step time includes loading data, the "
       "device step is the latest end of any op. Exposed communication is the time a collective or copy runs while "
       "no compute op does, by the simulator's definition. Measured memory is "
    << XmlEscape(DescribeMemorySource(c.memory_source)) << ", the highest over the timed steps.</p>\n";

  h << "<h2>Time per step by class of operations</h2>\n" << TimeChart(c) << ClassTable(c);
  h << "<p class=\"note\">Device seconds per step, summed over the class's ops. The predicted split is the cost "
       "model's terms; overhead is the fixed time per kernel, the wait for the host's launches and the slowdown "
       "beside collectives. The executor times whole ops, so the measured split is not observed. compute_idle is "
       "the step's makespan minus the time the compute stream is busy.</p>\n";

  h << "<h2>Memory after each operation</h2>\n" << MemoryChart(c);
  h << "<p class=\"note\">Allocated bytes right after each op is issued, in issue order (the order the allocator "
       "sees): the predicted memory timeline and the measured step "
    << c.representative_step << ". Measured: " << XmlEscape(DescribeMemorySource(c.memory_source))
    << ". Rings mark each peak at the op during whose issue it was reached; a peak sits above the curve when "
       "that op frees part of what it allocated before it ends.</p>\n";

  const std::optional<RunEvaluation> eval = LoadRunEvaluation(c.run_dir);
  h << "<h2>Loss</h2>\n" << LossChart(c, eval);
  h << "<p class=\"note\">Training loss of every step, from metrics.jsonl.";
  if (eval)
    h << " Evaluation loss on the held-out data after the steps that evaluated; the ring marks the lowest.";
  h << "</p>\n";
  if (eval) h << EvaluationSection(*eval);
  h << "</body>\n</html>\n";
  return h.str();
}

void WriteComparisonReport(const Comparison& c, const std::string& path) {
  WriteFileAtomically(path, ComparisonReportHtml(c), "report");
}

}  // namespace llmplan
