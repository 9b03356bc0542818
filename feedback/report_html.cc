#include "feedback/report_html.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <tuple>
#include <utility>

#include "feedback/comparison_format.h"
#include "feedback/svg_chart.h"
#include "base/atomic_file.h"
#include "base/format.h"
#include "simulator/xml_escape.h"

namespace llmplan {

namespace {

constexpr const char* kPredictedColor = "#4e79a7";
constexpr const char* kMeasuredColor = "#f28e2b";
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

std::string LossChart(const Comparison& c) {
  LineChart chart;
  chart.x_label = "step";
  chart.y_label = "loss";
  chart.y_from_zero = false;
  LineSeries loss{"loss (measured)", kMeasuredColor, {}, true};
  for (const auto& [step, value] : c.losses) loss.points.emplace_back(static_cast<double>(step), value);
  chart.series = {loss};
  return LineChartSvg(chart);
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

  h << "<h2>Loss</h2>\n" << LossChart(c);
  h << "<p class=\"note\">Training loss of every step, from metrics.jsonl.</p>\n";
  h << "</body>\n</html>\n";
  return h.str();
}

void WriteComparisonReport(const Comparison& c, const std::string& path) {
  WriteFileAtomically(path, ComparisonReportHtml(c), "report");
}

}  // namespace llmplan
